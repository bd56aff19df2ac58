package repository

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/db"
)

// Direction is the paging direction.
type Direction int16

// The paging directions.
const (
	Forward  Direction = 0 // ascending sequences after the cursor
	Backward Direction = 1 // descending sequences before the cursor
)

// Page returns up to size tasks of a topic (all columns) after (Forward) or before
// (Backward) the exclusive cursor; a cursor of MinSequence / MaxSequence is unbounded.
// An unknown topic returns ErrUnknownTopic.
func (r *Repository) Page(ctx context.Context, h Handle, topic string, filter TaskFilter, cursor int64, size int, direction Direction) ([]Task, error) {
	if err := validTopic(topic); err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, invalid("page size %d is negative", size)
	}
	if cursor < 0 {
		return nil, invalid("cursor %d is negative", cursor)
	}
	state, err := filterState(filter)
	if err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, nil
	}
	size = min(size, 1<<31-1)
	var rows []db.Task
	switch direction {
	case Forward:
		rows, err = r.q.TaskPageForward(ctx, h, db.TaskPageForwardParams{
			Topic: topic, Cursor: cursor, State: state, Identifier: ptr(filter.Identifier), Reference: ptr(filter.Reference), Size: int32(size),
		})
	case Backward:
		rows, err = r.q.TaskPageBackward(ctx, h, db.TaskPageBackwardParams{
			Topic: topic, Cursor: cursor, State: state, Identifier: ptr(filter.Identifier), Reference: ptr(filter.Reference), Size: int32(size),
		})
	default:
		return nil, invalid("unknown direction %d", direction)
	}
	if err != nil {
		return nil, mapError(fmt.Sprintf("page topic %q", topic), err)
	}
	if len(rows) == 0 {
		if _, err := r.Topic(ctx, h, topic); err != nil {
			return nil, fmt.Errorf("page: %w", err)
		}
	}
	return tasksFrom(rows), nil
}

func filterState(filter TaskFilter) (*int16, error) {
	if filter.State == nil {
		return nil, nil
	}
	if !filter.State.Valid() {
		return nil, invalid("unknown state %d", *filter.State)
	}
	s := int16(*filter.State)
	return &s, nil
}

// Get returns the task with exactly this topic and sequence, or ErrUnknownTask.
func (r *Repository) Get(ctx context.Context, h Handle, topic string, sequence int64) (Task, error) {
	row, err := r.q.TaskGet(ctx, h, db.TaskGetParams{Topic: topic, Sequence: sequence})
	if errors.Is(err, pgx.ErrNoRows) {
		return Task{}, fmt.Errorf("get task %d of topic %q: %w", sequence, topic, ErrUnknownTask)
	}
	if err != nil {
		return Task{}, mapError(fmt.Sprintf("get task %d of topic %q", sequence, topic), err)
	}
	return taskFrom(row), nil
}

// Count counts tasks per topic and state within the inclusive sequence range: every task
// (Total) or only the latest task of each identifier (Recent; the state filter applies
// after choosing it). Every registered topic appears, with an empty map when nothing
// matches. topic, when not empty, limits the count to that topic (ErrUnknownTopic if it
// is not registered).
func (r *Repository) Count(ctx context.Context, h Handle, topic string, filter TaskFilter, fromSequence, toSequence int64, mode CountMode) (map[string]map[State]Count, error) {
	if topic != "" {
		if err := validTopic(topic); err != nil {
			return nil, err
		}
	}
	if err := validRange(fromSequence, toSequence); err != nil {
		return nil, err
	}
	state, err := filterState(filter)
	if err != nil {
		return nil, err
	}
	type row struct {
		topic          string
		state          int16
		count, highest int64
	}
	var rows []row
	switch mode {
	case Total:
		got, err := r.q.TaskCountTotal(ctx, h, db.TaskCountTotalParams{
			FromSequence: fromSequence, ToSequence: toSequence, State: state,
			Identifier: ptr(filter.Identifier), Reference: ptr(filter.Reference), Topic: ptr(topic),
		})
		if err != nil {
			return nil, mapError("count", err)
		}
		for _, g := range got {
			rows = append(rows, row{g.Topic, g.State, g.Count, g.Highest})
		}
	case Recent:
		got, err := r.q.TaskCountRecent(ctx, h, db.TaskCountRecentParams{
			FromSequence: fromSequence, ToSequence: toSequence, State: state,
			Identifier: ptr(filter.Identifier), Reference: ptr(filter.Reference), Topic: ptr(topic),
		})
		if err != nil {
			return nil, mapError("count", err)
		}
		for _, g := range got {
			rows = append(rows, row{g.Topic, g.State, g.Count, g.Highest})
		}
	default:
		return nil, invalid("unknown count mode %d", mode)
	}
	out := make(map[string]map[State]Count)
	for _, g := range rows {
		if out[g.topic] == nil {
			out[g.topic] = make(map[State]Count)
		}
		if g.state >= 0 {
			out[g.topic][State(g.state)] = Count{Count: g.count, Highest: g.highest}
		}
	}
	if topic != "" && len(out) == 0 {
		return nil, unknownTopic("count", topic)
	}
	return out, nil
}

// Results counts tasks completed within [from, to] per topic and result.
func (r *Repository) Results(ctx context.Context, h Handle, from, to time.Time) (map[string]map[Result]int64, error) {
	if from.After(to) {
		return nil, invalid("time range [%v, %v] is empty: from is after to", from, to)
	}
	rows, err := r.q.TaskResults(ctx, h, db.TaskResultsParams{FromTime: from, ToTime: to})
	if err != nil {
		return nil, mapError("results", err)
	}
	out := make(map[string]map[Result]int64)
	for _, row := range rows {
		if out[row.Topic] == nil {
			out[row.Topic] = make(map[Result]int64)
		}
		out[row.Topic][Result(row.Result)] = row.Count
	}
	return out, nil
}

// Resolve translates a time (compared with creation times set by the database clock)
// into a sequence: the first sequence created at or after it (MaxSequence when none), or
// with preceding the last created at or before it (MinSequence when none).
func (r *Repository) Resolve(ctx context.Context, h Handle, at time.Time, preceding bool) (int64, error) {
	var (
		seq int64
		err error
	)
	if preceding {
		seq, err = r.q.TaskResolvePreceding(ctx, h, at)
	} else {
		seq, err = r.q.TaskResolveFollowing(ctx, h, at)
	}
	if err != nil {
		return 0, mapError("resolve", err)
	}
	return seq, nil
}

// Purge deletes finished tasks of a topic within the inclusive sequence range and returns
// how many: every state from FAILED to REDUNDANT, or only state when given (which must be
// one of those). ACTIVE, READY and EXPIRED tasks are never purged.
func (r *Repository) Purge(ctx context.Context, h Handle, topic string, fromSequence, toSequence int64, state *State) (int64, error) {
	if err := validTopic(topic); err != nil {
		return 0, err
	}
	if err := validRange(fromSequence, toSequence); err != nil {
		return 0, err
	}
	var s *int16
	if state != nil {
		if !state.Finished() {
			return 0, invalid("purge state %v: only FAILED..REDUNDANT can be purged", *state)
		}
		v := int16(*state)
		s = &v
	}
	n, err := r.q.TaskPurge(ctx, h, db.TaskPurgeParams{Topic: topic, FromSequence: fromSequence, ToSequence: toSequence, State: s})
	if err != nil {
		return 0, mapError(fmt.Sprintf("purge topic %q", topic), err)
	}
	return n, nil
}

// PurgeAll deletes every task of a topic, whatever its state, and returns how many there
// were. A shared topic's tasks are deleted as Destroy deletes them (in batches on a pool,
// in one statement inside the caller's transaction): no other topic waits. A dedicated
// topic's table is truncated, which locks it (its own pushes and polls wait) until the
// caller commits.
func (r *Repository) PurgeAll(ctx context.Context, h Handle, topic string) (int64, error) {
	if err := validTopic(topic); err != nil {
		return 0, err
	}
	batched, err := r.deleteInBatches(ctx, h, topic)
	if err != nil {
		return 0, mapError(fmt.Sprintf("purge all of topic %q", topic), err)
	}
	n, err := retryLocked(ctx, h, func() (int64, error) { return r.q.TopicTruncate(ctx, h, topic) })
	if err != nil {
		return 0, mapError(fmt.Sprintf("purge all of topic %q", topic), err)
	}
	if n < 0 {
		return 0, unknownTopic("purge all of", topic)
	}
	return batched + n, nil
}

// PurgeRetention deletes up to size finished tasks whose completion is older than their
// topic's retention, and returns how many; topics without retention keep everything.
func (r *Repository) PurgeRetention(ctx context.Context, h Handle, size int) (int64, error) {
	if size <= 0 {
		return 0, invalid("size %d is not positive", size)
	}
	n, err := r.q.TaskPurgeRetention(ctx, h, int32(min(size, 1<<31-1)))
	if err != nil {
		return 0, mapError("purge by retention", err)
	}
	return n, nil
}

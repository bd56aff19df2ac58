package repository

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/db"
)

// Poll leases up to size READY tasks whose not-before time has passed, as ONE statement
// (SELECT … FOR UPDATE SKIP LOCKED): they become ACTIVE under this owner with their
// attempt counted. Tasks come in poll order: priority (lower first), then sequence
// ascending (FIFO) or descending (LIFO). The condition excludes tasks by the other tasks
// of their identifier in this topic (see Condition). Size 0 returns nothing; an unknown
// topic returns ErrUnknownTopic.
func (r *Repository) Poll(ctx context.Context, h Handle, topic string, order Order, condition Condition, size int) ([]Task, error) {
	return r.PollFrom(ctx, h, topic, order, condition, size, Position{})
}

// Position is a place in a topic's FIFO poll order: tasks come by priority, then
// sequence. The zero Position is the head of the topic.
type Position struct {
	// Priority is the priority of the task at the position.
	Priority int16
	// Sequence is the sequence of the task at the position.
	Sequence int64
}

// IsZero reports whether p is the head of the topic.
func (p Position) IsZero() bool { return p == Position{} }

// Compare orders positions as a FIFO poll does: -1 when p comes before q.
func (p Position) Compare(q Position) int {
	if c := cmp.Compare(p.Priority, q.Priority); c != 0 {
		return c
	}
	return cmp.Compare(p.Sequence, q.Sequence)
}

// PositionOf is where t stands in its topic's FIFO poll order.
func PositionOf(t Task) Position { return Position{Priority: t.Priority, Sequence: t.Sequence} }

// PollFrom is Poll starting at from: a FIFO poll without a condition considers only the
// tasks at or after from in poll order; the zero Position (and LIFO, and any condition)
// polls from the head. A processor polling a busy topic starts where its previous poll
// found work: everything before was leased, delayed or never READY, and a poll from the
// head would read it all again, including the row versions a long-held snapshot keeps
// (docs/processor.md, "A long-held snapshot"). Tasks that become READY before from are
// the caller's to look for (Notification.From, Due.At, FirstReady).
func (r *Repository) PollFrom(ctx context.Context, h Handle, topic string, order Order, condition Condition, size int, from Position) ([]Task, error) {
	if size == 0 {
		return nil, nil
	}
	params, err := r.pollParams(topic, order, condition, size, from)
	if err != nil {
		return nil, err
	}
	rows, err := either(ctx, r, h, func() ([]db.TaskPollRow, error) { return r.pollCitus(ctx, h, params) },
		func() ([]db.TaskPollRow, error) { return r.pollPlain(ctx, h, params) })
	if err != nil {
		return nil, mapError(fmt.Sprintf("poll topic %q", topic), err)
	}
	if len(rows) == 0 {
		// An empty poll is the only moment an unknown topic can hide: check it then.
		if _, err := r.Topic(ctx, h, topic); err != nil {
			return nil, fmt.Errorf("poll: %w", err)
		}
		return nil, nil
	}
	return polledTasks(rows, order), nil
}

// pollPlain is TaskPoll on plain PostgreSQL, through TaskPollLimited for a topic this
// Repository last saw limited (its polls' rows, Topic, Configure, UpdateSettings:
// noteLimited), or for a poll under a condition: a limited topic's tasks, and a
// conditional poll's (schema 61), are chosen under the topic's lock, which TaskPoll's
// single statement takes after its snapshot, so that a task committed while the poll
// waited for its turn would be chosen (charged) and not leased. The rows of either statement say whether the topic is
// limited now.
//
// On a schema before 54, which lacks task_poll (a process newer than its database's
// schema, against docs/cli.md's order of an upgrade), the first such poll fails inside
// a transaction and goes on as TaskPoll outside one; the Repository polls every topic
// with TaskPoll for the next taskPollRetry, then tries task_poll again (the schema
// migrated meanwhile).
func (r *Repository) pollPlain(ctx context.Context, h Handle, arg db.TaskPollParams) ([]db.TaskPollRow, error) {
	if _, limited := r.limited.Load(arg.Topic); (limited || arg.Condition != int16(None)) && r.timeNow().UnixNano() >= r.noTaskPollUntil.Load() {
		found, err := r.q.TaskPollLimited(ctx, h, db.TaskPollLimitedParams{
			Topic: arg.Topic, Owner: arg.Owner, Lifo: arg.Lifo, Condition: arg.Condition, Size: arg.Size,
			FromPriority: arg.FromPriority, FromSequence: arg.FromSequence,
		})
		if err == nil {
			if r.noTaskPollUntil.Load() != 0 {
				r.noTaskPollUntil.Store(0) // the schema has it now
			}
			rows := make([]db.TaskPollRow, len(found))
			for i, row := range found {
				rows[i] = db.TaskPollRow(row)
			}
			return r.notedPoll(arg.Topic, rows), nil
		}
		if SQLState(err) != sqlstateUndefinedFunction || !strings.Contains(err.Error(), "task_poll(") {
			return nil, err
		}
		r.noTaskPollUntil.Store(r.timeNow().Add(taskPollRetry).UnixNano())
		if !autocommit(h) {
			return nil, err
		}
	}
	rows, err := r.q.TaskPoll(ctx, h, arg)
	if err != nil {
		return nil, err
	}
	return r.notedPoll(arg.Topic, rows), nil
}

// taskPollRetry is how long a Repository that found the schema without task_poll polls
// limited topics with TaskPoll before it tries task_poll again (pollPlain).
const taskPollRetry = time.Minute

// notedPoll records whether a poll's rows say topic is limited, and returns them.
func (r *Repository) notedPoll(topic string, rows []db.TaskPollRow) []db.TaskPollRow {
	if len(rows) > 0 {
		r.noteLimited(topic, rows[0].Limited)
	}
	return rows
}

// noteLimited records whether topic is limited, for its next polls (pollPlain). The
// map is written only when that changes: every poll of every topic tells it.
func (r *Repository) noteLimited(topic string, limited bool) {
	if _, was := r.limited.Load(topic); was == limited {
		return
	}
	if limited {
		r.limited.Store(topic, struct{}{})
	} else {
		r.limited.Delete(topic)
	}
}

// pollParams checks a poll's arguments and returns its statement's parameters.
func (r *Repository) pollParams(topic string, order Order, condition Condition, size int, from Position) (db.TaskPollParams, error) {
	if err := validTopic(topic); err != nil {
		return db.TaskPollParams{}, err
	}
	if size < 0 {
		return db.TaskPollParams{}, invalid("poll size %d is negative", size)
	}
	if !condition.Valid() {
		return db.TaskPollParams{}, invalid("unknown condition %d", condition)
	}
	if order != FIFO && order != LIFO {
		return db.TaskPollParams{}, invalid("unknown order %d", order)
	}
	size = min(size, 1<<31-1)
	params := db.TaskPollParams{
		Owner: r.owner, Topic: topic, Lifo: order == LIFO, Condition: int16(condition), Size: int32(size),
	}
	if !from.IsZero() {
		params.FromPriority, params.FromSequence = &from.Priority, &from.Sequence
	}
	return params, nil
}

// polledTasks converts the rows of a poll (at least one) to tasks in poll order.
func polledTasks(rows []db.TaskPollRow, order Order) []Task {
	// The statement returns rows in the order it updated them (by address): put them in
	// poll order by sorting their positions, not the rows themselves (a few hundred
	// bytes each, moved at every swap).
	at := make([]int32, len(rows))
	for i := range at {
		at[i] = int32(i)
	}
	slices.SortFunc(at, func(i, j int32) int {
		a, b := &rows[i], &rows[j]
		if c := cmp.Compare(a.Priority, b.Priority); c != 0 {
			return c
		}
		if order == LIFO {
			return cmp.Compare(b.Sequence, a.Sequence)
		}
		return cmp.Compare(a.Sequence, b.Sequence)
	})
	tasks := make([]Task, len(rows))
	for k, i := range at {
		row := &rows[i]
		tasks[k] = taskFrom(db.Task{
			Topic: row.Topic, Sequence: row.Sequence, Identifier: row.Identifier, State: row.State,
			Descent: row.Descent, Owner: row.Owner, Created: row.Created, Completed: row.Completed,
			Input: row.Input, Output: row.Output, Reference: row.Reference, Priority: row.Priority,
			NotBefore: row.NotBefore, Attempt: row.Attempt, Returned: row.Returned, Errors: row.Errors,
			Cancelled: row.Cancelled, ConcurrencyKey: row.ConcurrencyKey,
		})
	}
	if rows[0].Keyed {
		tasks = inTurns(tasks)
	}
	return tasks
}

// inTurns orders the tasks of a topic polled key by key (TopicSettings.KeyConcurrency,
// Fair) as the poll took them: within each priority, one task of each concurrency key in
// turn, keys in the order of their first task; each key's tasks keep their order. tasks
// is in poll order.
func inTurns(tasks []Task) []Task {
	out := make([]Task, 0, len(tasks))
	for start := 0; start < len(tasks); {
		end := start
		for end < len(tasks) && tasks[end].Priority == tasks[start].Priority {
			end++
		}
		var keys []string
		byKey := map[string][]Task{}
		for _, t := range tasks[start:end] {
			if _, seen := byKey[t.ConcurrencyKey]; !seen {
				keys = append(keys, t.ConcurrencyKey)
			}
			byKey[t.ConcurrencyKey] = append(byKey[t.ConcurrencyKey], t)
		}
		for len(out) < end {
			for _, k := range keys {
				if q := byKey[k]; len(q) > 0 {
					out = append(out, q[0])
					byKey[k] = q[1:]
				}
			}
		}
		start = end
	}
	return out
}

// Due is when and where the next delayed task of a topic falls due (NextDue).
type Due struct {
	// Delay is how long until it falls due, by the database's clock; zero when it is due.
	Delay time.Duration
	// At is where it stands in the topic's FIFO poll order.
	At Position
}

// NextDue reports when the earliest READY task of topic that is delayed falls due, by the
// database's clock (ok false when there is none), and where it stands in poll order: due
// at once (Delay zero) when it fell due less than seen ago. It is one index probe. A
// processor makes it after a poll found nothing, seen being how long ago its last poll
// from the head of the topic began, to arm a timer, so that a delayed push, a retry after
// a backoff or a snooze starts when it falls due rather than at the next poll. Tasks due
// before then were there for that poll to lease: one it could not (held by a poll
// condition) is not reported again and again.
func (r *Repository) NextDue(ctx context.Context, h Handle, topic string, seen time.Duration) (due Due, ok bool, err error) {
	if err := validTopic(topic); err != nil {
		return Due{}, false, err
	}
	if seen < 0 {
		return Due{}, false, invalid("next due task of topic %q: seen %v is negative", topic, seen)
	}
	row, err := r.q.TaskNextDue(ctx, h, db.TaskNextDueParams{Topic: topic, SeenMs: durationMs(seen)})
	if errors.Is(err, pgx.ErrNoRows) {
		return Due{}, false, nil
	}
	if err != nil {
		return Due{}, false, mapError(fmt.Sprintf("next due task of topic %q", topic), err)
	}
	return Due{
		Delay: time.Duration(min(max(row.InMs, 0), int64(maxDelay/time.Millisecond))) * time.Millisecond,
		At:    Position{Priority: row.Priority, Sequence: row.Sequence},
	}, true, nil
}

// RateWait reports how long until the rate limit of topic lets one more task start, when
// it holds back due READY work now (ok false otherwise: no rate limit, a token left, or
// nothing due). A processor whose poll came back empty polls again then.
func (r *Repository) RateWait(ctx context.Context, h Handle, topic string) (wait time.Duration, ok bool, err error) {
	if err := validTopic(topic); err != nil {
		return 0, false, err
	}
	ms, err := r.q.TaskRateWait(ctx, h, topic)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, mapError(fmt.Sprintf("rate wait of topic %q", topic), err)
	}
	return time.Duration(min(max(ms, 0), int64(maxDelay/time.Millisecond))) * time.Millisecond, true, nil
}

// FirstReady returns where the first READY task of topic that is due stands in FIFO poll
// order (ok false when there is none), without locking or leasing it. A processor that
// polls a busy topic from a position (PollFrom) checks with it, now and then and off its
// poll loop, that no work became READY before that position without a notification
// saying so. It reads the topic's READY index from its head, over whatever entries a
// long-held snapshot keeps there.
func (r *Repository) FirstReady(ctx context.Context, h Handle, topic string) (at Position, ok bool, err error) {
	if err := validTopic(topic); err != nil {
		return Position{}, false, err
	}
	row, err := r.q.TaskFirstReady(ctx, h, topic)
	if errors.Is(err, pgx.ErrNoRows) {
		return Position{}, false, nil
	}
	if err != nil {
		return Position{}, false, mapError(fmt.Sprintf("first ready task of topic %q", topic), err)
	}
	return Position{Priority: row.Priority, Sequence: row.Sequence}, true, nil
}

// Leased returns the tasks of topic that are ACTIVE under this repository's owner, in
// sequence order, ready to be decided on (Task.Decide) like the tasks of a poll. A
// processor calls it after a poll whose outcome is Uncertain, to find leases the poll
// committed but whose reply was lost: the tasks among them it does not know of are its
// own, and nobody else will run them while its owner heart-beats.
func (r *Repository) Leased(ctx context.Context, h Handle, topic string) ([]Task, error) {
	if err := validTopic(topic); err != nil {
		return nil, err
	}
	rows, err := r.q.TaskLeased(ctx, h, db.TaskLeasedParams{Topic: topic, Owner: r.owner})
	if err != nil {
		return nil, mapError(fmt.Sprintf("leased tasks of topic %q", topic), err)
	}
	return tasksFrom(rows), nil
}

// snoozeResult is the SQL code of a snooze decision in TaskComplete. A FAILURE without
// retry (Decision.Final) is sent as a FAILURE with finalDelayMs, which task_complete
// takes for one since migration 000050 and an older schema for a FAILURE (retried while
// the topic grants attempts): its own code, 5 (000049), was read by an older schema as
// state 8, REDUNDANT.
const (
	snoozeResult = 4
	finalDelayMs = -1
)

// Complete records decisions for leased tasks as ONE statement. Each task
// takes the state of its result, its message as output and now() as completion time; a
// FAILURE with attempts left goes back to READY after the topic's backoff, its error kept
// in the history, unless it is Final (FAILED at once; a FAILURE as any other on a schema
// before migration 000050); a snooze goes back to READY after its delay without using an attempt;
// a cancelled task ends FAILED "cancelled". Only tasks ACTIVE under this owner in the
// completion's attempt qualify: otherwise NOTHING is written and a *TaskError names the
// offending tasks (ErrUnknownTask, ErrWrongState or ErrNotOwned). It returns the tasks
// as stored; when every completion comes from Task.Decide, their identifier, input and
// reference (which no completion changes) are taken from the tasks Decide was called on
// instead of being read back, so decide on the tasks as Poll returned them.
func (r *Repository) Complete(ctx context.Context, h Handle, topic string, completions ...Completion) ([]Task, error) {
	if len(completions) == 0 {
		return nil, nil
	}
	arg, err := r.completeParams(topic, completions)
	if err != nil {
		return nil, err
	}
	rows, err := allOrNothing(ctx, h, func(h Handle) ([]db.TaskCompleteRow, error) {
		return either(ctx, r, h, func() ([]db.TaskCompleteRow, error) { return r.completeCitus(ctx, h, arg) },
			func() ([]db.TaskCompleteRow, error) { return r.q.TaskComplete(ctx, h, arg) })
	})
	if errors.Is(err, errRefused) {
		return nil, r.explainLeases(ctx, h, topic, completions)
	}
	if err != nil {
		return nil, mapError(fmt.Sprintf("complete topic %q", topic), err)
	}
	if len(rows) != len(completions) {
		// No decision qualified: task_all_or_nothing filters the updated rows, so with
		// none it never runs; nothing was written.
		return nil, r.explainLeases(ctx, h, topic, completions)
	}
	return r.completedTasks(topic, completions, rows, arg.Lean), nil
}

// CompleteAndPoll records decisions for leased tasks as Complete does and then, when
// every one qualified, leases up to size tasks of topic as PollFrom does, as ONE
// statement (one round trip, one commit): the capacity the decisions free under a
// concurrency limit is taken again at the same commit, and no poll in between finds the
// limit reached. It returns the completed tasks and the leased ones, in poll order.
// When a decision does not qualify, nothing is written and nothing leased, and the error
// is Complete's. On a distributed database (Citus) the two are two statements, in one
// transaction: h's, or one of their own when h is a pool. Without completions it is
// PollFrom.
func (r *Repository) CompleteAndPoll(ctx context.Context, h Handle, topic string, completions []Completion,
	order Order, condition Condition, size int, from Position) (completed, leased []Task, err error) {
	if len(completions) == 0 {
		leased, err := r.PollFrom(ctx, h, topic, order, condition, size, from)
		return nil, leased, err
	}
	distributed, err := r.onCitus(ctx, h)
	if err != nil {
		return nil, nil, mapError(fmt.Sprintf("complete and poll topic %q", topic), err)
	}
	if distributed {
		err := Atomically(ctx, h, func(tx pgx.Tx) error {
			var err error
			if completed, err = r.Complete(ctx, tx, topic, completions...); err != nil {
				return err
			}
			leased, err = r.PollFrom(ctx, tx, topic, order, condition, size, from)
			return err
		})
		if err != nil {
			return nil, nil, err
		}
		return completed, leased, nil
	}
	arg, err := r.completeParams(topic, completions)
	if err != nil {
		return nil, nil, err
	}
	poll, err := r.pollParams(topic, order, condition, size, from)
	if err != nil {
		return nil, nil, err
	}
	rows, err := allOrNothing(ctx, h, func(h Handle) ([]db.TaskCompletePollRow, error) {
		return r.q.TaskCompletePoll(ctx, h, db.TaskCompletePollParams{
			Lean: arg.Lean, Topic: topic, Owner: r.owner, Sequences: arg.Sequences, Attempts: arg.Attempts,
			Results: arg.Results, Outputs: arg.Outputs, DelaysMs: arg.DelaysMs,
			Lifo: poll.Lifo, Condition: poll.Condition, Size: poll.Size,
			FromPriority: poll.FromPriority, FromSequence: poll.FromSequence,
		})
	})
	if errors.Is(err, errRefused) {
		return nil, nil, r.explainLeases(ctx, h, topic, completions)
	}
	if err != nil {
		return nil, nil, mapError(fmt.Sprintf("complete and poll topic %q", topic), err)
	}
	// completed rows first, never ACTIVE; then the leased ones
	n := 0
	for n < len(rows) && rows[n].State != int16(Active) {
		n++
	}
	if n != len(completions) {
		// No decision qualified (or the topic is unknown): nothing was written or leased.
		return nil, nil, r.explainLeases(ctx, h, topic, completions)
	}
	done := make([]db.TaskCompleteRow, n)
	for i, row := range rows[:n] {
		done[i] = db.TaskCompleteRow{
			Topic: row.Topic, Sequence: row.Sequence, Identifier: row.Identifier, State: row.State,
			Descent: row.Descent, Owner: row.Owner, Created: row.Created, Completed: row.Completed,
			Input: row.Input, Output: row.Output, Reference: row.Reference, Priority: row.Priority,
			NotBefore: row.NotBefore, Attempt: row.Attempt, Returned: row.Returned, Errors: row.Errors,
			Cancelled: row.Cancelled,
		}
	}
	completed = r.completedTasks(topic, completions, done, arg.Lean)
	if n == len(rows) {
		return completed, nil, nil
	}
	polled := make([]db.TaskPollRow, len(rows)-n)
	for i, row := range rows[n:] {
		// leased rows are whole: their owner, input and reference are the columns'
		owner, _ := row.Owner.(string)
		polled[i] = db.TaskPollRow{
			Topic: row.Topic, Sequence: row.Sequence, Identifier: row.Identifier, State: row.State,
			Descent: row.Descent, Owner: &owner, Created: row.Created, Completed: row.Completed,
			Input: strOrNil(row.Input), Output: row.Output, Reference: strOrNil(row.Reference),
			Priority: row.Priority, NotBefore: row.NotBefore, Attempt: row.Attempt, Returned: row.Returned,
			Errors: row.Errors, Cancelled: row.Cancelled, ConcurrencyKey: row.ConcurrencyKey, Keyed: row.Keyed,
		}
	}
	return completed, polledTasks(polled, order), nil
}

// strOrNil is a column sqlc types interface{} (a CASE that may be NULL) as *string.
func strOrNil(v any) *string {
	if s, ok := v.(string); ok {
		return &s
	}
	return nil
}

// storableText is s as a PostgreSQL text holds it: each NUL byte, and each run of bytes
// that are not UTF-8, replaced by U+FFFD. A decision's message is often an error's text, which may
// quote a binary reply: refusing it would fail the task for its message.
func storableText(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// completeParams checks completions (at least one) and returns their statement's
// parameters.
func (r *Repository) completeParams(topic string, completions []Completion) (db.TaskCompleteParams, error) {
	if err := validTopic(topic); err != nil {
		return db.TaskCompleteParams{}, err
	}
	arg := db.TaskCompleteParams{
		Topic:     topic,
		Owner:     r.owner,
		Sequences: make([]int64, len(completions)),
		Attempts:  make([]int32, len(completions)),
		Results:   make([]int16, len(completions)),
		Outputs:   make([]string, len(completions)),
		DelaysMs:  make([]int64, len(completions)),
	}
	for i, c := range completions {
		d := c.Decision
		arg.Sequences[i] = c.Sequence
		arg.Attempts[i] = c.Attempt
		arg.Outputs[i] = storableText(d.Message)
		if err := d.Validate(); err != nil {
			return db.TaskCompleteParams{}, fmt.Errorf("complete task %d: %w", c.Sequence, err)
		}
		if d.Snooze {
			arg.Results[i] = snoozeResult
			arg.DelaysMs[i] = d.Delay.Milliseconds()
		} else if d.Final {
			arg.Results[i] = int16(Failure)
			arg.DelaysMs[i] = finalDelayMs
		} else {
			arg.Results[i] = int16(d.Result)
		}
	}
	if err := validSequences(arg.Sequences); err != nil {
		return db.TaskCompleteParams{}, fmt.Errorf("complete topic %q: %w", topic, err)
	}
	arg.Lean = true
	for _, c := range completions {
		arg.Lean = arg.Lean && c.leased
	}
	return arg, nil
}

// completedTasks converts TaskComplete's rows. Lean rows lack the columns no completion
// changes; they are taken from the completions (which Task.Decide filled from the lease)
// and from the fence: the topic, and the owner, which is this repository's.
func (r *Repository) completedTasks(topic string, completions []Completion, rows []db.TaskCompleteRow, lean bool) []Task {
	// the completion of each row: at the same position when the statement returned the
	// rows in the completions' order (its plan usually follows the sequences, and batches
	// are polled in that order), otherwise found by sequence
	var bySequence map[int64]*Completion
	completion := func(i int, sequence int64) *Completion {
		if i < len(completions) && completions[i].Sequence == sequence {
			return &completions[i]
		}
		if bySequence == nil {
			bySequence = make(map[int64]*Completion, len(completions))
			for k := range completions {
				bySequence[completions[k].Sequence] = &completions[k]
			}
		}
		return bySequence[sequence]
	}
	tasks := make([]Task, len(rows))
	for i, row := range rows {
		t := Task{
			Topic: row.Topic, Sequence: row.Sequence, Identifier: row.Identifier,
			State: State(row.State), Descent: State(row.Descent), Created: row.Created,
			Completed: timeOf(row.Completed), Output: str(row.Output), Priority: row.Priority,
			NotBefore: timeOf(row.NotBefore), Attempt: row.Attempt, Returned: row.Returned,
			Errors: row.Errors, Cancelled: row.Cancelled,
		}
		// sqlc types these columns interface{} (they are NULL in lean rows)
		t.Owner, _ = row.Owner.(string)
		t.Input, _ = row.Input.(string)
		t.Reference, _ = row.Reference.(string)
		if lean {
			if c := completion(i, row.Sequence); c != nil {
				t.Topic, t.Identifier, t.Owner = topic, c.identifier, r.owner
				t.Input, t.Reference = c.input, c.reference
			}
		}
		tasks[i] = t
	}
	return tasks
}

// errRefused marks a statement that task_all_or_nothing undid (SQLSTATE PT005).
var errRefused = errors.New("refused: not every task qualified")

// allOrNothing runs a statement that raises PT005 when not every task of its batch
// qualifies. Outside a transaction the failed statement has already undone itself; inside
// the caller's transaction it runs under a savepoint, so that a refusal leaves that
// transaction usable. A refusal returns errRefused, other errors unchanged.
func allOrNothing[R any](ctx context.Context, h Handle, run func(Handle) ([]R, error)) ([]R, error) {
	if autocommit(h) {
		rows, err := run(h)
		return rows, refused(err)
	}
	sp, err := begin(ctx, h)
	if err != nil {
		return nil, err
	}
	rows, err := run(sp)
	if err != nil {
		if rerr := sp.Rollback(ctx); rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		return nil, refused(err)
	}
	return rows, sp.Commit(ctx)
}

func refused(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == sqlstateRaiseRefused {
		return errRefused
	}
	return err
}

// begin opens a transaction of h: a savepoint when h is a transaction, or a connection
// inside a transaction block its caller opened in SQL (BEGIN), a type of the caller's
// around one included (connStatus: beginSavepoint); a transaction of its own otherwise,
// READ COMMITTED whatever the database's default_transaction_isolation: its statements
// rely on each seeing what committed before it began (a junction after its locks). On
// a connection in a block pgx's Begin sends BEGIN, which PostgreSQL answers with a
// warning, opening nothing, and the COMMIT or ROLLBACK that ends it would end the
// caller's transaction.
func begin(ctx context.Context, h Handle) (pgx.Tx, error) {
	status, isConn := connStatus(h)
	if isConn && status != 'I' {
		// pgx closes a connection whose statement fails for a reason other than the
		// server's (a context done among them): the caller's, in the middle of its
		// transaction
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return beginSavepoint(ctx, h)
	}
	readCommitted := pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
	switch c := h.(type) {
	case *pgxpool.Pool:
		return c.BeginTx(ctx, readCommitted)
	case *pgxpool.Conn:
		return c.BeginTx(ctx, readCommitted)
	case *pgx.Conn:
		return c.BeginTx(ctx, readCommitted)
	}
	// a Handle of the caller's own type (a wrapper that traces, say) begins with its
	// own Begin, which it may have overridden; around a connection outside a block,
	// that begins a transaction, made READ COMMITTED here (around a pool, or a type
	// that tells nothing, it may be a savepoint, where that would fail). PostgreSQL
	// refuses to change the level once the transaction has run a query (a Begin that
	// sets a tenant for row-level security, under a default level other than READ
	// COMMITTED): said so.
	tx, err := h.Begin(ctx)
	if err != nil || !isConn {
		return tx, err
	}
	if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"); err != nil {
		return nil, errors.Join(fmt.Errorf("make the transaction %T began READ COMMITTED: %w", h, err), tx.Rollback(ctx))
	}
	return tx, nil
}

// ownTransaction reports whether a statement on h may commit alone, so that an
// operation of several statements needs a transaction of its own: a pool, a connection
// outside a transaction block, or a Handle of the caller's own type around either (a
// wrapper that traces, say; connStatus). Not a pgx.Tx, nor a connection in the caller's
// block, also seen through a type around it.
func ownTransaction(h Handle) bool {
	if _, ok := h.(pgx.Tx); ok {
		return false
	}
	status, isConn := connStatus(h)
	return !isConn || status == 'I'
}

// autocommit reports whether a statement on h runs in a transaction of its own: a pool,
// or a connection outside a transaction block (connStatus: a type of the caller's
// around one too).
func autocommit(h Handle) bool {
	if _, ok := h.(*pgxpool.Pool); ok {
		return true
	}
	status, isConn := connStatus(h)
	return isConn && status == 'I'
}

// connStatus is the transaction status of the connection h runs its statements on
// (pgconn's TxStatus: 'I' outside a transaction block, 'T' in one, 'E' in a failed one),
// when h is one: a *pgx.Conn, a *pgxpool.Conn, or a type of the caller's around one (a
// wrapper that traces, say) that tells it by a method PgConn() *pgconn.PgConn (a type
// embedding a *pgx.Conn has it) or Conn() *pgx.Conn. Not for a pool, a pgx.Tx (whose
// Begin opens a savepoint) or a type that does not tell.
func connStatus(h Handle) (status byte, isConn bool) {
	switch c := h.(type) {
	case *pgxpool.Pool, pgx.Tx:
		return 0, false
	case *pgxpool.Conn:
		return c.Conn().PgConn().TxStatus(), true
	case interface{ PgConn() *pgconn.PgConn }:
		return c.PgConn().TxStatus(), true
	case interface{ Conn() *pgx.Conn }:
		return c.Conn().PgConn().TxStatus(), true
	}
	return 0, false
}

// explainLeases builds the *TaskError for a refused completion by reading the tasks'
// current lease state.
func (r *Repository) explainLeases(ctx context.Context, h Handle, topic string, completions []Completion) error {
	seqs := make([]int64, len(completions))
	attempts := make(map[int64]int32, len(completions))
	for i, c := range completions {
		seqs[i] = c.Sequence
		attempts[c.Sequence] = c.Attempt
	}
	return r.explain(ctx, h, "complete", topic, seqs, ErrNotOwned, func(seq int64, row db.TaskLeasesRow) TaskProblem {
		switch {
		case State(row.State) != Active:
			return TaskProblem{Err: ErrWrongState, Detail: fmt.Sprintf("it is %v", State(row.State))}
		case str(row.Owner) != r.owner:
			return TaskProblem{Err: ErrNotOwned, Detail: fmt.Sprintf("leased by %s", str(row.Owner))}
		case row.Attempt != attempts[seq]:
			return TaskProblem{Err: ErrNotOwned, Detail: fmt.Sprintf("completion names attempt %d, the lease is attempt %d", attempts[seq], row.Attempt)}
		}
		return TaskProblem{}
	})
}

// explainStates builds the *TaskError of an all-or-nothing operation refused because
// some tasks are unknown or in a state it does not accept.
func (r *Repository) explainStates(ctx context.Context, h Handle, op, topic string, sequences []int64, ok func(State) bool, want string) error {
	return r.explain(ctx, h, op, topic, sequences, ErrWrongState, func(_ int64, row db.TaskLeasesRow) TaskProblem {
		if state := State(row.State); !ok(state) {
			return TaskProblem{Err: ErrWrongState, Detail: fmt.Sprintf("it is %v, want %s", state, want)}
		}
		return TaskProblem{}
	})
}

// explain re-reads the tasks of a refused all-or-nothing batch and names what is wrong
// with each: unknown, or the problem check finds in its current row (Err nil: none). When every task passes
// the re-read, a concurrent change raced the operation and all are reported with raced.
func (r *Repository) explain(ctx context.Context, h Handle, op, topic string, sequences []int64, raced error,
	check func(sequence int64, row db.TaskLeasesRow) TaskProblem) error {
	if _, err := r.Topic(ctx, h, topic); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	rows, err := r.q.TaskLeases(ctx, h, db.TaskLeasesParams{Topic: topic, Sequences: sequences})
	if err != nil {
		return mapError(fmt.Sprintf("%s in topic %q: explain refusal", op, topic), err)
	}
	current := make(map[int64]db.TaskLeasesRow, len(rows))
	for _, row := range rows {
		current[row.Sequence] = row
	}
	te := &TaskError{Op: op, Topic: topic}
	for _, s := range sequences {
		row, found := current[s]
		if !found {
			te.Problems = append(te.Problems, TaskProblem{Sequence: s, Err: ErrUnknownTask})
			continue
		}
		if p := check(s, row); p.Err != nil {
			p.Sequence, p.State, p.Attempt = s, State(row.State), row.Attempt
			te.Problems = append(te.Problems, p)
		}
	}
	if len(te.Problems) == 0 {
		for _, s := range sequences {
			te.Problems = append(te.Problems, TaskProblem{Sequence: s, Err: raced, Detail: "changed concurrently",
				State: State(current[s].State), Attempt: current[s].Attempt})
		}
	}
	return te
}

// Expire takes back the leases of OTHER owners whose heartbeat is older than
// now − timeout (or whose owner row is gone): their ACTIVE tasks become EXPIRED, or READY
// after backoff when the topic's retry policy grants another attempt; cancelled ones end
// FAILED. Topics that received READY work are notified. A negative timeout is an error.
// With an error, the expiries already committed come back with it (on Citus a topic's
// expiry commits on its own, before the next topic's fails; in a caller's transaction,
// a savepoint of its own).
func (r *Repository) Expire(ctx context.Context, h Handle, timeout time.Duration) ([]Expiry, error) {
	return r.expire(ctx, h, timeout, true)
}

// ExpireStale is Expire for owners that are registered: when no other owner's heartbeat
// is older than now − timeout it returns at once, having read task_owner only (neither
// the ACTIVE tasks, a scan that costs milliseconds under load, nor the catalogs of every
// task table, which planning the expiry locks). The tasks of owners whose row is gone,
// which only a deleted owner row or a purge racing a poll leaves behind, wait for Expire.
func (r *Repository) ExpireStale(ctx context.Context, h Handle, timeout time.Duration) ([]Expiry, error) {
	if err := validTimeout("expiry timeout", timeout); err != nil {
		return nil, err
	}
	stale, err := r.q.OwnerAnyStale(ctx, h, db.OwnerAnyStaleParams{Owner: r.owner, Now: r.clock(), TimeoutMs: durationMs(timeout)})
	if err != nil {
		return nil, mapError("expire", err)
	}
	if !stale {
		return nil, nil
	}
	return r.expire(ctx, h, timeout, false)
}

func (r *Repository) expire(ctx context.Context, h Handle, timeout time.Duration, orphans bool) ([]Expiry, error) {
	if err := validTimeout("expiry timeout", timeout); err != nil {
		return nil, err
	}
	out, err := either(ctx, r, h, func() ([]Expiry, error) { return r.expireCitus(ctx, h, timeout, orphans) },
		func() ([]Expiry, error) {
			rows, err := r.q.TaskExpire(ctx, h, db.TaskExpireParams{Owner: r.owner, Orphans: orphans, Now: r.clock(), TimeoutMs: durationMs(timeout)})
			out := make([]Expiry, len(rows))
			for i, row := range rows {
				out[i] = Expiry{Topic: row.Topic, Expired: row.Expired, Retried: row.Retried}
			}
			return out, err
		})
	if err != nil {
		return out, mapError("expire", err)
	}
	// A task expired for good (EXPIRED, or FAILED cancelled) may free the READY tasks of
	// its identifier a poll condition held behind it (SINGULAR_BY_IDENTIFIER: no longer
	// ACTIVE); the statement tells only the topics where tasks were made READY.
	var final []string
	for _, e := range out {
		if e.Expired > e.Retried {
			final = append(final, e.Topic)
		}
	}
	if err := r.wake(ctx, h, final...); err != nil {
		return out, err
	}
	return out, nil
}

// Cancel cancels tasks: READY, SUSPENDED and EXPIRED ones become REDUNDANT with an output
// saying who cancelled them; ACTIVE ones are flagged, the process running them is told
// (CANCEL notification) and they end FAILED "cancelled", never retried. All or nothing: a
// task in another state, or unknown, fails the call with a *TaskError. A task made
// REDUNDANT wakes the topic's processors (WORK), for what a poll condition held behind it.
func (r *Repository) Cancel(ctx context.Context, h Handle, topic, by string, sequences ...int64) ([]Task, error) {
	if len(sequences) == 0 {
		return nil, nil
	}
	if err := validTopic(topic); err != nil {
		return nil, err
	}
	if err := validSequences(sequences); err != nil {
		return nil, fmt.Errorf("cancel in topic %q: %w", topic, err)
	}
	if err := ValidateCanceller(by); err != nil {
		return nil, fmt.Errorf("cancel in topic %q: %w", topic, err)
	}
	if by == "" {
		by = r.owner
	}
	arg := db.TaskCancelParams{Topic: topic, Sequences: sequences, By: by}
	rows, err := either(ctx, r, h, func() ([]db.TaskCancelRow, error) { return r.cancelCitus(ctx, h, arg) },
		func() ([]db.TaskCancelRow, error) { return r.q.TaskCancel(ctx, h, arg) })
	if err != nil {
		return nil, mapError(fmt.Sprintf("cancel in topic %q", topic), err)
	}
	if len(rows) != len(sequences) {
		return nil, r.explainStates(ctx, h, "cancel", topic, sequences, func(s State) bool {
			return s == Active || s == Ready || s == Suspended || s == Expired
		}, "READY, SUSPENDED, EXPIRED or ACTIVE")
	}
	tasks := tasksFrom(rows)
	for _, t := range tasks {
		// a task made REDUNDANT (not ACTIVE: that one ends with its handler) may free
		// what a poll condition held behind it: wake the processors
		if t.State == Redundant {
			if err := r.wake(ctx, h, topic); err != nil {
				return nil, err
			}
			break
		}
	}
	return tasks, nil
}

// LockJunctions takes, in h's transaction, the locks that Junction takes for each
// junction given (topic to the identifiers of its groups), all in one statement and in
// one order: a transaction that runs several junctions calls it first, so that it
// never waits for one transaction's lock while holding another that transaction waits
// for (two commits running the junctions of two fan-ins in opposite orders). It
// refuses a REPEATABLE READ transaction, as Junction does. Outside a transaction it
// does nothing that lasts.
func (r *Repository) LockJunctions(ctx context.Context, h Handle, junctions map[string][]string) error {
	var topics, identifiers []string
	for topic, ids := range junctions {
		if err := validTopic(topic); err != nil {
			return err
		}
		for _, id := range ids {
			if err := validIdentifier(id); err != nil {
				return fmt.Errorf("junction in topic %q: %w", topic, err)
			}
			topics = append(topics, topic)
			identifiers = append(identifiers, id)
		}
	}
	if len(identifiers) == 0 {
		return nil
	}
	return r.lockJunctions(ctx, h, topics, identifiers)
}

// lockJunctions takes the junctions' locks of the identifiers, each of the topic at
// its index (TaskJunctionLock), refusing a REPEATABLE READ transaction.
func (r *Repository) lockJunctions(ctx context.Context, h Handle, topics, identifiers []string) error {
	lock, err := r.q.TaskJunctionLock(ctx, h, db.TaskJunctionLockParams{Topics: topics, Identifiers: identifiers})
	if err != nil {
		return mapError("lock junctions", err)
	}
	if lock.Isolation == "repeatable read" && !autocommit(h) {
		// its snapshot, the transaction's, was taken before the locks: it would miss a
		// concurrent junction's suspension, and the group would never be released
		return invalid("the transaction is REPEATABLE READ: a junction must run in a READ COMMITTED transaction (or SERIALIZABLE), where it sees the suspensions of the junctions it waited for")
	}
	return nil
}

// Junction releases groups of identifiers: for each non-empty group whose
// identifiers ALL have a task in this topic that is SUSPENDED (Singular) or in any state
// but REDUNDANT (Eternal), counting distinct identifiers, every SUSPENDED task of the
// group in this topic becomes READY, the lease that ended in its SUSPENSION, if any,
// handed back (Task.Returned: its retries are left whole). It returns the identifiers
// of the released tasks, sorted, and notifies the topic when anything was released.
// When the tasks released would take the topic above its queue cap, it releases
// nothing and returns a *QueueFullError of Op "junction". It locks the groups'
// identifiers first (transaction-scoped advisory locks, one of 64 of the topic for
// each), so that junctions of one group declared by concurrent completions, each
// suspending one of its tasks, release it once both commit: run it in a READ
// COMMITTED transaction (the default), whose next statement sees what a junction it
// waited for committed; in a REPEATABLE READ one it is refused (ErrInvalid). Called on a
// pool (or a connection outside a transaction) it runs in a transaction of its own.
func (r *Repository) Junction(ctx context.Context, h Handle, topic string, junction Junction, groups ...[]string) ([]string, error) {
	if err := validTopic(topic); err != nil {
		return nil, err
	}
	if junction != Singular && junction != Eternal {
		return nil, invalid("unknown junction %d", junction)
	}
	var arg = db.TaskJunctionParams{Topic: topic, Eternal: junction == Eternal}
	for g, group := range groups {
		for _, id := range group {
			if err := validIdentifier(id); err != nil {
				return nil, fmt.Errorf("junction in topic %q: group %d: %w", topic, g, err)
			}
			arg.Groups = append(arg.Groups, int32(g))
			arg.Identifiers = append(arg.Identifiers, id)
		}
	}
	if len(arg.Identifiers) == 0 {
		return nil, nil
	}
	if ownTransaction(h) {
		// In a transaction of its own: the groups' locks are then held until the release
		// commits, and on Citus a failure of the notification's statement after it
		// (junctionWorkOnCitus) takes the release back with it; each committed alone,
		// and the error was answered for tasks released (a retry found nothing to release).
		// So too on a Handle of the caller's own type, whose statements may each commit
		// alone (a wrapper of a pool): begin gives it a transaction, or a savepoint of
		// the caller's.
		var released []string
		err := inTx(ctx, h, func(tx pgx.Tx) error {
			var err error
			released, err = r.Junction(ctx, tx, topic, junction, groups...)
			return err
		})
		return released, err
	}
	citus, err := r.onCitus(ctx, h)
	if err != nil {
		return nil, mapError(fmt.Sprintf("junction in topic %q", topic), err)
	}
	arg.Notify = !citus // on Citus, junctionWorkOnCitus notifies
	// the group's identifiers locked first, in one order for every junction, in a
	// statement of its own: TaskJunction's snapshot then sees what a junction that held
	// them committed (TaskJunctionLock)
	if err := r.lockJunctions(ctx, h, slices.Repeat([]string{topic}, len(arg.Identifiers)), arg.Identifiers); err != nil {
		return nil, fmt.Errorf("junction in topic %q: %w", topic, err)
	}
	rows, err := r.q.TaskJunction(ctx, h, arg)
	if err != nil {
		return nil, mapError(fmt.Sprintf("junction in topic %q", topic), err)
	}
	if len(rows) == 1 && rows[0].Identifier == "" {
		// no identifier has one: the statement's word for a refusal or an unknown topic
		if rows[0].Refused > 0 {
			return nil, r.queueFull(ctx, h, "junction", topic, int(rows[0].Refused))
		}
		return nil, unknownTopic("junction in", topic)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	released := make([]string, len(rows))
	for i, row := range rows {
		released[i] = row.Identifier
	}
	if r.junctionHook != nil {
		if err := r.junctionHook(); err != nil {
			return nil, err
		}
	}
	if err := r.junctionWorkOnCitus(ctx, h, topic, released); err != nil {
		return nil, mapError(fmt.Sprintf("junction in topic %q", topic), err)
	}
	return released, nil
}

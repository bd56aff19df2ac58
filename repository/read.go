package repository

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
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
// An unknown topic returns ErrUnknownTopic. Excerpts is the same with long texts cut.
func (r *Repository) Page(ctx context.Context, h Handle, topic string, filter TaskFilter, cursor int64, size int, direction Direction) ([]Task, error) {
	p, err := pageParams(topic, filter, cursor, size, direction)
	if err != nil || size == 0 {
		return nil, err
	}
	rows, _, err := readPage(ctx, r, h, p, filter, direction, 0, pageReader[db.Task]{
		walk: func(h Handle, p db.TaskPageForwardParams) ([]db.Task, error) {
			if direction == Forward {
				return r.q.TaskPageForward(ctx, h, p)
			}
			return r.q.TaskPageBackward(ctx, h, db.TaskPageBackwardParams(p))
		},
		at: func(h Handle, sequences []int64, size int32) ([]db.Task, error) {
			return r.q.TaskPageAt(ctx, h, db.TaskPageAtParams{Topic: topic, Sequences: sequences, State: p.State,
				Newest: direction == Backward, Size: size})
		},
	})
	if err := r.pageError(ctx, h, topic, len(rows), err); err != nil {
		return nil, err
	}
	return tasksFrom(rows), nil
}

// Bounds of a page's walk through the topic's table (readPage).
const (
	// pageWindow is how many sequences a page walks before it asks whether the topic
	// has few tasks beyond them: at most that many entries of the table's primary key.
	pageWindow = 10_000
	// pageFew is how many tasks a topic may have for a page to read them all through
	// the indexes keyed by the topic and sort them, rather than walk on: the most that
	// asking reads, about 20 ms, against a walk through every other topic's tasks.
	pageFew = 20_000
	// pageFewFromStart is pageFew for a page from MinSequence forward, which has no
	// window to try first: a large topic's oldest page pays that read before it walks
	// (about 0.5 ms, where 20 000 would be 5).
	pageFewFromStart = 2_000
)

// pageReader reads a page's rows on a handle: walk, the walk through the primary key
// that the arguments bound (the page queries), and at, the first size rows of some
// sequences in the page's state filter, in the page's direction.
type pageReader[T any] struct {
	walk func(Handle, db.TaskPageForwardParams) ([]T, error)
	at   func(h Handle, sequences []int64, size int32) ([]T, error)
}

// pageStep, when set (tests), is called with the topic and the name of each statement
// readPage is about to run after its first, so that a test can change the tasks
// between two of them.
var pageStep atomic.Pointer[func(topic, statement string)]

// readPage reads a page in direction order. A page without a filter walks the
// topic's sequences from the cursor through its table's primary key, which also holds
// the tasks of every other topic of a shared table: a topic with a few tasks among
// millions of others' would read them all, at each refresh of its page. So the walk
// stops after pageWindow sequences (a forward one at the highest sequence taken, when
// that comes first); when they hold fewer tasks than the page wants, it asks for the
// sequences of the topic's tasks through the indexes keyed by the topic, at most
// pageFew+1 of them: a topic with no more has given them all, and the nearest beyond
// the window are read by sequence; a topic with more walks on, its tasks common enough
// for the walk to find the page soon — unless they all lie beyond millions of others'
// (a large topic idle since): that walk is the cost left, and so is the oldest page of
// a topic of more than pageFewFromStart tasks that millions of others' precede.
// A page filtered by a finished state that no index of the topic's holds (FILTERED,
// SUCCEEDED, RECREATED, REDUNDANT: windowed) goes the same way, its rows read by
// sequence keeping those in the state: a walk would read every task of the topic's
// table for a state few or none of the topic's tasks are in. Other filtered pages walk
// as before (see Excerpts).
//
// With a span above 0, that walk on for a state reads at most span sequences: when it
// stops there with the page short, more is the cursor a next call goes on from (what
// was read is every task of the page's before it), 0 otherwise (ExcerptsWithin).
//
// Its statements read one snapshot: a transaction of their own, REPEATABLE READ and
// READ ONLY, when h is not in one (inSnapshot); otherwise the caller's transaction's,
// which under READ COMMITTED takes one a statement, so that a task deleted between two
// of them can shorten the page, and one committed between them can be passed over.
func readPage[T any](ctx context.Context, r *Repository, h Handle, p db.TaskPageForwardParams, filter TaskFilter, direction Direction, span int64, rd pageReader[T]) (rows []T, more int64, err error) {
	p.Ceiling = MaxSequence
	if filter != (TaskFilter{}) && !windowed(filter) ||
		direction == Forward && p.Cursor >= MaxSequence-pageWindow-1 ||
		direction == Backward && p.Cursor <= pageWindow+1 {
		rows, err = rd.walk(h, p)
		return rows, 0, err
	}
	err = inSnapshot(ctx, h, func(h Handle) error {
		var err error
		rows, more, err = readWindowed(ctx, r, h, p, direction, span, rd)
		return err
	})
	return rows, more, err
}

// windowed reports whether a filtered page goes through readWindowed: it keeps one
// finished state that no index keyed by the topic holds alone (task_retention holds
// them with FAILED, by completion time), and nothing else.
func windowed(filter TaskFilter) bool {
	return filter.State != nil && *filter.State > Suspended && filter.Identifier == "" && filter.Reference == "" && filter.Floor == 0
}

// readWindowed is readPage's walk of a window and what follows, on one snapshot.
func readWindowed[T any](ctx context.Context, r *Repository, h Handle, p db.TaskPageForwardParams, direction Direction, span int64, rd pageReader[T]) ([]T, int64, error) {
	step := func(statement string) {
		if f := pageStep.Load(); f != nil {
			(*f)(p.Topic, statement)
		}
	}
	// The window starts at the cursor, or below the highest sequence taken when the
	// cursor is MaxSequence (a task pushed since is above the window and still read: the
	// cursor stays). Forward from MinSequence has no such start to go by (the lowest
	// sequence is in every table): it asks at once whether the topic has few tasks.
	from := p.Cursor
	if direction == Backward && (from == MaxSequence || span > 0) {
		// A walk bounded by a span starts below the highest sequence taken too: from a
		// cursor far above it (a client's "newest" of its own), each call would step
		// through sequences no task has.
		last, err := r.q.TaskLastSequence(ctx, h)
		if err != nil {
			return nil, 0, err
		}
		if from = min(from, last+1); from <= pageWindow+1 {
			step("TaskPageBackward")
			rows, err := rd.walk(h, p)
			return rows, 0, err
		}
	}
	window := p
	lo, hi := MinSequence, MaxSequence // the sequences beyond the window, both exclusive
	few := pageFew
	switch {
	case direction == Forward && from == MinSequence:
		few = pageFewFromStart
	case direction == Forward:
		window.Ceiling = from + pageWindow + 1
		lo = window.Ceiling - 1
	default:
		window.Floor = from - pageWindow - 1
		lo, hi = -1, window.Floor+1
	}
	var rows []T
	last := int64(-1) // the highest sequence taken, once read
	if window != p {
		var err error
		if rows, err = rd.walk(h, window); err != nil || len(rows) == int(p.Size) {
			return rows, 0, err
		}
		if direction == Forward {
			// Nothing beyond the highest sequence taken: every task of this snapshot has
			// its sequence (taken before its push committed).
			step("TaskLastSequence")
			if last, err = r.q.TaskLastSequence(ctx, h); err != nil || window.Ceiling > last {
				return rows, 0, err
			}
		}
	}
	step("TaskTopicSequences")
	all, err := r.q.TaskTopicSequences(ctx, h, db.TaskTopicSequencesParams{Topic: p.Topic, Size: int32(few + 1)})
	if err != nil {
		return nil, 0, err
	}
	if len(all) > few { // many: walk on
		rest := p
		rest.Size -= int32(len(rows))
		// The span bounds a walk for a state: without one, every task of the topic is
		// the page's, and its walk ends at its first tasks (an empty page would only
		// send the caller on through the sequences other topics took).
		if p.State == nil {
			span = 0
		}
		if direction == Forward {
			rest.Cursor = lo
			if span > 0 && lo < MaxSequence-span-1 {
				rest.Ceiling = lo + span + 1
			}
		} else {
			rest.Cursor = hi
			if span > 0 && hi > span+1 {
				rest.Floor = hi - span - 1
			}
		}
		step("TaskPageWalk")
		found, err := rd.walk(h, rest)
		rows = append(rows, found...)
		if err != nil || len(found) == int(rest.Size) {
			return rows, 0, err
		}
		if direction == Backward {
			if rest.Floor > 0 { // sequences below the floor are left: on from above it
				return rows, rest.Floor + 1, nil
			}
			return rows, 0, nil
		}
		if rest.Ceiling == MaxSequence {
			return rows, 0, nil
		}
		if last < 0 {
			if last, err = r.q.TaskLastSequence(ctx, h); err != nil {
				return nil, 0, err
			}
		}
		if rest.Ceiling <= last { // sequences from the ceiling on are left
			return rows, rest.Ceiling - 1, nil
		}
		return rows, 0, nil
	}
	sequences := all[:0]
	for _, s := range all {
		if lo < s && s < hi {
			sequences = append(sequences, s)
		}
	}
	if len(sequences) == 0 {
		return rows, 0, nil
	}
	want := int(p.Size) - len(rows)
	if p.State == nil {
		// every one is the page's: read only those it takes
		slices.Sort(sequences)
		want = min(len(sequences), want)
		if direction == Forward {
			sequences = sequences[:want]
		} else {
			sequences = sequences[len(sequences)-want:]
		}
	}
	step("TaskPageAt")
	more, err := rd.at(h, sequences, int32(want))
	return append(rows, more...), 0, err
}

// inSnapshot runs fn on one snapshot: in a REPEATABLE READ, READ ONLY transaction of
// its own when h is not in a transaction (a pool, or an idle connection), on h
// otherwise, whose isolation decides.
func inSnapshot(ctx context.Context, h Handle, fn func(Handle) error) error {
	b, ok := h.(interface {
		BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
	})
	if !ok || !autocommit(h) {
		return fn(h)
	}
	// pgx closes a connection whose BEGIN fails for a reason other than the server's
	// (a context already done among them): not the caller's for a page not even asked
	if err := ctx.Err(); err != nil {
		return err
	}
	tx, err := b.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	// It only read: rolling back ends it as well as a commit, and what it read stands
	// whatever the rollback's outcome. Not on ctx, which may be done by now: the
	// connection, perhaps the caller's own, would be closed rather than rolled back.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	return fn(tx)
}

// Limits of the texts of an Excerpt.
const (
	// ExcerptLength is how many characters of a task's input, output and of each error
	// an Excerpt keeps.
	ExcerptLength = 1024
	// ExcerptErrors is how many errors (the latest) an Excerpt keeps.
	ExcerptErrors = 3
)

// Excerpt is a task as a listing shows it: Input and Output cut to their first
// ExcerptLength characters, Errors to the last ExcerptErrors errors, each cut likewise.
// A page of excerpts is bounded in size however large the tasks' texts; Get returns one
// task whole.
type Excerpt struct {
	Task
	// InputBytes and OutputBytes are the lengths in bytes of the whole input and output.
	InputBytes, OutputBytes int64
	// ErrorsCut reports whether Errors lacks errors or text of the task's.
	ErrorsCut bool
}

// InputCut reports whether Input is only the start of the task's input.
func (e Excerpt) InputCut() bool { return int64(len(e.Input)) < e.InputBytes }

// OutputCut reports whether Output is only the start of the task's output.
func (e Excerpt) OutputCut() bool { return int64(len(e.Output)) < e.OutputBytes }

// Excerpts is Page for listings: the tasks come as Excerpts, whose texts are cut in the
// database, so that neither the database's reply nor the caller's memory grows with the
// size of the tasks' inputs, outputs or errors.
//
// A filter that matches few of many tasks is read through the index that fits it, in
// either direction (indexPath): the cost follows the tasks that match, not the topic's
// others. A page without a filter, or with a finished state alone that no index holds
// (FILTERED and after), walks a window of sequences, and reads a topic with few tasks
// beyond it through the topic's indexes (readPage): its cost does not grow with the
// other topics of its table. Any other filter, or one with a Floor (which bounds the
// walk), walks the topic's sequences from the cursor, cheap while the tasks it keeps
// are common.
func (r *Repository) Excerpts(ctx context.Context, h Handle, topic string, filter TaskFilter, cursor int64, size int, direction Direction) ([]Excerpt, error) {
	tasks, _, err := r.ExcerptsWithin(ctx, h, topic, filter, cursor, size, direction, 0)
	return tasks, err
}

// ExcerptsWithin is Excerpts whose walk through the topic's table for a finished state
// alone (FILTERED and after, which no index holds) reads at most span sequences beyond
// the first window: a page of a state that is rare among a topic's millions of
// tasks (FILTERED among SUCCEEDED) is found a span at a time rather than by reading the
// topic whole. When the walk stopped at that bound before the page was full, more is
// the cursor from which a next call goes on (in the page's direction), and the page
// holds every task of the filter's before it: it may hold fewer than size, even none.
// more is 0 otherwise, and with a span of 0 (no bound). A negative span is an error.
func (r *Repository) ExcerptsWithin(ctx context.Context, h Handle, topic string, filter TaskFilter, cursor int64, size int, direction Direction, span int64) (tasks []Excerpt, more int64, err error) {
	if span < 0 {
		return nil, 0, invalid("span %d is negative", span)
	}
	p, err := pageParams(topic, filter, cursor, size, direction)
	if err != nil || size == 0 {
		return nil, 0, err
	}
	if path := indexPath(filter); path != 0 && filter.Floor == 0 {
		tasks, err := r.excerptsIndexed(ctx, h, p, path, direction)
		return tasks, 0, err
	}
	rows, more, err := readPage(ctx, r, h, p, filter, direction, span, pageReader[db.TaskExcerptForwardRow]{
		walk: func(h Handle, p db.TaskPageForwardParams) ([]db.TaskExcerptForwardRow, error) {
			if direction == Forward {
				return r.q.TaskExcerptForward(ctx, h, db.TaskExcerptForwardParams{
					Length: ExcerptLength, ErrorCount: ExcerptErrors, Topic: p.Topic, Cursor: p.Cursor, Floor: p.Floor, Ceiling: p.Ceiling,
					State: p.State, Identifier: p.Identifier, Reference: p.Reference, Size: p.Size,
				})
			}
			back, err := r.q.TaskExcerptBackward(ctx, h, db.TaskExcerptBackwardParams{
				Length: ExcerptLength, ErrorCount: ExcerptErrors, Topic: p.Topic, Cursor: p.Cursor, Floor: p.Floor, Ceiling: p.Ceiling,
				State: p.State, Identifier: p.Identifier, Reference: p.Reference, Size: p.Size,
			})
			rows := make([]db.TaskExcerptForwardRow, len(back))
			for i, b := range back {
				rows[i] = db.TaskExcerptForwardRow(b)
			}
			return rows, err
		},
		at: func(h Handle, sequences []int64, size int32) ([]db.TaskExcerptForwardRow, error) {
			got, err := r.q.TaskExcerptAt(ctx, h, db.TaskExcerptAtParams{Length: ExcerptLength, ErrorCount: ExcerptErrors, Topic: p.Topic,
				Sequences: sequences, State: p.State, Newest: direction == Backward, Size: size})
			rows := make([]db.TaskExcerptForwardRow, len(got))
			for i, g := range got {
				rows[i] = db.TaskExcerptForwardRow(g)
			}
			return rows, err
		},
	})
	if err := r.pageError(ctx, h, topic, len(rows), err); err != nil {
		return nil, 0, err
	}
	return excerptsFrom(rows), more, nil
}

// excerptsFrom converts the rows of an excerpt query.
func excerptsFrom(rows []db.TaskExcerptForwardRow) []Excerpt {
	out := make([]Excerpt, len(rows))
	for i, row := range rows {
		if len(row.Errors) == 0 {
			row.Errors = nil // as Page has it: no errors, not an empty list
		}
		out[i] = Excerpt{
			Task: taskFrom(db.Task{
				Topic: row.Topic, Sequence: row.Sequence, Identifier: row.Identifier, State: row.State,
				Descent: row.Descent, Owner: row.Owner, Created: row.Created, Completed: row.Completed,
				Input: ptr(row.Input), Output: ptr(row.Output), Reference: row.Reference, Priority: row.Priority,
				NotBefore: row.NotBefore, Attempt: row.Attempt, Returned: row.Returned, Errors: row.Errors,
				Cancelled: row.Cancelled, ConcurrencyKey: row.ConcurrencyKey,
			}),
			InputBytes:  row.InputBytes,
			OutputBytes: row.OutputBytes,
			ErrorsCut:   row.ErrorsCut,
		}
	}
	return out
}

// TimelineMax is the most tasks one Timeline or Latest returns.
const TimelineMax = 1000

// Timeline returns the latest size tasks (1..TimelineMax) of one identifier in the topic
// whose sequence is below the exclusive cursor before (MaxSequence for the newest),
// newest first, as Excerpts: the history that insertion modes and revivals wrote for it.
// It is Latest with only the identifier filter.
func (r *Repository) Timeline(ctx context.Context, h Handle, topic, identifier string, before int64, size int) ([]Excerpt, error) {
	if err := validIdentifier(identifier); err != nil {
		return nil, err
	}
	return r.Latest(ctx, h, topic, TaskFilter{Identifier: identifier}, before, size)
}

// Latest returns up to size tasks (1..TimelineMax) of the topic that match filter and
// whose sequence is below the exclusive cursor before (MaxSequence for the newest),
// newest first, as Excerpts: Excerpts read Backward, with the page's size bounded. A
// filter that matches few of many tasks stays cheap (an unfinished or broken state,
// ACTIVE to SUSPENDED; an identifier; a reference: see Excerpts); with none of these (no
// filter, or a finished state alone) it reads the topic's sequences backward, cheap
// while the tasks it keeps are common among the newest.
func (r *Repository) Latest(ctx context.Context, h Handle, topic string, filter TaskFilter, before int64, size int) ([]Excerpt, error) {
	if size < 1 || size > TimelineMax {
		return nil, invalid("page size %d is outside 1..%d", size, TimelineMax)
	}
	return r.Excerpts(ctx, h, topic, filter, before, size, Backward)
}

// indexPath is the path of TaskLatest and TaskEarliest whose index fits filter, 0 when
// none does: 1, ACTIVE, through task_open; 2, READY, through task_ready; 3, an
// identifier, through its indexes; 4, a reference; 5, EXPIRED, FAILED or SUSPENDED,
// through task_attention (migration 000052: task_open holds them by identifier, and a
// page read them all, a dead-letter set of millions, and sorted them).
// READY with an identifier takes path 3, with a reference path 4: task_ready holds
// neither, and would be read until enough of their tasks turned up, a READY backlog
// whole for an identifier or a reference with few READY tasks.
func indexPath(filter TaskFilter) int16 {
	switch {
	case filter.State != nil && *filter.State == Ready:
		if filter.Identifier != "" {
			return 3
		}
		if filter.Reference != "" {
			return 4
		}
		return 2
	case filter.State != nil && *filter.State == Active:
		return 1
	case filter.State != nil && *filter.State <= Suspended:
		return 5
	case filter.Identifier != "":
		return 3
	case filter.Reference != "":
		return 4
	}
	return 0
}

// excerptsIndexed is Excerpts through an index path (indexPath). The statement is
// planned at each call with its arguments (customPlans): the plan generic of all paths
// and filters that PostgreSQL caches for a prepared statement after five calls read a
// state's or an identifier's READY tasks by walking the topic's sequences (10 000 rows
// for the ten of one identifier, in TestIdentifierLookupsUseIndexes).
func (r *Repository) excerptsIndexed(ctx context.Context, h Handle, p db.TaskPageForwardParams, path int16, direction Direction) ([]Excerpt, error) {
	var rows []db.TaskExcerptForwardRow
	var err error
	if direction == Forward {
		var got []db.TaskEarliestRow
		got, err = r.q.TaskEarliest(ctx, customPlans{h}, db.TaskEarliestParams{Length: ExcerptLength, ErrorCount: ExcerptErrors, Topic: p.Topic,
			Size: p.Size, Path: path, State: p.State, After: p.Cursor, Identifier: p.Identifier, Reference: p.Reference})
		rows = make([]db.TaskExcerptForwardRow, len(got))
		for i, row := range got {
			rows[i] = db.TaskExcerptForwardRow(row)
		}
	} else {
		var got []db.TaskLatestRow
		got, err = r.q.TaskLatest(ctx, customPlans{h}, db.TaskLatestParams{Length: ExcerptLength, ErrorCount: ExcerptErrors, Topic: p.Topic,
			Size: p.Size, Path: path, State: p.State, Before: p.Cursor, Identifier: p.Identifier, Reference: p.Reference})
		rows = make([]db.TaskExcerptForwardRow, len(got))
		for i, row := range got {
			rows[i] = db.TaskExcerptForwardRow(row)
		}
	}
	if err := r.pageError(ctx, h, p.Topic, len(rows), err); err != nil {
		return nil, err
	}
	return excerptsFrom(rows), nil
}

// pageParams checks the arguments of Page and Excerpts and returns the query's.
func pageParams(topic string, filter TaskFilter, cursor int64, size int, direction Direction) (db.TaskPageForwardParams, error) {
	if err := validTopic(topic); err != nil {
		return db.TaskPageForwardParams{}, err
	}
	if size < 0 {
		return db.TaskPageForwardParams{}, invalid("page size %d is negative", size)
	}
	if cursor < 0 {
		return db.TaskPageForwardParams{}, invalid("cursor %d is negative", cursor)
	}
	if direction != Forward && direction != Backward {
		return db.TaskPageForwardParams{}, invalid("unknown direction %d", direction)
	}
	if err := ValidateFilter(filter); err != nil {
		return db.TaskPageForwardParams{}, err
	}
	state, _ := filterState(filter)
	return db.TaskPageForwardParams{
		Topic: topic, Cursor: cursor, Floor: filter.Floor, State: state, Identifier: ptr(filter.Identifier),
		Reference: ptr(filter.Reference), Size: int32(min(size, 1<<31-1)),
	}, nil
}

// pageError maps the error of a page's query; an empty page of an unknown topic is
// ErrUnknownTopic.
func (r *Repository) pageError(ctx context.Context, h Handle, topic string, rows int, err error) error {
	if err != nil {
		return mapError(fmt.Sprintf("page topic %q", topic), err)
	}
	return r.knownTopic(ctx, h, "page", topic, int64(rows))
}

// knownTopic tells an operation of op on topic that changed or read nothing (affected 0)
// from one on a topic that is not registered, which it returns as ErrUnknownTopic (or the
// error of reading the topic): a statement that names an unknown topic finds no rows.
func (r *Repository) knownTopic(ctx context.Context, h Handle, op, topic string, affected int64) error {
	if affected > 0 {
		return nil
	}
	if _, err := r.Topic(ctx, h, topic); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
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
	if err := validTopic(topic); err != nil {
		return Task{}, err
	}
	row, err := r.q.TaskGet(ctx, h, db.TaskGetParams{Topic: topic, Sequence: sequence})
	if errors.Is(err, pgx.ErrNoRows) {
		return Task{}, fmt.Errorf("get task %d of topic %q: %w", sequence, topic, ErrUnknownTask)
	}
	if err != nil {
		return Task{}, mapError(fmt.Sprintf("get task %d of topic %q", sequence, topic), err)
	}
	return taskFrom(row), nil
}

// GetExcerpt returns one task of a topic as Get does, but with its input, output and
// errors cut in the database: each text to its first length characters (at least 1),
// and the errors to the last errorCount (at least 1; one per failed attempt, and
// attempts are as many as the topic allows), so that a task of megabytes costs its
// reader no more than length per text; InputBytes and OutputBytes are the whole
// lengths, and ErrorsCut says when an error was cut or left out. The Excerpt's
// ConcurrencyKey is not read. An unknown task returns ErrUnknownTask.
func (r *Repository) GetExcerpt(ctx context.Context, h Handle, topic string, sequence int64, length, errorCount int) (Excerpt, error) {
	if err := validTopic(topic); err != nil {
		return Excerpt{}, err
	}
	if length < 1 {
		return Excerpt{}, invalid("excerpt length %d is below 1", length)
	}
	if errorCount < 1 {
		return Excerpt{}, invalid("excerpt error count %d is below 1", errorCount)
	}
	rows, err := r.q.TaskExcerptAt(ctx, h, db.TaskExcerptAtParams{Length: int32(min(length, 1<<31-1)), ErrorCount: int32(min(errorCount, 1<<31-1)),
		Topic: topic, Sequences: []int64{sequence}, Size: 1})
	if err != nil {
		return Excerpt{}, mapError(fmt.Sprintf("get task %d of topic %q", sequence, topic), err)
	}
	if len(rows) == 0 {
		return Excerpt{}, fmt.Errorf("get task %d of topic %q: %w", sequence, topic, ErrUnknownTask)
	}
	return excerptsFrom([]db.TaskExcerptForwardRow{db.TaskExcerptForwardRow(rows[0])})[0], nil
}

// GetMany returns the tasks of a topic with the given sequences, by sequence, in one
// statement; sequences no task of the topic has are left out. An unknown topic returns
// ErrUnknownTopic, as the other calls that name a topic do, and leaves the caller's
// transaction usable: when no task was found, a second statement asks whether the
// topic is registered (a found task says it is). No sequences return nothing without
// reading the database.
func (r *Repository) GetMany(ctx context.Context, h Handle, topic string, sequences ...int64) ([]Task, error) {
	if err := validTopic(topic); err != nil {
		return nil, err
	}
	if len(sequences) == 0 {
		return nil, nil
	}
	rows, err := r.q.TaskGetMany(ctx, h, db.TaskGetManyParams{Topic: topic, Sequences: sequences})
	if err != nil {
		return nil, mapError(fmt.Sprintf("get tasks of topic %q", topic), err)
	}
	if err := r.knownTopic(ctx, h, "get tasks", topic, int64(len(rows))); err != nil {
		return nil, err
	}
	return tasksFrom(rows), nil
}

// CountByState counts every task of a topic by state, exactly: the map holds each of the
// nine states, zero included, so counts[repository.Succeeded] reads as expected. It
// reads all the topic's tasks (Stats is the cheap summary for large topics); Count
// takes filters, a sequence range and several topics. An unknown topic returns
// ErrUnknownTopic.
func (r *Repository) CountByState(ctx context.Context, h Handle, topic string) (map[State]int64, error) {
	if err := validTopic(topic); err != nil {
		return nil, err
	}
	counts, err := r.Count(ctx, h, topic, TaskFilter{}, MinSequence, MaxSequence, Total)
	if err != nil {
		return nil, err
	}
	out := make(map[State]int64, len(stateNames))
	for _, s := range States() {
		out[s] = counts[topic][s].Count
	}
	return out, nil
}

// countRow is a row of the count statements (TaskCountTotal, TaskCountRecent and their
// forms by reference), which sqlc gives a type each.
type countRow struct {
	Topic   string
	State   int16
	Count   int64
	Highest int64
}

// countRows converts the rows of a count statement.
func countRows[R ~struct {
	Topic   string
	State   int16
	Count   int64
	Highest int64
}](got []R, err error) ([]countRow, error) {
	rows := make([]countRow, len(got))
	for i, g := range got {
		rows[i] = countRow(g)
	}
	return rows, err
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
	// planned for their arguments (customPlans): the generic plan of a cached statement
	// walked the topic's sequences for a state
	identifier, reference, named := ptr(filter.Identifier), ptr(filter.Reference), ptr(topic)
	var rows []countRow
	switch {
	case mode == Total && filter.Reference != "":
		rows, err = countRows(r.q.TaskCountTotalByReference(ctx, customPlans{h}, db.TaskCountTotalByReferenceParams{
			FromSequence: fromSequence, ToSequence: toSequence, State: state, Identifier: identifier, Reference: reference, Topic: named}))
	case mode == Total:
		rows, err = countRows(r.q.TaskCountTotal(ctx, customPlans{h}, db.TaskCountTotalParams{
			FromSequence: fromSequence, ToSequence: toSequence, State: state, Identifier: identifier, Reference: reference, Topic: named}))
	case mode == Recent && filter.Reference != "":
		rows, err = countRows(r.q.TaskCountRecentByReference(ctx, customPlans{h}, db.TaskCountRecentByReferenceParams{
			FromSequence: fromSequence, ToSequence: toSequence, State: state, Identifier: identifier, Reference: reference, Topic: named}))
	case mode == Recent:
		rows, err = countRows(r.q.TaskCountRecent(ctx, customPlans{h}, db.TaskCountRecentParams{
			FromSequence: fromSequence, ToSequence: toSequence, State: state, Identifier: identifier, Reference: reference, Topic: named}))
	default:
		return nil, invalid("unknown count mode %d", mode)
	}
	if err != nil {
		return nil, mapError("count", err)
	}
	out := make(map[string]map[State]Count)
	for _, g := range rows {
		if out[g.Topic] == nil {
			out[g.Topic] = make(map[State]Count)
		}
		if g.State >= 0 {
			out[g.Topic][State(g.State)] = Count{Count: g.Count, Highest: g.Highest}
		}
	}
	if topic != "" && len(out) == 0 {
		return nil, unknownTopic("count", topic)
	}
	return out, nil
}

// Results counts tasks completed within [from, to] per topic and result. It reads the
// tasks of the window (each topic's through the index the retention pass uses, migration
// 000030), not the finished history before or after it.
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
// into a sequence, the bound of a range of sequences by creation time: the first
// sequence created at or after it (MaxSequence when none), or with preceding the last
// created at or before it (MinSequence when none), while sequences follow creation
// times. It finds the bound by a binary search over the sequences (migration 000018:
// about 40 reads of one task through the primary keys, whatever their number), which
// trusts that they do; finding the first or last for sure would read every task.
//
// They need not: a task's creation time is the start of the transaction that pushed it
// (now()), its sequence is taken when it pushes, so a transaction open while others
// push (Recreate's copies too, pushed in the caller's transaction) gives later
// sequences earlier creation times. Where such tasks surround the time, Resolve returns
// a bound among them: without preceding, a task created at or after the time whose
// predecessor by sequence (of any topic) was created before it (or is none), or
// MaxSequence, only when the last task was created before it; with preceding, a task
// created at or before the time whose successor was created after it (or is none), or
// MinSequence, only when the first task was created after it. A range between two
// resolved times may then leave out some of those tasks created within them, and holds
// whatever tasks its sequences do.
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

// LastSequence returns the highest sequence taken so far by any topic: no task has a
// higher one (the task that took it may be uncommitted, rolled back or purged).
func (r *Repository) LastSequence(ctx context.Context, h Handle) (int64, error) {
	seq, err := r.q.TaskLastSequence(ctx, h)
	if err != nil {
		return 0, mapError("last sequence", err)
	}
	return seq, nil
}

// Purge deletes finished tasks of a topic within the inclusive sequence range and returns
// how many: every state from FAILED to REDUNDANT, or only state when given (which must be
// one of those). ACTIVE, READY and EXPIRED tasks are never purged.
//
// Inside the caller's transaction it is one statement. On a pool (or a connection
// outside a transaction) it deletes in statements of at most 10 000 tasks, each committed
// on its own, so that a purge of millions neither holds one long transaction nor loses
// its work to a timeout; it passes over the tasks other transactions hold locked (a
// revive under way) rather than wait for them, and stops at the sequence that was the
// last when it began, not chasing the tasks finished meanwhile. When ctx ends, the
// statement under way finishes (within a minute), and Purge returns the number deleted
// with ctx's error (call it again to go on); when a statement fails, the number deleted
// before it.
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
	what := fmt.Sprintf("purge topic %q", topic)
	if !autocommit(h) {
		// planned for its arguments (customPlans): after purges of no state, the generic
		// plan of a cached statement read every finished task of the topic for one state
		n, err := r.q.TaskPurge(ctx, customPlans{h}, db.TaskPurgeParams{Topic: topic, FromSequence: fromSequence, ToSequence: toSequence, State: s})
		if err != nil {
			return 0, mapError(what, err)
		}
		return n, r.knownTopic(ctx, h, "purge", topic, n)
	}
	last, err := r.q.TaskLastSequence(ctx, h)
	if err != nil {
		return 0, mapError(what, err)
	}
	arg := db.TaskPurgeSomeParams{Topic: topic, FromSequence: fromSequence, ToSequence: min(toSequence, last), State: s, Size: purgeBatch}
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("%s: stopped after %d tasks: %w", what, total, err)
		}
		// A statement deletes a bounded number of tasks and waits for no row lock: it
		// finishes once begun (within purgeStatementTimeout), so that the count returned
		// is what was deleted
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), purgeStatementTimeout)
		n, err := r.q.TaskPurgeSome(sctx, customPlans{h}, arg)
		cancel()
		total += n
		if err != nil {
			if total > 0 {
				what += fmt.Sprintf(" (%d tasks purged before the error)", total)
			}
			return total, mapError(what, err)
		}
		if n < arg.Size {
			return total, r.knownTopic(ctx, h, "purge", topic, total)
		}
	}
}

// purgeBatch is the most tasks one statement of Purge deletes on a pool (a variable
// for the tests).
var purgeBatch int64 = 10_000

// purgeStatementTimeout bounds one statement of Purge on a pool, which its caller's
// context does not interrupt.
const purgeStatementTimeout = time.Minute

// PurgeAll deletes every task of a topic, whatever its state, and returns how many there
// were. A shared topic's tasks are deleted as Destroy deletes them (in batches on a pool,
// in one statement inside the caller's transaction): no other topic waits. A dedicated
// topic's table is truncated, which locks it (its own pushes and polls wait) until the
// caller commits. On an error after batches were deleted (each committed), it returns
// their number with the error, which says so.
func (r *Repository) PurgeAll(ctx context.Context, h Handle, topic string) (int64, error) {
	if err := validTopic(topic); err != nil {
		return 0, err
	}
	batched, err := r.deleteInBatches(ctx, h, topic)
	var n int64
	if err == nil {
		n, err = retryLocked(ctx, h, func() (int64, error) { return r.q.TopicTruncate(ctx, h, topic) })
	}
	if err != nil {
		err = mapError(fmt.Sprintf("purge all of topic %q", topic), err)
		if batched > 0 {
			// the batches before committed: the error's "nothing was changed" (a lock
			// timeout's) is not so
			err = fmt.Errorf("%w (after %d of its tasks were deleted, each batch committed; purge again to finish)", err, batched)
		}
		return batched, err
	}
	if n < 0 {
		return 0, unknownTopic("purge all of", topic)
	}
	return batched + n, nil
}

// ErrRetentionUnderWay: on a distributed database, another retention pass
// (PurgeRetentionAfter, a processor's) is under way; this one deleted nothing.
var ErrRetentionUnderWay = errors.New("another retention pass is under way")

// PurgeRetention deletes up to size finished tasks whose completion is older than their
// topic's retention, and returns how many; topics without retention keep everything.
// It serves the topics in name order from the first: PurgeRetentionAfter takes them in
// turn.
func (r *Repository) PurgeRetention(ctx context.Context, h Handle, size int) (int64, error) {
	n, _, err := r.PurgeRetentionAfter(ctx, h, "", size)
	return n, err
}

// PurgeRetentionAfter is PurgeRetention serving the topics named after after first, in
// name order, then those from the first: it returns how many tasks it deleted and the
// topic to pass as after to the next call ("" when it deleted none), so that calls in
// a row serve every topic in turn, however many old tasks one of them holds. On a
// distributed database the topics are served in no set order (Citus does not keep the
// statement's order of the topics), and it always returns "" as last; and one call runs
// at a time in the whole cluster (a transaction-scoped advisory lock): one made while
// another runs deletes nothing and fails with ErrRetentionUnderWay, since the two would
// read the same rows (no SKIP LOCKED there), wait for each other and deadlock.
func (r *Repository) PurgeRetentionAfter(ctx context.Context, h Handle, after string, size int) (deleted int64, last string, err error) {
	if size <= 0 {
		return 0, "", invalid("size %d is not positive", size)
	}
	citus, err := r.onCitus(ctx, h)
	if err != nil {
		return 0, "", mapError("purge by retention", err)
	}
	if citus {
		after = ""
	}
	// Without JIT: the statement reads every topic with a retention, and with a thousand
	// of them its estimated cost is above jit_above_cost, so that each pass (every minute
	// in every processor) would compile it again, three times as long as it runs. Without
	// hash or merge joins: the DELETE finds each task of the batch by its key (the topic's
	// table pruned at run time); for a batch of thousands the planner hashed the batch and
	// read every task of every table to join them (0.8 s over 900 000 tasks, against
	// 45 ms).
	err = withSettingsOff(ctx, h, []string{"jit", "enable_hashjoin", "enable_mergejoin"}, func(tx pgx.Tx) error {
		size := int32(min(size, 1<<31-1))
		if citus {
			var alone bool
			if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1, 1)", int32(citusLockClass)).Scan(&alone); err != nil {
				return err
			}
			if !alone {
				return ErrRetentionUnderWay
			}
			row, err := r.q.TaskPurgeRetentionDistributed(ctx, tx, size)
			deleted, last = row.Deleted, row.Last
			return err
		}
		row, err := r.q.TaskPurgeRetentionAfter(ctx, tx, db.TaskPurgeRetentionAfterParams{After: after, Size: size})
		deleted, last = row.Deleted, row.Last
		return err
	})
	if err != nil {
		return 0, "", mapError("purge by retention", err)
	}
	if citus {
		last = ""
	}
	return deleted, last, nil
}

// waitingAheadRead is how many READY tasks before a task Waiting reads at most, to
// count the due ones (TaskWaiting).
const waitingAheadRead = 20000

// WaitReason is one thing that holds a READY task back (Repository.Waiting).
type WaitReason struct {
	// Kind names the reason: "paused", "delayed", "concurrency", "key_concurrency",
	// "rate", "ahead" (due tasks polled before it) or "none".
	Kind string
	// Text says it for an operator, with the figures.
	Text string
}

// keyOf names a task's concurrency key in Waiting's text: ”, which a keyed topic's push
// stores for none, takes its turn as a key does.
func keyOf(key string) string {
	if key == "" {
		return "pushed without a concurrency key as it was"
	}
	return fmt.Sprintf("of its concurrency key %q", key)
}

// Waiting says what holds a READY task back, one reason per entry, for an operator
// asking why it has not started: its topic paused, its delay, the topic's concurrency
// limit reached, its concurrency key at the per-key limit, the rate limit's bucket empty,
// the due tasks polled before it (in a topic polled by key, for a task with a key,
// those of a higher priority and its key's before it: the keys take turns; counted
// among the first 20 000 READY tasks before it, so that a backlog of delayed tasks
// ahead is not read whole). It is empty when the task is
// not READY, and says so (Kind "none") when nothing holds it back: the next poll takes
// it. A poll condition of the processors (ManagerConfig.Condition) is theirs, not the
// database's, and is not named. One statement; it reads the topic's ACTIVE tasks and
// the READY ones ahead of the task, never its finished history.
func (r *Repository) Waiting(ctx context.Context, h Handle, topic string, sequence int64) ([]WaitReason, error) {
	if err := validTopic(topic); err != nil {
		return nil, err
	}
	w, err := r.q.TaskWaiting(ctx, h, db.TaskWaitingParams{Topic: topic, Sequence: sequence})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("why task %d of topic %q waits: %w", sequence, topic, ErrUnknownTask)
	}
	if err != nil {
		return nil, mapError(fmt.Sprintf("why task %d of topic %q waits", sequence, topic), err)
	}
	if State(w.State) != Ready {
		return nil, nil
	}
	var why []WaitReason
	add := func(kind, format string, args ...any) {
		why = append(why, WaitReason{Kind: kind, Text: fmt.Sprintf(format, args...)})
	}
	if !w.TopicActive {
		add("paused", "the topic is paused")
	}
	if w.NotBefore != nil && time.Until(*w.NotBefore) > 0 {
		add("delayed", "delayed until %s", w.NotBefore.UTC().Format(time.RFC3339Nano))
	}
	if w.Concurrency != nil && w.Active >= int64(*w.Concurrency) {
		add("concurrency", "the topic's concurrency limit: %d of %d tasks ACTIVE", w.Active, *w.Concurrency)
	}
	if w.KeyConcurrency != nil && w.ConcurrencyKey != nil && *w.ConcurrencyKey != "" && w.KeyActive >= int64(*w.KeyConcurrency) {
		add("key_concurrency", "the per-key limit: %d of %d tasks of concurrency key %q ACTIVE", w.KeyActive, *w.KeyConcurrency, *w.ConcurrencyKey)
	}
	if w.Rate != nil && w.Tokens >= 0 && w.Tokens < 1 && w.RatePeriodMs != nil {
		next := time.Duration((1 - w.Tokens) * float64(*w.RatePeriodMs) / float64(*w.Rate) * float64(time.Millisecond))
		add("rate", "the rate limit of %d per %v: the next start in %v", *w.Rate,
			time.Duration(*w.RatePeriodMs)*time.Millisecond, next.Round(time.Millisecond))
	}
	switch {
	case w.Keyed && w.Ahead > 0:
		// its key takes turns with the others: what goes first is a higher priority's
		// tasks and its own key's before it
		at := ""
		if w.AheadRead >= waitingAheadRead {
			at = "at least "
		}
		add("ahead", "%s%d due READY tasks go before it: of a higher priority, or %s before it (the topic takes its keys in turns)",
			at, w.Ahead, keyOf(*w.ConcurrencyKey))
	case w.Keyed && w.AheadRead >= waitingAheadRead:
		add("ahead", "at least %d READY tasks go before it, of a higher priority or %s, the first %d of them delayed (those beyond were not read)",
			waitingAheadRead, keyOf(*w.ConcurrencyKey), waitingAheadRead)
	case w.Keyed:
	case w.AheadRead >= waitingAheadRead && w.Ahead > 0:
		add("ahead", "at least %d due READY tasks are ahead of it in poll order (among the first %d READY tasks before it; those beyond were not read)",
			w.Ahead, waitingAheadRead)
	case w.AheadRead >= waitingAheadRead:
		add("ahead", "at least %d READY tasks are ahead of it in poll order, the first %d of them delayed (those beyond were not read)",
			waitingAheadRead, waitingAheadRead)
	case w.Ahead > 0:
		add("ahead", "%d due READY tasks are ahead of it in poll order", w.Ahead)
	}
	if len(why) == 0 {
		add("none", "nothing: the next poll of the topic takes it")
	}
	return why, nil
}

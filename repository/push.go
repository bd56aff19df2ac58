package repository

import (
	"context"
	"fmt"
	"time"

	"unicode/utf8"

	"github.com/pgtask/pgtask/db"
)

// Push inserts tasks into a topic with the given insertion mode, as ONE statement
// whatever the batch size (insertion modes: see Insertion). Sequences follow the input order and so do the
// returned tasks. With Replace and Supersede every occurrence of an identifier but the
// last is inserted REDUNDANT; with Delete only the last is inserted, so the result can be
// shorter than the input. Older tasks of the same identifiers are changed as the
// insertion matrix says; ACTIVE ones are never touched and rows locked by a concurrent
// transaction are skipped. Listeners of the topic are notified at commit.
//
// An empty batch does nothing. An unknown topic returns ErrUnknownTopic and a push that
// would take the topic above its queue cap a *QueueFullError; in both cases nothing is
// written and the caller's transaction stays usable. The cap counts a push net of the
// READY tasks it ends (Replace, Supersede, Delete): one that ends as many as it adds is
// never refused, nor is one that adds only suspended tasks.
func (r *Repository) Push(ctx context.Context, h Handle, topic string, insertion Insertion, creations ...Creation) ([]Task, error) {
	return r.pushAs(ctx, h, "push", topic, insertion, creations)
}

// pushAs is Push for the operation op, which a refusal of the queue cap names
// (QueueFullError.Op).
func (r *Repository) pushAs(ctx context.Context, h Handle, op, topic string, insertion Insertion, creations []Creation) ([]Task, error) {
	if len(creations) == 0 {
		return nil, nil
	}
	if err := validTopic(topic); err != nil {
		return nil, err
	}
	if !insertion.Valid() {
		return nil, invalid("unknown insertion %d", insertion)
	}
	arg := db.TaskPushParams{
		Topic:        topic,
		Insertion:    int16(insertion),
		Identifiers:  make([]string, len(creations)),
		Inputs:       make([]string, len(creations)),
		Refs:         make([]string, len(creations)),
		Suspended:    make([]bool, len(creations)),
		Priorities:   make([]int16, len(creations)),
		NotBeforesUs: make([]int64, len(creations)),
		DelaysMs:     make([]int64, len(creations)),
	}
	for i, c := range creations {
		if c.ConcurrencyKey != "" {
			if arg.Keys == nil {
				arg.Keys = make([]string, len(creations)) // only when some task has a key
			}
			arg.Keys[i] = c.ConcurrencyKey
		}
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("push to topic %q: creation %d: %w", topic, i, err)
		}
		arg.Identifiers[i] = c.Identifier
		arg.Inputs[i] = c.Input
		arg.Refs[i] = c.Reference
		arg.Suspended[i] = c.Suspended
		arg.Priorities[i] = c.Priority
		if !c.NotBefore.IsZero() {
			arg.NotBeforesUs[i] = max(c.NotBefore.UnixMicro(), 1)
		} else if c.Delay > 0 {
			arg.DelaysMs[i] = max(c.Delay.Milliseconds(), 1)
		}
	}
	rows, err := r.push(ctx, h, arg)
	if err != nil {
		return nil, mapError(fmt.Sprintf("push to topic %q", topic), err)
	}
	if len(rows) == 0 {
		// Nothing was written: the topic is unknown or the cap refused the batch.
		return nil, r.queueFull(ctx, h, op, topic, livePushed(insertion, creations))
	}
	return pushedTasks(topic, insertion, creations, rows)
}

// queueFull returns the *QueueFullError of op, which the queue cap of topic refused with
// n tasks to make READY; or ErrUnknownTopic when there is no such topic, which refuses
// the statements of a push too.
func (r *Repository) queueFull(ctx context.Context, h Handle, op, topic string, n int) error {
	t, err := r.Topic(ctx, h, topic)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return &QueueFullError{Op: op, Topic: topic, Cap: t.QueueCap, Pushed: n}
}

// maxNotBefore is the latest not-before time a push accepts.
var maxNotBefore = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)

// Validate returns nil when Push would accept the creation (whatever the topic): an
// identifier as ValidateIdentifier wants, a reference of at most MaxReferenceLength
// characters, a delay that is not negative, a not-before time no later than the year
// 9999, and input and reference of valid UTF-8 without a NUL byte (they
// are refused, never rewritten). Otherwise its error wraps ErrInvalid.
func (c Creation) Validate() error {
	if err := validIdentifier(c.Identifier); err != nil {
		return err
	}
	if err := validReference(c.Reference); err != nil {
		return err
	}
	if c.Delay < 0 {
		return invalid("delay %v is negative", c.Delay)
	}
	// beyond it the microseconds the push sends overflow (after the year 294 247, into
	// 1970: a task due at once), and a time the JSON of the REST API cannot write
	if c.NotBefore.After(maxNotBefore) {
		return invalid("not-before %s is after the year 9999", c.NotBefore.UTC().Format(time.RFC3339))
	}
	if p := unstorable(c.Input); p != "" {
		return invalid("input %s", p)
	}
	if err := ValidateConcurrencyKey(c.ConcurrencyKey); err != nil {
		return err
	}
	return nil
}

// MaxConcurrencyKeyLength is the longest concurrency key, in characters.
const MaxConcurrencyKeyLength = 250

// ValidateConcurrencyKey returns nil for a concurrency key Push accepts: empty (none), or
// valid UTF-8 without a NUL byte, of at most MaxConcurrencyKeyLength characters. Otherwise its error wraps
// ErrInvalid.
func ValidateConcurrencyKey(key string) error {
	if p := unstorable(key); p != "" {
		return invalid("concurrency key %s", p)
	}
	if n := utf8.RuneCountInString(key); n > MaxConcurrencyKeyLength {
		return invalid("concurrency key is %d characters long, at most %d allowed", n, MaxConcurrencyKeyLength)
	}
	return nil
}

// push runs the push: pushPlain, or on Citus pushCitus.
func (r *Repository) push(ctx context.Context, h Handle, arg db.TaskPushParams) ([]db.TaskPushRow, error) {
	return either(ctx, r, h, func() ([]db.TaskPushRow, error) { return r.pushCitus(ctx, h, arg) },
		func() ([]db.TaskPushRow, error) { return r.pushPlain(ctx, h, arg) })
}

// pushPlain runs TaskPush, or for APPEND the leaner TaskPushAppend (the same without the
// reads and writes of older tasks, a third of the planning).
func (r *Repository) pushPlain(ctx context.Context, h Handle, arg db.TaskPushParams) ([]db.TaskPushRow, error) {
	if Insertion(arg.Insertion) != Append {
		return r.q.TaskPush(ctx, h, arg)
	}
	appended, err := r.q.TaskPushAppend(ctx, h, db.TaskPushAppendParams{
		Topic: arg.Topic, Identifiers: arg.Identifiers, Inputs: arg.Inputs, Refs: arg.Refs,
		Suspended: arg.Suspended, Priorities: arg.Priorities, NotBeforesUs: arg.NotBeforesUs,
		DelaysMs: arg.DelaysMs, Keys: arg.Keys,
	})
	if err != nil {
		return nil, err
	}
	rows := make([]db.TaskPushRow, len(appended))
	for i, a := range appended {
		rows[i] = db.TaskPushRow(a)
	}
	return rows, nil
}

// pushedTasks builds the pushed tasks from the creations and what TaskPush returns (the
// columns the database decided). The rows come in sequence order, which is the order of
// the creations inserted: all of them, except that DELETE inserts only the last
// occurrence of each identifier.
func pushedTasks(topic string, insertion Insertion, creations []Creation, rows []db.TaskPushRow) ([]Task, error) {
	var last map[string]int
	if insertion == Delete {
		last = lastOccurrence(creations)
	}
	tasks := make([]Task, 0, len(rows))
	for i, c := range creations {
		if last != nil && last[c.Identifier] != i {
			continue
		}
		k := len(tasks)
		if k >= len(rows) || rows[k].Identifier != c.Identifier {
			return nil, fmt.Errorf("push to topic %q: the inserted rows do not follow the creations (creation %d)", topic, i)
		}
		row := rows[k]
		tasks = append(tasks, Task{
			Topic: topic, Sequence: row.Sequence, Identifier: c.Identifier,
			State: State(row.State), Descent: State(row.Descent), Created: row.Created,
			Input: c.Input, Reference: c.Reference, Priority: c.Priority, NotBefore: timeOf(row.NotBefore),
			ConcurrencyKey: c.ConcurrencyKey,
		})
	}
	if len(tasks) != len(rows) {
		return nil, fmt.Errorf("push to topic %q: %d rows inserted for %d creations", topic, len(rows), len(tasks))
	}
	return tasks, nil
}

// lastOccurrence maps each identifier to the index of its last creation.
func lastOccurrence(creations []Creation) map[string]int {
	last := make(map[string]int, len(creations))
	for i, c := range creations {
		last[c.Identifier] = i
	}
	return last
}

// livePushed counts the creations a push would insert READY (what the cap limits, before
// the READY tasks the push ends are taken off).
func livePushed(insertion Insertion, creations []Creation) int {
	last := lastOccurrence(creations)
	n := 0
	for i, c := range creations {
		if !c.Suspended && (insertion == Append || last[c.Identifier] == i) {
			n++
		}
	}
	return n
}

package repository

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/db"
)

// Reassign gives tasks in EXPIRED..SUCCEEDED the state of result, all or
// nothing: an unknown task or one in another state fails the call with a *TaskError.
// It wakes the topic's processors (a WORK notification, at the commit): the tasks a
// poll condition held behind the reassigned ones may be free.
func (r *Repository) Reassign(ctx context.Context, h Handle, topic string, result Result, sequences ...int64) ([]Task, error) {
	if len(sequences) == 0 {
		return nil, nil
	}
	if err := validTopic(topic); err != nil {
		return nil, err
	}
	if !result.Valid() {
		return nil, invalid("unknown result %d", result)
	}
	if err := validSequences(sequences); err != nil {
		return nil, fmt.Errorf("reassign in topic %q: %w", topic, err)
	}
	rows, err := r.q.TaskReassign(ctx, h, db.TaskReassignParams{Topic: topic, Result: int16(result), Sequences: sequences})
	if err != nil {
		return nil, mapError(fmt.Sprintf("reassign in topic %q", topic), err)
	}
	if len(rows) != len(sequences) {
		return nil, r.explainStates(ctx, h, "reassign", topic, sequences, State.Revivable, "EXPIRED..SUCCEEDED")
	}
	if err := r.wake(ctx, h, topic); err != nil {
		return nil, err
	}
	return sortedTasks(tasksFrom(rows), sequences), nil
}

// wake wakes the processors of topics whose tasks changed in a way that can free READY
// tasks a poll condition held back (reassigned; cancelled out of READY, EXPIRED or
// SUSPENDED; expired for good): the processors, whose polls found those tasks held
// back, would sleep until their pause interval. A
// WORK notification without a position sends them to the head of the topic: one poll
// each. One statement for every topic; sent at the caller's commit in a transaction, on
// a pool after the statement, which a failure to send does not undo (notify).
func (r *Repository) wake(ctx context.Context, h Handle, topics ...string) error {
	if len(topics) == 0 {
		return nil
	}
	err := sendNotifications(ctx, h, "SELECT count(pg_notify('task_notification', 'WORK ' || md5(t))) FROM unnest($1::text[]) t", topics)
	if err != nil {
		return mapError(fmt.Sprintf("wake the processors of topic %q", topics[0]), err)
	}
	return nil
}

// Hold locks the tasks of sequences in topic for the rest of h's transaction, and
// refuses them all unless each is in a state ok allows: a *TaskError of op naming each
// task gone (ErrUnknownTask) or in another state (ErrWrongState, the Detail saying want),
// as the all-or-nothing operations refuse. Run first in a transaction, it makes the
// operation that follows (Reassign, Recreate) meet the tasks as they were checked: a
// task an operator chose as SUSPENDED and that succeeded since is refused, where a
// Recreate would have made it READY and run it again. Outside a transaction it checks
// only.
func (r *Repository) Hold(ctx context.Context, h Handle, op, topic string, ok func(State) bool, want string, sequences ...int64) error {
	if len(sequences) == 0 {
		return nil
	}
	if err := validTopic(topic); err != nil {
		return err
	}
	if err := validSequences(sequences); err != nil {
		return fmt.Errorf("%s in topic %q: %w", op, topic, err)
	}
	rows, err := r.q.TaskHold(ctx, h, db.TaskHoldParams{Topic: topic, Sequences: sequences})
	if err != nil {
		return mapError(fmt.Sprintf("%s in topic %q", op, topic), err)
	}
	held := len(rows) == len(sequences)
	for _, row := range rows {
		held = held && ok(State(row.State))
	}
	if held {
		return nil
	}
	return r.explainStates(ctx, h, op, topic, sequences, ok, want)
}

// ReassignBatchSize is how many tasks one statement of ReassignAll changes.
const ReassignBatchSize = 10000

// ReassignAll gives every task of state from (EXPIRED..SUCCEEDED) within the inclusive
// sequence range the state of result, skipping rows locked by others, and returns how
// many tasks changed. State from may not be the one result leads to (ErrInvalid: those
// tasks have that result already). It changes at most ReassignBatchSize tasks a statement, so
// that no transaction of its own grows with the topic: on a pool each statement commits
// alone, and an error or a cancelled ctx keeps those before it, whose number it returns
// with the error; in a transaction (h a pgx.Tx) they commit or roll back with it.
func (r *Repository) ReassignAll(ctx context.Context, h Handle, topic string, from State, result Result, fromSequence, toSequence int64) (int64, error) {
	if err := validTopic(topic); err != nil {
		return 0, err
	}
	if !from.Revivable() {
		return 0, invalid("reassign from state %v: only EXPIRED..SUCCEEDED can be reassigned", from)
	}
	if !result.Valid() {
		return 0, invalid("unknown result %d", result)
	}
	if result.State() == from {
		return 0, invalid("reassign %v tasks to %v: they have that result already", from, result)
	}
	if err := validRange(fromSequence, toSequence); err != nil {
		return 0, err
	}
	var total int64
	for {
		n, err := r.q.TaskReassignAll(ctx, h, db.TaskReassignAllParams{
			Topic: topic, FromState: int16(from), Result: int16(result), FromSequence: fromSequence, ToSequence: toSequence,
			Size: r.reassignBatch,
		})
		if err != nil {
			op := fmt.Sprintf("reassign all in topic %q", topic)
			if total > 0 {
				op += fmt.Sprintf(" (after %d reassigned)", total)
			}
			return total, mapError(op, err)
		}
		total += n
		if n < r.reassignBatch {
			break
		}
	}
	if total > 0 {
		if err := r.wake(ctx, h, topic); err != nil {
			return total, err
		}
	}
	return total, r.knownTopic(ctx, h, "reassign all", topic, total)
}

// Recreate revives tasks in EXPIRED..SUCCEEDED, all or nothing. Modes
// RecreateAppend, RecreateReplace and RecreateSupersede mark the old rows RECREATED and
// push fresh copies (identifier, input, reference, priority, concurrency key) with that insertion; Reset
// flips the same rows back to READY with a fresh attempt budget. It returns old → new.
// Copies that would take the topic above its queue cap (counted as a push counts them,
// net of the READY tasks they replace) refuse the whole call with a *QueueFullError of
// Op "recreate": no task is marked nor copied. So does a Reset of tasks that would (each
// counts as one more READY task), with Op "reset": no task is reset.
func (r *Repository) Recreate(ctx context.Context, h Handle, topic string, mode RecreateMode, sequences ...int64) ([]Revival, error) {
	if len(sequences) == 0 {
		return nil, nil
	}
	if err := validTopic(topic); err != nil {
		return nil, err
	}
	if err := validSequences(sequences); err != nil {
		return nil, fmt.Errorf("recreate in topic %q: %w", topic, err)
	}
	if mode == Reset {
		arg := db.TaskResetParams{Topic: topic, Sequences: sequences}
		rows, err := either(ctx, r, h, func() ([]db.TaskResetRow, error) { return r.resetCitus(ctx, h, arg) },
			func() ([]db.TaskResetRow, error) { return r.q.TaskReset(ctx, h, arg) })
		if err != nil {
			return nil, mapError(fmt.Sprintf("reset in topic %q", topic), err)
		}
		if len(rows) != len(sequences) {
			return nil, r.explainStates(ctx, h, "reset", topic, sequences, State.Revivable, "EXPIRED..SUCCEEDED")
		}
		return r.resetRevivals(ctx, h, topic, tasksFrom(rows))
	}
	insertion, err := recreateInsertion(mode)
	if err != nil {
		return nil, err
	}
	var revivals []Revival
	err = inTx(ctx, h, func(tx pgx.Tx) error {
		rows, err := r.q.TaskRecreateMark(ctx, tx, db.TaskRecreateMarkParams{Topic: topic, Sequences: sequences})
		if err != nil {
			return mapError(fmt.Sprintf("recreate in topic %q", topic), err)
		}
		if len(rows) != len(sequences) {
			return r.explainStates(ctx, tx, "recreate", topic, sequences, State.Revivable, "EXPIRED..SUCCEEDED")
		}
		revivals, err = r.pushCopies(ctx, tx, topic, insertion, tasksFrom(rows))
		return err
	})
	return revivals, err
}

// RecreateState revives up to size tasks of state (EXPIRED..SUCCEEDED), oldest first,
// within the inclusive sequence range, skipping rows locked by others; modes and the
// queue cap as for Recreate: the tasks found are revived all together or not at all.
func (r *Repository) RecreateState(ctx context.Context, h Handle, topic string, state State, mode RecreateMode, fromSequence, toSequence int64, size int) ([]Revival, error) {
	if err := validTopic(topic); err != nil {
		return nil, err
	}
	if !state.Revivable() {
		return nil, invalid("recreate state %v: only EXPIRED..SUCCEEDED can be revived", state)
	}
	if err := validRange(fromSequence, toSequence); err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, invalid("size %d is negative", size)
	}
	if size == 0 {
		return nil, nil
	}
	size = min(size, 1<<31-1)
	if mode == Reset {
		citus, err := r.onCitus(ctx, h)
		if err != nil {
			return nil, mapError(fmt.Sprintf("reset in topic %q", topic), err)
		}
		rows, err := r.q.TaskResetState(ctx, h, db.TaskResetStateParams{
			Topic: topic, State: int16(state), FromSequence: fromSequence, ToSequence: toSequence, Size: int32(size),
			Notify: !citus, // on Citus, notifyOnCitus below
		})
		if err != nil {
			return nil, mapError(fmt.Sprintf("reset in topic %q", topic), err)
		}
		if err := r.knownTopic(ctx, h, "reset", topic, int64(len(rows))); err != nil {
			return nil, err
		}
		revivals, err := r.resetRevivals(ctx, h, topic, tasksFrom(rows))
		if err == nil && len(revivals) > 0 {
			err = r.notifyOnCitus(ctx, h, "WORK", topic)
		}
		return revivals, err
	}
	insertion, err := recreateInsertion(mode)
	if err != nil {
		return nil, err
	}
	var revivals []Revival
	err = inTx(ctx, h, func(tx pgx.Tx) error {
		rows, err := r.q.TaskRecreateMarkState(ctx, tx, db.TaskRecreateMarkStateParams{
			Topic: topic, State: int16(state), FromSequence: fromSequence, ToSequence: toSequence, Size: int32(size),
		})
		if err != nil {
			return mapError(fmt.Sprintf("recreate in topic %q", topic), err)
		}
		if err := r.knownTopic(ctx, tx, "recreate", topic, int64(len(rows))); err != nil {
			return err
		}
		revivals, err = r.pushCopies(ctx, tx, topic, insertion, tasksFrom(rows))
		return err
	})
	return revivals, err
}

func recreateInsertion(mode RecreateMode) (Insertion, error) {
	switch mode {
	case RecreateAppend:
		return Append, nil
	case RecreateReplace:
		return Replace, nil
	case RecreateSupersede:
		return Supersede, nil
	}
	return 0, invalid("unknown recreate mode %d", mode)
}

// pushCopies pushes fresh copies of old (in sequence order) and pairs them up.
func (r *Repository) pushCopies(ctx context.Context, h Handle, topic string, insertion Insertion, old []Task) ([]Revival, error) {
	if len(old) == 0 {
		return nil, nil
	}
	creations := make([]Creation, len(old))
	for i, t := range old {
		creations[i] = Creation{Identifier: t.Identifier, Input: t.Input, Reference: t.Reference, Priority: t.Priority,
			ConcurrencyKey: t.ConcurrencyKey}
	}
	fresh, err := r.pushAs(ctx, h, "recreate", topic, insertion, creations)
	if errors.As(err, new(*QueueFullError)) {
		return nil, err // it names the recreate
	}
	if err != nil {
		return nil, fmt.Errorf("recreate: %w", err)
	}
	revivals := make([]Revival, len(old))
	for i := range old {
		revivals[i] = Revival{Old: old[i], New: fresh[i]}
	}
	return revivals, nil
}

// resetRevivals pairs each task a reset returned with itself; tasks that are not READY
// are the ones the queue cap refused to reset, as they are (TaskReset).
func (r *Repository) resetRevivals(ctx context.Context, h Handle, topic string, tasks []Task) ([]Revival, error) {
	if len(tasks) > 0 && tasks[0].State != Ready {
		return nil, r.queueFull(ctx, h, "reset", topic, len(tasks))
	}
	revivals := make([]Revival, len(tasks))
	for i, t := range tasks {
		revivals[i] = Revival{Old: t, New: t}
	}
	return revivals, nil
}

// sortedTasks orders tasks like sequences.
func sortedTasks(tasks []Task, sequences []int64) []Task {
	at := make(map[int64]Task, len(tasks))
	for _, t := range tasks {
		at[t.Sequence] = t
	}
	out := make([]Task, 0, len(sequences))
	for _, s := range sequences {
		if t, ok := at[s]; ok {
			out = append(out, t)
		}
	}
	return out
}

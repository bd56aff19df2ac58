package pgtasktest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// RunTimeout bounds how long Run and Work wait for a handler to decide every task when
// their context has no deadline of its own.
const RunTimeout = time.Minute

// workWait bounds Work's statements before the handler's (RunTimeout; tests shorten it).
var workWait = RunTimeout

// NewTasks makes tasks of topic from creations as a poll would lease them, without a
// database: ACTIVE, attempt 1, sequences 1, 2, 3… in order, created now, with the
// creation's identifier, input, reference, priority and concurrency key, and its
// NotBefore (or now plus its Delay) when it has one. Give them to Run. They stay in the
// order given: a poll leases by priority (lower first) and then by sequence (oldest
// first, or newest under ManagerConfig.Order LIFO), so give creations of several
// priorities in that order when the handler depends on it.
func NewTasks(topic string, creations ...repository.Creation) []repository.Task {
	now := time.Now()
	tasks := make([]repository.Task, len(creations))
	for i, c := range creations {
		notBefore := c.NotBefore
		if notBefore.IsZero() && c.Delay > 0 {
			notBefore = now.Add(c.Delay)
		}
		tasks[i] = repository.Task{Topic: topic, Sequence: int64(i + 1), Identifier: c.Identifier, State: repository.Active,
			Descent: repository.Ready, Owner: "pgtasktest", Created: now, Input: c.Input, Reference: c.Reference,
			Priority: c.Priority, ConcurrencyKey: c.ConcurrencyKey, NotBefore: notBefore, Attempt: 1}
	}
	return tasks
}

// JSON returns v encoded as JSON, for a task's input (what processor.Typed decodes); it
// fails the test if v does not encode.
func JSON(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatalf("pgtasktest.JSON: %v", err)
	}
	return string(b)
}

// Run hands tasks to h as one batch outside a processor (processor.NewBatch), waits
// until h has decided every task, and returns what it reported: the decisions, the error
// it failed the batch with, the follow-ups it declared. Nothing touches a database, so
// handlers that only compute can be tested alone; a handler that reports from other
// goroutines (Buffer, or one of your own) is waited for. A panic in h fails its batch,
// as in a processor, and fails the test when it came after every task was decided (it
// fails no task then, and a processor logs it as an error; one on a Buffer's worker,
// after the Buffer's Handle returned, is not seen); a handler that calls t.FailNow or
// t.Fatal (which end the handler's goroutine, not the test's) fails the test at once.
// Run fails the test when the tasks are not one batch (two of one sequence, or of
// different topics) or when h has not decided every task (or not returned, ignoring its
// context) by the end of ctx, or RunTimeout when ctx has no deadline, or when the batch
// was handed back before h began its tasks (a Buffer stopped: Outcome.HandedBack).
func Run(ctx context.Context, tb testing.TB, h processor.Handler, tasks ...repository.Task) processor.Outcome {
	tb.Helper()
	if nilHandler(h) {
		tb.Fatalf("pgtasktest.Run: the handler is nil (a processor refuses it: Handler is required)")
	}
	if len(tasks) == 0 {
		tb.Fatalf("pgtasktest.Run: no tasks (a processor never hands a handler an empty batch)")
	}
	topic := "" // the first topic named: a task without one is the batch's (NewBatch)
	for _, t := range tasks {
		if t.Topic != "" {
			topic = t.Topic
			break
		}
	}
	return run(ctx, tb, h, RunTimeout, topic, tasks)
}

// run is Run with the timeout given.
func run(ctx context.Context, tb testing.TB, h processor.Handler, timeout time.Duration, topic string, tasks []repository.Task) processor.Outcome {
	tb.Helper()
	ctx, cancel := handlerContext(ctx, timeout)
	defer cancel()
	// a copy: a handler may reorder its batch's tasks, and the caller's slice (tasks...)
	// pairs them with what it expects
	b, err := processor.NewBatch(ctx, topic, slices.Clone(tasks))
	if err != nil {
		tb.Fatalf("pgtasktest.Run: %v", err)
	}
	return handle(ctx, tb, "Run", h, b)
}

// exitFailed lists the tasks o failed because the handler ended its goroutine.
func exitFailed(o processor.Outcome) []int64 {
	var failed []int64
	for seq, d := range o.Decisions {
		if d.Result == repository.Failure && d.Message == processor.ErrHandlerExited.Error() {
			failed = append(failed, seq)
		}
	}
	slices.Sort(failed)
	return failed
}

// nilHandler reports whether h is no handler: nil, or a nil pointer, function or map in
// the interface (a nil TaskFunc or *Buffered), which a processor refuses and which would
// here fail every task as a handler's panic.
func nilHandler(h processor.Handler) bool {
	if h == nil {
		return true
	}
	v := reflect.ValueOf(h)
	switch v.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Slice, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// handlerContext is ctx, or ctx ending after timeout when it has no deadline: the
// context of a batch and its handler. The handler gets that end too: one that waits on
// its context (most synchronous ones do) would otherwise never return.
func handlerContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, timeout)
}

// handle runs h on b and waits for every decision until ctx, b's (handlerContext),
// ends.
func handle(ctx context.Context, tb testing.TB, fn string, h processor.Handler, b *processor.Batch) processor.Outcome {
	tb.Helper()
	// On a goroutine of its own, so that a handler that ignores its context (blocked on
	// a channel, say) fails the test at the end of ctx rather than hanging it until go
	// test's -timeout; such a handler's goroutine is left behind.
	// A handler that calls t.FailNow, t.Fatal or t.SkipNow ends its own goroutine
	// (runtime.Goexit) with tasks undecided: said at once, not at the end of ctx.
	// A panic after every task was decided fails no task (the batch is reported): it
	// fails the test, which would otherwise pass on decisions made before the bug.
	returned := make(chan struct{})
	var exited []int64 // the tasks undecided when the handler's goroutine exited
	var late string    // a panic after every task was decided, with its stack
	go func() {
		defer close(returned)
		normal := false
		defer func() {
			if r := recover(); r != nil {
				if len(b.Outcome().Undecided) == 0 || b.Fail(fmt.Errorf("handler panicked: %v", r)) != nil {
					late = fmt.Sprintf("%v\n%s", r, debug.Stack())
				}
			} else if !normal {
				exited = append([]int64{}, b.Outcome().Undecided...)
				_ = b.Fail(errors.New("the handler's goroutine exited (runtime.Goexit)"))
			}
		}()
		h.Handle(ctx, b)
		normal = true
	}()
	goexited := func() { // once returned is closed
		if late != "" {
			tb.Fatalf("pgtasktest.%s: the handler panicked after deciding every task: %s", fn, late)
		}
		if exited == nil {
			return
		}
		if tb.Skipped() {
			tb.SkipNow()
		}
		// the tasks a handler on Run's goroutine had begun are failed before the
		// kit sees the exit (a Buffer stopped runs it there): undecided too
		exited = append(exited, exitFailed(b.Outcome())...)
		slices.Sort(exited)
		exited = slices.Compact(exited)
		undecided := fmt.Sprintf("with tasks undecided %v", exited)
		if len(exited) == 0 {
			undecided = "after deciding every task"
		}
		tb.Fatalf("pgtasktest.%s: the handler ended its goroutine (t.FailNow, t.Fatal, runtime.Goexit: they end the goroutine that calls them, here the handler's) %s", fn, undecided)
	}
	// decidedFirst: every task decided while the context was live, seen as it happened
	// (a handler that decides as its context ends is not taken for one that decided in
	// time)
	decidedFirst := false
	decided := b.Done()
	ended := false // the context ended before the handler returned
wait:
	for {
		select {
		case <-returned:
			break wait
		case <-decided:
			decidedFirst = ctx.Err() == nil
			decided = nil
		case <-ctx.Done():
			ended = true
			break wait
		}
	}
	if ended {
		// a handler that waits on its context returns at once: a moment for it
		grace := time.NewTimer(time.Second)
		defer grace.Stop()
		select {
		case <-returned:
		case <-grace.C:
			tb.Fatalf("pgtasktest.%s: the handler did not return by the end of its context (%v), tasks undecided %v", fn, ctx.Err(), b.Outcome().Undecided)
		}
	}
	goexited()
	outcome := func() processor.Outcome {
		o := b.Outcome()
		if failed := exitFailed(o); len(failed) > 0 {
			// on a Buffer's worker, after Handle returned: the tasks it had begun
			// failed, the others handed back
			tb.Fatalf("pgtasktest.%s: the handler ended its goroutine (t.FailNow, t.Fatal, runtime.Goexit: they end the goroutine that calls them, here a Buffer worker's) with tasks undecided %v (failed), %v handed back", fn, failed, o.HandedBack)
		}
		if len(o.HandedBack) > 0 {
			// read as failures (a snooze's Result is the zero value) by a test that
			// expects one, the handler never having seen them
			tb.Fatalf("pgtasktest.%s: tasks %v were handed back before the handler began them: the Buffer that runs it stopped (Buffered.Stop, or the shutdown of the last processor that shares it)", fn, o.HandedBack)
		}
		return o
	}
	if !ended {
		// returned before its context ended (or as it did: the select above picks either
		// when both are ready), every task decided: in time, whatever ctx says now
		select {
		case <-b.Done():
			return outcome()
		default:
		}
	}
	select {
	case <-b.Done():
	case <-ctx.Done():
	}
	select { // both may be ready: say which
	case <-b.Done():
		if ctx.Err() == nil {
			return outcome()
		}
		if decidedFirst {
			tb.Fatalf("pgtasktest.%s: the handler decided every task but returned only once its context had ended (%v): it holds its worker until it returns", fn, ctx.Err())
		}
		tb.Fatalf("pgtasktest.%s: the handler decided only once its context had ended: %v", fn, ctx.Err())
	default:
		tb.Fatalf("pgtasktest.%s: the handler did not decide tasks %v: %v", fn, b.Outcome().Undecided, ctx.Err())
	}
	return processor.Outcome{}
}

// WorkResult is what Work did.
type WorkResult struct {
	// Tasks are the tasks Work pushed, as stored after their decisions were committed in
	// the transaction (SUCCEEDED, FAILED, READY again for a retry or a snooze…), in push
	// order.
	Tasks []repository.Task
	// Outcome is what the handler reported.
	Outcome processor.Outcome
	// Refused is why the decisions and follow-ups were refused (a follow-up to an unknown
	// topic or a full queue, bad input): the tasks were then failed "decisions could not
	// be committed", under the topic's retry policy, as a processor fails them; nil when
	// they committed.
	Refused error
}

// Work runs a handler on new tasks inside tx, as a processor would: it creates topic if
// it does not exist, pushes creations (Append), leases them, hands them to h as one
// batch, and commits its decisions and follow-ups — all in tx, which the test inspects
// and then rolls back. The topic's retry policy applies: a failure with attempts left is
// READY again. The handler runs outside tx: what it reads through a pool of its own does
// not see the tasks, and what it writes there commits on its own and stays after the
// rollback. Work fails the test when
// the lease does not get exactly the pushed tasks (the topic holds other READY tasks, a
// creation is delayed or suspended, or a limit of the topic (concurrency, per key, rate)
// leases fewer), when h does not decide them in time or the batch was handed back (see
// Run), or when a follow-up deleted one of the tasks (WorkResult.Tasks holds one per
// creation). Decisions or follow-ups refused (a follow-up to an unknown topic or a full
// queue) fail every task of the batch, under the retry policy, as a processor does with
// a report refused whole (a processor that took the decisions in parts, a handler's
// decisions reported apart, fails only the refused part's): WorkResult.Refused says why. Creating the topic waits for any
// other open transaction that created it, and a limited topic's poll for one that polled
// it (tx holds the topic's turn until it ends): Work fails the test after RunTimeout
// saying so, rather than waiting for go test's -timeout.
func Work(ctx context.Context, tb testing.TB, tx pgx.Tx, h processor.Handler, topic string, creations ...repository.Creation) WorkResult {
	tb.Helper()
	if nilHandler(h) {
		tb.Fatalf("pgtasktest.Work: the handler is nil (a processor refuses it: Handler is required)")
	}
	if len(creations) == 0 {
		tb.Fatalf("pgtasktest.Work: no creations (a processor never hands a handler an empty batch)")
	}
	reader := newReader()
	// The topic's creation waits for another open transaction that created it, and a
	// limited topic's poll for one that polled it (its turn is held to the end of the
	// transaction): one the test holds open would hang it until go test's -timeout.
	sctx, cancel := context.WithTimeout(ctx, workWait) // ctx's deadline when earlier
	defer cancel()
	waited := func(step string, err error) {
		tb.Helper()
		if sctx.Err() != nil && ctx.Err() == nil {
			tb.Fatalf("pgtasktest.Work: %s of topic %q waited %v: another open transaction holds it (one that created the topic, or polled it under a limit, and has not ended: Work's own transactions of earlier calls too): %v",
				step, topic, workWait, err)
		}
		tb.Fatalf("pgtasktest.Work: %v", err)
	}
	if _, err := reader.CreateTopic(sctx, tx, topic); err != nil {
		waited("the creation", err)
	}
	pushed, err := reader.Push(sctx, tx, topic, repository.Append, creations...)
	if err != nil {
		waited("a push", err)
	}
	leased, err := reader.Poll(sctx, tx, topic, repository.FIFO, repository.None, len(pushed))
	if err != nil {
		waited("the poll", err)
	}
	want, got := sequencesOf(pushed), sequencesOf(leased)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		tb.Fatalf("pgtasktest.Work: pushed tasks %v but leased %v: the topic holds other READY tasks, a creation is delayed or suspended, or a limit of the topic (concurrency, per key, rate) leases fewer", want, got)
	}
	hctx, cancel := handlerContext(ctx, RunTimeout)
	defer cancel()
	// a copy, as Run's: the completions below are made from leased
	b, err := processor.NewBatch(hctx, topic, slices.Clone(leased))
	if err != nil {
		tb.Fatalf("pgtasktest.Work: %v", err)
	}
	outcome := handle(hctx, tb, "Work", h, b)
	completions := make([]repository.Completion, len(leased))
	for i, t := range leased {
		completions[i] = t.Decide(outcome.Decisions[t.Sequence])
	}
	var refused error
	err = pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error { // a savepoint: all or nothing
		if _, err := reader.Complete(ctx, sp, topic, completions...); err != nil {
			return err
		}
		for _, f := range outcome.FollowUps {
			var err error
			if f.Push {
				_, err = reader.Push(ctx, sp, f.Topic, f.Insertion, f.Creations...)
			} else {
				_, err = reader.Junction(ctx, sp, f.Topic, f.Junction, f.Groups...)
			}
			if err != nil {
				return fmt.Errorf("follow-up of topic %q: %w", f.Topic, err)
			}
		}
		return nil
	})
	if refusal(err) {
		// as a processor's completer: the tasks are still the lease's, failed with the
		// reason, without the follow-ups
		refused = err
		failed := make([]repository.Completion, len(leased))
		for i, t := range leased {
			failed[i] = t.Decide(repository.Fail(fmt.Errorf("decisions could not be committed: %w", err)))
		}
		err = pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
			_, err := reader.Complete(ctx, sp, topic, failed...)
			return err
		})
	}
	if err != nil {
		tb.Fatalf("pgtasktest.Work: the decisions could not be committed: %v", err)
	}
	stored, err := reader.GetMany(ctx, tx, topic, sequencesOf(pushed)...)
	if err != nil {
		tb.Fatalf("pgtasktest.Work: %v", err)
	}
	byPush := make([]repository.Task, 0, len(stored))
	for _, p := range pushed {
		i := slices.IndexFunc(stored, func(s repository.Task) bool { return s.Sequence == p.Sequence })
		if i < 0 {
			// the rest would shift: Tasks[i] would be another creation's task
			tb.Fatalf("pgtasktest.Work: task %d (creation %d, identifier %q) is gone once the decisions and follow-ups were committed (a follow-up pushed with Delete, say): WorkResult.Tasks has one task per creation; read the topic instead (RequireNotPushed)",
				p.Sequence, len(byPush), p.Identifier)
		}
		byPush = append(byPush, stored[i])
	}
	return WorkResult{Tasks: byPush, Outcome: outcome, Refused: refused}
}

// refusal reports whether err refuses decisions or follow-ups for what they are (the
// processor's completer fails the tasks then), rather than failing to reach the database.
func refusal(err error) bool {
	var te *repository.TaskError
	return errors.As(err, &te) || errors.Is(err, repository.ErrInvalid) || errors.Is(err, repository.ErrUnknownTopic) ||
		errors.Is(err, repository.ErrQueueFull)
}

func sequencesOf(tasks []repository.Task) []int64 {
	out := make([]int64, len(tasks))
	for i, t := range tasks {
		out[i] = t.Sequence
	}
	return out
}

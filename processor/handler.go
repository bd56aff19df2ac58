package processor

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"runtime/debug"
	"strings"

	"github.com/pgtask/pgtask/repository"
)

// Handler processes batches of leased tasks: Handle reports a decision for every task
// of the batch, one at a time (Batch.Decide) or together (Batch.Complete), or fails them
// (Batch.Fail), possibly from another goroutine after Handle returned. Each task's
// decision is committed in the manager's next flush, whatever its batch mates do; the
// Batch documentation gives the contract in full. A handler that panics, reports twice,
// never reports or ends its goroutine (runtime.Goexit, which t.FailNow calls) is
// contained: the tasks it left undecided fail with a message saying so (or are handed
// back, if it never started them) and the manager keeps running.
//
// ctx is cancelled when the manager's shutdown deadline passes; per-task contexts
// (Batch.Context) are also cancelled when the task is cancelled.
type Handler interface {
	// Handle processes batch; see Handler.
	Handle(ctx context.Context, batch *Batch)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, batch *Batch)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, batch *Batch) { f(ctx, batch) }

// Stopper is implemented by handlers that hold batches of their own: Stop is called when
// the manager begins a graceful shutdown, after polling stopped. (A Buffer, which may
// serve several managers, is stopped by the last of them to shut down.)
type Stopper interface {
	// Stop disposes of the batches the handler holds but has not started.
	Stop()
}

// TaskFunc handles a batch one task at a time, in poll order: each task gets its own
// context and its own decision, committed in the next flush while the function goes on
// with the next task (so a slow task holds up the tasks after it, never the commits of
// those before); a panic fails only that task. Once the manager is stopping, tasks not
// yet started are handed back (READY, no attempt used) at once, while the task running
// then finishes: other processors can take them without waiting for it. A task counts
// as started when the function is called on it: relieved of the batch (HandlerTimeout,
// the shutdown deadline), the manager fails the running task and hands back the rest.
type TaskFunc func(ctx context.Context, task repository.Task) repository.Decision

// Handle runs f over the batch's tasks in order, deciding each as it returns.
func (f TaskFunc) Handle(_ context.Context, batch *Batch) {
	if len(batch.Tasks) > 1 && !batch.drained.Load() {
		// the shutdown hands back the tasks behind the one running, without waiting
		// for it (a Buffer draining its batches runs them instead)
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-batch.Stopping():
				batch.handBackUnstarted()
			case <-done:
			}
		}()
	}
	for _, t := range batch.Tasks {
		select {
		case <-batch.Stopping():
			if !batch.drained.Load() {
				batch.handBack()
				return
			}
		default:
		}
		if !batch.begin(t.Sequence) {
			continue // decided meanwhile: the manager relieved us of it
		}
		ctx := batch.Context(t.Sequence)
		if context.Cause(ctx) == ErrTaskCancelled {
			// Cancelled before its turn (queued in a Buffer, or behind the batch's
			// other tasks): it ends FAILED cancelled whatever is decided, so its work
			// is not begun.
			_ = batch.Decide(t.Sequence, repository.Fail(ErrTaskCancelled))
			continue
		}
		_ = batch.Decide(t.Sequence, f.call(ctx, batch, t))
	}
}

func (TaskFunc) tracksStarts() {}

// call runs f on t; a panic fails t alone, reported as any handler's panic is (logged
// at ERROR with the stack, told to the listener: Batch.onPanic), the stack kept out of
// the task's output, which the API and the dashboard show.
func (f TaskFunc) call(ctx context.Context, batch *Batch, t repository.Task) (d repository.Decision) {
	defer func() {
		if r := recover(); r != nil {
			err := fmt.Errorf("handler panicked on task %d: %v", t.Sequence, r)
			if batch.onPanic != nil {
				batch.onPanic(err, r, debug.Stack())
			}
			d = repository.Fail(err)
		}
	}()
	return f(ctx, t)
}

// BatchFunc handles a whole batch at once: it returns a decision per task sequence, or
// an error that fails the whole batch.
type BatchFunc func(ctx context.Context, tasks []repository.Task) (map[int64]repository.Decision, error)

// Handle calls f and reports its outcome.
func (f BatchFunc) Handle(ctx context.Context, batch *Batch) {
	decisions, err := f(ctx, batch.Tasks)
	if err != nil {
		_ = batch.Fail(err)
		return
	}
	_ = batch.Complete(decisions)
}

// Typed returns a per-task handler that decodes each task's JSON input into a T before
// calling fn. A task whose input does not decode, or that has none, FAILS without retry
// (repository.FailFinal: the input will not change) with a message naming the task and
// what is wrong; the rest of the batch proceeds. The JSON
// null counts as no input unless a T can hold it (a pointer, map, slice or interface,
// or a type that decodes JSON itself: T or *T implements json.Unmarshaler, which is
// given the null to decide): decoded into a plain struct it would leave every field at
// its zero value.
func Typed[T any](fn func(ctx context.Context, task repository.Task, input T) repository.Decision) TaskFunc {
	t := reflect.TypeFor[T]()
	unmarshaler := reflect.TypeFor[json.Unmarshaler]()
	nullable := t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler)
	switch t.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
		nullable = true
	}
	return func(ctx context.Context, task repository.Task) repository.Decision {
		var input T
		if task.Input == "" {
			return repository.FailFinal(fmt.Errorf("task %d has no input: want JSON for %T", task.Sequence, input))
		}
		if !nullable && strings.TrimSpace(task.Input) == "null" {
			return repository.FailFinal(fmt.Errorf("task %d has the input null: want JSON for %T", task.Sequence, input))
		}
		if err := json.Unmarshal([]byte(task.Input), &input); err != nil {
			return repository.FailFinal(fmt.Errorf("decode input of task %d as %T: %w", task.Sequence, input, err))
		}
		return fn(ctx, task, input)
	}
}

package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgtask/pgtask/repository"
)

// Handler processes batches of leased tasks (design §7). Handle must, exactly once,
// either call batch.Complete with decisions or batch.Fail — possibly from another
// goroutine after Handle returned. A handler that panics, reports twice or never reports
// is contained: the batch fails with a message saying so (or is handed back at shutdown)
// and the manager keeps running.
//
// ctx is cancelled when the manager's shutdown deadline passes; per-task contexts
// (Batch.Context) are also cancelled when the task is cancelled.
type Handler interface {
	Handle(ctx context.Context, batch *Batch)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, batch *Batch)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, batch *Batch) { f(ctx, batch) }

// Stopper is implemented by handlers that hold batches of their own (such as Buffer):
// Stop is called when the manager begins a graceful shutdown, after polling stopped.
type Stopper interface {
	Stop()
}

// Errors a handler's call-backs can return.
var (
	// ErrAlreadyReported: the batch was already completed or failed.
	ErrAlreadyReported = errors.New("batch already reported")
	// ErrForeignDecision: decisions named tasks outside the batch; the batch failed.
	ErrForeignDecision = errors.New("decision for a task outside the batch")
)

// Batch is a set of tasks leased together, handed to a Handler.
type Batch struct {
	// Topic is the topic the tasks were polled from.
	Topic string
	// Tasks are the leased tasks, in poll order.
	Tasks []repository.Task

	stopping <-chan struct{}
	started  time.Time
	report   func(*Batch, map[int64]repository.Decision, []followup)

	reported atomic.Bool
	// leases holds one completion per task as polled (Task.Decide, which carries the
	// task's identifier, input and reference to Repository.Complete): what a handler does
	// to Tasks cannot change what is completed or reported as stored. The report fills
	// in the decisions.
	leases []repository.Completion

	mu        sync.Mutex
	timeout   *time.Timer        // HandlerTimeout, stopped once the batch is committed
	cancel    context.CancelFunc // the batch's context, cancelled once it is committed
	followups []followup
	taskCtx   map[int64]context.Context
	cancels   map[int64]context.CancelCauseFunc
}

// ErrTaskCancelled is the cause of a task context cancelled because the task was
// cancelled.
var ErrTaskCancelled = errors.New("task cancelled")

func newBatch(ctx context.Context, topic string, tasks []repository.Task, stopping <-chan struct{}, report func(*Batch, map[int64]repository.Decision, []followup)) *Batch {
	b := &Batch{
		Topic:    topic,
		Tasks:    tasks,
		stopping: stopping,
		started:  time.Now(),
		report:   report,
		taskCtx:  make(map[int64]context.Context, len(tasks)),
		cancels:  make(map[int64]context.CancelCauseFunc, len(tasks)),
	}
	b.leases = make([]repository.Completion, len(tasks))
	ctx = context.WithValue(ctx, stoppingKey{}, stopping)
	for i, t := range tasks {
		b.leases[i] = t.Decide(repository.Decision{})
		tctx, cancel := context.WithCancelCause(ctx)
		b.taskCtx[t.Sequence] = tctx
		b.cancels[t.Sequence] = cancel
	}
	return b
}

// Context returns the context of one task of the batch: it is done when the task is
// cancelled or the shutdown deadline passes. For a sequence outside the batch it returns
// an already cancelled context.
func (b *Batch) Context(sequence int64) context.Context {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ctx, ok := b.taskCtx[sequence]; ok {
		return ctx
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

type stoppingKey struct{}

// Stopping returns the channel closed when the manager running the task of ctx (a
// context from Batch.Context) begins a graceful shutdown, so a long task can wrap up
// early. It returns nil (never closed) for other contexts.
func Stopping(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(stoppingKey{}).(<-chan struct{})
	return ch
}

// Stopping is closed when the manager begins a graceful shutdown: a handler working
// through the batch task by task should hand back the tasks it has not started
// (decide them with repository.SnoozeFor(0)).
func (b *Batch) Stopping() <-chan struct{} { return b.stopping }

func (b *Batch) cancelTask(sequence int64) bool {
	b.mu.Lock()
	cancel, ok := b.cancels[sequence]
	b.mu.Unlock()
	if ok {
		cancel(ErrTaskCancelled)
	}
	return ok
}

func (b *Batch) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timeout != nil {
		b.timeout.Stop()
	}
	if b.cancel != nil {
		b.cancel()
	}
	for _, cancel := range b.cancels {
		cancel(context.Canceled)
	}
}

// followup is a push or junction that commits together with the batch's completion.
type followup struct {
	topic     string
	push      bool
	insertion repository.Insertion
	creations []repository.Creation
	junction  repository.Junction
	groups    [][]string
}

// Push declares tasks to push when, and only if, the batch's completion commits: they
// are pushed in the same transaction. Managers of that topic in this process are resumed
// after the commit.
func (b *Batch) Push(topic string, insertion repository.Insertion, creations ...repository.Creation) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.followups = append(b.followups, followup{topic: topic, push: true, insertion: insertion, creations: creations})
}

// Junction declares a junction to run in the batch's completion transaction.
func (b *Batch) Junction(topic string, junction repository.Junction, groups ...[]string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.followups = append(b.followups, followup{topic: topic, junction: junction, groups: groups})
}

// Complete reports the decisions for the batch, keyed by task sequence. Tasks without a
// decision FAIL with a message saying so. Decisions for tasks outside the batch fail the
// whole batch (ErrForeignDecision). A second report returns ErrAlreadyReported and is
// ignored.
func (b *Batch) Complete(decisions map[int64]repository.Decision) error {
	if !b.reported.CompareAndSwap(false, true) {
		return fmt.Errorf("complete batch of topic %q: %w", b.Topic, ErrAlreadyReported)
	}
	var foreign []int64
	for seq := range decisions {
		// taskCtx has one entry per task of the batch and is not written after newBatch
		if _, in := b.taskCtx[seq]; !in {
			foreign = append(foreign, seq)
		}
	}
	if len(foreign) > 0 {
		slices.Sort(foreign)
		err := fmt.Errorf("complete batch of topic %q: %w: tasks %v", b.Topic, ErrForeignDecision, foreign)
		b.report(b, b.all(repository.Fail(fmt.Errorf("handler reported decisions for tasks outside the batch: %v", foreign))), nil)
		return err
	}
	out := make(map[int64]repository.Decision, len(b.leases))
	for _, l := range b.leases {
		d, ok := decisions[l.Sequence]
		if !ok {
			d = repository.Fail(errors.New("handler reported no decision for this task"))
		}
		out[l.Sequence] = d
	}
	b.mu.Lock()
	followups := b.followups
	b.mu.Unlock()
	b.report(b, out, followups)
	return nil
}

// Fail reports a failure of the whole batch: every task FAILS with err's text (the
// topic's retry policy applies). Declared follow-ups are dropped.
func (b *Batch) Fail(err error) error {
	if !b.reported.CompareAndSwap(false, true) {
		return fmt.Errorf("fail batch of topic %q: %w", b.Topic, ErrAlreadyReported)
	}
	if err == nil {
		err = errors.New("batch failed")
	}
	b.report(b, b.all(repository.Fail(err)), nil)
	return nil
}

// handBack returns every task of the batch to READY without consuming its attempt (for
// tasks that were leased but never started).
func (b *Batch) handBack() bool {
	if !b.reported.CompareAndSwap(false, true) {
		return false
	}
	b.report(b, b.all(repository.SnoozeFor(0)), nil)
	return true
}

func (b *Batch) all(d repository.Decision) map[int64]repository.Decision {
	out := make(map[int64]repository.Decision, len(b.leases))
	for _, l := range b.leases {
		out[l.Sequence] = d
	}
	return out
}

// TaskFunc handles a batch one task at a time: each task gets its own context and its
// own decision; a panic fails only that task. Once the manager is stopping, tasks not
// yet started are handed back.
type TaskFunc func(ctx context.Context, task repository.Task) repository.Decision

// Handle runs f over the batch's tasks in order.
func (f TaskFunc) Handle(_ context.Context, batch *Batch) {
	decisions := make(map[int64]repository.Decision, len(batch.Tasks))
	for _, t := range batch.Tasks {
		select {
		case <-batch.Stopping():
			decisions[t.Sequence] = repository.SnoozeFor(0)
			continue
		default:
		}
		decisions[t.Sequence] = f.call(batch.Context(t.Sequence), t)
	}
	_ = batch.Complete(decisions)
}

func (f TaskFunc) call(ctx context.Context, t repository.Task) (d repository.Decision) {
	defer func() {
		if r := recover(); r != nil {
			d = repository.Fail(fmt.Errorf("handler panicked on task %d: %v\n%s", t.Sequence, r, debug.Stack()))
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
// calling fn. A task whose input does not decode FAILS with a message naming the task
// and the decoding error; the rest of the batch proceeds.
func Typed[T any](fn func(ctx context.Context, task repository.Task, input T) repository.Decision) TaskFunc {
	return func(ctx context.Context, task repository.Task) repository.Decision {
		var input T
		if err := json.Unmarshal([]byte(task.Input), &input); err != nil {
			return repository.Fail(fmt.Errorf("decode input of task %d as %T: %w", task.Sequence, input, err))
		}
		return fn(ctx, task, input)
	}
}

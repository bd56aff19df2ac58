package processor

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/pgtask/pgtask/repository"
)

// Step is one step of a Composite: it receives the tasks that flowed into it and returns
// a decision per task sequence, or an error that fails all of them. A task without a
// decision fails.
//
// In a Composite, ctx is done when the Composite's is, and once every task the step got
// is cancelled (its Batch.Context is done: the task was cancelled, or its decision
// committed, as when the handler timed out); a step over one task sees its cancellation
// as a TaskFunc does. context.Cause(ctx) then says why (ErrTaskCancelled).
type Step func(ctx context.Context, tasks []repository.Task, supplement *Supplement) (map[int64]repository.Decision, error)

// TaskStep adapts a per-task function to a Step. In a Composite, fn's ctx is also done
// when its task's context (Batch.Context) is, so a cancelled task is cancelled for the
// function working on it; a task cancelled before its turn is not started: it FAILS
// with ErrTaskCancelled. A panic of fn fails its task alone, as a TaskFunc's does.
func TaskStep(fn func(ctx context.Context, task repository.Task, supplement *Supplement) repository.Decision) Step {
	return func(ctx context.Context, tasks []repository.Task, s *Supplement) (map[int64]repository.Decision, error) {
		batch, _ := ctx.Value(compositeBatchKey{}).(*Batch)
		out := make(map[int64]repository.Decision, len(tasks))
		for _, t := range tasks {
			if batch == nil {
				out[t.Sequence] = callStep(ctx, nil, fn, t, s)
				continue
			}
			tctx, stop := doneWithAll(ctx, []context.Context{batch.Context(t.Sequence)})
			if context.Cause(tctx) == ErrTaskCancelled {
				out[t.Sequence] = repository.Fail(ErrTaskCancelled)
			} else {
				out[t.Sequence] = callStep(tctx, batch, fn, t, s)
			}
			stop()
		}
		return out, nil
	}
}

// callStep runs fn on t; a panic fails t alone (the decisions of the tasks before it
// stand), reported as any handler's panic is (Batch.onPanic, when batch is known), the
// stack kept out of the task's output, as TaskFunc.call does.
func callStep(ctx context.Context, batch *Batch, fn func(context.Context, repository.Task, *Supplement) repository.Decision,
	t repository.Task, s *Supplement) (d repository.Decision) {
	defer func() {
		if r := recover(); r != nil {
			err := fmt.Errorf("step panicked on task %d: %v", t.Sequence, r)
			if batch != nil && batch.onPanic != nil {
				batch.onPanic(err, r, debug.Stack())
			}
			d = repository.Fail(err)
		}
	}()
	return fn(ctx, t, s)
}

// compositeBatchKey keys the batch in a step's context, for TaskStep.
type compositeBatchKey struct{}

// doneWithAll returns a context derived from parent that is also cancelled, with the
// cause of the last of them, once every one of tasks is done; stop releases it.
func doneWithAll(parent context.Context, tasks []context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	var left atomic.Int64
	left.Store(int64(len(tasks)))
	stops := make([]func() bool, 0, len(tasks))
	for _, t := range tasks {
		done := func() {
			if left.Add(-1) == 0 {
				cancel(context.Cause(t))
			}
		}
		if t.Err() != nil {
			done() // now, not on AfterFunc's goroutine: ctx is done when returned
			continue
		}
		stops = append(stops, context.AfterFunc(t, done))
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel(context.Canceled)
	}
}

// Composite is a Handler running a DAG of named steps.
// Independent steps run concurrently. A task flows into a step only if it reached every
// step the step depends on and its merged decision so far is SUCCESS or continued; a
// task cancelled meanwhile flows into no further step (it FAILS with ErrTaskCancelled,
// and ends FAILED cancelled whatever its steps decided). Its final decision merges
// every decision it received: the worst result wins (FAILURE > SUSPENSION > FILTER >
// SUCCESS) and all messages are kept.
type Composite struct {
	steps []*compositeStep
	byKey map[string]*compositeStep
}

type compositeStep struct {
	name string
	fn   Step
	deps []*compositeStep
}

// NewComposite returns an empty composite handler.
func NewComposite() *Composite {
	return &Composite{byKey: make(map[string]*compositeStep)}
}

// Step registers a step depending on previously registered steps. A duplicate name or
// an unknown dependency is an error (and so a cycle cannot be built).
func (c *Composite) Step(name string, fn Step, dependsOn ...string) error {
	if name == "" {
		return errors.New("composite: step name is empty")
	}
	if fn == nil {
		return fmt.Errorf("composite: step %q has no function", name)
	}
	if _, dup := c.byKey[name]; dup {
		return fmt.Errorf("composite: duplicate step name %q", name)
	}
	s := &compositeStep{name: name, fn: fn}
	for _, d := range dependsOn {
		dep, ok := c.byKey[d]
		if !ok {
			return fmt.Errorf("composite: step %q depends on unknown step %q", name, d)
		}
		s.deps = append(s.deps, dep)
	}
	c.byKey[name] = s
	c.steps = append(c.steps, s)
	return nil
}

// Handle runs the steps over the batch and completes it with the merged decisions.
func (c *Composite) Handle(ctx context.Context, batch *Batch) {
	if len(c.steps) == 0 {
		_ = batch.Fail(errors.New("composite handler has no steps"))
		return
	}
	run := &compositeRun{
		batch:      batch,
		supplement: &Supplement{values: make(map[reflect.Type]any)},
		cum:        make(map[*compositeStep]map[int64]repository.Decision),
		done:       make(map[*compositeStep]chan struct{}),
		final:      make(map[int64]repository.Decision),
	}
	for _, s := range c.steps {
		run.done[s] = make(chan struct{})
	}
	var wg sync.WaitGroup
	for _, s := range c.steps {
		wg.Go(func() { run.step(ctx, s) })
	}
	wg.Wait()
	decisions := make(map[int64]repository.Decision, len(batch.Tasks))
	for _, t := range batch.Tasks {
		d, ok := run.final[t.Sequence]
		if !ok {
			d = repository.Fail(errors.New("no composite step ran this task"))
		}
		d.Continued = false
		decisions[t.Sequence] = d
	}
	_ = batch.Complete(decisions)
}

type compositeRun struct {
	batch      *Batch
	supplement *Supplement

	mu    sync.Mutex
	cum   map[*compositeStep]map[int64]repository.Decision // merged decision after the step
	done  map[*compositeStep]chan struct{}
	final map[int64]repository.Decision
}

func (r *compositeRun) step(ctx context.Context, s *compositeStep) {
	defer close(r.done[s])
	for _, d := range s.deps {
		<-r.done[d]
	}
	// The tasks that reached every dependency and still flow, with their merged
	// decision so far.
	r.mu.Lock()
	var (
		tasks, cancelled []repository.Task
		prior            = make(map[int64]repository.Decision)
	)
	for _, t := range r.batch.Tasks {
		merged, reached := repository.Decision{Result: repository.Success}, true
		for _, d := range s.deps {
			dd, ok := r.cum[d][t.Sequence]
			if !ok {
				reached = false
				break
			}
			merged = merge(merged, dd)
		}
		if reached && flows(merged) {
			prior[t.Sequence] = merged
			// Cancelled before this step's turn: it ends FAILED cancelled whatever is
			// decided, so the step's work on it is not begun (as TaskFunc).
			if context.Cause(r.batch.Context(t.Sequence)) == ErrTaskCancelled {
				cancelled = append(cancelled, t)
			} else {
				tasks = append(tasks, t)
			}
		}
	}
	r.mu.Unlock()
	if len(tasks)+len(cancelled) == 0 {
		return
	}
	var (
		own map[int64]repository.Decision
		err error
	)
	returned := false
	defer func() {
		if !returned {
			// The step's function ended the goroutine (runtime.Goexit, which t.FailNow
			// calls) and never returned: its tasks fail, reported as a panic is, and
			// the unwinding goes on (the steps after it are let go by the deferred
			// close). Without this the run went on as if the step had not been given
			// them, and a task whose other steps succeeded SUCCEEDED.
			err := errors.New("ended its goroutine (runtime.Goexit, which t.FailNow and t.Fatal call) before returning")
			if r.batch.onPanic != nil {
				r.batch.onPanic(fmt.Errorf("step %s %w", s.name, err), nil, debug.Stack())
			}
			r.recordStep(s, tasks, cancelled, prior, nil, err)
		}
	}()
	if len(tasks) > 0 {
		own, err = r.call(ctx, s, tasks)
	}
	returned = true
	r.recordStep(s, tasks, cancelled, prior, own, err)
}

// recordStep records what step s decided for its tasks (own, or err for all of them)
// and for those cancelled before its turn, merged with what each task carried into it
// (prior).
func (r *compositeRun) recordStep(s *compositeStep, tasks, cancelled []repository.Task,
	prior, own map[int64]repository.Decision, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cum := make(map[int64]repository.Decision, len(tasks)+len(cancelled))
	record := func(t repository.Task, d repository.Decision) {
		cum[t.Sequence] = merge(prior[t.Sequence], d)
		if f, ok := r.final[t.Sequence]; ok {
			r.final[t.Sequence] = merge(f, d)
		} else {
			r.final[t.Sequence] = merge(repository.Decision{Result: repository.Success}, d)
		}
	}
	for _, t := range tasks {
		switch d, ok := own[t.Sequence]; {
		case err != nil:
			record(t, repository.Fail(fmt.Errorf("step %s: %w", s.name, err)))
		case !ok:
			record(t, repository.Fail(fmt.Errorf("step %s reported no decision", s.name)))
		default:
			if verr := d.Validate(); verr != nil {
				// merged, an unknown result would pass for the seed's SUCCESS
				d = repository.Fail(fmt.Errorf("step %s: invalid decision: %w", s.name, verr))
			}
			record(t, d)
		}
	}
	for _, t := range cancelled {
		record(t, repository.Fail(ErrTaskCancelled))
	}
	r.cum[s] = cum
}

func (r *compositeRun) call(ctx context.Context, s *compositeStep, tasks []repository.Task) (out map[int64]repository.Decision, err error) {
	defer func() {
		if p := recover(); p != nil {
			// reported as any handler's panic is; the stack stays out of the tasks' output
			err = fmt.Errorf("panicked: %v", p)
			if r.batch.onPanic != nil {
				r.batch.onPanic(fmt.Errorf("step %s %w", s.name, err), p, debug.Stack())
			}
		}
	}()
	// The step's context ends once every task it got is cancelled; TaskStep finds the
	// batch in it for each task's own context.
	taskCtxs := make([]context.Context, len(tasks))
	for i, t := range tasks {
		taskCtxs[i] = r.batch.Context(t.Sequence)
	}
	sctx, stop := doneWithAll(context.WithValue(ctx, compositeBatchKey{}, r.batch), taskCtxs)
	defer stop()
	return s.fn(sctx, tasks, r.supplement)
}

// flows reports whether a task with this merged decision goes on to dependent steps.
func flows(d repository.Decision) bool {
	return !d.Snooze && (d.Result == repository.Success || d.Continued)
}

// finalFailure reports whether d is a FAILURE without retry.
func finalFailure(d repository.Decision) bool {
	return d.Final && !d.Snooze && d.Result == repository.Failure
}

// merge combines two decisions: the worse result wins, messages are kept, and the result
// flows on only if both did; a FAILURE that wins is without retry when either was. A snooze (whose Result means nothing) wins over any result
// but FAILURE, and of two snoozes the longer wins.
func merge(a, b repository.Decision) repository.Decision {
	out := repository.Decision{Continued: flows(a) && flows(b)}
	switch {
	case a.Snooze && b.Snooze:
		out.Snooze, out.Delay = true, max(a.Delay, b.Delay)
	case a.Snooze || b.Snooze:
		snoozed, other := a, b
		if b.Snooze {
			snoozed, other = b, a
		}
		if other.Result == repository.Failure {
			out.Result = repository.Failure
		} else {
			out.Snooze, out.Delay = true, snoozed.Delay
		}
	default:
		out.Result = repository.Worse(a.Result, b.Result)
	}
	// a FAILURE without retry stays so
	out.Final = !out.Snooze && out.Result == repository.Failure && (finalFailure(a) || finalFailure(b))
	var msgs []string
	for _, m := range []string{a.Message, b.Message} {
		if m != "" {
			msgs = append(msgs, m)
		}
	}
	out.Message = strings.Join(msgs, "; ")
	return out
}

// Supplement is per-batch storage shared by the steps of a Composite, keyed by type.
type Supplement struct {
	mu     sync.Mutex
	values map[reflect.Type]any
	// computing serialises GetOrCompute per type so a value is computed once.
	computing sync.Map
}

// Set stores v as the batch's value of type T.
func Set[T any](s *Supplement, v T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.values[reflect.TypeFor[T]()] = v
}

// Get returns the batch's value of type T, if set.
func Get[T any](s *Supplement) (T, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.values[reflect.TypeFor[T]()]
	if !ok {
		var zero T
		return zero, false
	}
	return v.(T), true
}

// MustGet returns the batch's value of type T and panics if none was set (a step that
// panics fails its tasks with the message).
func MustGet[T any](s *Supplement) T {
	v, ok := Get[T](s)
	if !ok {
		panic(fmt.Sprintf("supplement has no value of type %v", reflect.TypeFor[T]()))
	}
	return v
}

// GetOrCompute returns the batch's value of type T, computing and storing it first if
// absent; concurrent callers compute it once.
func GetOrCompute[T any](s *Supplement, compute func() (T, error)) (T, error) {
	lock, _ := s.computing.LoadOrStore(reflect.TypeFor[T](), &sync.Mutex{})
	lock.(*sync.Mutex).Lock()
	defer lock.(*sync.Mutex).Unlock()
	if v, ok := Get[T](s); ok {
		return v, nil
	}
	v, err := compute()
	if err != nil {
		return v, err
	}
	Set(s, v)
	return v, nil
}

package processor_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/logbuf"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

func TestComposite(t *testing.T) {
	t.Run("ChainStopsEachTaskAtItsFirstFailure", func(t *testing.T) {
		f := setup(t)
		var (
			mu  sync.Mutex
			ran = make(map[string][]string) // identifier → steps run
		)
		step := func(name, failing string) processor.Step {
			return processor.TaskStep(func(ctx context.Context, task repository.Task, _ *processor.Supplement) repository.Decision {
				mu.Lock()
				ran[task.Identifier] = append(ran[task.Identifier], name)
				mu.Unlock()
				if task.Identifier == failing {
					return repository.Fail(errors.New(name + " failed " + failing))
				}
				return repository.Succeed(name + " ok")
			})
		}
		c := processor.NewComposite()
		for _, s := range []struct {
			name, failing string
			deps          []string
		}{{"1", "foo", nil}, {"2", "bar", []string{"1"}}, {"3", "", []string{"2"}}} {
			if err := c.Step(s.name, step(s.name, s.failing), s.deps...); err != nil {
				t.Fatal(err)
			}
		}
		pushed, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append,
			repository.Creation{Identifier: "foo"}, repository.Creation{Identifier: "bar"}, repository.Creation{Identifier: "qux"})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: c})
		f.start(p)
		f.eventually("all finished", func() bool { return f.count(repository.Failed)+f.count(repository.Succeeded) == 3 })
		mu.Lock()
		defer mu.Unlock()
		want := map[string]string{"foo": "1", "bar": "1,2", "qux": "1,2,3"}
		for id, steps := range want {
			if got := strings.Join(ran[id], ","); got != steps {
				t.Errorf("%s ran steps %q, want %q", id, got, steps)
			}
		}
		states := map[string]repository.State{"foo": repository.Failed, "bar": repository.Failed, "qux": repository.Succeeded}
		for _, task := range pushed {
			got := f.get(task.Sequence)
			if got.State != states[task.Identifier] {
				t.Errorf("%s ended %v, want %v", task.Identifier, got.State, states[task.Identifier])
			}
		}
		if got := f.get(pushed[1].Sequence).Output; !strings.Contains(got, "1 ok") || !strings.Contains(got, "2 failed bar") {
			t.Errorf("bar's output %q does not keep the messages of both steps", got)
		}
	})

	// A step's FAILURE without retry (Typed's undecodable input, FailFinal) makes the
	// merged decision final: the task is FAILED at its first attempt of five.
	t.Run("AFinalFailureOfAStepIsFinal", func(t *testing.T) {
		f := setup(t)
		if _, err := f.repo.Configure(f.ctx, f.pool, f.topic, repository.TopicSettings{MaxAttempts: 5, BackoffBase: time.Millisecond, BackoffCap: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		c := processor.NewComposite()
		type in struct{ N int }
		if err := c.Step("decode", processor.TaskStep(func(ctx context.Context, task repository.Task, _ *processor.Supplement) repository.Decision {
			return processor.Typed(func(ctx context.Context, task repository.Task, v in) repository.Decision {
				return repository.Succeed("decoded")
			})(ctx, task)
		})); err != nil {
			t.Fatal(err)
		}
		if err := c.Step("other", processor.TaskStep(func(ctx context.Context, task repository.Task, _ *processor.Supplement) repository.Decision {
			return repository.Succeed("other ok")
		})); err != nil {
			t.Fatal(err)
		}
		pushed, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append,
			repository.Creation{Identifier: "bad", Input: `{"N":`}, repository.Creation{Identifier: "good", Input: `{"N":1}`})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: c})
		f.start(p)
		f.eventually("both finished", func() bool { return f.count(repository.Failed)+f.count(repository.Succeeded) == 2 })
		if got := f.get(pushed[0].Sequence); got.State != repository.Failed || got.Attempt != 1 || !strings.Contains(got.Output, "decode input") {
			t.Errorf("bad: %v at attempt %d, output %q; want FAILED at its first attempt, naming the decoding", got.State, got.Attempt, got.Output)
		}
		if got := f.get(pushed[1].Sequence); got.State != repository.Succeeded {
			t.Errorf("good: %v, want SUCCEEDED", got.State)
		}
	})

	t.Run("IndependentStepsRunConcurrently", func(t *testing.T) {
		f := setup(t)
		var arrived sync.WaitGroup
		arrived.Add(2)
		both := make(chan struct{})
		go func() { arrived.Wait(); close(both) }()
		parallel := processor.TaskStep(func(ctx context.Context, task repository.Task, _ *processor.Supplement) repository.Decision {
			arrived.Done()
			select {
			case <-both: // only reachable if the other step runs at the same time
				return repository.Succeed("")
			case <-time.After(10 * time.Second):
				return repository.Fail(errors.New("the other step never ran concurrently"))
			}
		})
		c := processor.NewComposite()
		for _, name := range []string{"left", "right"} {
			if err := c.Step(name, parallel); err != nil {
				t.Fatal(err)
			}
		}
		tasks := f.pushN(1)
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: c})
		f.start(p)
		f.eventually("task finished", func() bool {
			s := f.get(tasks[0].Sequence).State
			return s == repository.Succeeded || s == repository.Failed
		})
		if got := f.get(tasks[0].Sequence); got.State != repository.Succeeded {
			t.Fatalf("task %v %q, want SUCCEEDED", got.State, got.Output)
		}
	})

	t.Run("ContinuedFailurePassesToDependentStepsAndMergesWorst", func(t *testing.T) {
		f := setup(t)
		c := processor.NewComposite()
		steps := []struct {
			name string
			d    repository.Decision
			deps []string
		}{
			{"filter", repository.Decision{Result: repository.Filter, Message: "filtered", Continued: true}, nil},
			{"suspend", repository.Decision{Result: repository.Suspension, Message: "suspended"}, []string{"filter"}},
		}
		for _, s := range steps {
			d := s.d
			if err := c.Step(s.name, processor.TaskStep(func(context.Context, repository.Task, *processor.Supplement) repository.Decision { return d }), s.deps...); err != nil {
				t.Fatal(err)
			}
		}
		tasks := f.pushN(1)
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: c})
		f.start(p)
		f.eventually("task suspended", func() bool { return f.get(tasks[0].Sequence).State == repository.Suspended })
		if got := f.get(tasks[0].Sequence).Output; got != "filtered; suspended" {
			t.Fatalf("output %q, want both messages", got)
		}
	})

	// A snooze's Result is the zero value, FAILURE: merged as a result, it made every
	// snooze a failure, which uses an attempt.
	t.Run("ASnoozeStaysASnooze", func(t *testing.T) {
		snooze := func(d time.Duration) repository.Decision { return repository.SnoozeFor(d) }
		for _, c := range []struct {
			name  string
			steps []repository.Decision // independent steps
			want  repository.Decision
		}{
			{"Alone", []repository.Decision{snooze(time.Minute)}, repository.Decision{Snooze: true, Delay: time.Minute}},
			{"BesideASuccess", []repository.Decision{repository.Succeed(""), snooze(time.Minute)}, repository.Decision{Snooze: true, Delay: time.Minute}},
			{"BesideASkip", []repository.Decision{repository.Skip(""), snooze(time.Minute)}, repository.Decision{Snooze: true, Delay: time.Minute}},
			{"TheLongerOfTwo", []repository.Decision{snooze(time.Minute), snooze(5 * time.Minute)}, repository.Decision{Snooze: true, Delay: 5 * time.Minute}},
			{"BesideAFailure", []repository.Decision{repository.Fail(errors.New("x")), snooze(time.Minute)}, repository.Decision{Result: repository.Failure, Message: "x"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				comp := processor.NewComposite()
				for i, d := range c.steps {
					if err := comp.Step(string(rune('a'+i)), processor.TaskStep(func(context.Context, repository.Task, *processor.Supplement) repository.Decision { return d })); err != nil {
						t.Fatal(err)
					}
				}
				b := batchOf(t, 1)
				comp.Handle(t.Context(), b)
				o := doneWithin(t, b)
				for _, got := range o.Decisions {
					if got != c.want {
						t.Errorf("decision %+v, want %+v", got, c.want)
					}
				}
			})
		}
		// a snoozed task does not go on to the steps that depend on the snoozing one
		comp := processor.NewComposite()
		ran := false
		if err := comp.Step("first", processor.TaskStep(func(context.Context, repository.Task, *processor.Supplement) repository.Decision {
			return snooze(time.Minute)
		})); err != nil {
			t.Fatal(err)
		}
		if err := comp.Step("then", processor.TaskStep(func(context.Context, repository.Task, *processor.Supplement) repository.Decision {
			ran = true
			return repository.Succeed("")
		}), "first"); err != nil {
			t.Fatal(err)
		}
		b := batchOf(t, 1)
		comp.Handle(t.Context(), b)
		for _, got := range doneWithin(t, b).Decisions {
			if !got.Snooze || got.Delay != time.Minute || ran {
				t.Errorf("decision %+v, dependent step ran: %v; want a snooze of 1m, not passed on", got, ran)
			}
		}
	})

	t.Run("SupplementIsComputedOncePerBatchAndShared", func(t *testing.T) {
		type total struct{ n int }
		var computed sync.Mutex
		computations := 0
		c := processor.NewComposite()
		compute := func(ctx context.Context, tasks []repository.Task, s *processor.Supplement) (map[int64]repository.Decision, error) {
			v, err := processor.GetOrCompute(s, func() (total, error) {
				computed.Lock()
				computations++
				computed.Unlock()
				return total{len(tasks)}, nil
			})
			if err != nil {
				return nil, err
			}
			out := map[int64]repository.Decision{}
			for _, task := range tasks {
				out[task.Sequence] = repository.Succeed("")
			}
			_ = v
			return out, nil
		}
		read := func(ctx context.Context, tasks []repository.Task, s *processor.Supplement) (map[int64]repository.Decision, error) {
			v := processor.MustGet[total](s)
			out := map[int64]repository.Decision{}
			for _, task := range tasks {
				out[task.Sequence] = repository.Succeed(strings.Repeat("x", v.n))
			}
			return out, nil
		}
		for _, s := range []struct {
			name string
			fn   processor.Step
			deps []string
		}{{"a", compute, nil}, {"b", compute, nil}, {"read", read, []string{"a", "b"}}} {
			if err := c.Step(s.name, s.fn, s.deps...); err != nil {
				t.Fatal(err)
			}
		}
		f := setup(t)
		tasks := f.pushN(3)
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: c, BatchSize: 3})
		f.start(p)
		f.eventually("tasks succeeded", func() bool { return f.count(repository.Succeeded) == 3 })
		if got := f.get(tasks[0].Sequence).Output; got != "xxx" {
			t.Fatalf("output %q, want the supplement's batch size", got)
		}
		computed.Lock()
		defer computed.Unlock()
		if computations != 1 {
			t.Fatalf("supplement computed %d times, want once", computations)
		}
	})

	// A Composite gave its steps the batch's context, which a cancel does not touch: a
	// step went on working on a cancelled task, as a TaskFunc does not.
	t.Run("ATaskStepSeesItsTaskCancelled", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(3)
		started := make(chan struct{})
		sawCancel := make(chan error, 1)
		var mu sync.Mutex
		ran := make(map[int64]error) // the tasks the step ran, with their context's error
		c := processor.NewComposite()
		if err := c.Step("work", processor.TaskStep(func(ctx context.Context, task repository.Task, _ *processor.Supplement) repository.Decision {
			mu.Lock()
			ran[task.Sequence] = ctx.Err()
			mu.Unlock()
			if task.Sequence != tasks[0].Sequence {
				return repository.Succeed("ran")
			}
			close(started)
			select {
			case <-ctx.Done():
				sawCancel <- context.Cause(ctx)
			case <-time.After(10 * time.Second):
				sawCancel <- errors.New("the step's context was not cancelled")
			}
			return repository.Succeed("ignored the cancel")
		})); err != nil {
			t.Fatal(err)
		}
		var logs logbuf.Buffer
		p, _ := f.processor("worker", processor.Config{Logger: jsonLogger(&logs, slog.LevelInfo)},
			processor.ManagerConfig{Handler: c, BatchSize: 3})
		connected := p.Notifier().Connected()
		f.start(p)
		<-connected
		<-started
		// the third task, waiting for its turn, first; then the running one
		if _, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "operator", tasks[2].Sequence); err != nil {
			t.Fatal(err)
		}
		f.eventually("the cancellation reached the processor", func() bool {
			return len(logs.Lines("cancelled running task")) == 1
		})
		if _, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "operator", tasks[0].Sequence); err != nil {
			t.Fatal(err)
		}
		if cause := <-sawCancel; !errors.Is(cause, processor.ErrTaskCancelled) {
			t.Fatalf("the step's context ended with %v, want ErrTaskCancelled", cause)
		}
		for _, task := range []repository.Task{tasks[0], tasks[2]} {
			f.eventually("the cancelled task failed", func() bool { return f.get(task.Sequence).State == repository.Failed })
			if got := f.get(task.Sequence).Output; got != "cancelled" {
				t.Errorf("task %d: output %q, want cancelled", task.Sequence, got)
			}
		}
		f.eventually("the other task succeeded", func() bool { return f.get(tasks[1].Sequence).State == repository.Succeeded })
		mu.Lock()
		defer mu.Unlock()
		if err, ok := ran[tasks[1].Sequence]; !ok || err != nil {
			t.Errorf("the task not cancelled: ran %v, its context's error %v; want run with a live context", ok, err)
		}
		if _, ok := ran[tasks[2].Sequence]; ok {
			t.Errorf("the step ran task %d, cancelled before its turn", tasks[2].Sequence)
		}
	})

	// A step over several tasks works for all of them: its context is done once every
	// one of them is cancelled, and a cancelled task goes on to no further step.
	t.Run("AStepSeesItsTasksCancelled", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(2)
		started := make(chan struct{})
		sawCancel := make(chan error, 1)
		var mu sync.Mutex
		var after []int64 // the tasks the dependent step got
		c := processor.NewComposite()
		if err := c.Step("work", func(ctx context.Context, batch []repository.Task, _ *processor.Supplement) (map[int64]repository.Decision, error) {
			close(started)
			select {
			case <-ctx.Done():
				sawCancel <- context.Cause(ctx)
			case <-time.After(10 * time.Second):
				sawCancel <- errors.New("the step's context was not cancelled")
			}
			out := make(map[int64]repository.Decision)
			for _, task := range batch {
				out[task.Sequence] = repository.Succeed("ignored the cancel")
			}
			return out, nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := c.Step("then", processor.TaskStep(func(ctx context.Context, task repository.Task, _ *processor.Supplement) repository.Decision {
			mu.Lock()
			after = append(after, task.Sequence)
			mu.Unlock()
			return repository.Succeed("")
		}), "work"); err != nil {
			t.Fatal(err)
		}
		var logs logbuf.Buffer
		p, _ := f.processor("worker", processor.Config{Logger: jsonLogger(&logs, slog.LevelInfo)},
			processor.ManagerConfig{Handler: c, BatchSize: 2})
		connected := p.Notifier().Connected()
		f.start(p)
		<-connected
		<-started
		if _, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "operator", tasks[0].Sequence); err != nil {
			t.Fatal(err)
		}
		f.eventually("the cancellation reached the processor", func() bool {
			return len(logs.Lines("cancelled running task")) == 1
		})
		select {
		case cause := <-sawCancel:
			t.Fatalf("the step's context ended (%v) while one of its tasks still runs", cause)
		default:
		}
		if _, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "operator", tasks[1].Sequence); err != nil {
			t.Fatal(err)
		}
		if cause := <-sawCancel; !errors.Is(cause, processor.ErrTaskCancelled) {
			t.Fatalf("the step's context ended with %v, want ErrTaskCancelled", cause)
		}
		for _, task := range tasks {
			f.eventually("the cancelled task failed", func() bool { return f.get(task.Sequence).State == repository.Failed })
			if got := f.get(task.Sequence).Output; got != "cancelled" {
				t.Errorf("task %d: output %q, want cancelled", task.Sequence, got)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(after) > 0 {
			t.Errorf("the dependent step ran cancelled tasks %v", after)
		}
	})

	t.Run("RegistrationRejectsDuplicatesAndUnknownDependencies", func(t *testing.T) {
		t.Parallel()
		noop := processor.TaskStep(func(context.Context, repository.Task, *processor.Supplement) repository.Decision {
			return repository.Succeed("")
		})
		c := processor.NewComposite()
		if err := c.Step("a", noop); err != nil {
			t.Fatal(err)
		}
		if err := c.Step("a", noop); err == nil || !strings.Contains(err.Error(), `duplicate step name "a"`) {
			t.Errorf("duplicate: err = %v", err)
		}
		if err := c.Step("b", noop, "missing"); err == nil || !strings.Contains(err.Error(), `unknown step "missing"`) {
			t.Errorf("unknown dependency: err = %v", err)
		}
	})
}

// TestCompositeStepsThatMisbehave (no database: batches outside a processor): a step's
// invalid decision fails its task, naming the step (merged, an unknown result passed for
// SUCCESS and the task SUCCEEDED); a step that ends its goroutine (t.FailNow) fails its
// tasks (the run went on as if the step had not had them, and they SUCCEEDED).
func TestCompositeStepsThatMisbehave(t *testing.T) {
	for _, tc := range []struct {
		name string
		step processor.Step
		says string
	}{
		{"InvalidDecision", processor.TaskStep(func(context.Context, repository.Task, *processor.Supplement) repository.Decision {
			return repository.Decision{Result: 4}
		}), "step b: invalid decision"},
		{"EndsItsGoroutine", processor.TaskStep(func(context.Context, repository.Task, *processor.Supplement) repository.Decision {
			runtime.Goexit()
			return repository.Succeed("never")
		}), "step b: ended its goroutine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := processor.NewComposite()
			ok := processor.TaskStep(func(context.Context, repository.Task, *processor.Supplement) repository.Decision {
				return repository.Succeed("a ok")
			})
			if err := c.Step("a", ok); err != nil {
				t.Fatal(err)
			}
			if err := c.Step("b", tc.step, "a"); err != nil {
				t.Fatal(err)
			}
			b, err := processor.NewBatch(t.Context(), "t", []repository.Task{{Sequence: 1, Identifier: "x"}})
			if err != nil {
				t.Fatal(err)
			}
			c.Handle(t.Context(), b)
			<-b.Done()
			d := b.Outcome().Decisions[1]
			if d.Result != repository.Failure || !strings.Contains(d.Message, tc.says) {
				t.Fatalf("decision %+v, want FAILURE saying %q", d, tc.says)
			}
		})
	}
}

// TestNewBatchContextsEndWhenDecided: outside a processor, where nothing is committed,
// a task's context ends once it is decided, as a processor's does once the decision is
// committed; it stayed live for ever.
func TestNewBatchContextsEndWhenDecided(t *testing.T) {
	b, err := processor.NewBatch(t.Context(), "t", []repository.Task{{Sequence: 1}, {Sequence: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Decide(1, repository.Succeed("")); err != nil {
		t.Fatal(err)
	}
	if b.Context(1).Err() == nil {
		t.Error("task 1's context is live after its decision")
	}
	if b.Context(2).Err() != nil {
		t.Error("task 2's context ended before its decision")
	}
	if err := b.Fail(errors.New("boom")); err != nil {
		t.Fatal(err)
	}
	if b.Context(2).Err() == nil {
		t.Error("task 2's context is live after the batch failed")
	}
}

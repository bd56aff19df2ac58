package processor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/logbuf"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// errorLog collects the errors a manager reports.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) listener() processor.Listener {
	return processor.Listener{OnError: func(_ string, err error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.errs = append(l.errs, err)
	}}
}

func (l *errorLog) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, err := range l.errs {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}

func TestBadHandler(t *testing.T) {
	t.Run("PanicFailsTheBatchAndTheManagerGoesOn", func(t *testing.T) {
		f := setup(t)
		first := f.pushN(1)
		var calls atomic.Int32
		handler := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			if calls.Add(1) == 1 {
				panic("boom")
			}
			decisions := map[int64]repository.Decision{}
			for _, task := range b.Tasks {
				decisions[task.Sequence] = repository.Succeed("")
			}
			_ = b.Complete(decisions)
		})
		p, managers := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler})
		f.start(p)
		f.eventually("panicking batch failed", func() bool { return f.get(first[0].Sequence).State == repository.Failed })
		if got := f.get(first[0].Sequence).Output; !strings.Contains(got, "handler panicked: boom") {
			t.Fatalf("output %q, want the panic", got)
		}
		second, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "next"})
		if err != nil {
			t.Fatal(err)
		}
		managers[0].Resume()
		f.eventually("next batch succeeded", func() bool { return f.get(second[0].Sequence).State == repository.Succeeded })
	})

	// A Buffer's worker caught the panic and failed the batch, but neither logged it nor
	// told the listener, as the manager does for a handler without a Buffer: the
	// library's usual set-up hid a panicking handler from its operators.
	// A Composite's step that panicked wrote its stack into its tasks' outputs and was
	// neither logged nor told to the listener.
	t.Run("APanicInACompositeStepIsReported", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(1)
		c := processor.NewComposite()
		if err := c.Step("only", func(context.Context, []repository.Task, *processor.Supplement) (map[int64]repository.Decision, error) {
			panic("boom")
		}); err != nil {
			t.Fatal(err)
		}
		errs := &errorLog{}
		var logs logbuf.Buffer
		p, _ := f.processor("worker", processor.Config{Logger: jsonLogger(&logs, slog.LevelInfo)},
			processor.ManagerConfig{Handler: c, Listener: errs.listener()})
		f.start(p)
		f.eventually("panicking step failed", func() bool { return f.get(tasks[0].Sequence).State == repository.Failed })
		if got := f.get(tasks[0].Sequence).Output; !strings.Contains(got, "panicked: boom") || strings.Contains(got, "goroutine") {
			t.Errorf("output %q, want the panic without its stack", got)
		}
		if !errs.contains("step only panicked: boom") {
			t.Error("the panic was not reported to the listener")
		}
		if lines := logs.Lines(`"level":"ERROR"`, `"msg":"handler panicked"`, "boom"); len(lines) != 1 {
			t.Errorf("the panic was logged %d times at ERROR, want once; the log:\n%s", len(lines), logs.String())
		} else if !strings.Contains(lines[0], "handler_test.go") {
			t.Errorf("the panic's log has no stack down to the step that panicked: %s", lines[0])
		}
	})

	t.Run("APanicInABufferIsReportedAsWithout", func(t *testing.T) {
		panicking := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) { panic("boom") })
		buffered, err := processor.Buffer(panicking, processor.BufferConfig{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name    string
			handler processor.Handler
		}{{"Bare", panicking}, {"Buffered", buffered}} {
			t.Run(c.name, func(t *testing.T) {
				f := setup(t)
				tasks := f.pushN(1)
				errs := &errorLog{}
				var logs logbuf.Buffer
				p, _ := f.processor("worker", processor.Config{Logger: jsonLogger(&logs, slog.LevelInfo)},
					processor.ManagerConfig{Handler: c.handler, Listener: errs.listener()})
				f.start(p)
				f.eventually("panicking batch failed", func() bool { return f.get(tasks[0].Sequence).State == repository.Failed })
				if got := f.get(tasks[0].Sequence).Output; !strings.Contains(got, "handler panicked: boom") {
					t.Errorf("output %q, want the panic", got)
				}
				if !errs.contains("handler panicked: boom") {
					t.Error("the panic was not reported to the listener")
				}
				if lines := logs.Lines(`"level":"ERROR"`, `"msg":"handler panicked"`, "boom"); len(lines) != 1 {
					t.Errorf("the panic was logged %d times at ERROR, want once; the log:\n%s", len(lines), logs.String())
				} else if !strings.Contains(lines[0], "handler_test.go") {
					// the handler's own frame: the stack is the panicking goroutine's
					t.Errorf("the panic's log has no stack down to the handler that panicked: %s", lines[0])
				}
			})
		}
	})

	// A TaskFunc's panic failed its task with the whole stack as the task's output
	// (shown by the API and the dashboard) and was neither logged as a panic nor told
	// to the listener.
	t.Run("APanicInATaskFuncIsReportedAndKeptOutOfTheOutput", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(2)
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			if task.Sequence == tasks[0].Sequence {
				panic("boom")
			}
			return repository.Succeed("fine")
		})
		errs := &errorLog{}
		var logs logbuf.Buffer
		p, _ := f.processor("worker", processor.Config{Logger: jsonLogger(&logs, slog.LevelInfo)},
			processor.ManagerConfig{Handler: handler, BatchSize: 2, Listener: errs.listener()})
		f.start(p)
		f.eventually("the panicking task failed", func() bool { return f.get(tasks[0].Sequence).State == repository.Failed })
		f.eventually("its batch mate succeeded", func() bool { return f.get(tasks[1].Sequence).State == repository.Succeeded })
		if got := f.get(tasks[0].Sequence).Output; !strings.Contains(got, "handler panicked on task") || !strings.Contains(got, "boom") ||
			strings.Contains(got, "goroutine ") {
			t.Errorf("output %q, want the panic without the stack", got)
		}
		if !errs.contains("boom") {
			t.Error("the panic was not reported to the listener")
		}
		if lines := logs.Lines(`"level":"ERROR"`, `"msg":"handler panicked"`, "boom"); len(lines) != 1 {
			t.Errorf("the panic was logged %d times at ERROR, want once; the log:\n%s", len(lines), logs.String())
		} else if !strings.Contains(lines[0], "handler_test.go") {
			t.Errorf("the panic's log has no stack down to the handler that panicked: %s", lines[0])
		}
	})

	// A handler that ended its goroutine (runtime.Goexit, which t.FailNow and t.Fatal
	// call) ended the manager's poll loop with it: its batch stayed ACTIVE until its
	// lease expired, and the topic was no longer polled, with nothing in the log. In a
	// Buffer it ended a worker for good (a Buffer of one worker then took no batch).
	t.Run("AHandlerEndingItsGoroutineIsRelievedAndTheManagerGoesOn", func(t *testing.T) {
		exitOnce := func(calls *atomic.Int32) bool { return calls.Add(1) == 1 }
		bare := func() processor.Handler {
			var calls atomic.Int32
			return processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
				if exitOnce(&calls) {
					runtime.Goexit()
				}
				decisions := map[int64]repository.Decision{}
				for _, task := range b.Tasks {
					decisions[task.Sequence] = repository.Succeed("")
				}
				_ = b.Complete(decisions)
			})
		}
		perTask := func() processor.Handler {
			var calls atomic.Int32
			return processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
				if task.Identifier == "task-1" && exitOnce(&calls) {
					runtime.Goexit()
				}
				return repository.Succeed("")
			})
		}
		buffered := func(h processor.Handler) processor.Handler {
			b, err := processor.Buffer(h, processor.BufferConfig{MinWorkers: 1, MaxWorkers: 1})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		for _, c := range []struct {
			name    string
			handler func() processor.Handler
			// the states of the first batch's three tasks once relieved
			want [3]repository.State
		}{
			{"Bare", bare, [3]repository.State{repository.Failed, repository.Failed, repository.Failed}},
			{"BufferedBare", func() processor.Handler { return buffered(bare()) }, [3]repository.State{repository.Failed, repository.Failed, repository.Failed}},
			// the task that ended the goroutine fails; the one after it, never started,
			// is handed back and runs
			{"TaskFunc", perTask, [3]repository.State{repository.Succeeded, repository.Failed, repository.Succeeded}},
			{"BufferedTaskFunc", func() processor.Handler { return buffered(perTask()) }, [3]repository.State{repository.Succeeded, repository.Failed, repository.Succeeded}},
		} {
			t.Run(c.name, func(t *testing.T) {
				f := setup(t)
				first := f.pushN(3)
				errs := &errorLog{}
				var logs logbuf.Buffer
				p, managers := f.processor("worker", processor.Config{Logger: jsonLogger(&logs, slog.LevelInfo)},
					processor.ManagerConfig{Handler: c.handler(), BatchSize: 3, Listener: errs.listener()})
				f.start(p)
				for i, task := range first {
					f.eventually(fmt.Sprintf("task %d %s", i, c.want[i]), func() bool { return f.get(task.Sequence).State == c.want[i] })
				}
				for i, task := range first {
					if got := f.get(task.Sequence); got.State == repository.Failed && !strings.Contains(got.Output, "ended its goroutine (runtime.Goexit") {
						t.Errorf("task %d: output %q, want the end of the goroutine", i, got.Output)
					}
				}
				if !errs.contains("ended its goroutine") {
					t.Error("the end of the goroutine was not reported to the listener")
				}
				if lines := logs.Lines(`"level":"ERROR"`, `"msg":"handler ended its goroutine"`); len(lines) != 1 {
					t.Errorf("the end of the goroutine was logged %d times at ERROR, want once; the log:\n%s", len(lines), logs.String())
				} else if !strings.Contains(lines[0], "handler_test.go") {
					t.Errorf("the log has no stack down to the handler: %s", lines[0])
				}
				next, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "next"})
				if err != nil {
					t.Fatal(err)
				}
				managers[0].Resume()
				f.eventually("the next task succeeded", func() bool { return f.get(next[0].Sequence).State == repository.Succeeded })
			})
		}
	})

	t.Run("SecondCallbackIsRefusedAndReported", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(1)
		secondErr := make(chan error, 1)
		handler := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			_ = b.Complete(map[int64]repository.Decision{b.Tasks[0].Sequence: repository.Succeed("first")})
			secondErr <- b.Fail(errors.New("second"))
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler})
		f.start(p)
		if err := <-secondErr; !errors.Is(err, processor.ErrAlreadyReported) {
			t.Fatalf("second report: err = %v, want ErrAlreadyReported", err)
		}
		f.eventually("first decision committed", func() bool { return f.get(tasks[0].Sequence).State == repository.Succeeded })
		if got := f.get(tasks[0].Sequence).Output; got != "first" {
			t.Fatalf("output %q, want the first decision's", got)
		}
	})

	t.Run("HandlerThatNeverReportsFailsAfterItsTimeoutAndTheManagerGoesOn", func(t *testing.T) {
		f := setup(t)
		stuck := f.pushN(1)
		errs := &errorLog{}
		var calls atomic.Int32
		abandoned := make(chan struct{})
		handler := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			if calls.Add(1) == 1 {
				go func() { <-ctx.Done(); close(abandoned) }() // holds the batch and never reports
				return
			}
			_ = b.Complete(map[int64]repository.Decision{b.Tasks[0].Sequence: repository.Succeed("")})
		})
		p, managers := f.processor("worker", processor.Config{}, processor.ManagerConfig{
			Handler: handler, HandlerTimeout: 200 * time.Millisecond, Listener: errs.listener(),
		})
		f.start(p)
		f.eventually("stuck batch failed", func() bool { return f.get(stuck[0].Sequence).State == repository.Failed })
		if got := f.get(stuck[0].Sequence).Output; !strings.Contains(got, "handler timed out: it did not decide this task within 200ms") {
			t.Fatalf("output %q", got)
		}
		if !errs.contains("timed out") {
			t.Fatal("the timeout was not reported to the listener")
		}
		select {
		case <-abandoned: // the stuck handler is told to stop working on failed tasks
		case <-time.After(10 * time.Second):
			t.Fatal("the timed-out batch's context was not cancelled")
		}
		next, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "next"})
		if err != nil {
			t.Fatal(err)
		}
		managers[0].Resume()
		f.eventually("next batch succeeded", func() bool { return f.get(next[0].Sequence).State == repository.Succeeded })
	})

	t.Run("HandlerThatNeverReportsIsFailedAtShutdown", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(1)
		started := make(chan struct{})
		handler := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			close(started) // returns without ever reporting
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler, ShutdownTimeout: 100 * time.Millisecond})
		stop := f.start(p)
		<-started
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if got := f.get(tasks[0].Sequence); got.State != repository.Failed || !strings.Contains(got.Output, "shutdown timeout") {
			t.Fatalf("task %v %q, want FAILED naming the shutdown timeout", got.State, got.Output)
		}
	})

	t.Run("DecisionsForForeignTasksFailTheBatch", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(1)
		reportErr := make(chan error, 1)
		handler := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			reportErr <- b.Complete(map[int64]repository.Decision{b.Tasks[0].Sequence: repository.Succeed(""), 999: repository.Succeed("")})
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler})
		f.start(p)
		if err := <-reportErr; !errors.Is(err, processor.ErrForeignDecision) {
			t.Fatalf("err = %v, want ErrForeignDecision", err)
		}
		f.eventually("batch failed", func() bool { return f.get(tasks[0].Sequence).State == repository.Failed })
		if got := f.get(tasks[0].Sequence).Output; !strings.Contains(got, "[999]") {
			t.Fatalf("output %q does not name the foreign task", got)
		}
	})

	t.Run("TasksMissingFromTheDecisionsFail", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(2)
		handler := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			_ = b.Complete(map[int64]repository.Decision{b.Tasks[0].Sequence: repository.Succeed("")})
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler, BatchSize: 2})
		f.start(p)
		f.eventually("batch done", func() bool { return f.count(repository.Succeeded)+f.count(repository.Failed) == 2 })
		if got := f.get(tasks[1].Sequence); got.State != repository.Failed || !strings.Contains(got.Output, "no decision") {
			t.Fatalf("missing task %v %q, want FAILED saying it had no decision", got.State, got.Output)
		}
	})
}

func TestHandlers(t *testing.T) {
	// Stopping gave nil (a channel never closed) on the context a handler is called
	// with, and so in a Composite's steps: only a task's own context had it.
	t.Run("StoppingIsClosedOnTheHandlersAndTheStepsContexts", func(t *testing.T) {
		f := setup(t)
		f.pushN(1)
		type stops struct{ handler, step <-chan struct{} }
		seen := make(chan stops, 1)
		comp := processor.NewComposite()
		var step <-chan struct{}
		if err := comp.Step("only", func(ctx context.Context, tasks []repository.Task, _ *processor.Supplement) (map[int64]repository.Decision, error) {
			step = processor.Stopping(ctx)
			return map[int64]repository.Decision{tasks[0].Sequence: repository.Succeed("")}, nil
		}); err != nil {
			t.Fatal(err)
		}
		handler := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			comp.Handle(ctx, b)
			seen <- stops{processor.Stopping(ctx), step}
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler})
		stop := f.start(p)
		s := <-seen
		if s.handler == nil || s.step == nil {
			t.Fatalf("Stopping gave nil on the handler's context (%v) or the step's (%v)", s.handler == nil, s.step == nil)
		}
		stop()
		for name, ch := range map[string]<-chan struct{}{"handler's": s.handler, "step's": s.step} {
			select {
			case <-ch:
			default:
				t.Errorf("the %s Stopping channel is still open after the shutdown", name)
			}
		}
	})

	// A task's context ended only with its whole batch: a handler deciding its tasks one
	// by one kept the decided ones' contexts (and what hangs on them) alive until the
	// last task of the batch was decided and committed.
	t.Run("ATaskContextEndsOnceItsDecisionIsCommitted", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(2)
		type seen struct {
			ended    bool
			state    repository.State
			otherErr error
		}
		result := make(chan seen, 1)
		handler := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			if len(b.Tasks) != 2 {
				t.Errorf("batch of %d tasks, want both", len(b.Tasks))
			}
			first, second := b.Tasks[0].Sequence, b.Tasks[1].Sequence
			_ = b.Decide(first, repository.Succeed(""))
			var s seen
			select {
			case <-b.Context(first).Done():
				s.ended = true
				s.state = f.get(first).State
			case <-time.After(10 * time.Second):
			}
			s.otherErr = b.Context(second).Err()
			result <- s
			_ = b.Decide(second, repository.Succeed(""))
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler, BatchSize: 2})
		f.start(p)
		s := <-result
		if !s.ended {
			t.Fatal("the decided task's context did not end within 10 s while its batch mate was undecided")
		}
		if s.state != repository.Succeeded {
			t.Errorf("the context ended with the task %v, want its decision committed first (SUCCEEDED)", s.state)
		}
		if s.otherErr != nil {
			t.Errorf("the undecided task's context ended too: %v", s.otherErr)
		}
		f.eventually("both succeeded", func() bool {
			return f.get(tasks[0].Sequence).State == repository.Succeeded && f.get(tasks[1].Sequence).State == repository.Succeeded
		})
	})

	t.Run("TypedHandlerFailsUndecodableInputAndProcessesTheRest", func(t *testing.T) {
		f := setup(t)
		type order struct {
			Item  string `json:"item"`
			Count int    `json:"count"`
		}
		tasks, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append,
			repository.Creation{Identifier: "good", Input: `{"item":"tea","count":2}`},
			repository.Creation{Identifier: "bad", Input: `{"item":`})
		if err != nil {
			t.Fatal(err)
		}
		handler := processor.Typed(func(ctx context.Context, task repository.Task, o order) repository.Decision {
			return repository.Succeed(strings.Repeat(o.Item, o.Count))
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler, BatchSize: 10})
		f.start(p)
		f.eventually("batch done", func() bool { return f.count(repository.Succeeded)+f.count(repository.Failed) == 2 })
		if got := f.get(tasks[0].Sequence); got.State != repository.Succeeded || got.Output != "teatea" {
			t.Errorf("good task %v %q", got.State, got.Output)
		}
		if got := f.get(tasks[1].Sequence); got.State != repository.Failed || !strings.Contains(got.Output, "decode input of task") {
			t.Errorf("bad task %v %q, want FAILED with a decoding message", got.State, got.Output)
		}
	})

	t.Run("FollowUpsCommitWithTheCompletionAndWakeTheirManager", func(t *testing.T) {
		f := setup(t)
		if _, err := f.repo.CreateTopic(f.ctx, f.pool, "next"); err != nil {
			t.Fatal(err)
		}
		tasks := f.pushN(1)
		handler := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			b.Push("next", repository.Append, repository.Creation{Identifier: "child", Reference: "parent"})
			_ = b.Complete(map[int64]repository.Decision{b.Tasks[0].Sequence: repository.Succeed("")})
		})
		childDone := make(done, 1)
		p, _ := f.processor("worker", processor.Config{DisableNotifications: true},
			processor.ManagerConfig{Handler: handler},
			processor.ManagerConfig{Topic: "next", Handler: childDone.handler(0)})
		f.start(p)
		select {
		case <-childDone: // woken by the local resume after commit, not by NOTIFY (off) or its hour-long pause
		case <-time.After(10 * time.Second):
			t.Fatal("follow-up task not processed")
		}
		if got := f.get(tasks[0].Sequence); got.State != repository.Succeeded {
			t.Fatalf("parent %v", got.State)
		}
	})

	t.Run("FollowUpsToTheirOwnTopicWakeItWithoutNotifications", func(t *testing.T) {
		f := setup(t)
		childDone := make(chan struct{})
		handler := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			for _, task := range b.Tasks {
				if task.Identifier == "child" {
					close(childDone)
				} else {
					b.Push(f.topic, repository.Append, repository.Creation{Identifier: "child"})
				}
				_ = b.Decide(task.Sequence, repository.Succeed(""))
			}
		})
		p, _ := f.processor("worker", processor.Config{DisableNotifications: true}, processor.ManagerConfig{Handler: handler})
		f.start(p)
		// pushed once the manager has gone to sleep, and woken by hand (no NOTIFY)
		time.Sleep(500 * time.Millisecond)
		f.pushN(1)
		p.Resume(f.topic)
		select {
		case <-childDone: // woken after the commit, not by NOTIFY (off) or its hour-long pause
		case <-time.After(10 * time.Second):
			t.Fatal("follow-up task to the handler's own topic not processed")
		}
	})

	t.Run("FailedFollowUpFailsTheBatchAndWritesNothing", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(1)
		handler := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			b.Push("no-such-topic", repository.Append, repository.Creation{Identifier: "child"})
			_ = b.Complete(map[int64]repository.Decision{b.Tasks[0].Sequence: repository.Succeed("")})
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler})
		f.start(p)
		f.eventually("batch failed", func() bool { return f.get(tasks[0].Sequence).State == repository.Failed })
		if got := f.get(tasks[0].Sequence).Output; !strings.Contains(got, "unknown topic") {
			t.Fatalf("output %q, want the follow-up's error", got)
		}
	})

	t.Run("FailureIsRetriedPerPolicyAndSnoozeDoesNotCountAnAttempt", func(t *testing.T) {
		f := setup(t)
		if _, err := f.repo.Configure(f.ctx, f.pool, f.topic, repository.TopicSettings{
			MaxAttempts: 2, BackoffBase: 10 * time.Millisecond, BackoffCap: 10 * time.Millisecond,
		}); err != nil {
			t.Fatal(err)
		}
		tasks := f.pushN(1)
		var calls atomic.Int32
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			switch calls.Add(1) {
			case 1, 2:
				return repository.SnoozeFor(20 * time.Millisecond) // not counted
			case 3:
				return repository.Fail(errors.New("transient")) // attempt 1 of 2 used
			default:
				return repository.Fail(errors.New("final")) // attempt 2 of 2 used
			}
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler})
		f.start(p)
		f.eventually("task failed for good", func() bool { return f.get(tasks[0].Sequence).State == repository.Failed })
		got := f.get(tasks[0].Sequence)
		if calls.Load() != 4 || got.Output != "final" || len(got.Errors) != 2 {
			t.Fatalf("calls %d, output %q, errors %q; want 4 calls, output final, both errors kept", calls.Load(), got.Output, got.Errors)
		}
	})
}

func TestCompletionReportsTheStoredTasks(t *testing.T) {
	// The completion is built from the tasks as polled: a handler that rewrites the
	// fields of its batch's tasks changes neither what is completed nor what OnComplete
	// reports as stored.
	f := setup(t)
	f.pushN(5)
	var (
		mu       sync.Mutex
		reported []repository.Task
	)
	handler := processor.BatchFunc(func(_ context.Context, tasks []repository.Task) (map[int64]repository.Decision, error) {
		decisions := make(map[int64]repository.Decision, len(tasks))
		for i := range tasks {
			decisions[tasks[i].Sequence] = repository.Succeed("ok " + tasks[i].Identifier)
			tasks[i].Identifier, tasks[i].Input, tasks[i].Reference = "rewritten", "rewritten", "rewritten"
		}
		return decisions, nil
	})
	listener := processor.Listener{OnComplete: func(_ string, tasks []repository.Task, _ time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, tasks...)
	}}
	p, _ := f.processor("rewriter", processor.Config{}, processor.ManagerConfig{Handler: handler, Listener: listener})
	f.start(p)
	f.eventually("5 tasks reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reported) == 5
	})
	mu.Lock()
	defer mu.Unlock()
	for _, task := range reported {
		stored, err := f.repo.Get(f.ctx, f.pool, f.topic, task.Sequence)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(task, stored) {
			t.Errorf("OnComplete reported %+v\nstored               %+v", task, stored)
		}
		if stored.State != repository.Succeeded || stored.Output != "ok "+stored.Identifier {
			t.Errorf("task %d is %v with output %q", stored.Sequence, stored.State, stored.Output)
		}
	}
}

// A report reaches OnCallback before its decisions are queued, so before OnComplete: the
// decisions were queued first, and a commit could reach OnComplete while OnCallback had
// not yet run, which made the metrics count a snooze as a retry (both READY once
// committed) and keep its entry.
func TestCallbackBeforeComplete(t *testing.T) {
	f := setup(t)
	tasks := f.pushN(1)
	var (
		completed = make(chan struct{}, 1)
		early     atomic.Bool
	)
	listener := processor.Listener{
		OnCallback: func(string, []repository.Task, map[int64]repository.Decision, time.Duration) {
			// long enough for a queued decision to be committed
			select {
			case <-completed:
				early.Store(true)
			case <-time.After(500 * time.Millisecond):
			}
		},
		OnComplete: func(string, []repository.Task, time.Duration) {
			select {
			case completed <- struct{}{}:
			default:
			}
		},
	}
	handler := processor.TaskFunc(func(context.Context, repository.Task) repository.Decision {
		return repository.SnoozeFor(time.Hour)
	})
	p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler, Listener: listener})
	f.start(p)
	f.eventually("the snooze committed", func() bool { return f.get(tasks[0].Sequence).Returned == 1 })
	if early.Load() {
		t.Fatal("OnComplete ran while OnCallback of the same decisions had not returned")
	}
}

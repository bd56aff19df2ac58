package pgtasktest

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// fatalTB records a Fatalf and ends its goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	message string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.message = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestRunEndsAHandlerWaitingOnItsContext: a synchronous handler that waits on its
// context is given the timeout too, and Run fails the test when it ends. It was called
// on the caller's context, without end: Run never returned.
func TestRunEndsAHandlerWaitingOnItsContext(t *testing.T) {
	t.Parallel()
	h := processor.TaskFunc(func(ctx context.Context, _ repository.Task) repository.Decision {
		<-ctx.Done()
		return repository.Fail(context.Cause(ctx))
	})
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(context.Background(), tb, h, 100*time.Millisecond, "t", NewTasks("t", repository.Creation{Identifier: "a"}))
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return 30 s after its 100 ms timeout")
	}
	if !strings.Contains(tb.message, "once its context had ended") {
		t.Errorf("Run's failure: %q, want it to say the handler decided only once the context ended", tb.message)
	}
}

// TestRunSaysAHandlerDecidedButReturnedLate: a handler that decides every task at once
// and then waits on its context fails the test, with a message that says so (it said
// the handler decided only once the context had ended).
func TestRunSaysAHandlerDecidedButReturnedLate(t *testing.T) {
	t.Parallel()
	h := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
		for _, task := range b.Tasks {
			_ = b.Decide(task.Sequence, repository.Succeed(""))
		}
		<-ctx.Done()
	})
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(context.Background(), tb, h, 100*time.Millisecond, "t", NewTasks("t", repository.Creation{Identifier: "a"}))
	}()
	<-done
	if !strings.Contains(tb.message, "decided every task but returned only once its context had ended") {
		t.Errorf("Run's failure: %q, want it to say the handler decided in time and returned late", tb.message)
	}
}

// TestRunHandsACopy: a handler that reorders its batch's tasks leaves the caller's
// slice as it was (it was the batch's own, and the caller's pairing of tasks with what
// it expects moved with it).
func TestRunHandsACopy(t *testing.T) {
	t.Parallel()
	tasks := NewTasks("t", repository.Creation{Identifier: "a"}, repository.Creation{Identifier: "b"})
	h := processor.BatchFunc(func(ctx context.Context, tasks []repository.Task) (map[int64]repository.Decision, error) {
		slices.Reverse(tasks)
		out := map[int64]repository.Decision{}
		for _, task := range tasks {
			out[task.Sequence] = repository.Succeed(task.Identifier)
		}
		return out, nil
	})
	run(t.Context(), t, h, time.Minute, "t", tasks)
	if tasks[0].Identifier != "a" || tasks[1].Identifier != "b" {
		t.Errorf("the caller's tasks after Run: %s, %s; want a, b as given", tasks[0].Identifier, tasks[1].Identifier)
	}
}

// TestSameInput: inputs compare as JSON values, key order, spacing and the writing of a
// number aside, and numbers exactly (decoded as float64, 2^53 + 1 matched 2^53); an
// input that is JSON only as a scalar compares as text.
func TestSameInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		got, want string
		same      bool
	}{
		{`{"a": 1, "b": [true, null]}`, `{"b":[true,null],"a":1}`, true},
		// numbers by value, and by whether they are written as integers (an int
		// refuses the others)
		{`{"n": 1.50}`, `{"n": 1.5}`, true},
		{`{"n": 15e-1}`, `{"n": 1.5}`, true},
		{`{"n": -0}`, `{"n": 0}`, true},
		{`{"n": 1.0}`, `{"n": 1}`, false},
		{`{"n": 1e2}`, `{"n": 100}`, false},
		{`{"n": 1e+06}`, `{"n": 1000000}`, false},
		{`{"order_id": 9007199254740993}`, `{"order_id": 9007199254740992}`, false},
		{`{"n": 1}`, `{"n": "1"}`, false},
		{`not json`, `not json`, true},
		{`not json`, `not  json`, false},
		{`1 2`, `1`, false},
		{`{"to": "a"}}`, `{"to": "a"}`, false}, // a handler's json.Unmarshal refuses the first
		{`[1]]`, `[1]`, false},
		{"{\"to\": \"a\"} \n", `{"to": "a"}`, true},
		// text that is JSON only as a scalar compares as text: a version, a number
		{`1.10`, `1.1`, false},
		{`1e2`, `100`, false},
		{`100`, `100`, true},
		{`"a"`, `"\u0061"`, false},
	} {
		if got := sameInput(tc.got, tc.want); got != tc.same {
			t.Errorf("sameInput(%s, %s) = %v, want %v", tc.got, tc.want, got, tc.same)
		}
	}
}

// TestRunEndsAHandlerIgnoringItsContext: a handler that never returns (blocked on a
// channel, its context ignored) fails the test soon after the timeout, naming the
// undecided task. Run used to call it on the test's goroutine and hang until -timeout.
func TestRunEndsAHandlerIgnoringItsContext(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	defer close(block) // the handler's goroutine ends with the test
	h := processor.TaskFunc(func(context.Context, repository.Task) repository.Decision {
		<-block
		return repository.Succeed("")
	})
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(context.Background(), tb, h, 100*time.Millisecond, "t", NewTasks("t", repository.Creation{Identifier: "a"}))
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return 30 s after its 100 ms timeout")
	}
	if !strings.Contains(tb.message, "the handler did not return by the end of its context") || !strings.Contains(tb.message, "[1]") {
		t.Errorf("Run's failure: %q, want it to say the handler did not return, naming task 1", tb.message)
	}
}

// TestRunSaysAHandlerEndedItsGoroutine: a handler that calls t.FailNow or t.Fatal (or
// runtime.Goexit) ends its goroutine with its task undecided; Run says so at once. It
// waited for the end of the handler's context (RunTimeout: a minute), then said the
// handler had not decided its task.
func TestRunSaysAHandlerEndedItsGoroutine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		decide  bool
		message string
	}{
		{"Undecided", false, "with tasks undecided [1]"},
		{"AfterDeciding", true, "after deciding every task"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := processor.HandlerFunc(func(_ context.Context, b *processor.Batch) {
				if tc.decide {
					_ = b.Decide(1, repository.Succeed(""))
				}
				runtime.Goexit() // what t.FailNow does on the goroutine that calls it
			})
			tb := &fatalTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				run(context.Background(), tb, h, time.Minute, "t", NewTasks("t", repository.Creation{Identifier: "a"}))
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return 30 s after the handler ended its goroutine (its timeout is a minute)")
			}
			if !strings.Contains(tb.message, "the handler ended its goroutine") || !strings.Contains(tb.message, tc.message) {
				t.Errorf("Run's failure: %q, want it to say the handler ended its goroutine %s", tb.message, tc.message)
			}
		})
	}
}

// TestWorkSaysATransactionHoldsTheTopic: Work in a transaction while another open one
// created the topic waited on it until go test's -timeout, without a word; it fails the
// test after its bound, saying what holds it.
func TestWorkSaysATransactionHoldsTheTopic(t *testing.T) {
	// not parallel: workWait is the package's
	defer func(d time.Duration) { workWait = d }(workWait)
	workWait = 300 * time.Millisecond
	pool := NewPool(t)
	ctx := t.Context()
	first, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx)
	if _, err := newReader().CreateTopic(ctx, first, "jobs"); err != nil {
		t.Fatal(err)
	}
	second, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Rollback(ctx)
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	long, cancel := context.WithTimeout(ctx, 10*time.Minute) // a deadline of the test's own, later
	defer cancel()
	go func() {
		defer close(done)
		Work(long, tb, second, processor.TaskFunc(func(context.Context, repository.Task) repository.Decision {
			return repository.Succeed("")
		}), "jobs", repository.Creation{Identifier: "a"})
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Work did not return 30 s after its 300 ms bound")
	}
	if !strings.Contains(tb.message, `the creation of topic "jobs" waited 300ms: another open transaction holds it`) {
		t.Errorf("Work's failure: %q, want it to say another transaction holds the topic", tb.message)
	}
}

// fatalOf runs fn with a fatalTB and returns the message it failed the test with.
func fatalOf(t *testing.T, fn func(tb testing.TB)) string {
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(tb)
	}()
	<-done
	return tb.message
}

// TestRunRefusesNoHandlerAndNoTasks: a nil handler (nil, or a nil TaskFunc or *Buffered
// in the interface), which a processor refuses, fails the test saying so; it failed every
// task as a handler's panic, which a test expecting failures took for its own. No tasks
// (no creations for Work) fail it too: a processor never hands a handler an empty batch.
func TestRunRefusesNoHandlerAndNoTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tasks := NewTasks("t", repository.Creation{Identifier: "a"})
	var nilFunc processor.TaskFunc
	var nilBuffer *processor.Buffered
	for name, h := range map[string]processor.Handler{"nil": nil, "TaskFunc": nilFunc, "Buffered": nilBuffer} {
		if msg := fatalOf(t, func(tb testing.TB) { Run(ctx, tb, h, tasks...) }); !strings.Contains(msg, "the handler is nil") {
			t.Errorf("Run with a nil handler (%s): failure %q, want it to say the handler is nil", name, msg)
		}
		if msg := fatalOf(t, func(tb testing.TB) { Work(ctx, tb, nil, h, "t", repository.Creation{Identifier: "a"}) }); !strings.Contains(msg, "the handler is nil") {
			t.Errorf("Work with a nil handler (%s): failure %q, want it to say the handler is nil", name, msg)
		}
	}
	ok := processor.TaskFunc(func(context.Context, repository.Task) repository.Decision { return repository.Succeed("") })
	if msg := fatalOf(t, func(tb testing.TB) { Run(ctx, tb, ok) }); !strings.Contains(msg, "no tasks") {
		t.Errorf("Run without tasks: failure %q, want it to say there are no tasks", msg)
	}
	if msg := fatalOf(t, func(tb testing.TB) { Work(ctx, tb, nil, ok, "t") }); !strings.Contains(msg, "no creations") {
		t.Errorf("Work without creations: failure %q, want it to say there are no creations", msg)
	}
}

// endingCtx is a context with a deadline whose Err says it passed once ended is set,
// while its Done stays open: a deadline that passes just after the handler returned, as
// Run looks at the context a moment after seeing the return.
type endingCtx struct {
	context.Context
	ended atomic.Bool
}

func (c *endingCtx) Deadline() (time.Time, bool) { return time.Now().Add(time.Hour), true }

func (c *endingCtx) Err() error {
	if c.ended.Load() {
		return context.DeadlineExceeded
	}
	return nil
}

// TestRunOfAHandlerThatReturnedInTime: a handler that decided every task and returned
// before its context ended passes, though the context ends before Run looks at it; Run
// failed it ("decided only once its context had ended").
func TestRunOfAHandlerThatReturnedInTime(t *testing.T) {
	t.Parallel()
	ctx := &endingCtx{Context: context.Background()}
	h := processor.HandlerFunc(func(_ context.Context, b *processor.Batch) {
		for _, task := range b.Tasks {
			_ = b.Decide(task.Sequence, repository.Succeed(""))
		}
		ctx.ended.Store(true) // the deadline passes as the handler returns
	})
	var o processor.Outcome
	if msg := fatalOf(t, func(tb testing.TB) { o = Run(ctx, tb, h, NewTasks("t", repository.Creation{Identifier: "a"})...) }); msg != "" {
		t.Fatalf("Run failed the test: %s", msg)
	}
	if len(o.Decisions) != 1 {
		t.Errorf("outcome %+v, want the one decision", o)
	}
}

// TestRunOfABufferWhoseHandlerEndsItsGoroutine: a handler run by a Buffer that ends its
// goroutine (t.Fatal) on a task fails the test saying so, naming that task; the Buffer's
// worker failed it and handed the others back after Handle had returned, which Run took
// for a Buffer stopped.
func TestRunOfABufferWhoseHandlerEndsItsGoroutine(t *testing.T) {
	t.Parallel()
	inner := processor.TaskFunc(func(_ context.Context, task repository.Task) repository.Decision {
		if task.Identifier == "a" {
			runtime.Goexit() // as t.Fatal in a handler does
		}
		return repository.Succeed("")
	})
	buffered, err := processor.Buffer(inner, processor.BufferConfig{MaxWorkers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer buffered.Stop()
	tasks := NewTasks("t", repository.Creation{Identifier: "a"}, repository.Creation{Identifier: "b"})
	msg := fatalOf(t, func(tb testing.TB) { Run(context.Background(), tb, buffered, tasks...) })
	if !strings.Contains(msg, "the handler ended its goroutine") || !strings.Contains(msg, fmt.Sprint([]int64{tasks[0].Sequence})) || strings.Contains(msg, "stopped") {
		t.Errorf("Run's failure: %q, want it to say the handler ended its goroutine on task %d", msg, tasks[0].Sequence)
	}
}

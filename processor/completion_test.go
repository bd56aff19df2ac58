package processor_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// decidedLog counts the decisions a manager's handler reported (OnCallback) and
// signals when a number of them was reached.
type decidedLog struct {
	mu      sync.Mutex
	n       int
	waiting map[int]chan struct{}
}

func (l *decidedLog) listener() processor.Listener {
	return processor.Listener{OnCallback: func(_ string, tasks []repository.Task, _ map[int64]repository.Decision, _ time.Duration) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.n += len(tasks)
		for n, ch := range l.waiting {
			if l.n >= n {
				close(ch)
				delete(l.waiting, n)
			}
		}
	}}
}

// reached returns a channel closed once n decisions were reported.
func (l *decidedLog) reached(n int) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan struct{})
	if l.n >= n {
		close(ch)
		return ch
	}
	if l.waiting == nil {
		l.waiting = map[int]chan struct{}{}
	}
	l.waiting[n] = ch
	return ch
}

// await waits for ch, failing the test after a minute.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestPerTaskCompletion(t *testing.T) {
	t.Run("ShutdownCommitsTheFinishedTasksAndHandsBackOnlyTheBlockedOne", func(t *testing.T) {
		// The case: a batch of five, four finished, one handler blocked when the
		// shutdown begins. The four are committed; the blocked one, which started, goes
		// back to READY under the topic's (default) retry policy with its attempt used.
		f := setup(t)
		f.topic = "retried"
		f.createTopic(f.topic, 0) // the default policy: 25 attempts
		tasks := f.pushN(5)
		blocked := tasks[4].Sequence
		started := make(chan struct{})
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			if task.Sequence == blocked {
				close(started)
				<-ctx.Done() // cancelled only when the shutdown deadline passes
				return repository.Succeed("too late")
			}
			return repository.Succeed("finished")
		})
		decided := &decidedLog{}
		// An hour-long flush interval keeps the four decisions waiting in the completer:
		// nothing is committed before the shutdown, which must commit them.
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{
			Topic: f.topic, Handler: handler, BatchSize: 5, FlushInterval: time.Hour,
			ShutdownTimeout: 300 * time.Millisecond, Listener: decided.listener(),
		})
		stop := f.start(p)
		await(t, started, "the fifth task to start")
		await(t, decided.reached(4), "four decisions")
		if n := f.count(repository.Active); n != 5 {
			t.Fatalf("%d tasks ACTIVE before the shutdown, want all 5 (the decisions wait to be flushed)", n)
		}
		if err := stop(); err != nil {
			t.Fatalf("run: %v", err)
		}
		for _, task := range tasks[:4] {
			got := f.get(task.Sequence)
			if got.State != repository.Succeeded || got.Output != "finished" || got.Attempt-got.Returned != 1 {
				t.Errorf("finished task %d = %v %q with %d attempts used, want SUCCEEDED \"finished\" with 1",
					task.Sequence, got.State, got.Output, got.Attempt-got.Returned)
			}
		}
		got := f.get(blocked)
		if got.State != repository.Ready || got.Attempt-got.Returned != 1 || len(got.Errors) != 1 ||
			!strings.Contains(got.Errors[0], "shutdown timeout") {
			t.Errorf("blocked task = %v with %d attempts used, errors %q; want READY (handed back to the retry policy), its attempt used, the shutdown named",
				got.State, got.Attempt-got.Returned, got.Errors)
		}
	})

	t.Run("AtTheShutdownDeadlineUnstartedTasksUseNoAttempt", func(t *testing.T) {
		// The first task blocks; the four after it never start. At the deadline the
		// running one fails (one attempt here: FAILED), the others go back READY with no
		// attempt used.
		f := setup(t)
		tasks := f.pushN(5)
		started := make(chan struct{})
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			if task.Sequence == tasks[0].Sequence {
				close(started)
				<-ctx.Done()
			}
			return repository.Succeed("")
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{
			Handler: handler, BatchSize: 5, ShutdownTimeout: 200 * time.Millisecond,
		})
		stop := f.start(p)
		await(t, started, "the first task to start")
		if err := stop(); err != nil {
			t.Fatalf("run: %v", err)
		}
		if got := f.get(tasks[0].Sequence); got.State != repository.Failed || !strings.Contains(got.Output, "shutdown timeout") {
			t.Errorf("running task = %v %q, want FAILED naming the shutdown timeout", got.State, got.Output)
		}
		for _, task := range tasks[1:] {
			if got := f.get(task.Sequence); got.State != repository.Ready || got.Attempt-got.Returned != 0 || len(got.Errors) != 0 {
				t.Errorf("unstarted task %d = %v with %d attempts used, errors %q; want READY with none used",
					task.Sequence, got.State, got.Attempt-got.Returned, got.Errors)
			}
		}
	})

	t.Run("SlowTaskDoesNotHoldUpTheCommitsOfItsBatchMates", func(t *testing.T) {
		// A handler deciding its tasks concurrently: the first one is slow, the other
		// four are decided at once and committed while it still runs.
		f := setup(t)
		tasks := f.pushN(5)
		release := make(chan struct{})
		handler := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			for _, task := range b.Tasks {
				go func() {
					if task.Sequence == tasks[0].Sequence {
						<-release
					}
					_ = b.Decide(task.Sequence, repository.Succeed("done"))
				}()
			}
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler, BatchSize: 5})
		f.start(p)
		ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
		defer cancel()
		mates := []int64{tasks[1].Sequence, tasks[2].Sequence, tasks[3].Sequence, tasks[4].Sequence}
		got, err := p.Wait(ctx, f.topic, mates...)
		if err != nil {
			t.Fatalf("wait for the batch mates: %v", err)
		}
		for _, task := range got {
			if task.State != repository.Succeeded {
				t.Errorf("batch mate %d = %v, want SUCCEEDED", task.Sequence, task.State)
			}
		}
		if slow := f.get(tasks[0].Sequence); slow.State != repository.Active {
			t.Fatalf("slow task = %v, want still ACTIVE", slow.State)
		}
		close(release)
		if got, err := p.Wait(ctx, f.topic, tasks[0].Sequence); err != nil || got[0].State != repository.Succeeded {
			t.Fatalf("slow task after release = %+v, %v; want SUCCEEDED", got, err)
		}
	})

	t.Run("TaskFuncCommitsEachTaskBeforeTheNextEnds", func(t *testing.T) {
		// One task at a time: the tasks before a slow one are committed while it runs.
		f := setup(t)
		tasks := f.pushN(5)
		release := make(chan struct{})
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			if task.Sequence == tasks[4].Sequence {
				<-release
			}
			return repository.Succeed("")
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler, BatchSize: 5})
		f.start(p)
		ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
		defer cancel()
		if _, err := p.Wait(ctx, f.topic, tasks[0].Sequence, tasks[1].Sequence, tasks[2].Sequence, tasks[3].Sequence); err != nil {
			t.Fatalf("wait for the first four: %v", err)
		}
		if slow := f.get(tasks[4].Sequence); slow.State != repository.Active {
			t.Fatalf("slow task = %v, want still ACTIVE", slow.State)
		}
		close(release)
		if _, err := p.Wait(ctx, f.topic, tasks[4].Sequence); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("HandlerTimeoutFailsTheRunningTaskAndHandsBackTheRest", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(3)
		stuck := make(chan struct{})
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			if task.Sequence == tasks[1].Sequence {
				<-stuck
			}
			return repository.Succeed("")
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{
			Handler: handler, BatchSize: 3, HandlerTimeout: 300 * time.Millisecond, Limiter: processor.Bound(1),
		})
		f.start(p)
		f.eventually("the stuck task to fail", func() bool { return f.get(tasks[1].Sequence).State == repository.Failed })
		if got := f.get(tasks[0].Sequence); got.State != repository.Succeeded {
			t.Errorf("first task = %v, want SUCCEEDED (decided before the timeout)", got.State)
		}
		if got := f.get(tasks[1].Sequence); !strings.Contains(got.Output, "timed out") {
			t.Errorf("stuck task's output %q, want the timeout", got.Output)
		}
		// The third never started: handed back with no attempt used.
		f.eventually("the third task to be handed back", func() bool { return f.get(tasks[2].Sequence).State != repository.Active })
		if got := f.get(tasks[2].Sequence); got.State != repository.Ready || got.Attempt-got.Returned != 0 {
			t.Errorf("third task = %v with %d attempts used, want READY with none used", got.State, got.Attempt-got.Returned)
		}
		// Once the handler returns (it runs on the poll loop), the third task runs.
		close(stuck)
		f.eventually("the third task to succeed", func() bool { return f.get(tasks[2].Sequence).State == repository.Succeeded })
		if got := f.get(tasks[2].Sequence); got.Attempt-got.Returned != 1 {
			t.Errorf("third task used %d attempts, want 1 (the hand-back used none)", got.Attempt-got.Returned)
		}
	})

	// A handler may change its batch's Tasks; a relieved one (HandlerTimeout) may still
	// be doing so while the manager reports and forgets the batch, which then reads its
	// own copy (the race detector, as .ci/run runs the tests, tells otherwise).
	t.Run("AHandlerChangingTasksAfterItWasRelieved", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(3)
		changed := make(chan struct{})
		var handler processor.HandlerFunc = func(ctx context.Context, b *processor.Batch) {
			time.Sleep(600 * time.Millisecond) // past the timeout, not watching ctx
			b.Tasks[0].Identifier = "changed"
			b.Tasks = b.Tasks[:1]
			close(changed)
		}
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{
			Handler: handler, BatchSize: 3, HandlerTimeout: 200 * time.Millisecond,
			Listener: processor.Listener{OnCallback: func(string, []repository.Task, map[int64]repository.Decision, time.Duration) {}},
		})
		f.start(p)
		<-changed
		// a handler that is not a TaskFunc starts every task of its batch at once: the
		// timeout fails them all
		for _, task := range tasks {
			f.eventually("every task failed", func() bool { return f.get(task.Sequence).State == repository.Failed })
		}
	})

	t.Run("FollowUpsCommitWithTheNextDecision", func(t *testing.T) {
		f := setup(t)
		f.createTopic("next", 0)
		tasks := f.pushN(2)
		release := make(chan struct{})
		handler := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			go func() {
				first, second := b.Tasks[0], b.Tasks[1]
				_ = b.Push("next", repository.Append, repository.Creation{Identifier: "after-" + first.Identifier})
				_ = b.Decide(first.Sequence, repository.Succeed(""))
				<-release
				_ = b.Push("next", repository.Append, repository.Creation{Identifier: "after-" + second.Identifier})
				_ = b.Complete(map[int64]repository.Decision{second.Sequence: repository.Succeed("")})
				if err := b.Push("next", repository.Append, repository.Creation{Identifier: "too-late"}); err == nil {
					t.Error("a push after every decision was accepted")
				}
			}()
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler, BatchSize: 2})
		f.start(p)
		ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
		defer cancel()
		if _, err := p.Wait(ctx, f.topic, tasks[0].Sequence); err != nil {
			t.Fatal(err)
		}
		pushed := func() []string {
			page, err := f.repo.Page(f.ctx, f.pool, "next", repository.TaskFilter{}, 0, 10, repository.Forward)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, task := range page {
				ids = append(ids, task.Identifier)
			}
			return ids
		}
		if got := pushed(); len(got) != 1 || got[0] != "after-task-0" {
			t.Fatalf("follow-ups after the first decision = %v, want [after-task-0]", got)
		}
		close(release)
		if _, err := p.Wait(ctx, f.topic, tasks[1].Sequence); err != nil {
			t.Fatal(err)
		}
		if got := pushed(); len(got) != 2 || got[1] != "after-task-1" {
			t.Fatalf("follow-ups after the second decision = %v, want [after-task-0 after-task-1]", got)
		}
	})
}

// TestRefusedFollowUpFailsItsTaskAlone: decisions reported one after the other join one
// report; a follow-up of one task refused (a push to an unknown topic) fails that task
// alone, its batch mates' decisions are committed as reported. Before, every decision
// of the report failed with the refusal.
func TestRefusedFollowUpFailsItsTaskAlone(t *testing.T) {
	f := setup(t)
	handler := processor.HandlerFunc(func(_ context.Context, b *processor.Batch) {
		for _, task := range b.Tasks {
			if task.Input == "0" {
				_ = b.Push("nope", repository.Append, repository.Creation{Identifier: "x"})
			}
			_ = b.Decide(task.Sequence, repository.Succeed("ok"))
		}
	})
	p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler, BatchSize: 10})
	f.start(p)
	tasks := f.pushN(3)
	// finished states only: two counts of READY and ACTIVE, a statement each, could both
	// miss tasks leased between them
	f.eventually("every task decided", func() bool { return f.count(repository.Succeeded)+f.count(repository.Failed) == 3 })
	for _, task := range tasks {
		got := f.get(task.Sequence)
		if task.Input == "0" {
			if got.State != repository.Failed || !strings.Contains(strings.Join(got.Errors, " "), "unknown topic") {
				t.Errorf("the task whose follow-up was refused is %v %v, want FAILED naming the refusal", got.State, got.Errors)
			}
			continue
		}
		if got.State != repository.Succeeded || got.Output != "ok" {
			t.Errorf("batch mate %d is %v %q %v, want SUCCEEDED as decided", task.Sequence, got.State, got.Output, got.Errors)
		}
	}
}

// TestAnInvalidDecisionFailsItsTaskAlone: a decision no completion can store (an unknown
// result, a snooze with a negative delay) fails its task, naming what is wrong, and the
// batch's other decisions are committed as made. It failed every decision reported with
// it, and with attempts left the tasks decided SUCCESS ran again.
func TestAnInvalidDecisionFailsItsTaskAlone(t *testing.T) {
	f := setup(t)
	f.createTopic(f.topic, 3)
	var runs sync.Map
	handler := processor.TaskFunc(func(_ context.Context, task repository.Task) repository.Decision {
		n, _ := runs.LoadOrStore(task.Sequence, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		switch task.Input {
		case "0":
			return repository.Decision{Result: 9}
		case "1":
			return repository.Decision{Snooze: true, Delay: -time.Second}
		}
		return repository.Succeed("ok")
	})
	p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler, BatchSize: 10})
	tasks := f.pushN(4)
	f.start(p)
	f.eventually("every task decided", func() bool { return f.count(repository.Succeeded)+f.count(repository.Failed) == 4 })
	for _, task := range tasks {
		got := f.get(task.Sequence)
		n, _ := runs.Load(task.Sequence)
		switch task.Input {
		case "0", "1":
			says := map[string]string{"0": "unknown result 9", "1": "snooze delay -1s is negative"}[task.Input]
			if got.State != repository.Failed || !strings.Contains(strings.Join(got.Errors, " "), "invalid decision: ") ||
				!strings.Contains(strings.Join(got.Errors, " "), says) {
				t.Errorf("task %s decided invalidly is %v %v, want FAILED saying %q", task.Input, got.State, got.Errors, says)
			}
		default:
			if got.State != repository.Succeeded || got.Output != "ok" || n.(*atomic.Int32).Load() != 1 {
				t.Errorf("batch mate %s is %v %q (ran %d times), want SUCCEEDED once", task.Input, got.State, got.Output, n.(*atomic.Int32).Load())
			}
		}
	}
}

// TestSeveralJunctionsInOneCommit: a commit of decisions that declared several
// junctions locks their identifiers together first (Repository.LockJunctions) and runs
// each: a batch whose two tasks each suspend and release themselves runs them again.
func TestSeveralJunctionsInOneCommit(t *testing.T) {
	f := setup(t)
	var runs sync.Map
	handler := processor.HandlerFunc(func(_ context.Context, b *processor.Batch) {
		decisions := map[int64]repository.Decision{}
		for _, task := range b.Tasks {
			n, _ := runs.LoadOrStore(task.Identifier, new(atomic.Int32))
			if n.(*atomic.Int32).Add(1) > 1 {
				decisions[task.Sequence] = repository.Succeed("released")
				continue
			}
			if err := b.Junction(f.topic, repository.Singular, []string{task.Identifier}); err != nil {
				t.Errorf("junction: %v", err)
			}
			decisions[task.Sequence] = repository.Suspend("waiting")
		}
		_ = b.Complete(decisions)
	})
	tasks := f.pushN(2)
	p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler, BatchSize: 2})
	f.start(p)
	for _, task := range tasks {
		f.eventually("each task released by its junction and run again", func() bool {
			got := f.get(task.Sequence)
			return got.State == repository.Succeeded && got.Output == "released"
		})
	}
}

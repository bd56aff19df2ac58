package processor_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

func TestShutdown(t *testing.T) {
	t.Run("HandsBackUnstartedTasksAndCommitsTheRunningOne", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(30)
		first := tasks[0].Sequence
		started := make(chan struct{})
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			if task.Sequence == first {
				close(started)
				<-processor.Stopping(ctx) // still running when the shutdown begins
				return repository.Succeed("finished during shutdown")
			}
			return repository.Succeed("")
		})
		// One worker busy with the first batch, two more batches prefetched.
		buffered, err := processor.Buffer(handler, processor.BufferConfig{Queue: 2, MinWorkers: 1, MaxWorkers: 1})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: buffered, BatchSize: 10})
		stop := f.start(p)
		<-started
		f.eventually("three batches leased", func() bool { return f.count(repository.Active) == 30 })
		if err := stop(); err != nil {
			t.Fatalf("run: %v", err)
		}
		got := f.get(first)
		if got.State != repository.Succeeded || got.Output != "finished during shutdown" {
			t.Fatalf("running task = %v %q, want SUCCEEDED with its message", got.State, got.Output)
		}
		for _, task := range tasks[1:] {
			got := f.get(task.Sequence)
			// Attempt counts leases (the completion fence); Returned the leases handed
			// back: the attempts used are unchanged.
			if got.State != repository.Ready || got.Attempt-got.Returned != 0 {
				t.Errorf("unstarted task %d = %v with %d attempts used, want READY with none used", task.Sequence, got.State, got.Attempt-got.Returned)
			}
		}
	})

	// A TaskFunc running the first task of its batch as the shutdown begins: the tasks
	// behind it are handed back at once, not when it finishes (another processor can
	// take them meanwhile, and a kill before it finishes would have them expire with an
	// attempt used, never run).
	t.Run("HandsBackTheRestOfARunningBatchAtOnce", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(3)
		first := tasks[0].Sequence
		started, release := make(chan struct{}), make(chan struct{})
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			if task.Sequence == first {
				close(started)
				<-release
				return repository.Succeed("finished during shutdown")
			}
			return repository.Succeed("")
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler, BatchSize: 3})
		stop := f.start(p)
		<-started
		stopped := make(chan error, 1)
		go func() { stopped <- stop() }()
		if !f.within(10*time.Second, func() bool { return f.count(repository.Ready) == 2 }) {
			t.Fatalf("the tasks behind the running one: %d READY 10 s into the shutdown, want 2 handed back", f.count(repository.Ready))
		}
		for _, task := range tasks[1:] {
			if got := f.get(task.Sequence); got.State != repository.Ready || got.Attempt-got.Returned != 0 {
				t.Errorf("unstarted task %d = %v with %d attempts used, want READY with none used", task.Sequence, got.State, got.Attempt-got.Returned)
			}
		}
		close(release)
		if err := <-stopped; err != nil {
			t.Fatalf("run: %v", err)
		}
		if got := f.get(first); got.State != repository.Succeeded || got.Output != "finished during shutdown" {
			t.Fatalf("running task = %v %q, want SUCCEEDED with its message", got.State, got.Output)
		}
	})

	t.Run("CleanStopDeletesTheOwnerRow", func(t *testing.T) {
		f := setup(t)
		f.pushN(20)
		rows := func() int {
			t.Helper()
			var n int
			if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task_owner WHERE owner = 'worker'").Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			return repository.Succeed("")
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler, BatchSize: 5})
		stop := f.start(p)
		f.eventually("all tasks succeeded", func() bool { return f.count(repository.Succeeded) == 20 })
		if n := rows(); n != 1 {
			t.Fatalf("%d owner rows while running, want 1", n)
		}
		if err := stop(); err != nil {
			t.Fatalf("run: %v", err)
		}
		if n := rows(); n != 0 {
			t.Fatalf("%d owner rows after a clean stop, want none", n)
		}
	})

	t.Run("StopDuringStartupIsClean", func(t *testing.T) {
		f := setup(t)
		// An uncommitted registration of the same topic makes the manager's own
		// (Initialize) wait, so the stop arrives while the manager is starting.
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(f.ctx)
		if _, err := f.repo.CreateTopic(f.ctx, tx, "fresh"); err != nil {
			t.Fatal(err)
		}
		var fatal atomic.Value
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			return repository.Succeed("")
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{
			Topic: "fresh", CreateTopic: true, Handler: handler,
			Listener: processor.Listener{OnFatal: func(topic string, err error) { fatal.Store(err) }},
		})
		stop := f.start(p)
		f.eventually("the manager's registration to wait for the open one", func() bool {
			var waiting bool
			if err := f.pool.QueryRow(f.ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'
				  AND query LIKE '%task_topic_create%')`).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			return waiting
		})
		if err := stop(); err != nil {
			t.Fatalf("run stopped during startup: %v, want nil", err)
		}
		if err, _ := fatal.Load().(error); err != nil {
			t.Fatalf("OnFatal called with %v for a stop during startup", err)
		}
	})

	t.Run("StopBeforeRunIsClean", func(t *testing.T) {
		f := setup(t)
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			return repository.Succeed("")
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler})
		ctx, cancel := context.WithCancel(f.ctx)
		cancel()
		if err := p.Run(ctx); err != nil {
			t.Fatalf("Run with a cancelled context: %v, want nil", err)
		}
	})

	t.Run("FailsHandlersStillRunningAtTheDeadline", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(1)
		started := make(chan struct{})
		handler := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			close(started)
			<-ctx.Done() // never reports on its own
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler, ShutdownTimeout: 200 * time.Millisecond})
		stop := f.start(p)
		<-started
		if err := stop(); err != nil {
			t.Fatalf("run: %v", err)
		}
		got := f.get(tasks[0].Sequence)
		if got.State != repository.Failed || got.Output == "" {
			t.Fatalf("task = %v %q, want FAILED saying the handler did not report", got.State, got.Output)
		}
	})
}

// pollWaitingOnTheTopicLock takes the lock a limited topic's polls take their turn
// under, in a transaction it returns (rolled back when the test ends), pushes n tasks,
// and waits until a poll of this test's database waits on the lock.
func (f *fixture) pollWaitingOnTheTopicLock(n int) (pgx.Tx, []repository.Task) {
	f.t.Helper()
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(f.ctx)) })
	if _, err := tx.Exec(f.ctx, "SELECT pg_advisory_xact_lock(1885828451, hashtext($1))", f.topic); err != nil {
		f.t.Fatal(err)
	}
	tasks := f.pushN(n)
	f.eventually("a poll waiting on the lock", func() bool {
		var waiting int
		err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND datname = current_database()`).Scan(&waiting)
		return err == nil && waiting > 0
	})
	return tx, tasks
}

// TestShutdownHandsBackAPollThatReturnsAfterIt: a poll sent before the shutdown and
// answered after it began (here: held on a limited topic's lock) leases tasks that were
// never started: they go back READY with the attempt unused, whatever the handler. A
// BatchFunc ran them after the shutdown began.
func TestShutdownHandsBackAPollThatReturnsAfterIt(t *testing.T) {
	f := setup(t)
	f.limit(repository.TopicSettings{MaxAttempts: 1, Concurrency: 10})
	var calls atomic.Int32
	handler := processor.BatchFunc(func(ctx context.Context, tasks []repository.Task) (map[int64]repository.Decision, error) {
		calls.Add(1)
		out := make(map[int64]repository.Decision, len(tasks))
		for _, task := range tasks {
			out[task.Sequence] = repository.Succeed("ran")
		}
		return out, nil
	})
	started := make(chan struct{}) // after which the manager's stopping channel is set
	p, managers := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler, BatchSize: 5,
		Listener: processor.Listener{OnStart: func(string) { close(started) }}})
	stop := f.start(p)
	<-started
	f.eventually("the processor idle", func() bool { return f.count(repository.Ready) == 0 })
	time.Sleep(200 * time.Millisecond) // its first, empty poll done
	tx, tasks := f.pollWaitingOnTheTopicLock(3)
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case <-processor.StoppingOf(managers[0]): // the shutdown under way
	case <-time.After(30 * time.Second):
		t.Fatal("the manager did not begin its shutdown within 30 s")
	}
	if err := tx.Rollback(f.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("run: %v", err)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the handler was called %d times after the shutdown began", n)
	}
	for _, task := range tasks {
		// Attempt counts leases, Returned the leases handed back
		if got := f.get(task.Sequence); got.State != repository.Ready || got.Attempt-got.Returned != 0 {
			t.Errorf("task %d is %v with %d attempts used, want READY with none used", task.Sequence, got.State, got.Attempt-got.Returned)
		}
	}
}

// TestShutdownDeadlineCancelsAPollStillWaiting: a poll still waiting (here on a limited
// topic's lock) when the shutdown deadline passes is cancelled: it leased its tasks
// after Run had returned and the owner was gone, and they stayed ACTIVE, never started,
// an attempt used, until another processor's expiry took them back.
func TestShutdownDeadlineCancelsAPollStillWaiting(t *testing.T) {
	f := setup(t)
	f.limit(repository.TopicSettings{MaxAttempts: 1, Concurrency: 10})
	p, _ := f.processor("worker", processor.Config{},
		processor.ManagerConfig{Handler: processor.TaskFunc(succeed), BatchSize: 5, ShutdownTimeout: 300 * time.Millisecond})
	stop := f.start(p)
	time.Sleep(200 * time.Millisecond) // its first, empty poll done
	tx, tasks := f.pollWaitingOnTheTopicLock(3)
	stopping := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	// the poll cancelled at the deadline, Run returns then, not after the shutdown's
	// 5 s grace for a loop that does not end
	if took := time.Since(stopping); took > 4*time.Second {
		t.Errorf("Run returned %v after the stop, with a deadline of 300 ms: the waiting poll was not cancelled", took.Round(time.Millisecond))
	}
	// Run has returned: the waiting poll is cancelled in the server (pgx sends the
	// cancel request as it closes the connection, asynchronously: waited for here, so
	// that the test does not release the lock first, under load, and see it lease)
	f.eventually("no poll waiting on the lock", func() bool {
		var n int
		err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND datname = current_database()`).Scan(&n)
		return err == nil && n == 0
	})
	// then the lock goes: a poll that had gone on waiting would lease now
	if err := tx.Rollback(f.ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	for _, task := range tasks {
		if got := f.get(task.Sequence); got.State != repository.Ready || got.Attempt != 0 {
			t.Errorf("task %d is %v with attempt %d after Run returned, want READY, never leased", task.Sequence, got.State, got.Attempt)
		}
	}
}

// TestBufferDrainProcessesQueuedBatches: a Buffer with OnClose: Drain processes the
// batches queued when the shutdown begins. Its TaskFunc saw the batch's Stopping closed
// and handed them back: one task SUCCEEDED, three READY.
func TestBufferDrainProcessesQueuedBatches(t *testing.T) {
	f := setup(t)
	started := make(chan struct{}, 10)
	release := make(chan struct{})
	h, err := processor.Buffer(processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
		started <- struct{}{}
		<-release
		return repository.Succeed("drained")
	}), processor.BufferConfig{Queue: 4, MinWorkers: 1, OnClose: processor.Drain})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: h, BatchSize: 1})
	tasks := f.pushN(4)
	stop := f.start(p)
	<-started
	// Not only leased (ACTIVE in the table): queued in the Buffer. A poll whose answer
	// reaches the manager after the shutdown began is handed back unstarted, as it
	// should be, and the test saw task 4 READY when it stopped in that moment.
	f.eventually("the other three tasks queued", func() bool { return processor.Queued(h) == 3 })
	if n := f.count(repository.Active); n != 4 {
		t.Fatalf("%d tasks ACTIVE, want 4", n)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	time.Sleep(200 * time.Millisecond) // the shutdown under way
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("run: %v", err)
	}
	for _, task := range tasks {
		if got := f.get(task.Sequence); got.State != repository.Succeeded {
			t.Errorf("task %d is %v after a drained shutdown, want SUCCEEDED", task.Sequence, got.State)
		}
	}
}

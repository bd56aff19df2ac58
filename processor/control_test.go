package processor_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/logbuf"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

func TestPause(t *testing.T) {
	t.Run("PauseFromAnotherConnectionStopsPollingAndResumeRestartsIt", func(t *testing.T) {
		f := setup(t)
		finished := make(done, 100)
		p, managers := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: finished.handler(0)})
		f.start(p)
		other := f.newPool()
		if err := f.repo.SetActive(f.ctx, other, f.topic, false); err != nil {
			t.Fatal(err)
		}
		f.eventually("manager paused", func() bool { return !managers[0].Active() })
		tasks := f.pushN(1)
		select {
		case seq := <-finished:
			t.Fatalf("task %d handled while the topic is paused", seq)
		case <-time.After(300 * time.Millisecond): // several heartbeat intervals
		}
		if got := f.get(tasks[0].Sequence); got.State != repository.Ready {
			t.Fatalf("task is %v while paused, want READY", got.State)
		}
		if err := f.repo.SetActive(f.ctx, other, f.topic, true); err != nil {
			t.Fatal(err)
		}
		finished.wait(t, tasks[0].Sequence, 10*time.Second)
	})

	// A poll that had seen the topic running when the pause came goes on; Active reports
	// the pause once it has returned, so that a task pushed after Active said so is not
	// leased. Before, Active said paused at once, and the poll, held up after the loop's
	// look (here by the leases lock; under load by the scheduler), leased a task pushed
	// after it (the flake of the subtest above).
	t.Run("ActiveReportsThePauseOncePollsBegunBeforeItReturned", func(t *testing.T) {
		f := setup(t)
		finished := make(done, 10)
		started := make(chan struct{})
		p, managers := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: finished.handler(0),
			Listener: processor.Listener{OnStart: func(string) { close(started) }}})
		m := managers[0]
		f.start(p)
		<-started
		release := processor.HoldLeases(m)
		released := false
		defer func() {
			if !released {
				release()
			}
		}()
		m.Resume()
		f.eventually("a poll waits for the leases lock", func() bool { return processor.Leasing(m) })
		if err := f.repo.SetActive(f.ctx, f.newPool(), f.topic, false); err != nil {
			t.Fatal(err)
		}
		f.eventually("manager read the pause", func() bool { return !processor.Running(m) })
		reported := make(chan bool, 1)
		go func() { reported <- m.Active() }()
		select {
		case active := <-reported:
			t.Fatalf("Active() = %v while a poll begun before the pause is out", active)
		case <-time.After(200 * time.Millisecond):
		}
		release()
		released = true
		select {
		case active := <-reported:
			if active {
				t.Fatal("Active() = true after the pause")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Active() did not return after the poll did")
		}
		tasks := f.pushN(1)
		select {
		case seq := <-finished:
			t.Fatalf("task %d handled after Active reported the pause", seq)
		case <-time.After(300 * time.Millisecond):
		}
		if got := f.get(tasks[0].Sequence); got.State != repository.Ready {
			t.Fatalf("task is %v while paused, want READY", got.State)
		}
	})

	t.Run("PauseSurvivesARestart", func(t *testing.T) {
		f := setup(t)
		if err := f.repo.SetActive(f.ctx, f.pool, f.topic, false); err != nil {
			t.Fatal(err)
		}
		tasks := f.pushN(1)
		finished := make(done, 10)
		// Active is true until the manager has read the topic: the check waits for that
		// (under load the read took more than the 300 ms below).
		started := make(chan struct{})
		p, managers := f.processor("restarted", processor.Config{}, processor.ManagerConfig{Handler: finished.handler(0),
			Listener: processor.Listener{OnStart: func(string) { close(started) }}})
		f.start(p)
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("the manager did not start within 30 s")
		}
		select {
		case seq := <-finished:
			t.Fatalf("task %d handled by a manager started while the topic is paused", seq)
		case <-time.After(300 * time.Millisecond):
		}
		if managers[0].Active() {
			t.Fatal("manager came up active although the database says paused")
		}
		if err := f.repo.SetActive(f.ctx, f.pool, f.topic, true); err != nil {
			t.Fatal(err)
		}
		finished.wait(t, tasks[0].Sequence, 10*time.Second)
	})
}

func TestCancel(t *testing.T) {
	t.Run("CancellingARunningTaskCancelsItsContextAndFailsIt", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(1)
		started := make(chan struct{})
		sawCancel := make(chan error, 1)
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			close(started)
			<-ctx.Done()
			sawCancel <- context.Cause(ctx)
			return repository.Succeed("ignored the cancel")
		})
		p, _ := f.processor("worker", processor.Config{HeartbeatInterval: time.Hour}, processor.ManagerConfig{Handler: handler})
		connected := p.Notifier().Connected()
		f.start(p)
		<-connected
		<-started
		if _, err := f.repo.Cancel(f.ctx, f.newPool(), f.topic, "operator", tasks[0].Sequence); err != nil {
			t.Fatal(err)
		}
		select {
		case cause := <-sawCancel:
			if !errors.Is(cause, processor.ErrTaskCancelled) {
				t.Fatalf("context cause = %v, want ErrTaskCancelled", cause)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("handler context not cancelled")
		}
		f.eventually("task failed", func() bool { return f.get(tasks[0].Sequence).State == repository.Failed })
		if got := f.get(tasks[0].Sequence); got.Output != "cancelled" {
			t.Fatalf("output = %q, want cancelled", got.Output)
		}
	})

	// A task cancelled while it waits for a worker (queued in a Buffer) or for its turn
	// in its batch is not started: before, the function ran it with a cancelled context,
	// and one that did not look at it did the work of a task that ends FAILED cancelled.
	t.Run("ATaskCancelledBeforeItsTurnIsNotStarted", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(3)
		release := make(chan struct{})
		var mu sync.Mutex
		var ran []int64
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			mu.Lock()
			ran = append(ran, task.Sequence)
			mu.Unlock()
			if task.Sequence == tasks[0].Sequence {
				<-release
			}
			return repository.Succeed("ran")
		})
		h, err := processor.Buffer(handler, processor.BufferConfig{Queue: 1, MinWorkers: 1})
		if err != nil {
			t.Fatal(err)
		}
		var logs logbuf.Buffer
		// batches of two: the first task's runs, the second waits behind it in its batch,
		// the third waits in the Buffer's queue
		p, _ := f.processor("worker", processor.Config{Logger: jsonLogger(&logs, slog.LevelInfo)},
			processor.ManagerConfig{Handler: h, BatchSize: 2})
		connected := p.Notifier().Connected()
		f.start(p)
		<-connected
		f.eventually("every task leased", func() bool { return f.count(repository.Active) == 3 })
		if _, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "operator", tasks[1].Sequence, tasks[2].Sequence); err != nil {
			t.Fatal(err)
		}
		f.eventually("both cancellations reached the processor", func() bool {
			return len(logs.Lines("cancelled running task")) >= 2
		})
		// told once each, though every heartbeat (100 ms) lists the cancelled leases again
		time.Sleep(500 * time.Millisecond)
		if lines := logs.Lines("cancelled running task"); len(lines) != 2 {
			t.Errorf("%d lines of cancelled running tasks, want one for each of the two:\n%s", len(lines), strings.Join(lines, "\n"))
		}
		close(release)
		for _, task := range tasks[1:] {
			f.eventually("the cancelled task failed", func() bool { return f.get(task.Sequence).State == repository.Failed })
			if got := f.get(task.Sequence); got.Output != "cancelled" {
				t.Errorf("task %d: output %q, want cancelled", task.Sequence, got.Output)
			}
		}
		f.eventually("the first task succeeded", func() bool { return f.get(tasks[0].Sequence).State == repository.Succeeded })
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(ran, []int64{tasks[0].Sequence}) {
			t.Errorf("the handler ran tasks %v, want only %d (the others were cancelled before their turn)", ran, tasks[0].Sequence)
		}
	})

	// A BatchFunc works on the batch's context, not the tasks': it is cancelled once
	// every task of the batch left undecided is, and a batch whose tasks were all
	// cancelled while it waited in a Buffer is not handed to the function. Before, the
	// function worked on, and a queued batch of cancelled tasks was run.
	t.Run("ABatchFuncSeesItsBatchCancelled", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(3)
		started := make(chan struct{}, 1)
		sawCancel := make(chan error, 1)
		var ran atomic.Int32
		batchFn := processor.BatchFunc(func(ctx context.Context, tasks []repository.Task) (map[int64]repository.Decision, error) {
			ran.Add(1)
			started <- struct{}{}
			<-ctx.Done()
			sawCancel <- context.Cause(ctx)
			out := map[int64]repository.Decision{}
			for _, task := range tasks {
				out[task.Sequence] = repository.Succeed("ignored the cancel")
			}
			return out, nil
		})
		h, err := processor.Buffer(batchFn, processor.BufferConfig{Queue: 1, MinWorkers: 1, MaxWorkers: 1})
		if err != nil {
			t.Fatal(err)
		}
		// batches of two and one: the first runs, the second waits in the queue
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: h, BatchSize: 2})
		connected := p.Notifier().Connected()
		f.start(p)
		<-connected
		<-started
		f.eventually("every task leased", func() bool { return f.count(repository.Active) == 3 })
		if _, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "operator", tasks[2].Sequence); err != nil {
			t.Fatal(err)
		}
		if _, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "operator", tasks[0].Sequence, tasks[1].Sequence); err != nil {
			t.Fatal(err)
		}
		select {
		case cause := <-sawCancel:
			if !errors.Is(cause, processor.ErrTaskCancelled) {
				t.Fatalf("the batch's context cause = %v, want ErrTaskCancelled", cause)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the BatchFunc's context was not cancelled when every task of its batch was")
		}
		for _, task := range tasks {
			f.eventually("the cancelled task failed", func() bool { return f.get(task.Sequence).State == repository.Failed })
		}
		time.Sleep(200 * time.Millisecond)
		if n := ran.Load(); n != 1 {
			t.Fatalf("the BatchFunc ran %d batches, want 1: the queued batch's only task was cancelled", n)
		}
	})

	t.Run("MissedCancelNotificationIsFoundOnTheHeartbeat", func(t *testing.T) {
		f := setup(t)
		if _, err := f.repo.Configure(f.ctx, f.pool, f.topic, repository.TopicSettings{MaxAttempts: 5}); err != nil {
			t.Fatal(err)
		}
		tasks := f.pushN(1)
		started := make(chan struct{})
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			close(started)
			<-ctx.Done()
			return repository.Fail(ctx.Err())
		})
		p, _ := f.processor("worker", processor.Config{DisableNotifications: true}, processor.ManagerConfig{Handler: handler})
		f.start(p)
		<-started
		if _, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "operator", tasks[0].Sequence); err != nil {
			t.Fatal(err)
		}
		f.eventually("task failed without retry", func() bool { return f.get(tasks[0].Sequence).State == repository.Failed })
	})
}

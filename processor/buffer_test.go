package processor_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// A Buffer serves every manager that runs with it, in one processor or several: it
// lives until the last of them stops. The first to stop used to stop it for all: the
// others' queued batches were handed back with it, and every batch they polled after
// was handed back at once, READY again, polled again, for as long as they ran.
func TestSharedBuffer(t *testing.T) {
	t.Run("AProcessorThatStopsHandsBackOnlyItsOwnBatches", func(t *testing.T) {
		f := setup(t)
		const other = "other"
		f.createTopic(other, 1)
		release := make(chan struct{})
		running := make(chan struct{}, 1)
		h, err := processor.Buffer(processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			if task.Identifier == "hold" {
				running <- struct{}{}
				<-release
			}
			return repository.Succeed("ran")
		}), processor.BufferConfig{Queue: 2, MinWorkers: 1, MaxWorkers: 1})
		if err != nil {
			t.Fatal(err)
		}
		var handedBack atomic.Int64 // tasks of the other topic handed back while its processor runs
		first, _ := f.processor("first", processor.Config{}, processor.ManagerConfig{Handler: h, BatchSize: 1})
		second, _ := f.processor("second", processor.Config{}, processor.ManagerConfig{Topic: other, Handler: h, BatchSize: 1,
			Listener: processor.Listener{OnHandBack: func(_ string, tasks []repository.Task) {
				handedBack.Add(int64(len(tasks)))
			}}})
		stopFirst := f.start(first)
		stopSecond := f.start(second)
		// the only worker runs the second processor's task; a task of each waits in the queue
		push := func(topic, identifier string) repository.Task {
			t.Helper()
			tasks, err := f.repo.Push(f.ctx, f.pool, topic, repository.Append, repository.Creation{Identifier: identifier})
			if err != nil {
				t.Fatal(err)
			}
			return tasks[0]
		}
		state := func(topic string, sequence int64) repository.Task {
			t.Helper()
			got, err := f.repo.Get(f.ctx, f.pool, topic, sequence)
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		push(other, "hold")
		<-running
		mine := push(f.topic, "queued")
		theirs := push(other, "queued")
		if !f.within(60*time.Second, func() bool {
			return state(f.topic, mine.Sequence).State == repository.Active && state(other, theirs.Sequence).State == repository.Active
		}) {
			t.Fatalf("after 60 s the first processor's queued task is %v and the second's %v, want both ACTIVE (%d workers)",
				state(f.topic, mine.Sequence).State, state(other, theirs.Sequence).State, h.Workers())
		}
		if err := stopFirst(); err != nil {
			t.Fatal(err)
		}
		if got := state(f.topic, mine.Sequence); got.State != repository.Ready || got.Attempt-got.Returned != 0 {
			t.Errorf("the stopped processor's queued task is %v with %d attempts used, want handed back (READY, none used)",
				got.State, got.Attempt-got.Returned)
		}
		close(release)
		later := push(other, "later")
		for _, task := range []repository.Task{theirs, later} {
			if !f.within(10*time.Second, func() bool { return state(other, task.Sequence).State == repository.Succeeded }) {
				t.Fatalf("the running processor's task %q is %v after 10 s, want SUCCEEDED; %d of its tasks were handed back meanwhile",
					task.Identifier, state(other, task.Sequence).State, handedBack.Load())
			}
		}
		if n := handedBack.Load(); n > 0 {
			t.Errorf("the running processor's tasks were handed back %d times", n)
		}
		if n := h.Workers(); n != 1 {
			t.Errorf("%d workers while a processor runs, want 1", n)
		}
		// the last one to stop stops the Buffer
		if err := stopSecond(); err != nil {
			t.Fatal(err)
		}
		if !f.within(5*time.Second, func() bool { return h.Workers() == 0 }) {
			t.Errorf("%d workers after every processor stopped, want none", h.Workers())
		}
	})

	t.Run("AProcessorStartedAfterTheLastStoppedGetsTheBuffer", func(t *testing.T) {
		f := setup(t)
		var mu sync.Mutex
		ran := 0
		h, err := processor.Buffer(processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			mu.Lock()
			ran++
			mu.Unlock()
			return repository.Succeed("ran")
		}), processor.BufferConfig{MinWorkers: 1})
		if err != nil {
			t.Fatal(err)
		}
		// a process restarting its processor, the handler built once
		first, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: h})
		stop := f.start(first)
		f.pushN(1)
		f.eventually("the first processor ran a task", func() bool { return f.count(repository.Succeeded) == 1 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		second, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: h})
		f.start(second)
		f.pushN(3)
		if !f.within(10*time.Second, func() bool { return f.count(repository.Succeeded) == 4 }) {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("the restarted processor ran %d tasks in 10 s, want 3; the topic's tasks: %s", ran-1, f.states())
		}
	})
}

// TestBufferRefusesBadConfig: a handler that is nil (also a nil TaskFunc, which
// Manage refuses as well: it failed every task as a panic), negative settings and
// MaxWorkers below MinWorkers are refused, each saying what is wrong.
func TestBufferRefusesBadConfig(t *testing.T) {
	t.Parallel()
	ok := processor.TaskFunc(func(context.Context, repository.Task) repository.Decision { return repository.Succeed("") })
	for _, c := range []struct {
		name    string
		handler processor.Handler
		cfg     processor.BufferConfig
		says    string
	}{
		{"NilHandler", nil, processor.BufferConfig{}, "handler is nil"},
		{"NilTaskFunc", processor.TaskFunc(nil), processor.BufferConfig{}, "handler is nil"},
		{"NegativeQueue", ok, processor.BufferConfig{Queue: -1}, "negative setting"},
		{"MaxBelowMin", ok, processor.BufferConfig{MinWorkers: 3, MaxWorkers: 2}, "MaxWorkers 2 is below MinWorkers 3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := processor.Buffer(c.handler, c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Errorf("Buffer: %v, %v; want an error saying %q", b, err, c.says)
			}
		})
	}
}

// TestBufferHandlerTimeoutCountsFromTheWorker: a batch polled while the Buffer's only
// worker was busy waited in the queue, and its HandlerTimeout ran from the poll: the
// worker took it with the timeout half gone, and its task, running no longer than the
// first, failed "did not decide this task within" the timeout (an attempt used, FAILED
// without retries). The timeout and the handling time OnCallback reports count from
// when a worker takes the batch.
func TestBufferHandlerTimeoutCountsFromTheWorker(t *testing.T) {
	f := setup(t)
	tasks := f.pushN(2)
	const work, timeout = 600 * time.Millisecond, time.Second
	var mu sync.Mutex
	ran := map[int64]time.Duration{}      // how long the handler ran each task
	handling := map[int64]time.Duration{} // what OnCallback reported
	h, err := processor.Buffer(processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
		start := time.Now()
		time.Sleep(work)
		mu.Lock()
		ran[task.Sequence] = time.Since(start)
		mu.Unlock()
		return repository.Succeed("done")
	}), processor.BufferConfig{Queue: 1, MinWorkers: 1, MaxWorkers: 1})
	if err != nil {
		t.Fatal(err)
	}
	listener := processor.Listener{OnCallback: func(_ string, tasks []repository.Task, _ map[int64]repository.Decision, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		for _, task := range tasks {
			handling[task.Sequence] = d
		}
	}}
	// batches of one: the first runs, the second waits in the queue behind it
	p, _ := f.processor("worker", processor.Config{},
		processor.ManagerConfig{Handler: h, BatchSize: 1, HandlerTimeout: timeout, Listener: listener})
	f.start(p)
	for _, task := range tasks {
		f.eventually("the task finished", func() bool {
			s := f.get(task.Sequence).State
			return s != repository.Active && s != repository.Ready
		})
		if got := f.get(task.Sequence); got.State != repository.Succeeded || got.Output != "done" {
			t.Errorf("task %d = %v %q, want SUCCEEDED done", task.Sequence, got.State, got.Output)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, task := range tasks {
		if handling[task.Sequence] > ran[task.Sequence]+300*time.Millisecond {
			t.Errorf("task %d: OnCallback reported %v of handling, the handler ran %v", task.Sequence, handling[task.Sequence], ran[task.Sequence])
		}
	}
}

// TestHandlingOfATaskFuncIsPerTask: OnCallback's handling of a task a TaskFunc decides
// alone counts from its start on that task, not from the batch's: the third task of a
// batch reported the first two's time too, and the handler histogram (metrics) read a
// mean of half the batch's time for tasks of 20 ms. The third report's handling is at
// most the time since the second report, which came before the third task began.
func TestHandlingOfATaskFuncIsPerTask(t *testing.T) {
	f := setup(t)
	tasks := f.pushN(3)
	var mu sync.Mutex
	var last time.Time // when the previous report reached OnCallback
	var reports int
	var wrong []string
	listener := processor.Listener{OnCallback: func(_ string, reported []repository.Task, _ map[int64]repository.Decision, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		if reports > 0 && d > now.Sub(last) {
			wrong = append(wrong, fmt.Sprintf("task %d: handling %v, but the previous report came %v ago", reported[0].Sequence, d, now.Sub(last)))
		}
		reports++
		last = now
	}}
	h := processor.TaskFunc(func(context.Context, repository.Task) repository.Decision {
		time.Sleep(20 * time.Millisecond)
		return repository.Succeed("")
	})
	p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: h, BatchSize: 3, Listener: listener})
	f.start(p)
	for _, task := range tasks {
		f.eventually("the task succeeded", func() bool { return f.get(task.Sequence).State == repository.Succeeded })
	}
	mu.Lock()
	defer mu.Unlock()
	if reports != 3 || len(wrong) > 0 {
		t.Errorf("%d reports (want 3, one a task); %v", reports, wrong)
	}
}

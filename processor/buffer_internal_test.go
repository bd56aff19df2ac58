package processor

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgtask/pgtask/repository"
)

// TestBufferWorkerHandsBackABatchOfAStoppingManager: a worker that takes a queued batch
// once its manager's shutdown began (in the moment between the close of the stopping
// channel and the emptying of the queue) hands it back unstarted: it ran it, and a
// HandlerFunc still running at the shutdown's deadline failed it, an attempt used.
func TestBufferWorkerHandsBackABatchOfAStoppingManager(t *testing.T) {
	var ran atomic.Bool
	b, err := Buffer(HandlerFunc(func(context.Context, *Batch) { ran.Store(true) }), BufferConfig{})
	if err != nil {
		t.Fatal(err)
	}
	stopping := make(chan struct{})
	close(stopping)
	var kinds []reportKind
	batch := newBatch(t.Context(), "t", []repository.Task{{Topic: "t", Sequence: 1}}, stopping,
		func(_ *Batch, _ []repository.Completion, _ []FollowUp, kind reportKind, _ error) {
			kinds = append(kinds, kind)
		})
	b.run(queued{ctx: t.Context(), batch: batch})
	if ran.Load() {
		t.Error("the batch of a stopping manager was started")
	}
	if len(kinds) != 1 || kinds[0] != reportHandedBack {
		t.Errorf("reports %v, want the batch handed back", kinds)
	}
}

// TestBufferGrowsForABatchSentToAWaitingWorker: a batch sent to a worker waiting on the
// queue counts as waiting until that worker starts it, so that a Handle right after,
// before the worker has run, grows a worker for its own batch. Before, the first batch
// showed neither in the queue nor among the busy, and the second waited in the queue
// behind it, a whole task, with MaxWorkers not reached (GOMAXPROCS 1, as the docs
// advise, makes the order certain: the worker runs only when Handle's goroutine blocks).
func TestBufferGrowsForABatchSentToAWaitingWorker(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	release := make(chan struct{})
	started := make(chan int64, 2)
	b, err := Buffer(HandlerFunc(func(_ context.Context, batch *Batch) {
		started <- batch.Tasks[0].Sequence
		<-release
	}), BufferConfig{MinWorkers: 1, MaxWorkers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer close(release)
	time.Sleep(50 * time.Millisecond) // the first worker waits on the queue
	for seq := range int64(2) {
		batch, err := NewBatch(t.Context(), "t", []repository.Task{{Topic: "t", Sequence: seq + 1}})
		if err != nil {
			t.Fatal(err)
		}
		b.Handle(t.Context(), batch)
	}
	if w := b.Workers(); w != 2 {
		t.Errorf("%d workers after two batches, want 2 (MaxWorkers)", w)
	}
	for range 2 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("a batch waited behind the other with a worker to spare")
		}
	}
}

// TestBufferAttachedWhileTheLastDetachesRuns: a manager that attaches to a shared
// Buffer while the last one of before detaches (a processor restarted, another sharing
// the Buffer) finds it running, and its batches run. detach decided to stop the Buffer,
// let go of its lock and then stopped it: an attach in between (detachHook stands for
// it) counted itself a user of a Buffer stopped under it, whose every batch it handed
// back, polling and handing back for ever.
func TestBufferAttachedWhileTheLastDetachesRuns(t *testing.T) {
	ran := make(chan struct{}, 1)
	b, err := Buffer(HandlerFunc(func(context.Context, *Batch) { ran <- struct{}{} }), BufferConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	b.attach()
	b.detachHook = b.attach
	b.detach()
	b.mu.Lock()
	users, stopped := b.users, b.stopped
	b.mu.Unlock()
	if users != 1 || stopped {
		t.Fatalf("after an attach during the last detach: %d users, stopped %v; want 1 user of a running Buffer", users, stopped)
	}
	batch, err := NewBatch(t.Context(), "t", []repository.Task{{Topic: "t", Sequence: 1}})
	if err != nil {
		t.Fatal(err)
	}
	b.Handle(t.Context(), batch)
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("a batch of the manager attached during the last detach did not run")
	}
}

package processor

import (
	"context"
	"sync/atomic"
	"testing"

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

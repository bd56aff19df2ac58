package processor

import (
	"context"
	"errors"
	"testing"

	"github.com/pgtask/pgtask/repository"
)

// TestABatchRelievedBeforeItStartsIsNotHandled: a Buffer's worker checked that a
// queued batch was still open, then handed it to a handler that does not track its
// starts, which took every task as started. A HandlerTimeout (or the shutdown
// deadline) that relieved the batch between the two handed its tasks back, unstarted,
// and the handler ran them all the same, beside whichever process leased them next.
func TestABatchRelievedBeforeItStartsIsNotHandled(t *testing.T) {
	b, err := NewBatch(t.Context(), "t", []repository.Task{{Sequence: 1}, {Sequence: 2}})
	if err != nil {
		t.Fatal(err)
	}
	// the relief wins the race with the worker
	if failed, handedBack := b.abandon(errors.New("handler timed out")); failed != 0 || handedBack != 2 {
		t.Fatalf("abandon = %d failed, %d handed back; want 0, 2", failed, handedBack)
	}
	called := false
	handleBatch(t.Context(), HandlerFunc(func(context.Context, *Batch) { called = true }), b)
	if called {
		t.Fatal("the handler ran a batch whose tasks were handed back")
	}
	o := b.Outcome()
	if len(o.Decisions) != 2 {
		t.Fatalf("outcome %+v, want both tasks handed back", o)
	}
	for _, d := range o.Decisions {
		if !d.Snooze {
			t.Errorf("task decided %+v, want handed back", d)
		}
	}
}

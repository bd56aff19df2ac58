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

// managedBatch is a batch of tasks 1..n as a manager makes it: a context of its own,
// which cancelTask and loseLeases cancel.
func managedBatch(t *testing.T, n int) *Batch {
	t.Helper()
	tasks := make([]repository.Task, n)
	for i := range tasks {
		tasks[i] = repository.Task{Sequence: int64(i + 1), Attempt: 1}
	}
	ctx, cancel := context.WithCancelCause(t.Context())
	b := newBatch(ctx, "t", tasks, nil, nil)
	b.cancel = cancel
	return b
}

// TestABatchCancelledTaskByTask: the batch's context (a BatchFunc's) is cancelled, with
// ErrTaskCancelled, once every task left undecided is cancelled, whether the last
// cancel or the last decision of a task not cancelled brings it there.
func TestABatchCancelledTaskByTask(t *testing.T) {
	b := managedBatch(t, 3)
	b.cancelTask(3)
	if b.ctx.Err() != nil {
		t.Fatal("the batch's context ended with two of its three tasks not cancelled")
	}
	if err := b.Decide(1, repository.Succeed("")); err != nil {
		t.Fatal(err)
	}
	if b.ctx.Err() != nil {
		t.Fatal("the batch's context ended with task 2 neither decided nor cancelled")
	}
	if err := b.Decide(2, repository.Succeed("")); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(b.ctx); cause != ErrTaskCancelled {
		t.Fatalf("the batch's context, its one task left cancelled: cause %v, want ErrTaskCancelled", cause)
	}

	b = managedBatch(t, 2)
	b.cancelTask(1)
	b.cancelTask(2)
	if cause := context.Cause(b.ctx); cause != ErrTaskCancelled {
		t.Fatalf("the batch's context, both its tasks cancelled: cause %v, want ErrTaskCancelled", cause)
	}
}

// TestLostLeasesHandBack: at a stale heartbeat (loseLeases) a batch's context ends with
// ErrLeaseLost and its tasks not started are handed back, while what its handler
// decides for a started one stands (a failure uses an attempt, as an expiry would); a
// batch whose tasks were all handed back is not handed to a handler afterwards, nor
// taken from the loop's queue (takeHanded), whose slot it would hold for ever.
func TestLostLeasesHandBack(t *testing.T) {
	b := managedBatch(t, 3)
	if !b.begin(1) {
		t.Fatal("begin 1")
	}
	if !b.loseLeases() {
		t.Fatal("loseLeases: the batch's context was live")
	}
	if cause := context.Cause(b.Context(1)); cause != ErrLeaseLost {
		t.Fatalf("task 1's context cause %v, want ErrLeaseLost", cause)
	}
	if err := b.Decide(1, repository.Fail(context.Cause(b.Context(1)))); err != nil {
		t.Fatal(err)
	}
	o := b.Outcome()
	if d := o.Decisions[1]; d.Snooze || d.Result != repository.Failure {
		t.Errorf("started task 1 decided %+v, want the FAILURE its handler reported", d)
	}
	for seq := int64(2); seq <= 3; seq++ {
		if d := o.Decisions[seq]; !d.Snooze || d.Delay != 0 {
			t.Errorf("task %d decided %+v, want handed back (a snooze of 0)", seq, d)
		}
	}
	if b.beginAll() {
		t.Fatal("beginAll of a batch every task of which is decided")
	}

	waiting, live := managedBatch(t, 1), managedBatch(t, 1)
	waiting.loseLeases()
	m := &TaskManager{handed: []*Batch{waiting, live}}
	if got := m.takeHanded(); got != live {
		t.Fatalf("takeHanded = %p, want the live batch %p (the other's tasks were handed back)", got, live)
	}
}

// TestTakeSlotOfABatchDecidedMeanwhile: a batch a flush leased holds the poll loop's
// limiter slot only while some task of it is undecided; once every task is decided
// (its leases lost while it waited), it stays without a slot, so that its finish
// releases none (the loop releases the one it acquired).
func TestTakeSlotOfABatchDecidedMeanwhile(t *testing.T) {
	open, err := NewBatch(t.Context(), "t", []repository.Task{{Sequence: 1}})
	if err != nil {
		t.Fatal(err)
	}
	open.slotless.Store(true)
	if !open.takeSlot() || open.slotless.Load() {
		t.Errorf("an undecided batch: takeSlot %v, slotless %v; want it to hold the slot", false, open.slotless.Load())
	}
	decided, err := NewBatch(t.Context(), "t", []repository.Task{{Sequence: 2}})
	if err != nil {
		t.Fatal(err)
	}
	decided.slotless.Store(true)
	if _, handedBack := decided.abandon(errors.New("leases lost")); handedBack != 1 {
		t.Fatalf("abandon handed back %d, want 1", handedBack)
	}
	if decided.takeSlot() || !decided.slotless.Load() {
		t.Errorf("a batch decided whole: takeSlot true or slotless %v; want it without a slot", decided.slotless.Load())
	}
}

package processor

import "time"

// SetHeldSnapshot sets, for a test and before p runs, how long a transaction must have
// been open for its snapshot to hold back p's VACUUM (30 s otherwise).
func SetHeldSnapshot(p *Processor, d time.Duration) { p.heldSnapshot = d }

// Quiet reports whether p holds back its reads from the head of topics (a long-held
// transaction, or the time after one).
func Quiet(p *Processor) bool { return p.quiet() }

// SetReconcileEvery sets, for a test and before p runs, how often p's managers reconcile
// their leases when no fault asked them to (a minute otherwise).
func SetReconcileEvery(p *Processor, d time.Duration) { p.reconcileEvery = d }

// HoldLeases holds m's leases lock as a reconcile does, so that the poll loop's next
// poll waits for the returned release before its statement.
func HoldLeases(m *TaskManager) (release func()) {
	m.leases.Lock()
	return m.leases.Unlock
}

// Leasing reports whether a statement that leases m's tasks is under way (beginLease).
func Leasing(m *TaskManager) bool {
	if m.leaseGate.TryLock() {
		m.leaseGate.Unlock()
		return false
	}
	return true
}

// Running reports m's view of its topic without waiting, as Active does, for a lease
// begun before a pause.
func Running(m *TaskManager) bool { return m.active.Load() }

// StoppingOf returns the channel closed when m begins a graceful shutdown.
func StoppingOf(m *TaskManager) <-chan struct{} { return m.stopping }

// SetCommitTimeout sets, for a test and before p runs, how long one attempt to commit
// decisions may take (30 s otherwise).
func SetCommitTimeout(p *Processor, d time.Duration) { p.commitTimeout = d }

// SetNotifierPing sets, for a test and before n runs, how long n waits without a
// notification before it pings its connection, and how long the ping may take.
func SetNotifierPing(n *Notifier, every, timeout time.Duration) {
	n.pingEvery, n.pingTimeout = every, timeout
}

// SetNotifierConnectTimeout sets, for a test and before n runs, how long an attempt to
// connect and listen may take.
func SetNotifierConnectTimeout(n *Notifier, d time.Duration) { n.connectTimeout = d }

// Queued reports how many batches wait in b's queue for a worker.
func Queued(b *Buffered) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pending
}

// SetUnsure makes m take its owner's leases for uncertain, as a poll whose reply was lost
// does: its next round, or its shutdown, looks for the leases no manager knows of.
func SetUnsure(m *TaskManager) { m.unsure.Store(true) }

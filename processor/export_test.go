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

package repository

// SetPurgeBatch makes Purge delete at most n tasks a statement until the test ends.
func SetPurgeBatch(t interface{ Cleanup(func()) }, n int64) {
	old := purgeBatch
	purgeBatch = n
	t.Cleanup(func() { purgeBatch = old })
}

// SetPageStep calls step with the topic and the name of each statement a page reads
// after its first (readPage), until the test ends.
func SetPageStep(t interface{ Cleanup(func()) }, step func(topic, statement string)) {
	pageStep.Store(&step)
	t.Cleanup(func() { pageStep.Store(nil) })
}

// SetNotifyFault makes each notification sent after a delegated statement on Citus
// (notify) fail with fault's error, unsent, until the test ends.
func SetNotifyFault(t interface{ Cleanup(func()) }, fault func() error) {
	notifyFault.Store(&fault)
	t.Cleanup(func() { notifyFault.Store(nil) })
}

// SetFireRound makes FireSchedules try at most n schedules a pass until the test ends.
func SetFireRound(t interface{ Cleanup(func()) }, n int) {
	old := fireRound
	fireRound = n
	t.Cleanup(func() { fireRound = old })
}

// SetFireInputBudget bounds the bytes of input and identifiers one fire pushes to n
// until the test ends.
func SetFireInputBudget(t interface{ Cleanup(func()) }, n int) {
	old := fireInputBudget
	fireInputBudget = n
	t.Cleanup(func() { fireInputBudget = old })
}

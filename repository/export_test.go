package repository

// SetPurgeBatch makes Purge delete at most n tasks a statement until the test ends.
func SetPurgeBatch(t interface{ Cleanup(func()) }, n int64) {
	old := purgeBatch
	purgeBatch = n
	t.Cleanup(func() { purgeBatch = old })
}

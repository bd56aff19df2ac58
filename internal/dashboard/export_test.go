package dashboard

// SetMatchedHook sets a function that runs between a bulk action's search and its
// statements, for the tests of what changes meanwhile; nil removes it.
func SetMatchedHook(f func()) {
	if f == nil {
		testHookMatched.Store(nil)
		return
	}
	testHookMatched.Store(&f)
}

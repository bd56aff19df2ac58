package dashboard

import "github.com/jackc/pgx/v5/pgxpool"

// SetMatchedHook sets a function that runs between a bulk action's search and its
// statements, given the dashboard's pool, for the tests of what changes meanwhile; nil
// removes it. Every parallel test's bulk action runs it: it acts on its own pool's.
func SetMatchedHook(f func(*pgxpool.Pool)) {
	if f == nil {
		testHookMatched.Store(nil)
		return
	}
	testHookMatched.Store(&f)
}

package dashboard

import (
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SetMatchedHook sets a function that runs between the search and the statements of a
// bulk action of the dashboard on pool, for the tests of what changes meanwhile; nil
// removes it. Each test sets its own pool's: the tests run in parallel.
func SetMatchedHook(pool *pgxpool.Pool, f func()) {
	if f == nil {
		matchedHooks.Delete(pool)
		return
	}
	matchedHooks.Store(pool, f)
	dispatch := func(p *pgxpool.Pool) {
		if f, ok := matchedHooks.Load(p); ok {
			f.(func())()
		}
	}
	testHookMatched.Store(&dispatch)
}

// matchedHooks holds SetMatchedHook's functions by pool: tests run in parallel, each on
// its own database.
var matchedHooks sync.Map

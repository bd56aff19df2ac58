package pgtasktest

import (
	"context"
	"os"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

var mainCalled atomic.Bool

// Main runs the tests of a package that uses pgtasktest's databases, then stops the
// throwaway PostgreSQL cluster it may have started, and exits the process (os.Exit) with
// the tests' code: nothing after it in TestMain runs. Call it from TestMain:
//
//	func TestMain(m *testing.M) { pgtasktest.Main(m) }
//
// A TestMain with work of its own after the tests (a teardown, a report) calls RunTests.
func Main(m *testing.M) { os.Exit(RunTests(m)) }

// RunTests is Main without the exit: it runs the tests, stops the throwaway cluster,
// and returns the code to exit with:
//
//	func TestMain(m *testing.M) {
//		code := pgtasktest.RunTests(m)
//		teardown()
//		os.Exit(code)
//	}
func RunTests(m *testing.M) int {
	mainCalled.Store(true)
	return pgtest.RunTests(m)
}

// Template describes the template a test database is cloned from: pgtask's schema,
// then the program's own (Migrate). The template is built once per Key on the server,
// by whichever test process gets there first, and kept for later runs.
type Template struct {
	// Key names what Migrate does: the template is reused for as long as the key (and
	// pgtask's schema) stays the same, so change it whenever Migrate changes, e.g. to a
	// hash of the program's migration files. The templates of a server are shared by
	// every program that tests against it: two programs giving the same key share the
	// first one's template, so put the program's module path in it. Required with
	// Migrate.
	Key string
	// Migrate, when set, runs on the template after pgtask's migrations: create the
	// program's tables there. It must not keep connections open after it returns.
	// A copy of a database takes what it holds, not the settings made on the database
	// itself (ALTER DATABASE … SET search_path, TimeZone…): a test that depends on
	// one sets it on its pool (pgxpool.Config's RuntimeParams) or on its role.
	Migrate func(ctx context.Context, pool *pgxpool.Pool) error
}

// NewDatabase returns the connection string of a new database with pgtask's schema,
// cloned from a migrated template; the database is dropped when the test ends.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	return Template{}.NewDatabase(tb)
}

// NewPool is NewDatabase and a pool connected to it, closed when the test ends.
func NewPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return Template{}.NewPool(tb)
}

// NewDatabase returns the connection string of a new database cloned from the template;
// the database is dropped when the test ends.
func (tpl Template) NewDatabase(tb testing.TB) string {
	tb.Helper()
	key, migrate := tpl.template(tb)
	return pgtest.NewDatabase(tb, key, migrate)
}

// NewPool is NewDatabase and a pool connected to it, closed when the test ends.
func (tpl Template) NewPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	key, migrate := tpl.template(tb)
	return pgtest.NewPool(tb, key, migrate)
}

// template returns the key and migrator of the template database.
func (tpl Template) template(tb testing.TB) (string, pgtest.Migrator) {
	tb.Helper()
	if !mainCalled.Load() {
		tb.Fatal("pgtasktest: the test package must call pgtasktest.Main from TestMain: func TestMain(m *testing.M) { pgtasktest.Main(m) }")
	}
	if tpl.Migrate != nil && tpl.Key == "" {
		tb.Fatal("pgtasktest: Template.Key is required with Migrate: it names the template, and must change when Migrate does")
	}
	key := schema.Hash() // the key pgtask's own tests use: the same template
	if tpl.Migrate == nil {
		return key, repository.Migrate
	}
	return key + " " + tpl.Key, func(ctx context.Context, pool *pgxpool.Pool) error {
		if err := repository.Migrate(ctx, pool); err != nil {
			return err
		}
		return tpl.Migrate(ctx, pool)
	}
}

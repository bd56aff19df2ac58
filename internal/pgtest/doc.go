// Package pgtest is the test harness for code that talks to PostgreSQL.
//
// Tests talk to a real PostgreSQL server, never a mock. Each test gets its
// own database, cloned from a template that is migrated once, so tests can
// run in parallel and sequences start at 1.
//
// # Usage
//
// Every test package using pgtest has
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and its tests call [NewPool] (or [NewDatabase] for a connection string):
//
//	pool := pgtest.NewPool(t, repository.MigrationsHash, repository.Migrate)
//
// The template key identifies the template's content (typically a hash of
// the migration files): templates with the same key are shared, so changing
// the migrations must change the key.
//
// # Finding a server
//
// The first test in a process that needs a server looks for one, in this
// order, and the outcome (success or error) holds for the rest of the
// process:
//
//  1. TEST_DATABASE_URL, if set: a connection string (URL or key=value
//     form) for the server's maintenance database, e.g.
//     postgres://postgres@db.example:5432/postgres?sslmode=disable. If it is
//     set but unusable, tests fail; there is no fallback.
//  2. A local server at postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
//     (user postgres, no password, e.g. trust authentication).
//     PGTASK_TEST_LOCAL_URL overrides this address; pointing it at a port
//     where nothing listens (postgres://postgres@127.0.0.1:1/postgres) forces
//     the fallback below, which is how CI can exercise it.
//  3. A throwaway cluster started with package pgcluster from the
//     PostgreSQL server binaries on PATH or in /usr/lib/postgresql/*/bin.
//     [Main] stops and removes it when the tests are done (also on SIGINT or
//     SIGTERM); a cluster left behind by a killed test process is removed by
//     the next one.
//
// A server is usable if a connection succeeds, its version is 14 or later
// and the user may create databases. If none of these works, tests fail
// (never skip) with a message saying how to fix it: start a local server,
// set TEST_DATABASE_URL, or install PostgreSQL (apt-get install postgresql).
//
// # Databases
//
// Template databases are named pgtask_tpl_<hash of key>. They are built
// under an advisory lock by whichever test process gets there first
// (packages are tested in parallel processes sharing the server), in a
// database named pgtask_tplbuild_<hash> that is renamed to its final name
// only once migration succeeded, so a half-built template is never used.
// Templates do not allow connections and are left on the server for later
// runs. Each process that clones one writes the time in the template's
// comment ("pgtest: last used at <unix seconds>").
//
// Test databases are named pgtask_test_<unix seconds>_<random hex> and
// dropped (WITH (FORCE)) when the test that created them ends.
//
// At the end of its tests, [Main] (or [RunTests]) sweeps the server: it drops
// the test databases older than six hours that nobody is connected to (left
// by a test process killed before its cleanup) and the templates not used for
// a week (their migrations changed), never by force, one process at a time
// (a template under an advisory lock that a process stamping its use holds
// shared; a process whose template was dropped anyway builds it again), and
// the build databases no process is building (left by a process killed while
// it migrated one). Ages are by the server's clock.
// A template without a recorded use is given the sweep's time, and a test
// database whose name carries no time (named by an earlier version) is left.
package pgtest

package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgtask/pgtask/internal/citustest"
	"github.com/pgtask/pgtask/internal/pgcluster"
)

// EnvOnCitus, set to 1, makes NewDatabase and NewPool give each test a database on a
// Citus cluster (a coordinator and two workers that this process starts, see
// internal/citustest) instead of the PostgreSQL server: the way to run a package's
// tests, or some of them (-run), against Citus. The Migrator is expected to distribute
// the tables (OnCitus tells it to).
const EnvOnCitus = "PGTASK_TEST_ON_CITUS"

// OnCitus reports whether the tests run on a Citus cluster (EnvOnCitus).
func OnCitus() bool { return os.Getenv(EnvOnCitus) == "1" }

var (
	citusOnce    sync.Once
	citusMu      sync.Mutex // guards citusCluster, which a signal's handler reads
	citusCluster *citustest.Cluster
	citusErr     error
)

// citusNodes starts the cluster on first use and returns it, or fails the test saying
// how to make it work.
func citusNodes(tb testing.TB) *citustest.Cluster {
	tb.Helper()
	if !mainCalled.Load() {
		tb.Fatal("pgtest: the test package must call pgtest.Main from TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }")
	}
	citusOnce.Do(func() {
		if ok, why := citustest.Available(); !ok {
			citusErr = fmt.Errorf("pgtest: %s=1 but Citus cannot run (%s): %s", EnvOnCitus, why, citustest.HowTo)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// As AdminURL's discovery: an interrupt while the nodes start stops the start,
		// which removes the nodes it made, rather than kill this process and leave them.
		done := make(chan struct{})
		stop := catchSignals(cancel, done)
		c, err := citustest.Start(ctx, "", 2)
		citusMu.Lock()
		citusCluster, citusErr = c, err
		citusMu.Unlock()
		close(done)
		if err == nil {
			stopOnSignal()
		}
		stop()
	})
	if citusErr != nil {
		tb.Fatal(citusErr)
	}
	return citusCluster
}

// stopCitus stops the cluster this process started, if any.
func stopCitus() error {
	citusMu.Lock()
	c := citusCluster
	citusMu.Unlock()
	if c == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return c.Stop(ctx) // each node stops once, whoever calls
}

// newCitusDatabase is NewDatabase on the Citus cluster: the template for key is built
// once per process (a database of that name on every node, with the citus extension and
// the workers registered, then migrate on the coordinator's), and each test's database
// is a copy of it made on every node (Citus keeps its node list per database, and the
// coordinator's copy finds the workers' copies by its own name).
func newCitusDatabase(tb testing.TB, key string, migrate Migrator) string {
	tb.Helper()
	c := citusNodes(tb)
	ctx, cancel := context.WithTimeout(tb.Context(), 5*time.Minute)
	defer cancel()
	// The migrator's name is part of the key here: a package's tests may pass one key
	// with a migrator that distributes the tables and with one that does not (both make
	// the same database on PostgreSQL), and the template was whichever came first. The
	// name is its function's: closures of one function literal share it whatever they
	// captured (pgtasktest.Template's), so such migrators still need keys of their own.
	tpl := templateName("citus " + migratorName(migrate) + " " + key)
	if err := buildOnce(ctx, tpl, func(ctx context.Context) error { return citusTemplate(ctx, c, tpl, migrate) }); err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	name := newTestDBName(time.Now())
	tb.Cleanup(func() {
		// A DROP DATABASE waits for a checkpoint of its node, which many tests' copies
		// and drops at once, on a loaded machine, have held past a minute (a CI run).
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for _, n := range c.Nodes() {
			if err := dropCitusDatabase(ctx, n, name); err != nil {
				tb.Errorf("pgtest: drop test database: %v", err)
			}
		}
	})
	for _, n := range c.Nodes() {
		if err := copyDatabase(ctx, n, tpl, name); err != nil {
			tb.Fatalf("pgtest: %v", err)
		}
	}
	return c.Coordinator.ConnString(name)
}

// migratorName names migrate's function (nil: "none"), the same in every run of a
// test binary.
func migratorName(migrate Migrator) string {
	if migrate == nil {
		return "none"
	}
	if f := runtime.FuncForPC(reflect.ValueOf(migrate).Pointer()); f != nil {
		return f.Name()
	}
	return "unnamed"
}

// registering serialises the registration of the nodes in the templates built at
// once (each test's key its own): citus_add_node creates or alters the role on the
// worker (worker_create_or_alter_role), a catalog of the whole node, and two at once
// failed one with "tuple concurrently updated" ("failure on connection marked as
// essential" on the coordinator).
var registering sync.Mutex

// citusTemplate builds the template tpl on every node of c. A build that fails drops
// what it made, so that the next attempt (buildOnce) starts from nothing: it failed
// with the database already there, on every later test.
func citusTemplate(ctx context.Context, c *citustest.Cluster, tpl string, migrate Migrator) (err error) {
	defer func() {
		if err == nil {
			return
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for _, n := range c.Nodes() {
			if derr := dropCitusDatabase(dctx, n, tpl); derr != nil {
				err = errors.Join(err, fmt.Errorf("undo the failed build: %w", derr))
			}
		}
	}()
	for _, n := range c.Nodes() {
		if err := onNode(ctx, n, "CREATE DATABASE "+ident(tpl)); err != nil {
			return err
		}
		if err := inDatabase(ctx, n, tpl, "CREATE EXTENSION citus"); err != nil {
			return err
		}
	}
	register := []string{fmt.Sprintf("SELECT citus_set_coordinator_host(%s, %d)",
		literal(c.Coordinator.SocketDir()), c.Coordinator.Port())}
	for _, w := range c.Workers {
		register = append(register, fmt.Sprintf("SELECT citus_add_node(%s, %d)", literal(w.SocketDir()), w.Port()))
	}
	registering.Lock()
	err = inDatabase(ctx, c.Coordinator, tpl, register...)
	registering.Unlock()
	if err != nil {
		return err
	}
	if err := runMigrator(ctx, c.Coordinator.ConnString(tpl), migrate); err != nil {
		return fmt.Errorf("prepare the Citus template database: %w", err)
	}
	// Copies are made while nobody is connected to it, Citus's maintenance daemon
	// included: keep everyone out.
	for _, n := range c.Nodes() {
		if err := onNode(ctx, n,
			"ALTER DATABASE "+ident(tpl)+" WITH ALLOW_CONNECTIONS false IS_TEMPLATE true",
			"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "+literal(tpl)); err != nil {
			return err
		}
	}
	return nil
}

// copyDatabase creates database name on node as a copy of tpl. Sessions of Citus's
// background workers may be in tpl for a moment (they are turned away once connections
// are off): they are ended, and the copy tried again (whileInUse).
func copyDatabase(ctx context.Context, node *pgcluster.Cluster, tpl, name string) error {
	conn, err := pgx.Connect(ctx, node.ConnString("postgres"))
	if err != nil {
		return fmt.Errorf("connect to node %d: %w", node.Port(), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return errorf(node, "copy the template", whileInUse(ctx, func() error {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(tpl))
		if inUse(err) {
			if _, terr := conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", tpl); terr != nil {
				return terr
			}
		}
		return err
	}))
}

// dropCitusDatabase drops database name on node. Citus's maintenance daemon may connect
// to it again between DROP DATABASE's terminating the sessions and its check: that is
// retried (whileInUse), until ctx's deadline; and first the database takes no new
// connection, so that no client or daemon reconnecting keeps it in use meanwhile (a CI
// run under load saw it in use for a whole minute of retries).
func dropCitusDatabase(ctx context.Context, node *pgcluster.Cluster, name string) error {
	// best effort: a database already gone, or one that still takes connections, is
	// the DROP's to report
	_ = onNode(ctx, node, "ALTER DATABASE "+ident(name)+" WITH ALLOW_CONNECTIONS false")
	return errorf(node, "drop "+name, whileInUse(ctx, func() error {
		return dropDatabase(ctx, node.ConnString("postgres"), name)
	}))
}

// whileInUse runs attempt until it does not fail with a database in use (SQLSTATE
// 55006), until ctx's deadline, or for a minute when it has none.
func whileInUse(ctx context.Context, attempt func() error) error {
	deadline := time.Now().Add(time.Minute)
	if d, ok := ctx.Deadline(); ok {
		deadline = d
	}
	for {
		err := attempt()
		if !inUse(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// inUse reports whether err is PostgreSQL's "database is being accessed by other users".
func inUse(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55006"
}

// errorf names node and what failed in err, or returns nil.
func errorf(node *pgcluster.Cluster, what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("node %d: %s: %w", node.Port(), what, err)
}

// onNode runs statements in the maintenance database of node, retrying while a
// database is in use (55006: sessions still terminating).
func onNode(ctx context.Context, node *pgcluster.Cluster, stmts ...string) error {
	return inDatabase(ctx, node, "postgres", stmts...)
}

// inDatabase runs statements in database db of node, retrying as onNode does.
func inDatabase(ctx context.Context, node *pgcluster.Cluster, db string, stmts ...string) error {
	conn, err := pgx.Connect(ctx, node.ConnString(db))
	if err != nil {
		return fmt.Errorf("connect to node %d: %w", node.Port(), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, stmt := range stmts {
		if err := execRetry(ctx, conn, stmt); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				return fmt.Errorf("node %d: %s: %w", node.Port(), stmt, err)
			}
			return err
		}
	}
	return nil
}

// literal quotes s as an SQL string literal.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

package pgtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { Main(m) }

// databaseExists reports whether a database called name exists on the test
// server.
func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// uniqueKey returns a template key not used before, and drops its template
// when the test ends, so that these tests do not leave templates behind.
func uniqueKey(t *testing.T) string {
	key := "pgtest self-test " + t.Name() + " " + randomHex(8)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := dropDatabase(ctx, AdminURL(t), templateName(key)); err != nil {
			t.Error(err)
		}
	})
	return key
}

func TestNewPoolIsolatedDatabasesFromOneTemplate(t *testing.T) {
	t.Parallel()
	key := uniqueKey(t)
	var calls atomic.Int32
	migrate := func(ctx context.Context, pool *pgxpool.Pool) error {
		calls.Add(1)
		_, err := pool.Exec(ctx, `
			CREATE SEQUENCE item_seq;
			CREATE TABLE item (id bigint PRIMARY KEY DEFAULT nextval('item_seq'), name text NOT NULL)`)
		return err
	}

	var mu sync.Mutex
	var names []string
	t.Run("group", func(t *testing.T) {
		for i := range 4 {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				pool := NewPool(t, key, migrate)
				ctx := t.Context()
				var name string
				var id int64
				err := pool.QueryRow(ctx, "INSERT INTO item (name) VALUES ('x') RETURNING current_database(), id").Scan(&name, &id)
				if err != nil {
					t.Fatal(err)
				}
				if id != 1 {
					t.Errorf("first id in %s = %d, want 1", name, id)
				}
				if !strings.HasPrefix(name, testDBPrefix) {
					t.Errorf("database name %q lacks prefix %q", name, testDBPrefix)
				}
				mu.Lock()
				names = append(names, name)
				mu.Unlock()
			})
		}
	})

	if n := calls.Load(); n != 1 {
		t.Errorf("migrator called %d times, want 1", n)
	}
	slices.Sort(names)
	if len(slices.Compact(slices.Clone(names))) != len(names) || len(names) != 4 {
		t.Errorf("databases not distinct: %v", names)
	}
	for _, name := range names {
		if databaseExists(t, name) {
			t.Errorf("database %s not dropped after its test", name)
		}
	}

	// A process that has not seen the template yet (simulated by forgetting
	// it) must find it on the server instead of migrating again.
	templatesMu.Lock()
	delete(templates, templateName(key))
	templatesMu.Unlock()
	connString := NewDatabase(t, key, migrate)
	if n := calls.Load(); n != 1 {
		t.Errorf("after forgetting the template, migrator called %d times, want 1", n)
	}
	conn, err := pgx.Connect(t.Context(), connString)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var next int64
	if err := conn.QueryRow(t.Context(), "SELECT nextval('item_seq')").Scan(&next); err != nil || next != 1 {
		t.Errorf("nextval = %d, %v; want 1", next, err)
	}

	var allow, isTemplate bool
	err = conn.QueryRow(t.Context(), "SELECT datallowconn, datistemplate FROM pg_database WHERE datname = $1",
		templateName(key)).Scan(&allow, &isTemplate)
	if err != nil || allow || !isTemplate {
		t.Errorf("template datallowconn=%v datistemplate=%v err=%v; want false, true", allow, isTemplate, err)
	}
}

func TestTemplateNotPublishedWhenMigrationFails(t *testing.T) {
	t.Parallel()
	key := uniqueKey(t)
	admin := AdminURL(t)
	ctx := t.Context()
	boom := errors.New("boom")
	err := ensureTemplate(ctx, admin, key, func(ctx context.Context, pool *pgxpool.Pool) error {
		if _, err := pool.Exec(ctx, "CREATE TABLE half_done (x int)"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("ensureTemplate error = %v, want %v", err, boom)
	}
	build := buildPrefix + strings.TrimPrefix(templateName(key), templatePrefix)
	for _, name := range []string{templateName(key), build} {
		if databaseExists(t, name) {
			t.Errorf("database %s exists after failed migration", name)
		}
	}

	// A migrator that leaks a connection to the template must not break
	// publishing it.
	var leaked *pgx.Conn
	err = ensureTemplate(ctx, admin, key, func(ctx context.Context, pool *pgxpool.Pool) error {
		var err error
		leaked, err = pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if leaked != nil {
		leaked.Close(context.Background())
	}
	if !databaseExists(t, templateName(key)) {
		t.Fatal("template not published")
	}
	NewDatabase(t, key, nil)
}

func TestDiscoverBadTestDatabaseURL(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"postgres://someone:secret@127.0.0.1:1/postgres?sslmode=disable",
		"postgres://someone:secret@127.0.0.1:notaport/postgres",        // does not parse as a URL
		"postgresql://someone:secret@127.0.0.1:1,127.0.0.1:2/postgres", // multi-host: neither
		"postgres://someone@127.0.0.1:notaport/postgres?password=secret",
		"host=127.0.0.1 port=1 user=someone password=secret connect_timeout=2",
	} {
		env := map[string]string{envDatabaseURL: u}
		s, err := discover(t.Context(), func(k string) string { return env[k] })
		if err == nil {
			t.Fatalf("discover(%s) succeeded with %+v", u, s)
		}
		msg := err.Error()
		if !strings.Contains(msg, envDatabaseURL) || !strings.Contains(msg, "Fix") || strings.Contains(msg, "secret") {
			t.Errorf("unhelpful or leaky error for %s: %s", u, msg)
		}
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:secret@h:5432/db?sslmode=disable", "postgres://u:xxxxx@h:5432/db?sslmode=disable"},
		{"postgres://u:secret@h:port/db", "postgres://u:xxxxx@h:port/db"},
		{"postgresql://u:se@cret@h1:1,h2:2/db", "postgresql://u:xxxxx@h1:1,h2:2/db"},
		{"postgres://u@h/db?sslmode=disable&password=secret", "postgres://u@h/db?sslmode=disable&password=xxxxx"},
		{"postgres://u@h/db", "postgres://u@h/db"},
		{"postgres://h?PASSWORD=secret", "postgres://h?PASSWORD=xxxxx"},
		{"host=h user=u password=secret", "(connection string with password)"},
		{"host=h user=u", "host=h user=u"},
	} {
		if got := redact(tc.in); got != tc.want {
			t.Errorf("redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"postgres://u@h:5432/postgres?sslmode=disable", "postgres://u@h:5432/db1?sslmode=disable"},
		{"postgresql://u:p@h1:1,h2:2/postgres", "postgresql://u:p@h1:1,h2:2/db1"},
		{"postgres://u@h", "postgres://u@h/db1"},
		{"postgres://postgres@/postgres?host=%2Ftmp%2Fx&port=5432", "postgres://postgres@/db1?host=%2Ftmp%2Fx&port=5432"},
		{"host=/tmp/x user=postgres dbname=postgres", "host=/tmp/x user=postgres dbname=postgres dbname=db1"},
	} {
		got := withDatabase(tc.in, "db1")
		if got != tc.want {
			t.Errorf("withDatabase(%q) = %q, want %q", tc.in, got, tc.want)
		}
		cfg, err := pgx.ParseConfig(got)
		if err != nil || cfg.Database != "db1" {
			t.Errorf("pgx.ParseConfig(%q): database %q, err %v", got, cfg.Database, err)
		}
	}
}

const childEnv = "PGTEST_SELFTEST_CHILD"

// TestFallbackToCluster runs this test binary again with the local server
// address pointing at a closed port, so discovery must start a throwaway
// cluster, and checks that Main removed the cluster at exit. A subprocess
// keeps the process-wide discovery of this process undisturbed.
func TestFallbackToCluster(t *testing.T) {
	if os.Getenv(childEnv) == "fallback" {
		AdminURL(t)
		srvMu.Lock()
		s := srv
		srvMu.Unlock()
		if s.cluster == nil {
			t.Fatalf("server from %q, want a throwaway cluster", s.source)
		}
		pool := NewPool(t, "pgtest fallback child", func(ctx context.Context, pool *pgxpool.Pool) error {
			_, err := pool.Exec(ctx, "CREATE SEQUENCE s")
			return err
		})
		var n int64
		if err := pool.QueryRow(t.Context(), "SELECT nextval('s')").Scan(&n); err != nil || n != 1 {
			t.Fatalf("nextval = %d, %v", n, err)
		}
		fmt.Printf("CLUSTER_DIR=%s\n", s.cluster.Dir())
		return
	}

	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFallbackToCluster$", "-test.v", "-test.count=1")
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, envDatabaseURL+"=") || strings.HasPrefix(kv, envLocalURL+"=")
	}),
		childEnv+"=fallback",
		envLocalURL+"=postgres://postgres@127.0.0.1:1/postgres?sslmode=disable",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child test failed: %v\n%s", err, out)
	}
	var dir string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "CLUSTER_DIR="); ok {
			dir = d
		}
	}
	if dir == "" {
		t.Fatalf("child did not report a cluster directory:\n%s", out)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cluster directory %s still exists after the child exited (stat: %v)\n%s", dir, err, out)
	}
	t.Logf("child output:\n%s", out)
}

// TestInterruptedWhileStartingACluster: an interrupt while the harness starts its
// throwaway cluster (initdb and pg_ctl run detached, the terminal's Ctrl-C does not
// reach them) leaves no server running and no cluster directory: the start is stopped
// and undone. Before, the signal killed the test process at once, and the server it
// was starting came up and ran on.
func TestInterruptedWhileStartingACluster(t *testing.T) {
	if os.Getenv(childEnv) == "interrupted" {
		AdminURL(t) // the signal comes while this starts the cluster
		t.Fatal("AdminURL returned: the interrupt came too late")
	}
	t.Parallel()
	parent, err := os.MkdirTemp("", "pgtest-interrupt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o755); err != nil { // the cluster may run as another user
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestInterruptedWhileStartingACluster$", "-test.count=1")
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, envDatabaseURL+"=") || strings.HasPrefix(kv, envLocalURL+"=") || strings.HasPrefix(kv, "TMPDIR=")
	}),
		childEnv+"=interrupted",
		envLocalURL+"=postgres://postgres@127.0.0.1:1/postgres?sslmode=disable",
		"TMPDIR="+parent,
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// the cluster's directory appears when initdb is about to run
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		if dirs, _ := filepath.Glob(filepath.Join(parent, "pgcluster-*")); len(dirs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("no cluster directory in %s within a minute\n%s", parent, out.String())
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if strings.Contains(out.String(), "interrupt came too late") {
		t.Fatalf("the cluster started before the interrupt:\n%s", out.String())
	}
	if dirs, _ := filepath.Glob(filepath.Join(parent, "pgcluster-*")); len(dirs) > 0 {
		t.Errorf("cluster directories left after the interrupt: %v\n%s", dirs, out.String())
	}
	// no server of that directory left running
	ps, _ := exec.Command("pgrep", "-f", parent).Output()
	if pids := strings.Fields(string(ps)); len(pids) > 0 {
		for _, pid := range pids {
			if n, err := strconv.Atoi(pid); err == nil {
				_ = syscall.Kill(n, syscall.SIGQUIT)
			}
		}
		t.Errorf("processes of %s left running after the interrupt: %v\n%s", parent, pids, out.String())
	}
}

// A test that ends holding a connection of its pool (a transaction left open on a
// failing path) fails saying so once the wait is over, instead of hanging in
// pgxpool.Close until go test's -timeout without printing its own failure.
func TestClosePoolDoesNotWaitForeverForAConnectionHeld(t *testing.T) {
	t.Parallel()
	key := uniqueKey(t)
	migrate := func(context.Context, *pgxpool.Pool) error { return nil }
	pool := NewPool(t, key, migrate)
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	r := &failures{TB: t}
	began := time.Now()
	closePool(r, pool, 200*time.Millisecond)
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("closePool took %v with a connection held, want about its wait", took)
	}
	if got := strings.Join(r.got, "\n"); !strings.Contains(got, "1 connections of the test's pool still in use") {
		t.Errorf("failure %q, want one naming the connection still in use", got)
	}
	_ = tx.Rollback(context.WithoutCancel(t.Context())) // the Close in the background ends
}

// failures is a testing.TB that records Errorf.
type failures struct {
	testing.TB
	got []string
}

func (f *failures) Errorf(format string, args ...any) {
	f.got = append(f.got, fmt.Sprintf(format, args...))
}

// TestSweep: the sweep drops the test databases a killed process left (old enough,
// nobody connected) and the templates unused for a week, and leaves the rest: a recent
// test database, an old one in use, a template used lately, a template with no record
// of its use (which it stamps).
func TestSweep(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	admin := AdminURL(t)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// The test sweeps under the sweep's lock, taken before it makes the databases: the
	// sweep of another test process (each sweeps as it ends) dropped them meanwhile,
	// the abandoned one before this test's sweep, the one in use before it was used.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		locked, err := trySweepLock(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		if locked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("another process swept the server for a minute")
		}
	}
	now := time.Now()
	create := func(name, comment string, template bool) string {
		t.Helper()
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE template0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = dropDatabase(context.Background(), admin, name) })
		if comment != "" {
			if _, err := conn.Exec(ctx, "COMMENT ON DATABASE "+ident(name)+" IS '"+comment+"'"); err != nil {
				t.Fatal(err)
			}
		}
		if template {
			if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident(name)+" WITH ALLOW_CONNECTIONS false IS_TEMPLATE true"); err != nil {
				t.Fatal(err)
			}
		}
		return name
	}
	used := func(ago time.Duration) string { return fmt.Sprintf("%s%d", usedComment, now.Add(-ago).Unix()) }
	abandoned := create(newTestDBName(now.Add(-testDBAbandoned-time.Hour)), "", false)
	inUse := create(newTestDBName(now.Add(-testDBAbandoned-time.Hour)), "", false)
	recent := create(newTestDBName(now.Add(-time.Hour)), "", false)
	unnamed := create(testDBPrefix+randomHex(8), "", false) // an earlier checkout's name
	stale := create(templatePrefix+"sweep"+randomHex(4), used(templateUnused+time.Hour), true)
	lately := create(templatePrefix+"sweep"+randomHex(4), used(24*time.Hour), true)
	unstamped := create(templatePrefix+"sweep"+randomHex(4), "", true)
	// build databases: of a killed builder, of one killed while it published it (a
	// template already), and of a builder at work, which holds the build's lock
	killed := create(buildPrefix+"sweep"+randomHex(4), "", false)
	publishing := create(buildPrefix+"sweep"+randomHex(4), "", true)
	building := create(buildPrefix+"sweep"+randomHex(4), "", false)
	builder, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer builder.Close(context.Background())
	if _, err := builder.Exec(ctx, "SELECT pg_advisory_lock($1)", buildLock(templatePrefix+strings.TrimPrefix(building, buildPrefix))); err != nil {
		t.Fatal(err)
	}
	user, err := pgx.Connect(ctx, withDatabase(admin, inUse))
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close(context.Background())

	sweepNow := func() []string {
		t.Helper()
		dropped, err := sweepLocked(ctx, conn, now)
		if err != nil {
			t.Fatal(err)
		}
		return dropped
	}
	// a process stamping the stale template's use holds its lock shared: left
	stamper, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer stamper.Close(context.Background())
	if _, err := stamper.Exec(ctx, "SELECT pg_advisory_lock_shared($1)", templateLock(stale)); err != nil {
		t.Fatal(err)
	}
	dropped := sweepNow()
	if slices.Contains(dropped, stale) {
		t.Errorf("the stale template was dropped while a process stamped its use")
	}
	if _, err := stamper.Exec(ctx, "SELECT pg_advisory_unlock_shared($1)", templateLock(stale)); err != nil {
		t.Fatal(err)
	}
	dropped = append(dropped, sweepNow()...)
	exists := func(name string) bool {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	for _, name := range []string{abandoned, stale, killed, publishing} {
		if exists(name) || !slices.Contains(dropped, name) {
			t.Errorf("%s is still there (dropped %v)", name, dropped)
		}
	}
	for _, name := range []string{inUse, recent, unnamed, lately, unstamped, building} {
		if !exists(name) {
			t.Errorf("%s was dropped", name)
		}
	}
	var comment string
	if err := conn.QueryRow(ctx, "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1", unstamped).Scan(&comment); err != nil {
		t.Fatal(err)
	}
	if comment != used(0) {
		t.Errorf("the unstamped template's comment: %q, want %q", comment, used(0))
	}
	var template bool
	if err := conn.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", lately).Scan(&template); err != nil || !template {
		t.Errorf("the template used lately is a template: %v, %v", template, err)
	}
}

// TestSweepOfADatabaseGoneMeanwhile: a database the sweep listed and another process
// dropped before the sweep came to it (a failed build drops its template, a test drops
// one by hand, neither under the sweep's lock) is gone, not a failure of the sweep.
func TestSweepOfADatabaseGoneMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	name := templatePrefix + "gone" + randomHex(4)
	// (markUsed of a template gone meanwhile is no failure either: its COMMENT ON
	// DATABASE is then a warning)
	if dropped, err := dropUnused(ctx, conn, name, true); dropped || err != nil {
		t.Errorf("dropping a template gone meanwhile: dropped %v, %v; want false, nil", dropped, err)
	}
}

// TestTemplateDroppedIsBuiltAgain: a template dropped after this process built it (by
// hand, or by a sweep) is built again at the next clone, rather than every later test
// of the process failing on a template that does not exist.
func TestTemplateDroppedIsBuiltAgain(t *testing.T) {
	t.Parallel()
	key := "pgtest rebuilt " + randomHex(4)
	migrations := 0
	migrate := func(ctx context.Context, pool *pgxpool.Pool) error {
		migrations++
		_, err := pool.Exec(ctx, "CREATE TABLE marker (id int)")
		return err
	}
	NewDatabase(t, key, migrate)
	admin := AdminURL(t)
	t.Cleanup(func() { _ = dropDatabase(context.Background(), admin, templateName(key)) })
	if err := dropDatabase(t.Context(), admin, templateName(key)); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(t.Context(), NewDatabase(t, key, migrate))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(t.Context(), "SELECT * FROM marker"); err != nil {
		t.Errorf("the database cloned from the template built again: %v", err)
	}
	if migrations != 2 {
		t.Errorf("%d migrations, want 2: the template built again", migrations)
	}
}

// TestTemplateMarkedUsed: a process that clones a template stamps its use, so that the
// sweep of other processes keeps it.
func TestTemplateMarkedUsed(t *testing.T) {
	t.Parallel()
	key := "pgtest mark " + randomHex(4)
	before := time.Now().Add(-time.Second)
	NewDatabase(t, key, nil)
	admin := AdminURL(t)
	t.Cleanup(func() { _ = dropDatabase(context.Background(), admin, templateName(key)) })
	conn, err := pgx.Connect(t.Context(), admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var comment string
	if err := conn.QueryRow(t.Context(), "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1", templateName(key)).Scan(&comment); err != nil {
		t.Fatal(err)
	}
	secs, err := strconv.ParseInt(strings.TrimPrefix(comment, usedComment), 10, 64)
	if err != nil || !strings.HasPrefix(comment, usedComment) || time.Unix(secs, 0).Before(before.Truncate(time.Second)) {
		t.Errorf("the template's comment: %q, want %s<now>", comment, usedComment)
	}
}

// TestBuildOnceRetriesAFailure: a template's build that failed (too many clients, say)
// is returned to the callers for buildRetryAfter, then tried again; one that succeeded
// is not run again. A failure used to be kept for the whole process, failing every
// later test of the package.
func TestBuildOnceRetriesAFailure(t *testing.T) {
	defer func(d time.Duration) { buildRetryAfter = d }(buildRetryAfter)
	buildRetryAfter = 50 * time.Millisecond
	tpl := "pgtest_build_once_" + t.Name()
	builds := 0
	build := func(context.Context) error {
		builds++
		if builds == 1 {
			return errors.New("too many clients")
		}
		return nil
	}
	if err := buildOnce(t.Context(), tpl, build); err == nil {
		t.Fatal("first build: no error")
	}
	if err := buildOnce(t.Context(), tpl, build); err == nil || builds != 1 {
		t.Fatalf("within buildRetryAfter: error %v after %d builds, want the first failure without a second build", err, builds)
	}
	time.Sleep(2 * buildRetryAfter)
	for range 2 {
		if err := buildOnce(t.Context(), tpl, build); err != nil {
			t.Fatalf("after buildRetryAfter: %v", err)
		}
	}
	if builds != 2 {
		t.Fatalf("%d builds, want 2: one failed, one succeeded and kept", builds)
	}
}

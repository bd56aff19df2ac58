package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgcluster"
)

const (
	envDatabaseURL  = "TEST_DATABASE_URL"
	envLocalURL     = "PGTASK_TEST_LOCAL_URL"
	defaultLocalURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

	templatePrefix = "pgtask_tpl_"
	buildPrefix    = "pgtask_tplbuild_"
	testDBPrefix   = "pgtask_test_"
)

// server is the outcome of discovery.
type server struct {
	url     string             // connection string of the maintenance database
	source  string             // where it came from, for messages
	cluster *pgcluster.Cluster // non-nil if this process started it
}

var (
	mainCalled atomic.Bool

	discoverOnce sync.Once
	srvMu        sync.Mutex
	srv          *server
	srvErr       error
)

// Main wraps testing.M: it runs the tests, then stops a throwaway cluster this
// process started (if any) and exits (os.Exit) with the tests' code. Every test
// package using pgtest calls it, or RunTests, from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
func Main(m *testing.M) { os.Exit(RunTests(m)) }

// RunTests is Main without the exit: it returns the code to exit with, for a TestMain
// that has more to do after the tests. Before stopping the cluster it sweeps the server
// of test databases that killed processes left and of templates unused for a week
// (sweep).
func RunTests(m *testing.M) int {
	mainCalled.Store(true)
	code := m.Run()
	sweepServer()
	if err := errors.Join(stopCluster(), stopCitus()); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// stopCluster stops the cluster this process started, if any.
func stopCluster() error {
	srvMu.Lock()
	defer srvMu.Unlock()
	if srv == nil || srv.cluster == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return srv.cluster.Stop(ctx)
}

// AdminURL returns the connection string of the test server's maintenance
// database, finding the server on first use (see the package documentation).
// It fails the test, with advice on how to fix it, when no server can be had.
func AdminURL(tb testing.TB) string {
	tb.Helper()
	if !mainCalled.Load() {
		tb.Fatal("pgtest: the test package must call pgtest.Main from TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }")
	}
	discoverOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// Signals are caught from before discover: an interrupt while it starts a
		// cluster (initdb and pg_ctl run detached, out of the terminal's reach) stops
		// the start, which removes what it made, rather than kill this process and
		// leave a server running.
		done := make(chan struct{})
		stop := catchSignals(cancel, done)
		s, err := discover(ctx, os.Getenv)
		srvMu.Lock()
		srv, srvErr = s, err
		srvMu.Unlock()
		close(done)
		if s != nil && s.cluster != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %s\n", s.source)
			stopOnSignal()
		}
		stop()
	})
	srvMu.Lock()
	s, err := srv, srvErr
	srvMu.Unlock()
	if err != nil {
		tb.Fatal(err)
	}
	return s.url
}

// catchSignals catches interrupts until stop is called: one calls cancel, waits for
// done (discover returned, having removed a cluster it was starting) and exits, after
// stopping a cluster discover started meanwhile.
func catchSignals(cancel func(), done <-chan struct{}) (stop func()) {
	starting.Add(1)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	stopped := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			cancel()
			<-done
			err := errors.Join(stopCluster(), stopCitus())
			fmt.Fprintf(os.Stderr, "pgtest: %v while finding a server: stopped (err: %v)\n", sig, err)
			os.Exit(1)
		case <-stopped:
		}
	}()
	return func() {
		signal.Stop(ch)
		close(stopped)
		starting.Done()
	}
}

var (
	// starting counts the starts in progress under catchSignals, whose handler
	// removes what a start interrupted made before this process exits.
	starting   sync.WaitGroup
	signalOnce sync.Once
)

// stopOnSignal stops the throwaway clusters (the server's, the Citus nodes) when the
// test process is interrupted (they run detached and would otherwise survive): one
// handler for both, which lets a start in progress (the Citus nodes', after the
// server's) be cancelled and removed first rather than exit in the middle of it.
func stopOnSignal() {
	signalOnce.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
		go func() {
			sig := <-ch
			starting.Wait()
			err := errors.Join(stopCluster(), stopCitus())
			fmt.Fprintf(os.Stderr, "pgtest: %v: stopped throwaway cluster (err: %v)\n", sig, err)
			os.Exit(1)
		}()
	})
}

// discover finds a server as described in the package documentation.
func discover(ctx context.Context, getenv func(string) string) (*server, error) {
	if u := getenv(envDatabaseURL); u != "" {
		if err := probe(ctx, u); err != nil {
			return nil, fmt.Errorf("pgtest: %s=%s is not usable: %w\n"+
				"Fix: point %s at a reachable PostgreSQL (14+) server whose user may create databases, "+
				"or unset it to use a server on 127.0.0.1:5432 or a throwaway cluster.",
				envDatabaseURL, redact(u), err, envDatabaseURL)
		}
		return &server{url: u, source: envDatabaseURL}, nil
	}

	local, localSource := getenv(envLocalURL), envLocalURL
	if local == "" {
		local, localSource = defaultLocalURL, "default local server"
	}
	probeErr := probe(ctx, local)
	if probeErr == nil {
		return &server{url: local, source: localSource}, nil
	}

	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		return nil, fmt.Errorf("pgtest: no PostgreSQL server for tests:\n"+
			"  - %s is not set\n"+
			"  - %s (%s): %v\n"+
			"  - throwaway cluster: %v\n"+
			"Fix one of:\n"+
			"  - run PostgreSQL on 127.0.0.1:5432 accepting user postgres without password (trust), or\n"+
			"  - set %s to a server whose user may create databases, or\n"+
			"  - install the PostgreSQL server (e.g. apt-get install postgresql) so a throwaway cluster can be started.",
			envDatabaseURL, redact(local), localSource, probeErr, err, envDatabaseURL)
	}
	return &server{
		url: c.ConnString("postgres"),
		source: fmt.Sprintf("%s (%s) not usable (%v); started throwaway cluster in %s",
			redact(local), localSource, probeErr, c.Dir()),
		cluster: c,
	}, nil
}

// probe checks that connString reaches a server that pgtest can use.
func probe(ctx context.Context, connString string) error {
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return err
	}
	if cfg.ConnectTimeout == 0 || cfg.ConnectTimeout > 5*time.Second {
		cfg.ConnectTimeout = 5 * time.Second
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var version int
	var createdb bool
	err = conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int,
		(SELECT rolsuper OR rolcreatedb FROM pg_roles WHERE rolname = current_user)`).Scan(&version, &createdb)
	switch {
	case err != nil:
		return err
	case version < 140000: // repository.MinServerVersion (this package cannot import it)
		return fmt.Errorf("server version %d is too old; need PostgreSQL 14 or later", version)
	case !createdb:
		return fmt.Errorf("user %s may not create databases (needs CREATEDB or superuser)", cfg.User)
	}
	return nil
}

// redact hides the password of a connection string: in a URL's user
// information or password parameter, whether or not the URL parses (a
// multi-host URL or a bad port does not), and the whole of a keyword/value
// string that sets one.
func redact(connString string) string {
	for _, scheme := range []string{"postgres://", "postgresql://"} {
		rest, ok := strings.CutPrefix(connString, scheme)
		if !ok {
			continue
		}
		authority, tail := rest, ""
		if i := strings.IndexAny(rest, "/?"); i >= 0 {
			authority, tail = rest[:i], rest[i:]
		}
		if at := strings.LastIndexByte(authority, '@'); at >= 0 {
			if user, _, hasPassword := strings.Cut(authority[:at], ":"); hasPassword {
				authority = user + ":xxxxx" + authority[at:]
			}
		}
		if path, query, ok := strings.Cut(tail, "?"); ok {
			params := strings.Split(query, "&")
			for i, p := range params {
				if key, _, _ := strings.Cut(p, "="); strings.EqualFold(key, "password") {
					params[i] = key + "=xxxxx"
				}
			}
			tail = path + "?" + strings.Join(params, "&")
		}
		return scheme + authority + tail
	}
	if strings.Contains(strings.ToLower(connString), "password") {
		return "(connection string with password)"
	}
	return connString
}

// Migrator prepares a template database, e.g. by running the schema
// migrations. pool is connected to the template under construction and is
// closed after Migrator returns; Migrator must not keep other connections to
// it.
type Migrator func(ctx context.Context, pool *pgxpool.Pool) error

// NewDatabase creates a fresh database for the test, cloned from the template
// identified by templateKey, and returns its connection string. The database
// is dropped when the test ends.
//
// The template is prepared by migrate the first time templateKey is used on
// the server (by any process); later uses, also by later test runs, clone
// the existing template. templateKey must therefore change whenever what
// migrate does changes: pass a hash of the migration files. A nil migrate
// gives an empty database.
func NewDatabase(tb testing.TB, templateKey string, migrate Migrator) string {
	tb.Helper()
	if OnCitus() {
		return newCitusDatabase(tb, templateKey, migrate)
	}
	admin := AdminURL(tb)
	ctx, cancel := context.WithTimeout(tb.Context(), 3*time.Minute)
	defer cancel()
	name, err := createDatabase(ctx, admin, templateKey, migrate)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := dropDatabase(ctx, admin, name); err != nil {
			tb.Errorf("pgtest: drop test database: %v", err)
		}
	})
	return withDatabase(admin, name)
}

// NewPool is [NewDatabase] followed by pgxpool.New; the pool is closed when
// the test ends (before the database is dropped).
func NewPool(tb testing.TB, templateKey string, migrate Migrator) *pgxpool.Pool {
	tb.Helper()
	connString := NewDatabase(tb, templateKey, migrate)
	ctx, cancel := context.WithTimeout(tb.Context(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, connString)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() { closePool(tb, pool, poolCloseWait) })
	if err := pool.Ping(ctx); err != nil {
		tb.Fatalf("pgtest: connect to test database: %v", err)
	}
	return pool
}

// poolCloseWait is how long NewPool's cleanup waits for the connections the test
// still holds.
const poolCloseWait = 10 * time.Second

// closePool closes pool, waiting at most wait for the connections still acquired:
// pgxpool.Close waits for them forever, so a test that failed holding a transaction
// open would hang until go test's -timeout and never print its failure. Past wait the
// test fails saying so, and the database is dropped under the connections (WITH
// FORCE); the Close goes on in the background.
func closePool(tb testing.TB, pool *pgxpool.Pool, wait time.Duration) {
	closed := make(chan struct{})
	go func() {
		pool.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(wait):
		tb.Errorf("pgtest: %d connections of the test's pool still in use %v after the test ended "+
			"(a transaction neither committed nor rolled back, rows not closed, a connection not released?)",
			pool.Stat().AcquiredConns(), wait)
	}
}

// templateState makes each template be ensured once per process, and a failed build
// be tried again once buildRetryAfter has passed (mu is held while it builds).
type templateState struct {
	mu       sync.Mutex
	built    bool
	err      error
	failedAt time.Time
}

// buildRetryAfter is how long the failure of a template's build is returned to the
// tests that ask for the template, before one tries again: a failure that passes (too
// many clients, a server restarting) does not fail every later test of the process,
// and one that stays (a migration that fails) is not tried again by every test.
var buildRetryAfter = 5 * time.Second

var (
	templatesMu sync.Mutex
	templates   = map[string]*templateState{}
)

// createDatabase clones a new test database from the template for key,
// preparing the template first if needed, and returns the new database's
// name.
func createDatabase(ctx context.Context, admin, key string, migrate Migrator) (string, error) {
	tpl := templateName(key)

	// Built if missing, then stamped as used (kept from the sweep of unused templates:
	// a sweep that dropped it meanwhile makes it built again).
	ready := func(ctx context.Context) error {
		for {
			if err := ensureTemplate(ctx, admin, key, migrate); err != nil {
				return err
			}
			if kept, err := markTemplateUsed(ctx, admin, tpl); err != nil || kept {
				return err
			}
		}
	}
	if err := buildOnce(ctx, tpl, ready); err != nil {
		return "", err
	}

	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", redact(admin), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	// named after the server's clock, which the sweep reads too
	var now time.Time
	if err := conn.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return "", err
	}
	name := newTestDBName(now)
	stmt := "CREATE DATABASE " + ident(name) + " TEMPLATE " + ident(tpl)
	rebuilt := false
	for attempt := 0; ; attempt++ {
		_, err = conn.Exec(ctx, stmt)
		if err == nil {
			return name, nil
		}
		if gone(err) && !rebuilt {
			// the template was dropped (by hand, or by a sweep of a process with a
			// clock far ahead): build it again, once
			rebuilt = true
			if err := ready(ctx); err != nil {
				return "", err
			}
			continue
		}
		// 55006 object_in_use: someone is connected to the template.
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55006" || attempt >= 10 {
			return "", fmt.Errorf("%s: %w", stmt, err)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s: %w (%w)", stmt, err, ctx.Err())
		case <-time.After(time.Duration(20<<min(attempt, 5)) * time.Millisecond):
		}
	}
}

// buildOnce runs build for template tpl the first time this process asks for it, and
// returns its error to the callers until buildRetryAfter has passed; the first caller
// after that runs it again. build is not tied to the calling test (other tests wait
// for it too): it gets five minutes of its own.
func buildOnce(ctx context.Context, tpl string, build func(context.Context) error) error {
	templatesMu.Lock()
	st := templates[tpl]
	if st == nil {
		st = &templateState{}
		templates[tpl] = st
	}
	templatesMu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.built {
		return nil
	}
	if st.err != nil && time.Since(st.failedAt) < buildRetryAfter {
		return st.err
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	if st.err = build(bctx); st.err != nil {
		st.failedAt = time.Now()
		return st.err
	}
	st.built = true
	return nil
}

// templateName returns the name of the template database for key.
func templateName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return templatePrefix + hex.EncodeToString(sum[:8])
}

// ensureTemplate makes sure the template database for key exists on the
// server, building it with migrate if not. Test processes run concurrently
// against one server, so building happens under an advisory lock, in a
// scratch database that gets its final name only when complete.
func ensureTemplate(ctx context.Context, admin, key string, migrate Migrator) error {
	tpl := templateName(key)
	build := buildPrefix + strings.TrimPrefix(tpl, templatePrefix)

	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redact(admin), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	exists := func() (bool, error) {
		var ok bool
		err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", tpl).Scan(&ok)
		return ok, err
	}
	if ok, err := exists(); err != nil || ok {
		return err
	}

	lockID := buildLock(tpl)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockID); err != nil {
		return fmt.Errorf("lock template %s: %w", tpl, err)
	}
	// Closing the connection releases the lock too.
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockID)

	if ok, err := exists(); err != nil || ok {
		return err
	}

	// A build database left over from a crashed process holding the lock.
	if err := dropDatabase(ctx, admin, build); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident(build)+" TEMPLATE template0"); err != nil {
		return fmt.Errorf("create template database: %w", err)
	}
	if err := runMigrator(ctx, withDatabase(admin, build), migrate); err != nil {
		if derr := dropDatabase(ctx, admin, build); derr != nil {
			err = errors.Join(err, derr)
		}
		return fmt.Errorf("prepare template database (key %q): %w", key, err)
	}

	// Make sure nobody stays connected (a migrator might leak connections),
	// then publish the template under its final name.
	for _, stmt := range []string{
		"ALTER DATABASE " + ident(build) + " WITH ALLOW_CONNECTIONS false IS_TEMPLATE true",
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '" + build + "'",
		"ALTER DATABASE " + ident(build) + " RENAME TO " + ident(tpl),
	} {
		if err := execRetry(ctx, conn, stmt); err != nil {
			return fmt.Errorf("publish template database: %w", err)
		}
	}
	return nil
}

// buildLock is the advisory lock a process holds while it builds template tpl (in its
// build database, buildPrefix and tpl's hash), until it has renamed it to tpl.
func buildLock(tpl string) int64 {
	sum := sha256.Sum256([]byte("pgtest template lock " + tpl))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// runMigrator runs migrate with a pool connected to connString, closing the
// pool afterwards.
func runMigrator(ctx context.Context, connString string, migrate Migrator) error {
	if migrate == nil {
		return nil
	}
	pool, err := pgxpool.New(ctx, connString)
	if err != nil {
		return err
	}
	defer pool.Close()
	return migrate(ctx, pool)
}

// execRetry runs stmt, retrying while the database is in use (SQLSTATE
// 55006), e.g. by backends that are still terminating.
func execRetry(ctx context.Context, conn *pgx.Conn, stmt string) error {
	for attempt := 0; ; attempt++ {
		_, err := conn.Exec(ctx, stmt)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || attempt >= 50 {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// dropDatabase drops database name if it exists, disconnecting its users
// (templates included).
func dropDatabase(ctx context.Context, admin, name string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redact(admin), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var isTemplate bool
	err = conn.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", name).Scan(&isTemplate)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err == nil && isTemplate {
		_, err = conn.Exec(ctx, "ALTER DATABASE "+ident(name)+" WITH IS_TEMPLATE false")
	}
	if err == nil {
		_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)")
	}
	if err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// withDatabase returns connString with its database replaced by dbname.
// dbname must be a plain identifier (as generated by this package).
func withDatabase(connString, dbname string) string {
	for _, scheme := range []string{"postgres://", "postgresql://"} {
		rest, ok := strings.CutPrefix(connString, scheme)
		if !ok {
			continue
		}
		// Authority ends at the first '/' or '?'; the path runs to '?'.
		authority, tail := rest, ""
		if i := strings.IndexAny(rest, "/?"); i >= 0 {
			authority, tail = rest[:i], rest[i:]
		}
		query := ""
		if i := strings.IndexByte(tail, '?'); i >= 0 {
			query = tail[i:]
		}
		return scheme + authority + "/" + dbname + query
	}
	// Keyword/value form: a later setting overrides an earlier one.
	return strings.TrimSpace(connString) + " dbname=" + dbname
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}

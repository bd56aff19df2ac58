package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgtask/pgtask/internal/httpguard"
	"github.com/pgtask/pgtask/internal/pgcluster"
	"github.com/pgtask/pgtask/metrics"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

const devAbout = `
Runs the whole pgtask system on this machine in one process: the database schema, the
web dashboard (unless --ui=false), the REST API with /metrics, and demo processors for
two topics:

  demo   logs each task and succeeds after 50ms (input "fail" makes it fail instead:
         registered by dev, the topic retries it twice, 1s then 2s later, then it is FAILED)
  echo   succeeds at once with the task's input as its output

Without a database URL (no --database-url, no DATABASE_URL) it starts a throwaway
PostgreSQL cluster (the server binaries must be installed: apt-get install postgresql)
listening on a unix socket only, and removes it on exit unless --keep. That cluster
runs without durability (fsync, synchronous_commit and full_page_writes off, for speed):
a crash of the machine can lose or corrupt what it holds, so keep nothing there you
need. With a URL it uses that database: it applies pending migrations and registers the
demo topics. An empty --database-url or DATABASE_URL is refused, not taken as none.

It prints the URLs and example commands, then "pgtask dev ready"; Ctrl-C, SIGTERM or
SIGHUP (the terminal closed; not under nohup) stops everything gracefully.`

// Demo topics served by "pgtask dev".
const (
	devTopic      = "demo"
	devEchoTopic  = "echo"
	devDemoDelay  = 50 * time.Millisecond
	devDatabase   = "pgtask"
	devReadyLine  = "pgtask dev ready"
	devStopBudget = time.Minute
)

func runDev(ctx context.Context, e *env, args []string) (err error) {
	f := newFlags(e, "pgtask dev", "[flags]", devAbout)
	url := f.databaseURL()
	addr := f.String("addr", "127.0.0.1:8080", "REST API address `HOST:PORT` (port 0 picks a free port)")
	sec := f.securityFlags()
	ui := f.uiFlag()
	keep := f.Bool("keep", false, "keep the throwaway cluster's directory on exit")
	dir := f.String("dir", "", "parent `DIRECTORY` of the throwaway cluster (default: the system's temporary directory)")
	if err := f.noArgs(args); err != nil {
		return err
	}
	if err := f.checkAddr(*addr); err != nil {
		return err
	}
	if err := sec.check(); err != nil {
		return err
	}
	out := &lockedWriter{w: e.stdout}
	logWriter := &lockedWriter{w: e.stderr}
	logger := slog.New(slog.NewTextHandler(logWriter, nil))

	dbURL, err := f.resolveURL(*url, "give a connection string, or leave --database-url and DATABASE_URL unset for a throwaway cluster")
	if err != nil {
		return err
	}
	if dbURL != "" {
		// they are the throwaway cluster's: with a database of the user's they would
		// do nothing, silently
		for _, name := range []string{"keep", "dir"} {
			if f.given(name) {
				return f.usagef("--%s: only for the throwaway cluster, and a database URL is given (--database-url or DATABASE_URL)", name)
			}
		}
	}
	// Listening first: an address in use (another pgtask dev) is said before a cluster
	// is made or the user's database migrated.
	ln, guard, err := sec.listen(*addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	var cluster *pgcluster.Cluster
	if dbURL == "" {
		fmt.Fprintln(out, "pgtask dev: no database URL given: starting a throwaway PostgreSQL cluster (durability off: not for data you need)")
		cluster, err = pgcluster.Start(ctx, pgcluster.Options{Dir: *dir, Keep: *keep, Logger: logger})
		if err != nil {
			return fmt.Errorf("dev: %w", err)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), devStopBudget)
			defer cancel()
			if serr := cluster.Stop(sctx); serr != nil {
				err = errors.Join(err, fmt.Errorf("dev: stop cluster: %w", serr))
				return
			}
			if *keep {
				fmt.Fprintf(out, "pgtask dev: cluster stopped and kept in %s (durability off: fsync and synchronous_commit)\n  restart it with: pg_ctl -D %s start\n",
					cluster.Dir(), shellQuote(cluster.Dir()+"/data"))
			} else {
				fmt.Fprintf(out, "pgtask dev: cluster %s removed\n", cluster.Dir())
			}
		}()
		if err := createDatabase(ctx, cluster.ConnString("postgres"), devDatabase); err != nil {
			return err
		}
		dbURL = cluster.ConnString(devDatabase)
	}

	pool, err := f.openPool(ctx, dbURL, poolOptions{})
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := repository.Migrate(ctx, pool); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	api, err := newAPI(pool, guard, 0, logger, reg, m)
	if err != nil {
		return err
	}
	if api, err = withDashboard(*ui, pool, guard, sec.token, api, logger, httpguard.ReadTimeoutDefault); err != nil {
		return err
	}
	proc, err := processor.New(processor.Config{Pool: pool, Logger: logger})
	if err != nil {
		return err
	}
	// The API registered the queue's series (every topic): the processor adds its own.
	if err := proc.Observe(m.Listener()); err != nil {
		return err
	}
	demo, err := processor.Buffer(demoHandler(logger), processor.BufferConfig{MinWorkers: 1, MaxWorkers: 4, Queue: 2})
	if err != nil {
		return err
	}
	for _, mc := range []processor.ManagerConfig{
		{Topic: devTopic, Handler: demo, BatchSize: 10},
		{Topic: devEchoTopic, Handler: echoHandler()},
	} {
		mc.ShutdownTimeout = 5 * time.Second
		if _, err := proc.Manage(mc); err != nil {
			return err
		}
		created, err := proc.Repository().CreateTopic(ctx, pool, mc.Topic)
		if err != nil {
			return err
		}
		if created && mc.Topic == devTopic {
			// input "fail" shows a retry, then a FAILED task within seconds, where the
			// default policy would retry it for hours; a demo topic already there keeps
			// its settings
			if _, err := proc.Repository().UpdateSettings(ctx, pool, devTopic, func(t *repository.TopicSettings) {
				t.MaxAttempts, t.BackoffBase, t.BackoffCap, t.BackoffJitter = 3, time.Second, 5*time.Second, 0
			}); err != nil {
				return err
			}
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
		stop() // one part stopping stops the others
	}
	wg.Go(func() { fail(proc.Run(runCtx)) })
	wg.Go(func() { fail(serveHTTP(runCtx, ln, guard, api, httpguard.Timeouts{}, logger, 5*time.Second)) })

	printDevBanner(out, "http://"+ln.Addr().String(), dbURL, sec.token, cluster)
	warnOpen(logWriter, "pgtask dev", ln.Addr(), guard, false)
	warnWeakToken(logWriter, "pgtask dev", sec.token)
	fmt.Fprintln(out, devReadyLine)

	<-runCtx.Done()
	fmt.Fprintln(out, "pgtask dev: stopping")
	wg.Wait()
	pool.Close()
	return errors.Join(errs...)
}

// createDatabase creates database name on the server of admin. This is the one SQL
// statement of the CLI: CREATE DATABASE cannot run through sqlc or inside the
// repository, and only "pgtask dev" needs it, for its own throwaway cluster.
func createDatabase(ctx context.Context, admin, name string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return fmt.Errorf("dev: connect to throwaway cluster: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("dev: create database %s: %w", name, err)
	}
	return nil
}

// demoHandler logs each task and succeeds after a short pause; input "fail" fails.
func demoHandler(logger *slog.Logger) processor.TaskFunc {
	return func(ctx context.Context, t repository.Task) repository.Decision {
		logger.Info("demo processor: handling task", "topic", t.Topic, "sequence", t.Sequence,
			"identifier", t.Identifier, "input", t.Input, "attempt", t.Attempt)
		select {
		case <-time.After(devDemoDelay):
		case <-ctx.Done():
			return repository.Fail(fmt.Errorf("demo processor: %w", context.Cause(ctx)))
		}
		if strings.TrimSpace(t.Input) == "fail" {
			return repository.Fail(errors.New("demo processor: input asked to fail"))
		}
		return repository.Succeed("handled by the pgtask dev demo processor")
	}
}

// echoHandler succeeds with the task's input as its output.
func echoHandler() processor.TaskFunc {
	return func(_ context.Context, t repository.Task) repository.Decision {
		return repository.Succeed(t.Input)
	}
}

func printDevBanner(w io.Writer, base, dbURL, token string, cluster *pgcluster.Cluster) {
	// The examples read the token from the environment, as they read a URL with a
	// password: the banner shows neither (a terminal's scroll-back, a shared screen).
	auth, tokenNote := "", ""
	if token != "" {
		auth = ` -H "Authorization: Bearer $PGTASK_TOKEN"`
		tokenNote = "\n  token         hidden: the curl commands below read $PGTASK_TOKEN; export it first where it is not set, as when it came from --token"
	}
	q := shellQuote(dbURL)
	shown, hidden := hidePassword(dbURL)
	if hidden {
		// The commands read the URL from the environment rather than show its password
		// (a terminal's scroll-back, a shared screen, a shell's history).
		q = `"$DATABASE_URL"`
		shown += "   (password hidden: the commands below read $DATABASE_URL; export it first where it is not set, as when the URL came from --database-url)"
	}
	fmt.Fprintf(w, `
pgtask dev is running.

  dashboard     %[1]s/
  REST API      %[1]s   (description: %[1]s/openapi.json)
  metrics       %[1]s/metrics
  health        %[1]s/healthz
  DATABASE_URL  %[2]s%[6]s
  topics        demo (logs each task, succeeds after 50ms; input "fail" fails, 3 attempts)
                echo (succeeds with its input as output)

Try, in another terminal:

  curl -sS -X POST%[3]s -H 'Content-Type: application/json' \
    -d '{"identifier": "hello", "input": "world"}' %[1]s/topics/demo/tasks
  curl -sS%[3]s %[1]s/topics/demo/tasks
  %[5]s push --database-url %[4]s --topic demo hello world
  %[5]s list --database-url %[4]s --topic demo
  %[5]s stats --database-url %[4]s
  psql %[4]s -c 'SELECT * FROM task_pretty'

`, base, shown, auth, q, selfName(), tokenNote)
	if cluster != nil {
		fmt.Fprintf(w, "The throwaway cluster lives in %s; Ctrl-C stops everything and removes it (unless --keep).\n\n", cluster.Dir())
	} else {
		fmt.Fprint(w, "Ctrl-C stops everything.\n\n")
	}
}

// hidePassword returns the connection string with its password replaced by xxxxx, and
// whether it had one: a URL's (postgres://user:secret@host/db) or a keyword/value
// string's (password=secret).
func hidePassword(conn string) (string, bool) {
	if u, err := url.Parse(conn); err == nil && u.Scheme != "" {
		if _, ok := u.User.Password(); ok {
			return u.Redacted(), true
		}
		if u.Query().Has("password") {
			q := u.Query()
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
			return u.String(), true
		}
		return conn, false
	}
	hidden := keywordPassword.ReplaceAllString(conn, "${1}xxxxx")
	return hidden, hidden != conn
}

// keywordPassword matches the password of a keyword/value connection string, quoted or
// not.
var keywordPassword = regexp.MustCompile(`(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s']+)`)

// selfName is how the user runs this program: "go run ./cmd/pgtask" when it was built
// by go run (into a temporary go-build directory), else "pgtask".
func selfName() string {
	if exe, err := os.Executable(); err == nil && strings.Contains(exe, string(os.PathSeparator)+"go-build") {
		return "go run ./cmd/pgtask"
	}
	return "pgtask"
}

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@=,%+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// lockedWriter serialises writes from several goroutines ("pgtask dev", "pgtask bench").
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

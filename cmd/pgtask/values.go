package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgpool"
	"github.com/pgtask/pgtask/repository"
)

// durationValue is a non-negative duration flag that also accepts whole days ("7d").
type durationValue time.Duration

func (d *durationValue) String() string { return time.Duration(*d).String() }

func (d *durationValue) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

// parseDuration parses a Go duration ("90s", "1h30m") or a number of days ("7d"); it
// refuses negative durations.
func parseDuration(s string) (time.Duration, error) {
	var (
		d   time.Duration
		err error
	)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n float64
		n, err = strconv.ParseFloat(days, 64)
		if err == nil && (math.IsNaN(n) || math.Abs(n*24) > math.MaxInt64/float64(time.Hour)) {
			err = errors.New("too long")
		}
		d = time.Duration(n * 24 * float64(time.Hour))
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil {
		return 0, errors.New("not a duration (e.g. 500ms, 30s, 5m, 2h, 7d)")
	}
	if d < 0 {
		return 0, errors.New("must not be negative")
	}
	return d, nil
}

func (f *flags) duration(name string, value time.Duration, usage string) *time.Duration {
	d := (*durationValue)(&value)
	f.Var(d, name, usage)
	return &value
}

// stripInvalid removes the repository's "invalid argument: " prefix from a parse error,
// leaving the message that names the bad value.
func stripInvalid(err error) string {
	return strings.TrimPrefix(err.Error(), repository.ErrInvalid.Error()+": ")
}

// parseState parses an optional --state flag value. The flag given empty is a usage
// error, never "any state": `purge --state "$S"` with $S come out empty would otherwise
// purge every finished task.
func (f *flags) parseState(name, value string) (*repository.State, error) {
	if value == "" {
		if f.given(name) {
			return nil, f.usagef("--%s is empty: give a state, or leave the flag out for every state", name)
		}
		return nil, nil
	}
	s, err := repository.ParseState(value)
	if err != nil {
		return nil, f.usagef("--%s: %s", name, stripInvalid(err))
	}
	return &s, nil
}

func (f *flags) parseInsertion(name, value string) (repository.Insertion, error) {
	i, err := repository.ParseInsertion(value)
	if err != nil {
		return 0, f.usagef("--%s: %s", name, stripInvalid(err))
	}
	return i, nil
}

// checkPriority checks that a --priority value fits the smallint column.
func (f *flags) checkPriority(p int) (int16, error) {
	if p < math.MinInt16 || p > math.MaxInt16 {
		return 0, f.usagef("--priority: %d is out of range [%d, %d]", p, math.MinInt16, math.MaxInt16)
	}
	return int16(p), nil
}

// sequences parses positional task sequences, each given once (as the repository
// wants them).
func (f *flags) sequences(args []string) ([]int64, error) {
	seqs := make([]int64, len(args))
	seen := make(map[int64]string, len(args))
	for i, a := range args {
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil || n <= 0 {
			return nil, f.usagef("sequence %q is not a positive integer", a)
		}
		if first, dup := seen[n]; dup {
			as := ""
			if first != a {
				as = fmt.Sprintf(" (as %q and %q)", first, a)
			}
			return nil, f.usagef("task SEQUENCE %d is given twice%s: give each task once", n, as)
		}
		seen[n] = a
		seqs[i] = n
	}
	return seqs, nil
}

// need checks that required string flags are set, and --topic, when among them, as
// every route of the REST API checks a topic.
func (f *flags) need(names ...string) error {
	for _, n := range names {
		fl := f.Lookup(n)
		if fl != nil && fl.Value.String() == "" {
			return f.usagef("--%s is required", n)
		}
		if fl != nil && n == "topic" {
			if err := repository.ValidateTopic(fl.Value.String()); err != nil {
				return f.usagef("--topic: %s", stripInvalid(err))
			}
		}
	}
	return nil
}

// topicArg parses args for a command whose one positional argument is a topic name
// (what names it in messages), checked as every route of the REST API checks it.
func (f *flags) topicArg(args []string, what string) ([]string, error) {
	pos, err := f.args(args, 1, 1, what)
	if err != nil {
		return nil, err
	}
	if err := repository.ValidateTopic(pos[0]); err != nil {
		return nil, f.usagef("%s: %s", what, stripInvalid(err))
	}
	return pos, nil
}

// rangeFlags registers --from and --to.
func (f *flags) rangeFlags() (from, to *string) {
	from = f.String("from", "", "first `SEQUENCE` (inclusive) or an RFC 3339 time: the first task created at or after it, where sequences follow creation times")
	to = f.String("to", "", "last `SEQUENCE` (inclusive) or an RFC 3339 time: the last task created at or before it, where sequences follow creation times")
	return from, to
}

// resolveRange turns --from and --to into an inclusive sequence range. A time is
// translated with the database clock (repository.Resolve). A window of times in which no
// task was created gives lo > hi (emptyRange).
func (f *flags) resolveRange(ctx context.Context, c *conn, from, to string) (int64, int64, error) {
	lo, hi := repository.MinSequence, repository.MaxSequence
	var err error
	if from != "" {
		if lo, err = f.resolveBound(ctx, c, "from", from, false); err != nil {
			return 0, 0, err
		}
	}
	if to != "" {
		if hi, err = f.resolveBound(ctx, c, "to", to, true); err != nil {
			return 0, 0, err
		}
	}
	return lo, hi, nil
}

// emptyRange reports, and says so, when a range resolveRange returned holds no task: no
// task was created between the times given. An unknown topic is still an error.
func emptyRange(ctx context.Context, e *env, c *conn, topic string, lo, hi int64) (bool, error) {
	if lo <= hi {
		return false, nil
	}
	if _, err := c.repo.Topic(ctx, c.pool, topic); err != nil {
		return false, err
	}
	fmt.Fprintln(e.stdout, "no task was created between --from and --to: nothing to do")
	return true, nil
}

// checkRange checks --from and --to without a database: each a sequence or a time
// (parseBound), and, both of a kind, --from not after --to.
func (f *flags) checkRange(from, to string) error {
	if err := f.parseBound("from", from); err != nil {
		return err
	}
	if err := f.parseBound("to", to); err != nil {
		return err
	}
	a, aerr := strconv.ParseInt(from, 10, 64)
	b, berr := strconv.ParseInt(to, 10, 64)
	ta, taerr := time.Parse(time.RFC3339Nano, from)
	tb, tberr := time.Parse(time.RFC3339Nano, to)
	if aerr == nil && berr == nil && a > b || taerr == nil && tberr == nil && ta.After(tb) {
		return f.usagef("--from %s is after --to %s", from, to)
	}
	return nil
}

// parseBound checks a --from/--to value without a database. The flag given empty is a
// usage error, never "no bound" (a cut-off that came out empty would widen a purge to
// the whole topic).
func (f *flags) parseBound(name, value string) error {
	if value == "" {
		if f.given(name) {
			return f.usagef("--%s is empty: give a sequence or an RFC 3339 time, or leave the flag out for no bound", name)
		}
		return nil
	}
	if n, err := strconv.ParseInt(value, 10, 64); err == nil {
		if n < 0 {
			return f.usagef("--%s: sequence %d is negative", name, n)
		}
		return nil
	}
	if _, err := time.Parse(time.RFC3339Nano, value); err != nil {
		return f.usagef("--%s: %q is neither a sequence nor an RFC 3339 time (e.g. 2024-05-01T12:00:00Z)", name, value)
	}
	return nil
}

func (f *flags) resolveBound(ctx context.Context, c *conn, name, value string, preceding bool) (int64, error) {
	if err := f.parseBound(name, value); err != nil {
		return 0, err
	}
	if n, err := strconv.ParseInt(value, 10, 64); err == nil {
		return n, nil
	}
	at, _ := time.Parse(time.RFC3339Nano, value)
	seq, err := c.repo.Resolve(ctx, c.pool, at, preceding)
	if err != nil {
		return 0, fmt.Errorf("%s: --%s: %w", f.name(), name, err)
	}
	return seq, nil
}

// conn is an open database connection with a repository.
type conn struct {
	pool *pgxpool.Pool
	repo *repository.Repository
}

func (c *conn) Close() { c.pool.Close() }

// databaseURL registers --database-url.
func (f *flags) databaseURL() *string {
	return f.String("database-url", "", "PostgreSQL connection `URL` (default $DATABASE_URL; an empty one is refused)")
}

// resolveURL returns the --database-url value or $DATABASE_URL; "" when neither is set.
// Either set to the empty string is a usage error naming it and ending with hint: an
// empty URL (a secret that came out empty) is a mistake, not a reason to fall back on
// the variable or a default.
func (f *flags) resolveURL(flagValue, hint string) (string, error) {
	url, _, err := f.setting("database-url", flagValue, "DATABASE_URL", hint)
	return url, err
}

// connect opens a small pool on the database named by --database-url or $DATABASE_URL,
// checks that it answers and that its schema is not older than this build's: a binary
// upgraded before the database was migrated failed with PostgreSQL's errors about
// columns and functions it did not find ("column w.expiry_ms does not exist"), or
// said the schema was missing.
func (f *flags) connect(ctx context.Context, flagValue string) (*conn, error) {
	c, err := f.connectAnySchema(ctx, flagValue)
	if err != nil {
		return nil, err
	}
	if err := pgpool.CheckSchema(ctx, c.pool, "pgtask"); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// connectAnySchema is connect whatever the schema's version: for the commands that
// migrate it or read its version.
func (f *flags) connectAnySchema(ctx context.Context, flagValue string) (*conn, error) {
	url, err := f.requireURL(flagValue)
	if err != nil {
		return nil, err
	}
	pool, err := f.openPool(ctx, url, poolOptions{maxConns: 4, cancelInServer: true})
	if err != nil {
		return nil, err
	}
	repo, err := repository.New(repository.Config{})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &conn{pool: pool, repo: repo}, nil
}

// requireURL returns the --database-url value or $DATABASE_URL, or a usage error when
// neither is set or either is empty.
func (f *flags) requireURL(flagValue string) (string, error) {
	url, err := f.resolveURL(flagValue, "give a connection string")
	if err != nil {
		return "", err
	}
	if url == "" {
		return "", f.usagef("--database-url: no database URL: pass --database-url or set DATABASE_URL")
	}
	return url, nil
}

// openPool opens a pool on url as o says and pings it; a malformed URL is a usage
// error of --database-url.
func (f *flags) openPool(ctx context.Context, url string, o poolOptions) (*pgxpool.Pool, error) {
	pool, err := openPool(ctx, url, "pgtask "+f.name(), o)
	var bad *badURLError
	if errors.As(err, &bad) {
		return nil, f.usagef("--database-url: %v", bad.err)
	}
	return pool, err
}

// badURLError is a connection string pgx cannot parse.
type badURLError struct{ err error }

func (b *badURLError) Error() string { return b.err.Error() }

// poolOptions shape a pool openPool opens.
type poolOptions struct {
	// maxConns bounds the pool's connections; 0 keeps the URL's pool_max_conns, or
	// pgx's default (the larger of 4 and the number of CPUs).
	maxConns int32
	// atLeast raises the bound to this many connections when the URL does not set
	// pool_max_conns.
	atLeast int32
	// cancelInServer stops a statement in the database when its context ends (a
	// command interrupted, a request past its timeout) by a cancel request, and keeps
	// the connection. pgx's default (5.12) sends the cancel request too, but closes the
	// connection, which serve would then make again for every request past its
	// timeout. Processors keep pgx's default: their error handling tells a context's
	// end by the context's own errors.
	cancelInServer bool
}

// cancelGrace is how long a statement whose context ended waits for the server to
// act on the cancel request before its connection is closed (a server that does not
// answer).
const cancelGrace = 5 * time.Second

// openPool opens a pool on url and pings it; it sets READ COMMITTED when the
// database's default isolation is another (pgpool.ReadCommitted).
func openPool(ctx context.Context, url, application string, o poolOptions) (*pgxpool.Pool, error) {
	return pgpool.ReadCommitted(ctx, func(readCommitted bool) (*pgxpool.Pool, error) {
		return openPoolWith(ctx, url, application, o, readCommitted)
	})
}

// openPoolWith is openPool, readCommitted saying whether to set the isolation.
func openPoolWith(ctx context.Context, url, application string, o poolOptions, readCommitted bool) (*pgxpool.Pool, error) {
	cfg, err := pgpool.ParseConfig(url)
	if err != nil {
		return nil, &badURLError{err}
	}
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	if _, set := cfg.ConnConfig.RuntimeParams["application_name"]; !set {
		cfg.ConnConfig.RuntimeParams["application_name"] = application
	}
	if readCommitted {
		cfg.ConnConfig.RuntimeParams[pgpool.IsolationParam] = "read committed"
	}
	if o.maxConns > 0 {
		cfg.MaxConns = o.maxConns
	} else if cfg.MaxConns < o.atLeast && !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = o.atLeast
	}
	if o.cancelInServer {
		cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: cancelGrace}
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return pool, nil
}

// whoami names the operator in outputs such as a cancellation's.
func whoami(e *env) string {
	user := e.getenv("USER")
	if user == "" {
		user = "unknown"
	}
	host, _ := os.Hostname()
	return user + "@" + host
}

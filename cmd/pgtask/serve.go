package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/pgtask/pgtask/internal/httpguard"
	"github.com/pgtask/pgtask/internal/pgpool"
	"github.com/pgtask/pgtask/internal/rest"
	"github.com/pgtask/pgtask/metrics"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

const serveAbout = `
Serves the web dashboard at / (unless --ui=false; docs/dashboard.md), the REST API
(enqueue, status, cancel, list, stats; GET /openapi.json describes it) and Prometheus
metrics at /metrics, until SIGINT or SIGTERM, which stop it gracefully:
requests in flight get --shutdown-timeout to finish.

With a token (--token or $PGTASK_TOKEN) every request but GET /healthz and
GET /openapi.json must carry the header "Authorization: Bearer TOKEN". An empty one
(--token '' or PGTASK_TOKEN set to "") is refused. Without one (neither set) the API
is open to every client that can reach it, with two limits against web pages: it answers
only requests addressed to the address it listens on (localhost for 127.0.0.1; any IP
for 0.0.0.0) or to an --allow-host, and only writes of Content-Type application/json.
SECURITY.md says what is protected and how.

It also fires the database's due schedules every second, as every processor does (each
fire time is pushed once, whatever the number of processes); --no-schedules leaves them
to the processors.`

// queueCacheTTL is how long the queue collector serves one read of the database.
const queueCacheTTL = 5 * time.Second

// serveConns is the least pool a server opens (pgx's default is the larger of 4 and the
// number of CPUs): the API, the dashboard, /metrics, /healthz and the schedules share it,
// and four slow pages would hold every connection. A URL's pool_max_conns overrides it.
const serveConns = 10

func runServe(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask serve", "[--addr HOST:PORT] [flags]", serveAbout)
	url := f.databaseURL()
	addr := f.String("addr", "127.0.0.1:8080", "listen on `HOST:PORT` (port 0 picks a free port; :8080 listens on every interface)")
	sec := f.securityFlags()
	maxBody := f.Int64("max-body", rest.MaxBodyBytesDefault, "largest request body in `BYTES`; larger ones are refused with 413")
	migrate := f.Bool("migrate", false, "apply pending migrations before serving")
	noSchedules := f.Bool("no-schedules", false, "do not fire schedules (leave them to the processors)")
	ui := f.uiFlag()
	shutdown := f.duration("shutdown-timeout", 10*time.Second, "how long (`DURATION`) requests in flight may take to finish at shutdown")
	readTimeout := f.duration("read-timeout", httpguard.ReadTimeoutDefault, "longest `DURATION` to read a request, headers and body")
	writeTimeout := f.duration("write-timeout", httpguard.WriteTimeoutDefault, "longest `DURATION` from a request's headers to the end of its answer")
	idleTimeout := f.duration("idle-timeout", httpguard.IdleTimeoutDefault, "longest `DURATION` a keep-alive connection may wait for its next request")
	if err := f.noArgs(args); err != nil {
		return err
	}
	if err := f.checkAddr(*addr); err != nil {
		return err
	}
	if *maxBody < 1 {
		return f.usagef("--max-body: %d is below 1", *maxBody)
	}
	timeouts := httpguard.Timeouts{Read: *readTimeout, Write: *writeTimeout, Idle: *idleTimeout}
	for name, d := range map[string]time.Duration{"read-timeout": *readTimeout, "write-timeout": *writeTimeout, "idle-timeout": *idleTimeout} {
		if d == 0 {
			return f.usagef("--%s: 0 would never time out: give a duration", name)
		}
	}
	if err := timeouts.Validate(); err != nil {
		return f.usagef("%v", err)
	}
	if err := sec.check(); err != nil {
		return err
	}
	dbURL, err := f.requireURL(*url)
	if err != nil {
		return err
	}
	// Listening first: an address in use is said before the database is migrated.
	ln, guard, err := sec.listen(*addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	pool, err := f.openPool(ctx, dbURL, poolOptions{atLeast: serveConns, cancelInServer: true})
	if err != nil {
		return err
	}
	defer pool.Close()
	if *migrate {
		if err := repository.Migrate(ctx, pool); err != nil {
			return err
		}
	}
	// before serving: a server on an older schema answered /healthz, then failed every
	// request with a 500
	if err := pgpool.CheckSchema(ctx, pool, "pgtask serve"); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(e.stderr, nil))
	reg := prometheus.NewRegistry()
	var m *metrics.Metrics // the fired schedules' series
	if !*noSchedules {
		m = metrics.New(reg)
	}
	api, err := newAPI(pool, guard, *maxBody, logger, reg, m)
	if err != nil {
		return err
	}
	if api, err = withDashboard(*ui, pool, guard, sec.token, api, logger, *readTimeout); err != nil {
		return err
	}
	if !*noSchedules {
		schedulesCtx, stopSchedules := context.WithCancel(ctx)
		schedulesDone := make(chan struct{})
		go func() {
			defer close(schedulesDone)
			_ = processor.RunSchedules(schedulesCtx, processor.SchedulesConfig{Pool: pool, Logger: logger, OnFire: m.OnFire})
		}()
		defer func() {
			stopSchedules()
			<-schedulesDone
		}()
	}
	warnOpen(e.stderr, "pgtask serve", ln.Addr(), guard, true)
	warnWeakToken(e.stderr, "pgtask serve", sec.token)
	fmt.Fprintf(e.stdout, "pgtask serve: listening on http://%s (metrics at /metrics)\n", ln.Addr())
	if err := serveHTTP(ctx, ln, guard, api, timeouts, logger, *shutdown); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, "pgtask serve: stopped")
	return nil
}

// securityFlags are the flags of "serve" and "dev" that decide who may use the API.
type securityFlags struct {
	f          *flags
	tokenFlag  *string
	allowHosts *listValue
	token      string // set by check
}

func (f *flags) securityFlags() *securityFlags {
	s := &securityFlags{f: f, allowHosts: &listValue{}}
	s.tokenFlag = f.String("token", "", "bearer `TOKEN` every request must carry (default $PGTASK_TOKEN; neither set: no authentication; an empty one is refused)")
	f.Var(s.allowHosts, "allow-host", "without a token, also answer requests addressed to `HOST` (a name or IP; repeat or separate with commas)")
	return s
}

// check takes the token from --token or $PGTASK_TOKEN, refusing an empty one (which
// would serve without authentication) and one that no client could send; call it before
// anything starts. Neither set is no token.
func (s *securityFlags) check() error {
	token, source, err := s.f.setting("token", *s.tokenFlag, "PGTASK_TOKEN",
		"give a token, or leave --token and PGTASK_TOKEN unset to serve without authentication")
	if err != nil {
		return err
	}
	if err := httpguard.CheckToken(token); err != nil {
		return s.f.usagef("%s: %v", source, err)
	}
	// The guard checks the hosts as listen will build it, but before the command
	// connects or migrates: a bad --allow-host changes nothing.
	if _, err := httpguard.New(httpguard.Config{AllowHosts: s.allowHosts.values}); err != nil {
		return s.f.usagef("--allow-host: %v", err)
	}
	s.token = token
	return nil
}

// listen opens the API's listener on addr and the guard of a server listening there.
func (s *securityFlags) listen(addr string) (net.Listener, *httpguard.Guard, error) {
	ln, err := listen(addr)
	if err != nil {
		return nil, nil, err
	}
	g, err := httpguard.New(httpguard.Config{Token: s.token, Addr: ln.Addr(), AllowHosts: s.allowHosts.values})
	if err != nil {
		ln.Close()
		return nil, nil, s.f.usagef("%v", err)
	}
	return ln, g, nil
}

// listValue is a flag that may be repeated, each value a comma-separated list. An
// empty item (an empty value, "a,,b", a variable that came out empty) is refused, not
// skipped.
type listValue struct{ values []string }

func (l *listValue) String() string { return strings.Join(l.values, ",") }

func (*listValue) repeatable() {}

func (l *listValue) Set(v string) error {
	var items []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item == "" {
			return errors.New("an empty item: give one or more values separated by commas")
		}
		items = append(items, item)
	}
	l.values = append(l.values, items...)
	return nil
}

// weakToken is the length below which a token is warned of (warnWeakToken).
const weakToken = 16

// warnWeakToken warns on w of a token shorter than weakToken characters: nothing limits
// the guesses of a token (at the API or the dashboard's sign-in), and a dashboard
// session cookie, leaked, lets a weak one be guessed offline. Accepted all the same: a
// token on a loopback address of a development machine may be short on purpose.
func warnWeakToken(w io.Writer, name, token string) {
	if n := utf8.RuneCountInString(token); token != "" && n < weakToken {
		fmt.Fprintf(w, "%s: warning: the token is %d characters long: nothing limits the guesses of it; use %d or more random characters (openssl rand -hex 16)\n",
			name, n, weakToken)
	}
}

// warnOpen warns on w when the API answers without a token: loudly on an address other
// machines can reach, and on a loopback one too when loopback is set.
func warnOpen(w io.Writer, name string, addr net.Addr, guard *httpguard.Guard, loopback bool) {
	if guard.HasToken() {
		return
	}
	if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		if loopback {
			fmt.Fprintf(w, "%s: warning: no --token or PGTASK_TOKEN: every program on this machine may use the API\n", name)
		}
		return
	}
	fmt.Fprintf(w, "%s: WARNING: listening on %s without a token (--token or PGTASK_TOKEN): anyone who can reach "+
		"this address may push, read, cancel and revive tasks and pause topics\n", name, addr)
}

// newAPI builds the REST handler with /metrics served from reg, on which it registers
// the queue collector and the Go runtime's collectors. It uses its own repository (and
// so its own owner name). With m (the metrics of the schedules the process fires), the
// queue collector's reads drop the series of removed schedules.
func newAPI(pool *pgxpool.Pool, guard *httpguard.Guard, maxBody int64, logger *slog.Logger, reg *prometheus.Registry, m *metrics.Metrics) (http.Handler, error) {
	repo, err := repository.New(repository.Config{})
	if err != nil {
		return nil, err
	}
	queue := metrics.NewQueueCollector(pool, repo, queueCacheTTL)
	if m != nil {
		queue = m.NewQueueCollector(pool, repo, queueCacheTTL)
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		queue,
	)
	h, err := rest.New(rest.Config{
		Pool:         pool,
		Repository:   repo,
		Guard:        guard,
		MaxBodyBytes: maxBody,
		Logger:       logger,
		Metrics:      metrics.Handler(reg),
	})
	if err != nil {
		return nil, fmt.Errorf("rest api: %w", err)
	}
	return h, nil
}

// checkAddr refuses an empty --addr, which net.Listen takes as a random port on every
// interface: an API open to the network, where the user most likely meant the default
// or no server at all; and one net.Listen would refuse (a port out of range, no port),
// before the command connects to the database.
func (f *flags) checkAddr(addr string) error {
	if addr == "" {
		return f.usagef("--addr is empty: give HOST:PORT (127.0.0.1:0 picks a free port on this machine; :8080 listens on every interface)")
	}
	if err := httpguard.CheckAddr(addr); err != nil {
		return f.usagef("--addr: invalid address %q: %v", addr, err)
	}
	return nil
}

// listen opens a TCP listener, explaining the usual failure.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w (choose another --addr; port 0 picks a free one)", addr, err)
	}
	return ln, nil
}

// serveHTTP serves h on ln until ctx is done, then shuts down gracefully: it stops
// accepting connections and waits up to timeout for requests in flight. Every request
// passes guard.Protect and the timeouts first: a route reaches the network only through
// here, and is public unless it is wrapped in guard.Authenticate (see httpguard).
func serveHTTP(ctx context.Context, ln net.Listener, guard *httpguard.Guard, h http.Handler, timeouts httpguard.Timeouts,
	logger *slog.Logger, timeout time.Duration) error {
	srv := httpguard.NewServer(guard.Protect(h), timeouts, logger)
	srv.BaseContext = func(net.Listener) context.Context { return context.WithoutCancel(ctx) }
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve http: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && serr != nil {
		return fmt.Errorf("serve http: %w", serr)
	}
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("shut down http server: %w", err)
	}
	return nil
}

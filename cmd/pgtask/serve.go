package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/pgtask/pgtask/internal/metrics"
	"github.com/pgtask/pgtask/internal/rest"
	"github.com/pgtask/pgtask/repository"
)

const serveAbout = `
Serves the REST API (enqueue, status, cancel, list, stats; GET /openapi.json describes it)
and Prometheus metrics at /metrics, until SIGINT or SIGTERM, which stop it gracefully:
requests in flight get --shutdown-timeout to finish.

With a token (--token or $PGTASK_TOKEN) every request but GET /healthz and
GET /openapi.json must carry the header "Authorization: Bearer TOKEN"; without one the
API is open to anyone who can reach it.`

// queueCacheTTL is how long the queue collector serves one read of the database.
const queueCacheTTL = 5 * time.Second

func runServe(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask serve", "[--addr HOST:PORT] [flags]", serveAbout)
	url := f.databaseURL()
	addr := f.String("addr", "127.0.0.1:8080", "listen on `HOST:PORT` (port 0 picks a free port; :8080 listens on every interface)")
	token := f.String("token", "", "bearer `TOKEN` every request must carry (default $PGTASK_TOKEN; empty: no authentication)")
	maxBody := f.Int64("max-body", rest.MaxBodyBytesDefault, "largest request body in `BYTES`; larger ones are refused with 413")
	migrate := f.Bool("migrate", false, "apply pending migrations before serving")
	shutdown := f.duration("shutdown-timeout", 10*time.Second, "how long (`DURATION`) requests in flight may take to finish at shutdown")
	if err := f.noArgs(args); err != nil {
		return err
	}
	if *maxBody < 1 {
		return f.usagef("--max-body: %d is below 1", *maxBody)
	}
	if *token == "" {
		*token = e.getenv("PGTASK_TOKEN")
	}
	dbURL, err := f.requireURL(*url)
	if err != nil {
		return err
	}
	pool, err := f.openPool(ctx, dbURL, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	if *migrate {
		if err := repository.Migrate(ctx, pool); err != nil {
			return err
		}
	}
	logger := slog.New(slog.NewTextHandler(e.stderr, nil))
	api, err := newAPI(pool, *token, *maxBody, logger, prometheus.NewRegistry())
	if err != nil {
		return err
	}
	ln, err := listen(*addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "pgtask serve: listening on http://%s (metrics at /metrics)\n", ln.Addr())
	if *token == "" {
		fmt.Fprintln(e.stderr, "pgtask serve: warning: no --token or PGTASK_TOKEN: the API accepts every request")
	}
	if err := serveHTTP(ctx, ln, api, logger, *shutdown); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, "pgtask serve: stopped")
	return nil
}

// newAPI builds the REST handler with /metrics served from reg, on which it registers
// the queue collector and the Go runtime's collectors. It uses its own repository (and
// so its own owner name).
func newAPI(pool *pgxpool.Pool, token string, maxBody int64, logger *slog.Logger, reg *prometheus.Registry) (http.Handler, error) {
	repo, err := repository.New(repository.Config{})
	if err != nil {
		return nil, err
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		metrics.NewQueueCollector(pool, repo, queueCacheTTL),
	)
	h, err := rest.New(rest.Config{
		Pool:         pool,
		Repository:   repo,
		Token:        token,
		MaxBodyBytes: maxBody,
		Logger:       logger,
		Metrics:      metrics.Handler(reg),
	})
	if err != nil {
		return nil, fmt.Errorf("rest api: %w", err)
	}
	return h, nil
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
// accepting connections and waits up to timeout for requests in flight.
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, logger *slog.Logger, timeout time.Duration) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
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

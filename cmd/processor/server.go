package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgtask/pgtask/internal/httpguard"
	"github.com/pgtask/pgtask/metrics"
)

// healthTimeout bounds the database check of one /healthz request.
const healthTimeout = 2 * time.Second

// newMux serves /metrics from reg and /healthz: 200 while the processor runs, the
// database answers and the processor's own statements succeed (health, which is
// Processor.Health and names only operations and SQLSTATEs), 503 with the reason
// otherwise. How a ping failed (which names the database's address, user and database)
// goes to logger, never to the client.
func newMux(reg prometheus.Gatherer, pool *pgxpool.Pool, running *atomic.Bool, health func() error, logger *slog.Logger) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler(reg))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !running.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "processor not running")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
		defer cancel()
		if err := pool.Ping(ctx); err != nil {
			logger.Warn("healthz: database not answering", slog.Any("error", err))
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "database not answering")
			return
		}
		if err := health(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// serve serves h on ln (run listens before it connects to the database, so that a
// port in use fails at start having changed nothing) in the background within the
// timeouts (run gives httpguard's defaults: only short GETs are served); the returned
// function shuts the server down and closes ln.
func serve(ln net.Listener, h http.Handler, timeouts httpguard.Timeouts, logger *slog.Logger) (stop func()) {
	srv := httpguard.NewServer(h, timeouts, logger)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics server stopped", slog.Any("error", err))
		}
	}()
	logger.Info("serving /metrics and /healthz", slog.String("addr", ln.Addr().String()))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}
}

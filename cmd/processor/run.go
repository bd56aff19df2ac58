package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/pgtask/pgtask/internal/httpguard"
	"github.com/pgtask/pgtask/internal/pgpool"
	"github.com/pgtask/pgtask/metrics"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// run is the whole program: it parses args, processes the topic until ctx is done,
// then shuts down gracefully. It returns flag.ErrHelp after printing --help, and a
// *usageError for a bad command line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, os.LookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		usage(stdout)
		return err
	}
	if err != nil {
		return err
	}
	logger := newLogger(cfg, stderr)
	// A signal while the processor starts (connecting, migrating, reading its topic)
	// is a clean stop, whatever the step it cut short says.
	starting := func(err error) error {
		var usage *usageError
		if ctx.Err() != nil && !errors.As(err, &usage) {
			return nil
		}
		return err
	}

	// The server's port first: one in use fails here, before the database is touched
	// (no migration, no topic registered). Requests wait until the processor runs.
	var ln net.Listener
	if cfg.addr != "" {
		if ln, err = net.Listen("tcp", cfg.addr); err != nil {
			return fmt.Errorf("%s: %w", cfg.addrOrigin, err)
		}
		defer ln.Close() // when the processor does not get as far as serving
	}

	pool, err := connect(ctx, cfg.databaseURL)
	if err != nil {
		return starting(err)
	}
	defer pool.Close()
	if cfg.migrate {
		if err := repository.Migrate(ctx, pool); err != nil {
			return starting(err)
		}
		logger.Info("schema migrated")
	} else if err := pgpool.CheckSchema(ctx, pool, "processor"); err != nil {
		// the check pgtask's commands make: a processor upgraded before the database
		// was migrated ran on the older schema, a limited topic's polls unlimited
		return starting(err)
	}
	repo, err := repository.New(repository.Config{})
	if err != nil {
		return err
	}
	if !cfg.initialize {
		if _, err := repo.Topic(ctx, pool, cfg.topic); errors.Is(err, repository.ErrUnknownTopic) {
			return fmt.Errorf("topic %q is not registered (register it with --init or `pgtask topic add %s`)", cfg.topic, cfg.topic)
		} else if err != nil {
			return starting(fmt.Errorf("read topic %q: %w", cfg.topic, err))
		}
	}

	var handle processor.TaskFunc
	handlerHealth := func() error { return nil }
	if cfg.httpURL != "" {
		h := newHTTPHandler(cfg.httpURL, cfg.timeout, cfg.retryDelay, cfg.workers, logger)
		handle, handlerHealth = h.handle, h.health
	} else {
		h, err := newExecHandler(cfg.execArgs[0], cfg.execArgs[1:], cfg.timeout, cfg.retryDelay, logger)
		if err != nil {
			return err
		}
		handle, handlerHealth = h.handle, h.health
		if os.Getpid() == 1 {
			// orphans are given to PID 1, and Go reaps only the children it started
			logger.Warn("running as PID 1: the processes a program leaves behind are not reaped and stay zombies; run the processor under an init (docker run --init, tini)")
		}
	}
	workers, err := processor.Buffer(handle, processor.BufferConfig{MinWorkers: 1, MaxWorkers: cfg.workers})
	if err != nil {
		return err
	}

	var running atomic.Bool
	var runningMu sync.Mutex // orders OnStart with the shutdown's start (running false for good)
	p, err := processor.New(processor.Config{
		Pool:              pool,
		Repository:        repo,
		Logger:            logger,
		HeartbeatInterval: cfg.heartbeat,
		VacuumEvery:       cfg.vacuumEvery,
		DisableSchedules:  cfg.noSchedules,
	})
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The managers' and expiries' series, and its own topic's depth: the operator's view
	// of every topic is pgtask serve's.
	if _, err := metrics.Instrument(reg, p); err != nil {
		return err
	}
	_, err = p.Manage(processor.ManagerConfig{
		Topic:       cfg.topic,
		CreateTopic: cfg.initialize,
		Handler:     workers,
		// a task is leased when a worker is free to run it: tasks queued behind busy
		// workers (the Buffer's prefetch) would stay leased for as long as the running
		// tasks take while another processor of the topic had nothing to do
		Limiter:         processor.Bound(cfg.workers),
		Order:           cfg.order,
		Condition:       cfg.condition,
		BatchSize:       cfg.batchSize,
		PauseInterval:   cfg.pauseInterval,
		ShutdownTimeout: cfg.shutdownTimeout,
		Listener: processor.Listeners(processor.Listener{
			// no OnError: every error it reports is in the processor's own log already
			// (Config.Logger: database failures once per cause, handler misbehaviour,
			// refused commits), and a second line for each only repeated it
			// not once the shutdown began: a start that ends after the signal (its first
			// topic read in flight) would answer /healthz ok for the rest of the stop
			OnStart: func(string) {
				runningMu.Lock()
				defer runningMu.Unlock()
				running.Store(ctx.Err() == nil)
			},
			OnFatal: func(topic string, err error) {
				running.Store(false)
				logger.Error("processor stopped", slog.String("topic", topic), slog.Any("error", err))
			},
		}),
	})
	if err != nil {
		return err
	}

	if ln != nil {
		defer serve(ln, newMux(reg, pool, &running, func() error {
			if err := p.Health(); err != nil {
				return err
			}
			return handlerHealth()
		}, logger), httpguard.Timeouts{}, logger)()
	}

	logger.Info("processing", slog.String("topic", cfg.topic), slog.String("owner", repo.Owner()),
		slog.String("handler", cfg.handlerName()), slog.Int("workers", cfg.workers))
	stopped := context.AfterFunc(ctx, func() {
		runningMu.Lock()
		running.Store(false)
		runningMu.Unlock()
		logger.Info("shutting down: running tasks may finish", slog.Duration("shutdown_timeout", cfg.shutdownTimeout))
	})
	defer stopped()
	if err := p.Run(ctx); err != nil {
		return err
	}
	logger.Info("stopped")
	return nil
}

// exitCode reports err on stderr and returns the process's exit code: 0 for success
// and --help, 2 for a bad command line, 1 for anything else.
func exitCode(err error, stderr io.Writer) int {
	var usageErr *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &usageErr):
		for line := range strings.Lines(err.Error()) {
			fmt.Fprintf(stderr, "processor: %s\n", strings.TrimSuffix(line, "\n"))
		}
		fmt.Fprintln(stderr, "Run 'processor --help' for usage.")
		return 2
	default:
		fmt.Fprintf(stderr, "processor: %v\n", err)
		return 1
	}
}

// connect opens the pool and checks that the database answers, so a wrong URL is
// reported at once; it sets READ COMMITTED when the database's default isolation is
// another (pgpool.ReadCommitted).
func connect(ctx context.Context, url string) (*pgxpool.Pool, error) {
	return pgpool.ReadCommitted(ctx, func(readCommitted bool) (*pgxpool.Pool, error) {
		return connectWith(ctx, url, readCommitted)
	})
}

// connectWith is connect, readCommitted saying whether to set the isolation.
func connectWith(ctx context.Context, url string, readCommitted bool) (*pgxpool.Pool, error) {
	pcfg, err := pgpool.ParseConfig(url)
	if err != nil {
		return nil, &usageError{msg: fmt.Sprintf("--database-url: %v", err)}
	}
	if readCommitted {
		pcfg.ConnConfig.RuntimeParams[pgpool.IsolationParam] = "read committed"
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return pool, nil
}

func newLogger(cfg config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.logLevel}
	if cfg.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// handlerName describes the handler for the start-up log, e.g. "exec ./mail.sh".
func (c config) handlerName() string {
	if c.httpURL != "" {
		return "http " + shownURL(c.httpURL) // not the path or query (withoutURL)
	}
	return "exec " + c.execArgs[0]
}

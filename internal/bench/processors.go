package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// processors is a running set of processors, in-process or in child processes.
type processors interface {
	// stop shuts the processors down gracefully and waits for them.
	stop() error
}

type inProcess struct {
	cancel context.CancelFunc
	done   []chan error
	pools  []*pgxpool.Pool

	once sync.Once
	err  error
}

// startProcessors starts p.Managers processors in this process, processor i on topic i
// mod len(topics), and waits until each listens for notifications.
func startProcessors(ctx context.Context, p Processing, connect Connect, topics []string, s *stats, logger *slog.Logger, record bool, onDone func()) (*inProcess, error) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ip := &inProcess{cancel: cancel}
	for i := range p.Managers {
		topic := topics[i%len(topics)]
		pool, err := connect(ctx, "pgtask bench processor", 4)
		if err != nil {
			_ = ip.stop()
			return nil, err
		}
		ip.pools = append(ip.pools, pool)
		h, err := p.handler(s, record)
		if err != nil {
			_ = ip.stop()
			return nil, err
		}
		repo, err := repository.New(repository.Config{Owner: fmt.Sprintf("%s-%d-%d", topic, os.Getpid(), i)})
		if err != nil {
			_ = ip.stop()
			return nil, err
		}
		vacuumEvery := p.VacuumEvery
		if vacuumEvery == 0 {
			vacuumEvery = -1 // processor.Config: negative is off, 0 the default
		}
		// Neither the database's schedules nor its topics' retention: a bench run fires
		// and purges nothing of the others' (and their work is no part of the figure).
		proc, err := processor.New(processor.Config{Pool: pool, Repository: repo, Logger: logger, VacuumEvery: vacuumEvery,
			DisableSchedules: true, RetentionInterval: -1})
		if err != nil {
			_ = ip.stop()
			return nil, err
		}
		if _, err := proc.Manage(processor.ManagerConfig{
			Topic: topic, Handler: h, Order: p.Order, Condition: p.Condition,
			BatchSize: p.BatchSize, FlushSize: p.FlushSize, FlushInterval: p.FlushInterval,
			ShutdownTimeout: 10 * time.Second, Listener: s.listener(record, onDone),
		}); err != nil {
			_ = ip.stop()
			return nil, err
		}
		connected := proc.Notifier().Connected()
		done := make(chan error, 1)
		ip.done = append(ip.done, done)
		go func() { done <- proc.Run(runCtx) }()
		select {
		case <-connected:
		case err := <-done:
			done <- err
			_ = ip.stop()
			return nil, fmt.Errorf("processor stopped at start: %w", err)
		case <-time.After(30 * time.Second):
			_ = ip.stop()
			return nil, errors.New("processor did not start listening within 30s")
		case <-ctx.Done():
			_ = ip.stop()
			return nil, ctx.Err()
		}
	}
	return ip, nil
}

func (ip *inProcess) stop() error {
	ip.once.Do(func() {
		ip.cancel()
		var errs []error
		for _, done := range ip.done {
			errs = append(errs, <-done)
		}
		for _, p := range ip.pools {
			p.Close()
		}
		ip.err = errors.Join(errs...)
	})
	return ip.err
}

// handler builds the no-op (or HandlerDelay) handler of one manager; record says
// whether handler-start latencies are kept.
func (p Processing) handler(s *stats, record bool) (processor.Handler, error) {
	delay := p.HandlerDelay
	fn := processor.TaskFunc(func(ctx context.Context, t repository.Task) repository.Decision {
		if record {
			if at := pushStamp(t.Input); at != 0 {
				d := time.Now().UnixNano() - at
				s.mu.Lock()
				s.starts.add(d)
				s.mu.Unlock()
			}
		}
		if delay > 0 {
			timer := time.NewTimer(delay)
			select {
			case <-ctx.Done():
			case <-timer.C:
			}
			timer.Stop()
		}
		return repository.Decision{Result: repository.Success}
	})
	if p.Workers <= 1 && p.Queue == 0 {
		return fn, nil
	}
	queue := p.Queue
	if queue == 0 {
		queue = p.Workers
	}
	return processor.Buffer(fn, processor.BufferConfig{Queue: queue, MinWorkers: p.Workers})
}

// warnLogger is the processors' logger: warnings and errors, as text on w.
func warnLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

package processor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgtask/pgtask/repository"
)

// faults keeps a processor's failing database operations: it logs each distinct error
// (an operation and its cause: the SQLSTATE, or the kind of connection failure) when it
// first happens and again once per interval while it lasts, with how long it has lasted
// and how often it happened, and once more when the operation succeeds again. An
// operation whose last attempt failed, within the last `fresh`, makes the processor
// unhealthy (Processor.Health); one that has not been tried since (a VACUUM that comes
// round every few hundred thousand tasks) no longer counts.
//
// The operations retry on their own schedules (polls and commits with backoff, the
// heartbeat and maintenance on their tick): faults only decides what is said about them.
type faults struct {
	logger   *slog.Logger
	interval time.Duration
	fresh    time.Duration
	now      func() time.Time

	mu      sync.Mutex
	failing map[string]*fault // by operation
}

// fault is one operation's current run of failures.
type fault struct {
	cause    string // SQLSTATE, or a kind of failure
	err      error  // the latest
	since    time.Time
	last     time.Time // of the latest failure
	logged   time.Time
	failures int64 // since the operation last succeeded
}

func newFaults(logger *slog.Logger, interval, fresh time.Duration) *faults {
	return &faults{logger: logger, interval: interval, fresh: fresh, now: time.Now, failing: map[string]*fault{}}
}

// fail records that op failed with err. It logs at ERROR when the failure is new, its
// cause changed, or interval has passed since it was last logged. A failure caused by
// ctx ending (shutdown) is not recorded.
func (f *faults) fail(ctx context.Context, op string, err error) {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) || errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return
	}
	cause := causeOf(err)
	now := f.now()
	f.mu.Lock()
	ft, ok := f.failing[op]
	if !ok {
		ft = &fault{since: now}
		f.failing[op] = ft
	}
	ft.failures++
	ft.err, ft.last = err, now
	log := !ok || ft.cause != cause || now.Sub(ft.logged) >= f.interval
	if log {
		ft.cause, ft.logged = cause, now
	}
	failures, since := ft.failures, now.Sub(ft.since)
	f.mu.Unlock()
	if log {
		f.logger.Error("database operation failing", slog.String("operation", op), slog.String("cause", cause),
			slog.Duration("failing_for", since.Round(time.Millisecond)), slog.Int64("failures", failures),
			slog.Any("error", err))
	}
}

// ok records that op succeeded; if it was failing, that is logged at INFO.
func (f *faults) ok(op string) {
	f.mu.Lock()
	ft, was := f.failing[op]
	delete(f.failing, op)
	now := f.now()
	f.mu.Unlock()
	if was {
		f.logger.Info("database operation recovered", slog.String("operation", op), slog.String("cause", ft.cause),
			slog.Duration("failed_for", now.Sub(ft.since).Round(time.Millisecond)), slog.Int64("failures", ft.failures))
	}
}

// health returns nil when no operation is failing, otherwise an error naming each
// failing operation, its cause and how long it has failed. An operation whose latest
// failure is older than f.fresh is not failing any more as far as health goes.
func (f *faults) health() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	var parts []string
	for op, ft := range f.failing {
		if now.Sub(ft.last) > f.fresh {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: %s for %v (%d failures)", op, ft.cause, now.Sub(ft.since).Round(time.Second), ft.failures))
	}
	if len(parts) == 0 {
		return nil
	}
	slices.Sort(parts)
	return fmt.Errorf("%w: %s", ErrUnhealthy, strings.Join(parts, "; "))
}

// ErrUnhealthy is what Processor.Health wraps while database operations fail.
var ErrUnhealthy = errors.New("database operations failing")

// ErrWillRetry marks the errors a Listener's OnError receives for database operations
// that failed and are retried (a poll, a commit of decisions, a manager's start): the
// processor's Logger already reports them once per cause (Config.ErrorLogInterval), so a
// listener that logs errors can skip these.
var ErrWillRetry = errors.New("will retry")

// causeOf names what an error is, as one cause: the SQLSTATE of a PostgreSQL error, or
// the kind of a connection failure. It never includes the connection's details.
func causeOf(err error) string {
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case repository.SQLState(err) != "":
		return "SQLSTATE " + repository.SQLState(err)
	case errors.As(err, &connectErr):
		return "cannot connect"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &netErr):
		return "connection lost"
	}
	return "error"
}

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

// faults keeps a processor's failing database operations. The log speaks of causes (the
// SQLSTATE, or the kind of connection failure: causeOf), not of operations, since an
// outage fails every operation at once with the same cause: a cause is logged at ERROR
// (WARN for the contention a retry resolves: levelOf) when an operation first fails with it, again once per interval while operations keep
// failing with it, each time with the operations failing with it, how long and how often
// it has happened, and once at INFO when the last of them succeeds again (or fails with
// another cause). Health is per operation: one whose last attempt failed, within the last
// `fresh`, makes the processor unhealthy (Processor.Health); one that has not been tried
// since (a VACUUM that comes round every few hundred thousand tasks) no longer counts.
//
// The operations retry on their own schedules (polls and commits with backoff, the
// heartbeat and maintenance on their tick): faults only decides what is said about them.
type faults struct {
	logger   *slog.Logger
	interval time.Duration
	fresh    time.Duration
	now      func() time.Time

	// outage, when set, is called (outside mu) with the cause at every failure whose
	// cause may mean the server crashed, restarted or failed over (outageCause); begins
	// says the operation was not failing with such a cause before.
	outage func(cause string, begins bool)

	mu      sync.Mutex
	failing map[string]*fault // by operation: health
	causes  map[string]*cause // by cause: the log
}

// fault is one operation's current run of failures.
type fault struct {
	cause    string
	since    time.Time
	last     time.Time // of the latest failure
	failures int64     // since the operation last succeeded
}

// cause is one cause's current run of failures, across operations.
type cause struct {
	ops      map[string]bool // every operation that failed with it: true while it still does
	since    time.Time
	logged   time.Time
	failures int64
}

func newFaults(logger *slog.Logger, interval, fresh time.Duration) *faults {
	return &faults{logger: logger, interval: interval, fresh: fresh, now: time.Now,
		failing: map[string]*fault{}, causes: map[string]*cause{}}
}

// fail records that op failed with err. It logs the cause at ERROR when no operation was
// failing with it, or interval has passed since it was last logged. A failure caused by
// ctx ending (shutdown) is not recorded.
func (f *faults) fail(ctx context.Context, op string, err error) {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) || errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return
	}
	name, now := causeOf(err), f.now()
	var recovered, failing []slog.Attr // the lines to log, if any
	f.mu.Lock()
	ft := f.failing[op]
	begins := ft == nil || !outageCause(ft.cause)
	if ft == nil {
		ft = &fault{since: now}
		f.failing[op] = ft
	} else if ft.cause != name {
		recovered = f.leave(op, ft.cause, now)
	}
	ft.cause, ft.last = name, now
	ft.failures++
	c, seen := f.causes[name]
	if !seen {
		c = &cause{ops: map[string]bool{}, since: now}
		f.causes[name] = c
	}
	c.ops[op] = true
	c.failures++
	if !seen || now.Sub(c.logged) >= f.interval {
		c.logged = now
		failing = []slog.Attr{slog.String("cause", name), slog.String("operations", operations(c.ops, true)),
			slog.Duration("failing_for", now.Sub(c.since).Round(time.Millisecond)), slog.Int64("failures", c.failures),
			slog.Any("error", err)}
	}
	f.mu.Unlock()
	if f.outage != nil && outageCause(name) {
		f.outage(name, begins)
	}
	if recovered != nil {
		f.logger.LogAttrs(ctx, slog.LevelInfo, "database operations recovered", recovered...)
	}
	if failing != nil {
		f.logger.LogAttrs(ctx, levelOf(name), "database operations failing", failing...)
	}
}

// ok records that op succeeded. If it was the last operation failing with its cause,
// that cause's recovery is logged at INFO.
func (f *faults) ok(op string) {
	f.mu.Lock()
	var recovered []slog.Attr
	if ft := f.failing[op]; ft != nil {
		delete(f.failing, op)
		recovered = f.leave(op, ft.cause, f.now())
	}
	f.mu.Unlock()
	if recovered != nil {
		f.logger.LogAttrs(context.Background(), slog.LevelInfo, "database operations recovered", recovered...)
	}
}

// leave takes op out of the operations failing with cause name. When no operation fails
// with it any more, the cause's run ends and leave returns its recovery line's attributes.
// f.mu is held.
func (f *faults) leave(op, name string, now time.Time) []slog.Attr {
	c := f.causes[name]
	c.ops[op] = false
	for _, failing := range c.ops {
		if failing {
			return nil
		}
	}
	delete(f.causes, name)
	return []slog.Attr{slog.String("cause", name), slog.String("operations", operations(c.ops, false)),
		slog.Duration("failed_for", now.Sub(c.since).Round(time.Millisecond)), slog.Int64("failures", c.failures)}
}

// operations lists ops' operations, sorted, or only those still failing.
func operations(ops map[string]bool, onlyFailing bool) string {
	var names []string
	for op, failing := range ops {
		if failing || !onlyFailing {
			names = append(names, op)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
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

// levelOf is the level a cause is logged at: WARN for the contention between
// transactions that the retry resolves (serialization failures and deadlocks, SQLSTATE
// class 40; a lock not had within lock_timeout, 55P03), ERROR for every other cause (the
// server refusing, restarting or out of resources, the connection lost or refused).
func levelOf(cause string) slog.Level {
	if strings.HasPrefix(cause, "SQLSTATE 40") || cause == "SQLSTATE 55P03" {
		return slog.LevelWarn
	}
	return slog.LevelError
}

// outageCause reports whether a cause (causeOf) may come of the server crashing,
// restarting or failing over: the connection lost or refused, a connection exception
// (SQLSTATE class 08: on Citus, the coordinator's connection to a worker), the server
// shutting down or starting (57P01, 57P02, 57P03), or a statement timed out (a server
// gone silent: a failover that moved an address without closing the connections). Such
// a server may have lost commits it had acknowledged (synchronous_commit off; an
// asynchronous standby promoted). Not a read-only transaction (25006): that server is a
// standby, and what it shows of the leases may lag behind the primary's.
func outageCause(cause string) bool {
	switch cause {
	case "cannot connect", "connection lost", "timeout", "SQLSTATE 57P01", "SQLSTATE 57P02", "SQLSTATE 57P03":
		return true
	}
	return strings.HasPrefix(cause, "SQLSTATE 08")
}

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

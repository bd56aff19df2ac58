package repository

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Sentinel errors. Every error the repository returns wraps one of them (or a database
// error) and is tested with errors.Is.
var (
	// ErrInvalid means an argument was rejected before anything was written.
	ErrInvalid = errors.New("invalid argument")
	// ErrUnknownTopic means the topic is not registered.
	ErrUnknownTopic = errors.New("unknown topic")
	// ErrUnknownTask means no task has the given topic and sequence.
	ErrUnknownTask = errors.New("unknown task")
	// ErrNotOwned means a task is not ACTIVE under this owner in the given attempt.
	ErrNotOwned = errors.New("task not leased by this owner in this attempt")
	// ErrWrongState means a task is not in a state the operation accepts.
	ErrWrongState = errors.New("task in wrong state")
	// ErrQueueFull means an operation that makes tasks READY (a push, a reset, a
	// recreate, a junction) would take the topic above its queue-length cap
	// (QueueFullError).
	ErrQueueFull = errors.New("queue length cap reached")
	// ErrNotRegistered means the owner has no row: call RegisterOwner first.
	ErrNotRegistered = errors.New("owner not registered")
	// ErrSchemaMissing means the database lacks pgtask's tables or functions: apply the
	// migrations first (Migrate).
	ErrSchemaMissing = errors.New("pgtask schema missing")
	// ErrTopicInUse means an operation that needs a quiet topic (Dedicate) found it
	// running: not paused, or with ACTIVE tasks.
	ErrTopicInUse = errors.New("topic in use")
	// ErrLockTimeout means an operation that briefly locks other topics' tables (Dedicate,
	// Destroy or PurgeAll of a dedicated topic) gave up waiting for them after
	// lock_timeout, rather than hold their work up; nothing was changed. Try again.
	ErrLockTimeout = errors.New("lock not available within lock_timeout")
	// ErrNotTableOwner means the database user may not VACUUM the table that holds a
	// topic's tasks: only its owner (the role that ran the migrations, for a shared table,
	// or dedicated the topic) or a member of that role may.
	ErrNotTableOwner = errors.New("not the owner of the topic's table")
	// ErrMigrationRefused means PostgreSQL refused a migration: nothing of it was
	// applied and the schema stays at the version before it.
	ErrMigrationRefused = errors.New("migration refused")
	// ErrMigrationInProgress means another process is migrating the database.
	ErrMigrationInProgress = errors.New("another process is migrating the schema")
	// ErrVersionUnreadable means the database user may not read the table that records
	// the schema's version (MigrationVersion): a role granted pgtask's tables but not
	// that one.
	ErrVersionUnreadable = errors.New("schema version not readable by this role")
	// ErrUnknownSchedule means no schedule has the given name.
	ErrUnknownSchedule = errors.New("unknown schedule")
	// ErrScheduleExists means a schedule of that name exists already.
	ErrScheduleExists = errors.New("schedule exists")
	// ErrScheduleWait means FireSchedules left due schedules unfired for want of time,
	// not for a fault of their fire: another session held one longer than the call waits
	// for each (half a second), or its context's deadline passed while it searched or
	// waited (not before the call: context.DeadlineExceeded alone; nor a cancellation:
	// context.Canceled). The schedules left are fired by the next call.
	ErrScheduleWait = errors.New("time ran out waiting for due schedules")
)

// TaskProblem says why one task of a batch was refused.
type TaskProblem struct {
	// Sequence is the refused task's.
	Sequence int64
	// Err is ErrUnknownTask, ErrNotOwned or ErrWrongState.
	Err error
	// Detail says more, such as the state the task is in.
	Detail string
	// State is the task's state when the refusal was explained; zero (ACTIVE) for
	// ErrUnknownTask.
	State State
	// Attempt is the task's attempt when the refusal was explained; zero for
	// ErrUnknownTask.
	Attempt int32
}

// TaskError is returned when a batch operation refused some of its tasks; nothing of the
// batch was written. errors.Is matches the sentinel of any problem.
type TaskError struct {
	// Op names the operation, such as "complete".
	Op string
	// Topic is the topic of the batch.
	Topic string
	// Problems lists each refused task, in the batch's order.
	Problems []TaskProblem
}

// Error lists the refused tasks (the first ten) and why.
func (e *TaskError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s topic %q: nothing written:", e.Op, e.Topic)
	for i, p := range e.Problems {
		if i == 10 {
			fmt.Fprintf(&b, " and %d more", len(e.Problems)-i)
			break
		}
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " task %d: %v", p.Sequence, p.Err)
		if p.Detail != "" {
			fmt.Fprintf(&b, " (%s)", p.Detail)
		}
	}
	return b.String()
}

// Unwrap returns the distinct sentinels of the problems.
func (e *TaskError) Unwrap() []error {
	var errs []error
	for _, p := range e.Problems {
		dup := false
		for _, seen := range errs {
			if seen == p.Err {
				dup = true
			}
		}
		if !dup {
			errs = append(errs, p.Err)
		}
	}
	return errs
}

// Sequences lists the refused tasks.
func (e *TaskError) Sequences() []int64 {
	seqs := make([]int64, len(e.Problems))
	for i, p := range e.Problems {
		seqs[i] = p.Sequence
	}
	return seqs
}

// QueueFullError is returned when an operation that makes tasks READY would take the
// topic above its queue cap (TopicSettings.QueueCap): a push, a reset, a recreate or a
// junction. The operation was refused whole: nothing was written. It matches
// ErrQueueFull.
type QueueFullError struct {
	// Op names the refused operation: "push", "reset", "recreate" or "junction".
	Op string
	// Topic is the topic of the operation.
	Topic string
	// Cap is the topic's queue cap (TopicSettings.QueueCap).
	Cap int64
	// Pushed is how many tasks the refused operation would have made READY: the live
	// tasks a push or a recreate inserts (before the READY ones it replaces are taken
	// off: the cap counts them net), the tasks a reset or a junction would have turned
	// READY.
	Pushed int
}

// Error names the operation, the topic, how many tasks it would have made READY, and
// the cap.
func (e *QueueFullError) Error() string {
	op, on := e.Op, "in"
	if op == "" || op == "push" {
		op, on = "push", "to"
	}
	return fmt.Sprintf("%s %s topic %q: %v: %d tasks made READY would take it above its cap of %d READY or ACTIVE tasks; nothing written",
		op, on, e.Topic, ErrQueueFull, e.Pushed, e.Cap)
}

// Unwrap returns ErrQueueFull.
func (e *QueueFullError) Unwrap() error { return ErrQueueFull }

// SQLState returns the SQLSTATE of the PostgreSQL error that err wraps, or "" when it
// wraps none (a failure to connect, a lost connection, a timeout).
func SQLState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// ClientText describes err, an operation's failure, to a client of a server built on the
// repository (an HTTP answer, a failed metrics scrape): what failed and, for an error of
// PostgreSQL's, its message and SQLSTATE, but never what a failure to connect or a
// broken connection says (the server's address, the database and user names). Log err
// itself for the whole story.
func ClientText(err error) string {
	var (
		pgErr      *pgconn.PgError
		connectErr *pgconn.ConnectError
	)
	switch {
	case errors.As(err, &connectErr):
		text := "the database is unavailable: could not connect"
		if code := SQLState(err); code != "" {
			text += " (SQLSTATE " + code + ")"
		}
		return text
	case errors.As(err, &pgErr):
		// The repository's context (which operation, which topic) and PostgreSQL's
		// message, as err.Error() has them: "page topic "t": ERROR: … (SQLSTATE 42P01)".
		return err.Error()
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "the request was cancelled or timed out before the database answered"
	}
	return ClientTextUnknown
}

// ClientTextUnknown is what ClientText says of a failure it cannot tell more of without
// naming the database (a broken connection, a network error).
const ClientTextUnknown = "internal error: the database did not answer"

// invalid builds an ErrInvalid error naming what is wrong.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// SQLSTATE codes the repository maps to its sentinels.
const (
	sqlstateCheckViolation     = "23514"
	sqlstateStringTooLong      = "22001"
	sqlstateInvalidParameter   = "22023"
	sqlstateNumericOutOfRange  = "22003"
	sqlstateNotNullViolation   = "23502"
	sqlstateInvalidTextEncode  = "22021"
	sqlstateUntranslatable     = "22P05" // a character the database's encoding cannot hold
	sqlstateUndefinedTable     = "42P01"
	sqlstateUndefinedFunction  = "42883"
	sqlstateObjectInUse        = "55006"
	sqlstateLockNotAvailable   = "55P03"
	sqlstateRaiseUnknownTopic  = "PT001"
	sqlstateRaiseBadInsertion  = "PT002"
	sqlstateRaiseBadIdentifier = "PT003"
	sqlstateRaiseQueueFull     = "PT004"
	sqlstateRaiseRefused       = "PT005"
	sqlstateRaiseDuplicate     = "PT016" // numbered after its migration, 000016
	sqlstateFKViolation        = "23503"
	sqlstateNoPrivilege        = "42501"
)

// mapError is the one place that turns PostgreSQL errors (by SQLSTATE, never by message
// text) into the repository's sentinels, wrapping op for context. Other errors are only
// wrapped.
func mapError(op string, err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case sqlstateCheckViolation, sqlstateStringTooLong, sqlstateInvalidParameter,
			sqlstateNumericOutOfRange, sqlstateNotNullViolation, sqlstateInvalidTextEncode, sqlstateUntranslatable,
			sqlstateRaiseBadInsertion, sqlstateRaiseBadIdentifier:
			return fmt.Errorf("%s: %w: %w", op, ErrInvalid, err)
		case sqlstateRaiseUnknownTopic:
			return fmt.Errorf("%s: %w: %w", op, ErrUnknownTopic, err)
		case sqlstateRaiseDuplicate:
			return fmt.Errorf("%s: %w: %w", op, ErrScheduleExists, err)
		case sqlstateRaiseQueueFull:
			return fmt.Errorf("%s: %w: %w", op, ErrQueueFull, err)
		case sqlstateObjectInUse:
			return fmt.Errorf("%s: %w: %w", op, ErrTopicInUse, err)
		case sqlstateLockNotAvailable:
			return fmt.Errorf("%s: %w: %w", op, ErrLockTimeout, err)
		case sqlstateUndefinedTable, sqlstateUndefinedFunction:
			return fmt.Errorf("%s: %w: apply the migrations with repository.Migrate (or `pgtask migrate up`): %w", op, ErrSchemaMissing, err)
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Uncertain reports whether err leaves the outcome of the statement that returned it
// unknown: the connection failed (or the context ended) after the statement was sent and
// before its reply arrived, so the server may have executed and committed it, or not.
// A poll whose reply was lost may have leased tasks the caller never received; a
// completion may have been recorded. Errors of the server (an SQLSTATE; a COMMIT
// answered ROLLBACK, pgx.ErrTxCommitRollback), refusals of the repository, and failures
// before anything was sent (pgconn.SafeToRetry: a connection
// that could not be made, say) are certain: nothing was written; except a connection
// exception the server reports (SQLSTATE class 08): on Citus, the coordinator's word
// that its connection to the worker running the statement failed, maybe after the
// worker committed it.
func Uncertain(err error) bool {
	if errors.Is(err, errCommitUnknown) {
		return true
	}
	state := SQLState(err)
	if strings.HasPrefix(state, "08") {
		return true
	}
	if err == nil || state != "" || pgconn.SafeToRetry(err) || errors.Is(err, pgx.ErrTxCommitRollback) {
		return false
	}
	var te *TaskError
	if errors.As(err, &te) {
		return false
	}
	for _, sentinel := range []error{ErrInvalid, ErrUnknownTopic, ErrUnknownTask, ErrNotOwned, ErrWrongState,
		ErrQueueFull, ErrNotRegistered, ErrTopicInUse, ErrLockTimeout, ErrNotTableOwner, ErrUnknownSchedule,
		ErrScheduleExists} {
		if errors.Is(err, sentinel) {
			return false
		}
	}
	var connectErr *pgconn.ConnectError
	return !errors.As(err, &connectErr)
}

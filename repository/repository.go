package repository

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgtask/pgtask/db"
)

// Handle is the caller's database handle: a *pgxpool.Pool, a *pgx.Conn or an open
// pgx.Tx. The repository runs its statements on it and never commits for the caller.
// Operations that need several statements to be atomic open a nested transaction
// (a savepoint inside a pgx.Tx) with Begin. On a connection where you opened a
// transaction block in SQL (BEGIN) they open a savepoint with a statement instead
// (SAVEPOINT, then RELEASE, or ROLLBACK TO), and so on a type of your own around a
// connection (a wrapper that traces, say), the statements going through your type, when
// it tells its connection by a method PgConn() *pgconn.PgConn (embedding the *pgx.Conn
// gives it) or Conn() *pgx.Conn: its own Begin would send BEGIN, and its COMMIT would end
// your block. A type around a pool, or one that tells nothing, begins with its Begin.
type Handle interface {
	// Exec runs a statement that returns no rows.
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	// Query runs a statement that returns rows.
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	// QueryRow runs a statement that returns at most one row.
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	// Begin starts a transaction, or a savepoint inside one.
	Begin(ctx context.Context) (pgx.Tx, error)
}

// customPlans runs its statements as unnamed ones, described and then executed
// (pgx.QueryExecModeDescribeExec: two round trips), so that PostgreSQL plans each
// execution for its arguments and never settles on a generic plan: for the statements
// whose right index depends on their arguments.
type customPlans struct{ h Handle }

func (c customPlans) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return c.h.Exec(ctx, sql, append([]any{pgx.QueryExecModeDescribeExec}, args...)...)
}

func (c customPlans) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return c.h.Query(ctx, sql, append([]any{pgx.QueryExecModeDescribeExec}, args...)...)
}

func (c customPlans) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return c.h.QueryRow(ctx, sql, append([]any{pgx.QueryExecModeDescribeExec}, args...)...)
}

// Config configures a Repository.
type Config struct {
	// Owner names this instance in task_owner and on the tasks it leases (1..250
	// characters). Empty picks a random UUID. A name must not be shared by two live
	// processes: a processor started under a name whose row heart-beats fails with
	// processor.ErrOwnerInUse, and one started under the name of one that died takes
	// back the leases the dead one still held once its row has been silent for the
	// expiry timeout, as expiry would (docs/processor.md).
	Owner string
	// Host is recorded with the owner to help operators; empty picks the machine's host
	// name.
	Host string
	// PID is recorded with the owner to help operators; zero picks this process's id.
	PID int
	// Now, when set, replaces the database clock for heartbeats, liveness and expiry, so
	// tests can make time pass without sleeping. Nil uses the database's now().
	Now func() time.Time
}

// Limits on text lengths (in characters), as enforced by the schema.
const (
	MaxTopicLength      = 250
	MaxIdentifierLength = 500
	MaxReferenceLength  = 500
	MaxOwnerLength      = 250
	// MaxCancellerLength bounds the name a cancellation records ("cancelled by …").
	MaxCancellerLength = 250
)

// Sequence bounds: 0 means "before everything", MaxSequence "after everything".
const (
	MinSequence int64 = 0
	MaxSequence int64 = 1<<63 - 1
)

// Repository runs every queue operation (push, poll, complete, revive, junction, reads
// and purges; the README's "The repository" section tours them) on a caller's handle.
// It is safe for concurrent use.
type Repository struct {
	owner string
	host  string
	pid   int
	now   func() time.Time
	q     *db.Queries
	// citus caches whether the database is distributed (onCitus): citusUnknown until
	// the first statement that differs there.
	citus atomic.Int32
	// expiryMs is the expiry timeout this owner declares (SetExpiryTimeout), 0 none.
	expiryMs atomic.Int64
	// reassignBatch is how many tasks a statement of ReassignAll changes:
	// ReassignBatchSize but in tests.
	reassignBatch int64
	// expireHook, when set (by tests only), runs in expireCitus before each topic's
	// expiry, after the owners to take back were read.
	expireHook func()
	// junctionHook, when set (by tests only), runs in Junction after the release, before
	// its notification on Citus; an error it returns is Junction's.
	junctionHook func() error
	// graceNs is FireSchedules' grace (SetScheduleGrace), 0 ScheduleGraceDefault.
	graceNs atomic.Int64
	// retries are the schedules and topics FireSchedules passes over for now.
	retries fireRetries
	// limited holds the topics last seen limited (noteLimited), whose polls choose
	// their tasks before the statement that leases them (pollPlain).
	limited sync.Map
	// noTaskPollUntil is until when (Unix nanoseconds) polls go without task_poll, which
	// a poll found the schema without (pollPlain); 0 never.
	noTaskPollUntil atomic.Int64
}

// New validates cfg and returns a Repository.
func New(cfg Config) (*Repository, error) {
	if cfg.Owner == "" {
		cfg.Owner = uuid.NewString()
	}
	if n := utf8.RuneCountInString(cfg.Owner); n > MaxOwnerLength {
		return nil, invalid("owner is %d characters long, at most %d allowed", n, MaxOwnerLength)
	}
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	if cfg.PID == 0 {
		cfg.PID = os.Getpid()
	}
	return &Repository{owner: cfg.Owner, host: cfg.Host, pid: cfg.PID, now: cfg.Now, q: db.New(), reassignBatch: ReassignBatchSize}, nil
}

// Owner returns this instance's owner name.
func (r *Repository) Owner() string { return r.owner }

// timeNow is the repository's time: the injected clock's (Config.Now), or the time.
func (r *Repository) timeNow() time.Time {
	if r.now == nil {
		return time.Now()
	}
	return r.now()
}

// clock returns the injected time, or nil to use the database clock.
func (r *Repository) clock() *time.Time {
	if r.now == nil {
		return nil
	}
	t := r.now()
	return &t
}

// ValidateTopic returns nil when topic is a name the repository accepts: 1 to
// MaxTopicLength characters of valid UTF-8 without a NUL byte. Otherwise its error wraps ErrInvalid and says
// what is wrong without repeating the name. Front ends (the REST API, the CLI) check their
// input with it and the other Validate functions before they call the repository, so
// that every route refuses the same values with the same message. A new topic is
// checked by ValidateNewTopic.
func ValidateTopic(topic string) error { return validTopic(topic) }

// ValidateNewTopic returns nil when CreateTopic accepts topic: a name ValidateTopic
// accepts, neither "." nor ".." (which no URL could name: the REST API and the dashboard
// could not address such a topic), without control characters (U+0001–U+001F,
// U+007F–U+009F: a tab, a newline or a terminal's escape in a name would reach logs,
// metrics' labels and terminals as they are). Otherwise its error wraps ErrInvalid. A
// topic of such a name created before migration 000042 stays usable.
func ValidateNewTopic(topic string) error {
	if err := validTopic(topic); err != nil {
		return err
	}
	if topic == "." || topic == ".." {
		// a URL's path segment "." or ".." is resolved away by clients and servers
		return invalid("topic %q is a path segment of its own: choose another name", topic)
	}
	if r, i, ok := controlChar(topic); ok {
		return invalid("topic has a control character (%U) at byte %d: choose a name without", r, i)
	}
	return nil
}

// controlChar returns the first control character of name (U+0001–U+001F, U+007F–U+009F,
// which would reach logs, metrics' labels and terminals as they are) and its byte
// offset; ok is false when it has none. Names of topics and schedules are refused with
// one.
func controlChar(name string) (r rune, at int, ok bool) {
	for i, r := range name {
		if r < 0x20 || r >= 0x7f && r <= 0x9f {
			return r, i, true
		}
	}
	return 0, 0, false
}

// ValidateIdentifier returns nil when identifier is one a task may have: 1 to
// MaxIdentifierLength characters of valid UTF-8 without a NUL byte; otherwise an error wrapping ErrInvalid.
func ValidateIdentifier(identifier string) error { return validIdentifier(identifier) }

// ValidateCanceller returns nil when by may name who cancelled tasks (Cancel): at most
// MaxCancellerLength characters of valid UTF-8 without a NUL byte; otherwise an error wrapping ErrInvalid.
func ValidateCanceller(by string) error {
	if n := utf8.RuneCountInString(by); n > MaxCancellerLength {
		return invalid("canceller is %d characters long, at most %d allowed", n, MaxCancellerLength)
	}
	if p := unstorable(by); p != "" {
		return invalid("canceller %s", p)
	}
	return nil
}

// ValidateFilter returns nil when the filter's values could match a task: an identifier
// or a reference within their lengths, of valid UTF-8 without a NUL byte, and a known state; otherwise an
// error wrapping ErrInvalid.
func ValidateFilter(filter TaskFilter) error {
	if filter.Identifier != "" {
		if err := validIdentifier(filter.Identifier); err != nil {
			return err
		}
	}
	if err := validReference(filter.Reference); err != nil {
		return err
	}
	if filter.Floor < 0 {
		return invalid("floor %d is negative", filter.Floor)
	}
	_, err := filterState(filter)
	return err
}

func validReference(reference string) error {
	if n := utf8.RuneCountInString(reference); n > MaxReferenceLength {
		return invalid("reference is %d characters long, at most %d allowed", n, MaxReferenceLength)
	}
	if p := unstorable(reference); p != "" {
		return invalid("reference %s", p)
	}
	return nil
}

func validTopic(topic string) error {
	if topic == "" {
		return invalid("topic is empty")
	}
	if n := utf8.RuneCountInString(topic); n > MaxTopicLength {
		return invalid("topic is %d characters long, at most %d allowed", n, MaxTopicLength)
	}
	if p := unstorable(topic); p != "" {
		return invalid("topic %s", p)
	}
	return nil
}

func validIdentifier(identifier string) error {
	if identifier == "" {
		return invalid("identifier is empty")
	}
	if n := utf8.RuneCountInString(identifier); n > MaxIdentifierLength {
		return invalid("identifier is %d characters long, at most %d allowed", n, MaxIdentifierLength)
	}
	if p := unstorable(identifier); p != "" {
		return invalid("identifier %q %s", identifier, p)
	}
	return nil
}

// unstorable says why s is no text PostgreSQL can hold ("is not valid UTF-8", "contains
// a NUL byte"), or "" when it is one. The validators refuse such text with the field's
// name, rather than let the server refuse the statement with an encoding error that
// names neither the field nor the task.
func unstorable(s string) string {
	switch {
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL byte, which PostgreSQL text cannot hold"
	}
	return ""
}

func validRange(from, to int64) error {
	if from < 0 || to < 0 {
		return invalid("sequence range [%d, %d] has a negative bound", from, to)
	}
	if from > to {
		return invalid("sequence range [%d, %d] is empty: from is after to", from, to)
	}
	return nil
}

func validSequences(sequences []int64) error {
	seen := make(map[int64]struct{}, len(sequences))
	for _, s := range sequences {
		if s <= 0 {
			return invalid("sequence %d is not positive", s)
		}
		if _, dup := seen[s]; dup {
			return invalid("sequence %d appears twice", s)
		}
		seen[s] = struct{}{}
	}
	return nil
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func ptr[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

func timeOf(p *time.Time) time.Time {
	if p == nil {
		return time.Time{}
	}
	return *p
}

// taskFrom converts a generated row into a Task: the one place rows cross the boundary.
func taskFrom(row db.Task) Task {
	return Task{
		Topic:          row.Topic,
		Sequence:       row.Sequence,
		Identifier:     row.Identifier,
		State:          State(row.State),
		Descent:        State(row.Descent),
		Owner:          str(row.Owner),
		Created:        row.Created,
		Completed:      timeOf(row.Completed),
		Input:          str(row.Input),
		Output:         str(row.Output),
		Reference:      str(row.Reference),
		Priority:       row.Priority,
		NotBefore:      timeOf(row.NotBefore),
		Attempt:        row.Attempt,
		Returned:       row.Returned,
		Errors:         row.Errors,
		Cancelled:      row.Cancelled,
		ConcurrencyKey: str(row.ConcurrencyKey),
	}
}

// tasksFrom converts rows of any generated type that has exactly the task table's
// columns (sqlc emits one such type per query).
func tasksFrom[R ~struct {
	Topic          string
	Sequence       int64
	Identifier     string
	State          int16
	Descent        int16
	Owner          *string
	Created        time.Time
	Completed      *time.Time
	Input          *string
	Output         *string
	Reference      *string
	Priority       int16
	NotBefore      *time.Time
	Attempt        int32
	Returned       int32
	Errors         []string
	Cancelled      bool
	ConcurrencyKey *string
}](rows []R) []Task {
	tasks := make([]Task, len(rows))
	for i, row := range rows {
		tasks[i] = taskFrom(db.Task(row))
	}
	return tasks
}

func topicFrom(row db.TaskTopic) Topic {
	t := Topic{
		Name:      row.Topic,
		Created:   row.Created,
		Active:    row.Active,
		Dedicated: row.Dedicated,
		Table:     row.Partition,
		TopicSettings: TopicSettings{
			MaxAttempts:   row.MaxAttempts,
			BackoffBase:   time.Duration(row.BackoffBaseMs) * time.Millisecond,
			BackoffCap:    time.Duration(row.BackoffCapMs) * time.Millisecond,
			BackoffJitter: time.Duration(row.BackoffJitterMs) * time.Millisecond,
		},
	}
	if row.QueueCap != nil {
		t.QueueCap = *row.QueueCap
	}
	if row.RetentionMs != nil {
		t.Retention = time.Duration(*row.RetentionMs) * time.Millisecond
	}
	t.Concurrency = deref(row.Concurrency)
	t.KeyConcurrency = deref(row.KeyConcurrency)
	t.Rate = deref(row.Rate)
	t.RateBurst = deref(row.RateBurst)
	t.RatePeriod = time.Duration(deref(row.RatePeriodMs)) * time.Millisecond
	t.Fair = row.Fair
	return t
}

// deref returns *p, or the zero value for nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// inTx runs fn in a nested transaction of h (a savepoint when h is a transaction, or a
// connection in a transaction block: begin), so
// that a multi-statement operation is all or nothing inside the caller's transaction.
// When the transaction is its own, a failed COMMIT is marked errCommitUnknown (Uncertain)
// unless the server answered it by rolling back (rolledBack).
func inTx(ctx context.Context, h Handle, fn func(tx pgx.Tx) error) error {
	return inTxCommitting(ctx, ctx, h, fn)
}

// withoutJIT runs fn in a transaction of h (inTx) with JIT off, and puts the setting
// back as it was before the transaction ends (for the rest of a caller's transaction):
// for a statement over many topics, whose estimated cost passes jit_above_cost while
// each topic's share is small, so that compiling the plan would take longer than
// running it, at every call.
func withoutJIT(ctx context.Context, h Handle, fn func(tx pgx.Tx) error) error {
	return withSettingsOff(ctx, h, []string{"jit"}, fn)
}

// withSettingsOff runs fn in a transaction of h (inTx) with each of the planner's settings
// named turned off, and puts them back as they were before the transaction ends (for
// the rest of a caller's transaction).
func withSettingsOff(ctx context.Context, h Handle, off []string, fn func(tx pgx.Tx) error) error {
	return inTx(ctx, h, func(tx pgx.Tx) error {
		var was []string
		if err := tx.QueryRow(ctx, "SELECT array_agg(current_setting(n) ORDER BY o) FROM unnest($1::text[]) WITH ORDINALITY AS s(n, o)",
			off).Scan(&was); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT count(set_config(n, 'off', true)) FROM unnest($1::text[]) AS s(n)", off); err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT count(set_config(n, v, true)) FROM unnest($1::text[], $2::text[]) AS s(n, v)", off, was)
		return err
	})
}

// inTxCommitting is inTx whose COMMIT goes by commitCtx: a loop stopping (its context
// cancelled) while its COMMIT is in flight would otherwise interrupt the connection and
// leave a commit the server may well have made reported as failed (FireSchedules).
func inTxCommitting(ctx, commitCtx context.Context, h Handle, fn func(tx pgx.Tx) error) error {
	own := autocommit(h) // before begin, which opens a transaction on a connection
	if err := ctx.Err(); err != nil {
		// pgx closes a connection whose BEGIN its context interrupted: the caller's own,
		// given outside a transaction, would be lost to a context already done
		return err
	}
	tx, err := begin(ctx, h)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	if err := tx.Commit(commitCtx); err != nil {
		if own && !rolledBack(err) {
			return fmt.Errorf("%w: %w", errCommitUnknown, err)
		}
		return err
	}
	return nil
}

// Atomically runs fn in a transaction of h and commits it: a savepoint when h is a
// transaction, or a connection inside a transaction block opened in SQL (BEGIN), else a
// transaction of its own. It returns fn's error, or the COMMIT's,
// which Uncertain reports as unknown: a commit whose reply is lost may have happened
// whatever the error says (pgx reports some such losses as "conn closed", which it
// calls safe to retry, and pgx.BeginFunc replaces the commit's error with its
// rollback's). Only a COMMIT the server answered by rolling back is certain
// (rolledBack): the transaction was already aborted, or a deferred constraint failed.
// A transaction of its own on a *pgxpool.Pool, a *pgxpool.Conn or a *pgx.Conn, or a type
// of the caller's around a connection (Handle), is READ COMMITTED whatever the
// database's default_transaction_isolation, as every transaction the repository opens
// there: its statements rely on each seeing what committed before it began (a Handle
// of another type begins with its own Begin). In a block opened in SQL, fn's tx is the
// repository's savepoint: its Conn and LargeObjects are the connection's when the
// Handle tells it. It is the repository's own inTx.
func Atomically(ctx context.Context, h Handle, fn func(tx pgx.Tx) error) error {
	return inTx(ctx, h, fn)
}

// rolledBack reports whether err, a COMMIT's, is the server's word that the transaction
// rolled back: COMMIT answered ROLLBACK (the transaction had failed), or an ERROR of
// class 23, a deferred constraint, which PostgreSQL checks before anything commits (on
// Citus too, before its workers commit). Any other error leaves the outcome unknown: a
// backend terminated after its commit record was written reports the termination, not
// the commit; and on a Citus coordinator, a one-worker transaction is committed on the
// worker before the coordinator's last checks (the NOTIFY queue's lock, a serialization
// check), whose errors (40001, 40P01, 57014, 54000) can follow a commit.
func rolledBack(err error) bool {
	if errors.Is(err, pgx.ErrTxCommitRollback) {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !strings.HasPrefix(pgErr.Code, "23") {
		return false
	}
	return cmp.Or(pgErr.SeverityUnlocalized, pgErr.Severity) == "ERROR"
}

// errCommitUnknown marks the failure of a COMMIT (Atomically): its outcome is unknown.
var errCommitUnknown = errors.New("commit failed, outcome unknown")

func durationMs(d time.Duration) int64 { return d.Milliseconds() }

func validTimeout(what string, d time.Duration) error {
	if d < 0 {
		return invalid("%s %v is negative", what, d)
	}
	return nil
}

package repository

import (
	"fmt"
	"strings"
	"time"
)

// State is the lifecycle state of a task. The ordinals are fixed and visible in SQL.
type State int16

// The nine task states; the README's Concepts section describes their life cycle.
const (
	Active    State = 0 // leased by an owner and being processed
	Ready     State = 1 // waiting to be polled (possibly not before a given time)
	Expired   State = 2 // was ACTIVE, its owner stopped heart-beating
	Failed    State = 3 // completed with FAILURE: the dead-letter set
	Suspended State = 4 // completed with SUSPENSION, or pushed suspended
	Filtered  State = 5 // completed with FILTER
	Succeeded State = 6 // completed with SUCCESS
	Recreated State = 7 // replaced by a fresh copy through recreate
	Redundant State = 8 // made obsolete by a newer push, or cancelled
)

var stateNames = [...]string{"ACTIVE", "READY", "EXPIRED", "FAILED", "SUSPENDED", "FILTERED", "SUCCEEDED", "RECREATED", "REDUNDANT"}

// States lists every state in ordinal order.
func States() []State {
	return []State{Active, Ready, Expired, Failed, Suspended, Filtered, Succeeded, Recreated, Redundant}
}

// String returns the state's name, such as "READY".
func (s State) String() string {
	if s.Valid() {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int16(s))
}

// Valid reports whether s is one of the nine states.
func (s State) Valid() bool { return s >= Active && s <= Redundant }

// Unfinished reports whether s is ACTIVE or READY.
func (s State) Unfinished() bool { return s <= Ready }

// Revivable reports whether s is in EXPIRED..SUCCEEDED (reassign, recreate, reset).
func (s State) Revivable() bool { return s >= Expired && s <= Succeeded }

// Finished reports whether s is in FAILED..REDUNDANT (the default purge set).
func (s State) Finished() bool { return s >= Failed && s <= Redundant }

// ParseState parses a state name, case-insensitively.
func ParseState(name string) (State, error) {
	for i, n := range stateNames {
		if strings.EqualFold(n, name) {
			return State(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown state %q (want one of %s)", ErrInvalid, name, strings.Join(stateNames[:], ", "))
}

// Result is the outcome a handler gives a task. A result maps onto state result+3.
type Result int16

// The four results. When two meet, the worse wins: FAILURE > SUSPENSION > FILTER > SUCCESS.
const (
	Failure    Result = 0
	Suspension Result = 1
	Filter     Result = 2
	Success    Result = 3
)

var resultNames = [...]string{"FAILURE", "SUSPENSION", "FILTER", "SUCCESS"}

// String returns the result's name, such as "SUCCESS".
func (r Result) String() string {
	if r.Valid() {
		return resultNames[r]
	}
	return fmt.Sprintf("Result(%d)", int16(r))
}

// Valid reports whether r is one of the four results.
func (r Result) Valid() bool { return r >= Failure && r <= Success }

// State is the state a task with this result ends in.
func (r Result) State() State { return State(r + 3) }

// Worse returns the worse of two results (the lower ordinal).
func Worse(a, b Result) Result { return min(a, b) }

// ParseResult parses a result name, case-insensitively.
func ParseResult(name string) (Result, error) {
	for i, n := range resultNames {
		if strings.EqualFold(n, name) {
			return Result(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown result %q (want one of %s)", ErrInvalid, name, strings.Join(resultNames[:], ", "))
}

// Insertion decides what a push does to older tasks of the same identifier.
type Insertion int16

// The insertion modes.
const (
	Append    Insertion = 0 // keep older tasks
	Replace   Insertion = 1 // older READY..SUCCEEDED tasks become REDUNDANT
	Supersede Insertion = 2 // older READY tasks become REDUNDANT
	Delete    Insertion = 3 // older non-ACTIVE tasks are deleted
)

var insertionNames = [...]string{"APPEND", "REPLACE", "SUPERSEDE", "DELETE"}

// String returns the mode's name, such as "APPEND".
func (i Insertion) String() string {
	if i.Valid() {
		return insertionNames[i]
	}
	return fmt.Sprintf("Insertion(%d)", int16(i))
}

// Valid reports whether i is one of the four modes.
func (i Insertion) Valid() bool { return i >= Append && i <= Delete }

// ParseInsertion parses a mode name, case-insensitively.
func ParseInsertion(name string) (Insertion, error) {
	for i, n := range insertionNames {
		if strings.EqualFold(n, name) {
			return Insertion(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown insertion %q (want one of %s)", ErrInvalid, name, strings.Join(insertionNames[:], ", "))
}

// Order is the order in which poll leases READY tasks within a priority.
type Order int16

// The poll orders.
const (
	FIFO Order = 0 // oldest first
	LIFO Order = 1 // newest first
)

// String returns "FIFO" or "LIFO".
func (o Order) String() string {
	switch o {
	case FIFO:
		return "FIFO"
	case LIFO:
		return "LIFO"
	}
	return fmt.Sprintf("Order(%d)", int16(o))
}

// ParseOrder parses "fifo" or "lifo", case-insensitively.
func ParseOrder(name string) (Order, error) {
	switch strings.ToUpper(name) {
	case "FIFO":
		return FIFO, nil
	case "LIFO":
		return LIFO, nil
	}
	return 0, fmt.Errorf("%w: unknown order %q (want FIFO or LIFO)", ErrInvalid, name)
}

// Condition excludes READY tasks from a poll based on other tasks of the same identifier
// in the same topic.
type Condition int16

// The poll conditions.
const (
	// None polls every READY task.
	None Condition = 0
	// SingularByIdentifier excludes a task while any task of its identifier is ACTIVE, or
	// an older (FIFO) or newer (LIFO) one is READY: at most one task per identifier in
	// flight, in order.
	SingularByIdentifier Condition = 1
	// SingularByIdentifierSuspendOnFailure also excludes it while a task of its identifier
	// is EXPIRED or FAILED.
	SingularByIdentifierSuspendOnFailure Condition = 2
	// SingularByIdentifierSuspendUntilSuccess also excludes it while a task of its
	// identifier is SUSPENDED.
	SingularByIdentifierSuspendUntilSuccess Condition = 3
)

var conditionNames = [...]string{"NONE", "SINGULAR_BY_IDENTIFIER", "SINGULAR_BY_IDENTIFIER_SUSPEND_ON_FAILURE", "SINGULAR_BY_IDENTIFIER_SUSPEND_UNTIL_SUCCESS"}

// String returns the condition's name, such as "SINGULAR_BY_IDENTIFIER".
func (c Condition) String() string {
	if c.Valid() {
		return conditionNames[c]
	}
	return fmt.Sprintf("Condition(%d)", int16(c))
}

// Valid reports whether c is one of the four conditions.
func (c Condition) Valid() bool { return c >= None && c <= SingularByIdentifierSuspendUntilSuccess }

// ParseCondition parses a condition name, case-insensitively ("-" may stand for "_").
func ParseCondition(name string) (Condition, error) {
	normal := strings.ReplaceAll(strings.ToUpper(name), "-", "_")
	for i, n := range conditionNames {
		if n == normal {
			return Condition(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown condition %q (want one of %s)", ErrInvalid, name, strings.Join(conditionNames[:], ", "))
}

// Junction decides which tasks count when releasing a group of identifiers.
type Junction int16

// The junction kinds.
const (
	Singular Junction = 0 // every identifier has a SUSPENDED task
	Eternal  Junction = 1 // every identifier has a task in any state but REDUNDANT
)

// CountMode decides which tasks Count considers.
type CountMode int16

// The count modes.
const (
	Total  CountMode = 0 // every task
	Recent CountMode = 1 // only the latest task of each identifier
)

// RecreateMode is how recreate revives tasks.
type RecreateMode int16

// The recreate modes: the first three mark the old rows RECREATED and push fresh copies
// with that insertion; Reset flips the same rows back to READY.
const (
	RecreateAppend    RecreateMode = 0
	RecreateReplace   RecreateMode = 1
	RecreateSupersede RecreateMode = 2
	Reset             RecreateMode = 3
)

var recreateNames = [...]string{"APPEND", "REPLACE", "SUPERSEDE", "RESET"}

// String returns the mode's name, such as "RESET".
func (m RecreateMode) String() string {
	if m >= RecreateAppend && m <= Reset {
		return recreateNames[m]
	}
	return fmt.Sprintf("RecreateMode(%d)", int16(m))
}

// ParseRecreateMode parses a recreate mode name, case-insensitively.
func ParseRecreateMode(name string) (RecreateMode, error) {
	for i, n := range recreateNames {
		if strings.EqualFold(n, name) {
			return RecreateMode(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown recreate mode %q (want one of %s)", ErrInvalid, name, strings.Join(recreateNames[:], ", "))
}

// Task is one row of the task table. Empty strings stand for absent (NULL) text and zero
// times for absent times.
type Task struct {
	// Topic is the topic the task was pushed to.
	Topic string
	// Sequence is the task's number, from one counter shared by all topics: it orders
	// tasks and, with Topic, identifies one.
	Sequence int64
	// Identifier is the business key given at push; not unique.
	Identifier string
	// State is where the task is in its life cycle.
	State State
	// Descent is what the row was before its current state: READY for a fresh task
	// (also one pushed SUSPENDED); a junction, a poll and an expiry leave it as it is,
	// every other change sets it to the higher of the old state and the old descent.
	Descent State
	// Owner is the owner that leased the task last; empty if it never was.
	Owner string
	// Created is when the task was pushed, by the database clock.
	Created time.Time
	// Completed is when the task last got a result; zero if it never did.
	Completed time.Time
	// Input is the payload given at push; empty if none.
	Input string
	// Output is the message (or error text) of the task's last decision; empty if none.
	Output string
	// Reference is the optional text given at push; empty if none.
	Reference string
	// Priority orders polling: lower values first.
	Priority int16
	// NotBefore is the earliest time a READY task may be polled; zero means at once.
	NotBefore time.Time
	// Attempt counts the leases of the task; a completion must name the current one. It
	// never goes down, so a completion of an earlier lease never matches a later one.
	Attempt int32
	// Returned counts the leases that do not use the retry budget: handed back by a
	// snooze or at a shutdown, by a junction's release (the lease that ended in the
	// SUSPENSION), or forgiven by a reset. The attempts used are Attempt − Returned.
	Returned int32
	// Errors holds the error text of every failed attempt, oldest first.
	Errors []string
	// Cancelled is set when the task was cancelled.
	Cancelled bool
	// ConcurrencyKey is the key the task was pushed with (Creation.ConcurrencyKey);
	// empty when none.
	ConcurrencyKey string
}

// Result returns the task's result and whether it has one (states FAILED..SUCCEEDED).
func (t Task) Result() (Result, bool) {
	if t.State >= Failed && t.State <= Succeeded {
		return Result(t.State - 3), true
	}
	return 0, false
}

// Decide pairs the task's lease with a decision, ready for Complete. It also carries the
// task's identifier, input and reference, which Complete then reports instead of reading
// them back: call it on the task as Poll returned it.
func (t Task) Decide(d Decision) Completion {
	return Completion{Sequence: t.Sequence, Attempt: t.Attempt, Decision: d,
		leased: true, identifier: t.Identifier, input: t.Input, reference: t.Reference}
}

// Creation describes a task to push.
type Creation struct {
	// Identifier is the business key (1..500 characters).
	Identifier string
	// Input is the optional payload; empty means none.
	Input string
	// Reference is optional text (at most 500 characters), e.g. the sequence of the task
	// that caused this one; empty means none.
	Reference string
	// Suspended pushes the task SUSPENDED: it waits for a junction or revival.
	Suspended bool
	// Priority orders polling: lower values first; default 0.
	Priority int16
	// NotBefore delays polling until this time; zero means at once. Takes precedence
	// over Delay.
	NotBefore time.Time
	// Delay delays polling by this long after the push, by the database clock, in whole
	// milliseconds: a fraction is dropped, and a positive delay waits at least 1 ms.
	Delay time.Duration
	// ConcurrencyKey (at most 250 characters) groups tasks for the topic's per-key limit
	// and fair scheduling (TopicSettings.KeyConcurrency, Fair): a tenant, a customer, an
	// account. Empty means none. A topic with neither ignores it.
	ConcurrencyKey string
}

// Decision is the outcome a handler gives a task: a result with an optional message, or
// a snooze back to READY.
type Decision struct {
	// Result is the outcome: the task becomes FAILED, SUSPENDED, FILTERED or SUCCEEDED
	// (FAILURE goes back to READY while the topic's retry policy grants an attempt).
	// Ignored for a snooze.
	Result Result
	// Message is stored as the task's output (an error text for FAILURE); empty stores none.
	// Each NUL byte and each run of bytes that are not UTF-8, which a PostgreSQL text
	// cannot hold, is stored as U+FFFD.
	Message string
	// Continued lets a composite handler pass the task on to dependent steps even though
	// the result is not SUCCESS. It is not stored.
	Continued bool
	// Final makes a FAILURE the task's last: it becomes FAILED (the dead-letter set) at
	// once, whatever attempts the topic's retry policy has left, for a cause that will
	// not go away (input that does not decode, a request the other side refuses for
	// good). Only with Result Failure; FailFinal builds one. It needs the schema at
	// migration 000050: on an older one the task is retried as after Fail.
	Final bool
	// Snooze puts the task back to READY after Delay without counting an attempt.
	Snooze bool
	// Delay is how long a snoozed task waits.
	Delay time.Duration
}

// Validate reports a decision no completion can store (ErrInvalid): an unknown result,
// a snooze with a negative delay, or Final with a snooze or a result other than FAILURE.
func (d Decision) Validate() error {
	switch {
	case d.Snooze && d.Delay < 0:
		return invalid("snooze delay %v is negative", d.Delay)
	case !d.Snooze && !d.Result.Valid():
		return invalid("unknown result %d", d.Result)
	case d.Final && d.Snooze:
		return invalid("a snooze cannot be final: Final is for a FAILURE")
	case d.Final && d.Result != Failure:
		return invalid("a %v cannot be final: Final is for a FAILURE", d.Result)
	}
	return nil
}

// Succeed is a SUCCESS decision.
func Succeed(message string) Decision { return Decision{Result: Success, Message: message} }

// Fail is a FAILURE decision whose message is the error's text: the task goes back to
// READY while the topic's retry policy grants an attempt (FailFinal for none).
func Fail(err error) Decision {
	msg := "failed"
	if err != nil {
		msg = err.Error()
	}
	return Decision{Result: Failure, Message: msg}
}

// FailFinal is a FAILURE decision without retry (Final): the task becomes FAILED at
// once whatever attempts are left, its message the error's text.
func FailFinal(err error) Decision {
	d := Fail(err)
	d.Final = true
	return d
}

// Suspend is a SUSPENSION decision.
func Suspend(message string) Decision { return Decision{Result: Suspension, Message: message} }

// Skip is a FILTER decision: the task was irrelevant.
func Skip(message string) Decision { return Decision{Result: Filter, Message: message} }

// SnoozeFor puts the task back to READY after d without consuming an attempt.
func SnoozeFor(d time.Duration) Decision { return Decision{Snooze: true, Delay: d} }

// Completion is a decision for one leased task, fenced by its attempt.
type Completion struct {
	// Sequence is the task's.
	Sequence int64
	// Attempt is the task's attempt when it was leased: a completion of an earlier lease
	// is refused.
	Attempt int32
	// Decision is what to record.
	Decision Decision

	// Set by Task.Decide: the leased task's columns that never change after the push.
	// When every completion of a batch has them, Complete reads back only the columns
	// the completion writes.
	leased                       bool
	identifier, input, reference string
}

// TopicSettings are the per-topic settings every process sees alike. A new topic has
// the defaults below (MaxAttemptsDefault, BackoffBaseDefault, BackoffCapDefault, no
// jitter, no queue cap, no retention); Configure replaces them all, UpdateSettings some.
type TopicSettings struct {
	// MaxAttempts is how many attempts a task gets: a FAILURE or an expiry with attempts
	// left puts it back to READY after a backoff, the last one is final (FAILED, or
	// EXPIRED). 1 means no automatic retry. Snoozes and hand-backs use no attempt.
	MaxAttempts int32
	// BackoffBase is the delay before the first retry; each later retry waits twice as
	// long as the one before: min(BackoffCap, BackoffBase·2^(attempt−1)) + jitter.
	BackoffBase time.Duration
	// BackoffCap bounds the delay between two attempts.
	BackoffCap time.Duration
	// BackoffJitter adds a random delay in [0, BackoffJitter) to each retry, so that
	// tasks that failed together do not all come back at once.
	BackoffJitter time.Duration
	// QueueCap is the most READY+ACTIVE tasks the topic may hold; 0 is unlimited. Every
	// operation that makes tasks READY is refused whole, with a *QueueFullError, when it
	// would take the topic above it: Push (counted net of the READY tasks a Replace,
	// Supersede or Delete ends, so that one that adds no more than it ends always
	// passes), Recreate and RecreateState (a Reset, or the copies, counted as a push of
	// them), Junction. The SQL push functions hold it too (PT004).
	QueueCap int64
	// Retention is how long finished tasks are kept; 0 keeps them forever.
	Retention time.Duration

	// The limits below hold across every process, enforced by the database at each poll
	// (docs/library.md, "Limits"); 0 (false) is none. A change takes effect at the next
	// poll. Leases of a dead owner count until they expire.

	// Concurrency is the most tasks of the topic ACTIVE at once.
	Concurrency int32
	// KeyConcurrency is the most tasks of one concurrency key (Creation.ConcurrencyKey)
	// ACTIVE at once. A topic with it is polled key by key, round-robin, as a Fair one.
	KeyConcurrency int32
	// Rate is the most tasks started per RatePeriod, with bursts of up to RateBurst (a
	// token bucket holding RateBurst tokens, refilled at Rate per RatePeriod).
	Rate int32
	// RatePeriod is the period of Rate; required with it.
	RatePeriod time.Duration
	// RateBurst is the most tasks started at once after a quiet time; with Rate, 0 means
	// Rate.
	RateBurst int32
	// Fair polls the topic key by key, round-robin within each priority: one key's
	// backlog does not hold back the tasks of the others.
	Fair bool
}

// Defaults of a freshly created topic: 25 attempts, the first retry after a second, each
// later one after twice the delay of the one before, up to an hour: a failing task is
// retried for about 13 hours before it lands in FAILED, the dead-letter set. A topic
// created before schema version 14 keeps the settings it had (one attempt, unless
// configured); see docs/library.md.
const (
	// MaxAttemptsDefault is a new topic's TopicSettings.MaxAttempts.
	MaxAttemptsDefault = 25
	// BackoffBaseDefault is a new topic's TopicSettings.BackoffBase.
	BackoffBaseDefault = time.Second
	// BackoffCapDefault is a new topic's TopicSettings.BackoffCap.
	BackoffCapDefault = time.Hour
)

// Topic is a registered topic with its settings.
type Topic struct {
	// Name is the topic's name.
	Name string
	// Created is when the topic was created.
	Created time.Time
	// Active is false while the topic is paused.
	Active bool
	// Dedicated is true when the topic has a table of its own (Repository.Dedicate);
	// otherwise it shares the table of its bucket with the other topics hashed there.
	Dedicated bool
	// Table names the table that holds the topic's tasks (the one Vacuum and Analyze
	// work on).
	Table string
	TopicSettings
}

// Owner is a registered repository instance.
type Owner struct {
	// Name is the owner's name (Config.Owner).
	Name string
	// Heartbeat is the owner's last heartbeat, by the database clock.
	Heartbeat time.Time
	// Started is when the owner registered.
	Started time.Time
	// Host is the machine the owner runs on, as it said (Config.Host).
	Host string
	// PID is the owner's process id, as it said (Config.PID).
	PID int
	// ExpiryTimeout is how long the owner may be silent before others take its leases
	// back, as it declared (Repository.SetExpiryTimeout); 0 when it declared none.
	ExpiryTimeout time.Duration
}

// TaskFilter narrows Page and Count. Zero values match everything.
type TaskFilter struct {
	// State, when not nil, keeps only tasks in this state.
	State *State
	// Identifier, when not empty, keeps only tasks with this identifier.
	Identifier string
	// Reference, when not empty, keeps only tasks with this reference.
	Reference string
	// Floor, when above 0, keeps only tasks with a sequence above it: a bound Page and
	// Excerpts stop reading at, so that a filter few tasks match reads a window of
	// sequences at a time (the dashboard's topic page) rather than every older task.
	// Latest and Count ignore it.
	Floor int64
}

// Count is the number of tasks of one state and the highest sequence among them.
type Count struct {
	// Count is how many tasks.
	Count int64
	// Highest is the highest sequence among them (0 when none).
	Highest int64
}

// StatsCap bounds each count of TopicStats: a state holding more tasks is counted as
// StatsCap and named in TopicStats.Capped, so that a stats call reads a bounded number of
// index entries however large a backlog or a dead-letter set grows (CountByState counts
// without a bound).
const StatsCap = 100_000

// TopicStats is the cheap health summary of a topic (Repository.Stats): counts of its
// unfinished and broken tasks, exact up to StatsCap and read from small indexes whatever
// the number of finished ones, and an estimate of all its rows.
type TopicStats struct {
	// Active counts the ACTIVE tasks: leased and being processed.
	Active int64
	// Ready counts the READY tasks, the delayed ones included: Ready − Delayed can be
	// polled now.
	Ready int64
	// Delayed counts the READY tasks whose not-before time has not come yet (pushed with
	// a delay, retried after a backoff, snoozed).
	Delayed int64
	// Expired counts the EXPIRED tasks: their owner died and no attempt was left.
	Expired int64
	// Failed counts the FAILED tasks: the dead-letter set.
	Failed int64
	// Suspended counts the SUSPENDED tasks, waiting for a junction or a revival.
	Suspended int64
	// Capped tells which of the counts above reached StatsCap: each of those holds
	// StatsCap, and the topic has more such tasks. The zero value: every count is exact.
	Capped CappedCounts
	// OldestReady is how long the longest-waiting pollable READY task has waited since it
	// became pollable (its push, or its not-before time when later: a retry's, a
	// snooze's, or the time a revive reset it or a junction released it, since schema
	// 35); 0 when none waits. Since schema 39, when the topic has more than 10 000 open
	// tasks, it is looked for among the heads of its priorities and the 100 delayed tasks
	// that fell due first, not in the whole queue (since schema 40 a bounded read: the
	// first 10 000 READY tasks in sequence order shared among at most 1 000 priorities,
	// the 500 polled first and the 500 polled last, never fewer than 10 each): tasks are
	// created in about the order of their sequences, so this misses the longest wait
	// only for a task behind more than its priority's share of tasks not yet due
	// (retries backing off), or one a long transaction pushed behind younger ones.
	OldestReady time.Duration
	// RowsEstimate estimates all the topic's tasks, finished ones included, from the
	// planner's statistics of the table that holds them: as fresh as the table's last
	// ANALYZE (autovacuum's, or a processor's as the topic grows), and never below the
	// tasks counted above. Use CountByState for exact counts of every state.
	RowsEstimate int64
}

// CappedCounts tells which counts of a TopicStats stopped at StatsCap, a field each.
type CappedCounts struct {
	// Active is set when TopicStats.Active stopped at StatsCap.
	Active bool
	// Ready is set when TopicStats.Ready stopped at StatsCap: Ready − Delayed is then a
	// lower bound of the tasks due, unless Delayed stopped at StatsCap too.
	Ready bool
	// Delayed is set when TopicStats.Delayed stopped at StatsCap.
	Delayed bool
	// Expired is set when TopicStats.Expired stopped at StatsCap.
	Expired bool
	// Failed is set when TopicStats.Failed stopped at StatsCap.
	Failed bool
	// Suspended is set when TopicStats.Suspended stopped at StatsCap.
	Suspended bool
}

// Names lists the capped counts by their names in REST's JSON ("active", "ready",
// "delayed", "expired", "failed", "suspended"), in that order; nil when none is.
func (c CappedCounts) Names() []string {
	var names []string
	for _, n := range []struct {
		name   string
		capped bool
	}{
		{"active", c.Active}, {"ready", c.Ready}, {"delayed", c.Delayed},
		{"expired", c.Expired}, {"failed", c.Failed}, {"suspended", c.Suspended},
	} {
		if n.capped {
			names = append(names, n.name)
		}
	}
	return names
}

// Expiry reports what Expire did to one topic.
type Expiry struct {
	// Topic is the topic whose leases were taken back.
	Topic string
	// Expired counts every lease taken back; Retried those of them put back to READY.
	Expired, Retried int64
}

// Revival pairs a revived task with its fresh copy (the same task for Reset).
type Revival struct {
	// Old is the revived task as stored after the revival (RECREATED, or READY again
	// for a reset).
	Old Task
	// New is its fresh copy (the same task for a reset).
	New Task
}

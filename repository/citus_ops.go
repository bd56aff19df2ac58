package repository

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/db"
)

// The hot paths on a database distributed by DistributeCitus: calls of the delegated
// functions of sql/citus/functions.sql, each a bare SELECT * FROM f(parameters) (the
// only form Citus delegates), and the notification each returns sent on the
// coordinator.

// citusState caches whether the repository's database is distributed.
const (
	citusUnknown int32 = iota
	citusNo
	citusYes
)

// citusLockClass is the first key of the transaction-scoped advisory locks of a
// distributed database: with 0, the lock DistributeCitus holds exclusively and a
// Repository's first look shares (onCitus, RegisterOwner); with 1, the one a retention
// pass holds (PurgeRetentionAfter).
const citusLockClass = 1885828300

// onCitus reports whether the database of h was distributed by DistributeCitus (it has
// the function task_distributed). The answer is read once per Repository, at
// RegisterOwner or the first statement that differs on Citus: a process that was
// running when its database was distributed must be restarted. Outside a transaction it
// waits first for a distribution under way (citusLockClass), then reads in a statement
// of its own, which sees what that committed: read while one ran, the answer "plain"
// stayed, and a process started meanwhile ran the plain statements on the distributed
// tables until restarted. In a transaction, which may hold locks of pgtask's tables
// that a distribution waits for, it does not wait (the two would deadlock): an answer
// read while a distribution is under way is not kept.
func (r *Repository) onCitus(ctx context.Context, h Handle) (bool, error) {
	switch r.citus.Load() {
	case citusNo:
		return false, nil
	case citusYes:
		return true, nil
	}
	if autocommit(h) {
		if err := waitForDistribution(ctx, h); err != nil {
			return false, err
		}
		return r.readCitus(ctx, h, true)
	}
	var free bool
	if err := h.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock_shared($1, 0)", int32(citusLockClass)).Scan(&free); err != nil {
		return false, err
	}
	return r.readCitus(ctx, h, free)
}

// waitForDistribution waits, in h's transaction (to its end) or its statement, for a
// distribution under way (DistributeCitus's lock), and makes one that begins later wait
// for that.
func waitForDistribution(ctx context.Context, h Handle) error {
	_, err := h.Exec(ctx, "SELECT pg_advisory_xact_lock_shared($1, 0)", int32(citusLockClass))
	return err
}

// readCitus reads whether the database is distributed, and keeps the answer when keep.
func (r *Repository) readCitus(ctx context.Context, h Handle, keep bool) (bool, error) {
	var yes bool
	if err := h.QueryRow(ctx, "SELECT to_regprocedure('task_distributed()') IS NOT NULL").Scan(&yes); err != nil {
		return false, err
	}
	if keep {
		if yes {
			r.citus.Store(citusYes)
		} else {
			r.citus.Store(citusNo)
		}
	}
	return yes, nil
}

// notify sends a notification payload a function returned, on the coordinator (NOTIFY
// on a worker reaches only that worker's listeners): at the caller's commit when h is
// in a transaction, at once otherwise, after the statement committed. In that second
// case a failure to notify (the notification queue full, the context ended) is not the
// operation's: its work is committed, and a notification is a hint that the processors'
// pause interval stands in for. Reported, it told the caller that nothing was written,
// and a push retried on it was pushed twice.
func notify(ctx context.Context, h Handle, payload string) error {
	if payload == "" {
		return nil
	}
	return sendNotifications(ctx, h, "SELECT pg_notify('task_notification', $1)", payload)
}

// sendNotifications runs statement, which sends notifications: in a transaction they go
// at its commit, and an error is the caller's; on a pool the change they tell of has
// committed, which a failure to send does not undo (nil).
func sendNotifications(ctx context.Context, h Handle, statement string, args ...any) error {
	committed := autocommit(h)
	var err error
	if fault := notifyFault.Load(); fault != nil {
		err = (*fault)()
	} else {
		_, err = h.Exec(ctx, statement, args...)
	}
	if committed {
		return nil
	}
	return err
}

// notifyFault, when set (tests: SetNotifyFault), gives sendNotifications its error in
// place of sending the notifications.
var notifyFault atomic.Pointer[func() error]

// notifyReturned is notify of the payload a delegated function returned (NULL: none).
func notifyReturned(ctx context.Context, h Handle, payload *string) error {
	if payload == nil {
		return nil
	}
	return notify(ctx, h, *payload)
}

// either runs citus on a database distributed by DistributeCitus, plain otherwise
// (onCitus): the one place a statement chooses between its two forms.
func either[T any](ctx context.Context, r *Repository, h Handle, citus, plain func() (T, error)) (T, error) {
	distributed, err := r.onCitus(ctx, h)
	if err != nil {
		var zero T
		return zero, err
	}
	if distributed {
		return citus()
	}
	return plain()
}

// notifyOnCitus sends "<event> <md5(topic)>" on the coordinator when the database is
// distributed: a statement of one topic that notifies (TopicUpdate, TopicSetActive,
// TaskResetState) runs whole on the topic's worker there, and its own
// notification reaches only that worker's listeners. A WORK notification without a
// position sends the processors to the head of the topic.
func (r *Repository) notifyOnCitus(ctx context.Context, h Handle, event, topic string) error {
	if citus, err := r.onCitus(ctx, h); err != nil || !citus {
		return err
	}
	return notify(ctx, h, fmt.Sprintf("%s %x", event, md5.Sum([]byte(topic))))
}

// junctionWorkOnCitus sends, on a distributed database, the WORK notification of a
// junction that released tasks of identifiers released, from the first READY task of
// those identifiers in poll order, as TaskJunction does from inside on plain PostgreSQL
// (there it runs whole on the topic's worker, whose notifications reach only its own
// listeners). A task of theirs READY before the junction may stand earlier than the
// first released one: the processors then start a little before it, which is safe. It
// reads the READY index by identifier, in the topic's shard.
func (r *Repository) junctionWorkOnCitus(ctx context.Context, h Handle, topic string, released []string) error {
	if citus, err := r.onCitus(ctx, h); err != nil || !citus {
		return err
	}
	var payload string
	err := h.QueryRow(ctx, `
		SELECT task_citus_work($1, f.priority, f.sequence, NULL)
		FROM (SELECT t.priority, t.sequence FROM unnest($2::text[]) i(identifier)
		      JOIN task t ON (t.topic || E'\n' || t.identifier) = ($1 || E'\n' || i.identifier)
		                 AND t.state = 1 AND t.topic = $1 AND t.identifier = i.identifier
		      ORDER BY t.priority, t.sequence LIMIT 1) f`, topic, released).Scan(&payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // taken already, by a poll since the release: nothing to wake up for
	}
	if err != nil {
		return err
	}
	return notify(ctx, h, payload)
}

// pushCitus is push on Citus, with sequences taken on the coordinator in input order.
func (r *Repository) pushCitus(ctx context.Context, h Handle, arg db.TaskPushParams) ([]db.TaskPushRow, error) {
	rows, err := h.Query(ctx, "SELECT nextval('task_sequence') FROM generate_series(1, $1::integer) ORDER BY 1", len(arg.Identifiers))
	if err != nil {
		return nil, err
	}
	sequences, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	rows, err = h.Query(ctx, "SELECT * FROM task_citus_push($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
		arg.Topic, arg.Insertion, sequences, arg.Identifiers, arg.Inputs, arg.Refs, arg.Suspended, arg.Priorities,
		arg.NotBeforesUs, arg.DelaysMs, arg.Keys)
	if err != nil {
		return nil, err
	}
	var payload *string
	pushed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (db.TaskPushRow, error) {
		var p db.TaskPushRow
		err := row.Scan(&p.Sequence, &p.Identifier, &p.State, &p.Descent, &p.Created, &p.NotBefore, &payload)
		return p, err
	})
	if err != nil {
		return nil, err
	}
	return pushed, notifyReturned(ctx, h, payload)
}

// pollCitus is TaskPoll on Citus.
func (r *Repository) pollCitus(ctx context.Context, h Handle, arg db.TaskPollParams) ([]db.TaskPollRow, error) {
	rows, err := h.Query(ctx, "SELECT * FROM task_citus_poll($1, $2, $3, $4, $5, $6, $7)",
		arg.Topic, arg.Owner, arg.Lifo, arg.Condition, arg.Size, arg.FromPriority, arg.FromSequence)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (db.TaskPollRow, error) {
		var t db.TaskPollRow
		err := row.Scan(&t.Topic, &t.Sequence, &t.Identifier, &t.State, &t.Descent, &t.Owner, &t.Created, &t.Completed,
			&t.Input, &t.Output, &t.Reference, &t.Priority, &t.NotBefore, &t.Attempt, &t.Returned, &t.Errors,
			&t.Cancelled, &t.ConcurrencyKey, &t.Keyed)
		return t, err
	})
}

// completeCitus is TaskComplete on Citus; its rows are never lean.
func (r *Repository) completeCitus(ctx context.Context, h Handle, arg db.TaskCompleteParams) ([]db.TaskCompleteRow, error) {
	rows, err := h.Query(ctx, "SELECT * FROM task_citus_complete($1, $2, $3, $4, $5, $6, $7)",
		arg.Topic, arg.Owner, arg.Sequences, arg.Attempts, arg.Results, arg.Outputs, arg.DelaysMs)
	if err != nil {
		return nil, err
	}
	var payload *string
	done, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (db.TaskCompleteRow, error) {
		var t db.TaskCompleteRow
		var owner, input, reference *string
		err := row.Scan(&t.Topic, &t.Sequence, &t.Identifier, &t.State, &t.Descent, &owner, &t.Created, &t.Completed,
			&input, &t.Output, &reference, &t.Priority, &t.NotBefore, &t.Attempt, &t.Returned, &t.Errors,
			&t.Cancelled, &payload)
		t.Owner, t.Input, t.Reference = orNil(owner), orNil(input), orNil(reference)
		return t, err
	})
	if err != nil {
		return nil, err
	}
	return done, notifyReturned(ctx, h, payload)
}

// orNil is *s as an interface value, nil for nil (the NULL of TaskComplete's row).
func orNil(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// statsCitus is TopicStats on Citus.
func (r *Repository) statsCitus(ctx context.Context, h Handle, topic string) (db.TopicStatsRow, error) {
	var s db.TopicStatsRow
	err := h.QueryRow(ctx, "SELECT * FROM task_citus_stats($1)", topic).Scan(&s.Active, &s.Ready, &s.Delayed,
		&s.Expired, &s.Failed, &s.Suspended, &s.OldestReadyAgeMs, &s.RowsEstimate)
	return s, err
}

// analyzeCitus is TopicAnalyze on Citus: on the topic's node, where its shard is.
func (r *Repository) analyzeCitus(ctx context.Context, h Handle, topic string) (rows int64, err error) {
	err = h.QueryRow(ctx, "SELECT task_citus_analyze($1)", topic).Scan(&rows)
	return rows, err
}

// limitUsageCitus is TopicLimitUsage on Citus.
func (r *Repository) limitUsageCitus(ctx context.Context, h Handle, topic string) (row db.TopicLimitUsageRow, err error) {
	err = h.QueryRow(ctx, "SELECT * FROM task_citus_limit_usage($1)", topic).Scan(&row.Active, &row.KeysAtLimit, &row.KeysReady, &row.Tokens)
	return row, err
}

// nowArg is the time to use for "now" in a statement that Citus plans (one that reads
// task), which may not call now() inside COALESCE: the injected clock, or the
// database's (the statement's now()).
func (r *Repository) nowArg() (sql string, args []any) {
	if t := r.clock(); t != nil {
		return "$2::timestamptz", []any{*t}
	}
	return "now()", nil
}

// leasesAny reports whether any ACTIVE task is leased by owner: a read of every shard.
func leasesAny(ctx context.Context, h Handle, owner string) (bool, error) {
	var leases bool
	err := h.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM task t WHERE t.state = 0 AND t.owner = $1)", owner).Scan(&leases)
	return leases, err
}

// deregisterCitus is OwnerDeregister on Citus: Citus cannot delete from a coordinator
// table (task_owner) under a condition on a distributed one, so the leases are looked for first (an
// owner that deregisters polls no more).
func (r *Repository) deregisterCitus(ctx context.Context, h Handle) (int64, error) {
	if leases, err := leasesAny(ctx, h, r.owner); err != nil || leases {
		return 0, err
	}
	tag, err := h.Exec(ctx, "DELETE FROM task_owner WHERE owner = $1", r.owner)
	return tag.RowsAffected(), err
}

// purgeCitus is OwnerPurge on Citus: the owners that lease a task are read from every
// shard first.
func (r *Repository) purgeCitus(ctx context.Context, h Handle, timeout time.Duration) (int64, error) {
	now, args := r.nowArg()
	tag, err := h.Exec(ctx, `
		DELETE FROM task_owner o
		WHERE o.owner <> $1
		  -- now() - heartbeat, not heartbeat <= now() - …: timestamptz - interval is STABLE,
		  -- which Citus refuses with a column in a DELETE; timestamptz - timestamptz is not
		  AND `+now+` - o.heartbeat >= GREATEST($`+fmt.Sprint(len(args)+2)+`::bigint, 2 * o.expiry_ms) * interval '1 millisecond'
		  AND o.owner <> ALL (ARRAY(SELECT DISTINCT t.owner FROM task t WHERE t.state = 0 AND t.owner IS NOT NULL))`,
		append(append([]any{r.owner}, args...), durationMs(timeout))...)
	return tag.RowsAffected(), err
}

// expireCitus is TaskExpire on Citus, topic by topic: the topics and owners of the
// leases of other owners are read first, from every shard; then which of those owners
// to take back (expiring); then, for each topic, in a transaction (a savepoint in the
// caller's) of its own, which of them are still to take back, their rows locked (FOR
// SHARE: their heartbeats and claims wait for its end), and their leases in the topic
// are taken back by a function delegated to the topic's node (task_citus_expire_owners).
// It names the owners to take back, never those to spare, and checks them again under
// the lock: an owner that registers, or comes back under its name (a pod's), and leases
// while the expiry goes from topic to topic keeps its leases (before migration 000045
// they were taken, and their tasks run twice). A row locked by a heartbeat or a claim
// under way is passed over (SKIP LOCKED: its owner is alive), so that two processes
// starting at once, each claiming its row and expiring the other's, never wait on each
// other. An owner without a row that registers between the check and the function,
// and leases in that moment, can still lose that lease: there is no row to lock.
func (r *Repository) expireCitus(ctx context.Context, h Handle, timeout time.Duration, orphans bool) ([]Expiry, error) {
	rows, err := h.Query(ctx, "SELECT DISTINCT t.topic, t.owner FROM task t WHERE t.state = 0 AND t.owner <> $1 ORDER BY 1, 2", r.owner)
	if err != nil {
		return nil, err
	}
	type lease struct{ Topic, Owner string }
	leases, err := pgx.CollectRows(rows, pgx.RowToStructByPos[lease])
	if err != nil || len(leases) == 0 {
		return nil, err
	}
	var owners []string
	seen := map[string]bool{}
	for _, l := range leases {
		if !seen[l.Owner] {
			seen[l.Owner] = true
			owners = append(owners, l.Owner)
		}
	}
	expiring, err := r.expiring(ctx, h, owners, timeout, orphans, false)
	if err != nil || len(expiring) == 0 {
		return nil, err
	}
	gone := map[string]bool{}
	for _, o := range expiring {
		gone[o] = true
	}
	var out []Expiry
	for i := 0; i < len(leases); {
		topic := leases[i].Topic
		var of []string
		for ; i < len(leases) && leases[i].Topic == topic; i++ {
			if gone[leases[i].Owner] {
				of = append(of, leases[i].Owner)
			}
		}
		if len(of) == 0 {
			continue
		}
		if r.expireHook != nil {
			r.expireHook()
		}
		x := Expiry{Topic: topic}
		var payload *string
		taken := false
		err := inTx(ctx, h, func(tx pgx.Tx) error {
			still, err := r.expiring(ctx, tx, of, timeout, orphans, true)
			if err != nil || len(still) == 0 {
				return err
			}
			err = tx.QueryRow(ctx, "SELECT * FROM task_citus_expire_owners($1, $2)", topic, still).
				Scan(&x.Expired, &x.Retried, &payload)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil // taken back meanwhile, or the topic is gone
			}
			taken = err == nil
			return err
		})
		if err != nil {
			return out, err
		}
		if !taken {
			continue
		}
		// committed (in a caller's transaction, released with it): reported even if
		// its notification fails
		out = append(out, x)
		if err := notifyReturned(ctx, h, payload); err != nil {
			return out, err
		}
	}
	return out, nil
}

// expiring returns which of owners (leasing tasks) expiry takes back: those of
// task_owner whose heartbeat is older than now − timeout, or than now − their own expiry
// timeout when longer, and those without a row there, with orphans or when a registered
// owner other than r's is stale (as TaskExpire). With lock, the rows of those registered
// are locked FOR SHARE, and those locked by another writer passed over.
func (r *Repository) expiring(ctx context.Context, h Handle, owners []string, timeout time.Duration, orphans, lock bool) ([]string, error) {
	// $1 the timeout, now's argument $2 when there is one, then the others
	now, args := r.nowArg()
	n := len(args) + 1
	self, leasing, orphaned := fmt.Sprintf("$%d", n+1), fmt.Sprintf("$%d", n+2), fmt.Sprintf("$%d", n+3)
	stale := `w.heartbeat < ` + now + ` - GREATEST($1::bigint, w.expiry_ms) * interval '1 millisecond'`
	locking := ""
	if lock {
		locking = " FOR SHARE OF w SKIP LOCKED"
	}
	args = append(append([]any{durationMs(timeout)}, args...), r.owner, owners, orphans)
	rows, err := h.Query(ctx, `SELECT w.owner FROM task_owner w
		WHERE w.owner = ANY (`+leasing+`::text[]) AND w.owner <> `+self+` AND `+stale+locking, args[:n+2]...)
	if err != nil {
		return nil, err
	}
	registered, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	rows, err = h.Query(ctx, `SELECT o.owner FROM unnest(`+leasing+`::text[]) AS o(owner)
		WHERE NOT EXISTS (SELECT FROM task_owner w WHERE w.owner = o.owner)
		  AND (`+orphaned+`::boolean OR EXISTS (SELECT FROM task_owner w WHERE w.owner <> `+self+` AND `+stale+`))`, args...)
	if err != nil {
		return nil, err
	}
	rowless, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return append(registered, rowless...), err
}

// taskRowsCitus runs q, a function returning task rows each with a notification payload,
// sends the distinct payloads and returns the rows.
func taskRowsCitus(ctx context.Context, h Handle, q string, args ...any) ([]db.Task, error) {
	rows, err := h.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	var payloads []string
	tasks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (db.Task, error) {
		var t db.Task
		var payload *string
		err := row.Scan(&t.Topic, &t.Sequence, &t.Identifier, &t.State, &t.Descent, &t.Owner, &t.Created, &t.Completed,
			&t.Input, &t.Output, &t.Reference, &t.Priority, &t.NotBefore, &t.Attempt, &t.Returned, &t.Errors,
			&t.Cancelled, &t.ConcurrencyKey, &payload)
		if payload != nil && (len(payloads) == 0 || payloads[len(payloads)-1] != *payload) {
			payloads = append(payloads, *payload)
		}
		return t, err
	})
	if err != nil {
		return nil, err
	}
	for _, p := range payloads {
		if err := notify(ctx, h, p); err != nil {
			return nil, err
		}
	}
	return tasks, nil
}

// cancelCitus is TaskCancel on Citus.
func (r *Repository) cancelCitus(ctx context.Context, h Handle, arg db.TaskCancelParams) ([]db.TaskCancelRow, error) {
	tasks, err := taskRowsCitus(ctx, h, "SELECT * FROM task_citus_cancel($1, $2, $3)", arg.Topic, arg.Sequences, arg.By)
	out := make([]db.TaskCancelRow, len(tasks))
	for i, t := range tasks {
		out[i] = db.TaskCancelRow(t)
	}
	return out, err
}

// resetCitus is TaskReset on Citus.
func (r *Repository) resetCitus(ctx context.Context, h Handle, arg db.TaskResetParams) ([]db.TaskResetRow, error) {
	tasks, err := taskRowsCitus(ctx, h, "SELECT * FROM task_citus_reset($1, $2)", arg.Topic, arg.Sequences)
	out := make([]db.TaskResetRow, len(tasks))
	for i, t := range tasks {
		out[i] = db.TaskResetRow(t)
	}
	return out, err
}

// statsAllCitus is StatsAll on Citus: the topics from task_topic (every shard), then one
// delegated statement per topic.
func (r *Repository) statsAllCitus(ctx context.Context, h Handle, topics []string) ([]TopicStatus, error) {
	var list []Topic
	var err error
	if len(topics) == 0 {
		list, err = r.Topics(ctx, h)
	} else {
		list, err = r.TopicsNamed(ctx, h, topics...)
	}
	if err != nil {
		return nil, err
	}
	out := make([]TopicStatus, 0, len(list))
	for _, t := range list {
		s, err := r.statsCitus(ctx, h, t.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, TopicStatus{Topic: t,
			Stats: statsOf(s.Active, s.Ready, s.Delayed, s.Expired, s.Failed, s.Suspended, s.OldestReadyAgeMs, s.RowsEstimate)})
	}
	return out, nil
}

// ownersCitus is OwnerList on Citus: the owners from task_owner (on the coordinator),
// then their leases from every shard.
func (r *Repository) ownersCitus(ctx context.Context, h Handle, arg db.OwnerListParams) ([]db.OwnerListRow, error) {
	now, args := r.nowArg()
	rows, err := h.Query(ctx, `SELECT o.owner, o.heartbeat, o.started, o.host, o.pid, o.expiry_ms,
		       o.heartbeat > `+now+` - GREATEST($1::bigint, o.expiry_ms) * interval '1 millisecond'
		FROM task_owner o ORDER BY o.heartbeat DESC, o.owner LIMIT `+fmt.Sprint(arg.Size), append([]any{arg.TimeoutMs}, args...)...)
	if err != nil {
		return nil, err
	}
	owners, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (db.OwnerListRow, error) {
		var o db.OwnerListRow
		err := row.Scan(&o.Owner, &o.Heartbeat, &o.Started, &o.Host, &o.Pid, &o.ExpiryMs, &o.Alive)
		o.Topics = []string{}
		return o, err
	})
	if err != nil || len(owners) == 0 {
		return owners, err
	}
	names := make([]string, len(owners))
	for i, o := range owners {
		names[i] = o.Owner
	}
	rows, err = h.Query(ctx, `SELECT t.owner, count(*), array_agg(DISTINCT t.topic ORDER BY t.topic)
		FROM task t WHERE t.state = 0 AND t.owner = ANY ($1::text[]) GROUP BY t.owner`, names)
	if err != nil {
		return nil, err
	}
	byOwner := make(map[string]int, len(owners))
	for i, o := range owners {
		byOwner[o.Owner] = i
	}
	var owner string
	var leased int64
	var topics []string
	_, err = pgx.ForEachRow(rows, []any{&owner, &leased, &topics}, func() error {
		if i, ok := byOwner[owner]; ok {
			owners[i].Leased, owners[i].Topics = leased, topics
		}
		return nil
	})
	return owners, err
}

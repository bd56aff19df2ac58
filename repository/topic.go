package repository

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/db"
)

// CreateTopic creates (registers) a topic, with the default settings, in the caller's
// transaction when h is one: tasks can be pushed to it from then on. It is idempotent
// and reports whether the topic was new; an existing topic keeps its settings and tasks.
// A topic is one row of task_topic: its tasks go to the shared table of its bucket (see
// Dedicate for a table of its own), so creating one takes the same time whatever the
// number of topics. SQL's task_topic_create and `pgtask topic add` do the same. The
// names "." and ".." are refused (ErrInvalid): no URL could name them.
func (r *Repository) CreateTopic(ctx context.Context, h Handle, topic string) (bool, error) {
	if err := ValidateNewTopic(topic); err != nil {
		return false, err
	}
	created, err := r.q.TopicCreate(ctx, h, topic)
	if err != nil {
		return false, mapError(fmt.Sprintf("create topic %q", topic), err)
	}
	return created, nil
}

// Initialize is the former name of CreateTopic.
//
// Deprecated: use CreateTopic (RegisterOwner registers the repository's owner).
func (r *Repository) Initialize(ctx context.Context, h Handle, topic string) (bool, error) {
	return r.CreateTopic(ctx, h, topic)
}

// Topics lists the registered topics with their settings, by name.
func (r *Repository) Topics(ctx context.Context, h Handle) ([]Topic, error) {
	rows, err := r.q.TopicList(ctx, h)
	if err != nil {
		return nil, mapError("list topics", err)
	}
	topics := make([]Topic, len(rows))
	for i, row := range rows {
		topics[i] = topicFrom(row)
	}
	return topics, nil
}

// Topic returns one registered topic, or ErrUnknownTopic.
func (r *Repository) Topic(ctx context.Context, h Handle, topic string) (Topic, error) {
	if err := validTopic(topic); err != nil {
		return Topic{}, err
	}
	row, err := r.q.TopicGet(ctx, h, topic)
	if errors.Is(err, pgx.ErrNoRows) {
		return Topic{}, unknownTopic("get", topic)
	}
	if err != nil {
		return Topic{}, mapError(fmt.Sprintf("get topic %q", topic), err)
	}
	t := topicFrom(row)
	r.noteLimited(topic, t.Limited())
	return t, nil
}

func unknownTopic(op, topic string) error {
	return fmt.Errorf("%s topic %q: %w", op, topic, ErrUnknownTopic)
}

// Destroy removes a topic with all its tasks. It reports false for an unknown topic
// without raising an SQL error, so the caller's transaction survives.
//
// A shared topic's tasks are deleted row by row: when h is a pool or a connection
// outside a transaction, in batches of deleteBatch tasks, each its own transaction, then
// the topic with whatever is left in one last one; inside the caller's transaction, in
// one statement. Either way no other topic waits for it. A dedicated topic's table is
// dropped, which briefly locks the other topics of its bucket (ErrLockTimeout when they
// keep it busy for longer than a second).
func (r *Repository) Destroy(ctx context.Context, h Handle, topic string) (bool, error) {
	if err := validTopic(topic); err != nil {
		return false, err
	}
	deleted, err := r.deleteInBatches(ctx, h, topic)
	if err == nil {
		var destroyed bool
		destroyed, err = retryLocked(ctx, h, func() (bool, error) { return r.q.TopicDestroy(ctx, h, topic) })
		if err == nil {
			return destroyed, nil
		}
	}
	err = mapError(fmt.Sprintf("destroy topic %q", topic), err)
	if deleted > 0 {
		// the batches before committed: the error's "nothing was changed" (a lock
		// timeout's) is not so
		remain := "the topic and the rest of its tasks remain"
		if ctx.Err() != nil {
			// the server learns of the cancellation later (a cancel request) or not at
			// all (pgx's default closes the connection): its statement may go on until
			// then, or until it ends (a lock wait: its 1 s)
			remain += ", unless the statement the cancellation interrupted still ends on the server"
		}
		err = fmt.Errorf("%w (after %d of its tasks were deleted, each batch committed: %s; destroy it again to finish)", err, deleted, remain)
	}
	return false, err
}

// Configure replaces every setting of a topic with s and returns the topic as stored.
// To change some settings and keep the others, use UpdateSettings.
func (r *Repository) Configure(ctx context.Context, h Handle, topic string, s TopicSettings) (Topic, error) {
	if err := validTopic(topic); err != nil {
		return Topic{}, err
	}
	err := s.validate()
	if err == nil {
		err = s.checkBackoff()
	}
	if err != nil {
		return Topic{}, fmt.Errorf("configure topic %q: %w", topic, err)
	}
	return r.configure(ctx, h, topic, s)
}

// UpdateSettings changes some settings of a topic and keeps the others: change receives
// the topic's settings as stored and modifies what it wants; the result is validated and
// written back, and the topic returned as stored. The topic's row is locked from the read
// to the write (in a nested transaction of h), so concurrent updates do not undo each
// other. A change that leaves the settings as they are writes nothing and notifies no
// one. For example, to slow down retries and keep everything else:
//
//	repo.UpdateSettings(ctx, pool, "emails", func(s *repository.TopicSettings) {
//		s.BackoffBase = 10 * time.Second
//	})
func (r *Repository) UpdateSettings(ctx context.Context, h Handle, topic string, change func(*TopicSettings)) (Topic, error) {
	if err := validTopic(topic); err != nil {
		return Topic{}, err
	}
	var out Topic
	err := inTx(ctx, h, func(tx pgx.Tx) error {
		row, err := r.q.TopicGetForUpdate(ctx, tx, topic)
		if errors.Is(err, pgx.ErrNoRows) {
			return unknownTopic("update settings of", topic)
		}
		if err != nil {
			return mapError(fmt.Sprintf("update settings of topic %q", topic), err)
		}
		stored := topicFrom(row)
		s := stored.TopicSettings
		change(&s)
		if s == stored.TopicSettings {
			out = stored
			r.noteLimited(topic, stored.Limited())
			return nil
		}
		err = s.validate()
		was := stored.TopicSettings
		if err == nil && s.BackoffRefused(was) {
			err = s.checkBackoff()
		}
		if err != nil {
			return fmt.Errorf("update settings of topic %q: %w", topic, err)
		}
		out, err = r.configure(ctx, tx, topic, s)
		return err
	})
	return out, err
}

// validate checks settings before they are written.
func (s TopicSettings) validate() error {
	if s.MaxAttempts < 1 {
		return invalid("max attempts %d is below 1", s.MaxAttempts)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"backoff base", s.BackoffBase}, {"backoff cap", s.BackoffCap}, {"backoff jitter", s.BackoffJitter}, {"retention", s.Retention},
		{"rate period", s.RatePeriod}} {
		if d.v < 0 {
			return invalid("%s %v is negative", d.name, d.v)
		}
		// the database keeps milliseconds: 500µs would be stored as 0, 1.5ms as 1ms
		if d.v%time.Millisecond != 0 {
			return invalid("%s %v is not a whole number of milliseconds", d.name, d.v)
		}
	}
	if s.QueueCap < 0 {
		return invalid("queue cap %d is negative", s.QueueCap)
	}
	for _, l := range []struct {
		name string
		v    int32
	}{{"concurrency", s.Concurrency}, {"key concurrency", s.KeyConcurrency}, {"rate", s.Rate}, {"rate burst", s.RateBurst}} {
		if l.v < 0 {
			return invalid("%s %d is negative (0 is no limit)", l.name, l.v)
		}
	}
	switch {
	case s.Rate > 0 && s.RatePeriod < time.Millisecond:
		return invalid("rate %d needs a period of at least 1ms, got %v", s.Rate, s.RatePeriod)
	case s.Rate == 0 && (s.RatePeriod != 0 || s.RateBurst != 0):
		return invalid("rate period %v and burst %d are given without a rate", s.RatePeriod, s.RateBurst)
	}
	return nil
}

// BackoffRefused reports whether s, changed from was, is a retry policy UpdateSettings
// refuses: the policy (max attempts, backoff base and cap) changed, and retries would wait
// the cap, never the base (checkBackoff). Callers that check a change before it is
// written use it to say so in their own names.
func (s TopicSettings) BackoffRefused(was TopicSettings) bool {
	changed := s.MaxAttempts != was.MaxAttempts || s.BackoffBase != was.BackoffBase || s.BackoffCap != was.BackoffCap
	return changed && s.checkBackoff() != nil
}

// checkBackoff refuses a retry policy whose cap is below its base: the delay is
// min(cap, base·2^(attempt−1)), so the base would never be waited. UpdateSettings checks
// it only when the policy changes, so that a topic stored so before the check keeps
// taking changes of its other settings.
func (s TopicSettings) checkBackoff() error {
	if s.MaxAttempts > 1 && s.BackoffCap < s.BackoffBase {
		return invalid("backoff cap %v is below the backoff base %v: retries would wait the cap, never the base", s.BackoffCap, s.BackoffBase)
	}
	return nil
}

// configure writes validated settings.
func (r *Repository) configure(ctx context.Context, h Handle, topic string, s TopicSettings) (Topic, error) {
	var retention *int64
	if s.Retention > 0 {
		ms := max(durationMs(s.Retention), 1)
		retention = &ms
	}
	arg := db.TopicUpdateParams{
		Topic:           topic,
		MaxAttempts:     s.MaxAttempts,
		BackoffBaseMs:   durationMs(s.BackoffBase),
		BackoffCapMs:    durationMs(s.BackoffCap),
		BackoffJitterMs: durationMs(s.BackoffJitter),
		QueueCap:        ptr(s.QueueCap),
		RetentionMs:     retention,
		Concurrency:     ptr(s.Concurrency),
		KeyConcurrency:  ptr(s.KeyConcurrency),
		Fair:            s.Fair,
	}
	if s.Rate > 0 {
		burst := s.RateBurst
		if burst == 0 {
			burst = s.Rate
		}
		period := max(durationMs(s.RatePeriod), 1)
		arg.Rate, arg.RatePeriodMs, arg.RateBurst = &s.Rate, &period, &burst
	}
	citus, err := r.onCitus(ctx, h)
	if err != nil {
		return Topic{}, mapError(fmt.Sprintf("configure topic %q", topic), err)
	}
	arg.Notify = !citus // on Citus, notifyOnCitus below
	row, err := r.q.TopicUpdate(ctx, h, arg)
	if errors.Is(err, pgx.ErrNoRows) {
		return Topic{}, unknownTopic("configure", topic)
	}
	if err != nil {
		return Topic{}, mapError(fmt.Sprintf("configure topic %q", topic), err)
	}
	for _, event := range []string{"ACTIVATION", "WORK"} {
		if err := r.notifyOnCitus(ctx, h, event, topic); err != nil {
			return Topic{}, mapError(fmt.Sprintf("configure topic %q", topic), err)
		}
	}
	t := topicFrom(db.TaskTopic(row))
	r.noteLimited(topic, t.Limited())
	return t, nil
}

// SetActive pauses (false) or resumes (true) a topic. The state is persisted, and every
// process listening on task_notification is told at commit (ACTIVATION event).
func (r *Repository) SetActive(ctx context.Context, h Handle, topic string, active bool) error {
	if err := validTopic(topic); err != nil {
		return err
	}
	citus, err := r.onCitus(ctx, h)
	if err != nil {
		return mapError(fmt.Sprintf("set activation of topic %q", topic), err)
	}
	// on Citus, notifyOnCitus below
	_, err = r.q.TopicSetActive(ctx, h, db.TopicSetActiveParams{Topic: topic, Active: active, Notify: !citus})
	if errors.Is(err, pgx.ErrNoRows) {
		return unknownTopic("set activation of", topic)
	}
	if err == nil {
		err = r.notifyOnCitus(ctx, h, "ACTIVATION", topic)
	}
	if err != nil {
		return mapError(fmt.Sprintf("set activation of topic %q", topic), err)
	}
	return nil
}

// Stats returns the topic's cheap health summary (TopicStats): exact counts of the
// unfinished and broken states (served by a partial index whose size does not grow with
// finished rows) and an estimate of all rows. For exact counts of every state use
// CountByState, which reads every task of the topic.
func (r *Repository) Stats(ctx context.Context, h Handle, topic string) (TopicStats, error) {
	if err := validTopic(topic); err != nil {
		return TopicStats{}, err
	}
	row, err := either(ctx, r, h, func() (db.TopicStatsRow, error) { return r.statsCitus(ctx, h, topic) },
		func() (db.TopicStatsRow, error) { return r.q.TopicStats(ctx, h, topic) })
	if err != nil {
		return TopicStats{}, mapError(fmt.Sprintf("stats of topic %q", topic), err)
	}
	if row.RowsEstimate == 0 && row.Active+row.Ready+row.Expired+row.Failed+row.Suspended == 0 {
		if _, err := r.Topic(ctx, h, topic); err != nil {
			return TopicStats{}, err
		}
	}
	return statsOf(row.Active, row.Ready, row.Delayed, row.Expired, row.Failed, row.Suspended, row.OldestReadyAgeMs, row.RowsEstimate), nil
}

// statsOf builds a TopicStats from the database's counts, each of which stops at
// StatsCap+1 (task_topic_counts: more than StatsCap). The rows estimate is never below
// the tasks counted: a table whose statistics were never gathered (no ANALYZE yet)
// estimates nothing.
func statsOf(active, ready, delayed, expired, failed, suspended, oldestMs, rows int64) TopicStats {
	s := TopicStats{OldestReady: time.Duration(oldestMs) * time.Millisecond}
	for _, c := range []struct {
		count  int64
		field  *int64
		capped *bool
	}{
		{active, &s.Active, &s.Capped.Active}, {ready, &s.Ready, &s.Capped.Ready},
		{delayed, &s.Delayed, &s.Capped.Delayed}, {expired, &s.Expired, &s.Capped.Expired},
		{failed, &s.Failed, &s.Capped.Failed}, {suspended, &s.Suspended, &s.Capped.Suspended},
	} {
		*c.field, *c.capped = min(c.count, StatsCap), c.count > StatsCap
	}
	s.RowsEstimate = max(rows, s.Active+s.Ready+s.Expired+s.Failed+s.Suspended)
	return s
}

// Vacuum runs VACUUM on the table that holds the topic's tasks (its bucket's shared
// table, or its own when dedicated; Topic.Table): it removes the index entries of the
// row versions that polls and completions replaced. Until then every poll walks over the
// entries of the tasks leased before it at the head of the READY index, a walk that
// grows with every task processed; autovacuum does the same, if it is on and in time.
// h must not be in a transaction (VACUUM cannot run in one). Another VACUUM of the
// table (autovacuum's, say) is not waited for: the call then returns at once. Only the
// table's owner (the role that ran the migrations, for a shared table, or dedicated the
// topic, or a member of that role) may VACUUM it; for any other user Vacuum fails with
// ErrNotTableOwner, where PostgreSQL would only skip the table with a warning.
func (r *Repository) Vacuum(ctx context.Context, h Handle, topic string) error {
	if err := validTopic(topic); err != nil {
		return err
	}
	row, err := r.q.TopicPartition(ctx, h, topic)
	if errors.Is(err, pgx.ErrNoRows) {
		return unknownTopic("vacuum", topic)
	}
	if err != nil {
		return mapError(fmt.Sprintf("vacuum topic %q", topic), err)
	}
	if !row.Owned {
		return fmt.Errorf("vacuum topic %q: %w %s (the role that ran the migrations, or dedicated the topic, owns it)", topic, ErrNotTableOwner, row.Partition)
	}
	if _, err := h.Exec(ctx, "VACUUM (SKIP_LOCKED) "+pgx.Identifier{row.Partition}.Sanitize()); err != nil {
		return mapError(fmt.Sprintf("vacuum topic %q", topic), err)
	}
	return nil
}

// OldestTransaction returns how long the oldest transaction of this database that has
// been open for at least heldFor has been open (ok false when there is none), by the
// database's clock: of the client sessions connected to the database whose snapshot or
// transaction id holds back VACUUM, and the prepared transactions. A VACUUM (which holds
// a snapshot as it runs), autovacuum and replication slots, whose age is not a time, do
// not count. Other roles' sessions count only for a superuser or a member of
// pg_read_all_stats, as in OldestXmin.
func (r *Repository) OldestTransaction(ctx context.Context, h Handle, heldFor time.Duration) (age time.Duration, ok bool, err error) {
	if heldFor < 0 {
		return 0, false, invalid("transaction held for %v: negative", heldFor)
	}
	var ms *float64
	err = h.QueryRow(ctx, `SELECT extract(epoch FROM now() - min(h.started))::float8 * 1000 FROM (
		SELECT a.xact_start AS started FROM pg_stat_activity a
		WHERE a.datname = current_database() AND a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()
		  AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
		  AND a.xact_start <= now() - $1::bigint * interval '1 millisecond'
		  AND a.pid NOT IN (SELECT v.pid FROM pg_stat_progress_vacuum v)
		UNION ALL
		SELECT p.prepared FROM pg_prepared_xacts p
		WHERE p.database = current_database() AND p.prepared <= now() - $1::bigint * interval '1 millisecond'
	) h`, heldFor.Milliseconds()).Scan(&ms)
	if err != nil {
		return 0, false, mapError("read the oldest transaction", err)
	}
	if ms == nil {
		return 0, false, nil
	}
	return time.Duration(*ms * float64(time.Millisecond)), true, nil
}

// OldestXmin returns the oldest snapshot held for at least heldFor that holds back
// VACUUM in this database, as the transaction id its xmin is (text), or "" when none: of
// the transactions of the sessions connected to the database that began heldFor ago or
// earlier, the replication slots and the prepared transactions. While it stays the same,
// no row version becomes removable (every transaction older than it ended before that
// snapshot was taken). Other roles' sessions count only for a superuser or a member of
// pg_read_all_stats (PostgreSQL hides their xmin from others).
func (r *Repository) OldestXmin(ctx context.Context, h Handle, heldFor time.Duration) (string, error) {
	if heldFor < 0 {
		return "", invalid("oldest snapshot held for %v: negative", heldFor)
	}
	var xmin string
	err := h.QueryRow(ctx, `SELECT COALESCE((
		SELECT h.x::text FROM (
			SELECT a.backend_xmin AS x FROM pg_stat_activity a
			WHERE a.datname = current_database() AND a.backend_xmin IS NOT NULL AND a.pid <> pg_backend_pid()
			  AND a.xact_start <= now() - $1::bigint * interval '1 millisecond'
			UNION ALL
			SELECT s.xmin FROM pg_replication_slots s WHERE s.xmin IS NOT NULL
			UNION ALL
			SELECT p.transaction FROM pg_prepared_xacts p WHERE p.database = current_database()
		) h
		ORDER BY age(h.x) DESC LIMIT 1), '')`, heldFor.Milliseconds()).Scan(&xmin)
	if err != nil {
		return "", mapError("read the oldest snapshot", err)
	}
	return xmin, nil
}

// Analyze refreshes the planner statistics of the table that holds the topic's tasks and
// returns that table's estimated row count (all its topics' when shared). Processors
// call it as a topic grows, so that plans cached while the table was nearly empty are
// replaced (autovacuum would, if it is on and in time). While a VACUUM holds the table
// (autovacuum's, or a processor's), the ANALYZE is skipped rather than waiting for it or
// cancelling it (schema 20), and the estimate of the last statistics is returned.
func (r *Repository) Analyze(ctx context.Context, h Handle, topic string) (int64, error) {
	if err := validTopic(topic); err != nil {
		return 0, err
	}
	rows, err := either(ctx, r, h, func() (int64, error) { return r.analyzeCitus(ctx, h, topic) },
		func() (int64, error) { return r.q.TopicAnalyze(ctx, h, topic) })
	if err != nil {
		return 0, mapError(fmt.Sprintf("analyze topic %q", topic), err)
	}
	if rows < 0 {
		return 0, unknownTopic("analyze", topic)
	}
	return rows, nil
}

// Dedicate gives a topic a table of its own and moves its tasks there; it reports false
// when the topic had one already. A dedicated topic is VACUUMed and ANALYZEd alone, and
// PurgeAll and Destroy truncate and drop its table instead of deleting rows; every other
// topic shares its bucket's table (README: "Storage").
//
// A topic with tasks must be paused with none ACTIVE (ErrTopicInUse otherwise), so that
// no completion races the move. While the table is attached, the other topics of its
// bucket wait for PostgreSQL to read it and the bucket's shared table once; when they
// keep the bucket busy for longer than a second, the attempt gives up; on a pool (or a
// connection outside a transaction) Dedicate tries again, lockAttempts times in all,
// before it returns ErrLockTimeout. Autovacuum is the usual culprit: it gives way to a
// waiting lock only after deadlock_timeout. Call it on a pool, not inside a long
// transaction: the bucket stays locked until commit. An unknown topic returns
// ErrUnknownTopic.
func (r *Repository) Dedicate(ctx context.Context, h Handle, topic string) (bool, error) {
	if err := validTopic(topic); err != nil {
		return false, err
	}
	citus, err := r.onCitus(ctx, h)
	if err == nil && citus {
		// the shard is the topic's table there: isolate_tenant_to_new_shard gives it one
		err = fmt.Errorf("%w: Citus gives a topic a shard of its own with SELECT isolate_tenant_to_new_shard('task', topic, 'CASCADE')", ErrDistributed)
	}
	if err != nil {
		return false, mapError(fmt.Sprintf("dedicate topic %q", topic), err)
	}
	dedicated, err := retryLocked(ctx, h, func() (bool, error) { return r.q.TopicDedicate(ctx, h, topic) })
	if err != nil {
		return false, mapError(fmt.Sprintf("dedicate topic %q", topic), err)
	}
	return dedicated, nil
}

// Activation reports, for each of the named topics that is registered, whether it is
// active (not paused). It reads those topics' rows only, however many others exist.
func (r *Repository) Activation(ctx context.Context, h Handle, topics []string) (map[string]bool, error) {
	rows, err := r.q.TopicActivation(ctx, h, topics)
	if err != nil {
		return nil, mapError("read topic activation", err)
	}
	out := make(map[string]bool, len(rows))
	for _, row := range rows {
		out[row.Topic] = row.Active
	}
	return out, nil
}

// deleteBatch is how many tasks one statement of Destroy or PurgeAll deletes from a
// shared table, so that a large topic goes in short transactions.
const deleteBatch = 10_000

// deleteInBatches deletes a shared topic's tasks deleteBatch at a time, each batch its
// own transaction, when h runs each statement in one (a pool, or a connection outside a
// transaction); it returns how many it deleted. Inside the caller's transaction, for a
// dedicated or an unknown topic, it does nothing: the caller's one statement does it all.
func (r *Repository) deleteInBatches(ctx context.Context, h Handle, topic string) (int64, error) {
	if !autocommit(h) {
		return 0, nil
	}
	t, err := r.q.TopicGet(ctx, h, topic)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && t.Dedicated {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var total int64
	for {
		n, err := r.q.TopicDeleteTasks(ctx, h, db.TopicDeleteTasksParams{Topic: topic, Size: deleteBatch})
		total += n
		if err != nil || n < deleteBatch {
			return total, err
		}
	}
}

// lockAttempts is how many times an operation that locks other topics' tables (and
// waits for them no longer than a second each time) is tried on a pool.
const lockAttempts = 8

// retryLocked runs op, and when h runs each statement in a transaction of its own and
// op fails for want of a lock within its lock_timeout (SQLSTATE 55P03), runs it again
// after a pause that grows from 250 ms, lockAttempts times in all. Inside the caller's
// transaction op runs once: the failed statement has aborted that transaction.
func retryLocked[T any](ctx context.Context, h Handle, op func() (T, error)) (T, error) {
	pause := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		v, err := op()
		if err == nil || attempt == lockAttempts || !autocommit(h) || SQLState(err) != sqlstateLockNotAvailable {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// TopicStatus is a topic with its TopicStats, as StatsAll returns them.
type TopicStatus struct {
	Topic
	// Stats are the topic's stats, as Stats returns them.
	Stats TopicStats
}

// StatsAll returns Stats of every registered topic, or of the named ones (unknown names
// are left out), by name, in one statement. It reads each topic's unfinished and broken
// tasks through its own index ranges, so its cost follows those tasks and the number of
// topics, never the finished history; with thousands of topics it is the way to read
// them all (Stats of each would be one statement per topic).
func (r *Repository) StatsAll(ctx context.Context, h Handle, topics ...string) ([]TopicStatus, error) {
	if topics == nil {
		topics = []string{}
	}
	out, err := either(ctx, r, h, func() ([]TopicStatus, error) { return r.statsAllCitus(ctx, h, topics) },
		func() ([]TopicStatus, error) {
			rows, err := r.q.TopicStatsAll(ctx, h, topics)
			out := make([]TopicStatus, len(rows))
			for i, row := range rows {
				out[i] = TopicStatus{Topic: topicFrom(row.TaskTopic),
					Stats: statsOf(row.Active, row.Ready, row.Delayed, row.Expired, row.Failed, row.Suspended, row.OldestReadyAgeMs, row.RowsEstimate)}
			}
			return out, err
		})
	if err != nil {
		return nil, mapError("stats of topics", err)
	}
	return out, nil
}

// LimitUsage is how much of its limits a topic uses now (Repository.LimitUsage).
type LimitUsage struct {
	// Active is how many of the topic's tasks are ACTIVE (dead owners' leases included,
	// until they expire), against TopicSettings.Concurrency.
	Active int64
	// KeysAtLimit is how many concurrency keys have TopicSettings.KeyConcurrency tasks
	// ACTIVE.
	KeysAtLimit int64
	// KeysWaiting is how many concurrency keys have READY tasks (counted up to 10 000).
	KeysWaiting int64
	// Tokens is how many tasks the rate limit lets start now (whole or not), up to
	// TopicSettings.RateBurst; the burst when the topic has not been polled since it has
	// a rate limit, and 0 without one.
	Tokens float64
}

// LimitUsage returns how much of its limits topic uses now: ACTIVE tasks, keys at their
// limit and keys waiting, tokens left. It reads the topic's ACTIVE tasks and one index
// entry per key with READY tasks, never its finished history.
func (r *Repository) LimitUsage(ctx context.Context, h Handle, topic string) (LimitUsage, error) {
	if err := validTopic(topic); err != nil {
		return LimitUsage{}, err
	}
	usage, err := r.limitUsage(ctx, h, []string{topic})
	if err != nil {
		return LimitUsage{}, mapError(fmt.Sprintf("limit usage of topic %q", topic), err)
	}
	u, ok := usage[topic]
	if !ok {
		return LimitUsage{}, unknownTopic("limit usage of", topic)
	}
	return u, nil
}

// LimitUsageAll is LimitUsage of each of topics, by name, in one statement on
// PostgreSQL (one per topic on Citus); unknown topics are left out, and so are names
// no topic could have (empty, or not UTF-8: a name StatsAll read from a database whose
// encoding is not UTF-8 fails the others' read no more). A metrics scrape reads every
// limited topic with it: 10 000 topics in a fraction of a second, where a statement per
// topic took seconds.
func (r *Repository) LimitUsageAll(ctx context.Context, h Handle, topics ...string) (map[string]LimitUsage, error) {
	topics = slices.DeleteFunc(slices.Clone(topics), func(topic string) bool { return validTopic(topic) != nil })
	if len(topics) == 0 {
		return map[string]LimitUsage{}, nil
	}
	usage, err := r.limitUsage(ctx, h, topics)
	if err != nil {
		return nil, mapError(fmt.Sprintf("limit usage of %d topics", len(topics)), err)
	}
	return usage, nil
}

// limitUsage reads the limit usage of topics: in one statement on PostgreSQL (for more
// than one topic without JIT, whose estimated cost grows with them), topic by topic on
// Citus.
func (r *Repository) limitUsage(ctx context.Context, h Handle, topics []string) (map[string]LimitUsage, error) {
	plain := func() (rows []db.TopicLimitUsageRow, err error) {
		if len(topics) == 1 {
			return r.q.TopicLimitUsage(ctx, h, topics)
		}
		err = withoutJIT(ctx, h, func(tx pgx.Tx) (err error) {
			rows, err = r.q.TopicLimitUsage(ctx, tx, topics)
			return err
		})
		return rows, err
	}
	rows, err := either(ctx, r, h, func() ([]db.TopicLimitUsageRow, error) {
		var rows []db.TopicLimitUsageRow
		for _, topic := range topics {
			row, err := r.limitUsageCitus(ctx, h, topic)
			if errors.Is(err, pgx.ErrNoRows) {
				continue
			}
			if err != nil {
				return nil, err
			}
			row.Topic = topic
			rows = append(rows, row)
		}
		return rows, nil
	}, plain)
	if err != nil {
		return nil, err
	}
	usage := make(map[string]LimitUsage, len(rows))
	for _, row := range rows {
		usage[row.Topic] = LimitUsage{Active: row.Active, KeysAtLimit: row.KeysAtLimit, KeysWaiting: row.KeysReady, Tokens: row.Tokens}
	}
	return usage, nil
}

// TopicsNamed returns the named topics, by name; unknown ones are left out. A processor
// reads its own topics with it on every heartbeat: their activation and limits.
func (r *Repository) TopicsNamed(ctx context.Context, h Handle, topics ...string) ([]Topic, error) {
	if len(topics) == 0 {
		return nil, nil
	}
	rows, err := r.q.TopicGetMany(ctx, h, topics)
	if err != nil {
		return nil, mapError("read topics", err)
	}
	out := make([]Topic, len(rows))
	for i, row := range rows {
		out[i] = topicFrom(row)
	}
	return out, nil
}

// Limited reports whether the topic has a limit that a poll enforces (TopicSettings
// Concurrency, KeyConcurrency, Rate or Fair).
func (s TopicSettings) Limited() bool {
	return s.Concurrency > 0 || s.KeyConcurrency > 0 || s.Rate > 0 || s.Fair
}

// TopicPageMax is the most topics one TopicPage returns.
const TopicPageMax = 1000

// TopicPage lists up to size registered topics (1..TopicPageMax) whose name comes after
// `after` ("" starts at the first), by name, keeping those whose name contains search
// ignoring case ("" keeps all). Pass the last name of a page as `after` to read the next:
// with thousands of topics, a listing reads one page of task_topic, never the task
// tables; StatsAll of the page's names adds their stats.
func (r *Repository) TopicPage(ctx context.Context, h Handle, search, after string, size int) ([]Topic, error) {
	if size < 1 || size > TopicPageMax {
		return nil, fmt.Errorf("%w: topic page size %d is outside 1..%d", ErrInvalid, size, TopicPageMax)
	}
	if p := unstorable(search); p != "" {
		return nil, invalid("topic search %s", p)
	}
	if p := unstorable(after); p != "" {
		return nil, invalid("topic page position (after) %s", p)
	}
	rows, err := r.q.TopicPage(ctx, h, db.TopicPageParams{After: after, Search: search, Size: int32(size)})
	if err != nil {
		return nil, mapError("page topics", err)
	}
	topics := make([]Topic, len(rows))
	for i, row := range rows {
		topics[i] = topicFrom(row)
	}
	return topics, nil
}

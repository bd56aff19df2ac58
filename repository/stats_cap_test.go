package repository_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/pgtask/pgtask/repository"
)

// TestStatsCapped: a topic's stats count each state up to StatsCap and say which counts
// stopped there, reading a bounded number of index entries however many open tasks the
// topic holds (migration 000039); before it, each call read every one of them.
func TestStatsCapped(t *testing.T) {
	f := setup(t)
	// insertTasks writes n tasks of state straight into task: pushing and failing them
	// one batch at a time would take a minute.
	insertTasks := func(n int, state repository.State, prefix string) {
		t.Helper()
		// (the sequences named: on Citus task has no default for them)
		if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (sequence, topic, identifier, state, completed)
			SELECT nextval('task_sequence'), $1, $2 || g, $3::smallint, CASE WHEN $3::smallint >= 3 THEN now() END
			FROM generate_series(1, $4) g`,
			f.topic, prefix, int16(state), n); err != nil {
			t.Fatal(err)
		}
	}
	stats := func() repository.TopicStats {
		t.Helper()
		got, err := f.repo.Stats(f.ctx, f.pool, f.topic)
		if err != nil {
			t.Fatal(err)
		}
		all, err := f.repo.StatsAll(f.ctx, f.pool, f.topic)
		if err != nil || len(all) != 1 {
			t.Fatalf("StatsAll = %v, %v", all, err)
		}
		if a, g := all[0].Stats, got; a.Active != g.Active || a.Ready != g.Ready || a.Failed != g.Failed || a.Capped != g.Capped {
			t.Fatalf("StatsAll %+v differs from Stats %+v", a, g)
		}
		return got
	}

	insertTasks(repository.StatsCap, repository.Failed, "failed-")
	insertTasks(repository.StatsCap+1, repository.Ready, "ready-")
	insertTasks(1000, repository.Succeeded, "done-")
	driveTo(f, "active", repository.Active)
	got := stats()
	if got.Failed != repository.StatsCap || got.Ready != repository.StatsCap || got.Active != 1 ||
		got.Capped != (repository.CappedCounts{Ready: true}) {
		t.Fatalf("stats = %+v, want %d FAILED counted exactly, %d READY capped, 1 ACTIVE", got, repository.StatsCap, repository.StatsCap)
	}
	if names := fmt.Sprint(got.Capped.Names()); names != "[ready]" {
		t.Errorf("capped names = %s, want [ready]", names)
	}
	if got.OldestReady <= 0 || got.OldestReady > time.Hour {
		t.Errorf("oldest ready = %v, want the seconds since the inserts", got.OldestReady)
	}

	// 100 000 FAILED more: the count stops at the cap, and the call reads about one
	// row per task it counts (the cap's worth per capped state, after a first pass over
	// 10 001), not the 300 000 open tasks of the topic.
	insertTasks(100_000, repository.Failed, "more-failed-")
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(f.ctx)
	// the rows index scans fetched from the tables of task: the counters of the
	// session's statistics not yet sent, read before and after the call in one
	// transaction (they are sent between transactions only)
	fetched := func() int64 {
		t.Helper()
		var n int64
		if err := tx.QueryRow(f.ctx, `SELECT COALESCE(sum(idx_tup_fetch), 0)::bigint FROM pg_stat_xact_user_tables
			WHERE relname LIKE 'task%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := fetched()
	got, err = f.repo.Stats(f.ctx, tx, f.topic)
	if err != nil {
		t.Fatal(err)
	}
	read := fetched() - before
	if got.Failed != repository.StatsCap || got.Capped != (repository.CappedCounts{Ready: true, Failed: true}) {
		t.Fatalf("stats = %+v, want FAILED and READY capped at %d", got, repository.StatsCap)
	}
	// (the cap's worth per capped state, the first pass's 10 001, and the oldest wait's
	// 10 000 entries of the heads of the priorities)
	if limit := int64(2*repository.StatsCap + 25_000); read > limit {
		t.Errorf("a stats call fetched %d rows through indexes, want at most %d (two states at the cap)", read, limit)
	}
}

// TestStatsOldestReadyOfEveryPriority: beyond 10 000 open tasks the oldest wait is looked
// for among the heads of each priority, so a task starving at a priority polled last is
// seen behind a busy one.
func TestStatsOldestReadyOfEveryPriority(t *testing.T) {
	f := setup(t)
	if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (sequence, topic, identifier, priority, created)
		SELECT nextval('task_sequence'), $1, 'busy-' || g, 0, now() FROM generate_series(1, 12000) g`, f.topic); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (sequence, topic, identifier, priority, created)
		VALUES (nextval('task_sequence'), $1, 'starving', 7, now() - interval '2 hours'),
		       (nextval('task_sequence'), $1, 'retried', 0, now() - interval '5 hours')`, f.topic); err != nil {
		t.Fatal(err)
	}
	// a task retried long after its push waits from its not-before
	if _, err := f.pool.Exec(f.ctx, `UPDATE task SET not_before = now() - interval '1 hour'
		WHERE topic = $1 AND identifier = 'retried'`, f.topic); err != nil {
		t.Fatal(err)
	}
	got, err := f.repo.Stats(f.ctx, f.pool, f.topic)
	if err != nil {
		t.Fatal(err)
	}
	if got.OldestReady < 2*time.Hour || got.OldestReady > 2*time.Hour+time.Minute {
		t.Errorf("oldest ready = %v, want the starving task's 2h", got.OldestReady)
	}
}

// TestStatsOldestWaitBounded: the oldest wait of a topic past 10 000 open tasks reads a
// bounded number of entries (migration 000040) when a priority is headed by many tasks
// not yet due (retries backing off) and when the READY tasks use thousands of
// priorities; before it, the first read the whole priority and the second one descent
// and head per priority.
func TestStatsOldestWaitBounded(t *testing.T) {
	f := setup(t)
	// read returns the stats and the rows that index scans fetched from the tables of
	// task during the call (as TestStatsCapped reads them).
	read := func() (repository.TopicStats, int64) {
		t.Helper()
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(f.ctx)
		fetched := func() int64 {
			t.Helper()
			var n int64
			if err := tx.QueryRow(f.ctx, `SELECT COALESCE(sum(idx_tup_fetch), 0)::bigint FROM pg_stat_xact_user_tables
				WHERE relname LIKE 'task%'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		before := fetched()
		got, err := f.repo.Stats(f.ctx, tx, f.topic)
		if err != nil {
			t.Fatal(err)
		}
		return got, fetched() - before
	}

	t.Run("APriorityHeadedByDelayedTasks", func(t *testing.T) {
		// 200 000 tasks backing off at the head of priority 0 and a task due behind
		// them; 4 000 at the head of priority 1 and a task waiting an hour behind them
		insert := func(priority, n int, wait string) {
			t.Helper()
			if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (sequence, topic, identifier, priority, not_before)
				SELECT nextval('task_sequence'), $1, 'later-' || $2::int || '-' || g, $2::int, now() + interval '1 hour'
				FROM generate_series(1, $3) g`, f.topic, priority, n); err != nil {
				t.Fatal(err)
			}
			if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (sequence, topic, identifier, priority, created)
				VALUES (nextval('task_sequence'), $1, 'due-' || $2::int, $2::int, now() - $3::interval)`, f.topic, priority, wait); err != nil {
				t.Fatal(err)
			}
		}
		insert(0, 200_000, "3 hours")
		insert(1, 4_000, "1 hour")
		got, n := read()
		if got.Ready != repository.StatsCap || got.Delayed != repository.StatsCap ||
			got.Capped != (repository.CappedCounts{Ready: true, Delayed: true}) {
			t.Fatalf("stats = %+v, want READY and delayed capped", got)
		}
		// the two priorities share 10 000 entries: the task due behind 4 000 is seen;
		// the one behind 200 000 may be out of sight (documented)
		if got.OldestReady < time.Hour || got.OldestReady > 3*time.Hour+time.Minute {
			t.Errorf("oldest ready = %v, want at least the 1h of the task behind 4 000 at priority 1", got.OldestReady)
		}
		// two capped counts, the first pass, and the heads
		if limit := int64(2*repository.StatsCap + 25_000); n > limit {
			t.Errorf("a stats call fetched %d rows through indexes, want at most %d", n, limit)
		}
	})

	t.Run("ThousandsOfPriorities", func(t *testing.T) {
		if _, err := f.pool.Exec(f.ctx, `DELETE FROM task WHERE topic = $1`, f.topic); err != nil {
			t.Fatal(err)
		}
		// 30 000 priorities of one task each, and a task waiting two hours at the
		// priority polled last
		if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (sequence, topic, identifier, priority)
			SELECT nextval('task_sequence'), $1, 'p-' || g, g - 15000 FROM generate_series(1, 30000) g`, f.topic); err != nil {
			t.Fatal(err)
		}
		if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (sequence, topic, identifier, priority, created)
			VALUES (nextval('task_sequence'), $1, 'starving', 32000, now() - interval '2 hours')`, f.topic); err != nil {
			t.Fatal(err)
		}
		got, n := read()
		if got.Ready != 30_001 || got.Capped != (repository.CappedCounts{}) {
			t.Fatalf("stats = %+v, want 30 001 READY counted exactly", got)
		}
		if got.OldestReady < 2*time.Hour || got.OldestReady > 2*time.Hour+time.Minute {
			t.Errorf("oldest ready = %v, want the starving task's 2h", got.OldestReady)
		}
		// the first pass, the READY count, and 1 000 priorities' descents and heads
		if limit := int64(45_000); n > limit {
			t.Errorf("a stats call fetched %d rows through indexes, want at most %d", n, limit)
		}
	})
}

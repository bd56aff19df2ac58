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
	if limit := int64(2*repository.StatsCap + 15_000); read > limit {
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

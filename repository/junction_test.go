package repository_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/repository"
)

// TestJunctionOfAGroupOfManyIdentifiers: a junction of a group of 20 000 identifiers,
// in a transaction, takes at most 64 advisory locks of the topic and releases the
// group. It took one lock per identifier, held to the commit, and failed with "out of
// shared memory" (the server's lock table full, at default settings), a failure the
// processor retried for ever, the group never released.
func TestJunctionOfAGroupOfManyIdentifiers(t *testing.T) {
	f := setup(t)
	const n = 20000
	group := make([]string, n)
	for i := range group {
		group[i] = fmt.Sprintf("branch-%05d", i)
	}
	if _, err := f.pool.Exec(f.ctx, `SELECT task_push_batch($1, $2, suspended => true)`, f.topic, group); err != nil {
		t.Fatal(err)
	}
	err := repository.Atomically(f.ctx, f.pool, func(tx pgx.Tx) error {
		released, err := f.repo.Junction(f.ctx, tx, f.topic, repository.Singular, group)
		if err != nil {
			return err
		}
		if len(released) != n {
			t.Errorf("released %d identifiers, want %d", len(released), n)
		}
		var locks int
		if err := tx.QueryRow(f.ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1885828202 AND objsubid = 2 AND pid = pg_backend_pid()`).Scan(&locks); err != nil {
			return err
		}
		if locks > 64 {
			t.Errorf("the junction holds %d advisory locks, want at most 64", locks)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("junction of %d identifiers: %v", n, err)
	}
	var ready int
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM task WHERE topic = $1 AND state = 1`, f.topic).Scan(&ready); err != nil || ready != n {
		t.Fatalf("%d READY after the junction (%v), want %d", ready, err, n)
	}
}

// TestJunctionInARepeatableReadTransaction: a junction in a caller's REPEATABLE READ
// transaction is refused, naming the isolation, and releases nothing: its snapshot,
// taken before its locks, would miss a concurrent junction's suspension, and the group
// would never be released. SERIALIZABLE, where such a race fails one transaction, is
// accepted.
func TestJunctionInARepeatableReadTransaction(t *testing.T) {
	f := setup(t)
	f.push(repository.Append, "a")
	leased := f.poll(repository.FIFO, repository.None, 1)
	f.complete(repository.Suspend("waiting"), leased...)
	for _, tc := range []struct {
		level  pgx.TxIsoLevel
		refuse bool
	}{{pgx.RepeatableRead, true}, {pgx.Serializable, false}} {
		t.Run(string(tc.level), func(t *testing.T) {
			tx, err := f.pool.BeginTx(f.ctx, pgx.TxOptions{IsoLevel: tc.level})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.WithoutCancel(f.ctx))
			released, err := f.repo.Junction(f.ctx, tx, f.topic, repository.Singular, []string{"a"})
			if !tc.refuse {
				if err != nil || !slices.Equal(released, []string{"a"}) {
					t.Fatalf("junction under %s: %v, %v; want [a] released", tc.level, released, err)
				}
				return
			}
			if !errors.Is(err, repository.ErrInvalid) || !strings.Contains(err.Error(), "REPEATABLE READ") {
				t.Fatalf("junction under %s: %v, %v; want ErrInvalid naming REPEATABLE READ", tc.level, released, err)
			}
		})
	}
	if got := f.get(leased[0].Sequence); got.State != repository.Suspended {
		t.Fatalf("task a is %v, want SUSPENDED: nothing committed", got.State)
	}
}

// TestOwnTransactionsAreReadCommitted: in a database whose default isolation is
// REPEATABLE READ, the transactions the repository opens itself (Atomically on a pool:
// the processor's commits of decisions with their follow-ups) are READ COMMITTED, so
// that a junction there sees what the junctions it waited for committed. They took the
// default, and two completions each suspending one task of a group and declaring its
// junction left the group SUSPENDED for good.
func TestOwnTransactionsAreReadCommitted(t *testing.T) {
	f := setup(t)
	if _, err := f.pool.Exec(f.ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = %L', current_database(), 'repeatable read'); END $$`); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(f.ctx, f.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var level string
	if err := pool.QueryRow(f.ctx, `SHOW transaction_isolation`).Scan(&level); err != nil || level != "repeatable read" {
		t.Fatalf("the database's default isolation: %q, %v; want repeatable read", level, err)
	}
	if err := repository.Atomically(f.ctx, pool, func(tx pgx.Tx) error {
		return tx.QueryRow(f.ctx, `SHOW transaction_isolation`).Scan(&level)
	}); err != nil || level != "read committed" {
		t.Fatalf("a transaction of Atomically's own: %q, %v; want read committed", level, err)
	}
}

// TestJunctionReleaseKeepsRetries: a task that ended its lease in a SUSPENSION and was
// released by a junction has its retries whole: the suspension's lease is handed back,
// as a snooze's is. It counted as a failed attempt, and with 2 attempts the released
// task's first failure was final.
func TestJunctionReleaseKeepsRetries(t *testing.T) {
	f := setup(t)
	if _, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.MaxAttempts = 2 }); err != nil {
		t.Fatal(err)
	}
	pushed := f.push(repository.Append, "a")
	// a task pushed SUSPENDED, never leased, has no lease to hand back
	if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "b", Suspended: true}); err != nil {
		t.Fatal(err)
	}
	f.complete(repository.Suspend("waiting for b"), f.poll(repository.FIFO, repository.None, 1)...)
	released, err := f.repo.Junction(f.ctx, f.pool, f.topic, repository.Singular, []string{"a", "b"})
	if err != nil || !slices.Equal(released, []string{"a", "b"}) {
		t.Fatalf("junction: %v, %v; want [a b]", released, err)
	}
	for _, task := range f.poll(repository.FIFO, repository.None, 2) {
		if task.Identifier == "b" && task.Attempt-task.Returned != 1 {
			t.Errorf("b leased at attempt %d, %d returned; want its first", task.Attempt, task.Returned)
		}
		if task.Identifier != "a" {
			continue
		}
		if task.Attempt-task.Returned != 1 {
			t.Errorf("a leased again at attempt %d, %d returned; want its first attempt of failures", task.Attempt, task.Returned)
		}
		f.complete(repository.Fail(errors.New("boom")), task)
	}
	if got := f.get(pushed[0].Sequence); got.State != repository.Ready {
		t.Fatalf("a after its first failure since the release: %v (attempt %d, returned %d), want READY: one retry left",
			got.State, got.Attempt, got.Returned)
	}
}

// TestLockJunctionsAllAtOnce: two transactions each running the junctions of two groups,
// in opposite orders, deadlocked (one failed with 40P01) when each junction took its
// locks alone; with LockJunctions first, which the processor calls for a commit of
// several junctions, the second waits for the first, and both commit. It refuses a
// REPEATABLE READ transaction and an invalid identifier, as Junction does.
func TestLockJunctionsAllAtOnce(t *testing.T) {
	f := setup(t)
	// two identifiers whose locks differ (their buckets of the topic's 64)
	var x, y string
	if err := f.pool.QueryRow(f.ctx, `
		SELECT min(id) FILTER (WHERE b = 0), min(id) FILTER (WHERE b = 1)
		FROM (SELECT 'id-' || i AS id, hashtext($1 || E'\n' || 'id-' || i) & 63 AS b FROM generate_series(1, 1000) i) s`,
		f.topic).Scan(&x, &y); err != nil {
		t.Fatal(err)
	}
	lockAll := func(tx pgx.Tx, ids ...string) error {
		return f.repo.LockJunctions(f.ctx, tx, map[string][]string{f.topic: ids})
	}
	junction := func(tx pgx.Tx, id string) error {
		_, err := f.repo.Junction(f.ctx, tx, f.topic, repository.Singular, []string{id})
		return err
	}
	txA, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(context.WithoutCancel(f.ctx))
	txB, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txB.Rollback(context.WithoutCancel(f.ctx))
	// A: x, then y; B: y, then x, begun between A's two
	if err := lockAll(txA, y, x); err != nil {
		t.Fatal(err)
	}
	if err := junction(txA, x); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		err := lockAll(txB, x, y)
		if err == nil {
			err = junction(txB, y)
		}
		if err == nil {
			err = junction(txB, x)
		}
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := junction(txA, y); err != nil {
		t.Fatalf("transaction A's second junction: %v", err)
	}
	if err := txA.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("transaction B, once A committed: %v", err)
	}
	if err := txB.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}

	rr, err := f.pool.BeginTx(f.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Rollback(context.WithoutCancel(f.ctx))
	if err := f.repo.LockJunctions(f.ctx, rr, map[string][]string{f.topic: {x}}); !errors.Is(err, repository.ErrInvalid) {
		t.Fatalf("LockJunctions in a REPEATABLE READ transaction: %v, want ErrInvalid", err)
	}
	if err := f.repo.LockJunctions(f.ctx, f.pool, map[string][]string{f.topic: {""}}); !errors.Is(err, repository.ErrInvalid) {
		t.Fatalf("LockJunctions of an empty identifier: %v, want ErrInvalid", err)
	}
}

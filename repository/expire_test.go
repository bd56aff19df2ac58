package repository_test

import (
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
)

// TestExpireSparesALeaseTakenDuringTheStatement: a task leased again by a live owner
// while an expiry statement runs (its snapshot older than the new lease, and than the
// new owner's row) is not taken back when the statement reaches it. The expiry locked
// each stale row as it reached it: PostgreSQL checked the row's new version (leased to
// the newcomer) against the statement's conditions, whose test of the owner's
// heartbeat read task_owner as of the snapshot, which lacked the newcomer, and the new
// lease was taken back while its owner ran the task. Plain PostgreSQL only: on Citus
// the expiry reads the stale owners first and takes back only their leases
// (TestExpireSparesAnOwnerRegisteredMeanwhile).
func TestExpireSparesALeaseTakenDuringTheStatement(t *testing.T) {
	if pgtest.OnCitus() {
		t.Skip("the expiry on Citus is another statement: TestExpireSparesAnOwnerRegisteredMeanwhile")
	}
	f := setup(t)
	f.newRepo("dead") // heart-beating now: stale to an expirer 10 minutes ahead
	// a bulk of the dead owner's leases, which the expiry reaches first (identifiers
	// before "z", rows before its), and the one the newcomer takes meanwhile
	const bulk = 150_000
	if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (topic, identifier, state, owner, attempt)
		SELECT $1, 'a-' || lpad(i::text, 6, '0'), 0, 'dead', 1 FROM generate_series(1, $2::int) i`, f.topic, bulk); err != nil {
		t.Fatal(err)
	}
	var target int64
	if err := f.pool.QueryRow(f.ctx, `INSERT INTO task (topic, identifier, state, owner, attempt)
		VALUES ($1, 'z', 0, 'dead', 1) RETURNING sequence`, f.topic).Scan(&target); err != nil {
		t.Fatal(err)
	}
	expirer := clockedRepo(f, "expirer", 10*time.Minute)
	done := make(chan error, 1)
	go func() {
		_, err := expirer.Expire(f.ctx, f.pool, 5*time.Minute)
		done <- err
	}()
	// the statement has its snapshot once it has locked a row (its transaction id)
	for running := false; !running; {
		if err := f.pool.QueryRow(f.ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'active' AND query LIKE '%name: TaskExpire%'
			  AND backend_xid IS NOT NULL)`).Scan(&running); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			t.Fatalf("the expiry ended before the test saw it run: %v", err)
		default:
		}
	}
	// The task is taken back and leased again by a process registered after the
	// statement began (heart-beating 10 minutes on: live to the expirer).
	clockedRepo(f, "newcomer", 10*time.Minute)
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(f.ctx) }()
	if _, err := tx.Exec(f.ctx, "SET LOCAL lock_timeout = '1s'"); err != nil {
		t.Fatal(err)
	}
	if tag, err := tx.Exec(f.ctx, `UPDATE task SET owner = 'newcomer', attempt = attempt + 1
		WHERE topic = $1 AND sequence = $2 AND state = 0`, f.topic, target); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("the new lease: %d rows, %v (the expiry reached the task first: the bulk is too small for this machine)", tag.RowsAffected(), err)
	}
	if err := tx.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := f.get(target)
	if got.State != repository.Active || got.Owner != "newcomer" || got.Attempt != 2 {
		t.Errorf("the task leased during the expiry: %v owned by %q, attempt %d; want ACTIVE, newcomer's, attempt 2", got.State, got.Owner, got.Attempt)
	}
	var left int64
	if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task WHERE topic = $1 AND state = 0 AND owner = 'dead'", f.topic).Scan(&left); err != nil || left != 0 {
		t.Errorf("the dead owner's leases after the expiry: %d left, %v; want none", left, err)
	}
}

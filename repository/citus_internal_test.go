package repository

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/sql/schema"
)

// distributing begins a transaction that stands for DistributeCitus under way: it holds
// the distribution's lock until it ends (rolled back when the test ends).
func distributing(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) })
	if _, err := tx.Exec(t.Context(), "SELECT pg_advisory_xact_lock($1, 0)", int32(citusLockClass)); err != nil {
		t.Fatal(err)
	}
	return tx
}

// TestOnCitusWaitsForADistribution: a Repository's first look at whether its database
// is distributed read "plain" while DistributeCitus ran (its function task_distributed
// not committed yet) and kept that answer: a processor started then ran the plain
// statements on the distributed tables until restarted. The look waits for the
// distribution's lock, then reads what it committed. (On plain PostgreSQL: the
// transaction below stands for DistributeCitus, whose lock it takes.)
func TestOnCitusWaitsForADistribution(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, schema.Hash(), Migrate)
	tx := distributing(t, pool)
	if _, err := tx.Exec(ctx, "CREATE FUNCTION task_distributed() RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true'"); err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		citus bool
		err   error
	}
	answered := make(chan answer, 1)
	go func() {
		citus, err := r.onCitus(ctx, pool)
		answered <- answer{citus, err}
	}()
	select {
	case a := <-answered:
		t.Fatalf("onCitus answered %v, %v while a distribution ran; want it to wait for its end", a.citus, a.err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if a := <-answered; a.err != nil || !a.citus {
		t.Fatalf("onCitus after the distribution committed: %v, %v; want distributed", a.citus, a.err)
	}
}

// TestOnCitusInATransactionDoesNotWait: in a transaction, which may hold locks of
// pgtask's tables that a distribution under way waits for, the first look does not wait
// for the distribution (the two would deadlock), and does not keep an answer read while
// one runs; a look after it ends does.
func TestOnCitusInATransactionDoesNotWait(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, schema.Hash(), Migrate)
	distribution := distributing(t, pool)
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if citus, err := r.onCitus(wait, tx); err != nil || citus {
		t.Fatalf("onCitus in a transaction while a distribution ran: %v, %v; want plain at once", citus, err)
	}
	if r.citus.Load() != citusUnknown {
		t.Fatal("the answer read while a distribution ran was kept")
	}
	if err := distribution.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if citus, err := r.onCitus(ctx, tx); err != nil || citus || r.citus.Load() != citusNo {
		t.Fatalf("onCitus once no distribution runs: %v, %v (kept %d); want plain, kept", citus, err, r.citus.Load())
	}
}

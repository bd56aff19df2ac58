package repository_test

import (
	"errors"
	"testing"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

// TestNotifyFailureAfterACommit: on Citus a delegated statement on a pool commits before
// its notification is sent, a statement of its own; when that notification fails (the
// notification queue full, the context ended) the push is done all the same, and is
// reported so: it was reported failed, nothing written, and a retry pushed the task
// twice. In a transaction the failure is the transaction's, which then commits nothing.
// On PostgreSQL the push notifies in its own statement: nothing to fail apart.
func TestNotifyFailureAfterACommit(t *testing.T) {
	// Not parallel: the fault is the package's, and no other test runs meanwhile.
	f := fixtureOn(t, pgtest.NewPool(t, schema.Hash(), migrate))
	injected := errors.New("notification queue full (injected)")
	faults := 0
	repository.SetNotifyFault(t, func() error { faults++; return injected })
	if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "once"}); err != nil {
		t.Fatalf("push on a pool whose notification failed after its commit: %v, want it done", err)
	}
	var n int
	if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task WHERE topic = $1 AND identifier = 'once'", f.topic).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d tasks of the push (%v), want 1", n, err)
	}
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(f.ctx) }()
	_, err = f.repo.Push(f.ctx, tx, f.topic, repository.Append, repository.Creation{Identifier: "in-tx"})
	if pgtest.OnCitus() && !errors.Is(err, injected) {
		t.Errorf("push in a transaction whose notification failed: %v, want the failure", err)
	}
	if (faults > 0) != pgtest.OnCitus() {
		t.Errorf("notifications sent apart from their statement: %d, on Citus: %v (only Citus sends them apart)", faults, pgtest.OnCitus())
	}
}

package repository_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/repository"
)

// TestConnInATransactionBlockOpenedInSQL: on a connection whose caller opened a
// transaction with SQL's BEGIN, an operation that needs a transaction of its own
// (Atomically, UpdateSettings, a refused Complete) takes a savepoint: it neither
// commits nor rolls back the caller's transaction, which its ROLLBACK then undoes
// whole. Before, pgx's Begin sent BEGIN (a warning) and the operation's COMMIT or
// ROLLBACK ended the caller's transaction.
func TestConnInATransactionBlockOpenedInSQL(t *testing.T) {
	f := setup(t)
	conn, err := f.pool.Acquire(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	inBlock := func(what string) {
		t.Helper()
		if s := conn.Conn().PgConn().TxStatus(); s != 'T' {
			t.Fatalf("after %s: transaction status %q, want 'T' (the caller's transaction still open)", what, s)
		}
	}
	if _, err := conn.Exec(f.ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.repo.Push(f.ctx, conn, f.topic, repository.Append, repository.Creation{Identifier: "mine"}); err != nil {
		t.Fatal(err)
	}
	if err := repository.Atomically(f.ctx, conn, func(tx pgx.Tx) error {
		_, err := f.repo.Push(f.ctx, tx, f.topic, repository.Append, repository.Creation{Identifier: "kept"})
		return err
	}); err != nil {
		t.Fatalf("Atomically: %v", err)
	}
	inBlock("Atomically")
	undo := errors.New("undo")
	if err := repository.Atomically(f.ctx, conn, func(tx pgx.Tx) error {
		if _, err := f.repo.Push(f.ctx, tx, f.topic, repository.Append, repository.Creation{Identifier: "undone"}); err != nil {
			return err
		}
		return undo
	}); !errors.Is(err, undo) {
		t.Fatalf("Atomically failing: %v, want its error", err)
	}
	inBlock("Atomically failing")
	if _, err := f.repo.UpdateSettings(f.ctx, conn, f.topic, func(s *repository.TopicSettings) { s.MaxAttempts = 7 }); err != nil {
		t.Fatalf("UpdateSettings: %v", err)
	}
	inBlock("UpdateSettings")
	_, err = f.repo.Complete(f.ctx, conn, f.topic, repository.Completion{Sequence: 1 << 40, Attempt: 1, Decision: repository.Succeed("")})
	if err == nil {
		t.Fatal("Complete of a task that does not exist: nil error")
	}
	inBlock("a refused Complete")
	var ids []string
	rows, err := conn.Query(f.ctx, "SELECT identifier FROM task WHERE topic = $1 ORDER BY sequence", f.topic)
	if err == nil {
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil || len(ids) != 2 || ids[0] != "mine" || ids[1] != "kept" {
		t.Fatalf("tasks in the caller's transaction: %v, %v; want mine and kept (undone rolled back to its savepoint)", ids, err)
	}
	if _, err := conn.Exec(f.ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task WHERE topic = $1", f.topic).Scan(&n); err != nil || n != 0 {
		t.Errorf("tasks after the caller's ROLLBACK: %d, %v; want none", n, err)
	}
	topic, err := f.repo.Topic(f.ctx, f.pool, f.topic)
	if err != nil || topic.MaxAttempts != 1 {
		t.Errorf("max attempts after the caller's ROLLBACK: %d, %v; want 1 as before", topic.MaxAttempts, err)
	}
}

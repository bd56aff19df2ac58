package repository_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgtask/pgtask/repository"
)

// TestLeased: the ACTIVE tasks of a topic under this owner, in sequence order, and
// nothing of other owners, other states or other topics.
func TestLeased(t *testing.T) {
	f := setup(t)
	f.push(repository.Append, "a", "b", "c", "d", "e", "f")
	mine := f.poll(repository.FIFO, repository.None, 3) // a, b, c
	other := f.newRepo("owner-2")
	if _, err := other.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 2); err != nil { // d, e
		t.Fatal(err)
	}
	f.complete(repository.Decision{Result: repository.Success}, mine[1]) // b is done
	if _, err := f.repo.CreateTopic(f.ctx, f.pool, "elsewhere"); err != nil {
		t.Fatal(err)
	}
	got, err := f.repo.Leased(f.ctx, f.pool, f.topic)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, task := range got {
		ids = append(ids, task.Identifier)
		if task.State != repository.Active || task.Owner != "owner-1" || task.Attempt != 1 {
			t.Errorf("task %s: state %v owner %q attempt %d", task.Identifier, task.State, task.Owner, task.Attempt)
		}
	}
	if !slices.Equal(ids, []string{"a", "c"}) {
		t.Errorf("Leased = %v, want [a c]", ids)
	}
	// They can be completed as polled tasks can.
	f.complete(repository.Decision{Result: repository.Success}, got...)
	if got, err := f.repo.Leased(f.ctx, f.pool, "elsewhere"); err != nil || len(got) != 0 {
		t.Errorf("Leased of another topic = %v, %v; want none", got, err)
	}
	if _, err := f.repo.Leased(f.ctx, f.pool, ""); !errors.Is(err, repository.ErrInvalid) {
		t.Errorf("Leased of an empty topic name: %v, want ErrInvalid", err)
	}
}

func TestUncertain(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"server error", fmt.Errorf("poll: %w", &pgconn.PgError{Code: "57P01"}), false},
		// on Citus: the coordinator lost the worker that ran the statement
		{"remote connection lost", fmt.Errorf("poll: %w", &pgconn.PgError{Code: "08006"}), true},
		{"refusal", &repository.TaskError{Op: "complete"}, false},
		{"invalid", fmt.Errorf("x: %w", repository.ErrInvalid), false},
		{"cannot connect", &pgconn.ConnectError{}, false},
		{"connection lost", fmt.Errorf("poll: %w", io.ErrUnexpectedEOF), true},
		{"deadline while waiting", fmt.Errorf("poll: %w", context.DeadlineExceeded), true},
		{"commit answered rollback", fmt.Errorf("commit: %w", pgx.ErrTxCommitRollback), false},
	} {
		if got := repository.Uncertain(tc.err); got != tc.want {
			t.Errorf("%s: Uncertain(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// TestAtomically: fn's work is committed, or undone with fn's error; inside the caller's
// transaction it is a savepoint; a COMMIT that fails is Uncertain.
func TestAtomically(t *testing.T) {
	f := setup(t)
	count := func(h repository.Handle) int {
		t.Helper()
		var n int
		if err := h.QueryRow(f.ctx, "SELECT count(*) FROM task WHERE topic = $1", f.topic).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	push := func(tx pgx.Tx) error {
		_, err := f.repo.Push(f.ctx, tx, f.topic, repository.Append, repository.Creation{Identifier: "a"})
		return err
	}
	if err := repository.Atomically(f.ctx, f.pool, push); err != nil || count(f.pool) != 1 {
		t.Fatalf("Atomically on the pool: %v, %d tasks; want 1 committed", err, count(f.pool))
	}
	refused := errors.New("refused")
	err := repository.Atomically(f.ctx, f.pool, func(tx pgx.Tx) error {
		if err := push(tx); err != nil {
			return err
		}
		return refused
	})
	if err != refused || count(f.pool) != 1 {
		t.Fatalf("fn failing: %v, %d tasks; want fn's error as it is, nothing written", err, count(f.pool))
	}
	// inside a transaction: a savepoint, the caller's transaction goes on
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(f.ctx) }()
	if err := repository.Atomically(f.ctx, tx, func(tx pgx.Tx) error { _ = push(tx); return refused }); err != refused {
		t.Fatalf("fn failing in a transaction: %v", err)
	}
	if err := repository.Atomically(f.ctx, tx, push); err != nil || count(tx) != 2 || count(f.pool) != 1 {
		t.Fatalf("in a transaction: %v, %d tasks in it, %d outside; want 2 and 1", err, count(tx), count(f.pool))
	}
	// the connection lost before the COMMIT's reply: its outcome is unknown
	conn, err := f.pool.Acquire(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	err = repository.Atomically(f.ctx, conn.Conn(), func(tx pgx.Tx) error {
		if err := push(tx); err != nil {
			return err
		}
		return tx.Conn().PgConn().Close(f.ctx)
	})
	if err == nil || !repository.Uncertain(err) {
		t.Fatalf("a COMMIT on a lost connection: %v (uncertain %v); want an error Uncertain reports", err, repository.Uncertain(err))
	}
	// a COMMIT the server answers by rolling back is certain: nothing was written
	if _, err := f.pool.Exec(f.ctx, `CREATE TABLE deferred_check (id int, CONSTRAINT deferred_check_once UNIQUE (id) DEFERRABLE INITIALLY DEFERRED);
		INSERT INTO deferred_check VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	err = repository.Atomically(f.ctx, f.pool, func(tx pgx.Tx) error {
		if err := push(tx); err != nil {
			return err
		}
		_, err := tx.Exec(f.ctx, "INSERT INTO deferred_check VALUES (1)") // checked at COMMIT
		return err
	})
	if repository.SQLState(err) != "23505" || repository.Uncertain(err) || count(f.pool) != 1 {
		t.Fatalf("a deferred constraint failing at COMMIT: %v (uncertain %v), %d tasks; want the violation, certain, nothing written",
			err, repository.Uncertain(err), count(f.pool))
	}
	err = repository.Atomically(f.ctx, f.pool, func(tx pgx.Tx) error {
		if err := push(tx); err != nil {
			return err
		}
		_, _ = tx.Exec(f.ctx, "SELECT 1/0") // the error swallowed: the transaction is aborted
		return nil
	})
	if !errors.Is(err, pgx.ErrTxCommitRollback) || repository.Uncertain(err) || count(f.pool) != 1 {
		t.Fatalf("a COMMIT of an aborted transaction: %v (uncertain %v), %d tasks; want ErrTxCommitRollback, certain, nothing written",
			err, repository.Uncertain(err), count(f.pool))
	}
}

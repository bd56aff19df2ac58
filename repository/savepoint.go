package repository

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// savepoint is the transaction begin opens inside a transaction block the caller opened
// in SQL (BEGIN) on a connection, or on a Handle of the caller's own type around one (a
// wrapper that traces, say): a savepoint whose statements, its own included, go through
// that Handle. The type's Begin would send BEGIN (a warning, nothing opened), its COMMIT
// then ending the caller's block. Each savepoint has a name of its own, and one rolled
// back to is released: an operation's savepoint begun inside another's (the caller's
// Handle given again inside Atomically, say) is never the one an outer rollback goes
// back to. It has what the repository runs in a transaction (Exec, Query, QueryRow, a
// nested Begin); CopyFrom, SendBatch and Prepare go to the Handle when it has them,
// Conn and LargeObjects are the Handle's connection's when it tells it (nil and the zero
// value otherwise).
type savepoint struct {
	h      Handle
	name   string
	closed bool
}

var (
	savepoints         atomic.Uint64
	errSavepointHandle = errors.New("not on a savepoint of a Handle of the caller's type")
)

func beginSavepoint(ctx context.Context, h Handle) (*savepoint, error) {
	sp := &savepoint{h: h, name: "pgtask_" + strconv.FormatUint(savepoints.Add(1), 10)}
	if _, err := h.Exec(ctx, "SAVEPOINT "+sp.name); err != nil {
		return nil, err
	}
	return sp, nil
}

func (sp *savepoint) Begin(ctx context.Context) (pgx.Tx, error) {
	if sp.closed {
		return nil, pgx.ErrTxClosed
	}
	return beginSavepoint(ctx, sp.h)
}

func (sp *savepoint) Commit(ctx context.Context) error {
	if sp.closed {
		return pgx.ErrTxClosed
	}
	sp.closed = true
	_, err := sp.h.Exec(ctx, "RELEASE SAVEPOINT "+sp.name)
	return err
}

func (sp *savepoint) Rollback(ctx context.Context) error {
	if sp.closed {
		return pgx.ErrTxClosed
	}
	sp.closed = true
	if _, err := sp.h.Exec(ctx, "ROLLBACK TO SAVEPOINT "+sp.name); err != nil {
		return err
	}
	_, err := sp.h.Exec(ctx, "RELEASE SAVEPOINT "+sp.name)
	return err
}

func (sp *savepoint) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if sp.closed {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	return sp.h.Exec(ctx, sql, args...)
}

func (sp *savepoint) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if sp.closed {
		return nil, pgx.ErrTxClosed
	}
	return sp.h.Query(ctx, sql, args...)
}

func (sp *savepoint) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if sp.closed {
		return errRow{pgx.ErrTxClosed}
	}
	return sp.h.QueryRow(ctx, sql, args...)
}

func (sp *savepoint) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if c, ok := sp.h.(interface {
		CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error)
	}); ok && !sp.closed {
		return c.CopyFrom(ctx, table, columns, src)
	}
	return 0, fmt.Errorf("CopyFrom: %w", errSavepointHandle)
}

func (sp *savepoint) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if c, ok := sp.h.(interface {
		SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
	}); ok && !sp.closed {
		return c.SendBatch(ctx, b)
	}
	return failedBatch{fmt.Errorf("SendBatch: %w", errSavepointHandle)}
}

func (sp *savepoint) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if c, ok := sp.h.(interface {
		Prepare(context.Context, string, string) (*pgconn.StatementDescription, error)
	}); ok && !sp.closed {
		return c.Prepare(ctx, name, sql)
	}
	return nil, fmt.Errorf("Prepare: %w", errSavepointHandle)
}

// LargeObjects are those of a pgx transaction standing for the caller's block on the
// Handle's connection, when it tells it (its begin runs SELECT 1: nothing is opened or
// ended); the zero value, whose use panics, otherwise.
func (sp *savepoint) LargeObjects() pgx.LargeObjects {
	if conn := sp.Conn(); conn != nil {
		if block, err := conn.BeginTx(context.Background(), pgx.TxOptions{BeginQuery: "SELECT 1"}); err == nil {
			return block.LargeObjects()
		}
	}
	return pgx.LargeObjects{}
}

func (sp *savepoint) Conn() *pgx.Conn {
	switch c := sp.h.(type) {
	case *pgx.Conn:
		return c
	case interface{ Conn() *pgx.Conn }:
		return c.Conn()
	}
	return nil
}

// failedBatch answers every result of a batch with its error.
type failedBatch struct{ err error }

func (b failedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b failedBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b failedBatch) QueryRow() pgx.Row                { return errRow{b.err} }
func (b failedBatch) Close() error                     { return b.err }
func (b failedBatch) Tx() pgx.Tx                       { return nil }

// errRow is a row whose Scan answers its error.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

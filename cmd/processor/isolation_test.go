package main

import (
	"context"
	"testing"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

// TestConnectReadCommitted: the processor's pool begins READ COMMITTED transactions on
// a database whose default is REPEATABLE READ, which processor.Run refuses.
func TestConnectReadCommitted(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t, schema.Hash(), repository.Migrate)
	admin, err := connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = %L', current_database(), 'repeatable read'); END $$`); err != nil {
		t.Fatal(err)
	}
	pool, err := connect(context.WithoutCancel(ctx), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var level string
	if err := pool.QueryRow(ctx, "SHOW transaction_isolation").Scan(&level); err != nil || level != "read committed" {
		t.Fatalf("a statement of the processor's pool: %q, %v; want read committed", level, err)
	}
}

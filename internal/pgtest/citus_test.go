package pgtest

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/citustest"
)

// TestCitusTemplateBuiltAgainAfterAFailure: a Citus template whose build failed after
// its databases were created is built again by the next attempt; that attempt failed
// with the database already there, and so did every later test of the process. It
// runs where the Citus harness's tests do (PGTASK_TEST_CITUS=1, which .ci/run sets).
func TestCitusTemplateBuiltAgainAfterAFailure(t *testing.T) {
	if os.Getenv(citustest.EnvVar) != "1" {
		t.Skipf("Citus tests not run (%s is not 1): %s", citustest.EnvVar, citustest.HowTo)
	}
	c := citusNodes(t)
	ctx := t.Context()
	tpl := templateName("citus " + uniqueKey(t))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, n := range c.Nodes() {
			if err := dropCitusDatabase(ctx, n, tpl); err != nil {
				t.Error(err)
			}
		}
	})
	boom := errors.New("boom")
	err := citusTemplate(ctx, c, tpl, func(ctx context.Context, pool *pgxpool.Pool) error {
		if _, err := pool.Exec(ctx, "CREATE TABLE half_done (x int)"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("the failing build: %v, want %v", err, boom)
	}
	if err := citusTemplate(ctx, c, tpl, func(ctx context.Context, pool *pgxpool.Pool) error {
		_, err := pool.Exec(ctx, "CREATE TABLE done (x int)")
		return err
	}); err != nil {
		t.Fatalf("the build after a failure: %v", err)
	}
	name := newTestDBName(time.Now())
	for _, n := range c.Nodes() {
		if err := copyDatabase(ctx, n, tpl, name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := dropCitusDatabase(ctx, n, name); err != nil {
				t.Error(err)
			}
		})
	}
	conn, err := pgx.Connect(ctx, c.Coordinator.ConnString(name))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, "SELECT relname::text FROM pg_class WHERE relname IN ('done', 'half_done') ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 1 || tables[0] != "done" {
		t.Fatalf("the copy's tables %v, want [done]", tables)
	}
}

// TestCitusTemplateKeyNamesTheMigrator: two migrators given one key get templates of
// their own on Citus, where one may distribute the tables and the other not.
func TestCitusTemplateKeyNamesTheMigrator(t *testing.T) {
	a := func(context.Context, *pgxpool.Pool) error { return nil }
	b := func(context.Context, *pgxpool.Pool) error { return nil }
	if migratorName(a) == migratorName(b) || migratorName(a) != migratorName(a) || migratorName(nil) != "none" {
		t.Fatalf("names %q, %q, %q: want two names apart, each the same every time", migratorName(a), migratorName(b), migratorName(nil))
	}
}

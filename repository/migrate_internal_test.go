package repository

import (
	"testing"

	"github.com/golang-migrate/migrate/v4"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgtest"
)

// keyFillfactors returns the fillfactor of each topic's primary-key index ("" when at the
// default), by topic.
func keyFillfactors(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	return fillfactors(t, pool, `
		SELECT tt.topic, COALESCE((SELECT o FROM unnest(c.reloptions) o WHERE o LIKE 'fillfactor=%'), '')
		FROM task_topic tt
		JOIN pg_index x ON x.indrelid = tt.partition::regclass
		JOIN pg_inherits i ON i.inhrelid = x.indexrelid AND i.inhparent = 'task_pkey'::regclass
		JOIN pg_class c ON c.oid = x.indexrelid`)
}

// heapFillfactors returns the fillfactor of each topic's partition ("" when at the
// default), by topic.
func heapFillfactors(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	return fillfactors(t, pool, `
		SELECT tt.topic, COALESCE((SELECT o FROM unnest(c.reloptions) o WHERE o LIKE 'fillfactor=%'), '')
		FROM task_topic tt JOIN pg_class c ON c.oid = tt.partition::regclass`)
}

// fillfactors runs query, which returns (topic, fillfactor option) rows, into a map.
func fillfactors(t *testing.T, pool *pgxpool.Pool, query string) map[string]string {
	t.Helper()
	rows, err := pool.Query(t.Context(), query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var topic, ff string
		if err := rows.Scan(&topic, &ff); err != nil {
			t.Fatal(err)
		}
		out[topic] = ff
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestKeyFillfactor checks migration 000006: every topic's primary key, created before
// or after it, leaves half of each leaf free for the later versions of its rows, and
// the down migration puts them back at the default.
func TestKeyFillfactor(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, "pgtask repository key fillfactor test: empty database", nil)
	steps, create := stepper(t, pool)

	steps(5)
	create("before")
	steps(1)
	create("after")
	if got := keyFillfactors(t, pool); got["before"] != "fillfactor=50" || got["after"] != "fillfactor=50" {
		t.Fatalf("key fillfactors at version 6 = %v, want fillfactor=50 for both topics", got)
	}

	steps(-1)
	create("reverted")
	if got := keyFillfactors(t, pool); got["before"] != "" || got["after"] != "" || got["reverted"] != "" {
		t.Fatalf("key fillfactors after reverting 000006 = %v, want the default for every topic", got)
	}
}

// TestHeapFillfactor checks migration 000008: every topic's table, created before or
// after it, fills its pages (the default fillfactor) and keeps its key's setting of
// 000006; the down migration puts the tables back at 80.
func TestHeapFillfactor(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, "pgtask repository heap fillfactor test: empty database", nil)
	steps, create := stepper(t, pool)

	steps(7)
	create("before")
	if got := heapFillfactors(t, pool); got["before"] != "fillfactor=80" {
		t.Fatalf("table fillfactors at version 7 = %v, want fillfactor=80", got)
	}
	steps(1)
	create("after")
	if got := heapFillfactors(t, pool); got["before"] != "" || got["after"] != "" {
		t.Fatalf("table fillfactors at version 8 = %v, want the default for both topics", got)
	}
	if got := keyFillfactors(t, pool); got["before"] != "fillfactor=50" || got["after"] != "fillfactor=50" {
		t.Fatalf("key fillfactors at version 8 = %v, want fillfactor=50 for both topics", got)
	}

	steps(-1)
	create("reverted")
	if got := heapFillfactors(t, pool); got["before"] != "fillfactor=80" || got["after"] != "fillfactor=80" || got["reverted"] != "fillfactor=80" {
		t.Fatalf("table fillfactors after reverting 000008 = %v, want fillfactor=80 for every topic", got)
	}
	if got := keyFillfactors(t, pool); got["reverted"] != "fillfactor=50" {
		t.Fatalf("key fillfactors after reverting 000008 = %v, want fillfactor=50", got)
	}
}

// stepper returns functions that migrate pool by n steps and create a topic, failing
// the test on error.
func stepper(t *testing.T, pool *pgxpool.Pool) (steps func(n int), create func(topic string)) {
	ctx := t.Context()
	steps = func(n int) {
		t.Helper()
		if err := withMigrate(ctx, pool, func(m *migrate.Migrate) error { return m.Steps(n) }); err != nil {
			t.Fatalf("migrate %+d: %v", n, err)
		}
	}
	create = func(topic string) {
		t.Helper()
		if _, err := pool.Exec(ctx, "SELECT task_topic_create($1)", topic); err != nil {
			t.Fatalf("create topic %s: %v", topic, err)
		}
	}
	return steps, create
}

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
	rows, err := pool.Query(t.Context(), `
		SELECT tt.topic, COALESCE((SELECT o FROM unnest(c.reloptions) o WHERE o LIKE 'fillfactor=%'), '')
		FROM task_topic tt
		JOIN pg_index x ON x.indrelid = tt.partition::regclass
		JOIN pg_inherits i ON i.inhrelid = x.indexrelid AND i.inhparent = 'task_pkey'::regclass
		JOIN pg_class c ON c.oid = x.indexrelid`)
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
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository key fillfactor test: empty database", nil)
	steps := func(n int) {
		t.Helper()
		if err := withMigrate(ctx, pool, func(m *migrate.Migrate) error { return m.Steps(n) }); err != nil {
			t.Fatalf("migrate %+d: %v", n, err)
		}
	}
	create := func(topic string) {
		t.Helper()
		if _, err := pool.Exec(ctx, "SELECT task_topic_create($1)", topic); err != nil {
			t.Fatalf("create topic %s: %v", topic, err)
		}
	}

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

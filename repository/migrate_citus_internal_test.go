package repository

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/sql/citus"
	"github.com/pgtask/pgtask/sql/schema"
)

// TestCitusForms fails when a migration after the schema sql/citus restates has no
// Citus form, which a distributed database would need to be migrated (migrateDistributed),
// or a form names no migration.
func TestCitusForms(t *testing.T) {
	if latest := latestMigration(); latest < citusBase {
		t.Fatalf("newest migration %d is older than the Citus base %d", latest, citusBase)
	}
	src, err := iofs.New(schema.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	forms, err := citusForms(src, citusBase, citus.Migrations)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, f := range forms {
		known[f.name] = true
	}
	names, err := fs.Glob(citus.Migrations, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if !known[name] {
			t.Errorf("sql/citus/migrations/%s is the form of no migration after version %d of sql/schema", name, citusBase)
		}
	}
}

// TestMigrateDistributed migrates a database from the version before the newest ones
// with Citus forms made for the test: on a Citus cluster (pgtest.OnCitus) a distributed
// database through Migrate's own path, on plain PostgreSQL a plain one through
// migrateDistributed itself (the forms are SQL either way).
func TestMigrateDistributed(t *testing.T) {
	t.Parallel()
	src, err := iofs.New(schema.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	// the newest migration, the one before it and the one before that: the tests
	// pretend the last one or two are pending
	latest := latestMigration()
	before, err := src.Prev(latest)
	if err != nil {
		t.Fatal(err)
	}
	earlier, err := src.Prev(before)
	if err != nil {
		t.Fatal(err)
	}
	formName := func(v uint) string {
		r, identifier, err := src.ReadUp(v)
		if err != nil {
			t.Fatal(err)
		}
		_ = r.Close()
		return fmt.Sprintf("%06d_%s.up.sql", v, identifier)
	}
	// each test its own database, at version at as far as golang-migrate knows
	start := func(t *testing.T, at uint) *pgxpool.Pool {
		pool := pgtest.NewPool(t, "pgtask repository distributed migration test: newest schema, distributed on Citus "+schema.Hash(),
			migrateDistributing)
		if _, err := pool.Exec(t.Context(), "UPDATE "+migrationsTable+" SET version = $1", int64(at)); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(t.Context(), "SELECT task_topic_create('topic')"); err != nil {
			t.Fatal(err)
		}
		return pool
	}
	migrateWith := func(t *testing.T, pool *pgxpool.Pool, forms fs.FS) error {
		if pgtest.OnCitus() {
			return migrateUp(t.Context(), pool, forms)
		}
		conn, err := pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		return migrateDistributed(t.Context(), conn, src, forms)
	}
	// version checks the recorded version, and that no session keeps the migration lock
	version := func(t *testing.T, pool *pgxpool.Pool, want uint) {
		t.Helper()
		v, dirty, err := MigrationVersion(t.Context(), pool)
		if err != nil || dirty || v != want {
			t.Fatalf("version = %d (dirty %v, %v), want %d", v, dirty, err, want)
		}
		conn, err := pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		id, _, err := migrationLock(t.Context(), conn)
		if err != nil {
			t.Fatal(err)
		}
		var held bool
		if err := conn.QueryRow(t.Context(), `SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory'
			AND ((classid::bigint << 32) | objid::bigint) = $1::bigint)`, id).Scan(&held); err != nil || held {
			t.Fatalf("the migration lock is held after migrating (%v)", err)
		}
	}
	column := func(t *testing.T, pool *pgxpool.Pool, name string) bool {
		t.Helper()
		var exists bool
		if err := pool.QueryRow(t.Context(), "SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'task_topic'::regclass AND attname = $1 AND NOT attisdropped)", name).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		return exists
	}
	addColumn := func(name string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte("ALTER TABLE task_topic ADD COLUMN " + name + " integer NOT NULL DEFAULT 7;\n" +
			"COMMENT ON COLUMN task_topic." + name + " IS 'TestMigrateDistributed';")}
	}

	t.Run("AppliesEachFormInOrderAndRecordsItsVersion", func(t *testing.T) {
		t.Parallel()
		pool := start(t, earlier)
		forms := fstest.MapFS{formName(before): addColumn("probe_a"),
			formName(latest): {Data: []byte("ALTER TABLE task_topic ALTER COLUMN probe_a SET DEFAULT 8;\n" +
				"UPDATE task_topic SET probe_a = probe_a + 1 WHERE topic = 'topic';")}}
		if err := migrateWith(t, pool, forms); err != nil {
			t.Fatal(err)
		}
		version(t, pool, latest)
		// read through the topic's shard on Citus: the column reached the workers, and
		// the second form ran after the first
		var probe int
		if err := pool.QueryRow(t.Context(), "SELECT probe_a FROM task_topic WHERE topic = 'topic'").Scan(&probe); err != nil || probe != 8 {
			t.Fatalf("probe_a = %d, %v; want 8", probe, err)
		}
		if err := migrateWith(t, pool, fstest.MapFS{}); err != nil {
			t.Fatalf("migrating again, at the newest version: %v", err)
		}
		version(t, pool, latest)
	})

	// The forms of this build, from the version functions.sql restates: on Citus the
	// functions they replace reach the nodes. task_poll_keyed (which 000023 replaces)
	// picks what it picked before, the same tasks in the same order: on plain
	// PostgreSQL, where the forms replace the plain functions, the Citus variant picks
	// what the plain one does. A fair topic's poll then still takes the keys in turns.
	t.Run("TheFormsOfThisBuildApply", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := start(t, citusBase)
		if _, err := pool.Exec(ctx, "SELECT task_topic_create('keyed')"); err != nil {
			t.Fatal(err)
		}
		keyedTasks(t, pool, "keyed")
		before := keyedPicks(t, pool, "keyed")
		// what a form after citusBase creates, a database of that version has not
		// (000025, 000039, 000040, 000045 and 000046: the functions are absent until
		// their forms put them on every node; 000030: the index)
		for _, drop := range []string{"DROP FUNCTION task_tally_writer()", "DROP INDEX task_retention",
			"DROP FUNCTION task_topic_counts(text)", "DROP FUNCTION task_topic_capped_counts(text)",
			"DROP FUNCTION task_topic_open_pass(text)", "DROP FUNCTION IF EXISTS task_citus_expire_owners(text, text[])",
			"DROP TRIGGER IF EXISTS task_schedule_topic_check ON task_schedule", "DROP FUNCTION IF EXISTS task_schedule_topic_check()"} {
			if _, err := pool.Exec(ctx, drop); err != nil {
				t.Fatal(err)
			}
		}
		// what a database before 000045 has and its form drops: task_citus_expire,
		// delegated (a stand-in of its signature)
		if _, err := pool.Exec(ctx, `CREATE FUNCTION task_citus_expire(p_topic text, p_owner text, p_live text[])
			RETURNS TABLE (expired bigint, retried bigint, notification text)
			LANGUAGE sql AS 'SELECT 0::bigint, 0::bigint, NULL::text'`); err != nil {
			t.Fatal(err)
		}
		if pgtest.OnCitus() {
			if _, err := pool.Exec(ctx, `SELECT create_distributed_function('task_citus_expire(text,text,text[])'::regprocedure,
				'p_topic', colocate_with := 'task', force_delegation := true)`); err != nil {
				t.Fatal(err)
			}
		}
		if err := migrateWith(t, pool, citus.Migrations); err != nil {
			t.Fatal(err)
		}
		version(t, pool, latest)
		sameRows(t, "picks after the forms", keyedPicks(t, pool, "keyed"), before)
		var gone bool
		if err := pool.QueryRow(ctx, "SELECT to_regprocedure('task_citus_expire(text,text,text[])') IS NULL").Scan(&gone); err != nil || !gone {
			t.Fatalf("task_citus_expire dropped by the forms: %v (%v), want true", gone, err)
		}
		if pgtest.OnCitus() {
			// 000045's function delegated to the topic's node, as DistributeCitus does
			var delegated bool
			if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_dist_object
				WHERE objid = 'task_citus_expire_owners(text,text[])'::regprocedure AND force_delegation
				  AND distribution_argument_index = 0)`).Scan(&delegated); err != nil || !delegated {
				t.Fatalf("task_citus_expire_owners delegated after the forms: %v (%v), want true", delegated, err)
			}
		}
		if bad := unguardedPlannerSettings(t, pool); len(bad) > 0 {
			t.Fatalf("after the forms, functions that turn a planner method off and leave JIT on: %v", bad)
		}
		r, err := New(Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.RegisterOwner(ctx, pool); err != nil {
			t.Fatal(err)
		}
		if _, err := r.UpdateSettings(ctx, pool, "topic", func(s *TopicSettings) { s.Fair = true }); err != nil {
			t.Fatal(err)
		}
		var pushed []Creation
		for i, key := range []string{"a", "a", "a", "b", "c", ""} {
			pushed = append(pushed, Creation{Identifier: fmt.Sprint("t", i), ConcurrencyKey: key})
		}
		if _, err := r.Push(ctx, pool, "topic", Append, pushed...); err != nil {
			t.Fatal(err)
		}
		// a round: the tasks without a key (key ''), a, b; then c, and a new round
		// where only a has tasks left
		for _, want := range [][]string{{"t0", "t3", "t5"}, {"t1", "t2", "t4"}} {
			tasks, err := r.Poll(ctx, pool, "topic", FIFO, None, 3)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, task := range tasks {
				got = append(got, task.Identifier)
			}
			if slices.Sort(got); !slices.Equal(got, want) {
				t.Fatalf("a fair poll after the forms leased %v, want %v", got, want)
			}
		}
	})

	t.Run("RefusesBeforeApplyingAnythingWhenAFormIsMissing", func(t *testing.T) {
		t.Parallel()
		pool := start(t, earlier)
		err := migrateWith(t, pool, fstest.MapFS{formName(before): addColumn("probe_b")})
		if !errors.Is(err, ErrDistributed) || !strings.Contains(err.Error(), formName(latest)) {
			t.Fatalf("err = %v, want ErrDistributed naming %s", err, formName(latest))
		}
		version(t, pool, earlier)
		if column(t, pool, "probe_b") {
			t.Fatal("the form before the missing one was applied")
		}
	})

	t.Run("ARefusedFormChangesNothingOfItself", func(t *testing.T) {
		t.Parallel()
		pool := start(t, earlier)
		forms := fstest.MapFS{formName(before): addColumn("probe_c"),
			formName(latest): {Data: []byte("ALTER TABLE task_topic ADD COLUMN probe_d integer;\nSELECT 1 / 0;")}}
		err := migrateWith(t, pool, forms)
		want := fmt.Sprintf("still at version %d", before)
		if !errors.Is(err, ErrMigrationRefused) || !strings.Contains(err.Error(), "division by zero") || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want ErrMigrationRefused with PostgreSQL's reason and %q", err, want)
		}
		version(t, pool, before)
		if !column(t, pool, "probe_c") || column(t, pool, "probe_d") {
			t.Fatal("want the first form applied and nothing of the refused one")
		}
	})

	t.Run("AnotherMigratorHoldingTheLockIsNamed", func(t *testing.T) {
		t.Parallel()
		pool := start(t, before)
		other, err := pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer other.Release()
		id, dbName, err := migrationLock(t.Context(), other)
		if err != nil {
			t.Fatal(err)
		}
		if locked, err := tryMigrationLock(t.Context(), other, id, dbName); err != nil || !locked {
			t.Fatalf("lock: %v, %v", locked, err)
		}
		err = migrateWith(t, pool, fstest.MapFS{formName(latest): addColumn("probe_e")})
		if !errors.Is(err, ErrMigrationInProgress) {
			t.Fatalf("err = %v, want ErrMigrationInProgress", err)
		}
		if err := releaseMigrationLock(t.Context(), other, id); err != nil {
			t.Fatal(err)
		}
		version(t, pool, before)
		if column(t, pool, "probe_e") {
			t.Fatal("migrated while another held the lock")
		}
	})

	t.Run("ASchemaNewerThanTheBuildIsRefused", func(t *testing.T) {
		t.Parallel()
		pool := start(t, latest+1)
		err := migrateWith(t, pool, fstest.MapFS{})
		if err == nil || !strings.Contains(err.Error(), "newer than this build") {
			t.Fatalf("err = %v, want a refusal of the newer schema", err)
		}
	})

	t.Run("DownIsRefusedOnlyOnCitus", func(t *testing.T) {
		t.Parallel()
		pool := start(t, latest)
		err := MigrateDown(t.Context(), pool)
		if pgtest.OnCitus() && !errors.Is(err, ErrDistributed) || !pgtest.OnCitus() && err != nil {
			t.Fatalf("MigrateDown: %v; want ErrDistributed on a distributed database, success on plain PostgreSQL", err)
		}
	})

	t.Run("StepsAreRefusedOnlyOnCitus", func(t *testing.T) {
		t.Parallel()
		pool := start(t, latest)
		err := MigrateTo(t.Context(), pool, latest-1)
		if pgtest.OnCitus() && !errors.Is(err, ErrDistributed) || !pgtest.OnCitus() && err != nil {
			t.Fatalf("MigrateTo(%d) from %d: %v; want ErrDistributed on a distributed database, success on plain PostgreSQL",
				latest-1, latest, err)
		}
		if !pgtest.OnCitus() {
			return
		}
		if v, _, err := MigrationVersion(t.Context(), pool); err != nil || v != latest {
			t.Fatalf("after the refusal, version %d (%v), want %d", v, err, latest)
		}
		// up, but not to the newest: the Citus forms are applied all together or not at all
		pool = start(t, latest-2)
		if err := MigrateTo(t.Context(), pool, latest-1); !errors.Is(err, ErrDistributed) {
			t.Fatalf("MigrateTo(%d) from %d: %v; want ErrDistributed", latest-1, latest-2, err)
		}
		if v, _, err := MigrationVersion(t.Context(), pool); err != nil || v != latest-2 {
			t.Fatalf("after the refusal, version %d (%v), want %d", v, err, latest-2)
		}
	})
}

func TestSplitStatements(t *testing.T) {
	for _, tc := range []struct {
		name, sql string
		want      []string
	}{
		{"Plain", "SELECT 1; SELECT 2;\n", []string{"SELECT 1", "SELECT 2"}},
		{"NoFinalSemicolon", "SELECT 1;\n  SELECT 2  ", []string{"SELECT 1", "SELECT 2"}},
		{"Strings", `SELECT 'a;b', 'it''s;'; SELECT E'\';', 'back\'; SELECT 3`, []string{`SELECT 'a;b', 'it''s;'`, `SELECT E'\';', 'back\'`, "SELECT 3"}},
		{"Identifiers", `SELECT 1 AS "x;""y"; SELECT 2`, []string{`SELECT 1 AS "x;""y"`, "SELECT 2"}},
		{"Comments", "-- a; comment\nSELECT 1; /* b; /* nested; */ c; */ SELECT 2", []string{"-- a; comment\nSELECT 1", "/* b; /* nested; */ c; */ SELECT 2"}},
		{"DollarQuotes", "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$; DO $body$ BEGIN PERFORM 'x$$;'; END $body$; SELECT $1",
			[]string{"CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$", "DO $body$ BEGIN PERFORM 'x$$;'; END $body$", "SELECT $1"}},
		{"DollarInIdentifiers", "SELECT a$b; SELECT $1, $2;", []string{"SELECT a$b", "SELECT $1, $2"}},
		{"Empty", " ;\n; ", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := statements(tc.sql); !slices.Equal(got, tc.want) {
				t.Fatalf("statements(%q) =\n%q\nwant\n%q", tc.sql, got, tc.want)
			}
		})
	}
}

// TestSplitStatementsOfEveryMigration applies every migration of sql/schema split by
// statements, one statement at a time, and compares the schema it gives with the one
// Migrate gives: the split keeps every statement of pgtask's own SQL whole.
func TestSplitStatementsOfEveryMigration(t *testing.T) {
	t.Parallel()
	if pgtest.OnCitus() {
		t.Skip("plain migrations: Citus runs their forms") // pgtest's databases there are distributed
	}
	split := pgtest.NewPool(t, "pgtask repository statements test: empty database", nil)
	whole := pgtest.NewPool(t, "pgtask repository statements test: empty database", nil)
	if err := Migrate(t.Context(), whole); err != nil {
		t.Fatal(err)
	}
	names, err := fs.Glob(schema.FS, "*.up.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("migrations: %v, %v", names, err)
	}
	for _, name := range names { // in version order: the names start with it
		sql, err := fs.ReadFile(schema.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := split.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, stmt := range statements(string(sql)) {
			if _, err := tx.Exec(t.Context(), stmt); err != nil {
				t.Fatalf("%s: %v in\n%s", name, err, stmt)
			}
		}
		if err := tx.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	// sql/citus/functions.sql is CREATE statements, each starting a line, with bodies
	// that do not
	if n, want := len(statements(citus.Functions)), len(regexp.MustCompile(`(?m)^CREATE `).FindAllString(citus.Functions, -1)); n != want {
		t.Errorf("sql/citus/functions.sql splits into %d statements, want its %d CREATEs", n, want)
	}
	const catalog = `
		SELECT p.oid::regprocedure::text || ' ' || md5(pg_get_functiondef(p.oid)) FROM pg_proc p
		WHERE p.pronamespace = 'public'::regnamespace AND p.prokind IN ('f', 'p')
		UNION ALL
		SELECT c.relname || ' ' || c.relkind::text || ' ' || coalesce(pg_get_indexdef(c.oid), '') FROM pg_class c
		WHERE c.relnamespace = 'public'::regnamespace AND c.relname NOT LIKE '%schema_migrations%'
		UNION ALL
		SELECT a.attrelid::regclass::text || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' ||
		       coalesce(pg_get_expr(d.adbin, d.adrelid), '')
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE c.relnamespace = 'public'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
		  AND c.relname NOT LIKE '%schema_migrations%'
		ORDER BY 1`
	read := func(pool *pgxpool.Pool) []string {
		rows, err := pool.Query(t.Context(), catalog)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	got, want := read(split), read(whole)
	if len(want) < 100 {
		t.Fatalf("the migrated schema has %d objects: the catalog query reads too little", len(want))
	}
	if !slices.Equal(got, want) {
		for i := 0; i < min(len(got), len(want)); i++ {
			if got[i] != want[i] {
				t.Fatalf("schemas differ at %d of %d/%d: split %q, whole %q", i, len(got), len(want), got[i], want[i])
			}
		}
		t.Fatalf("schemas differ: split has %d objects, whole %d", len(got), len(want))
	}
}

package repository

import (
	"context"
	"errors"
	"io/fs"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/golang-migrate/migrate/v4/source/iofs"
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

// TestMigrateDistributed migrates a database from version 20 with Citus forms of
// migration 21 made for the test: on a Citus cluster (pgtest.OnCitus) a distributed
// database through Migrate's own path, on plain PostgreSQL a plain one through
// migrateDistributed itself (the forms are SQL either way).
func TestMigrateDistributed(t *testing.T) {
	t.Parallel()
	const form = "000021_limited_position.up.sql"
	// each test its own database, at version 20 as far as golang-migrate knows
	start := func(t *testing.T) *pgxpool.Pool {
		pool := pgtest.NewPool(t, "pgtask repository distributed migration test: newest schema, distributed on Citus",
			func(ctx context.Context, pool *pgxpool.Pool) error {
				if err := Migrate(ctx, pool); err != nil || !pgtest.OnCitus() {
					return err
				}
				_, err := DistributeCitus(ctx, pool, CitusOptions{})
				return err
			})
		if _, err := pool.Exec(t.Context(), "UPDATE "+migrationsTable+" SET version = 20"); err != nil {
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
		src, err := iofs.New(schema.FS, ".")
		if err != nil {
			t.Fatal(err)
		}
		conn, err := pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		return migrateDistributed(t.Context(), conn, src, forms)
	}
	version := func(t *testing.T, pool *pgxpool.Pool, want uint) {
		t.Helper()
		v, dirty, err := MigrationVersion(t.Context(), pool)
		if err != nil || dirty || v != want {
			t.Fatalf("version = %d (dirty %v, %v), want %d", v, dirty, err, want)
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

	t.Run("AppliesEachFormAndRecordsItsVersion", func(t *testing.T) {
		t.Parallel()
		pool := start(t)
		forms := fstest.MapFS{form: {Data: []byte("ALTER TABLE task_topic ADD COLUMN upgrade_probe integer NOT NULL DEFAULT 7;\n" +
			"COMMENT ON COLUMN task_topic.upgrade_probe IS 'TestMigrateDistributed';")}}
		if err := migrateWith(t, pool, forms); err != nil {
			t.Fatal(err)
		}
		version(t, pool, 21)
		// read through the topic's shard on Citus: the column reached the workers
		var probe int
		if err := pool.QueryRow(t.Context(), "SELECT upgrade_probe FROM task_topic WHERE topic = 'topic'").Scan(&probe); err != nil || probe != 7 {
			t.Fatalf("upgrade_probe = %d, %v; want 7", probe, err)
		}
		if err := migrateWith(t, pool, fstest.MapFS{}); err != nil {
			t.Fatalf("migrating again, at the newest version: %v", err)
		}
	})

	t.Run("RefusesAMigrationWithoutItsForm", func(t *testing.T) {
		t.Parallel()
		pool := start(t)
		err := migrateWith(t, pool, fstest.MapFS{"000020_other.up.sql": {Data: []byte("SELECT 1")}})
		if !errors.Is(err, ErrDistributed) || !strings.Contains(err.Error(), form) {
			t.Fatalf("err = %v, want ErrDistributed naming %s", err, form)
		}
		version(t, pool, 20)
	})

	t.Run("ARefusedFormChangesNothing", func(t *testing.T) {
		t.Parallel()
		pool := start(t)
		forms := fstest.MapFS{form: {Data: []byte("ALTER TABLE task_topic ADD COLUMN upgrade_probe integer;\nSELECT 1 / 0;")}}
		err := migrateWith(t, pool, forms)
		if !errors.Is(err, ErrMigrationRefused) || !regexp.MustCompile(`division by zero.*still at version 20|still at version 20.*division by zero`).MatchString(err.Error()) {
			t.Fatalf("err = %v, want ErrMigrationRefused with PostgreSQL's reason and the version kept", err)
		}
		version(t, pool, 20)
		if column(t, pool, "upgrade_probe") {
			t.Fatal("the refused form's column exists")
		}
	})

	t.Run("DownIsRefusedOnCitus", func(t *testing.T) {
		t.Parallel()
		pool := start(t)
		err := MigrateDown(t.Context(), pool)
		if pgtest.OnCitus() != errors.Is(err, ErrDistributed) {
			t.Fatalf("MigrateDown: %v; want ErrDistributed only on a distributed database", err)
		}
	})
}

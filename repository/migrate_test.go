package repository_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gomigrate "github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

// emptyTemplate keys a template that no migrator ever touched: databases cloned from it
// start without any pgtask object, as a user's fresh database does.
const emptyTemplate = "pgtask repository migrate test: empty database"

// schemaObjects are the relations the migrations create.
var schemaObjects = []string{"task", "task_topic", "task_owner", "task_sequence", "task_pretty"}

// emptyPool returns a pool on a fresh database without any schema.
func emptyPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return pgtest.NewPool(t, emptyTemplate, nil)
}

// schemaPresent lists which of schemaObjects exist (to_regclass is NULL for a missing one).
func schemaPresent(t *testing.T, pool *pgxpool.Pool) map[string]bool {
	t.Helper()
	out := make(map[string]bool, len(schemaObjects))
	for _, name := range schemaObjects {
		var exists bool
		if err := pool.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL", name).Scan(&exists); err != nil {
			t.Fatalf("to_regclass(%s): %v", name, err)
		}
		out[name] = exists
	}
	return out
}

// tableCount counts the tables (plain or partitioned) whose names match pattern.
func tableCount(t *testing.T, pool *pgxpool.Pool, pattern string) int {
	t.Helper()
	var n int
	err := pool.QueryRow(t.Context(), `
		SELECT count(*) FROM pg_class c
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p') AND c.relname ~ $1`,
		pattern).Scan(&n)
	if err != nil {
		t.Fatalf("count tables %s: %v", pattern, err)
	}
	return n
}

// Names of the tables of the storage (migration 000009): buckets, their shared tables,
// and dedicated topics' tables.
const (
	bucketPattern    = `^task_p[0-9]{3}$`
	sharedPattern    = `^task_p[0-9]{3}_shared$`
	dedicatedPattern = `^task_[0-9a-f]{32}$`
)

func wantVersion(t *testing.T, pool *pgxpool.Pool, want uint) {
	t.Helper()
	version, dirty, err := repository.MigrationVersion(t.Context(), pool)
	if err != nil {
		t.Fatalf("migration version: %v", err)
	}
	if version != want || dirty {
		t.Fatalf("migration version = %d (dirty %v), want %d (clean)", version, dirty, want)
	}
}

// latestVersion is the number of the newest embedded migration.
func latestVersion(t *testing.T) uint {
	t.Helper()
	entries, err := schema.FS.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var latest uint64
	for _, e := range entries {
		number, _, ok := strings.Cut(e.Name(), "_")
		if v, err := strconv.ParseUint(number, 10, 64); ok && err == nil {
			latest = max(latest, v)
		}
	}
	if latest == 0 {
		t.Fatal("no migration files embedded")
	}
	return uint(latest)
}

func TestMigrate(t *testing.T) {
	t.Parallel()

	t.Run("UpDownUpOnEmptyDatabase", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := emptyPool(t)
		latest := latestVersion(t)

		for name, ok := range schemaPresent(t, pool) {
			if ok {
				t.Fatalf("fresh database already has %s", name)
			}
		}
		wantVersion(t, pool, 0)

		if err := repository.Migrate(ctx, pool); err != nil {
			t.Fatalf("migrate up: %v", err)
		}
		for name, ok := range schemaPresent(t, pool) {
			if !ok {
				t.Errorf("after migrate up, %s is missing", name)
			}
		}
		wantVersion(t, pool, latest)

		// A topic with tasks: down must remove its partition and rows too.
		repo, err := repository.New(repository.Config{Owner: "migrator"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := repo.CreateTopic(ctx, pool, "topic"); err != nil {
			t.Fatalf("initialize: %v", err)
		}
		if _, err := repo.Push(ctx, pool, "topic", repository.Append, repository.Creation{Identifier: "a"}); err != nil {
			t.Fatalf("push: %v", err)
		}
		// A topic is a row: no table of its own (dedicated ones aside), a fixed set of
		// buckets whatever the topics.
		if n := tableCount(t, pool, dedicatedPattern); n != 0 {
			t.Fatalf("tables of their own after initialize = %d, want 0", n)
		}
		if b, s := tableCount(t, pool, bucketPattern), tableCount(t, pool, sharedPattern); b != 16 || s != 16 {
			t.Fatalf("buckets, shared tables = %d, %d; want 16, 16", b, s)
		}

		if err := repository.MigrateDown(ctx, pool); err != nil {
			t.Fatalf("migrate down: %v", err)
		}
		for name, ok := range schemaPresent(t, pool) {
			if ok {
				t.Errorf("after migrate down, %s still exists", name)
			}
		}
		if n := tableCount(t, pool, `^task_`); n != 0 {
			t.Errorf("task tables after migrate down = %d, want 0", n)
		}
		wantVersion(t, pool, 0)

		if err := repository.Migrate(ctx, pool); err != nil {
			t.Fatalf("migrate up again: %v", err)
		}
		for name, ok := range schemaPresent(t, pool) {
			if !ok {
				t.Errorf("after migrate up again, %s is missing", name)
			}
		}
		wantVersion(t, pool, latest)

		// The schema is usable and fresh: the topic is gone and sequences restart at 1.
		if topics, err := repo.Topics(ctx, pool); err != nil || len(topics) != 0 {
			t.Fatalf("topics after down and up = %v, %v; want none", topics, err)
		}
		if _, err := repo.CreateTopic(ctx, pool, "topic"); err != nil {
			t.Fatalf("initialize after down and up: %v", err)
		}
		tasks, err := repo.Push(ctx, pool, "topic", repository.Append, repository.Creation{Identifier: "a"})
		if err != nil {
			t.Fatalf("push after down and up: %v", err)
		}
		if tasks[0].Sequence != 1 {
			t.Errorf("first sequence after down and up = %d, want 1", tasks[0].Sequence)
		}
	})

	t.Run("WhileAnotherMigratesFailsAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := emptyPool(t)
		release := holdMigrationLock(t, pool)

		err := repository.Migrate(ctx, pool)
		if !errors.Is(err, repository.ErrMigrationInProgress) {
			t.Fatalf("migrate while another session holds the migration lock: %v, want ErrMigrationInProgress", err)
		}
		if !strings.Contains(err.Error(), "nothing was changed") || !strings.Contains(err.Error(), "server process") {
			t.Errorf("error %q does not say who holds the lock and that nothing changed", err)
		}
		for name, ok := range schemaPresent(t, pool) {
			if ok {
				t.Errorf("refused migration created %s", name)
			}
		}
		wantVersion(t, pool, 0)

		release()
		if err := repository.Migrate(ctx, pool); err != nil {
			t.Fatalf("migrate once the other session is done: %v", err)
		}
		wantVersion(t, pool, latestVersion(t))
	})

	t.Run("UpToDateWhileAnotherHoldsTheLockSucceeds", func(t *testing.T) {
		f := setup(t)
		holdMigrationLock(t, f.pool)
		if err := repository.Migrate(f.ctx, f.pool); err != nil {
			t.Fatalf("migrate an up-to-date schema while another session holds the lock: %v", err)
		}
	})

	t.Run("AlreadyMigratedIsNoOpSuccess", func(t *testing.T) {
		f := setup(t)
		tasks := f.push(repository.Append, "a", "b")
		wantVersion(t, f.pool, latestVersion(t))

		if err := repository.Migrate(f.ctx, f.pool); err != nil {
			t.Fatalf("migrate on a migrated database: %v", err)
		}
		wantVersion(t, f.pool, latestVersion(t))
		// Nothing was touched: the tasks and the topic are still there.
		for _, task := range tasks {
			if got := f.get(task.Sequence); got.Identifier != task.Identifier || got.State != repository.Ready {
				t.Errorf("task %d after no-op migrate = %+v", task.Sequence, got)
			}
		}
		if _, err := f.repo.Topic(f.ctx, f.pool, f.topic); err != nil {
			t.Errorf("topic after no-op migrate: %v", err)
		}
	})
}

// holdMigrationLock takes, on a connection of its own, the advisory lock golang-migrate
// takes while it migrates pool's database, as a migrating process would; the returned
// function (also run at cleanup) releases it.
func holdMigrationLock(t *testing.T, pool *pgxpool.Pool) (release func()) {
	t.Helper()
	ctx := t.Context()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// the key of golang-migrate's pgx driver: database.GenerateAdvisoryLockId(database,
	// schema, schema.VersionTable)
	var db, schemaName string
	if err := conn.QueryRow(ctx, "SELECT current_database(), current_schema()").Scan(&db, &schemaName); err != nil {
		t.Fatal(err)
	}
	key, err := migrateLockKey(db, schemaName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1::bigint)", key); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			_, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1::bigint)", key)
			conn.Release()
		})
	}
	t.Cleanup(release)
	return release
}

// migrateLockKey is golang-migrate's advisory lock key for a database and schema.
func migrateLockKey(db, schemaName string) (string, error) {
	return database.GenerateAdvisoryLockId(db, schemaName, schema.VersionTable)
}

func TestSchemaMissingSaysToMigrate(t *testing.T) {
	t.Parallel()
	pool := emptyPool(t)
	repo, err := repository.New(repository.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = repo.Push(t.Context(), pool, "emails", repository.Append, repository.Creation{Identifier: "a"})
	if !errors.Is(err, repository.ErrSchemaMissing) || !strings.Contains(err.Error(), "repository.Migrate") {
		t.Fatalf("push without the schema: %v, want ErrSchemaMissing naming repository.Migrate", err)
	}
}

// earlierMigrator is golang-migrate as a release before schema.VersionTable ran it on
// pool: its default table, and these migrations.
func earlierMigrator(t *testing.T, pool *pgxpool.Pool) *gomigrate.Migrate {
	t.Helper()
	src, err := iofs.New(schema.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	driver, err := migratepgx.WithInstance(stdlib.OpenDBFromPool(pool), &migratepgx.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := gomigrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = m.Close() })
	return m
}

func TestMigrateVersionTable(t *testing.T) {
	t.Parallel()
	latest := latestVersion(t)
	exec := func(t *testing.T, pool *pgxpool.Pool, queries ...string) {
		t.Helper()
		for _, q := range queries {
			if _, err := pool.Exec(t.Context(), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	row := func(t *testing.T, pool *pgxpool.Pool, table string) (version int64, dirty bool) {
		t.Helper()
		if err := pool.QueryRow(t.Context(), "SELECT version, dirty FROM "+table).Scan(&version, &dirty); err != nil {
			t.Fatalf("the version in %s: %v", table, err)
		}
		return version, dirty
	}

	t.Run("AnApplicationsOwnGolangMigrateTableIsLeftAlone", func(t *testing.T) {
		t.Parallel()
		pool := emptyPool(t)
		// the application migrates the same database with golang-migrate's defaults
		exec(t, pool, "CREATE TABLE schema_migrations (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL)",
			"INSERT INTO schema_migrations VALUES (7, false)")
		if err := repository.Migrate(t.Context(), pool); err != nil {
			t.Fatalf("Migrate beside an application's golang-migrate at version 7: %v", err)
		}
		wantVersion(t, pool, latest)
		if v, d := row(t, pool, schema.VersionTable); v != int64(latest) || d {
			t.Errorf("%s: %d (dirty %v), want %d", schema.VersionTable, v, d, latest)
		}
		if v, d := row(t, pool, "schema_migrations"); v != 7 || d {
			t.Errorf("the application's schema_migrations: %d (dirty %v), want 7 as it was", v, d)
		}
	})

	t.Run("TheVersionAnEarlierReleaseRecordedIsAdopted", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t, schema.Hash(), repository.Migrate)
		ctx := t.Context()
		if err := repository.MigrateTo(ctx, pool, latest-1); err != nil {
			t.Fatal(err)
		}
		repo, err := repository.New(repository.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := repo.CreateTopic(ctx, pool, "kept"); err != nil {
			t.Fatal(err)
		}
		if _, err := repo.Push(ctx, pool, "kept", repository.Append, repository.Creation{Identifier: "a"}); err != nil {
			t.Fatal(err)
		}
		// as a release before the table had a name of its own left the database
		exec(t, pool, "ALTER TABLE "+schema.VersionTable+" RENAME TO schema_migrations")
		if v, dirty, err := repository.MigrationVersion(ctx, pool); err != nil || v != latest-1 || dirty {
			t.Fatalf("MigrationVersion before the adoption: %d (dirty %v), %v; want %d read from schema_migrations", v, dirty, err, latest-1)
		}
		if err := repository.Migrate(ctx, pool); err != nil {
			t.Fatalf("Migrate of a schema the earlier release migrated: %v", err)
		}
		wantVersion(t, pool, latest)
		if v, _ := row(t, pool, schema.VersionTable); v != int64(latest) {
			t.Errorf("%s: %d, want %d", schema.VersionTable, v, latest)
		}
		// a view for the earlier release's processes, which read their version there
		var kind string
		if err := pool.QueryRow(ctx, "SELECT relkind::text FROM pg_class WHERE oid = 'schema_migrations'::regclass").Scan(&kind); err != nil || kind != "v" {
			t.Errorf("schema_migrations after the adoption: relkind %q, %v; want a view", kind, err)
		}
		if v, _ := row(t, pool, "schema_migrations"); v != int64(latest) {
			t.Errorf("schema_migrations after the adoption: %d, want %d, the schema's", v, latest)
		}
		// an earlier release's migrator (golang-migrate with its default table) cannot
		// write its version there: it fails before it applies anything
		exec(t, pool, "UPDATE "+schema.VersionTable+" SET version = version - 1")
		if err := earlierMigrator(t, pool).Up(); err == nil || !strings.Contains(err.Error(), "schema_migrations") {
			t.Errorf("an earlier release's migrator on the adopted schema: %v, want it refused writing schema_migrations", err)
		}
		exec(t, pool, "UPDATE "+schema.VersionTable+" SET version = version + 1")
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM task WHERE topic = 'kept'").Scan(&n); err != nil || n != 1 {
			t.Errorf("the task pushed before: %d, %v; want 1", n, err)
		}
		if err := repository.Migrate(ctx, pool); err != nil {
			t.Fatalf("Migrate again: %v", err)
		}
		wantVersion(t, pool, latest)
		// migrating down drops everything of pgtask's, the view too
		if err := repository.MigrateDown(ctx, pool); err != nil {
			t.Fatal(err)
		}
		var left bool
		if err := pool.QueryRow(ctx, "SELECT to_regclass('schema_migrations') IS NOT NULL").Scan(&left); err != nil || left {
			t.Errorf("schema_migrations after MigrateDown: there %v, %v; want the view dropped", left, err)
		}
	})

	// A legacy table the adoption may not drop (here: a view of the operator's depends on
	// it) is copied and left as it is; the migration goes on.
	t.Run("ALegacyTableThatCannotBeDroppedIsCopied", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t, schema.Hash(), repository.Migrate)
		ctx := t.Context()
		if err := repository.MigrateTo(ctx, pool, latest-1); err != nil {
			t.Fatal(err)
		}
		exec(t, pool, "ALTER TABLE "+schema.VersionTable+" RENAME TO schema_migrations",
			"CREATE VIEW operators_view AS SELECT version FROM schema_migrations")
		if err := repository.Migrate(ctx, pool); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		wantVersion(t, pool, latest)
		var kind string
		if err := pool.QueryRow(ctx, "SELECT relkind::text FROM pg_class WHERE oid = 'schema_migrations'::regclass").Scan(&kind); err != nil || kind != "r" {
			t.Errorf("schema_migrations: relkind %q, %v; want the table left", kind, err)
		}
		if v, _ := row(t, pool, "schema_migrations"); v != int64(latest-1) {
			t.Errorf("schema_migrations: %d, want %d as it was", v, latest-1)
		}
	})

	t.Run("ASchemaNewerThanTheBuildIsRefusedSayingSo", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t, schema.Hash(), repository.Migrate)
		exec(t, pool, "UPDATE "+schema.VersionTable+" SET version = version + 1")
		err := repository.Migrate(t.Context(), pool)
		if err == nil || !strings.Contains(err.Error(), "newer than this build") || !strings.Contains(err.Error(), "nothing was changed") {
			t.Fatalf("Migrate of a schema at %d: %v; want a refusal saying the schema is newer than the build", latest+1, err)
		}
		if v, d := row(t, pool, schema.VersionTable); v != int64(latest+1) || d {
			t.Errorf("after the refusal: %d (dirty %v), want %d", v, d, latest+1)
		}
	})

	t.Run("ADirtySchemaSaysWhatToDo", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t, schema.Hash(), repository.Migrate)
		exec(t, pool, "UPDATE "+schema.VersionTable+" SET dirty = true")
		for name, run := range map[string]func() error{
			"Migrate":     func() error { return repository.Migrate(t.Context(), pool) },
			"MigrateTo":   func() error { return repository.MigrateTo(t.Context(), pool, latest-1) },
			"MigrateDown": func() error { return repository.MigrateDown(t.Context(), pool) },
		} {
			err := run()
			var dirty gomigrate.ErrDirty
			if !errors.As(err, &dirty) || dirty.Version != int(latest) ||
				!strings.Contains(err.Error(), "UPDATE "+schema.VersionTable+" SET version = N, dirty = false") {
				t.Errorf("%s of a dirty schema: %v; want migrate.ErrDirty at %d saying how to record the version", name, err, latest)
			}
		}
		if v, d := row(t, pool, schema.VersionTable); v != int64(latest) || !d {
			t.Errorf("after the refusals: %d (dirty %v), want %d, dirty", v, d, latest)
		}
		var n int
		if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM pg_tables WHERE tablename = 'task_topic'").Scan(&n); err != nil || n != 1 {
			t.Errorf("task_topic after the refusals: %d, %v; want it there", n, err)
		}
	})
}

// TestMigrationVersionUnreadable: a role granted pgtask's tables but not the table that
// records the schema's version gets ErrVersionUnreadable (the CLI then leaves its
// version check out), not a bare permission error.
func TestMigrationVersionUnreadable(t *testing.T) {
	f := setup(t)
	role := fmt.Sprintf("pgtask_no_version_%d", time.Now().UnixNano())
	if _, err := f.pool.Exec(f.ctx, fmt.Sprintf("CREATE ROLE %s; GRANT SELECT ON task_topic TO %[1]s", role)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = f.pool.Exec(context.WithoutCancel(f.ctx), fmt.Sprintf("REVOKE ALL ON task_topic FROM %s; DROP ROLE %[1]s", role))
	})
	cfg := f.pool.Config().Copy()
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET ROLE "+role)
		return err
	}
	pool, err := pgxpool.NewWithConfig(f.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, _, err := repository.MigrationVersion(f.ctx, pool); !errors.Is(err, repository.ErrVersionUnreadable) {
		t.Errorf("MigrationVersion as a role without the version table: %v, want ErrVersionUnreadable", err)
	}
	// the owner reads it
	wantVersion(t, f.pool, latestVersion(t))
}

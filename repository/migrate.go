package repository

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgtask/pgtask/sql/citus"
	"github.com/pgtask/pgtask/sql/schema"
)

// migrationsTable is where golang-migrate records the applied version.
var migrationsTable = schema.VersionTable

// legacyMigrationsTable is where releases before schema.VersionTable recorded it:
// golang-migrate's default, which an application's own migrations use as well.
// adoptVersion moves the version from there once, leaving a view of the same name; it
// is read there while it has not.
var legacyMigrationsTable = migratepgx.DefaultMigrationsTable

// Migrate applies every pending migration of sql/schema. It is the one migration entry
// point shared by the CLI, the processor, the tests and SQL users. "No change" is
// success.
//
// Each migration runs in one transaction: when PostgreSQL refuses one (a migration may
// check that it can run, e.g. 000009 that the lock table is large enough), nothing of it
// is applied, the recorded version stays at the last migration applied, and the error
// (ErrMigrationRefused) carries PostgreSQL's message and hint. While another process
// migrates the same database, Migrate fails at once with ErrMigrationInProgress instead
// of waiting, unless the schema is already up to date. A schema newer than this build,
// or one marked dirty by an interrupted migration (migrate.ErrDirty), is refused with a
// message that says what to do; nothing is changed.
//
// The version is recorded in schema.VersionTable, not in golang-migrate's default
// schema_migrations, which an application's own migrations of the same database use.
// A schema migrated by a release that recorded it there has it moved, once, a view of it
// left in schema_migrations for that release's processes (adoptVersion).
//
// On a database distributed with DistributeCitus, each pending migration is applied in
// its Citus form instead (sql/citus/migrations: the same version, restated for
// distributed tables and delegated functions); a pending migration that has none is
// refused with ErrDistributed before anything is applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return migrateUp(ctx, pool, citus.Migrations)
}

// migrateUp is Migrate with the Citus forms of the migrations taken from forms.
func migrateUp(ctx context.Context, pool *pgxpool.Pool, forms fs.FS) error {
	return withMigrate(ctx, pool, true, forms, func(m *migrate.Migrate) error { return m.Up() })
}

// MigrateDown reverts every migration, dropping all pgtask tables and their tasks, and
// the view of its version an upgrade from an earlier release left (Migrate). It refuses
// a distributed database (ErrDistributed).
func MigrateDown(ctx context.Context, pool *pgxpool.Pool) error {
	if err := withMigrate(ctx, pool, false, nil, func(m *migrate.Migrate) error { return m.Down() }); err != nil {
		return err
	}
	return dropLegacyView(ctx, pool)
}

// NewestMigration is the version of the newest migration this build has.
func NewestMigration() uint { return latestMigration() }

// MigrateTo migrates the schema to version: it reverts the migrations above it, newest
// first, or applies those up to it. Every migration after the first keeps the topics and
// their tasks when reverted; what a migration added goes with it (reverting 000016 drops
// the schedules, 000015 the limits and concurrency keys, 000017 the tallies). Version 0
// is MigrateDown, which drops everything. A version above the newest embedded migration
// is refused with ErrInvalid, a schema newer than this build is refused (run the build
// that applied it), and a distributed database can only go to the newest migration
// (ErrDistributed); nothing is changed then. As Migrate, each migration is one
// transaction; when PostgreSQL refuses one, the schema stays at the last version reached
// (ErrMigrationRefused). It moves in the direction asked for, by as many steps as the
// schema was away from version; when another process migrates meanwhile and the schema
// ends elsewhere, it reports ErrMigrationInProgress. A dirty schema is refused
// (migrate.ErrDirty).
func MigrateTo(ctx context.Context, pool *pgxpool.Pool, version uint) error {
	if version == 0 {
		return MigrateDown(ctx, pool)
	}
	latest := latestMigration()
	if version > latest {
		return fmt.Errorf("migrate: %w", invalid("version %d: the newest migration of this build is %d", version, latest))
	}
	if err := adopt(ctx, pool); err != nil {
		return err
	}
	current, dirty, err := migrationVersion(ctx, pool)
	if err != nil {
		return err
	}
	if current > latest {
		return fmt.Errorf("migrate: the schema is at version %d, newer than this build's newest migration %d: run the build that applied it (it has the down migrations); nothing was changed",
			current, latest)
	}
	if version == latest {
		return Migrate(ctx, pool)
	}
	if dirty {
		return dirtySchema{version: current}
	}
	if version == current {
		return nil
	}
	up := version > current
	if up {
		// noOtherMigrator migrates a distributed database to the newest migration only
		distributed, err := isDistributed(ctx, pool)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if distributed {
			return fmt.Errorf("migrate: %w: this database was distributed with pgtask citus enable; it can only be migrated to the newest version (%d), not to %d; nothing was changed",
				ErrDistributed, latest, version)
		}
	}
	// Steps, not Migrate(version): the version read above may be stale by the time
	// golang-migrate holds its lock (another process may migrate in between), and a
	// number of steps keeps the direction asked for, where Migrate(version) would revert
	// migrations another process had just applied.
	steps := int(version) - int(current)
	if testHookMigrateToSteps != nil {
		testHookMigrateToSteps()
	}
	err = withMigrate(ctx, pool, up, nil, func(m *migrate.Migrate) error { return m.Steps(steps) })
	var short migrate.ErrShortLimit
	if errors.As(err, &short) {
		return fmt.Errorf("migrate: %w: the schema moved while migrating to version %d (%v): another process migrated it meanwhile",
			ErrMigrationInProgress, version, err)
	}
	if err != nil {
		return err
	}
	if reached, _, err := migrationVersion(ctx, pool); err != nil {
		return err
	} else if reached != version {
		return fmt.Errorf("migrate: %w: the schema is at version %d, not %d: another process migrated it meanwhile",
			ErrMigrationInProgress, reached, version)
	}
	return nil
}

// testHookMigrate, when set (by tests only), is called as withMigrate begins, and the
// function it returns as it ends: the tests bound how many of them migrate at once (a
// migration takes a lock of every relation it touches until its commit: 877 for
// 000009, and a dozen at once filled a server's lock table at the default
// max_locks_per_transaction, failing one with "out of shared memory").
var testHookMigrate func() (done func())

// testHookMigrateToSteps, when set (by tests only), runs in MigrateTo between reading
// the version and stepping from it: where another migrator can move the schema.
var testHookMigrateToSteps func()

// MigrationVersion reports the applied migration version (0 when none) and whether a
// failed migration left the schema dirty. It reads golang-migrate's table
// (schema.VersionTable) without taking its lock, so it answers while another process
// migrates. A role that may not read that table gets ErrVersionUnreadable.
func MigrationVersion(ctx context.Context, pool *pgxpool.Pool) (version uint, dirty bool, err error) {
	return migrationVersion(ctx, pool)
}

// rowQuerier is what reads one row: a pool, a connection or a transaction.
type rowQuerier interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}

// migrationVersion is MigrationVersion on q. Until adoptVersion has copied it, the
// version of a schema an earlier release migrated is read where that release kept it.
func migrationVersion(ctx context.Context, q rowQuerier) (version uint, dirty bool, err error) {
	var table *string
	if err := q.QueryRow(ctx, versionTableQuery, migrationsTable, legacyMigrationsTable).Scan(&table); err != nil {
		return 0, false, fmt.Errorf("migrate: version: %w", err)
	}
	if table == nil {
		return 0, false, nil
	}
	var v int64
	err = q.QueryRow(ctx, "SELECT version, dirty FROM "+pgx.Identifier{*table}.Sanitize()+" LIMIT 1").Scan(&v, &dirty)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && v < 0 {
		return 0, dirty, nil
	}
	if SQLState(err) == sqlstateNoPrivilege {
		return 0, false, fmt.Errorf("migrate: version: %w: %w", ErrVersionUnreadable, err)
	}
	if err != nil {
		return 0, false, fmt.Errorf("migrate: version: %w", err)
	}
	return uint(v), dirty, nil
}

// versionTableQuery names the table that records pgtask's version ($1), or, while
// there is none and pgtask's tables are there, the table of an earlier release ($2);
// NULL when neither.
const versionTableQuery = `
	SELECT CASE WHEN to_regclass($1) IS NOT NULL THEN $1::text
	            WHEN to_regclass($2) IS NOT NULL AND to_regclass('task_topic') IS NOT NULL THEN $2::text END`

// adoptVersion moves the version of a schema migrated by a release before
// schema.VersionTable from legacyMigrationsTable into migrationsTable, once, under
// both tables' migration locks (a migrator of either release may be at work), and
// puts a view of migrationsTable in legacyMigrationsTable's place: the processes of
// that release still running read the version there, the newest one, and their
// migrator, which writes it there, fails before it changes anything (a copy left as
// it was would have told it an old version, and it would have applied its migrations
// again over newer ones, under a lock of its own). It does nothing when migrationsTable
// exists, or pgtask's tables do not (the table is then an application's own).
func adoptVersion(ctx context.Context, conn *pgxpool.Conn) error {
	var table *string
	if err := conn.QueryRow(ctx, versionTableQuery, migrationsTable, legacyMigrationsTable).Scan(&table); err != nil {
		return fmt.Errorf("migrate: version: %w", err)
	}
	if table == nil || *table != legacyMigrationsTable {
		return nil
	}
	id, dbName, err := migrationLock(ctx, conn)
	if err != nil {
		return err
	}
	legacyID, err := advisoryLockID(ctx, conn, dbName, legacyMigrationsTable)
	if err != nil {
		return err
	}
	// READ COMMITTED whatever the database's default: the version is read again after
	// the locks
	return pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		var locked bool
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1::bigint) AND pg_try_advisory_xact_lock($2::bigint)",
			id, legacyID).Scan(&locked); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if !locked {
			return fmt.Errorf("migrate: %w: another session holds a migration lock of database %q; nothing was changed, run the migration again once it is done",
				ErrMigrationInProgress, dbName)
		}
		// under the locks: another process may have adopted the version meanwhile
		if err := tx.QueryRow(ctx, versionTableQuery, migrationsTable, legacyMigrationsTable).Scan(&table); err != nil {
			return fmt.Errorf("migrate: version: %w", err)
		}
		if table == nil || *table != legacyMigrationsTable {
			return nil
		}
		mine, legacy := pgx.Identifier{migrationsTable}.Sanitize(), pgx.Identifier{legacyMigrationsTable}.Sanitize()
		if _, err := tx.Exec(ctx, "CREATE TABLE "+mine+" (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL)"); err != nil {
			return fmt.Errorf("migrate: record the version in %s: %w", migrationsTable, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+mine+" (version, dirty) SELECT version, dirty FROM "+legacy+" LIMIT 1"); err != nil {
			return fmt.Errorf("migrate: copy the version from %s to %s: %w", legacyMigrationsTable, migrationsTable, err)
		}
		// the view in the table's place, under a savepoint: a table this role may not drop
		// (another's) or that other objects depend on stays as it is, a copy
		sp, err := tx.Begin(ctx)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		for _, q := range []string{
			"DROP TABLE " + legacy,
			"CREATE VIEW " + legacy + " AS SELECT version, dirty FROM " + mine,
			"COMMENT ON VIEW " + legacy + " IS " + quoteLiteral(legacyViewComment),
		} {
			if _, err := sp.Exec(ctx, q); err != nil {
				if rerr := sp.Rollback(ctx); rerr != nil {
					return fmt.Errorf("migrate: %w", rerr)
				}
				return nil
			}
		}
		return sp.Commit(ctx)
	})
}

// legacyViewComment marks the view adoptVersion leaves in legacyMigrationsTable's
// place, which MigrateDown drops.
const legacyViewComment = "pgtask's schema version (" + schema.VersionTable + "), for the processes of releases that read it here; drop the view once none runs"

// dropLegacyView drops the view adoptVersion left, when it is there.
func dropLegacyView(ctx context.Context, pool *pgxpool.Pool) error {
	var ours bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = to_regclass($1) AND c.relkind = 'v'
		AND obj_description(c.oid, 'pg_class') = $2)`, legacyMigrationsTable, legacyViewComment).Scan(&ours); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if !ours {
		return nil
	}
	if _, err := pool.Exec(ctx, "DROP VIEW "+pgx.Identifier{legacyMigrationsTable}.Sanitize()); err != nil {
		return fmt.Errorf("migrate: drop the view %s: %w", legacyMigrationsTable, err)
	}
	return nil
}

// adopt is adoptVersion on a connection of pool.
func adopt(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	return adoptVersion(ctx, conn)
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// LatestMigration is the version of this build's newest migration: the schema its
// statements are written for.
func LatestMigration() uint { return latestMigration() }

// latestMigration is the version of the newest embedded migration.
func latestMigration() uint {
	src, err := iofs.New(schema.FS, ".")
	if err != nil {
		panic(fmt.Sprintf("migrate: read embedded migrations: %v", err)) // embedded at build time
	}
	return newest(src)
}

// newest is the version of src's newest migration (0 when it has none).
func newest(src source.Driver) uint {
	latest, err := src.First()
	if err != nil {
		return 0
	}
	for {
		next, err := src.Next(latest)
		if err != nil {
			return latest
		}
		latest = next
	}
}

// withMigrate runs fn on a golang-migrate instance over pool; up tells the direction fn
// migrates in, for restoring the version after a refused migration. A distributed
// database is migrated up with forms (migrateDistributed) instead, and not down.
func withMigrate(ctx context.Context, pool *pgxpool.Pool, up bool, forms fs.FS, fn func(*migrate.Migrate) error) (err error) {
	if testHookMigrate != nil {
		defer testHookMigrate()()
	}
	src, err := iofs.New(schema.FS, ".")
	if err != nil {
		return fmt.Errorf("migrate: read embedded migrations: %w", err)
	}
	if up {
		var version int
		if err := pool.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
			return mapError("migrate: read the server's version", err)
		}
		if err := supportedServer(version); err != nil {
			return err
		}
	}
	if done, err := noOtherMigrator(ctx, pool, src, up, forms); done || err != nil {
		return err
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	driver, err := migratepgx.WithInstance(sqlDB, &migratepgx.Config{MigrationsTable: migrationsTable})
	if err != nil {
		_ = sqlDB.Close()
		return fmt.Errorf("migrate: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		_ = driver.Close()
		return fmt.Errorf("migrate: %w", err)
	}
	defer func() {
		srcErr, dbErr := m.Close()
		if err == nil && dbErr != nil {
			err = fmt.Errorf("migrate: close: %w", dbErr)
		}
		_ = srcErr
	}()
	// golang-migrate has no context parameter; stop it at the next step boundary.
	stop := context.AfterFunc(ctx, func() {
		select {
		case m.GracefulStop <- true:
		default:
		}
	})
	defer stop()
	if err := fn(m); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		if refused, ok := refusal(m, src, up, err); ok {
			return refused
		}
		return fmt.Errorf("migrate: %w", err)
	}
	return ctx.Err()
}

// refusal turns the error of a migration PostgreSQL refused into ErrMigrationRefused,
// after setting the recorded version back to the one the schema is at. golang-migrate
// marks the version it migrates to dirty before running a migration and leaves it so
// when the migration fails; but every pgtask migration is one transaction, and an error
// the server reported (not a lost connection, whose outcome is unknown) means that
// transaction rolled back. It reports false for any other error.
func refusal(m *migrate.Migrate, src source.Driver, up bool, err error) (error, bool) {
	var dbErr database.Error
	var pgErr *pgconn.PgError
	if !errors.As(err, &dbErr) || !errors.As(dbErr.OrigErr, &pgErr) {
		return nil, false
	}
	version, dirty, verr := m.Version()
	if verr != nil || !dirty {
		return nil, false
	}
	// Up marks the failed migration's own version; down marks the version below it.
	failed, clean := version, -1
	if up {
		if prev, perr := src.Prev(version); perr == nil {
			clean = int(prev)
		}
	} else {
		next, nerr := src.Next(version)
		if nerr != nil {
			return nil, false
		}
		failed, clean = next, int(next)
	}
	if ferr := m.Force(clean); ferr != nil {
		return fmt.Errorf("migrate: migration %d refused (%s) and the version could not be set back to %d: %w",
			failed, describe(pgErr), clean, ferr), true
	}
	at := "no migration"
	if clean >= 0 {
		at = fmt.Sprintf("version %d", clean)
	}
	return fmt.Errorf("migrate: %w: migration %d changed nothing and the schema is still at %s: %s",
		ErrMigrationRefused, failed, at, describe(pgErr)), true
}

// describe renders a PostgreSQL error with its hint and SQLSTATE, not the migration's
// text (which golang-migrate's message quotes whole).
func describe(e *pgconn.PgError) string {
	var b strings.Builder
	b.WriteString(e.Message)
	if e.Detail != "" {
		b.WriteString(" (" + e.Detail + ")")
	}
	if e.Hint != "" {
		b.WriteString(". " + e.Hint)
	}
	fmt.Fprintf(&b, " (SQLSTATE %s)", e.Code)
	return b.String()
}

// noOtherMigrator fails with ErrMigrationInProgress when another session holds the
// advisory lock golang-migrate takes for this database and schema. golang-migrate itself
// would wait for that lock as long as the other migration runs (minutes for a large
// one). The check takes the lock and releases it at once; a migrator that starts in
// between is waited for, as before. When up and the schema is already at the newest
// migration, it reports done without looking at the lock: there is nothing to wait for.
// A distributed database it migrates itself (migrateDistributed, its forms), and reports
// done.
func noOtherMigrator(ctx context.Context, pool *pgxpool.Pool, src source.Driver, up bool, forms fs.FS) (done bool, err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	if err := adoptVersion(ctx, conn); err != nil {
		return false, err
	}
	if up && upToDate(ctx, conn, src) {
		return true, nil
	}
	if err := migratable(ctx, conn, src, up); err != nil {
		return false, err
	}
	// The migrations are written for plain PostgreSQL: on distributed tables their DDL
	// and function bodies would not do what they say (issue 18).
	if distributed, err := isDistributed(ctx, conn); err != nil {
		return false, fmt.Errorf("migrate: %w", err)
	} else if distributed && !up {
		version, _, _ := migrationVersion(ctx, conn)
		return false, fmt.Errorf("migrate: %w: this database was distributed with pgtask citus enable (schema version %d), and reverting its migrations is not supported; nothing was changed",
			ErrDistributed, version)
	} else if distributed {
		return true, migrateDistributed(ctx, conn, src, forms)
	}
	id, dbName, err := migrationLock(ctx, conn)
	if err != nil {
		return false, err
	}
	locked, err := tryMigrationLock(ctx, conn, id, dbName)
	if err != nil || !locked {
		return false, err
	}
	if err := releaseMigrationLock(ctx, conn, id); err != nil {
		return false, err
	}
	return false, nil
}

// migratable refuses, before golang-migrate is asked, a schema that it would refuse
// with a message that does not say what to do: one marked dirty, and (up) one newer
// than this build.
func migratable(ctx context.Context, conn *pgxpool.Conn, src source.Driver, up bool) error {
	version, dirty, err := migrationVersion(ctx, conn)
	if err != nil {
		return err
	}
	if dirty {
		return dirtySchema{version: version}
	}
	if latest := newest(src); up && version > latest {
		return newerSchema(version, latest)
	}
	return nil
}

// newerSchema refuses to migrate up a schema at version, newer than this build's
// newest migration latest.
func newerSchema(version, latest uint) error {
	return fmt.Errorf("migrate: the schema is at version %d, newer than this build's newest migration %d: a later release of pgtask migrated it; run a build at least as new to migrate it (this build's processes run on it without migrating it); nothing was changed",
		version, latest)
}

// dirtySchema is the refusal of a schema marked dirty: a migration was interrupted (its
// process killed, its connection lost) between golang-migrate's marking the version
// dirty and clean again. It unwraps to migrate.ErrDirty.
type dirtySchema struct{ version uint }

func (e dirtySchema) Error() string {
	return fmt.Sprintf("migrate: the schema is marked dirty at version %d: a migration to or from it was interrupted, and each migration being one transaction, it either committed whole or not at all. "+
		"Check whether version %d's changes are there (its file in sql/schema), record the version the schema is at (UPDATE %s SET version = N, dirty = false), and migrate again; nothing was changed",
		e.version, e.version, migrationsTable)
}

func (e dirtySchema) Unwrap() error { return migrate.ErrDirty{Version: int(e.version)} }

// migrationLock returns the advisory lock golang-migrate takes for conn's database and
// schema, and the database's name.
func migrationLock(ctx context.Context, conn *pgxpool.Conn) (id, dbName string, err error) {
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&dbName); err != nil {
		return "", "", fmt.Errorf("migrate: %w", err)
	}
	id, err = advisoryLockID(ctx, conn, dbName, migrationsTable)
	return id, dbName, err
}

// advisoryLockID is the advisory lock golang-migrate takes when it records versions in
// table, of conn's database (dbName) and schema.
func advisoryLockID(ctx context.Context, conn *pgxpool.Conn, dbName, table string) (string, error) {
	var schemaName string
	if err := conn.QueryRow(ctx, "SELECT current_schema()").Scan(&schemaName); err != nil {
		return "", fmt.Errorf("migrate: %w", err)
	}
	id, err := database.GenerateAdvisoryLockId(dbName, schemaName, table)
	if err != nil {
		return "", fmt.Errorf("migrate: %w", err)
	}
	return id, nil
}

// releaseMigrationLock releases the lock tryMigrationLock took.
func releaseMigrationLock(ctx context.Context, conn *pgxpool.Conn, id string) error {
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1::bigint)", id); err != nil {
		// a session keeping the lock would block every later migration: drop it
		_ = conn.Conn().PgConn().Close(ctx)
		return fmt.Errorf("migrate: release advisory lock: %w", err)
	}
	return nil
}

// tryMigrationLock takes the migration lock id without waiting; when another session
// holds it, it fails with ErrMigrationInProgress naming that session.
func tryMigrationLock(ctx context.Context, conn *pgxpool.Conn, id, dbName string) (bool, error) {
	var locked bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1::bigint)", id).Scan(&locked); err != nil {
		return false, fmt.Errorf("migrate: %w", err)
	}
	if locked {
		return true, nil
	}
	holder := "another session"
	var pid int32
	var seconds float64
	if err := conn.QueryRow(ctx, `
		SELECT l.pid, COALESCE(extract(epoch FROM now() - a.backend_start), 0)::float8
		FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted
		  AND ((l.classid::bigint << 32) | l.objid::bigint) = $1::bigint
		LIMIT 1`, id).Scan(&pid, &seconds); err == nil {
		holder = fmt.Sprintf("server process %d (connected %v ago)", pid, (time.Duration(seconds) * time.Second).Round(time.Second))
	}
	return false, fmt.Errorf("migrate: %w: %s holds the migration lock of database %q; nothing was changed, run the migration again once it is done",
		ErrMigrationInProgress, holder, dbName)
}

// upToDate reports whether the schema is cleanly at the newest embedded migration.
func upToDate(ctx context.Context, conn *pgxpool.Conn, src source.Driver) bool {
	latest := newest(src)
	version, dirty, err := migrationVersion(ctx, conn)
	return latest > 0 && err == nil && !dirty && version == latest
}

// MinServerVersion is the oldest PostgreSQL release pgtask's schema is written for, as
// server_version_num counts it (14.0). PostgreSQL 13's extract() returns float8, where
// the functions compare whole milliseconds in numeric.
const MinServerVersion = 140000

// supportedServer refuses a server older than MinServerVersion (server_version_num).
func supportedServer(version int) error {
	if version < MinServerVersion {
		return fmt.Errorf("migrate: %w", invalid("PostgreSQL %d.%d: pgtask needs PostgreSQL %d or later; nothing was changed",
			version/10000, version%10000, MinServerVersion/10000))
	}
	return nil
}

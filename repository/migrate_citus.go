package repository

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/golang-migrate/migrate/v4/source"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// citusBase is the schema version sql/citus/functions.sql restates: DistributeCitus was
// written for it, and every later migration needs its Citus form (migrateDistributed).
const citusBase = 21

// migrateDistributed applies the pending migrations of a database distributed by
// DistributeCitus, each in its Citus form from forms (the same file name as in
// sql/schema), in its own transaction with golang-migrate's record of the version, under
// golang-migrate's lock. It refuses, before applying anything, when a pending migration
// has no form (ErrDistributed); a form PostgreSQL refuses changes nothing of itself
// (ErrMigrationRefused) and leaves the version at the last one applied.
func migrateDistributed(ctx context.Context, conn *pgxpool.Conn, src source.Driver, forms fs.FS) error {
	version, dirty, err := migrationVersion(ctx, conn)
	if err != nil {
		return err
	}
	if dirty {
		return fmt.Errorf("migrate: the schema of this distributed database is marked dirty at version %d; nothing was changed", version)
	}
	pending, err := citusForms(src, version, forms)
	if err != nil {
		return err
	}
	id, dbName, err := migrationLock(ctx, conn)
	if err != nil {
		return err
	}
	if _, err := tryMigrationLock(ctx, conn, id, dbName); err != nil {
		return err
	}
	defer func() { _ = releaseMigrationLock(context.WithoutCancel(ctx), conn, id) }()
	// Read again under the lock: another migrator may have been done meanwhile.
	if now, _, err := migrationVersion(ctx, conn); err != nil {
		return err
	} else if now != version {
		return fmt.Errorf("migrate: %w: another session migrated this distributed database from version %d to %d meanwhile; nothing was changed, run the migration again",
			ErrMigrationInProgress, version, now)
	}
	for _, f := range pending {
		if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, f.sql); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "TRUNCATE "+migrationsTable); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+migrationsTable+" (version, dirty) VALUES ($1, false)", int64(f.version))
			return err
		}); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				return fmt.Errorf("migrate: %w: the Citus form of migration %d (%s) changed nothing and the schema is still at version %d: %s",
					ErrMigrationRefused, f.version, f.name, version, describe(pgErr))
			}
			return fmt.Errorf("migrate: the Citus form of migration %d (%s): %w", f.version, f.name, err)
		}
		version = f.version
	}
	return nil
}

// citusForm is a pending migration's Citus form.
type citusForm struct {
	version uint
	name    string
	sql     string
}

// citusForms returns the Citus forms of src's migrations after version, in order, or
// ErrDistributed naming those that have none.
func citusForms(src source.Driver, version uint, forms fs.FS) ([]citusForm, error) {
	var pending []citusForm
	var missing []string
	for v := version; ; {
		next, err := src.Next(v)
		if err != nil {
			break
		}
		v = next
		r, identifier, err := src.ReadUp(v)
		if err != nil {
			return nil, fmt.Errorf("migrate: read migration %d: %w", v, err)
		}
		_ = r.Close()
		name := fmt.Sprintf("%06d_%s.up.sql", v, identifier)
		sql, err := fs.ReadFile(forms, path.Clean(name))
		if errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, name)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("migrate: read the Citus form of migration %d: %w", v, err)
		}
		pending = append(pending, citusForm{version: v, name: name, sql: string(sql)})
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("migrate: %w: this database was distributed with pgtask citus enable (schema version %d), and no form for a distributed database (sql/citus/migrations) exists of %s; nothing was changed",
			ErrDistributed, version, strings.Join(missing, ", "))
	}
	return pending, nil
}

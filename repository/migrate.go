package repository

import (
	"context"
	"errors"
	"fmt"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgtask/pgtask/sql/schema"
)

// Migrate applies every pending migration of sql/schema. It is the one migration entry
// point shared by the CLI, the processor, the tests and SQL users. Concurrent calls are
// safe: golang-migrate serialises them with an advisory lock, and "no change" is success.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return withMigrate(ctx, pool, func(m *migrate.Migrate) error { return m.Up() })
}

// MigrateDown reverts every migration, dropping all pgtask tables and their tasks.
func MigrateDown(ctx context.Context, pool *pgxpool.Pool) error {
	return withMigrate(ctx, pool, func(m *migrate.Migrate) error { return m.Down() })
}

// MigrationVersion reports the applied migration version (0 when none) and whether a
// failed migration left the schema dirty.
func MigrationVersion(ctx context.Context, pool *pgxpool.Pool) (version uint, dirty bool, err error) {
	err = withMigrate(ctx, pool, func(m *migrate.Migrate) error {
		var err error
		version, dirty, err = m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			return nil
		}
		return err
	})
	return version, dirty, err
}

func withMigrate(ctx context.Context, pool *pgxpool.Pool, fn func(*migrate.Migrate) error) (err error) {
	src, err := iofs.New(schema.FS, ".")
	if err != nil {
		return fmt.Errorf("migrate: read embedded migrations: %w", err)
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	driver, err := migratepgx.WithInstance(sqlDB, &migratepgx.Config{})
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
		return fmt.Errorf("migrate: %w", err)
	}
	return ctx.Err()
}

package pgpool

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/repository"
)

// CheckSchema refuses a database whose schema is older than this build's, or marked
// dirty, with an error wrapping repository.ErrSchemaMissing that names both versions
// and says to run `pgtask migrate up`: a binary upgraded before the database was
// migrated failed with PostgreSQL's errors about columns and functions it did not find
// ("column w.expiry_ms does not exist"), or, in a processor, ran a limited topic's
// polls the unlimited way. binary names the program in the message. A newer schema is
// accepted (a later release migrated it), and so is a role that may not read the
// version table (repository.ErrVersionUnreadable): it runs as before.
func CheckSchema(ctx context.Context, pool *pgxpool.Pool, binary string) error {
	version, dirty, err := repository.MigrationVersion(ctx, pool)
	if errors.Is(err, repository.ErrVersionUnreadable) {
		return nil
	}
	if err != nil {
		return err
	}
	if latest := repository.LatestMigration(); version < latest || dirty {
		state := ""
		if dirty {
			state = ", dirty (a migration was interrupted)"
		}
		return fmt.Errorf("%w: the database's schema is at version %d%s and this %s needs %d: run `pgtask migrate up`",
			repository.ErrSchemaMissing, version, state, binary, latest)
	}
	return nil
}

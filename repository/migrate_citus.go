package repository

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
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
// has no form (ErrDistributed), when the schema is marked dirty, or when it is newer
// than this build knows; a form PostgreSQL refuses changes nothing of itself
// (ErrMigrationRefused) and leaves the version at the last one applied.
func migrateDistributed(ctx context.Context, conn *pgxpool.Conn, src source.Driver, forms fs.FS) error {
	id, dbName, err := migrationLock(ctx, conn)
	if err != nil {
		return err
	}
	if locked, err := tryMigrationLock(ctx, conn, id, dbName); err != nil || !locked {
		return err
	}
	defer func() { _ = releaseMigrationLock(context.WithoutCancel(ctx), conn, id) }()
	// Under the lock: another migrator may have been done meanwhile.
	version, dirty, err := migrationVersion(ctx, conn)
	if err != nil {
		return err
	}
	if dirty {
		return dirtySchema{version: version}
	}
	if version > newest(src) {
		return newerSchema(version, newest(src))
	}
	pending, err := citusForms(src, version, forms)
	if err != nil {
		return err
	}
	for _, f := range pending {
		if err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			for _, stmt := range statements(f.sql) {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return err
				}
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
			return fmt.Errorf("migrate: the Citus form of migration %d (%s), after version %d: outcome unknown (pgtask migrate version says where the schema is): %w",
				f.version, f.name, version, err)
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
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("migrate: the migration after %d: %w", v, err)
		}
		v = next
		r, identifier, err := src.ReadUp(v)
		if err != nil {
			return nil, fmt.Errorf("migrate: read migration %d: %w", v, err)
		}
		_ = r.Close()
		name := fmt.Sprintf("%06d_%s.up.sql", v, identifier)
		sql, err := fs.ReadFile(forms, name)
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

// statements splits sql into its statements, at the semicolons outside string
// constants, quoted identifiers, dollar-quoted bodies and comments. A Citus form runs
// them one at a time: Citus passes some DDL on to the workers by the text of the query
// that holds it, and the workers refuse a text of several statements.
func statements(sql string) []string {
	var out []string
	begin := 0
	add := func(end int) {
		if s := strings.TrimSpace(sql[begin:end]); s != "" {
			out = append(out, s)
		}
		begin = end + 1
	}
	for i := 0; i < len(sql); i++ {
		switch c := sql[i]; {
		case c == ';':
			add(i)
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			if n := strings.IndexByte(sql[i:], '\n'); n >= 0 {
				i += n
			} else {
				i = len(sql)
			}
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			i = commentEnd(sql, i)
		case c == '\'':
			i = quoteEnd(sql, i, i > 0 && (sql[i-1] == 'E' || sql[i-1] == 'e') && (i < 2 || !identChar(sql[i-2])))
		case c == '"':
			i = quoteEnd(sql, i, false)
		case c == '$' && (i == 0 || !identChar(sql[i-1])):
			if tag := dollarTag(sql[i:]); tag != "" {
				if n := strings.Index(sql[i+len(tag):], tag); n >= 0 {
					i += len(tag) + n + len(tag) - 1
				} else {
					i = len(sql)
				}
			}
		}
	}
	add(len(sql))
	return out
}

// commentEnd returns the index of the '/' that closes the comment opening at sql[i:]
// (comments nest), or the end of sql.
func commentEnd(sql string, i int) int {
	depth := 0
	for ; i < len(sql)-1; i++ {
		switch sql[i : i+2] {
		case "/*":
			depth++
			i++
		case "*/":
			depth--
			i++
			if depth == 0 {
				return i
			}
		}
	}
	return len(sql)
}

// quoteEnd returns the index of the quote that closes the one at sql[i] (doubled quotes
// stand for one; with backslashes, an E” string's \x escapes the next character), or the
// end of sql.
func quoteEnd(sql string, i int, backslashes bool) int {
	q := sql[i]
	for i++; i < len(sql); i++ {
		switch {
		case backslashes && sql[i] == '\\':
			i++
		case sql[i] == q && i+1 < len(sql) && sql[i+1] == q:
			i++
		case sql[i] == q:
			return i
		}
	}
	return len(sql)
}

// dollarTag returns the dollar quote ($$ or $tag$) s starts with, or "" (a parameter
// such as $1 is none).
func dollarTag(s string) string {
	for j := 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '$':
			return s[:j+1]
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80,
			c >= '0' && c <= '9' && j > 1:
		default:
			return ""
		}
	}
	return ""
}

// identChar reports whether c can be part of an unquoted identifier.
func identChar(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

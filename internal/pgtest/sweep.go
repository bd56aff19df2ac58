package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// What the sweep drops, once per test process, on the server the tests use: the test
// databases that a killed test process (kill -9, a CI timeout) never dropped, and the
// templates that no test process has used for a while (a migration changed: a new key).
const (
	// testDBAbandoned is how old a test database must be (its name carries its creation
	// time) to be swept when nobody is connected to it: far more than a test run lasts.
	testDBAbandoned = 6 * time.Hour
	// templateUnused is how long a template may go unused before it is swept. Each
	// test process that uses a template writes the time in the template's comment.
	templateUnused = 7 * 24 * time.Hour
	// usedComment starts a template's comment: the Unix time of its last use follows.
	usedComment = "pgtest: last used at "
)

// newTestDBName names a new test database after its creation time, for the sweep:
// pgtask_test_<unix seconds>_<random>.
func newTestDBName(now time.Time) string {
	return fmt.Sprintf("%s%d_%s", testDBPrefix, now.Unix(), randomHex(8))
}

// testDBCreated returns the creation time a test database's name carries; false for
// a name without one (before names carried it: created at an unknown time).
func testDBCreated(name string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(name, testDBPrefix)
	if !ok {
		return time.Time{}, false
	}
	secs, _, ok := strings.Cut(rest, "_")
	if !ok {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(n, 0), true
}

// templateLock is the advisory lock of template tpl's use: held shared while a process
// stamps its use, exclusive while the sweep decides to drop it and drops it, so that a
// sweep never drops a template whose use was stamped after the sweep read its comment.
func templateLock(tpl string) int64 {
	sum := sha256.Sum256([]byte("pgtest template use " + tpl))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// markUsed records in the template's comment that it was used at the time at, under
// the template's shared lock; false if the template is gone.
func markUsed(ctx context.Context, conn *pgx.Conn, tpl string, at time.Time) (bool, error) {
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock_shared($1)", templateLock(tpl)); err != nil {
		return false, err
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock_shared($1)", templateLock(tpl))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", tpl).Scan(&exists); err != nil || !exists {
		return false, err
	}
	// A template dropped after this look (a failed build drops its own, a test drops
	// one by hand, without this lock) only makes the comment a warning.
	_, err := conn.Exec(ctx, fmt.Sprintf("COMMENT ON DATABASE %s IS '%s%d'", ident(tpl), usedComment, at.Unix()))
	return true, err
}

// gone reports whether err says the database named is not there (any more).
func gone(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "3D000" // invalid_catalog_name
}

// markTemplateUsed is markUsed on a connection of its own, for a process about to clone
// tpl: false if the template is gone (swept meanwhile). A failure to comment is
// ignored: a user that may not comment on the template only lets it be swept (and
// built again when next needed) a week after its last recorded use.
func markTemplateUsed(ctx context.Context, admin, tpl string) (bool, error) {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return false, fmt.Errorf("connect to %s: %w", redact(admin), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var now time.Time // the server's clock, which the sweep reads too
	if err := conn.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return false, err
	}
	kept, err := markUsed(ctx, conn, tpl, now)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient privilege
		return true, nil
	}
	return kept, err
}

// errSweeping is sweep's answer when another process sweeps the server.
var errSweeping = errors.New("another process is sweeping the server")

// sweepServer sweeps the server this process used, if it found one, at the end of its
// tests (RunTests): what it could not drop is left for a later sweep, and a failure is
// told but fails nothing.
func sweepServer() {
	srvMu.Lock()
	s := srv
	srvMu.Unlock()
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := sweep(ctx, s.url, time.Time{}); err != nil && !errors.Is(err, errSweeping) {
		fmt.Fprintf(os.Stderr, "pgtest: sweeping abandoned test databases: %v\n", err)
	}
}

// sweep drops, on the server of admin, the test databases created before now −
// testDBAbandoned that nobody is connected to, and the templates last used before now
// − templateUnused (now zero: the server's clock, by which test databases are named
// and uses stamped). A template without a comment (built before templates carried
// one) is given now as its last use, so that a process of an earlier checkout that
// still clones it is not robbed of it. A template is dropped under its lock
// (templateLock), its comment read again there. One process sweeps at a time (an
// advisory lock; the others skip with errSweeping), and nothing is dropped by force:
// a database in use stays. It returns the names it dropped.
func sweep(ctx context.Context, admin string, now time.Time) ([]string, error) {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", redact(admin), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	locked, err := trySweepLock(ctx, conn)
	if err != nil {
		return nil, err
	}
	if !locked {
		return nil, errSweeping
	}
	return sweepLocked(ctx, conn, now)
}

// sweepLock is the advisory lock of the process that sweeps ("pgtestsw").
const sweepLock = 0x70677465_73747377

// trySweepLock takes sweepLock on conn, for its session, if no other session holds it.
func trySweepLock(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var locked bool
	err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(sweepLock)).Scan(&locked)
	return locked, err
}

// sweepLocked is sweep on conn, whose session holds sweepLock.
func sweepLocked(ctx context.Context, conn *pgx.Conn, now time.Time) ([]string, error) {
	if now.IsZero() {
		if err := conn.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
			return nil, err
		}
	}
	rows, err := conn.Query(ctx, `
		SELECT d.datname, COALESCE(shobj_description(d.oid, 'pg_database'), ''),
		       EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datid = d.oid)
		FROM pg_database d
		WHERE d.datname LIKE 'pgtask\_test\_%' OR d.datname LIKE 'pgtask\_tpl\_%' OR d.datname LIKE 'pgtask\_tplbuild\_%'`)
	if err != nil {
		return nil, err
	}
	type database struct {
		name, comment string
		connected     bool
	}
	dbs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (database, error) {
		var d database
		return d, r.Scan(&d.name, &d.comment, &d.connected)
	})
	if err != nil {
		return nil, err
	}
	var dropped []string
	var errs []error
	for _, d := range dbs {
		switch {
		case d.connected:
		case strings.HasPrefix(d.name, buildPrefix):
			drop, err := dropAbandonedBuild(ctx, conn, d.name)
			if err != nil {
				errs = append(errs, err)
			}
			if drop {
				dropped = append(dropped, d.name)
			}
		case strings.HasPrefix(d.name, templatePrefix):
			if _, ok := lastUsed(d.comment); !ok {
				_, err := markUsed(ctx, conn, d.name, now)
				errs = append(errs, err)
				continue
			}
			drop, err := dropStaleTemplate(ctx, conn, d.name, now)
			if err != nil {
				errs = append(errs, err)
			}
			if drop {
				dropped = append(dropped, d.name)
			}
		default:
			if created, ok := testDBCreated(d.name); !ok || now.Sub(created) < testDBAbandoned {
				continue // a name without a time: perhaps an earlier checkout's test in progress
			}
			drop, err := dropUnused(ctx, conn, d.name, false)
			if err != nil {
				errs = append(errs, err)
			}
			if drop {
				dropped = append(dropped, d.name)
			}
		}
	}
	return dropped, errors.Join(errs...)
}

// lastUsed returns the time of last use a template's comment records.
func lastUsed(comment string) (time.Time, bool) {
	used, ok := strings.CutPrefix(comment, usedComment)
	if !ok {
		return time.Time{}, false
	}
	secs, err := strconv.ParseInt(used, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(secs, 0), true
}

// dropStaleTemplate drops template tpl if, under its lock, its comment says it was last
// used before now − templateUnused; it reports whether it dropped it. A process
// stamping its use holds the lock shared: the template is then left for a later sweep.
func dropStaleTemplate(ctx context.Context, conn *pgx.Conn, tpl string, now time.Time) (bool, error) {
	var locked bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", templateLock(tpl)).Scan(&locked); err != nil || !locked {
		return false, err
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", templateLock(tpl))
	var comment string
	err := conn.QueryRow(ctx, "SELECT COALESCE(shobj_description(oid, 'pg_database'), '') FROM pg_database WHERE datname = $1", tpl).Scan(&comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if used, ok := lastUsed(comment); !ok || now.Sub(used) < templateUnused {
		return false, nil
	}
	return dropUnused(ctx, conn, tpl, true)
}

// dropAbandonedBuild drops build, a template's build database, if no process builds it:
// one whose builder was killed is otherwise dropped only when a process builds the same
// template again, never if its key (a schema's hash) is not used any more. A builder
// holds the build's lock from before it creates the database until it has renamed it.
func dropAbandonedBuild(ctx context.Context, conn *pgx.Conn, build string) (bool, error) {
	lock := buildLock(templatePrefix + strings.TrimPrefix(build, buildPrefix))
	var locked bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", lock).Scan(&locked); err != nil || !locked {
		return false, err
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lock)
	var template bool // killed while it published the build
	err := conn.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", build).Scan(&template)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return dropUnused(ctx, conn, build, template)
}

// dropUnused drops the database name unless someone is connected to it (or clones it),
// which leaves it as it was; it reports whether it dropped it. A template that could
// not be dropped, whatever the error, is a template again.
func dropUnused(ctx context.Context, conn *pgx.Conn, name string, template bool) (bool, error) {
	if template {
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident(name)+" WITH IS_TEMPLATE false"); err != nil {
			if gone(err) { // dropped since the sweep listed it
				return false, nil
			}
			return false, err
		}
	}
	_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name))
	if err == nil {
		return true, nil
	}
	if template {
		_, rerr := conn.Exec(context.WithoutCancel(ctx), "ALTER DATABASE "+ident(name)+" WITH IS_TEMPLATE true")
		err = errors.Join(err, rerr)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55006" { // in use
		return false, nil
	}
	return false, err
}

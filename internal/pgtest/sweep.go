package pgtest

import (
	"context"
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

// markUsed records in the template's comment that this process uses it now.
func markUsed(ctx context.Context, conn *pgx.Conn, tpl string, now time.Time) error {
	_, err := conn.Exec(ctx, fmt.Sprintf("COMMENT ON DATABASE %s IS '%s%d'", ident(tpl), usedComment, now.Unix()))
	return err
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
	if _, err := sweep(ctx, s.url, time.Now()); err != nil && !errors.Is(err, errSweeping) {
		fmt.Fprintf(os.Stderr, "pgtest: sweeping abandoned test databases: %v\n", err)
	}
}

// sweep drops, on the server of admin, the test databases created before now −
// testDBAbandoned that nobody is connected to, and the templates last used before now
// − templateUnused. A template without a comment (built before templates carried
// one) is given now as its last use, so that a process of an earlier checkout that
// still clones it is not robbed of it. One process sweeps at a time (an advisory
// lock; the others skip with errSweeping), and nothing is dropped by force: a database in use stays.
// It returns the names it dropped.
func sweep(ctx context.Context, admin string, now time.Time) ([]string, error) {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", redact(admin), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	const lockID = 0x70677465_73747377 // "pgtestsw"
	var locked bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(lockID)).Scan(&locked); err != nil {
		return nil, err
	}
	if !locked {
		return nil, errSweeping
	}
	rows, err := conn.Query(ctx, `
		SELECT d.datname, COALESCE(shobj_description(d.oid, 'pg_database'), ''),
		       EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datid = d.oid)
		FROM pg_database d
		WHERE d.datname LIKE 'pgtask\_test\_%' OR d.datname LIKE 'pgtask\_tpl\_%'`)
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
		case strings.HasPrefix(d.name, templatePrefix):
			used, ok := strings.CutPrefix(d.comment, usedComment)
			secs, perr := strconv.ParseInt(used, 10, 64)
			if !ok || perr != nil {
				errs = append(errs, markUsed(ctx, conn, d.name, now))
				continue
			}
			if now.Sub(time.Unix(secs, 0)) < templateUnused {
				continue
			}
			if err := dropUnused(ctx, conn, d.name, true); err != nil {
				errs = append(errs, err)
				continue
			}
			dropped = append(dropped, d.name)
		default:
			if created, ok := testDBCreated(d.name); !ok || now.Sub(created) < testDBAbandoned {
				continue // a name without a time: perhaps an earlier checkout's test in progress
			}
			if err := dropUnused(ctx, conn, d.name, false); err != nil {
				errs = append(errs, err)
				continue
			}
			dropped = append(dropped, d.name)
		}
	}
	return dropped, errors.Join(errs...)
}

// dropUnused drops the database name unless someone is connected to it (or clones it),
// which leaves it as it was.
func dropUnused(ctx context.Context, conn *pgx.Conn, name string, template bool) error {
	if template {
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident(name)+" WITH IS_TEMPLATE false"); err != nil {
			return err
		}
	}
	_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55006" { // in use
		if template {
			_, err := conn.Exec(ctx, "ALTER DATABASE "+ident(name)+" WITH IS_TEMPLATE true")
			return err
		}
		return nil
	}
	return err
}

// markTemplateUsed is markUsed on a connection of its own, for a process about to clone
// tpl. A failure is ignored: a user that may not comment on the template only lets it
// be swept (and built again when next needed) a week after its last recorded use.
func markTemplateUsed(ctx context.Context, admin, tpl string) {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_ = markUsed(ctx, conn, tpl, time.Now())
}

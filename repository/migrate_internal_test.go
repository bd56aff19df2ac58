package repository

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/sql/citus"
	"github.com/pgtask/pgtask/sql/schema"
)

// keyFillfactors returns the fillfactor of each topic's primary-key index ("" when at the
// default), by topic.
func keyFillfactors(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	return fillfactors(t, pool, `
		SELECT tt.topic, COALESCE((SELECT o FROM unnest(c.reloptions) o WHERE o LIKE 'fillfactor=%'), '')
		FROM task_topic tt
		JOIN pg_index x ON x.indrelid = tt.partition::regclass
		JOIN pg_inherits i ON i.inhrelid = x.indexrelid AND i.inhparent = 'task_pkey'::regclass
		JOIN pg_class c ON c.oid = x.indexrelid`)
}

// heapFillfactors returns the fillfactor of each topic's partition ("" when at the
// default), by topic.
func heapFillfactors(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	return fillfactors(t, pool, `
		SELECT tt.topic, COALESCE((SELECT o FROM unnest(c.reloptions) o WHERE o LIKE 'fillfactor=%'), '')
		FROM task_topic tt JOIN pg_class c ON c.oid = tt.partition::regclass`)
}

// fillfactors runs query, which returns (topic, fillfactor option) rows, into a map.
func fillfactors(t *testing.T, pool *pgxpool.Pool, query string) map[string]string {
	t.Helper()
	rows, err := pool.Query(t.Context(), query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var topic, ff string
		if err := rows.Scan(&topic, &ff); err != nil {
			t.Fatal(err)
		}
		out[topic] = ff
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestKeyFillfactor checks migration 000006: every topic's primary key, created before
// or after it, leaves half of each leaf free for the later versions of its rows, and
// the down migration puts them back at the default.
func TestKeyFillfactor(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, "pgtask repository key fillfactor test: empty database", nil)
	steps, create := stepper(t, pool)

	steps(5)
	create("before")
	steps(1)
	create("after")
	if got := keyFillfactors(t, pool); got["before"] != "fillfactor=50" || got["after"] != "fillfactor=50" {
		t.Fatalf("key fillfactors at version 6 = %v, want fillfactor=50 for both topics", got)
	}

	steps(-1)
	create("reverted")
	if got := keyFillfactors(t, pool); got["before"] != "" || got["after"] != "" || got["reverted"] != "" {
		t.Fatalf("key fillfactors after reverting 000006 = %v, want the default for every topic", got)
	}
}

// TestHeapFillfactor checks migration 000008: every topic's table, created before or
// after it, fills its pages (the default fillfactor) and keeps its key's setting of
// 000006; the down migration puts the tables back at 80.
func TestHeapFillfactor(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, "pgtask repository heap fillfactor test: empty database", nil)
	steps, create := stepper(t, pool)

	steps(7)
	create("before")
	if got := heapFillfactors(t, pool); got["before"] != "fillfactor=80" {
		t.Fatalf("table fillfactors at version 7 = %v, want fillfactor=80", got)
	}
	steps(1)
	create("after")
	if got := heapFillfactors(t, pool); got["before"] != "" || got["after"] != "" {
		t.Fatalf("table fillfactors at version 8 = %v, want the default for both topics", got)
	}
	if got := keyFillfactors(t, pool); got["before"] != "fillfactor=50" || got["after"] != "fillfactor=50" {
		t.Fatalf("key fillfactors at version 8 = %v, want fillfactor=50 for both topics", got)
	}

	steps(-1)
	create("reverted")
	if got := heapFillfactors(t, pool); got["before"] != "fillfactor=80" || got["after"] != "fillfactor=80" || got["reverted"] != "fillfactor=80" {
		t.Fatalf("table fillfactors after reverting 000008 = %v, want fillfactor=80 for every topic", got)
	}
	if got := keyFillfactors(t, pool); got["reverted"] != "fillfactor=50" {
		t.Fatalf("key fillfactors after reverting 000008 = %v, want fillfactor=50", got)
	}
}

// stepper returns functions that migrate pool by n steps and create a topic, failing
// the test on error.
func stepper(t *testing.T, pool *pgxpool.Pool) (steps func(n int), create func(topic string)) {
	ctx := t.Context()
	steps = func(n int) {
		t.Helper()
		if err := withMigrate(ctx, pool, n > 0, nil, func(m *migrate.Migrate) error { return m.Steps(n) }); err != nil {
			t.Fatalf("migrate %+d: %v", n, err)
		}
	}
	create = func(topic string) {
		t.Helper()
		if _, err := pool.Exec(ctx, "SELECT task_topic_create($1)", topic); err != nil {
			t.Fatalf("create topic %s: %v", topic, err)
		}
	}
	return steps, create
}

// migrateTo migrates the database up or down to version, or up to the latest with 0.
func migrateTo(t *testing.T, pool *pgxpool.Pool, version uint) {
	t.Helper()
	if version == 0 {
		version = latestMigration()
	}
	if err := MigrateTo(t.Context(), pool, version); err != nil {
		t.Fatalf("migrate to version %d: %v", version, err)
	}
}

// TestMigrateToMovedMeanwhile: another migrator moves the schema between MigrateTo's
// read of the version and its steps (testHookMigrateToSteps): MigrateTo does not move
// back to what it was asked for, reports ErrMigrationInProgress, and leaves the schema
// clean where the steps ended. Not parallel: it sets a package variable, and parallel
// tests run only after the sequential ones.
func TestMigrateToMovedMeanwhile(t *testing.T) {
	latest := latestMigration()
	for _, tc := range []struct {
		name     string
		from, to uint
		other    int  // the other migrator's steps
		reached  uint // where the schema ends
	}{
		// one step asked for, taken from where the other left it: past the target
		{"UpPastTheTarget", latest - 3, latest - 2, 1, latest - 1},
		// the other applied the target and more: no step left to take
		{"UpNothingLeft", latest - 2, latest - 1, 2, latest},
		{"DownPastTheTarget", latest, latest - 1, -1, latest - 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			pool := pgtest.NewPool(t, "pgtask repository migrate-to test: moved meanwhile", nil)
			if err := MigrateTo(ctx, pool, tc.from); err != nil {
				t.Fatal(err)
			}
			steps, _ := stepper(t, pool)
			testHookMigrateToSteps = func() {
				testHookMigrateToSteps = nil
				steps(tc.other) // the other migrator, on this goroutine
			}
			t.Cleanup(func() { testHookMigrateToSteps = nil })
			err := MigrateTo(ctx, pool, tc.to)
			if !errors.Is(err, ErrMigrationInProgress) || !strings.Contains(err.Error(), "another process migrated it meanwhile") {
				t.Fatalf("MigrateTo(%d) from %d, another migrator moving it by %+d: %v, want ErrMigrationInProgress",
					tc.to, tc.from, tc.other, err)
			}
			if v, dirty, err := MigrationVersion(ctx, pool); err != nil || dirty || v != tc.reached {
				t.Fatalf("after: version %d, dirty %v, %v; want %d, clean", v, dirty, err, tc.reached)
			}
		})
	}
}

// TestMigrateTo steps a database with tasks down below the schedules and the limits and
// back up, through MigrateTo: the version reached is the one asked for, the topics and
// tasks are kept each way, what the reverted migrations added is gone and comes back
// empty, and processing works at the end. A version above the newest is refused,
// changing nothing.
func TestMigrateTo(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository migrate-to test: empty database", nil)
	latest := latestMigration()
	version := func() uint {
		t.Helper()
		v, dirty, err := MigrationVersion(ctx, pool)
		if err != nil || dirty {
			t.Fatalf("version: %d, dirty %v, %v", v, dirty, err)
		}
		return v
	}
	exists := func(relation string) bool {
		t.Helper()
		var yes bool
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", relation).Scan(&yes); err != nil {
			t.Fatal(err)
		}
		return yes
	}
	if err := MigrateTo(ctx, pool, latest); err != nil || version() != latest {
		t.Fatalf("MigrateTo(%d) of an empty database: %v, at version %d", latest, err, version())
	}
	execEach(t, pool,
		"SELECT task_topic_create('t')", "SELECT task_topic_create('u')",
		"SELECT task_push('t', 'a')", "SELECT task_push('t', 'b')", "SELECT task_push('u', 'c')",
		"UPDATE task_topic SET max_attempts = 3 WHERE topic = 'u'",
		`UPDATE task t SET state = 0, owner = 'o', attempt = t.attempt + 1
		 WHERE t.topic = 't' AND t.ctid = ANY (ARRAY(SELECT task_poll_candidates('t', false, 0::smallint, 1, NULL, NULL)))`,
		// what 000015-000017 added, which goes when they are reverted
		"SELECT task_push('u', 'keyed', concurrency_key => 'tenant')",
		"UPDATE task_topic SET concurrency = 2 WHERE topic = 't'",
		"SELECT task_schedule('nightly', 't', '0 3 * * *')",
	)
	count := func(query string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, query).Scan(&n); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		return n
	}
	if count("SELECT count(*) FROM task_schedule") != 1 || count("SELECT count(*) FROM task_tally") == 0 ||
		count("SELECT count(*) FROM task WHERE concurrency_key IS NOT NULL") != 1 {
		t.Fatal("the schedule, the tallies or the keyed task were not written")
	}
	rows, settings := taskRows(t, pool), topicSettings(t, pool)
	same := func(when string) {
		t.Helper()
		sameRows(t, "tasks "+when, taskRows(t, pool), rows)
		sameRows(t, "topics "+when, topicSettings(t, pool), settings)
	}

	if err := MigrateTo(ctx, pool, 14); err != nil || version() != 14 {
		t.Fatalf("MigrateTo(14) from %d: %v, at version %d", latest, err, version())
	}
	same("at version 14")
	if exists("task_schedule") || exists("task_topic_limit") || exists("task_tally") {
		t.Error("at version 14, a table of 000015-000017 is still there")
	}
	if err := MigrateTo(ctx, pool, 14); err != nil || version() != 14 {
		t.Fatalf("MigrateTo(14) at 14: %v, at version %d", err, version())
	}
	err := MigrateTo(ctx, pool, latest+1)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "version "+strconv.Itoa(int(latest+1))) {
		t.Errorf("MigrateTo(%d) = %v, want ErrInvalid naming the version", latest+1, err)
	}
	if v := version(); v != 14 {
		t.Errorf("after the refused MigrateTo, version %d, want 14", v)
	}

	if err := MigrateTo(ctx, pool, 16); err != nil || version() != 16 {
		t.Fatalf("MigrateTo(16) from 14: %v, at version %d", err, version())
	}
	if !exists("task_schedule") || exists("task_tally") {
		t.Error("at version 16, task_schedule should be there and task_tally not")
	}
	if err := MigrateTo(ctx, pool, latest); err != nil || version() != latest {
		t.Fatalf("MigrateTo(%d) from 16: %v, at version %d", latest, err, version())
	}
	same("back at the newest version")
	if n := count(`SELECT (SELECT count(*) FROM task_schedule) + (SELECT count(*) FROM task_tally)
		+ (SELECT count(*) FROM task WHERE concurrency_key IS NOT NULL)
		+ (SELECT count(*) FROM task_topic WHERE concurrency IS NOT NULL)`); n != 0 {
		t.Errorf("back at the newest version, %d schedules, tallies, keys and limits; want none: reverting 000015-000017 dropped them", n)
	}
	var leased int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM task_poll_candidates('t', false, 0::smallint, 10, NULL, NULL)").Scan(&leased); err != nil || leased != 1 {
		t.Errorf("poll after the round trip: %d candidates, %v; want the one READY task of t", leased, err)
	}

	// a schema newer than this build: its down migrations are not here
	execEach(t, pool, "UPDATE "+migrationsTable+" SET version = version + 1")
	err = MigrateTo(ctx, pool, 14)
	if err == nil || !strings.Contains(err.Error(), "newer than this build") {
		t.Errorf("MigrateTo(14) of a schema newer than the build = %v, want a refusal", err)
	}
	if v, _, _ := MigrationVersion(ctx, pool); v != latest+1 || !exists("task_schedule") {
		t.Errorf("after the refusal, version %d (want %d), task_schedule there: %v", v, latest+1, exists("task_schedule"))
	}
}

// execEach runs each query on pool, failing the test at the first error.
func execEach(t *testing.T, pool *pgxpool.Pool, queries ...string) {
	t.Helper()
	for _, q := range queries {
		if _, err := pool.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// storageColumns lists task's columns, for comparing rows across layouts.
const storageColumns = `topic, sequence, identifier, state, descent, owner, created, completed, input, output,
	reference, priority, not_before, attempt, returned, errors, cancelled`

// taskRows returns every task as text, in sequence order.
func taskRows(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	return textRows(t, pool, "SELECT r::text FROM (SELECT "+storageColumns+" FROM task ORDER BY sequence) r")
}

// topicSettings returns every topic's settings as text (not the table that holds it,
// which a storage migration changes), by name.
func topicSettings(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	return textRows(t, pool, `SELECT r::text FROM (
		SELECT topic, created, max_attempts, backoff_base_ms, backoff_cap_ms, backoff_jitter_ms, queue_cap,
		       retention_ms, active FROM task_topic ORDER BY topic) r`)
}

func textRows(t *testing.T, pool *pgxpool.Pool, query string) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return out
}

// sameRows fails the test with the first difference between two row lists.
func sameRows(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: row %d is\n  %.300s\nwant\n  %.300s", what, i, got[i], want[i])
		}
	}
}

// upgradeTopics are the topics of TestTopicStorageUpgrade: names a relation could not
// have, and the longest allowed.
var upgradeTopics = []string{"orders", "with space", `quote'"\`, "ünïcode-✓", strings.Repeat("l", 250)}

// fillVersion8 registers upgradeTopics at schema version 8 with settings of every kind
// and 2 000 tasks in every state, every column set in some of them (large inputs that
// PostgreSQL keeps out of line among them). The last topic has no ACTIVE task.
func fillVersion8(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := t.Context()
	for _, topic := range upgradeTopics {
		if _, err := pool.Exec(ctx, "SELECT task_topic_create($1)", topic); err != nil {
			t.Fatalf("create topic %q: %v", topic, err)
		}
	}
	for _, stmt := range []string{
		`UPDATE task_topic SET max_attempts = 5, backoff_base_ms = 10, backoff_cap_ms = 999, backoff_jitter_ms = 7 WHERE topic = 'orders'`,
		`UPDATE task_topic SET queue_cap = 100000, retention_ms = 86400000 WHERE topic = 'with space'`,
		`UPDATE task_topic SET active = false WHERE topic = $1`,
	} {
		args := []any{}
		if strings.Contains(stmt, "$1") {
			args = append(args, upgradeTopics[4])
		}
		if _, err := pool.Exec(ctx, stmt, args...); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO task (topic, identifier, state, descent, owner, created, completed, input, output, reference,
		                  priority, not_before, attempt, returned, errors, cancelled)
		SELECT topic, 'id-' || (i % 37), state,
		       CASE WHEN state = 0 THEN 1 ELSE 1 + (i % 8) END,
		       CASE WHEN state = 0 OR i % 7 = 0 THEN 'owner-' || (i % 3) END,
		       now() - i * interval '1 second',
		       CASE WHEN state >= 3 THEN now() - i * interval '1 millisecond' END,
		       CASE i % 4 WHEN 0 THEN repeat('x', 3000 + i) WHEN 1 THEN '{"n": ' || i || '}' END,
		       CASE WHEN state >= 3 THEN 'out-' || i END,
		       CASE WHEN i % 5 = 0 THEN 'ref-' || (i % 7) END,
		       (i % 5) - 2,
		       CASE WHEN state = 1 AND i % 2 = 0 THEN now() + interval '1 hour' END,
		       i % 4, i % 2,
		       CASE WHEN i % 3 = 0 THEN ARRAY['first error', 'second ' || i] END,
		       state = 0 AND i % 2 = 0
		FROM (SELECT i, ($1::text[])[1 + i % 5] AS topic,
		             CASE WHEN i % 5 = 4 AND i % 9 = 0 THEN 1 ELSE i % 9 END AS state
		      FROM generate_series(1, 2000) i) g`, upgradeTopics); err != nil {
		t.Fatalf("fill tasks: %v", err)
	}
}

// TestTopicStorageUpgrade checks migration 000009 on a database that lived at version 8:
// every task (each column, sequence and state) and every topic setting survives the
// move to the shared tables; the moved tasks are found through the new indexes; the
// down migration gives every topic its partition back with every row; up again works.
func TestTopicStorageUpgrade(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository storage upgrade test: empty database", nil)
	steps, _ := stepper(t, pool)
	steps(8)
	fillVersion8(t, pool)
	tasks, settings := taskRows(t, pool), topicSettings(t, pool)
	var lastSequence int64
	if err := pool.QueryRow(ctx, "SELECT last_value FROM task_sequence").Scan(&lastSequence); err != nil {
		t.Fatal(err)
	}

	steps(1)
	sameRows(t, "tasks after 000009", taskRows(t, pool), tasks)
	sameRows(t, "topics after 000009", topicSettings(t, pool), settings)
	// every topic in its bucket's shared table, and its rows there
	misplaced := textRows(t, pool, `
		SELECT tt.topic || ': ' || t.tableoid::regclass::text || ' vs ' || tt.partition
		FROM task t JOIN task_topic tt ON tt.topic = t.topic
		WHERE t.tableoid::regclass::text <> tt.partition OR tt.partition !~ '^task_p[0-9]{3}_shared$' OR tt.dedicated
		GROUP BY 1`)
	if len(misplaced) > 0 {
		t.Fatalf("tasks not in their topic's shared table: %v", misplaced)
	}

	// The moved tasks work through the new indexes, with the code of this version, which
	// needs every migration after 000009 (none changes these rows: 000010 fixes only
	// tasks pushed suspended and never leased, the others add functions, indexes and
	// columns).
	migrateTo(t, pool, 0)
	sameRows(t, "tasks after the latest migration", taskRows(t, pool), tasks)
	repo, err := New(Config{Owner: "upgrade-test"})
	if err != nil {
		t.Fatal(err)
	}
	// without a condition: every identifier of the filled topics has an ACTIVE task,
	// which holds its READY ones back under SINGULAR_BY_IDENTIFIER (000043)
	polled, err := repo.Poll(ctx, pool, "orders", FIFO, None, 20)
	if err != nil || len(polled) == 0 {
		t.Fatalf("poll a migrated topic: %d tasks, %v", len(polled), err)
	}
	for i := 1; i < len(polled); i++ {
		a, b := polled[i-1], polled[i]
		if a.Priority > b.Priority || a.Priority == b.Priority && a.Sequence > b.Sequence {
			t.Fatalf("poll order: %d (priority %d) before %d (priority %d)", a.Sequence, a.Priority, b.Sequence, b.Priority)
		}
	}
	var completions []Completion
	for _, task := range polled {
		completions = append(completions, task.Decide(Decision{Result: Success}))
	}
	if _, err := repo.Complete(ctx, pool, "orders", completions...); err != nil {
		t.Fatalf("complete migrated tasks: %v", err)
	}
	replaced, err := repo.Push(ctx, pool, "orders", Replace, Creation{Identifier: "id-1"})
	if err != nil {
		t.Fatalf("replace: %v", err)
	}
	if replaced[0].Sequence <= lastSequence {
		t.Errorf("first sequence after the migration = %d, want above %d", replaced[0].Sequence, lastSequence)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM task WHERE topic = 'orders' AND identifier = 'id-1'
		AND sequence < $1 AND state BETWEEN 1 AND 6`, replaced[0].Sequence).Scan(&left); err != nil || left != 0 {
		t.Errorf("older READY..SUCCEEDED tasks of the replaced identifier left: %d (%v), want 0", left, err)
	}
	// A paused topic without ACTIVE tasks gets a table of its own.
	if dedicated, err := repo.Dedicate(ctx, pool, upgradeTopics[4]); err != nil || !dedicated {
		t.Fatalf("dedicate %q: %v, %v", upgradeTopics[4][:10], dedicated, err)
	}
	tasks, settings = taskRows(t, pool), topicSettings(t, pool)

	migrateTo(t, pool, 8)
	sameRows(t, "tasks after reverting 000009", taskRows(t, pool), tasks)
	sameRows(t, "topics after reverting 000009", topicSettings(t, pool), settings)
	misplaced = textRows(t, pool, `
		SELECT tt.topic FROM task_topic tt
		WHERE tt.partition <> 'task_' || md5(tt.topic)
		   OR NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhparent = 'task'::regclass AND i.inhrelid = tt.partition::regclass)
		   OR EXISTS (SELECT 1 FROM task t WHERE t.topic = tt.topic AND t.tableoid <> tt.partition::regclass)`)
	if len(misplaced) > 0 {
		t.Fatalf("topics without their own partition (or rows outside it) after reverting 000009: %q", misplaced)
	}

	migrateTo(t, pool, 0)
	sameRows(t, "tasks after 000009 again", taskRows(t, pool), tasks)
	sameRows(t, "topics after 000009 again", topicSettings(t, pool), settings)
}

// TestTopicStorageRefusesWhenLocksRunShort checks that migration 000009 stops before
// changing anything when moving the topics' partitions would take more locks than the
// lock table holds (pgtask.lock_capacity stands in for a small lock table), says which
// setting to raise, and leaves the recorded version clean so the next attempt runs.
func TestTopicStorageRefusesWhenLocksRunShort(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository storage refusal test: empty database", nil)
	steps, _ := stepper(t, pool)
	steps(8)
	fillVersion8(t, pool)
	tasks, settings := taskRows(t, pool), topicSettings(t, pool)

	cfg := pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["pgtask.lock_capacity"] = "100" // 5 topics need about 100: more than three quarters
	small, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	err = Migrate(ctx, small)
	if !errors.Is(err, ErrMigrationRefused) {
		t.Fatalf("migrate with a small lock table: %v, want ErrMigrationRefused", err)
	}
	for _, want := range []string{"5 topic partitions", "max_locks_per_transaction to at least", "53400", "still at version 8"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if version, dirty, err := MigrationVersion(ctx, pool); err != nil || version != 8 || dirty {
		t.Fatalf("version after the refusal = %d (dirty %v, %v), want 8, clean", version, dirty, err)
	}
	sameRows(t, "tasks after the refusal", taskRows(t, pool), tasks)
	sameRows(t, "topics after the refusal", topicSettings(t, pool), settings)

	if err := Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate with the lock table as it is: %v", err)
	}
	sameRows(t, "tasks after 000009", taskRows(t, pool), tasks)
}

// TestTopicStoragePartitions checks that the number of buckets is read from
// pgtask.partitions when migration 000009 runs, that the storage works with another
// number, and that a bad value is refused with nothing changed.
func TestTopicStoragePartitions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	withSetting := func(pool *pgxpool.Pool, value string) *pgxpool.Pool {
		cfg := pool.Config().Copy()
		cfg.ConnConfig.RuntimeParams["pgtask.partitions"] = value
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	buckets := func(pool *pgxpool.Pool) int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_inherits WHERE inhparent = 'task'::regclass").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	for _, bad := range []string{"0", "257", "sixteen"} {
		pool := pgtest.NewPool(t, "pgtask repository partitions test: empty database", nil)
		steps, _ := stepper(t, pool)
		steps(8)
		err := Migrate(ctx, withSetting(pool, bad))
		if !errors.Is(err, ErrMigrationRefused) || !strings.Contains(err.Error(), "pgtask.partitions") {
			t.Fatalf("pgtask.partitions=%s: %v, want ErrMigrationRefused naming the setting", bad, err)
		}
		if version, dirty, err := MigrationVersion(ctx, pool); err != nil || version != 8 || dirty {
			t.Fatalf("version after refusing pgtask.partitions=%s: %d (dirty %v, %v), want 8", bad, version, dirty, err)
		}
	}

	pool := pgtest.NewPool(t, "pgtask repository partitions test: empty database", nil)
	if err := Migrate(ctx, withSetting(pool, "4")); err != nil {
		t.Fatalf("migrate with pgtask.partitions=4: %v", err)
	}
	if n := buckets(pool); n != 4 {
		t.Fatalf("buckets = %d, want 4", n)
	}
	repo, err := New(Config{Owner: "partitions"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		topic := "topic-" + strconv.Itoa(i)
		if _, err := repo.CreateTopic(ctx, pool, topic); err != nil {
			t.Fatal(err)
		}
		if _, err := repo.Push(ctx, pool, topic, Append, Creation{Identifier: "a"}); err != nil {
			t.Fatal(err)
		}
		if got, err := repo.Poll(ctx, pool, topic, FIFO, None, 10); err != nil || len(got) != 1 {
			t.Fatalf("poll %s: %d tasks, %v", topic, len(got), err)
		}
	}
	if _, err := repo.Dedicate(ctx, pool, "topic-0"); !errors.Is(err, ErrTopicInUse) {
		t.Errorf("dedicate a topic with an ACTIVE task: %v, want ErrTopicInUse", err)
	}
	if _, err := repo.CreateTopic(ctx, pool, "heavy"); err != nil {
		t.Fatal(err)
	}
	if ok, err := repo.Dedicate(ctx, pool, "heavy"); err != nil || !ok {
		t.Fatalf("dedicate with 4 buckets: %v, %v", ok, err)
	}
}

// TestSuspendedDescentMigration checks migration 000010: tasks pushed suspended get
// descent READY from then on, existing ones only where their history is certain (still
// SUSPENDED, never leased, never completed), and the down migration restores the old
// push and leaves the rows.
func TestSuspendedDescentMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository suspended descent test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(9)
	create("t")
	var pushed, legit, released int64
	for _, q := range []struct {
		into *int64
		sql  string
	}{
		{&pushed, "SELECT task_push('t', 'pushed', suspended => true)"}, // SUSPENDED/SUSPENDED at version 9
		{&legit, `INSERT INTO task (topic, identifier, state, descent, attempt, completed, output)
		          VALUES ('t', 'legit', 4, 4, 2, now(), 'waiting') RETURNING sequence`},
		{&released, `INSERT INTO task (topic, identifier, state, descent, attempt)
		             VALUES ('t', 'released', 1, 4, 0) RETURNING sequence`},
	} {
		if err := pool.QueryRow(ctx, q.sql).Scan(q.into); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	descent := func(seq int64) (state, d int16) {
		t.Helper()
		if err := pool.QueryRow(ctx, "SELECT state, descent FROM task WHERE sequence = $1", seq).Scan(&state, &d); err != nil {
			t.Fatal(err)
		}
		return state, d
	}
	if s, d := descent(pushed); s != 4 || d != 4 {
		t.Fatalf("a suspended push at version 9 = %d/%d, want 4/4 (the deviation 000010 fixes)", s, d)
	}

	steps(1)
	for _, c := range []struct {
		name     string
		seq      int64
		state, d int16
	}{
		{"pushed suspended, never leased", pushed, 4, 1},
		{"suspended after attempts", legit, 4, 4},
		{"READY after a release or a reset", released, 1, 4},
	} {
		if s, d := descent(c.seq); s != c.state || d != c.d {
			t.Errorf("%s after 000010: %d/%d, want %d/%d", c.name, s, d, c.state, c.d)
		}
	}
	var fresh int64
	if err := pool.QueryRow(ctx, "SELECT task_push('t', 'fresh', suspended => true)").Scan(&fresh); err != nil {
		t.Fatal(err)
	}
	if s, d := descent(fresh); s != 4 || d != 1 {
		t.Errorf("a suspended push at version 10 = %d/%d, want 4/1", s, d)
	}

	steps(-1)
	if s, d := descent(pushed); s != 4 || d != 1 {
		t.Errorf("the fixed row after reverting 000010 = %d/%d, want it left 4/1", s, d)
	}
	var old int64
	if err := pool.QueryRow(ctx, "SELECT task_push('t', 'old', suspended => true)").Scan(&old); err != nil {
		t.Fatal(err)
	}
	if s, d := descent(old); s != 4 || d != 4 {
		t.Errorf("a suspended push after reverting 000010 = %d/%d, want 4/4 as at version 9", s, d)
	}
}

// TestDueWakeupsMigration checks migration 000013 on a database of version 12 with rows:
// the delayed READY tasks already there are found by the next-due probe through the new
// index, completions that make tasks READY notify, and down and up again keep every row.
func TestDueWakeupsMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository due wake-ups test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(12)
	create("t")
	create("u")
	execEach(t, pool,
		"SELECT task_push('t', 'now')",
		"SELECT task_push('t', 'soon', delay => '1 hour')",
		"SELECT task_push('t', 'later', delay => '2 hours')",
		"SELECT task_push('u', 'other', delay => '10 minutes')",
		"SELECT task_push('t', 'held', suspended => true)",
		`INSERT INTO task (topic, identifier, state, descent, not_before, completed)
		 VALUES ('t', 'done', 6, 1, now() + interval '1 minute', now())`,
	)
	tasks := taskRows(t, pool)

	steps(1)
	sameRows(t, "tasks after 000013", taskRows(t, pool), tasks)
	var entries int64
	if err := pool.QueryRow(ctx, `
		SELECT sum((SELECT count(*) FROM task t WHERE t.tableoid = i.indrelid AND t.state = 1 AND t.not_before IS NOT NULL))
		FROM pg_partition_tree('task_delayed') p JOIN pg_index i ON i.indexrelid = p.relid
		WHERE p.isleaf`).Scan(&entries); err != nil {
		t.Fatal(err)
	}
	if entries != 3 {
		t.Errorf("task_delayed covers %d delayed READY tasks, want 3 (every table holding tasks has the index)", entries)
	}
	// the probe of version 13 (NextDue's statement before migration 000019 moved it into
	// a function)
	for topic, want := range map[string]time.Duration{"t": time.Hour, "u": 10 * time.Minute} {
		var ms int64
		err := pool.QueryRow(ctx, `SELECT ceil(extract(epoch FROM t.not_before - clock_timestamp()) * 1000)::bigint
			FROM task t WHERE hashtext(t.topic) = hashtext($1) AND t.topic = $1 AND t.state = 1 AND t.not_before IS NOT NULL
			ORDER BY t.not_before LIMIT 1`, topic).Scan(&ms)
		if delay := time.Duration(ms) * time.Millisecond; err != nil || delay <= want-time.Minute || delay > want {
			t.Errorf("next due in topic %s after 000013 = %v, %v; want about %v", topic, delay, err, want)
		}
	}
	tasks = taskRows(t, pool)

	steps(-1)
	sameRows(t, "tasks after reverting 000013", taskRows(t, pool), tasks)
	var index *string
	if err := pool.QueryRow(ctx, "SELECT to_regclass('task_delayed')::text").Scan(&index); err != nil || index != nil {
		t.Errorf("task_delayed after reverting 000013: %v, %v; want gone", index, err)
	}
	steps(1)
	sameRows(t, "tasks after 000013 again", taskRows(t, pool), tasks)
}

// TestDefaultRetriesMigration upgrades a database at schema version 13, with topics and
// tasks in every state (written by SQL, as that version had them), through 000014: every
// topic keeps its settings and every task its row, a topic created afterwards retries a
// failure (25 attempts) where an old one does not, and going back restores the old
// default for topics created later without touching the new ones.
func TestDefaultRetriesMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository default retries test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(13)
	create("old-default")
	create("configured")
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`UPDATE task_topic SET max_attempts = 3, backoff_base_ms = 2000, backoff_cap_ms = 60000, backoff_jitter_ms = 1000,
		queue_cap = 1000, retention_ms = 3600000 WHERE topic = 'configured'`)
	// Tasks in every state but EXPIRED in both topics: READY (one delayed), SUSPENDED,
	// ACTIVE, and completed with every result.
	for _, topic := range []string{"old-default", "configured"} {
		exec("SELECT task_push($1, 'ok', '{\"n\":1}')", topic)
		exec("SELECT task_push($1, 'later', delay => '1 hour')", topic)
		exec("SELECT task_push($1, 'parked', suspended => true)", topic)
		exec(`INSERT INTO task (topic, identifier, state, descent, owner, attempt, priority)
			VALUES ($1, 'running', 0, 1, 'upgrader', 1, 5)`, topic)
		exec(`INSERT INTO task (topic, identifier, state, descent, attempt, completed, output, errors, reference)
			VALUES ($1, 'fail', 3, 1, 1, now(), 'boom', '{boom}', NULL), ($1, 'skip', 5, 1, 1, now(), 'no', '{}', NULL),
			       ($1, 'wait', 4, 1, 1, now(), 'later', '{}', 'ref'), ($1, 'done', 6, 1, 1, now(), 'done', '{}', NULL)`, topic)
	}
	settingsBefore, rowsBefore := topicSettings(t, pool), taskRows(t, pool)

	steps(1)
	wantVersion := func(want int64) {
		t.Helper()
		var v int64
		if err := pool.QueryRow(ctx, "SELECT version FROM "+migrationsTable).Scan(&v); err != nil || v != want {
			t.Fatalf("schema version %d (%v), want %d", v, err, want)
		}
	}
	wantVersion(14)
	sameRows(t, "topic settings after 000014", topicSettings(t, pool), settingsBefore)
	sameRows(t, "tasks after 000014", taskRows(t, pool), rowsBefore)
	create("new-default")
	var attempts, baseMs, capMs, jitterMs int64
	if err := pool.QueryRow(ctx, `SELECT max_attempts, backoff_base_ms, backoff_cap_ms, backoff_jitter_ms
		FROM task_topic WHERE topic = 'new-default'`).Scan(&attempts, &baseMs, &capMs, &jitterMs); err != nil {
		t.Fatal(err)
	}
	if attempts != 25 || baseMs != 1000 || capMs != 3600000 || jitterMs != 0 {
		t.Fatalf("a topic created at version 14 has %d attempts, backoff %d..%d ms (+%d); want 25, 1000..3600000 (+0)",
			attempts, baseMs, capMs, jitterMs)
	}

	// A failure is final in the old topic and retried in the new one, with the code of
	// this version (which needs the migrations after 14).
	migrateTo(t, pool, 0)
	repo, err := New(Config{Owner: "upgrader"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.RegisterOwner(ctx, pool); err != nil {
		t.Fatal(err)
	}
	failOne := func(topic string) Task {
		t.Helper()
		if _, err := repo.Push(ctx, pool, topic, Append, Creation{Identifier: "again"}); err != nil {
			t.Fatal(err)
		}
		leased, err := repo.Poll(ctx, pool, topic, FIFO, None, 10)
		i := slices.IndexFunc(leased, func(t Task) bool { return t.Identifier == "again" })
		if err != nil || i < 0 {
			t.Fatalf("poll %s: %+v, %v; want again among them", topic, leased, err)
		}
		done, err := repo.Complete(ctx, pool, topic, leased[i].Decide(Fail(errors.New("boom"))))
		if err != nil {
			t.Fatal(err)
		}
		return done[0]
	}
	if got := failOne("old-default"); got.State != Failed {
		t.Errorf("a failure in a topic created at version 13 = %v, want FAILED (it keeps its one attempt)", got.State)
	}
	if got := failOne("new-default"); got.State != Ready {
		t.Errorf("a failure in a topic created at version 14 = %v, want READY (retried)", got.State)
	}

	migrateTo(t, pool, 13)
	wantVersion(13)
	create("after-revert")
	got := map[string]int32{}
	rows, err := pool.Query(ctx, "SELECT topic, max_attempts FROM task_topic")
	if err != nil {
		t.Fatal(err)
	}
	var (
		topic string
		n     int32
	)
	if _, err := pgx.ForEachRow(rows, []any{&topic, &n}, func() error { got[topic] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	want := map[string]int32{"old-default": 1, "configured": 3, "new-default": 25, "after-revert": 1}
	for topic, n := range want {
		if got[topic] != n {
			t.Errorf("after reverting 000014, topic %s has %d attempts, want %d", topic, got[topic], n)
		}
	}
}

// TestLimitsMigration checks migration 000015 on a database of version 14 with tasks in
// several states and topics: every row kept, topics without limits as before, limits and
// keys usable at once; down and up again keep every row.
func TestLimitsMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository limits test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(14)
	create("t")
	create("u")
	execEach(t, pool,
		"SELECT task_push('t', 'a')",
		"SELECT task_push('t', 'b', delay => '1 hour')",
		"SELECT task_push('u', 'c', suspended => true)",
		`INSERT INTO task (topic, identifier, state, descent, owner, attempt) VALUES ('t', 'leased', 0, 1, 'someone', 1)`,
		`INSERT INTO task (topic, identifier, state, descent, completed, output) VALUES ('u', 'done', 6, 1, now(), 'ok')`,
	)
	topics := topicSettings(t, pool)
	tasks := taskRows(t, pool)

	steps(1)
	sameRows(t, "tasks after 000015", taskRows(t, pool), tasks)
	var keys int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM task WHERE concurrency_key IS NOT NULL").Scan(&keys); err != nil || keys != 0 {
		t.Errorf("tasks with a key after 000015: %d, %v; want none", keys, err)
	}
	sameRows(t, "topics after 000015", topicSettings(t, pool), topics)
	repo, err := New(Config{Owner: "upgrade-test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := registerAtOldSchema(ctx, pool, repo); err != nil {
		t.Fatal(err)
	}
	// the old tasks poll as before; a limit holds at once, counting the old lease
	if _, err := repo.UpdateSettings(ctx, pool, "t", func(s *TopicSettings) { s.Concurrency = 2 }); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Push(ctx, pool, "t", Append, Creation{Identifier: "d", ConcurrencyKey: "k"}); err != nil {
		t.Fatal(err)
	}
	polled, err := repo.Poll(ctx, pool, "t", FIFO, None, 10)
	if err != nil || len(polled) != 1 || polled[0].Identifier != "a" {
		t.Fatalf("poll with a limit of 2 and one old lease = %v, %v; want a", polled, err)
	}
	tasks = taskRows(t, pool)
	topics = topicSettings(t, pool)

	steps(-1)
	var col *string
	if err := pool.QueryRow(ctx, `SELECT column_name::text FROM information_schema.columns
		WHERE table_name = 'task' AND column_name = 'concurrency_key'`).Scan(&col); err == nil {
		t.Errorf("task.concurrency_key after reverting 000015: still there")
	}
	sameRows(t, "tasks after reverting 000015", taskRows(t, pool), tasks)
	if _, err := pool.Exec(ctx, "SELECT task_push('t', 'e')"); err != nil {
		t.Errorf("the SQL push of 000013 after reverting 000015: %v", err)
	}
	steps(1)
	if got := taskRows(t, pool); len(got) != len(tasks)+1 {
		t.Errorf("tasks after 000015 again: %d, want %d", len(got), len(tasks)+1)
	}
}

// TestSchedulesMigration checks migration 000016 on a database of version 15: upgrading a database with topics and tasks keeps them, schedules
// can be declared and fired, and reverting drops the schedules and keeps the tasks they
// pushed.
func TestSchedulesMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository schedules test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(15)
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	repo, err := New(Config{Owner: "upgrader", Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	if err := registerAtOldSchema(ctx, pool, repo); err != nil {
		t.Fatal(err)
	}
	create("reports")
	create("other")
	if _, err := repo.Push(ctx, pool, "reports", Append, Creation{Identifier: "old", Input: "x"}, Creation{Identifier: "parked", Suspended: true}); err != nil {
		t.Fatal(err)
	}
	leased, err := repo.Poll(ctx, pool, "reports", FIFO, None, 1)
	if err != nil || len(leased) != 1 {
		t.Fatalf("poll: %v, %v", leased, err)
	}
	settingsBefore, rowsBefore := topicSettings(t, pool), taskRows(t, pool)

	steps(1)
	var version int64
	if err := pool.QueryRow(ctx, "SELECT version FROM "+migrationsTable).Scan(&version); err != nil || version != 16 {
		t.Fatalf("schema version %d (%v), want 16", version, err)
	}
	sameRows(t, "topic settings after 000016", topicSettings(t, pool), settingsBefore)
	sameRows(t, "tasks after 000016", taskRows(t, pool), rowsBefore)
	// the Go API reads task_schedule as the newest schema has it (fire_from, 000041)
	migrateTo(t, pool, 0)
	if _, err := repo.CreateSchedule(ctx, pool, "hourly", ScheduleSettings{Topic: "reports", Spec: "@hourly", Identifier: "report-{time}"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "SELECT task_schedule('sql', 'other', '*/5 * * * *')"); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(time.Hour)
	fires, err := repo.FireSchedules(ctx, pool)
	if err != nil || len(fires) != 1 || fires[0].Tasks[0].Identifier != "report-2026-03-01T13:00:00Z" {
		t.Fatalf("fires after the upgrade: %+v, %v", fires, err)
	}
	// The old tasks work as before: the leased one completes.
	if _, err := repo.Complete(ctx, pool, "reports", leased[0].Decide(Succeed("done"))); err != nil {
		t.Fatal(err)
	}
	rowsWithSchedules := taskRows(t, pool)

	migrateTo(t, pool, 15)
	if err := pool.QueryRow(ctx, "SELECT version FROM "+migrationsTable).Scan(&version); err != nil || version != 15 {
		t.Fatalf("schema version %d (%v), want 15", version, err)
	}
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass('task_schedule') IS NOT NULL").Scan(&exists); err != nil || exists {
		t.Fatalf("task_schedule after reverting 000016: exists %v, %v", exists, err)
	}
	sameRows(t, "tasks after reverting 000016", taskRows(t, pool), rowsWithSchedules)
	// And up again.
	migrateTo(t, pool, 0)
	if list, err := repo.Schedules(ctx, pool); err != nil || len(list) != 0 {
		t.Fatalf("schedules after up, down, up: %+v, %v", list, err)
	}
}

// TestTallyMigration checks migration 000017 on a database of version 16 with tasks in
// several states: every row kept, tallies counted from the first push and completion
// after it; reverting drops the tallies and keeps the tasks, and completions work as
// before.
func TestTallyMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository tally test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(16)
	create("t")
	repo, err := New(Config{Owner: "upgrader"})
	if err != nil {
		t.Fatal(err)
	}
	if err := registerAtOldSchema(ctx, pool, repo); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Push(ctx, pool, "t", Append, Creation{Identifier: "a"}, Creation{Identifier: "b"},
		Creation{Identifier: "c"}, Creation{Identifier: "parked", Suspended: true}); err != nil {
		t.Fatal(err)
	}
	leased, err := repo.Poll(ctx, pool, "t", FIFO, None, 2)
	if err != nil || len(leased) != 2 {
		t.Fatalf("poll: %v, %v", leased, err)
	}
	if _, err := repo.Complete(ctx, pool, "t", leased[0].Decide(Succeed("old"))); err != nil {
		t.Fatal(err)
	}
	rows := taskRows(t, pool)

	steps(1)
	sameRows(t, "tasks after 000017", taskRows(t, pool), rows)
	var tallies int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM task_tally").Scan(&tallies); err != nil || tallies != 0 {
		t.Fatalf("tallies after 000017: %d, %v; want none (nothing is counted backwards)", tallies, err)
	}
	// the lease taken before the upgrade completes, and is counted, as a new push is
	if _, err := repo.Complete(ctx, pool, "t", leased[1].Decide(Succeed("new"))); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "SELECT task_push('t', 'd')"); err != nil {
		t.Fatal(err)
	}
	var pushed, succeeded int64
	if err := pool.QueryRow(ctx, "SELECT sum(pushed), sum(succeeded) FROM task_tally WHERE topic = 't'").Scan(&pushed, &succeeded); err != nil || pushed != 1 || succeeded != 1 {
		t.Fatalf("tallies after a push and a completion: %d pushed, %d succeeded (%v); want 1 and 1", pushed, succeeded, err)
	}
	rows = taskRows(t, pool)

	steps(-1)
	sameRows(t, "tasks after reverting 000017", taskRows(t, pool), rows)
	var gone bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass('task_tally') IS NULL AND NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'task_tally_pushed')").Scan(&gone); err != nil || !gone {
		t.Fatalf("task_tally or its trigger still there after reverting 000017 (%v)", err)
	}
	// version 16's push and completion, without tallies
	if _, err := repo.Push(ctx, pool, "t", Append, Creation{Identifier: "e"}); err != nil {
		t.Fatal(err)
	}
	more, err := repo.Poll(ctx, pool, "t", FIFO, None, 1)
	if err != nil || len(more) != 1 {
		t.Fatalf("poll after reverting 000017: %v, %v", more, err)
	}
	if _, err := repo.Complete(ctx, pool, "t", more[0].Decide(Succeed(""))); err != nil {
		t.Fatalf("complete after reverting 000017: %v", err)
	}
	rows = taskRows(t, pool)
	steps(1)
	sameRows(t, "tasks after 000017 again", taskRows(t, pool), rows)
}

// TestSequenceAtMigration checks migration 000018 on a database of version 17 with
// tasks: every row kept, Resolve finds over the old rows what a scan finds; reverting
// drops task_sequence_at and keeps the rows.
func TestSequenceAtMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository sequence-at test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(17)
	create("t")
	execEach(t, pool,
		"SELECT task_push('t', 'a')",
		"SELECT task_push_batch('t', ARRAY['b', 'c'])",
		"SELECT task_push('t', 'd')",
	)
	rows := taskRows(t, pool)
	steps(1)
	sameRows(t, "tasks after 000018", taskRows(t, pool), rows)
	repo, err := New(Config{Owner: "upgrader"})
	if err != nil {
		t.Fatal(err)
	}
	var mid time.Time
	if err := pool.QueryRow(ctx, "SELECT created FROM task WHERE identifier = 'b'").Scan(&mid); err != nil {
		t.Fatal(err)
	}
	var first, last int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT min(sequence) FROM task WHERE created >= $1),
		(SELECT max(sequence) FROM task WHERE created <= $1)`, mid).Scan(&first, &last); err != nil {
		t.Fatal(err)
	}
	if got, err := repo.Resolve(ctx, pool, mid, false); err != nil || got != first {
		t.Errorf("following %v = %d, %v; a scan says %d", mid, got, err, first)
	}
	if got, err := repo.Resolve(ctx, pool, mid, true); err != nil || got != last {
		t.Errorf("preceding %v = %d, %v; a scan says %d", mid, got, err, last)
	}
	steps(-1)
	sameRows(t, "tasks after reverting 000018", taskRows(t, pool), rows)
	var gone bool
	if err := pool.QueryRow(ctx, "SELECT to_regproc('task_sequence_at') IS NULL").Scan(&gone); err != nil || !gone {
		t.Fatalf("task_sequence_at still there after reverting 000018 (%v)", err)
	}
	steps(1)
}

// TestNextDueMigration checks migration 000019 on a database of version 18 with tasks:
// every row kept, the probe finds the delayed task; reverting drops task_next_due and
// keeps the rows.
func TestNextDueMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository next-due test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(18)
	create("t")
	execEach(t, pool,
		"SELECT task_push('t', 'now')",
		"SELECT task_push('t', 'later', delay => '1 hour')",
	)
	rows := taskRows(t, pool)
	steps(1)
	sameRows(t, "tasks after 000019", taskRows(t, pool), rows)
	repo, err := New(Config{Owner: "upgrader"})
	if err != nil {
		t.Fatal(err)
	}
	due, ok, err := repo.NextDue(ctx, pool, "t", 0)
	if err != nil || !ok || due.Delay < 59*time.Minute || due.Delay > time.Hour {
		t.Fatalf("next due after 000019 = %v, %v, %v; want the task in an hour", due, ok, err)
	}
	steps(-1)
	sameRows(t, "tasks after reverting 000019", taskRows(t, pool), rows)
	var gone bool
	if err := pool.QueryRow(ctx, "SELECT to_regproc('task_next_due') IS NULL").Scan(&gone); err != nil || !gone {
		t.Fatalf("task_next_due still there after reverting 000019 (%v)", err)
	}
	steps(1)
}

// TestAnalyzeSkipLockedMigration: 000020 keeps the tasks, and after it Analyze returns at
// once while another session holds the lock a VACUUM holds, where before it waited.
func TestAnalyzeSkipLockedMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository analyze test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(19)
	create("t")
	if _, err := pool.Exec(ctx, "SELECT task_push('t', 'a')"); err != nil {
		t.Fatal(err)
	}
	rows := taskRows(t, pool)
	steps(1)
	sameRows(t, "tasks after 000020", taskRows(t, pool), rows)
	repo, err := New(Config{Owner: "upgrader"})
	if err != nil {
		t.Fatal(err)
	}
	var table string
	if err := pool.QueryRow(ctx, "SELECT partition FROM task_topic WHERE topic = 't'").Scan(&table); err != nil {
		t.Fatal(err)
	}
	// the lock a VACUUM holds, held by another session
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.WithoutCancel(ctx))
	if _, err := holder.Exec(ctx, "LOCK TABLE "+pgx.Identifier{table}.Sanitize()+" IN SHARE UPDATE EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := repo.Analyze(actx, pool, "t"); err != nil {
		t.Fatalf("analyze while the table is locked by another session: %v (want it skipped at once)", err)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Analyze(ctx, pool, "t"); err != nil {
		t.Fatalf("analyze: %v", err)
	}
	steps(-1)
	sameRows(t, "tasks after reverting 000020", taskRows(t, pool), rows)
	var body string
	if err := pool.QueryRow(ctx, "SELECT prosrc FROM pg_proc WHERE proname = 'task_topic_analyze'").Scan(&body); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(body, "SKIP_LOCKED") {
		t.Fatalf("task_topic_analyze still skips locked tables after reverting 000020")
	}
	steps(1)
}

// TestLimitedPositionMigration: 000021 keeps the tasks, a limited topic's poll given a
// position starts there after it (and from the head before it, and after reverting it).
func TestLimitedPositionMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository limited-position test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(20)
	create("t")
	execEach(t, pool,
		"SELECT task_push('t', 'a')", "SELECT task_push('t', 'b')", "SELECT task_push('t', 'c')",
		"SELECT task_push('t', 'd')", "UPDATE task_topic SET concurrency = 1 WHERE topic = 't'",
	)
	var third int64
	if err := pool.QueryRow(ctx, "SELECT sequence FROM task WHERE topic = 't' AND identifier = 'c'").Scan(&third); err != nil {
		t.Fatal(err)
	}
	// the poll statement of schemas 20 and 21, given the position of c; rolled back
	poll := func() string {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		var identifier string
		if err := tx.QueryRow(ctx, `UPDATE task t SET state = 0, owner = 'o', attempt = t.attempt + 1
			WHERE t.topic = 't' AND t.ctid = ANY (ARRAY(SELECT task_poll_candidates('t', false, 0::smallint, 10, 0::smallint, $1)))
			RETURNING t.identifier`, third).Scan(&identifier); err != nil {
			t.Fatal(err)
		}
		return identifier
	}
	if got := poll(); got != "a" {
		t.Fatalf("limited poll given c's position before 000021 took %s, want a (from the head)", got)
	}
	rows := taskRows(t, pool)
	steps(1)
	sameRows(t, "tasks after 000021", taskRows(t, pool), rows)
	if got := poll(); got != "c" {
		t.Fatalf("limited poll given c's position after 000021 took %s, want c", got)
	}
	steps(-1)
	sameRows(t, "tasks after reverting 000021", taskRows(t, pool), rows)
	if got := poll(); got != "a" {
		t.Fatalf("limited poll given c's position after reverting 000021 took %s, want a", got)
	}
	steps(1)
}

// TestCompletePollMigration: 000022 keeps the tasks and ACTIVE leases and adds
// task_complete_poll, which completes a lease taken before it and leases the next;
// reverting it takes the function away and keeps the tasks.
func TestCompletePollMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository complete-poll test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(21)
	create("t")
	execEach(t, pool,
		"SELECT task_push('t', 'a')", "SELECT task_push('t', 'b')", "SELECT task_push('t', 'c')",
		"UPDATE task_topic SET concurrency = 1 WHERE topic = 't'",
		// a lease of schema 21, completed after the upgrade
		`UPDATE task t SET state = 0, owner = 'o', attempt = t.attempt + 1
		 WHERE t.topic = 't' AND t.ctid = ANY (ARRAY(SELECT task_poll_candidates('t', false, 0::smallint, 10, NULL, NULL)))`,
	)
	exists := func() bool {
		t.Helper()
		var yes bool
		if err := pool.QueryRow(ctx, "SELECT to_regproc('task_complete_poll') IS NOT NULL").Scan(&yes); err != nil {
			t.Fatal(err)
		}
		return yes
	}
	if exists() {
		t.Fatalf("task_complete_poll before 000022")
	}
	rows := taskRows(t, pool)
	steps(1)
	sameRows(t, "tasks after 000022", taskRows(t, pool), rows)
	if !exists() {
		t.Fatalf("no task_complete_poll after 000022")
	}
	r, err := pool.Query(ctx, `SELECT identifier || ':' || state FROM task_complete_poll('t', 'o',
		ARRAY(SELECT sequence FROM task WHERE topic = 't' AND state = 0), ARRAY[1], ARRAY[3::smallint], ARRAY[''],
		ARRAY[0::bigint], false, 0::smallint, 10, NULL, NULL)`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(r, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a:6", "b:0"}; !slices.Equal(got, want) {
		t.Fatalf("task_complete_poll of the lease taken before 000022 returned %v, want %v (a SUCCEEDED, b leased under the limit of 1)", got, want)
	}
	rows = taskRows(t, pool)
	steps(-1)
	sameRows(t, "tasks after reverting 000022", taskRows(t, pool), rows)
	if exists() {
		t.Fatalf("task_complete_poll after reverting 000022")
	}
	steps(1)
}

// TestKeyedPollMigrations: 000023 rewrites task_poll_keyed (how it finds the next key
// of a round and when it reads the tasks without a key), and so does 000024 (where a
// key's turn starts, and going round the keys met); each keeps the tasks and what the
// function picks: on the same rows, every poll by key of keyedPicks picks the same tasks
// in the same order before the migration, after it, and after its revert.
func TestKeyedPollMigrations(t *testing.T) {
	for _, version := range []int{23, 24} {
		t.Run(strconv.Itoa(version), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t, "pgtask repository keyed-poll migrations test: empty database", nil)
			steps, create := stepper(t, pool)
			steps(version - 1)
			create("f")
			keyedTasks(t, pool, "f")
			rows, before := taskRows(t, pool), keyedPicks(t, pool, "f")
			for _, step := range []struct {
				n    int
				name string
			}{{1, "after %06d"}, {-1, "after reverting %06d"}} {
				steps(step.n)
				when := fmt.Sprintf(step.name, version)
				sameRows(t, "tasks "+when, taskRows(t, pool), rows)
				sameRows(t, "picks "+when, keyedPicks(t, pool, "f"), before)
			}
			steps(1)
		})
	}
}

// keyedTasks fills topic, registered, for keyedPicks and makes it fair: tasks without a
// key pushed before (their key NULL) and after (their key ”) the topic was polled by
// key, keys a to d, two priorities, identifiers that repeat (so that poll conditions
// hold some back) and an ACTIVE task of key a (which a per-key limit of 1 counts).
func keyedTasks(t *testing.T, pool *pgxpool.Pool, topic string) {
	t.Helper()
	push := func(keys ...string) {
		t.Helper()
		for i, key := range keys {
			keyArg := "NULL"
			if key != "-" {
				keyArg = "'" + key + "'"
			}
			if _, err := pool.Exec(t.Context(), fmt.Sprintf("SELECT task_push($1, 'id%d', priority => %d, concurrency_key => %s)",
				i%4, i%3/2, keyArg), topic); err != nil {
				t.Fatal(err)
			}
		}
	}
	push("b", "a", "c", "a", "-", "b", "a", "c", "-", "d", "-")
	if _, err := pool.Exec(t.Context(), "UPDATE task_topic SET fair = true WHERE topic = $1", topic); err != nil {
		t.Fatal(err)
	}
	push("-", "c", "-", "a", "-", "-")
	if _, err := pool.Exec(t.Context(), `UPDATE task t SET state = 0, owner = 'o', attempt = 1
		WHERE t.topic = $1 AND t.sequence = (SELECT min(sequence) FROM task WHERE topic = $1 AND concurrency_key = 'a')`,
		topic); err != nil {
		t.Fatal(err)
	}
}

// keyedPicks calls task_poll_keyed on topic (keyedTasks's) in every way a poll by key
// can ask (FIFO and LIFO, each poll condition, with and without a per-key limit, from
// the start of a round and after a key, budgets that end a round early or not) and
// returns what each picked, in order, and the key it ended at. The calls change nothing.
func keyedPicks(t *testing.T, pool *pgxpool.Pool, topic string) []string {
	t.Helper()
	var out []string
	for _, lifo := range []bool{false, true} {
		for _, condition := range []int{0, 1, 2, 3} {
			for _, keyLimit := range []string{"NULL", "1"} {
				for _, last := range []string{"NULL", "''", "'a'", "'c'"} {
					for _, budget := range []int{1, 3, 20} {
						q := fmt.Sprintf(`SELECT coalesce(quote_literal(k.p_last_key), 'NULL') || ' ' || array_to_string(ARRAY(
							SELECT t.identifier || '/' || coalesce(quote_literal(t.concurrency_key), 'NULL')
							FROM unnest(k.p_sequences) WITH ORDINALITY s(sequence, n)
							JOIN task t ON t.topic = $1 AND t.sequence = s.sequence ORDER BY s.n), ',')
							FROM task_poll_keyed($1, %v, %d::smallint, %d, %s, %s) k`, lifo, condition, budget, keyLimit, last)
						var got string
						if err := pool.QueryRow(t.Context(), q, topic).Scan(&got); err != nil {
							t.Fatalf("%s: %v", q, err)
						}
						out = append(out, fmt.Sprintf("lifo %v, condition %d, key limit %s, after %s, budget %d: %s",
							lifo, condition, keyLimit, last, budget, got))
					}
				}
			}
		}
	}
	return out
}

// TestLongTransactionsMigration checks migration 000025 on a database of version 24
// with tasks, a lease and tallies: every row kept; afterwards a transaction's statements
// count in a new tally row every 64, an APPEND from SQL stores what it did, the lease
// taken before completes; reverting restores 000015's task_push_batch and 000017's
// task_tally_pushed and task_complete as they were, and keeps the rows.
func TestLongTransactionsMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository long-transactions test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(24)
	create("t")
	execEach(t, pool,
		"SELECT task_push('t', 'a', 'in-a')", "SELECT task_push_batch('t', ARRAY['b', 'c'], insertion => 'replace')",
		"SELECT task_push('t', 'd', suspended => true, priority => 2, reference => 'r')",
		// a lease of schema 24, completed after the upgrade
		`UPDATE task t SET state = 0, owner = 'o', attempt = t.attempt + 1
		 WHERE t.topic = 't' AND t.sequence = (SELECT min(sequence) FROM task WHERE topic = 't')`,
	)
	bodies := func() []string {
		t.Helper()
		return textRows(t, pool, `SELECT proname || ': ' || prosrc FROM pg_proc
			WHERE proname IN ('task_push_batch', 'task_tally_pushed', 'task_complete', 'task_tally_writer') ORDER BY proname`)
	}
	before, rows := bodies(), taskRows(t, pool)

	steps(1)
	sameRows(t, "tasks after 000025", taskRows(t, pool), rows)
	// 70 pushes in one transaction: two rows, 64 and 6
	execEach(t, pool, "DELETE FROM task_tally")
	if err := Atomically(ctx, pool, func(tx pgx.Tx) error {
		for i := range 70 {
			if _, err := tx.Exec(ctx, "SELECT task_push('t', $1)", fmt.Sprintf("n%02d", i)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := textRows(t, pool, "SELECT pushed::text FROM task_tally WHERE topic = 't' ORDER BY writer"); !slices.Equal(got, []string{"64", "6"}) {
		t.Fatalf("tally rows of 70 pushes in one transaction: %v, want [64 6]", got)
	}
	execEach(t, pool, `SELECT count(*) FROM task_complete('t', 'o', ARRAY(SELECT sequence FROM task WHERE topic = 't' AND state = 0),
		ARRAY[1], ARRAY[3::smallint], ARRAY[''], ARRAY[0::bigint])`)
	if got := textRows(t, pool, "SELECT identifier || ':' || state FROM task WHERE topic = 't' AND identifier IN ('a', 'n69') ORDER BY sequence"); !slices.Equal(got, []string{"a:6", "n69:1"}) {
		t.Fatalf("after 000025: %v, want the lease of schema 24 SUCCEEDED and the pushes READY", got)
	}
	revertKeeps(t, pool, steps, "000025", bodies, before)
}

// TestHandOverMigration checks migration 000026 on a database of version 25 with tasks
// of a limited topic and a lease of schema 25: every row kept; afterwards the lease's
// completion hands its slot over (task_complete_poll through task_hand_over) and the
// room a raised limit leaves is leased too; reverting restores 000022's
// task_complete_poll as it was, drops task_hand_over and keeps the rows.
func TestHandOverMigration(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, "pgtask repository hand-over test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(25)
	create("t")
	execEach(t, pool,
		"SELECT task_topic_set_limits('t', concurrency => 1)",
		"SELECT count(task_push('t', 'i' || g)) FROM generate_series(1, 6) g",
		// a lease of schema 25, completed after the upgrade
		`UPDATE task t SET state = 0, owner = 'o', attempt = t.attempt + 1
		 WHERE t.topic = 't' AND t.sequence = (SELECT min(sequence) FROM task WHERE topic = 't')`,
	)
	bodies := func() []string {
		t.Helper()
		return textRows(t, pool, `SELECT proname || ': ' || prosrc FROM pg_proc
			WHERE proname IN ('task_complete_poll', 'task_hand_over') ORDER BY proname`)
	}
	before, rows := bodies(), taskRows(t, pool)
	if len(before) != 1 {
		t.Fatalf("functions at schema 25: %d, want task_complete_poll alone", len(before))
	}

	steps(1)
	sameRows(t, "tasks after 000026", taskRows(t, pool), rows)
	if got := bodies(); len(got) != 2 {
		t.Fatalf("functions after 000026: %d, want task_complete_poll and task_hand_over", len(got))
	}
	completeAndPoll := func(size int) []string {
		t.Helper()
		return textRows(t, pool, `SELECT identifier || ':' || state FROM task_complete_poll('t', 'o',
			ARRAY(SELECT sequence FROM task WHERE topic = 't' AND state = 0 ORDER BY sequence),
			ARRAY(SELECT attempt FROM task WHERE topic = 't' AND state = 0 ORDER BY sequence),
			ARRAY(SELECT 3::smallint FROM task WHERE topic = 't' AND state = 0),
			ARRAY(SELECT '' FROM task WHERE topic = 't' AND state = 0),
			ARRAY(SELECT 0::bigint FROM task WHERE topic = 't' AND state = 0),
			false, 0::smallint, `+fmt.Sprint(size)+`, NULL, NULL)`)
	}
	if got := completeAndPoll(10); !slices.Equal(got, []string{"i1:6", "i2:0"}) {
		t.Fatalf("after 000026, the lease of schema 25 completed: %v, want it SUCCEEDED and the next ACTIVE", got)
	}
	execEach(t, pool, "SELECT task_topic_set_limits('t', concurrency => 3)")
	if got := completeAndPoll(10); !slices.Equal(got, []string{"i2:6", "i3:0", "i4:0", "i5:0"}) {
		t.Fatalf("at a limit raised to 3: %v, want i2 SUCCEEDED and three ACTIVE", got)
	}
	revertKeeps(t, pool, steps, "000026", bodies, before)
}

// revertKeeps reverts the newest migration (named by migration) and applies it again:
// the tasks stay as they were before each step, and after the revert the functions
// bodies reads are those of before, read at the previous version.
func revertKeeps(t *testing.T, pool *pgxpool.Pool, steps func(int), migration string, bodies func() []string, before []string) {
	t.Helper()
	rows := taskRows(t, pool)
	steps(-1)
	sameRows(t, "tasks after reverting "+migration, taskRows(t, pool), rows)
	if after := bodies(); !slices.Equal(after, before) {
		t.Fatalf("functions after reverting %s differ from the previous version's:\n%s\nwant\n%s", migration,
			strings.Join(after, "\n---\n"), strings.Join(before, "\n---\n"))
	}
	steps(1)
	sameRows(t, "tasks after "+migration+" again", taskRows(t, pool), rows)
}

// TestKeyedTurnsPickAsBefore: on a topic of many keys, priorities, delayed tasks,
// ACTIVE ones and identifiers that repeat, task_poll_keyed as 000024 and the Citus form
// of 000024 pick what 000023's plain and Citus functions picked, for every way a poll by
// key can ask, budgets that take many rounds included. The keys' turns then start from
// where they stood and go round without a search: a wrong position, a turn taken twice
// or skipped, shows here. The Citus functions of 000023 and 000024 are given 000043's
// rule (an ACTIVE task of the identifier holds the candidate back wherever it is), which
// the newest functions have; 000023's plain function is compared without a condition.
func TestKeyedTurnsPickAsBefore(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, schema.Hash(), Migrate)
	ctx := t.Context()
	// the functions to compare, under names of their own
	install := func(text, fn, name string) {
		t.Helper()
		i := strings.Index(text, "FUNCTION "+fn+"(")
		j := strings.Index(text[max(i, 0):], "\n$$;")
		if i < 0 || j < 0 {
			t.Fatalf("no %s in the text for %s", fn, name)
		}
		def := "CREATE FUNCTION " + name + text[i+len("FUNCTION "+fn):i+j+4]
		if _, err := pool.Exec(ctx, def); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	read := func(fsys fs.FS, file string) string {
		t.Helper()
		b, err := fs.ReadFile(fsys, file)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// 000043's rule in the earlier functions: an ACTIVE task of the identifier holds a
	// candidate back wherever it is (the functions compared here have it)
	anyActive := func(text string) string {
		t.Helper()
		const bound = "\n                                     AND CASE WHEN p_lifo THEN o.sequence > v_seq ELSE o.sequence < v_seq END)"
		probe := "WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic\n                                     AND o.identifier = v_identifier"
		if strings.Count(text, probe+bound) != 1 {
			t.Fatal("no ACTIVE probe bounded by the sequence in the text")
		}
		return strings.Replace(text, probe+bound, probe+")", 1)
	}
	// 000023's plain function calls task_poll_condition, which 000024 drops
	install(read(schema.FS, "000015_limits.up.sql"), "task_poll_condition", "task_poll_condition")
	install(read(schema.FS, "000023_keyed_next_key.up.sql"), "task_poll_keyed", "poll_keyed_23")
	install(anyActive(read(citus.Migrations, "000023_keyed_next_key.up.sql")), "task_poll_keyed", "poll_keyed_citus_23")
	install(anyActive(read(citus.Migrations, "000024_keyed_turns.up.sql")), "task_poll_keyed", "poll_keyed_citus_24")
	install(citus.Functions, "task_poll_keyed", "poll_keyed_citus_functions")

	const topic = "turns"
	if _, err := pool.Exec(ctx, "SELECT task_topic_create($1)", topic); err != nil {
		t.Fatal(err)
	}
	// tasks without a key pushed before the topic is polled by key (NULL), in priority 1
	// only (in 0 and 2 a poll without a condition takes whole rounds at once as soon as
	// it knows the keys), then 30 keys of 1 to 40 tasks each in a shuffled order,
	// priorities 0 to 2, every seventh delayed, identifiers from 25 (so conditions hold
	// some back)
	if _, err := pool.Exec(ctx, `SELECT task_push($1, 'id' || (i % 25), priority => 1) FROM generate_series(1, 12) i`, topic); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE task_topic SET fair = true WHERE topic = $1", topic); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		SELECT task_push($1, 'id' || (n % 25), priority => (n * 7) % 3,
		                 delay => CASE WHEN n % 7 = 0 THEN interval '1 hour' END,
		                 concurrency_key => CASE WHEN k = 0 THEN '' ELSE 'k' || lpad(k::text, 2, '0') END)
		FROM (SELECT k, n FROM generate_series(0, 29) k, generate_series(1, 1 + (k * 13) % 40) n
		      ORDER BY hashint4(k * 1000 + n)) s`, topic); err != nil {
		t.Fatal(err)
	}
	// an ACTIVE task in every third key (a per-key limit counts them)
	if _, err := pool.Exec(ctx, `UPDATE task t SET state = 0, owner = 'o', attempt = 1
		WHERE t.topic = $1 AND t.sequence IN (SELECT min(sequence) FROM task
		                                      WHERE topic = $1 AND concurrency_key ~ '[0369]$' GROUP BY concurrency_key)`,
		topic); err != nil {
		t.Fatal(err)
	}
	// k06 at a limit of 3 (and 1) before the poll: the first key met again after 'k05'
	if _, err := pool.Exec(ctx, `UPDATE task t SET state = 0, owner = 'o', attempt = 1
		WHERE t.topic = $1 AND t.sequence IN (SELECT sequence FROM task
		                                      WHERE topic = $1 AND concurrency_key = 'k06' AND state = 1 ORDER BY sequence LIMIT 2)`,
		topic); err != nil {
		t.Fatal(err)
	}
	// tasks of repeating identifiers that conditions 2 and 3 look at: EXPIRED, FAILED
	// and SUSPENDED (states 2, 3, 4)
	if _, err := pool.Exec(ctx, `UPDATE task t SET state = 2 + s.n % 3, completed = now()
		FROM (SELECT sequence, row_number() OVER (ORDER BY sequence) AS n FROM task
		      WHERE topic = $1 AND state = 1 AND identifier IN ('id3', 'id4', 'id5') ORDER BY sequence LIMIT 3) s
		WHERE t.topic = $1 AND t.sequence = s.sequence`, topic); err != nil {
		t.Fatal(err)
	}
	var calls int
	for _, lifo := range []bool{false, true} {
		for _, condition := range []int{0, 1, 2, 3} {
			for _, keyLimit := range []string{"NULL", "1", "3"} {
				// after 'k05': the first key met again when the poll goes round, k06, is at
				// its limit from the start; 'k07a' falls between two keys
				for _, last := range []string{"NULL", "''", "'k05'", "'k07a'", "'zz'"} {
					for _, budget := range []int{1, 4, 45, 1000} {
						if condition > 0 && budget > 45 {
							continue // 000023's function rereads what the condition held back at every turn
						}
						args := fmt.Sprintf("%v, %d::smallint, %d, %s, %s", lifo, condition, budget, keyLimit, last)
						pick := func(fn string) string {
							t.Helper()
							var got string
							q := "SELECT coalesce(quote_literal(k.p_last_key), 'NULL') || ' ' || k.p_sequences::text FROM " +
								fn + "($1, " + args + ") k"
							if err := pool.QueryRow(ctx, q, topic).Scan(&got); err != nil {
								t.Fatalf("%s: %v", q, err)
							}
							calls++
							return got
						}
						// 000023's Citus function picks as its plain one (TestKeyedPollMigrations,
						// TestMigrateDistributed) in a tenth of the time under a condition
						want := pick("poll_keyed_citus_23")
						if budget == 1000 && keyLimit == "NULL" && condition == 0 && strings.Count(want, ",") < 100 {
							t.Fatalf("poll_keyed_citus_23(%s) picked %s: fewer than 100 tasks, the topic is not what the test means", args, want)
						}
						fns := []string{"task_poll_keyed", "poll_keyed_citus_24", "poll_keyed_citus_functions"}
						if condition == 0 {
							fns = append(fns, "poll_keyed_23")
						}
						for _, fn := range fns {
							if got := pick(fn); got != want {
								t.Fatalf("%s(%s) picked\n%s\nwant (000023's function)\n%s", fn, args, got, want)
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d calls, the same picks", calls)
}

// migrateDistributing prepares a test database's template at the newest schema,
// distributed when the tests run on a Citus cluster (pgtest.OnCitus).
func migrateDistributing(ctx context.Context, pool *pgxpool.Pool) error {
	if err := Migrate(ctx, pool); err != nil || !pgtest.OnCitus() {
		return err
	}
	_, err := DistributeCitus(ctx, pool, CitusOptions{})
	return err
}

// unguardedPlannerSettings names the functions of pgtask (task_…) that turn a planner
// method off (enable_… = off) without turning JIT off, on the database pool reaches and,
// when it is distributed, on each of its workers ("<function> on host:port"): a plan that
// keeps a disabled node is costed above jit_above_cost and compiled at each call
// (migration 000027).
func unguardedPlannerSettings(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	const query = `SELECT p.oid::regprocedure::text FROM pg_proc p
		WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'task\_%'
		  AND EXISTS (SELECT FROM unnest(p.proconfig) c WHERE c LIKE 'enable\_%=off')
		  AND NOT 'jit=off' = ANY (p.proconfig)
		ORDER BY 1`
	found := textRows(t, pool, query)
	var distributed bool
	if err := pool.QueryRow(t.Context(), "SELECT to_regprocedure('task_distributed()') IS NOT NULL").Scan(&distributed); err != nil {
		t.Fatal(err)
	}
	if !distributed {
		return found
	}
	// each worker's functions, as one line of names
	rows := textRows(t, pool, `SELECT nodename || ':' || nodeport || ' ' || success || ' ' || result FROM run_command_on_workers(
		$$SELECT coalesce(string_agg(f, ';'), '') FROM (`+query+`) AS q(f)$$) ORDER BY nodename, nodeport`)
	if len(rows) == 0 {
		t.Fatal("a distributed database without workers")
	}
	for _, row := range rows {
		node, rest, _ := strings.Cut(row, " ")
		ok, result, _ := strings.Cut(rest, " ")
		if ok != "true" {
			t.Fatalf("read the functions of the worker %s: %s", node, result)
		}
		for _, f := range strings.Split(result, ";") {
			if f != "" {
				found = append(found, f+" on "+node)
			}
		}
	}
	return found
}

// TestPlannerSettingsTurnJITOff: in a database of this build (distributed, with its
// workers, on a Citus cluster), every function that turns a planner method off turns
// JIT off too.
func TestPlannerSettingsTurnJITOff(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, "pgtask repository planner settings test: newest schema, distributed on Citus "+schema.Hash(),
		migrateDistributing)
	if bad := unguardedPlannerSettings(t, pool); len(bad) > 0 {
		t.Fatalf("functions that turn a planner method off and leave JIT on: %v", bad)
	}
}

// TestJITOffMigration: 000027 turns JIT off in the six functions that turn a planner
// method off and had left it on, and changes nothing else; reverted, they are as
// before.
func TestJITOffMigration(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, "pgtask repository jit-off test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(26)
	create("t")
	execEach(t, pool,
		"SELECT count(task_push('t', 'i' || g)) FROM generate_series(1, 4) g",
		`UPDATE task t SET state = 0, owner = 'o', attempt = t.attempt + 1
		 WHERE t.topic = 't' AND t.sequence = (SELECT min(sequence) FROM task WHERE topic = 't')`,
	)
	// every function of pgtask, its body and its settings
	functions := func() []string {
		t.Helper()
		return textRows(t, pool, `SELECT p.oid::regprocedure::text || ' ' || coalesce(p.proconfig::text, '') || ': ' || p.prosrc
			FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'task\_%' ORDER BY 1`)
	}
	before := functions()
	want := []string{
		"task_complete(text,text,bigint[],integer[],smallint[],text[],bigint[])",
		"task_next_due(text,bigint)",
		"task_poll_candidates(text,boolean,smallint,integer)",
		"task_poll_candidates(text,boolean,smallint,integer,smallint,bigint)",
		"task_poll_keyed(text,boolean,smallint,integer,integer,text)",
		"task_topic_delete_rows(text,bigint)",
	}
	if got := unguardedPlannerSettings(t, pool); !slices.Equal(got, want) {
		t.Fatalf("at schema 26, functions with a planner method off and JIT on: %v, want %v", got, want)
	}

	rows := taskRows(t, pool)
	steps(1)
	sameRows(t, "tasks after 000027", taskRows(t, pool), rows)
	if got := unguardedPlannerSettings(t, pool); len(got) > 0 {
		t.Fatalf("after 000027, functions with a planner method off and JIT on: %v", got)
	}
	// only the settings changed: the bodies are the same, and jit=off is all that was added
	after := functions()
	if len(after) != len(before) {
		t.Fatalf("%d functions after 000027, %d before", len(after), len(before))
	}
	changed := 0
	for i := range after {
		if after[i] == before[i] {
			continue
		}
		changed++
		name, _, _ := strings.Cut(before[i], " ")
		if !slices.Contains(want, name) || strings.Replace(after[i], ",jit=off}", "}", 1) != before[i] {
			t.Errorf("000027 changed %s beyond jit=off:\n%s\nwas\n%s", name, after[i], before[i])
		}
	}
	if changed != len(want) {
		t.Errorf("000027 changed %d functions, want %d", changed, len(want))
	}
	// the functions still run: the ACTIVE task completes
	if got := textRows(t, pool, `SELECT identifier || ':' || state FROM task_complete('t', 'o',
		ARRAY(SELECT sequence FROM task WHERE topic = 't' AND state = 0),
		ARRAY(SELECT attempt FROM task WHERE topic = 't' AND state = 0),
		'{3}', '{""}', '{0}')`); !slices.Equal(got, []string{"i1:6"}) {
		t.Fatalf("task_complete after 000027: %v, want i1 SUCCEEDED", got)
	}
	revertKeeps(t, pool, steps, "000027", functions, before)
}

// TestLimitSettingsMigration: 000028 keeps the tasks, empties the token buckets of the
// topics without a rate (a fair topic's polls had run them into debt) and keeps those
// of the topics with one; task_poll_limited then leaves a rateless bucket alone, and a
// rate set again starts from a full bucket. Reverted, the functions are as before.
func TestLimitSettingsMigration(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, "pgtask repository limit-settings test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(27)
	create("fair")
	create("rated")
	execEach(t, pool,
		"SELECT task_topic_set_limits('fair', fair => true, rate => 10, rate_period => '1 minute', rate_burst => 3)",
		"SELECT task_topic_set_limits('rated', rate => 10, rate_period => '1 hour', rate_burst => 3)",
		"SELECT count(task_push('fair', 'f' || g, concurrency_key => 'k' || (g % 3))) FROM generate_series(1, 20) g",
		"SELECT count(task_push('rated', 'r' || g)) FROM generate_series(1, 5) g",
	)
	poll := func(topic string) int {
		t.Helper()
		return len(textRows(t, pool, `WITH leased AS (
				UPDATE task t SET state = 0, owner = 'o', attempt = t.attempt + 1
				WHERE t.topic = '`+topic+`' AND t.ctid = ANY (ARRAY(SELECT task_poll_candidates('`+topic+`', false, 0::smallint, 20, 0::smallint, 0)))
				RETURNING t.identifier)
			SELECT identifier FROM leased`))
	}
	if got := poll("fair"); got != 3 {
		t.Fatalf("fair topic at schema 27 leased %d, want its burst of 3", got)
	}
	if got := poll("rated"); got != 3 {
		t.Fatalf("rated topic at schema 27 leased %d, want its burst of 3", got)
	}
	// the rate lifted: schema 27's polls of the fair topic run its bucket into debt
	execEach(t, pool, "SELECT task_topic_set_limits('fair', fair => true)")
	if got := poll("fair"); got != 17 {
		t.Fatalf("fair topic without its rate leased %d, want the 17 left", got)
	}
	buckets := func() []string {
		t.Helper()
		return textRows(t, pool, `SELECT topic || ' ' || coalesce(round(tokens)::text, 'none') || ' ' || (counted IS NULL)
			FROM task_topic_limit ORDER BY topic`)
	}
	if got := buckets(); !slices.Equal(got, []string{"fair -17 false", "rated 0 false"}) {
		t.Fatalf("buckets at schema 27: %v, want the fair topic's in debt", got)
	}
	bodies := func() []string {
		t.Helper()
		return textRows(t, pool, `SELECT proname || ': ' || prosrc FROM pg_proc
			WHERE proname IN ('task_poll_limited', 'task_topic_set_limits') ORDER BY proname`)
	}
	before, rows := bodies(), taskRows(t, pool)

	steps(1)
	sameRows(t, "tasks after 000028", taskRows(t, pool), rows)
	if got := buckets(); !slices.Equal(got, []string{"fair none true", "rated 0 false"}) {
		t.Fatalf("buckets after 000028: %v, want the fair topic's emptied and the rated one's kept", got)
	}
	execEach(t, pool,
		"SELECT count(task_push('fair', 'g' || g, concurrency_key => 'k')) FROM generate_series(1, 10) g",
		"SELECT task_topic_set_limits('fair', fair => true, rate => 10, rate_period => '1 minute', rate_burst => 3)")
	if got := poll("fair"); got != 3 {
		t.Fatalf("fair topic with its rate back after 000028 leased %d, want the burst of 3", got)
	}
	if got := poll("rated"); got != 0 {
		t.Fatalf("rated topic after 000028 leased %d, want none (its bucket is empty)", got)
	}
	revertKeeps(t, pool, steps, "000028", bodies, before)
}

// TestNeverFiringSpecsMigration: 000029 keeps the tasks and the schedules, a schedule
// declared from SQL with a spec that never fires among them, and task_schedule refuses
// such a spec from then on, writing nothing.
func TestNeverFiringSpecsMigration(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, "pgtask repository never-firing-specs test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(28)
	create("emails")
	execEach(t, pool,
		"SELECT count(task_push('emails', 'e' || g)) FROM generate_series(1, 5) g",
		"SELECT task_schedule('digest', 'emails', '0 8 * * mon-fri', time_zone => 'Europe/Paris')",
		"SELECT task_schedule('feb30', 'emails', '0 0 30 2 *')",
	)
	schedules := func() []string {
		t.Helper()
		return textRows(t, pool, "SELECT r::text FROM (SELECT * FROM task_schedule ORDER BY name) r")
	}
	bodies := func() []string {
		t.Helper()
		return textRows(t, pool, "SELECT proname || ': ' || prosrc FROM pg_proc WHERE proname IN ('task_schedule_spec_problem', 'task_schedule_interval_problem') ORDER BY proname")
	}
	before, rows, kept := bodies(), taskRows(t, pool), schedules()

	steps(1)
	sameRows(t, "tasks after 000029", taskRows(t, pool), rows)
	sameRows(t, "schedules after 000029", schedules(), kept)
	_, err := pool.Exec(t.Context(), "SELECT task_schedule('apr31', 'emails', '0 0 31 4,6,9,11 *')")
	if SQLState(err) != "22023" || !strings.Contains(err.Error(), "never fires") {
		t.Errorf("a spec that never fires after 000029: %v, want SQLSTATE 22023 saying it never fires", err)
	}
	sameRows(t, "schedules after a refusal", schedules(), kept)
	execEach(t, pool, "SELECT task_schedule('leap', 'emails', '0 0 29 2 *')")
	if got := len(schedules()); got != 3 {
		t.Errorf("%d schedules after declaring one for February 29, want 3", got)
	}
	revertKeeps(t, pool, steps, "000029", bodies, before)
}

// TestRetentionIndexMigration: 000030 keeps the tasks and gives every table of task,
// a shared bucket's and a dedicated topic's, the index the retention pass reads, and a
// table dedicated after it too; the pass then deletes what it deleted before.
func TestRetentionIndexMigration(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, "pgtask repository retention-index test: empty database", nil)
	ctx := t.Context()
	steps, create := stepper(t, pool)
	steps(29)
	repo, err := New(Config{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"shared", "own", "later"} {
		create(topic)
		execEach(t, pool,
			"SELECT count(task_push('"+topic+"', 'e' || g)) FROM generate_series(1, 20) g",
			"UPDATE task SET state = 6, completed = now() - CASE WHEN sequence % 4 = 0 THEN interval '2 hours' ELSE interval '0' END WHERE topic = '"+topic+"'",
			"UPDATE task_topic SET retention_ms = 3600000, active = false WHERE topic = '"+topic+"'")
	}
	if ok, err := repo.Dedicate(ctx, pool, "own"); err != nil || !ok {
		t.Fatalf("dedicate own at schema 29: %v %v", ok, err)
	}
	indexed := func() []string {
		t.Helper()
		return textRows(t, pool, `SELECT tt.topic FROM task_topic tt
			WHERE EXISTS (SELECT FROM pg_index x WHERE x.indrelid = tt.partition::regclass
			              AND pg_get_indexdef(x.indexrelid) LIKE '%(hashtext(topic), COALESCE(completed, created)) WHERE (state >= 3)')
			ORDER BY tt.topic`)
	}
	rows := taskRows(t, pool)

	steps(1)
	sameRows(t, "tasks after 000030", taskRows(t, pool), rows)
	if got := indexed(); !slices.Equal(got, []string{"later", "own", "shared"}) {
		t.Fatalf("topics whose table has task_retention after 000030: %v, want all three", got)
	}
	if ok, err := repo.Dedicate(ctx, pool, "later"); err != nil || !ok {
		t.Fatalf("dedicate later after 000030: %v %v", ok, err)
	}
	if got := indexed(); !slices.Equal(got, []string{"later", "own", "shared"}) {
		t.Fatalf("topics whose table has task_retention after a dedication: %v, want all three", got)
	}
	n, err := repo.PurgeRetention(ctx, pool, 1000)
	if err != nil || n != 15 {
		t.Fatalf("PurgeRetention after 000030 = %d, %v; want the 5 old tasks of each topic", n, err)
	}
	if got := textRows(t, pool, "SELECT count(*)::text FROM task WHERE completed < now() - interval '1 hour'"); got[0] != "0" {
		t.Fatalf("%s old tasks left after the retention pass", got[0])
	}
	rows = taskRows(t, pool)
	steps(-1)
	sameRows(t, "tasks after reverting 000030", taskRows(t, pool), rows)
	if got := textRows(t, pool, "SELECT count(*)::text FROM pg_class WHERE relname = 'task_retention'"); got[0] != "0" {
		t.Fatal("task_retention still there after reverting 000030")
	}
}

// TestIdentifierRedundantMigration: 000031 keeps the tasks and gives every table of task,
// a shared bucket's and a dedicated topic's, the two identifier indexes in place of one
// (EXPIRED to RECREATED, REDUNDANT), and a table dedicated after it too;
// REPLACE and DELETE pushes then end and delete what they did before, and the revert
// gives back the one index and 000025's task_push_batch.
func TestIdentifierRedundantMigration(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, "pgtask repository identifier-redundant test: empty database", nil)
	ctx := t.Context()
	steps, create := stepper(t, pool)
	steps(30)
	repo, err := New(Config{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"shared", "own", "later"} {
		create(topic)
		// per identifier e1..e6: versions REDUNDANT (8), SUCCEEDED (6), FAILED (3) and READY
		execEach(t, pool,
			"SELECT count(*) FROM generate_series(1, 6) g, task_push_batch('"+topic+"', ARRAY['e' || g, 'e' || g, 'e' || g], insertion => 'append')",
			"UPDATE task SET state = CASE sequence % 3 WHEN 0 THEN 8 WHEN 1 THEN 6 ELSE 3 END, completed = now() WHERE topic = '"+topic+"'",
			"SELECT count(task_push('"+topic+"', 'e' || g)) FROM generate_series(1, 6) g",
			"UPDATE task_topic SET active = false WHERE topic = '"+topic+"'") // paused: dedicate wants it
	}
	if ok, err := repo.Dedicate(ctx, pool, "own"); err != nil || !ok {
		t.Fatalf("dedicate own at schema 30: %v %v", ok, err)
	}
	indexed := func(predicate string) []string {
		t.Helper()
		return textRows(t, pool, `SELECT tt.topic FROM task_topic tt
			WHERE EXISTS (SELECT FROM pg_index x WHERE x.indrelid = tt.partition::regclass
			              AND pg_get_indexdef(x.indexrelid) LIKE '%(hashtext(topic), identifier, sequence) WHERE `+predicate+`')
			ORDER BY tt.topic`)
	}
	bodies := func() []string {
		t.Helper()
		return textRows(t, pool, `SELECT proname || ' ' || COALESCE(proconfig::text, '') || ': ' || prosrc FROM pg_proc
			WHERE proname IN ('task_push_batch', 'task_topic_dedicate', 'task_topic_delete_rows') ORDER BY proname`)
	}
	counts := func(topic string) []string {
		t.Helper()
		return textRows(t, pool, `SELECT identifier || ' ' || state || ' ' || count(*) FROM task WHERE topic = '`+topic+`'
			GROUP BY identifier, state ORDER BY identifier, state`)
	}
	all := []string{"later", "own", "shared"}
	if got := indexed("(state >= 2)"); !slices.Equal(got, all) {
		t.Fatalf("topics whose table has task_identifier of every settled state at schema 30: %v", got)
	}
	before, rows := bodies(), taskRows(t, pool)

	steps(1)
	sameRows(t, "tasks after 000031", taskRows(t, pool), rows)
	if ok, err := repo.Dedicate(ctx, pool, "later"); err != nil || !ok {
		t.Fatalf("dedicate later after 000031: %v %v", ok, err)
	}
	if got := indexed("((state >= 2) AND (state <= 7))"); !slices.Equal(got, all) {
		t.Fatalf("topics whose table has task_identifier of EXPIRED to RECREATED after 000031: %v, want all three", got)
	}
	redundant := textRows(t, pool, `SELECT tt.topic FROM task_topic tt
		WHERE EXISTS (SELECT FROM pg_index x WHERE x.indrelid = tt.partition::regclass
		              AND pg_get_indexdef(x.indexrelid) LIKE '%(hashtext(((topic || %::text) || identifier)), sequence) WHERE (state = 8)')
		ORDER BY tt.topic`)
	if !slices.Equal(redundant, all) {
		t.Fatalf("topics whose table has task_identifier_redundant after 000031: %v, want all three", redundant)
	}
	if got := indexed("(state >= 2)"); len(got) != 0 {
		t.Fatalf("topics whose table still has task_identifier of every settled state after 000031: %v", got)
	}
	for _, topic := range all {
		// e1 from Go and e2 from SQL, REPLACE: the READY, SUCCEEDED and FAILED versions
		// become REDUNDANT; e3 from Go and e4 from SQL, DELETE: every version goes
		if _, err := repo.Push(ctx, pool, topic, Replace, Creation{Identifier: "e1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := repo.Push(ctx, pool, topic, Delete, Creation{Identifier: "e3"}); err != nil {
			t.Fatal(err)
		}
		execEach(t, pool,
			"SELECT task_push_batch('"+topic+"', ARRAY['e2'], insertion => 'replace')",
			"SELECT task_push_batch('"+topic+"', ARRAY['e4'], insertion => 'delete')")
		want := []string{"e1 1 1", "e1 8 4", "e2 1 1", "e2 8 4", "e3 1 1", "e4 1 1",
			"e5 1 1", "e5 3 1", "e5 6 1", "e5 8 1", "e6 1 1", "e6 3 1", "e6 6 1", "e6 8 1"}
		if got := counts(topic); !slices.Equal(got, want) {
			t.Fatalf("topic %s after the pushes (identifier, state, count): %v, want %v", topic, got, want)
		}
	}
	revertKeeps(t, pool, steps, "000031", bodies, before)
	steps(-1)
	if got := indexed("(state >= 2)"); !slices.Equal(got, all) {
		t.Fatalf("topics whose table has task_identifier of every settled state after reverting 000031: %v", got)
	}
	if got := textRows(t, pool, "SELECT count(*)::text FROM pg_class WHERE relname = 'task_identifier_redundant'"); got[0] != "0" {
		t.Fatal("task_identifier_redundant still there after reverting 000031")
	}
}

// TestOwnerExpiryMigration: 000032 keeps the owners and their leases, gives the rows
// already there no timeout of their own (each expirer's decides, as before), and lets
// an owner declare one; the revert drops the column and keeps the rows.
func TestOwnerExpiryMigration(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, "pgtask repository owner-expiry test: empty database", nil)
	ctx := t.Context()
	steps, create := stepper(t, pool)
	steps(31)
	create("emails")
	execEach(t, pool,
		"INSERT INTO task_owner (owner, heartbeat, host, pid) VALUES ('old', now() - interval '10 minutes', 'h', 1), ('new', now(), 'h', 2)",
		"SELECT count(task_push('emails', 'e' || g)) FROM generate_series(1, 4) g",
		"UPDATE task SET state = 0, owner = CASE WHEN sequence % 2 = 0 THEN 'old' ELSE 'new' END, attempt = 1 WHERE topic = 'emails'")
	owners := func() []string {
		t.Helper()
		return textRows(t, pool, "SELECT owner || ' ' || heartbeat || ' ' || host || ' ' || pid FROM task_owner ORDER BY owner")
	}
	before, rows := owners(), taskRows(t, pool)

	steps(1)
	sameRows(t, "owners after 000032", owners(), before)
	sameRows(t, "tasks after 000032", taskRows(t, pool), rows)
	if got := textRows(t, pool, "SELECT count(*)::text FROM task_owner WHERE expiry_ms IS NOT NULL"); got[0] != "0" {
		t.Fatalf("%s owner rows with a timeout after 000032, want none", got[0])
	}
	expirer, err := New(Config{Owner: "expirer"})
	if err != nil {
		t.Fatal(err)
	}
	if err := expirer.SetExpiryTimeout(time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := expirer.RegisterOwner(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if got := textRows(t, pool, "SELECT expiry_ms::text FROM task_owner WHERE owner = 'expirer'"); got[0] != "3600000" {
		t.Fatalf("the expirer's row declares %s ms, want 3600000", got[0])
	}
	// old is silent for 10 minutes, new is not: a 5-minute expiry takes old's leases
	got, err := expirer.Expire(ctx, pool, 5*time.Minute)
	if err != nil || len(got) != 1 || got[0].Expired != 2 {
		t.Fatalf("expire after 000032 = %+v, %v; want old's 2 tasks", got, err)
	}
	if got := textRows(t, pool, "SELECT owner || ' ' || state FROM task WHERE state = 0 ORDER BY sequence"); !slices.Equal(got, []string{"new 0", "new 0"}) {
		t.Fatalf("leases after the expiry: %v, want new's two", got)
	}
	before = owners()

	steps(-1)
	sameRows(t, "owners after reverting 000032", owners(), before)
	if got := textRows(t, pool, "SELECT count(*)::text FROM information_schema.columns WHERE table_name = 'task_owner' AND column_name = 'expiry_ms'"); got[0] != "0" {
		t.Fatal("task_owner.expiry_ms still there after reverting 000032")
	}
}

// registerAtOldSchema registers repo's owner at a schema before 000032, whose task_owner
// has no expiry_ms for RegisterOwner to write: the row as the release of that schema
// wrote it.
func registerAtOldSchema(ctx context.Context, pool *pgxpool.Pool, repo *Repository) error {
	_, err := pool.Exec(ctx, "INSERT INTO task_owner (owner, heartbeat) VALUES ($1, COALESCE($2::timestamptz, now()))", repo.owner, repo.clock())
	return err
}

// TestOldestReadyMigration: 000033 makes task_topic_stats count a READY task's wait from
// its push when its not-before lies before it; the revert counts from the not-before
// again. The tasks are kept.
func TestOldestReadyMigration(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, "pgtask repository oldest-ready test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(32)
	create("emails")
	execEach(t, pool,
		"SELECT task_push('emails', 'past')",
		"UPDATE task SET not_before = now() - interval '1 day' WHERE topic = 'emails'")
	oldest := func() []string {
		t.Helper()
		return textRows(t, pool, "SELECT (oldest_ready_age_ms > 3600000)::text FROM task_topic_stats('{}')")
	}
	if got := oldest(); !slices.Equal(got, []string{"true"}) {
		t.Fatalf("at schema 32 the task waited more than an hour: %v, want true (counted from its not-before)", got)
	}
	rows := taskRows(t, pool)
	steps(1)
	sameRows(t, "tasks after 000033", taskRows(t, pool), rows)
	if got := oldest(); !slices.Equal(got, []string{"false"}) {
		t.Fatalf("after 000033 the task pushed just now waited more than an hour: %v", got)
	}
	steps(-1)
	if got := oldest(); !slices.Equal(got, []string{"true"}) {
		t.Fatalf("after reverting 000033: %v, want true", got)
	}
}

// TestArgumentBoundsMigration: 000034 makes task_topic_set_limits, task_schedule and
// task_push(_batch) refuse a rate period, an identifier and a delay that the rest of
// pgtask cannot hold (22023, naming the argument, nothing written). The rows stored
// before are kept, those the earlier functions took too; the revert restores the
// functions as they were.
func TestArgumentBoundsMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository argument bounds test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(33)
	create("emails")
	create("reports")
	long := strings.Repeat("x", 481) + "{time}" // 487 characters, 501 with a fire time in it
	execEach(t, pool,
		"SELECT task_push('emails', 'a', delay => '1 hour')",
		"SELECT task_push_batch('emails', '{b,c,b}', insertion => 'replace')",
		"SELECT task_topic_set_limits('emails', concurrency => 3, rate => 10, rate_period => '1 minute')",
		"SELECT task_schedule('hourly', 'emails', '@hourly', identifier => 'h-{time}')",
		// what schema 33 takes and 34 refuses
		"SELECT task_topic_set_limits('reports', rate => 1, rate_period => '1000 years')",
		"SELECT task_schedule('nightly', 'reports', '@daily', identifier => '"+long+"')",
		"SELECT task_push('reports', 'later', delay => '8000 years')")
	if _, err := pool.Exec(ctx, "SELECT task_push('reports', 'never', delay => '1000000 years')"); SQLState(err) != "22008" {
		t.Fatalf("at schema 33 a delay of a million years: %v, want 22008 (naming no argument)", err)
	}
	functions := func() []string {
		t.Helper()
		return textRows(t, pool, `SELECT p.oid::regprocedure::text || E'\n' || pg_get_functiondef(p.oid) FROM pg_proc p
			WHERE p.proname IN ('task_topic_set_limits', 'task_schedule', 'task_push_batch', 'task_push') ORDER BY 1`)
	}
	stored := func() []string {
		t.Helper()
		return slices.Concat(taskRows(t, pool),
			textRows(t, pool, `SELECT r::text FROM (SELECT topic, concurrency, key_concurrency, rate, rate_period_ms, rate_burst, fair
				FROM task_topic ORDER BY topic) r`),
			textRows(t, pool, "SELECT r::text FROM (SELECT * FROM task_schedule ORDER BY name) r"),
			textRows(t, pool, "SELECT last_value::text || ' ' || is_called::text FROM task_sequence"))
	}
	before, rows := functions(), stored()
	steps(1)
	sameRows(t, "rows after 000034", stored(), rows)
	for _, c := range []struct{ query, says string }{
		{"SELECT task_topic_set_limits('emails', rate => 1, rate_period => '1000 years')", "rate_period 1000 years"},
		{"SELECT task_schedule('weekly', 'emails', '@weekly', identifier => '" + long + "')", "identifier is 501 characters long once {time} is replaced"},
		{"SELECT task_push('emails', 'd', delay => '1000000 years')", "delay '1000000 years' puts the not-before"},
		{"SELECT task_push_batch('emails', '{d,e}', delay => '8000 years')", "delay '8000 years' puts the not-before after the year 9999"},
	} {
		if _, err := pool.Exec(ctx, c.query); SQLState(err) != sqlstateInvalidParameter || !strings.Contains(err.Error(), c.says) {
			t.Errorf("after 000034, %s: %v; want 22023 saying %q", c.query, err, c.says)
		}
	}
	sameRows(t, "rows after the refusals", stored(), rows)
	execEach(t, pool,
		"SELECT task_push('emails', 'f', delay => '2 hours')",
		"SELECT task_topic_set_limits('emails', rate => 2, rate_period => '1 second')",
		"SELECT task_schedule('weekly', 'emails', '@weekly', identifier => 'w-{time}')")
	steps(-1)
	sameRows(t, "functions after reverting 000034", functions(), before)
	execEach(t, pool, "SELECT task_topic_set_limits('emails', rate => 1, rate_period => '1000 years')")
}

// TestReadySinceMigration: 000035 changes nothing on a plain database (the reset and the
// junction it concerns are the Go API's statements): tasks and topics stay as they
// were, up and down.
func TestReadySinceMigration(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, "pgtask repository ready-since test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(34)
	create("emails")
	execEach(t, pool,
		"SELECT task_push('emails', 'a')",
		"SELECT task_push('emails', 'b', delay => '1 hour')",
		"UPDATE task SET state = 3, completed = now() WHERE identifier = 'a'")
	rows := taskRows(t, pool)
	steps(1)
	sameRows(t, "tasks after 000035", taskRows(t, pool), rows)
	steps(-1)
	sameRows(t, "tasks after reverting 000035", taskRows(t, pool), rows)
}

// TestRatePeriodWholeMigration: 000036 makes task_topic_set_limits refuse a period that
// is not a whole number of milliseconds (it stored 1.5 ms as 1 ms); the topics' limits
// stay as they were, up and down.
func TestRatePeriodWholeMigration(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, "pgtask repository rate-period test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(35)
	create("emails")
	create("calls")
	execEach(t, pool,
		"SELECT task_topic_set_limits('emails', rate => 5, rate_period => '1.5 milliseconds')",
		"SELECT task_topic_set_limits('calls', concurrency => 3, rate => 50, rate_period => '1 second')")
	limits := func() []string {
		t.Helper()
		return textRows(t, pool, "SELECT topic || ' ' || coalesce(concurrency::text, '-') || ' ' || rate || ' ' || rate_period_ms FROM task_topic ORDER BY topic")
	}
	before := limits()
	if !slices.Equal(before, []string{"calls 3 50 1000", "emails - 5 1"}) {
		t.Fatalf("limits at schema 35: %v (1.5 ms stored as 1)", before)
	}
	steps(1)
	if got := limits(); !slices.Equal(got, before) {
		t.Fatalf("limits after 000036: %v, want %v", got, before)
	}
	if _, err := pool.Exec(t.Context(), "SELECT task_topic_set_limits('emails', rate => 5, rate_period => '1.5 milliseconds')"); err == nil ||
		!strings.Contains(err.Error(), "not a whole number of milliseconds") {
		t.Fatalf("1.5 ms after 000036: %v, want refused", err)
	}
	steps(-1)
	execEach(t, pool, "SELECT task_topic_set_limits('emails', rate => 5, rate_period => '2.5 milliseconds')")
	if got := limits(); !slices.Equal(got, []string{"calls 3 50 1000", "emails - 5 2"}) {
		t.Fatalf("limits after reverting 000036: %v", got)
	}
}

// TestQueueCapNetMigration: 000037 makes task_push_batch count a replacing push net of
// the READY tasks it ends, so that a topic at its cap takes a REPLACE of tasks pushed
// before the migration; the rows are kept, and the revert restores the functions.
func TestQueueCapNetMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository queue cap net test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(36)
	create("emails")
	execEach(t, pool,
		"SELECT task_push_batch('emails', '{a,b,c}', ARRAY['1', '2', '3'])",
		"SELECT task_push('emails', 'c', insertion => 'replace')",
		"SELECT task_push('emails', 's', suspended => true)",
		"UPDATE task_topic SET queue_cap = 3 WHERE topic = 'emails'")
	replace := "SELECT task_push_batch('emails', '{a,b}', ARRAY['4', '5'], insertion => 'replace')"
	if _, err := pool.Exec(ctx, replace); SQLState(err) != sqlstateRaiseQueueFull {
		t.Fatalf("at schema 36, a REPLACE of two of the three READY tasks: %v, want PT004 (counted as two added)", err)
	}
	functions := func() []string {
		t.Helper()
		return textRows(t, pool, `SELECT p.oid::regprocedure::text || E'\n' || pg_get_functiondef(p.oid) FROM pg_proc p
			WHERE p.proname IN ('task_push_batch', 'task_push', 'task_queue_admits') ORDER BY 1`)
	}
	before, rows := functions(), taskRows(t, pool)
	steps(1)
	sameRows(t, "tasks after 000037", taskRows(t, pool), rows)
	execEach(t, pool, replace)
	state := func() []string {
		t.Helper()
		return textRows(t, pool, "SELECT identifier || ' ' || state || ' ' || coalesce(input, '') FROM task ORDER BY sequence")
	}
	if got, want := state(), []string{"a 8 1", "b 8 2", "c 8 3", "c 1 ", "s 4 ", "a 1 4", "b 1 5"}; !slices.Equal(got, want) {
		t.Fatalf("after the REPLACE at schema 37: %v, want the a and b pushed before REDUNDANT, the new ones READY: %v", got, want)
	}
	// the Go push on those rows too, and a push that grows the topic still refused
	repo, err := New(Config{Owner: "migration"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Push(ctx, pool, "emails", Supersede, Creation{Identifier: "c", Input: "6"}); err != nil {
		t.Fatalf("a SUPERSEDE of c at the cap: %v", err)
	}
	if _, err := pool.Exec(ctx, "SELECT task_push('emails', 'd', insertion => 'replace')"); SQLState(err) != sqlstateRaiseQueueFull {
		t.Fatalf("a REPLACE that adds a task at the cap: %v, want PT004", err)
	}
	steps(-1)
	sameRows(t, "functions after reverting 000037", functions(), before)
	if _, err := pool.Exec(ctx, "SELECT task_push('emails', 'a', insertion => 'replace')"); SQLState(err) != sqlstateRaiseQueueFull {
		t.Fatalf("after reverting 000037, a REPLACE at the cap: %v, want PT004 again", err)
	}
}

// TestScheduleZoneNamesMigration: 000038 makes task_schedule refuse the zones processors
// do not read alike (localtime, posixrules, posix/…) and trim a spec of the ASCII white
// space Go trims; schedules stored before it keep their zone and spec and are still
// read from Go; the revert restores the function.
func TestScheduleZoneNamesMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository schedule zone names test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(37)
	create("emails")
	execEach(t, pool,
		"SELECT task_schedule('local', 'emails', '0 8 * * *', time_zone => 'localtime')",
		`SELECT task_schedule('tabbed', 'emails', E'@hourly\t', time_zone => 'Europe/Paris')`)
	schedules := func() []string {
		t.Helper()
		return textRows(t, pool, "SELECT name || ' ' || time_zone || ' ' || length(spec) FROM task_schedule ORDER BY name")
	}
	before := schedules()
	if !slices.Equal(before, []string{"local localtime 9", "tabbed Europe/Paris 8"}) {
		t.Fatalf("schedules at schema 37: %v (localtime taken, the tab kept)", before)
	}
	functions := func() []string {
		t.Helper()
		return textRows(t, pool, `SELECT pg_get_functiondef(p.oid) FROM pg_proc p WHERE p.proname = 'task_schedule'`)
	}
	fnBefore := functions()
	steps(1)
	sameRows(t, "schedules after 000038", schedules(), before)
	for _, tz := range []string{"localtime", "posixrules", "posix/Europe/Paris"} {
		_, err := pool.Exec(ctx, "SELECT task_schedule('again', 'emails', '@hourly', time_zone => $1)", tz)
		if err == nil || SQLState(err) != "22023" || !strings.Contains(err.Error(), "not an IANA zone name") {
			t.Errorf("time zone %q after 000038: %v, want 22023 refusing it", tz, err)
		}
	}
	execEach(t, pool, `SELECT task_schedule('tabbed2', 'emails', E'@hourly\t\n', time_zone => 'Europe/Paris')`)
	if got := textRows(t, pool, "SELECT spec FROM task_schedule WHERE name = 'tabbed2'"); !slices.Equal(got, []string{"@hourly"}) {
		t.Errorf("spec after 000038: %q, want it trimmed as Go trims it", got)
	}
	steps(-1)
	sameRows(t, "task_schedule after reverting 000038", functions(), fnBefore)
	execEach(t, pool, "SELECT task_schedule('again', 'emails', '@hourly', time_zone => 'localtime')")
	// the schedule stored with localtime is read from Go as before (at the newest
	// schema, which the Go API reads: 000041 kept the row)
	migrateTo(t, pool, 0)
	repo, err := New(Config{Owner: "migration"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Schedule(ctx, pool, "local"); err != nil {
		t.Fatalf("read the schedule stored with localtime: %v", err)
	}
}

// TestCappedStatsMigration: 000039 makes task_topic_stats count each state up to 100 001
// through task_topic_counts; the stats of a topic with tasks of every open state, a
// delayed one among them, are the same before and after, the tasks kept; the revert
// restores the function and drops task_topic_counts.
func TestCappedStatsMigration(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, "pgtask repository capped stats test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(38)
	create("emails")
	create("empty")
	execEach(t, pool,
		"SELECT task_push_batch('emails', ARRAY(SELECT 'r' || g FROM generate_series(1, 20) g))",
		"SELECT task_push('emails', 'later', delay => '1 hour')",
		"SELECT task_push('emails', 'high', priority => 5)",
		// a READY task pushed an hour ago at priority 9, and tasks of the other open states
		"UPDATE task SET created = now() - interval '1 hour', priority = 9 WHERE identifier = 'r20'",
		"UPDATE task SET state = 0, owner = 'gone' WHERE identifier IN ('r1', 'r2')",
		"UPDATE task SET state = 2 WHERE identifier = 'r3'",
		"UPDATE task SET state = 3, completed = now() WHERE identifier IN ('r4', 'r5', 'r6')",
		"UPDATE task SET state = 4, completed = now() WHERE identifier = 'r7'",
		"UPDATE task SET state = 5, completed = now() WHERE identifier = 'r8'")
	stats := func() []string {
		t.Helper()
		return textRows(t, pool, `SELECT topic || ' ' || active || ' ' || ready || ' ' || delayed || ' ' || expired || ' ' ||
			failed || ' ' || suspended || ' ' || (oldest_ready_age_ms / 60000) FROM task_topic_stats('{}') ORDER BY topic`)
	}
	before := stats()
	if !slices.Equal(before, []string{"emails 2 14 1 1 3 1 60", "empty 0 0 0 0 0 0 0"}) {
		t.Fatalf("stats at schema 38: %v", before)
	}
	rows := taskRows(t, pool)
	steps(1)
	sameRows(t, "tasks after 000039", taskRows(t, pool), rows)
	sameRows(t, "stats after 000039", stats(), before)
	steps(-1)
	sameRows(t, "stats after reverting 000039", stats(), before)
	if got := textRows(t, pool, "SELECT count(*)::text FROM pg_proc WHERE proname = 'task_topic_counts'"); !slices.Equal(got, []string{"0"}) {
		t.Errorf("task_topic_counts after reverting 000039: %v functions, want none", got)
	}
}

// TestStatsBoundMigration: 000040 bounds the oldest wait's search and writes the first
// pass once (task_topic_open_pass, task_topic_capped_counts); the stats of a small topic
// and of one past 10 000 open tasks are the same before and after, through
// task_topic_stats and task_topic_counts, the tasks kept; the revert restores both
// functions and drops the new ones.
func TestStatsBoundMigration(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, "pgtask repository stats bound test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(39)
	create("emails")
	create("big")
	execEach(t, pool,
		"SELECT task_push_batch('emails', ARRAY(SELECT 'r' || g FROM generate_series(1, 20) g))",
		"SELECT task_push('emails', 'later', delay => '1 hour')",
		"UPDATE task SET created = now() - interval '1 hour', priority = 9 WHERE identifier = 'r20'",
		"UPDATE task SET state = 0, owner = 'gone' WHERE identifier IN ('r1', 'r2')",
		"UPDATE task SET state = 3, completed = now() WHERE identifier IN ('r4', 'r5', 'r6')",
		// past 10 000 open tasks: READY at two priorities, the oldest waiting two hours,
		// FAILED and delayed ones
		`INSERT INTO task (sequence, topic, identifier, priority, created)
		 SELECT nextval('task_sequence'), 'big', 'b' || g, g % 2, now() - interval '1 minute'
		 FROM generate_series(1, 11000) g`,
		"UPDATE task SET created = now() - interval '2 hours' WHERE topic = 'big' AND identifier = 'b7'",
		`INSERT INTO task (sequence, topic, identifier, state, completed)
		 SELECT nextval('task_sequence'), 'big', 'f' || g, 3, now() FROM generate_series(1, 500) g`,
		`INSERT INTO task (sequence, topic, identifier, not_before)
		 SELECT nextval('task_sequence'), 'big', 'd' || g, now() + interval '1 day' FROM generate_series(1, 30) g`)
	const counts = `active || ' ' || ready || ' ' || delayed || ' ' || expired || ' ' || failed || ' ' || suspended ||
		' ' || (oldest_ready_age_ms / 60000)`
	stats := func() []string {
		t.Helper()
		return append(textRows(t, pool, `SELECT topic || ' ' || `+counts+` FROM task_topic_stats('{}') ORDER BY topic`),
			textRows(t, pool, `SELECT 'counts ' || `+counts+` FROM task_topic_counts('big')`)...)
	}
	before := stats()
	if want := []string{"big 0 11030 30 0 500 0 120", "emails 2 16 1 0 3 0 60", "counts 0 11030 30 0 500 0 120"}; !slices.Equal(before, want) {
		t.Fatalf("stats at schema 39: %v, want %v", before, want)
	}
	rows := taskRows(t, pool)
	steps(1)
	sameRows(t, "tasks after 000040", taskRows(t, pool), rows)
	sameRows(t, "stats after 000040", stats(), before)
	steps(-1)
	sameRows(t, "stats after reverting 000040", stats(), before)
	if got := textRows(t, pool, `SELECT string_agg(proname, ' ' ORDER BY proname) FROM pg_proc
		WHERE proname IN ('task_topic_open_pass', 'task_topic_capped_counts', 'task_topic_counts')`); !slices.Equal(got, []string{"task_topic_counts"}) {
		t.Errorf("functions after reverting 000040: %v, want task_topic_counts only", got)
	}
}

// TestScheduleEditsMigration: 000041 adds task_schedule_check and fire_from to a database
// of version 40 with schedules of every kind (declared in SQL and not yet computed, fired,
// paused, one stored with a zone the check refuses now): every row is kept as it was and
// fires as before; the trigger acts on the upgraded rows (a resume marks fire_from, a
// bad spec is refused, a change of another setting of the legacy row is taken). The
// revert drops them and keeps the rows, a next_fire the trigger cleared set to its
// fire_from so that the schedule is not replayed from its creation.
func TestScheduleEditsMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository schedule edits test: empty database", nil)
	steps, create := stepper(t, pool)
	steps(40)
	create("emails")
	execEach(t, pool,
		"SELECT task_schedule('declared', 'emails', '0 8 * * *', time_zone => 'Europe/Paris')",
		"SELECT task_schedule('paused', 'emails', '@every 1h', paused => true)",
		`INSERT INTO task_schedule (name, topic, spec, time_zone, next_fire, last_fire, last_fired_at, last_sequence, fires)
		 VALUES ('fired', 'emails', '*/5 * * * *', 'UTC', '2026-03-01 12:05:00Z', '2026-03-01 12:00:00Z', '2026-03-01 12:00:01Z', 7, 3),
		        ('legacy', 'emails', '@hourly', 'right/UTC', '2026-03-01 13:00:00Z', NULL, NULL, NULL, 0)`,
		"UPDATE task_schedule SET next_fire = '2026-03-01 13:00:00Z' WHERE name = 'paused'")
	const columns = `name, topic, spec, time_zone, identifier, input, priority, insertion, catch_up, paused, next_fire,
		last_fire, last_fired_at, last_sequence, fires, created, updated`
	rows := func() []string {
		t.Helper()
		return textRows(t, pool, "SELECT r::text FROM (SELECT "+columns+" FROM task_schedule ORDER BY name) r")
	}
	before := rows()

	steps(1)
	sameRows(t, "schedules after 000041", rows(), before)
	if got := textRows(t, pool, "SELECT count(*)::text FROM task_schedule WHERE fire_from IS NOT NULL"); !slices.Equal(got, []string{"0"}) {
		t.Errorf("schedules with a fire_from after 000041: %v, want none", got)
	}
	// the upgraded rows fire as before: the declared one from its creation, the fired
	// one from its next_fire, the legacy zone kept
	clock := time.Date(2026, 3, 1, 12, 5, 0, 0, time.UTC)
	repo, err := New(Config{Owner: "upgrader", Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	fires, err := repo.FireSchedules(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	fired := map[string]string{}
	for _, f := range fires {
		fired[f.Schedule] = f.Times[len(f.Times)-1].Format(time.RFC3339)
	}
	if len(fired) != 1 || fired["fired"] != "2026-03-01T12:05:00Z" {
		t.Errorf("fires after 000041: %v, want the fired schedule's 12:05", fired)
	}
	// the trigger on upgraded rows
	execEach(t, pool,
		"UPDATE task_schedule SET priority = 4 WHERE name = 'legacy'",
		"UPDATE task_schedule SET paused = false WHERE name = 'paused'",
		"UPDATE task_schedule SET spec = '0 9 * * *' WHERE name = 'declared'")
	if _, err := pool.Exec(ctx, "UPDATE task_schedule SET spec = '0 0 30 2 *' WHERE name = 'fired'"); SQLState(err) != "22023" {
		t.Errorf("a spec that never fires after 000041: %v, want 22023", err)
	}
	marks := textRows(t, pool, `SELECT name || ' ' || (next_fire IS NULL) || ' ' || (fire_from IS NOT NULL)
		FROM task_schedule ORDER BY name`)
	if want := []string{"declared true true", "fired false false", "legacy false false", "paused false true"}; !slices.Equal(marks, want) {
		t.Errorf("next_fire NULL, fire_from set after the edits: %v, want %v", marks, want)
	}
	var declaredFrom, pausedFrom time.Time
	if err := pool.QueryRow(ctx, "SELECT fire_from FROM task_schedule WHERE name = 'declared'").Scan(&declaredFrom); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, "SELECT fire_from FROM task_schedule WHERE name = 'paused'").Scan(&pausedFrom); err != nil {
		t.Fatal(err)
	}

	steps(-1)
	if got := textRows(t, pool, `SELECT count(*)::text FROM pg_trigger WHERE tgname = 'task_schedule_check'
		UNION ALL SELECT count(*)::text FROM information_schema.columns WHERE table_name = 'task_schedule' AND column_name = 'fire_from'`); !slices.Equal(got, []string{"0", "0"}) {
		t.Errorf("trigger and column after reverting 000041: %v, want none", got)
	}
	var next time.Time
	if err := pool.QueryRow(ctx, "SELECT next_fire FROM task_schedule WHERE name = 'declared'").Scan(&next); err != nil || !next.Equal(declaredFrom) {
		t.Errorf("after reverting 000041 the respecified schedule's next_fire is %v (%v), want its fire_from %v", next, err, declaredFrom)
	}
	// resumed with a next_fire before the resume (@every 1h, 13:00): moved past it, not
	// replayed, to the next point of its grid (fire_from itself would be pushed at
	// once by the firers before 000041, and the hours counted from it)
	anchor := time.Date(2026, 3, 1, 13, 0, 0, 0, time.UTC)
	if err := pool.QueryRow(ctx, "SELECT next_fire FROM task_schedule WHERE name = 'paused'").Scan(&next); err != nil ||
		!next.After(pausedFrom) || next.Sub(pausedFrom) > time.Hour || next.Sub(anchor)%time.Hour != 0 {
		t.Errorf("after reverting 000041 the resumed schedule's next_fire is %v (%v), want the first whole hour after its fire_from %v", next, err, pausedFrom)
	}
	if got := textRows(t, pool, "SELECT name || ' ' || priority || ' ' || time_zone FROM task_schedule WHERE name = 'legacy'"); !slices.Equal(got, []string{"legacy 4 right/UTC"}) {
		t.Errorf("legacy schedule after reverting 000041: %v", got)
	}
	steps(1)
}

// TestScheduleFiredIdentifierMigration: 000044 makes task_schedule_check refuse an
// identifier, or a name standing for it, too long once {time} is replaced, on a database
// of version 43 holding such schedules (written by hand, as 000041 let through): the rows
// are kept as they are and take other changes; a new write of such an identifier is
// refused. The revert lets it through again and keeps the rows.
func TestScheduleFiredIdentifierMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository schedule fired identifier test: empty database", nil)
	steps, create := stepper(t, pool)
	migrateTo(t, pool, 43)
	create("emails")
	long := strings.Repeat("x", 481) + "{time}" // 501 characters once replaced
	name := strings.Repeat("{time}", 41)        // 820
	for _, q := range []string{
		"INSERT INTO task_schedule (name, topic, spec, time_zone, identifier) VALUES ('long', 'emails', '@hourly', 'UTC', '" + long + "')",
		"INSERT INTO task_schedule (name, topic, spec, time_zone) VALUES ('" + name + "', 'emails', '@hourly', 'UTC')",
		"INSERT INTO task_schedule (name, topic, spec, time_zone, identifier) VALUES ('short', 'emails', '@hourly', 'UTC', 'short-{time}')",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("at version 43: %s: %v", q, err)
		}
	}
	const columns = `name, topic, spec, time_zone, identifier, input, priority, insertion, catch_up, paused, next_fire,
		last_fire, last_fired_at, last_sequence, fires, fire_from, created, updated`
	rows := func() []string {
		t.Helper()
		return textRows(t, pool, "SELECT r::text FROM (SELECT "+columns+" FROM task_schedule ORDER BY name) r")
	}
	before := rows()

	steps(1)
	sameRows(t, "schedules after 000044", rows(), before)
	execEach(t, pool,
		"UPDATE task_schedule SET priority = 2 WHERE name = 'long'",
		"UPDATE task_schedule SET paused = true WHERE name = '"+name+"'")
	for _, q := range []string{
		"UPDATE task_schedule SET identifier = '" + long + "' WHERE name = 'short'",
		"UPDATE task_schedule SET identifier = NULL WHERE name = 'short'", // fine: the name 'short'
		"INSERT INTO task_schedule (name, topic, spec, time_zone) VALUES ('" + name + "x', 'emails', '@hourly', 'UTC')",
	} {
		_, err := pool.Exec(ctx, q)
		if ok := strings.Contains(q, "NULL"); ok != (err == nil) || (!ok && SQLState(err) != "22023") {
			t.Errorf("after 000044: %.60s…: %v, want %s", q, err, map[bool]string{true: "accepted", false: "22023"}[ok])
		}
	}
	if got := textRows(t, pool, "SELECT name || ' ' || coalesce(identifier, '-') || ' ' || priority || ' ' || paused FROM task_schedule WHERE length(name) < 10 ORDER BY name"); !slices.Equal(got,
		[]string{"long " + long + " 2 false", "short - 0 false"}) {
		t.Errorf("schedules after the changes: %v", got)
	}

	steps(-1)
	execEach(t, pool, "UPDATE task_schedule SET identifier = '"+long+"' WHERE name = 'short'")
	if got := textRows(t, pool, "SELECT count(*)::text FROM task_schedule"); !slices.Equal(got, []string{"3"}) {
		t.Errorf("schedules after reverting 000044: %v, want 3", got)
	}
	steps(1)
}

// TestScheduleNameControlMigration: 000048 refuses a new schedule name with a control
// character; a schedule of such a name stored before stays, and its other settings
// still change. Reverted, such names are accepted again.
func TestScheduleNameControlMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository schedule name control test: empty database", nil)
	steps, create := stepper(t, pool)
	migrateTo(t, pool, 47)
	create("emails")
	execEach(t, pool,
		"INSERT INTO task_schedule (name, topic, spec, time_zone) VALUES (E'tab\\tbed', 'emails', '@hourly', 'UTC')",
		"INSERT INTO task_schedule (name, topic, spec, time_zone) VALUES ('plain', 'emails', '@hourly', 'UTC')")
	steps(1)
	execEach(t, pool, "UPDATE task_schedule SET priority = 3, spec = '@daily' WHERE name = E'tab\\tbed'")
	for _, q := range []string{
		"INSERT INTO task_schedule (name, topic, spec, time_zone) VALUES (E'new\\nline', 'emails', '@hourly', 'UTC')",
		"UPDATE task_schedule SET name = E'plain\\x7f' WHERE name = 'plain'",
	} {
		if _, err := pool.Exec(ctx, q); SQLState(err) != "22023" || !strings.Contains(err.Error(), "control character") {
			t.Errorf("after 000048: %s: %v, want 22023 naming the control character", q, err)
		}
	}
	if got := textRows(t, pool, "SELECT replace(name, E'\\t', '<tab>') || ' ' || spec || ' ' || priority FROM task_schedule ORDER BY name"); !slices.Equal(got,
		[]string{"plain @hourly 0", "tab<tab>bed @daily 3"}) {
		t.Errorf("schedules after 000048: %v", got)
	}
	steps(-1)
	execEach(t, pool, "INSERT INTO task_schedule (name, topic, spec, time_zone) VALUES (E'new\\nline', 'emails', '@hourly', 'UTC')")
	steps(1)
}

// TestSupportedServer: Migrate refuses a server older than PostgreSQL 14, naming its
// version and the one needed, before any statement changes the schema.
func TestSupportedServer(t *testing.T) {
	for _, version := range []int{130012, 120000, 139999} {
		err := supportedServer(version)
		want := fmt.Sprintf("PostgreSQL %d.%d: pgtask needs PostgreSQL 14 or later; nothing was changed", version/10000, version%10000)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("supportedServer(%d) = %v, want ErrInvalid saying %q", version, err, want)
		}
	}
	for _, version := range []int{140000, 150019, 180001} {
		if err := supportedServer(version); err != nil {
			t.Errorf("supportedServer(%d) = %v, want nil", version, err)
		}
	}
}

// TestFinalFailureMigration: 000049 gives task_complete result 5, a FAILURE without
// retry, on a database with tasks leased at 48; its down migration puts back the
// function without it, which still completes as before.
func TestFinalFailureMigration(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, "pgtask repository final failure test: empty database", nil)
	steps, create := stepper(t, pool)
	migrateTo(t, pool, 48)
	create("emails")
	lease := `UPDATE task t SET state = 0, owner = 'o', attempt = t.attempt + 1 WHERE t.topic = 'emails' AND t.state = 1`
	execEach(t, pool, "UPDATE task_topic SET max_attempts = 5 WHERE topic = 'emails'",
		"SELECT task_push('emails', 'a')", "SELECT task_push('emails', 'b')", lease)
	steps(1)
	execEach(t, pool, `SELECT count(*) FROM task_complete('emails', 'o',
		ARRAY(SELECT sequence FROM task WHERE topic = 'emails' ORDER BY sequence), '{1,1}', '{5,0}', '{bad input,try again}', '{0,0}')`)
	if got := textRows(t, pool, "SELECT identifier || ' ' || state || ' ' || array_to_string(errors, ',') || ' ' || (completed IS NOT NULL) FROM task WHERE topic = 'emails' ORDER BY sequence"); !slices.Equal(got,
		[]string{"a 3 bad input true", "b 1 try again false"}) {
		t.Errorf("after 000049, a FAILURE without retry and one with: %v, want a FAILED, b READY for its retry", got)
	}
	steps(-1)
	if def := textRows(t, pool, "SELECT pg_get_functiondef('task_complete'::regproc)"); len(def) != 1 || strings.Contains(def[0], "result = 5") ||
		!strings.Contains(def[0], "jit") || !strings.Contains(def[0], "enable_nestloop") {
		t.Errorf("task_complete after 000049 down: %v, want 000025's body with jit and nested loops off", def)
	}
	execEach(t, pool, "UPDATE task SET not_before = NULL WHERE topic = 'emails'", lease,
		`SELECT count(*) FROM task_complete('emails', 'o', ARRAY(SELECT sequence FROM task WHERE topic = 'emails' AND state = 0), '{2}', '{3}', '{done}', '{0}')`)
	if got := textRows(t, pool, "SELECT identifier || ' ' || state FROM task WHERE topic = 'emails' ORDER BY sequence"); !slices.Equal(got, []string{"a 3", "b 6"}) {
		t.Errorf("after 000049 down, a SUCCESS: %v, want b SUCCEEDED", got)
	}
	steps(1)
}

// TestFinalFailureOnAnOlderSchema: a FAILURE without retry (FailFinal) of this release
// on a schema not migrated to 000050 yet (at 48, before result 5; at 49, result 5 only)
// is a FAILURE, retried while attempts are left, never another state; from 000050 on,
// FAILED at once. Before 000050 the release sent result 5, which a schema at 48 made
// state 8 (REDUNDANT), the task gone from the dead-letter set without its error.
func TestFinalFailureOnAnOlderSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository final failure compatibility test: empty database", nil)
	steps, create := stepper(t, pool)
	migrateTo(t, pool, 48)
	create("emails")
	execEach(t, pool, "UPDATE task_topic SET max_attempts = 5 WHERE topic = 'emails'")
	r, err := New(Config{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	failFinal := func(identifier string) Task {
		t.Helper()
		if _, err := r.Push(ctx, pool, "emails", Append, Creation{Identifier: identifier}); err != nil {
			t.Fatal(err)
		}
		leased, err := r.Poll(ctx, pool, "emails", FIFO, None, 10)
		if err != nil || len(leased) != 1 {
			t.Fatalf("poll: %v, %v", leased, err)
		}
		done, err := r.Complete(ctx, pool, "emails", leased[0].Decide(FailFinal(errors.New("bad input"))))
		if err != nil || len(done) != 1 {
			t.Fatalf("complete: %v, %v", done, err)
		}
		return done[0]
	}
	for _, v := range []uint{48, 49} {
		if v == 49 {
			steps(1)
		}
		if got := failFinal(fmt.Sprint("at-", v)); got.State != Ready || !slices.Equal(got.Errors, []string{"bad input"}) {
			t.Errorf("FailFinal at schema %d: %v, errors %q; want READY for its retry, the error kept", v, got.State, got.Errors)
		}
		execEach(t, pool, "UPDATE task SET state = 6 WHERE topic = 'emails'") // out of the way
	}
	steps(1)
	if got := failFinal("at-50"); got.State != Failed || !slices.Equal(got.Errors, []string{"bad input"}) {
		t.Errorf("FailFinal at schema 50: %v, errors %q; want FAILED, the error kept", got.State, got.Errors)
	}
}

// TestNotifiedDueTimeMigration: from 000053 on, the notifications task_push_batch and
// task_complete send for delayed work add the due time (milliseconds since the epoch,
// rounded up) after the delay; reverted, they are as before; the rows written before
// are kept, and the functions keep their settings.
func TestNotifiedDueTimeMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository notified due time test: empty database", nil)
	steps, create := stepper(t, pool)
	migrateTo(t, pool, 52)
	create("emails")
	execEach(t, pool, "SELECT task_push('emails', 'before', delay => '1 hour')")
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+NotificationChannel); err != nil {
		t.Fatal(err)
	}
	// delayed pushes a task an hour ahead (task_push), leases it and snoozes it for two
	// hours (task_complete), and returns the two notifications and the task's not-before
	// time after the snooze
	delayed := func(identifier string) (push, snooze Notification, notBefores []time.Time) {
		t.Helper()
		execEach(t, pool, "SELECT task_push('emails', '"+identifier+"', delay => '1 hour')",
			"UPDATE task SET state = 0, owner = 'o', attempt = 1 WHERE topic = 'emails' AND identifier = '"+identifier+"'",
			`SELECT count(*) FROM task_complete('emails', 'o', ARRAY(SELECT sequence FROM task WHERE identifier = '`+identifier+`'),
				'{1}', '{4}', '{""}', '{7200000}')`)
		for _, n := range []*Notification{&push, &snooze} {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			got, err := conn.Conn().WaitForNotification(wctx)
			cancel()
			if err != nil {
				t.Fatalf("%s: no notification: %v", identifier, err)
			}
			if *n, err = ParseNotification(got.Payload); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range textRows(t, pool, "SELECT (extract(epoch FROM not_before) * 1e6)::bigint FROM task WHERE identifier = '"+identifier+"'") {
			us, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			notBefores = append(notBefores, time.UnixMicro(us))
		}
		return push, snooze, notBefores
	}
	// dueOf is the due time a notification of a task not before nb carries
	dueOf := func(nb time.Time) time.Time { return time.UnixMilli((nb.UnixMicro() + 999) / 1000) }

	steps(1)
	push, snooze, nb := delayed("after")
	// the push's due time is an hour from then (its not-before time, which the snooze
	// moved on)
	if push.Due.IsZero() || push.Delay <= 0 || time.Until(push.Due) < 59*time.Minute || time.Until(push.Due) > time.Hour {
		t.Errorf("task_push at 000053: notified %+v, want a due time an hour from now", push)
	}
	if len(nb) != 1 || !snooze.Due.Equal(dueOf(nb[0])) || snooze.Delay <= 0 {
		t.Errorf("task_complete's snooze at 000053: notified %+v, want due at %v (the task's not-before time)", snooze, nb)
	}
	if def := textRows(t, pool, "SELECT pg_get_functiondef('task_complete'::regproc)"); len(def) != 1 ||
		!strings.Contains(def[0], "jit") || !strings.Contains(def[0], "enable_nestloop") {
		t.Errorf("task_complete at 000053: %v, want jit and nested loops off", def)
	}

	steps(-1)
	push, snooze, _ = delayed("reverted")
	if !push.Due.IsZero() || push.Delay <= 0 || !snooze.Due.IsZero() || snooze.Delay <= 0 {
		t.Errorf("after 000053 down: notified %+v and %+v, want delays without due times", push, snooze)
	}
	steps(1)
	if got := textRows(t, pool, "SELECT identifier || ' ' || state FROM task WHERE topic = 'emails' ORDER BY sequence"); !slices.Equal(got,
		[]string{"before 1", "after 1", "reverted 1"}) {
		t.Errorf("tasks after 000053 up, down and up: %v, want the three READY", got)
	}
}

// TestLeaseAfterTheTurnMigration: 000054 adds task_poll (a poll's choice and its lease in
// two statements) and has task_complete_poll lease through it, and keeps the rows; a
// limited topic's polls, and its chain's statement, lease under the limit at 53, at 54
// and reverted. A repository of each version polls (this build's polls a topic it saw
// limited through task_poll; at 53, which lacks it, it polls with TaskPoll).
func TestLeaseAfterTheTurnMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository lease after the turn test: empty database", nil)
	steps, create := stepper(t, pool)
	migrateTo(t, pool, 53)
	create("emails")
	execEach(t, pool, "SELECT task_topic_set_limits('emails', concurrency => 2, rate => 100, rate_period => '1 second', rate_burst => 100)")
	for i := range 12 {
		execEach(t, pool, fmt.Sprintf("SELECT task_push('emails', 'e%d')", i))
	}
	// each version polls 2 under the limit, completes one and leases the next in one
	// statement, and completes the rest
	var clock atomic.Int64 // minutes ahead of time.Now
	poll := func(at string, r *Repository) {
		t.Helper()
		if r == nil {
			var err error
			if r, err = New(Config{Owner: "owner-" + at, Now: func() time.Time { return time.Now().Add(time.Duration(clock.Load()) * time.Minute) }}); err != nil {
				t.Fatal(err)
			}
		}
		// the repository knows the topic limited, as a processor does from its start
		if _, err := r.Topic(ctx, pool, "emails"); err != nil {
			t.Fatal(err)
		}
		leased, err := r.Poll(ctx, pool, "emails", FIFO, None, 10)
		if err != nil || len(leased) != 2 {
			t.Fatalf("poll at %s: %v, %v; want 2 under the limit", at, leased, err)
		}
		_, next, err := r.CompleteAndPoll(ctx, pool, "emails", []Completion{leased[0].Decide(Succeed(""))}, FIFO, None, 10, Position{})
		if err != nil || len(next) != 1 {
			t.Fatalf("complete and poll at %s: %v, %v; want 1 leased in the slot freed", at, next, err)
		}
		if _, err := r.Complete(ctx, pool, "emails", leased[1].Decide(Succeed("")), next[0].Decide(Succeed(""))); err != nil {
			t.Fatal(err)
		}
		if got := r.noTaskPollUntil.Load() != 0; got != strings.HasPrefix(at, "53") {
			t.Errorf("at %s the repository found task_poll missing: %v", at, got)
		}
	}
	hasPoll := func() bool {
		return len(textRows(t, pool, "SELECT 1 FROM pg_proc WHERE proname = 'task_poll'")) == 1
	}
	old, err := New(Config{Owner: "owner-53", Now: func() time.Time { return time.Now().Add(time.Duration(clock.Load()) * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	poll("53", old)
	steps(1)
	if def := textRows(t, pool, "SELECT pg_get_functiondef('task_complete_poll'::regproc)"); !hasPoll() || len(def) != 1 ||
		!strings.Contains(def[0], "FROM task_poll(") {
		t.Errorf("at 54: task_poll %v, task_complete_poll %v; want task_poll, and task_complete_poll leasing through it", hasPoll(), def)
	}
	poll("54", nil)
	// the repository that found task_poll missing tries it again a minute later
	clock.Store(2)
	poll("54 for the repository of 53", old)
	steps(-1)
	if def := textRows(t, pool, "SELECT pg_get_functiondef('task_complete_poll'::regproc)"); hasPoll() || len(def) != 1 ||
		strings.Contains(def[0], "FROM task_poll(") {
		t.Errorf("after 000054 down: task_poll %v, task_complete_poll %v; want 000026's alone", hasPoll(), def)
	}
	poll("53-again", nil)
	steps(1)
	if got := textRows(t, pool, "SELECT count(*) || ' ' || state FROM task WHERE topic = 'emails' GROUP BY state ORDER BY state"); !slices.Equal(got,
		[]string{"12 6"}) {
		t.Errorf("tasks after 000054 up, down and up: %v, want the twelve SUCCEEDED", got)
	}
}

// TestScheduleTopicIndexMigration: 000055 indexes task_schedule by topic and keeps the
// schedules; a topic's schedules are read through the index among many others, and the
// schedules are as they were after up, down and up.
func TestScheduleTopicIndexMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository schedule topic index test: empty database", nil)
	steps, _ := stepper(t, pool)
	migrateTo(t, pool, 54)
	execEach(t, pool,
		"SELECT task_topic_create('t' || g) FROM generate_series(1, 300) g",
		"INSERT INTO task_schedule (name, topic, spec, identifier) SELECT 's' || g, 't' || (g % 300 + 1), '@daily', 'i' FROM generate_series(1, 3000) g")
	names := func() []string {
		t.Helper()
		return textRows(t, pool, "SELECT string_agg(name, ',' ORDER BY name) FROM task_schedule WHERE topic = 't7'")
	}
	before := names()
	steps(1)
	execEach(t, pool, "ANALYZE task_schedule")
	plan := textRows(t, pool, "EXPLAIN SELECT * FROM task_schedule WHERE topic = 't7' ORDER BY name")
	if !strings.Contains(strings.Join(plan, "\n"), "task_schedule_topic") {
		t.Errorf("a topic's schedules at 55: %s; want them read through task_schedule_topic", strings.Join(plan, "\n"))
	}
	r, err := New(Config{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	of, err := r.SchedulesOf(ctx, pool, "t7")
	if err != nil || len(of) != 10 {
		t.Errorf("SchedulesOf t7 at 55: %d schedules, %v; want 10", len(of), err)
	}
	steps(-1)
	if got := textRows(t, pool, "SELECT count(*) FROM pg_indexes WHERE indexname = 'task_schedule_topic'"); !slices.Equal(got, []string{"0"}) {
		t.Errorf("task_schedule_topic after 000055 down: %v, want none", got)
	}
	steps(1)
	if after := names(); !slices.Equal(after, before) || len(textRows(t, pool, "SELECT 1 FROM task_schedule")) != 3000 {
		t.Errorf("t7's schedules after 000055 up, down and up: %v, want %v of 3000", after, before)
	}
}

// TestPushNotBeforeMigration: 000057 gives task_push and task_push_batch a not_before
// parameter; the tasks pushed before are kept as they were, a call without it works as
// before, and the revert drops the parameter (a call naming it is refused) and keeps the
// tasks, those pushed with it included.
func TestPushNotBeforeMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository push not-before test: empty database", nil)
	steps, create := stepper(t, pool)
	migrateTo(t, pool, 56)
	create("emails")
	// an installation's privileges on the functions: EXECUTE revoked from PUBLIC and
	// granted to its role (roles are the server's: one of this test's own)
	role := fmt.Sprintf("pgtask_push_%d", time.Now().UnixNano())
	execEach(t, pool, "CREATE ROLE "+role)
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		_, _ = pool.Exec(ctx, "DROP OWNED BY "+role)
		_, _ = pool.Exec(ctx, "DROP ROLE "+role)
	})
	privileges := func(signature string) []string {
		t.Helper()
		return textRows(t, pool, `SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' WHEN a.grantee::regrole::text = '`+role+`' THEN 'role' ELSE 'owner' END || ' ' || a.privilege_type
			FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
			WHERE p.oid = '`+signature+`'::regprocedure ORDER BY 1`)
	}
	const push9, batch9 = "task_push(text, text, text, text, interval, integer, text, boolean, text)",
		"task_push_batch(text, text[], text[], text, interval, integer, text, boolean, text)"
	const push10, batch10 = "task_push(text, text, text, text, interval, integer, text, boolean, text, timestamptz)",
		"task_push_batch(text, text[], text[], text, interval, integer, text, boolean, text, timestamptz)"
	for _, f := range []string{push9, batch9} {
		execEach(t, pool, "REVOKE ALL ON FUNCTION "+f+" FROM PUBLIC", "GRANT EXECUTE ON FUNCTION "+f+" TO "+role)
	}
	want := []string{"owner EXECUTE", "role EXECUTE"}
	if got := privileges(push9); !slices.Equal(got, want) {
		t.Fatalf("privileges at 56: %v, want %v", got, want)
	}
	execEach(t, pool,
		"SELECT task_push('emails', 'a', 'in', delay => '1 hour', priority => 3)",
		"SELECT task_push_batch('emails', '{b,c}', '{x,y}', 'replace', NULL, 0, 'ref', false, 'key')")
	tasks := func() []string {
		t.Helper()
		return textRows(t, pool, "SELECT concat_ws(' ', sequence, identifier, state, input, reference, priority, concurrency_key, not_before) FROM task ORDER BY sequence")
	}
	before := tasks()
	steps(1)
	sameRows(t, "tasks after 000057", tasks(), before)
	for _, f := range []string{push10, batch10} {
		if got := privileges(f); !slices.Equal(got, want) {
			t.Errorf("privileges of %s after 000057: %v, want %v (kept)", f, got, want)
		}
	}
	execEach(t, pool,
		"SELECT task_push('emails', 'c', 'in', 'append', NULL, 0, NULL, false, NULL)",
		"SELECT task_push('emails', 'd', not_before => '2031-01-01T00:00:00Z')")
	if got := textRows(t, pool, "SELECT not_before::text FROM task WHERE identifier = 'd'"); !slices.Equal(got, []string{"2031-01-01 00:00:00+00"}) {
		t.Fatalf("not-before of the task pushed with not_before: %v", got)
	}
	after := tasks()
	steps(-1)
	sameRows(t, "tasks after reverting 000057", tasks(), after)
	for _, f := range []string{push9, batch9} {
		if got := privileges(f); !slices.Equal(got, want) {
			t.Errorf("privileges of %s after reverting 000057: %v, want %v (kept)", f, got, want)
		}
	}
	if _, err := pool.Exec(ctx, "SELECT task_push('emails', 'e', not_before => now())"); SQLState(err) != "42883" {
		t.Fatalf("a push naming not_before after the revert: %v, want 42883 (no such parameter)", err)
	}
	execEach(t, pool, "SELECT task_push('emails', 'e', delay => '1 minute')")
	steps(1)
	execEach(t, pool, "SELECT task_push('emails', 'f', not_before => now())")
}

// TestScheduleFiniteTimesMigration: 000058 repairs a schedule with an infinite time,
// written by hand (a '-infinity' next_fire stopped every schedule's firing, its row
// sorted first and unreadable in Go), keeping what the row meant: one parked with an
// 'infinity' next_fire is paused, a '-infinity' one due; it keeps the others as they
// are, and refuses an infinity afterwards (23514, naming the column's check); down
// takes one again.
func TestScheduleFiniteTimesMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository schedule finite times test: empty database", nil)
	steps, create := stepper(t, pool)
	migrateTo(t, pool, 57)
	create("emails")
	execEach(t, pool,
		`INSERT INTO task_schedule (name, topic, spec, time_zone) VALUES ('due', 'emails', '@hourly', 'UTC'),
			('parked', 'emails', '@hourly', 'UTC'), ('late', 'emails', '@hourly', 'UTC'), ('old', 'emails', '@hourly', 'UTC'),
			('good', 'emails', '@hourly', 'UTC')`,
		"UPDATE task_schedule SET next_fire = '-infinity' WHERE name = 'due'",
		"UPDATE task_schedule SET next_fire = 'infinity' WHERE name = 'parked'",
		"UPDATE task_schedule SET last_fire = 'infinity', fire_from = '-infinity', last_fired_at = 'infinity' WHERE name = 'late'",
		"UPDATE task_schedule SET created = '-infinity', updated = 'infinity' WHERE name = 'old'",
		"UPDATE task_schedule SET next_fire = '2030-01-01 00:00:00+00', last_fire = '2029-12-31 23:00:00+00' WHERE name = 'good'")
	steps(1)
	if got := textRows(t, pool, `SELECT name || ' ' || paused || ' ' || coalesce(next_fire::text, '-') || ' ' || coalesce(last_fire::text, '-')
			|| ' ' || coalesce(last_fired_at::text, '-') || ' ' || isfinite(created) || ' ' || isfinite(updated)
		FROM task_schedule ORDER BY name`); !slices.Equal(got, []string{
		"due false - - - true true",
		"good false 2030-01-01 00:00:00+00 2029-12-31 23:00:00+00 - true true",
		"late false - - - true true",
		"old false - - - true true",
		"parked true - - - true true"}) {
		t.Errorf("schedules after 000058: %v", got)
	}
	if got := textRows(t, pool, "SELECT name FROM task_schedule WHERE NOT isfinite(fire_from)"); len(got) != 0 {
		t.Errorf("schedules with an infinite fire_from after 000058: %v", got)
	}
	for _, column := range []string{"next_fire", "fire_from", "last_fire", "last_fired_at", "created", "updated"} {
		q := fmt.Sprintf("UPDATE task_schedule SET %s = 'infinity' WHERE name = 'good'", column)
		if _, err := pool.Exec(ctx, q); SQLState(err) != "23514" || !strings.Contains(err.Error(), "task_schedule_"+column+"_finite") {
			t.Errorf("after 000058: %s: %v, want 23514 naming task_schedule_%s_finite", q, err, column)
		}
	}
	steps(-1)
	execEach(t, pool, "UPDATE task_schedule SET next_fire = '-infinity' WHERE name = 'good'")
	execEach(t, pool, "UPDATE task_schedule SET next_fire = NULL WHERE name = 'good'")
	steps(1)
}

// TestPushNotBeforeBoundsMigration: 000059 refuses a not_before before the year 1 from
// SQL (22023 naming it), which no JSON answer of the task could write; the tasks stored
// before stay as they are, one before the year 1 too, and the function keeps its
// privileges (replaced in place); down accepts such a time again.
func TestPushNotBeforeBoundsMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository not-before bounds test: empty database", nil)
	steps, create := stepper(t, pool)
	migrateTo(t, pool, 58)
	create("emails")
	const batch = "task_push_batch(text, text[], text[], text, interval, integer, text, boolean, text, timestamptz)"
	execEach(t, pool,
		"SELECT task_push('emails', 'ancient', not_before => '0100-01-01 00:00:00+00 BC')",
		"SELECT task_push('emails', 'old', not_before => '1960-01-01 00:00:00+00')",
		"SELECT task_push('emails', 'due', not_before => '2031-01-01 00:00:00+00')",
		"REVOKE EXECUTE ON FUNCTION "+batch+" FROM PUBLIC",
		"GRANT EXECUTE ON FUNCTION "+batch+" TO pg_monitor")
	rows := func() []string {
		return textRows(t, pool, "SELECT identifier || ' ' || not_before::text || ' ' || state FROM task ORDER BY sequence")
	}
	acl := func() []string {
		return textRows(t, pool, "SELECT coalesce(proacl::text, 'default') FROM pg_proc WHERE oid = '"+batch+"'::regprocedure")
	}
	before, grants := rows(), acl()
	steps(1)
	sameRows(t, "tasks after 000059", rows(), before)
	if got := acl(); !slices.Equal(got, grants) {
		t.Errorf("privileges of task_push_batch after 000059: %v, want %v (kept)", got, grants)
	}
	for _, q := range []string{
		"SELECT task_push('emails', 'a', not_before => '0001-12-31 23:59:59.999999+00 BC')",
		"SELECT task_push_batch('emails', '{a,b}', not_before => '0100-01-01 00:00:00+00 BC')",
	} {
		if _, err := pool.Exec(ctx, q); SQLState(err) != "22023" || !strings.Contains(err.Error(), "not_before") || !strings.Contains(err.Error(), "before the year 1") {
			t.Errorf("%s: %v; want 22023 saying the not_before is before the year 1", q, err)
		}
	}
	execEach(t, pool, "SELECT task_push('emails', 'first', not_before => '0001-01-01 00:00:00+00')")
	after := rows()
	if len(after) != len(before)+1 {
		t.Fatalf("tasks after the pushes under 000059: %v", after)
	}
	steps(-1)
	sameRows(t, "tasks after reverting 000059", rows(), after)
	if got := acl(); !slices.Equal(got, grants) {
		t.Errorf("privileges of task_push_batch after reverting 000059: %v, want %v (kept)", got, grants)
	}
	execEach(t, pool, "SELECT task_push('emails', 'ancient again', not_before => '0100-01-01 00:00:00+00 BC')")
}

// TestScheduleCreatedStatementTimeMigration: 000060 makes a schedule's created and
// updated default to the time of the statement that writes the row, not its
// transaction's start; the schedules stored before stay as they are, and down brings
// the transaction's start back.
func TestScheduleCreatedStatementTimeMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, "pgtask repository schedule created test: empty database", nil)
	steps, create := stepper(t, pool)
	migrateTo(t, pool, 59)
	create("emails")
	execEach(t, pool,
		"SELECT task_schedule('old', 'emails', '@every 1h', identifier => 'o{time}', catch_up => 3)",
		"UPDATE task_schedule SET next_fire = '2030-01-01 00:00:00+00' WHERE name = 'old'")
	rows := func() []string {
		return textRows(t, pool, `SELECT name || ' ' || spec || ' ' || catch_up || ' ' || coalesce(next_fire::text, '-')
			|| ' ' || created::text || ' ' || updated::text FROM task_schedule ORDER BY name`)
	}
	// declared in a transaction that began a while before the statement: how long after
	// the transaction's start created is
	declare := func(name string) time.Duration {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var after time.Duration
		_, err = tx.Exec(ctx, "SELECT pg_sleep(0.2)")
		if err == nil {
			_, err = tx.Exec(ctx, "SELECT task_schedule($1, 'emails', '@every 1h')", name)
		}
		if err == nil {
			err = tx.QueryRow(ctx, "SELECT created - now() FROM task_schedule WHERE name = $1", name).Scan(&after)
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		return after
	}
	before := rows()
	steps(1)
	sameRows(t, "schedules after 000060", rows(), before)
	if after := declare("declared"); after < 200*time.Millisecond {
		t.Errorf("after 000060 a schedule declared 0.2 s into its transaction is created %v after its start, want the statement's time", after)
	}
	after := rows()
	if len(after) != len(before)+1 {
		t.Fatalf("schedules after a declaration under 000060: %v", after)
	}
	steps(-1)
	sameRows(t, "schedules after reverting 000060", rows(), after)
	if after := declare("reverted"); after != 0 {
		t.Errorf("after reverting 000060 a schedule is created %v after its transaction's start, want at it", after)
	}
	steps(1)
}

// TestSingularPollMigrations: 000061 (a lease in flight holds its identifier back) and
// 000062 (a probe of each candidate's identifier) keep the tasks as they are, and a
// conditional poll after each leases as before when no lease is in flight (the oldest
// READY task of an identifier none runs, under FIFO); down polls as 000021 and 000043
// did.
func TestSingularPollMigrations(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, "pgtask repository singular poll test: empty database", nil)
	steps, create := stepper(t, pool)
	migrateTo(t, pool, 60)
	create("emails")
	execEach(t, pool,
		"SELECT task_push_batch('emails', '{a,a,b,c}')",
		"UPDATE task SET state = 0, owner = 'gone', attempt = 1 WHERE topic = 'emails' AND identifier = 'c'")
	rows := func() []string {
		return textRows(t, pool, "SELECT sequence || ' ' || identifier || ' ' || state FROM task ORDER BY sequence")
	}
	poll := func(what string) {
		t.Helper()
		got := textRows(t, pool, `SELECT t.identifier || ' ' || t.sequence FROM task t
			WHERE t.topic = 'emails' AND t.ctid = ANY (ARRAY(SELECT task_poll_candidates('emails', false, 1::smallint, 10, NULL, NULL)))
			ORDER BY t.sequence`)
		if !slices.Equal(got, []string{"a 1", "b 3"}) {
			t.Errorf("a FIFO poll under SINGULAR_BY_IDENTIFIER %s chose %v, want [a 1 b 3]", what, got)
		}
	}
	before := rows()
	for _, version := range []string{"000061", "000062"} {
		steps(1)
		sameRows(t, "tasks after "+version, rows(), before)
		poll("after " + version)
	}
	for _, version := range []string{"000062", "000061"} {
		steps(-1)
		sameRows(t, "tasks after reverting "+version, rows(), before)
		poll("after reverting " + version)
	}
	steps(2)
}

package repository_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

// FuzzSQLTaskPush calls the SQL function task_push, as a psql user or a trigger would,
// with fuzzed arguments against a real database. Every call either writes exactly one
// valid task (the arguments as stored, READY or SUSPENDED, delayed as asked; no other
// identifier's tasks touched) or fails with nothing written anywhere. It also checks the
// SQL function accepts nothing the Go API (Creation.Validate) refuses.
func FuzzSQLTaskPush(f *testing.F) {
	type args = struct {
		knownTopic                               bool
		topic, identifier, input, insertion, ref string
		delay                                    int64
		priority                                 int
		suspended                                bool
	}
	add := func(a args) {
		f.Add(a.knownTopic, a.topic, a.identifier, a.input, a.insertion, a.delay, a.priority, a.ref, a.suspended)
	}
	add(args{knownTopic: true, identifier: "a", input: "in", insertion: "append"})
	add(args{knownTopic: true, identifier: "a", input: "", insertion: "REPLACE", delay: int64(time.Hour), priority: -5, ref: "r"})
	add(args{knownTopic: true, identifier: "a", insertion: "delete", suspended: true})
	add(args{knownTopic: true, identifier: "a", insertion: "supersede", delay: int64(time.Millisecond)})
	add(args{knownTopic: true, identifier: "", insertion: "append"})
	add(args{knownTopic: true, identifier: "a\x00b", insertion: "append"})
	add(args{knownTopic: true, identifier: "a", input: "\xff", insertion: "append"})
	add(args{knownTopic: true, identifier: "a", insertion: "upsert"})
	add(args{knownTopic: true, identifier: "a", insertion: "append", delay: -1})
	add(args{knownTopic: true, identifier: "a", insertion: "append", priority: 40000})
	add(args{knownTopic: false, topic: "nope", identifier: "a", insertion: "append"})
	add(args{knownTopic: true, identifier: string(make([]byte, 501)), insertion: "append"})

	pool := pgtest.NewPool(f, schema.Hash(), migrate)
	ctx := context.Background()
	repo, err := repository.New(repository.Config{Owner: "fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	const topic = "fuzz"
	if _, err := repo.Initialize(ctx, pool, topic); err != nil {
		f.Fatal(err)
	}
	// snapshot digests every stored row but those of one identifier of the topic (none
	// when the identifier is no text PostgreSQL can hold).
	snapshot := func(t *testing.T, except string) string {
		t.Helper()
		var exceptArg *string
		if utf8.ValidString(except) && !strings.ContainsRune(except, 0) {
			exceptArg = &except
		}
		var digest string
		err := pool.QueryRow(ctx, `SELECT
			(SELECT count(*) || ':' || coalesce(sum(hashtext(t::text)::bigint), 0) FROM task t
			 WHERE NOT (t.topic = $1 AND t.identifier IS NOT DISTINCT FROM $2)) || '/' ||
			(SELECT count(*) || ':' || coalesce(sum(hashtext(tt::text)::bigint), 0) FROM task_topic tt)`, topic, exceptArg).Scan(&digest)
		if err != nil {
			t.Fatal(err)
		}
		return digest
	}

	f.Fuzz(func(t *testing.T, knownTopic bool, topicName, identifier, input, insertion string, delayNs int64, priority int, ref string, suspended bool) {
		if knownTopic {
			topicName = topic
		}
		// Keep the topic small, so that snapshots stay cheap however long the fuzzing.
		var rows int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM task WHERE topic = $1", topic).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows > 200 {
			if _, err := repo.PurgeAll(ctx, pool, topic); err != nil {
				t.Fatal(err)
			}
		}
		delay := time.Duration(delayNs).Truncate(time.Microsecond) // an interval holds microseconds
		before := snapshot(t, identifier)
		var seq int64
		err := pool.QueryRow(ctx, `SELECT task_push($1, $2, $3, $4, $5, $6, $7, $8)`,
			topicName, identifier, input, insertion, delay, priority, ref, suspended).Scan(&seq)
		after := snapshot(t, identifier)
		if err != nil {
			if before != after {
				t.Fatalf("task_push failed (%v) but rows changed: %s -> %s", err, before, after)
			}
			return
		}
		if before != after {
			t.Fatalf("task_push of identifier %q changed other identifiers' rows: %s -> %s", identifier, before, after)
		}
		if verr := (repository.Creation{Identifier: identifier, Input: input, Reference: ref, Priority: int16(priority)}).Validate(); verr != nil {
			t.Fatalf("task_push accepted what the Go API refuses (%v): identifier %q input %q reference %q", verr, identifier, input, ref)
		}
		task, err := repo.Get(ctx, pool, topicName, seq)
		if err != nil {
			t.Fatalf("task_push returned sequence %d, which is not stored: %v", seq, err)
		}
		wantState := repository.Ready
		if suspended {
			wantState = repository.Suspended
		}
		if task.Identifier != identifier || task.Input != input || task.Reference != ref || int(task.Priority) != priority ||
			task.State != wantState || task.Attempt != 0 || task.Owner != "" {
			t.Fatalf("task_push(%q, %q, %q, %q, %v, %d, %q, %v) stored %+v", topicName, identifier, input, insertion, delay, priority, ref, suspended, task)
		}
		switch {
		case delay <= 0 && !task.NotBefore.IsZero():
			t.Fatalf("no delay, but not_before %v", task.NotBefore)
		case delay > 0 && !task.NotBefore.Equal(task.Created.Add(delay)):
			t.Fatalf("delay %v, but not_before %v is %v after creation", delay, task.NotBefore, task.NotBefore.Sub(task.Created))
		}
	})
}

// FuzzSQLScheduleSpec checks that task_schedule_spec_problem, the SQL check of a cron
// spec (task_schedule), refuses exactly the specs Go refuses (ValidateScheduleSpec, the
// check of CreateSchedule): a spec SQL accepts and Go refuses is written from SQL and
// then refused at every fire; the other way round a good spec cannot be declared from SQL.
func FuzzSQLScheduleSpec(f *testing.F) {
	for _, spec := range []string{"*/5 * * * *", "0 30 9 * * mon-fri", "0 0 1 jan,jul *", "5/10 * * * *", "@hourly",
		"@every 1h30m", "@every 1.5s", "61 * * * *", "5-1 * * * *", "0 0 * foo *", "0 0 30 2 *", "0 0 31 4,6,9,11 ?",
		"0 0 30 2 mon", "0 0 31 2-12/2 *", "0 0 30/2 2 *", "0 0 ? 2 ?", "TZ=UTC * * * * *", "? * * * *", "1,2-3/2 * * * *",
		"0, 0 0 1 1 0", "* * , * *", "*-5 * * * *", "+5 * * * *", "\t* * * * *\n", "* *\u00a0* * *", "@every\n5s",
		"@every \t5s", "@every 1000000µs", "@weekly\u2003", "0 0/0000000001 1 1 0", "@every 99999999999h", "@every 2562047h",
		"@every 1s0.0000000001s"} {
		f.Add(spec)
	}
	pool := pgtest.NewPool(f, schema.Hash(), migrate)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, spec string) {
		if !utf8.ValidString(spec) || strings.ContainsRune(spec, 0) {
			return // no text PostgreSQL holds: the call cannot be made
		}
		var problem *string
		if err := pool.QueryRow(ctx, "SELECT task_schedule_spec_problem($1)", spec).Scan(&problem); err != nil {
			t.Fatalf("task_schedule_spec_problem(%q): %v", spec, err)
		}
		goErr := repository.ValidateScheduleSpec(spec, "UTC")
		if (problem == nil) != (goErr == nil) {
			t.Errorf("spec %q: SQL says %s, Go says %v", spec, deref(problem), goErr)
		}
	})
}

package citustest_test

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/citustest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

// TestDistribute: repository.DistributeCitus refuses, changing nothing, while a processor
// runs, without a worker that can hold shards and on an old schema; then it distributes
// a database with tasks in every kind of state, keeping every row of every table, and
// puts each table where the design says (task and the per-topic tables by topic,
// co-located; owners and schedules on the coordinator); once distributed, it refuses a
// second time, Migrate refuses a pending migration that has no Citus form, and a topic's
// reads run on one node.
func TestDistribute(t *testing.T) {
	c, pool := migrated(t)
	ctx := t.Context()
	repo, err := repository.New(repository.Config{Owner: "citus-test"})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, ctx, pool, repo)
	before := dump(t, ctx, pool)
	grants := keepPrivileges(t, ctx, pool)

	refused := func(t *testing.T, want string) {
		t.Helper()
		_, err := repository.DistributeCitus(ctx, pool, repository.CitusOptions{})
		if !errors.Is(err, repository.ErrCitusRefused) || !strings.Contains(err.Error(), want) {
			t.Fatalf("DistributeCitus: %v; want ErrCitusRefused saying %q", err, want)
		}
		if !strings.Contains(err.Error(), "nothing was changed") {
			t.Errorf("the refusal does not say that nothing changed: %v", err)
		}
		if after := dump(t, ctx, pool); after != before {
			t.Fatalf("a refused distribution changed the tables")
		}
		if distributed(t, ctx, pool, "task") != "" {
			t.Fatal("a refused distribution distributed task")
		}
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	t.Run("RefusedWhileAProcessorRuns", func(t *testing.T) {
		refused(t, `1 processes are running (owners heart-beating within 1m0s, or within their own expiry timeout when longer: "citus-test")`)
	})
	// From here on the owner is dead (its leases are copied as they are).
	exec("UPDATE task_owner SET heartbeat = now() - interval '1 hour'")
	before = dump(t, ctx, pool)

	t.Run("RefusedWithoutAWorkerForShards", func(t *testing.T) {
		exec("SELECT citus_set_node_property(nodename, nodeport, 'shouldhaveshards', false) FROM pg_dist_node WHERE groupid <> 0")
		defer exec("SELECT citus_set_node_property(nodename, nodeport, 'shouldhaveshards', true) FROM pg_dist_node WHERE groupid <> 0")
		refused(t, "no worker node can hold shards")
	})
	t.Run("RefusedOnAnOldSchema", func(t *testing.T) {
		version, _, err := repository.MigrationVersion(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		exec("UPDATE "+schema.VersionTable+" SET version = $1", int64(version)-1)
		defer exec("UPDATE "+schema.VersionTable+" SET version = $1", int64(version))
		refused(t, fmt.Sprintf("the schema is at version %d, not %d: run pgtask migrate up first", version-1, version))
	})
	// Row security and a view's security options, which the table and the views made
	// again would not keep while they keep the grants (a role confined to some topics
	// would read every one): refused, naming them.
	t.Run("RefusedWithRowSecurity", func(t *testing.T) {
		exec("ALTER TABLE task ENABLE ROW LEVEL SECURITY")
		exec("CREATE POLICY tenant_a ON task USING (topic = 'a')")
		exec("CREATE VIEW task_of_a WITH (security_barrier) AS SELECT * FROM task WHERE topic = 'a'")
		defer exec("DROP VIEW task_of_a")
		defer exec("ALTER TABLE task DISABLE ROW LEVEL SECURITY")
		defer exec("DROP POLICY tenant_a ON task")
		refused(t, "row security on task, policy tenant_a on task, view task_of_a (security_barrier=true)")
	})

	// Two at once: one distributes, the other is refused.
	type outcome struct {
		report repository.CitusReport
		err    error
	}
	outcomes := make(chan outcome, 2)
	for range 2 {
		go func() {
			r, err := repository.DistributeCitus(ctx, pool, repository.CitusOptions{})
			outcomes <- outcome{r, err}
		}()
	}
	first, second := <-outcomes, <-outcomes
	if first.err != nil {
		first, second = second, first
	}
	if first.err != nil || !errors.Is(second.err, repository.ErrCitusRefused) || !strings.Contains(second.err.Error(), "already distributed") {
		t.Fatalf("two DistributeCitus at once: %v and %v; want one done and one refused as distributed already", first.err, second.err)
	}
	report := first.report
	if report.Tasks != 9 || report.Topics != 3 || report.Workers != 2 || report.Shards < 2 {
		t.Errorf("report %+v; want 9 tasks of 3 topics in shards on 2 workers", report)
	}
	if after := dump(t, ctx, pool); after != before {
		t.Errorf("the rows changed in the distribution:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	for table, want := range map[string]string{
		"task": "h topic", "task_topic": "h topic", "task_topic_limit": "h topic", "task_tally": "h topic",
		"task_owner": "", "task_schedule": "",
	} {
		if got := distributed(t, ctx, pool, table); got != want {
			t.Errorf("%s: distribution %q, want %q", table, got, want)
		}
	}
	t.Run("KeepsOwnersAndPrivileges", func(t *testing.T) {
		if got := privileges(t, ctx, pool); got != grants {
			t.Errorf("owners and privileges of task and what depends on it:\nbefore:\n%s\nafter:\n%s", grants, got)
		}
		// the application's role reads its topic's rows on their worker (the shards'
		// privileges), and calls the function granted to it alone
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		var n int
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE pgtask_citus_app"); err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM task WHERE topic = (SELECT min(topic) FROM task)").Scan(&n); err != nil || n == 0 {
			t.Errorf("the application's role reads task: %d rows, %v; want its rows", n, err)
		}
	})
	var groups int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT colocationid) FROM pg_dist_partition
		WHERE logicalrelid IN ('task'::regclass, 'task_topic'::regclass, 'task_topic_limit'::regclass, 'task_tally'::regclass)`).
		Scan(&groups); err != nil || groups != 1 {
		t.Errorf("the per-topic tables are in %d co-location groups (%v), want 1", groups, err)
	}
	var indexes int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE tablename = 'task'`).Scan(&indexes); err != nil || indexes != 14 {
		t.Errorf("task has %d indexes (%v), want its key and the 13 others", indexes, err)
	}

	t.Run("RefusedTwice", func(t *testing.T) {
		_, err := repository.DistributeCitus(ctx, pool, repository.CitusOptions{})
		if !errors.Is(err, repository.ErrCitusRefused) || !strings.Contains(err.Error(), "already distributed") {
			t.Fatalf("DistributeCitus again: %v; want a refusal saying it is distributed already", err)
		}
		if dump(t, ctx, pool) != before {
			t.Error("the second call changed the tables")
		}
	})
	// (repository's TestMigrateDistributed, on this cluster in .ci/run, refuses a pending
	// migration without its form)
	t.Run("MigrateAppliesTheNewestCitusFormAndRefusesDown", func(t *testing.T) {
		if err := repository.Migrate(ctx, pool); err != nil {
			t.Fatalf("Migrate on an up-to-date distributed database: %v; want nothing to do", err)
		}
		version, _, _ := repository.MigrationVersion(ctx, pool)
		exec("UPDATE "+schema.VersionTable+" SET version = $1", int64(version)-1)
		defer exec("UPDATE "+schema.VersionTable+" SET version = $1", int64(version))
		// the newest migration pending: its form of sql/citus/migrations runs
		if err := repository.Migrate(ctx, pool); err != nil {
			t.Fatalf("Migrate with the newest migration pending: %v; want its Citus form applied", err)
		}
		if v, dirty, err := repository.MigrationVersion(ctx, pool); err != nil || dirty || v != version {
			t.Fatalf("version after the Citus form = %d (dirty %v, %v), want %d", v, dirty, err, version)
		}
		if err := repository.MigrateDown(ctx, pool); !errors.Is(err, repository.ErrDistributed) {
			t.Fatalf("MigrateDown: %v; want ErrDistributed", err)
		}
		if dump(t, ctx, pool) != before {
			t.Error("the newest Citus form (which changes no table) or the refused MigrateDown changed the tables")
		}
	})
	t.Run("ATopicsReadsRunOnOneNode", func(t *testing.T) {
		// Any statement that would run on more than one shard fails in the sessions that
		// start from now on, on every node (Citus propagates the setting), also inside
		// the functions delegated to the workers.
		// (a function delegated as pgtask's are, that reads every shard from the worker)
		exec(`CREATE FUNCTION probe_every_shard(p_topic text) RETURNS bigint LANGUAGE plpgsql AS
			'BEGIN RETURN (SELECT count(*) FROM task); END'`)
		exec(`SELECT create_distributed_function('probe_every_shard(text)', 'p_topic', colocate_with := 'task', force_delegation := true)`)
		exec("ALTER DATABASE " + citustest.Database + " SET citus.multi_task_query_log_level = 'error'")
		defer exec("ALTER DATABASE " + citustest.Database + " RESET citus.multi_task_query_log_level")
		routed, err := pgxpool.New(ctx, c.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer routed.Close()
		for _, q := range []string{"SELECT count(*) FROM task", "SELECT * FROM probe_every_shard('mail')"} {
			if _, err := routed.Exec(ctx, q); err == nil || !strings.Contains(err.Error(), "multi-task query about to be executed") {
				t.Fatalf("%s, over every shard: %v; want it refused (the guard is off)", q, err)
			}
		}
		// a new repository: one learns once whether its database is distributed
		fresh, err := repository.New(repository.Config{Owner: "citus-test"})
		if err != nil {
			t.Fatal(err)
		}
		t.Run("TheCoreLoop", func(t *testing.T) { coreLoop(t, ctx, c, routed, fresh) })
		for _, topic := range []string{"mail", "sms", "api"} {
			if _, err := repo.CountByState(ctx, routed, topic); err != nil {
				t.Errorf("CountByState(%s): %v", topic, err)
			}
			tasks, err := repo.Page(ctx, routed, topic, repository.TaskFilter{}, 0, 100, repository.Forward)
			if err != nil || len(tasks) == 0 {
				t.Errorf("Page(%s): %d tasks, %v", topic, len(tasks), err)
				continue
			}
			if _, err := repo.Get(ctx, routed, topic, tasks[0].Sequence); err != nil {
				t.Errorf("Get(%s): %v", topic, err)
			}
			if _, err := repo.Topic(ctx, routed, topic); err != nil {
				t.Errorf("Topic(%s): %v", topic, err)
			}
		}
	})
}

// coreLoop: on the distributed database, through connections on which any statement
// over more than one shard fails, a topic is created, tasks are pushed (sequences
// ordered, a processor's LISTEN on the coordinator told), polled and completed as on
// plain PostgreSQL.
func coreLoop(t *testing.T, ctx context.Context, c *citustest.Cluster, routed *pgxpool.Pool, repo *repository.Repository) {
	listener, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.WithoutCancel(ctx))
	if _, err := listener.Exec(ctx, "LISTEN task_notification"); err != nil {
		t.Fatal(err)
	}
	heard := func(want string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var got []string
		for {
			n, err := listener.WaitForNotification(wctx)
			if err != nil {
				t.Fatalf("notifications %q, then %v; want one starting %q", got, err, want)
			}
			if strings.HasPrefix(n.Payload, want) {
				return
			}
			got = append(got, n.Payload)
		}
	}
	if created, err := repo.CreateTopic(ctx, routed, "jobs"); err != nil || !created {
		t.Fatalf("CreateTopic: %v, %v", created, err)
	}
	pushed, err := repo.Push(ctx, routed, "jobs", repository.Append,
		repository.Creation{Identifier: "j1", Input: "one"}, repository.Creation{Identifier: "j2", Priority: -1},
		repository.Creation{Identifier: "j3", Delay: time.Hour})
	if err != nil || len(pushed) != 3 {
		t.Fatalf("Push: %v, %v", pushed, err)
	}
	if !(pushed[0].Sequence < pushed[1].Sequence && pushed[1].Sequence < pushed[2].Sequence) || pushed[2].NotBefore.IsZero() {
		t.Fatalf("pushed %+v; want sequences in input order and the delayed one with its time", pushed)
	}
	heard(fmt.Sprintf("WORK %x -1 %d", md5.Sum([]byte("jobs")), pushed[1].Sequence))
	more, err := repo.Push(ctx, routed, "jobs", repository.Append, repository.Creation{Identifier: "j4"})
	if err != nil || more[0].Sequence <= pushed[2].Sequence {
		t.Fatalf("a later push: %v, %v; want a greater sequence than %d", more, err, pushed[2].Sequence)
	}
	heard("WORK ")
	if _, err := repo.Push(ctx, routed, "nope", repository.Append, repository.Creation{Identifier: "x"}); !errors.Is(err, repository.ErrUnknownTopic) {
		t.Errorf("push to an unknown topic: %v, want ErrUnknownTopic", err)
	}

	leased, err := repo.Poll(ctx, routed, "jobs", repository.FIFO, repository.None, 10)
	if err != nil || len(leased) != 3 || leased[0].Identifier != "j2" || leased[1].Identifier != "j1" || leased[2].Identifier != "j4" {
		t.Fatalf("Poll: %v, %v; want j2, j1, j4 (the delayed j3 not yet)", leased, err)
	}
	for _, l := range leased {
		if l.State != repository.Active || l.Attempt != 1 || l.Owner != repo.Owner() {
			t.Fatalf("leased %+v", l)
		}
	}
	// all or nothing: a completion of a task not leased refuses the batch
	_, err = repo.Complete(ctx, routed, "jobs", leased[0].Decide(repository.Succeed("ok")),
		repository.Completion{Sequence: pushed[2].Sequence, Attempt: 1, Decision: repository.Succeed("")})
	if !errors.Is(err, repository.ErrWrongState) {
		t.Fatalf("a batch with a task not leased: %v, want ErrWrongState", err)
	}
	done, err := repo.Complete(ctx, routed, "jobs", leased[0].Decide(repository.Succeed("ok")),
		leased[1].Decide(repository.Fail(errors.New("boom"))), leased[2].Decide(repository.SnoozeFor(time.Minute)))
	if err != nil || len(done) != 3 {
		t.Fatalf("Complete: %v, %v", done, err)
	}
	heard("WORK ")
	states := map[string]repository.State{}
	for _, d := range done {
		states[d.Identifier] = d.State
	}
	if states["j2"] != repository.Succeeded || states["j1"] != repository.Ready || states["j4"] != repository.Ready {
		t.Fatalf("completed: %v; want j2 SUCCEEDED, j1 READY for a retry, j4 READY snoozed", states)
	}
	got, err := repo.Get(ctx, routed, "jobs", leased[1].Sequence)
	if err != nil || got.NotBefore.IsZero() || len(got.Errors) != 1 || got.Errors[0] != "boom" {
		t.Fatalf("the failed task: %+v, %v; want READY after a backoff with its error", got, err)
	}
	counts, err := repo.CountByState(ctx, routed, "jobs")
	if err != nil || counts[repository.Ready] != 3 || counts[repository.Succeeded] != 1 {
		t.Fatalf("counts %v, %v", counts, err)
	}
	// REPLACE: the READY j1 (waiting for its retry) gives way to a fresh one
	replaced, err := repo.Push(ctx, routed, "jobs", repository.Replace, repository.Creation{Identifier: "j1", Input: "two"})
	if err != nil || len(replaced) != 1 || replaced[0].State != repository.Ready {
		t.Fatalf("push with REPLACE: %v, %v", replaced, err)
	}
	if old, err := repo.Get(ctx, routed, "jobs", leased[1].Sequence); err != nil || old.State != repository.Redundant {
		t.Fatalf("the task REPLACE replaced: %+v, %v; want REDUNDANT", old, err)
	}
	// the SQL API's push
	var sqlPushed int64
	if err := routed.QueryRow(ctx, "SELECT task_push('jobs', 'from-sql', 'hello', insertion => 'supersede')").Scan(&sqlPushed); err != nil {
		t.Fatalf("task_push: %v", err)
	}
	heard(fmt.Sprintf("WORK %x 0 %d", md5.Sum([]byte("jobs")), sqlPushed))
	if got, err := repo.Get(ctx, routed, "jobs", sqlPushed); err != nil || got.Input != "hello" || got.State != repository.Ready {
		t.Fatalf("the task task_push pushed: %+v, %v", got, err)
	}
	if _, err := routed.Exec(ctx, "SELECT task_push('nope', 'x')"); repository.SQLState(err) != "PT001" {
		t.Errorf("task_push to an unknown topic: %v, want PT001", err)
	}
	// pause and resume reach the processors listening on the coordinator
	if err := repo.SetActive(ctx, routed, "jobs", false); err != nil {
		t.Fatalf("pause: %v", err)
	}
	heard(fmt.Sprintf("ACTIVATION %x", md5.Sum([]byte("jobs"))))
	if err := repo.SetActive(ctx, routed, "jobs", true); err != nil {
		t.Fatalf("resume: %v", err)
	}
	heard("ACTIVATION ")
	// cancel: a READY task becomes REDUNDANT, a leased one is flagged and its processor told
	again, err := repo.Poll(ctx, routed, "jobs", repository.FIFO, repository.None, 1)
	if err != nil || len(again) != 1 {
		t.Fatalf("poll one: %v, %v", again, err)
	}
	cancelled, err := repo.Cancel(ctx, routed, "jobs", "test", again[0].Sequence, pushed[2].Sequence)
	if err != nil || len(cancelled) != 2 {
		t.Fatalf("cancel: %v, %v", cancelled, err)
	}
	heard(fmt.Sprintf("CANCEL %x %d", md5.Sum([]byte("jobs")), again[0].Sequence))
	// schedules stay on the coordinator; a topic's destroy takes its schedules along
	// The lists over every topic and owner read every shard, by nature (docs/citus.md
	// names them): on connections that allow it.
	cfg := routed.Config().Copy()
	cfg.ConnConfig.RuntimeParams["citus.multi_task_query_log_level"] = "off"
	everywhere, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer everywhere.Close()
	if all, err := repo.StatsAll(ctx, everywhere); err != nil || len(all) != 4 {
		t.Errorf("StatsAll: %d topics, %v; want 4", len(all), err)
	}
	if owners, err := repo.Owners(ctx, everywhere, time.Minute, 10); err != nil || len(owners) != 1 || owners[0].Leased != 3 || len(owners[0].Topics) != 3 {
		t.Errorf("Owners: %+v, %v; want the one owner leasing a task in each of api, jobs and sms", owners, err)
	}
	if _, err := repo.CreateSchedule(ctx, routed, "minutely", repository.ScheduleSettings{Topic: "jobs", Spec: "@every 1m", TimeZone: "UTC"}); err != nil {
		t.Fatalf("create schedule: %v", err)
	}
	if _, err := repo.CreateSchedule(ctx, routed, "lost", repository.ScheduleSettings{Topic: "nope", Spec: "@every 1m", TimeZone: "UTC"}); !errors.Is(err, repository.ErrUnknownTopic) {
		t.Errorf("a schedule of an unknown topic: %v, want ErrUnknownTopic", err)
	}
	fired, err := repo.RunSchedule(ctx, routed, "minutely")
	if err != nil || fired.State != repository.Ready {
		t.Fatalf("run the schedule: %+v, %v", fired, err)
	}
	var pushedTally, succeededTally int64
	if err := routed.QueryRow(ctx, "SELECT sum(pushed), sum(succeeded) FROM task_tally WHERE topic = 'jobs'").
		Scan(&pushedTally, &succeededTally); err != nil || pushedTally != 7 || succeededTally != 1 {
		t.Errorf("tallies: %d pushed, %d succeeded (%v); want 7 and 1", pushedTally, succeededTally, err)
	}
	if _, err := repo.Dedicate(ctx, routed, "jobs"); !errors.Is(err, repository.ErrDistributed) || !strings.Contains(err.Error(), "isolate_tenant_to_new_shard") {
		t.Errorf("dedicate: %v; want ErrDistributed pointing at isolate_tenant_to_new_shard", err)
	}
	if destroyed, err := repo.Destroy(ctx, routed, "jobs"); err != nil || !destroyed {
		t.Fatalf("destroy: %v, %v", destroyed, err)
	}
	if _, err := repo.Schedule(ctx, routed, "minutely"); !errors.Is(err, repository.ErrUnknownSchedule) {
		t.Errorf("the destroyed topic's schedule: %v, want it gone", err)
	}
	var left int
	if err := routed.QueryRow(ctx, "SELECT count(*) FROM task WHERE topic = 'jobs'").Scan(&left); err != nil || left != 0 {
		t.Errorf("%d tasks left of the destroyed topic (%v)", left, err)
	}
	// a topic polled by key (one ACTIVE task per key, keys in turn) under a poll
	// condition, and its limit usage
	if _, err := repo.CreateTopic(ctx, routed, "keyed"); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.UpdateSettings(ctx, routed, "keyed", func(s *repository.TopicSettings) { s.KeyConcurrency = 1 }); err != nil {
		t.Fatal(err)
	}
	keyed, err := repo.Push(ctx, routed, "keyed", repository.Append,
		repository.Creation{Identifier: "x", ConcurrencyKey: "a"}, repository.Creation{Identifier: "x", ConcurrencyKey: "b"},
		repository.Creation{Identifier: "y", ConcurrencyKey: "b"}, repository.Creation{Identifier: "z", ConcurrencyKey: "c"})
	if err != nil {
		t.Fatal(err)
	}
	// b's x waits behind a's (SINGULAR_BY_IDENTIFIER): b's turn gives y
	taken, err := repo.Poll(ctx, routed, "keyed", repository.FIFO, repository.SingularByIdentifier, 10)
	if err != nil {
		t.Fatalf("keyed poll under a condition: %v", err)
	}
	if got, want := sequencesOf(taken), []int64{keyed[0].Sequence, keyed[2].Sequence, keyed[3].Sequence}; !slices.Equal(got, want) {
		t.Errorf("keyed poll under a condition took %v, want %v (a's x, b's y, c's z)", got, want)
	}
	if u, err := repo.LimitUsage(ctx, routed, "keyed"); err != nil || u.Active != 3 || u.KeysAtLimit != 3 {
		t.Errorf("limit usage = %+v, %v; want 3 ACTIVE, 3 keys at their limit", u, err)
	}
}

// sequencesOf returns the tasks' sequences, in their order.
func sequencesOf(tasks []repository.Task) []int64 {
	out := make([]int64, len(tasks))
	for i, t := range tasks {
		out[i] = t.Sequence
	}
	return out
}

// fill gives the database tasks in the states a running system has (READY, delayed,
// ACTIVE under an owner, SUCCEEDED, FAILED, SUSPENDED), with keys, a limited topic with
// its limit state, tallies, an owner and a schedule.
func fill(t *testing.T, ctx context.Context, pool *pgxpool.Pool, repo *repository.Repository) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := repo.Register(ctx, pool)
	must(err)
	for _, topic := range []string{"mail", "sms", "api"} {
		_, err := repo.CreateTopic(ctx, pool, topic)
		must(err)
	}
	_, err = repo.UpdateSettings(ctx, pool, "api", func(s *repository.TopicSettings) {
		s.Concurrency, s.Rate, s.RatePeriod, s.MaxAttempts = 2, 10, time.Second, 1
	})
	must(err)
	_, err = repo.Push(ctx, pool, "mail", repository.Append,
		repository.Creation{Identifier: "m1", Input: "hello"}, repository.Creation{Identifier: "m2", Priority: 3},
		repository.Creation{Identifier: "m3", Delay: time.Hour}, repository.Creation{Identifier: "m4", Suspended: true})
	must(err)
	_, err = repo.Push(ctx, pool, "sms", repository.Append,
		repository.Creation{Identifier: "s1", Reference: "r1"}, repository.Creation{Identifier: "s2"})
	must(err)
	_, err = repo.Push(ctx, pool, "api", repository.Append,
		repository.Creation{Identifier: "a1", ConcurrencyKey: "k1"}, repository.Creation{Identifier: "a2", ConcurrencyKey: "k2"},
		repository.Creation{Identifier: "a3"})
	must(err)
	leased, err := repo.Poll(ctx, pool, "sms", repository.FIFO, repository.None, 2)
	must(err)
	if len(leased) != 2 {
		t.Fatalf("leased %d sms tasks, want 2", len(leased))
	}
	_, err = repo.Complete(ctx, pool, "sms", leased[0].Decide(repository.Succeed("sent")))
	must(err)
	leased, err = repo.Poll(ctx, pool, "api", repository.FIFO, repository.None, 2)
	must(err)
	if len(leased) != 2 {
		t.Fatalf("leased %d api tasks, want 2", len(leased))
	}
	_, err = repo.Complete(ctx, pool, "api", leased[0].Decide(repository.Fail(errors.New("partner down"))))
	must(err)
	_, err = repo.CreateSchedule(ctx, pool, "nightly", repository.ScheduleSettings{Topic: "mail", Spec: "0 3 * * *", TimeZone: "UTC"})
	must(err)
}

// dump renders every row of pgtask's tables, in order, as text.
func dump(t *testing.T, ctx context.Context, pool *pgxpool.Pool) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		"SELECT row_to_json(x)::text FROM task x ORDER BY topic, sequence",
		// (but the name of the table holding the topic, which DistributeCitus sets to task)
		"SELECT (row_to_json(x)::jsonb - 'partition' - 'dedicated')::text FROM task_topic x ORDER BY topic",
		"SELECT row_to_json(x)::text FROM task_topic_limit x ORDER BY topic",
		"SELECT row_to_json(x)::text FROM task_tally x ORDER BY topic, second, writer",
		"SELECT row_to_json(x)::text FROM task_owner x ORDER BY owner",
		"SELECT row_to_json(x)::text FROM task_schedule x ORDER BY name",
	} {
		rows, err := pool.Query(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		fmt.Fprintf(&b, "%s: %d rows\n%s\n", q, len(lines), strings.Join(lines, "\n"))
	}
	return b.String()
}

// distributed says how Citus holds table: "h topic" (hash-distributed by topic), "n" (a
// reference table), "" (not at all).
func distributed(t *testing.T, ctx context.Context, pool *pgxpool.Pool, table string) string {
	t.Helper()
	var method, column string
	err := pool.QueryRow(ctx, `SELECT partmethod::text, coalesce(column_to_column_name(logicalrelid, partkey), '')
		FROM pg_dist_partition WHERE logicalrelid = $1::regclass`, table).Scan(&method, &column)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(method + " " + column)
}

// privilegesQuery lists the owner and the privileges of task, of the views on it and of
// the functions of its row type: what distributing drops and makes again.
const privilegesQuery = `
	SELECT string_agg(x, E'\n' ORDER BY x) FROM (
		SELECT c.oid::regclass::text || ' ' || c.relowner::regrole::text || ' '
		       || coalesce((SELECT string_agg(a, ',' ORDER BY a) FROM unnest(c.relacl::text[]) a), 'default') AS x
		FROM pg_class c WHERE c.oid = 'task'::regclass OR c.relkind = 'v' AND c.oid IN (
		    SELECT r.ev_class FROM pg_rewrite r JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
		    WHERE d.refobjid = 'task'::regclass)
		UNION ALL
		SELECT p.oid::regprocedure::text || ' ' || p.proowner::regrole::text || ' '
		       || coalesce((SELECT string_agg(a, ',' ORDER BY a) FROM unnest(p.proacl::text[]) a), 'default')
		FROM pg_proc p WHERE p.oid IN (SELECT d.objid FROM pg_depend d
		    WHERE d.classid = 'pg_proc'::regclass AND d.refobjid = 'task'::regtype)) s`

func privileges(t *testing.T, ctx context.Context, pool *pgxpool.Pool) string {
	t.Helper()
	var got string
	if err := pool.QueryRow(ctx, privilegesQuery).Scan(&got); err != nil {
		t.Fatal(err)
	}
	return got
}

// keepPrivileges gives task, a view on it and a function of its row type an owner and
// privileges other than the defaults, as an installation with an application's role
// does (SECURITY.md), and returns them (privileges).
func keepPrivileges(t *testing.T, ctx context.Context, pool *pgxpool.Pool) string {
	t.Helper()
	var fn string
	if err := pool.QueryRow(ctx, `SELECT min(p.oid::regprocedure::text) FROM pg_proc p WHERE p.oid IN (SELECT d.objid FROM pg_depend d
		WHERE d.classid = 'pg_proc'::regclass AND d.refobjid = 'task'::regtype)`).Scan(&fn); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		// roles are the cluster's: made once, by whichever test run comes first
		`DO $$ BEGIN CREATE ROLE pgtask_citus_app LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$`,
		`DO $$ BEGIN CREATE ROLE pgtask_citus_owner; EXCEPTION WHEN duplicate_object THEN NULL; END $$`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON task TO pgtask_citus_app`,
		`ALTER VIEW task_pretty OWNER TO pgtask_citus_owner`,
		`GRANT SELECT ON task_pretty TO pgtask_citus_app`,
		`REVOKE EXECUTE ON FUNCTION ` + fn + ` FROM PUBLIC`,
		`GRANT EXECUTE ON FUNCTION ` + fn + ` TO pgtask_citus_app`,
		`ALTER TABLE task OWNER TO pgtask_citus_owner`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return privileges(t, ctx, pool)
}

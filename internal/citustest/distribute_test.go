package citustest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/repository"
)

// TestDistribute: repository.DistributeCitus refuses, changing nothing, while a processor
// runs, without a worker that can hold shards and on an old schema; then it distributes
// a database with tasks in every kind of state, keeping every row of every table, and
// puts each table where the design says (task and the per-topic tables by topic,
// co-located; owners and schedules on every node); once distributed, it refuses a
// second time, Migrate refuses to migrate it, and a topic's reads run on one node.
func TestDistribute(t *testing.T) {
	c := start(t)
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := repository.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	repo, err := repository.New(repository.Config{Owner: "citus-test"})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, ctx, pool, repo)
	before := dump(t, ctx, pool)

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
		refused(t, `1 processes are running (owners heart-beating within 1m0s: "citus-test")`)
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
		exec("UPDATE schema_migrations SET version = $1", int64(version)-1)
		defer exec("UPDATE schema_migrations SET version = $1", int64(version))
		refused(t, fmt.Sprintf("the schema is at version %d, not %d: run pgtask migrate up first", version-1, version))
	})

	report, err := repository.DistributeCitus(ctx, pool, repository.CitusOptions{})
	if err != nil {
		t.Fatalf("DistributeCitus: %v", err)
	}
	if report.Tasks != 9 || report.Topics != 3 || report.Workers != 2 || report.Shards < 2 {
		t.Errorf("report %+v; want 9 tasks of 3 topics in shards on 2 workers", report)
	}
	if after := dump(t, ctx, pool); after != before {
		t.Errorf("the rows changed in the distribution:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	for table, want := range map[string]string{
		"task": "h topic", "task_topic": "h topic", "task_topic_limit": "h topic", "task_tally": "h topic",
		"task_owner": "n", "task_schedule": "n",
	} {
		if got := distributed(t, ctx, pool, table); got != want {
			t.Errorf("%s: distribution %q, want %q", table, got, want)
		}
	}
	var groups int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT colocationid) FROM pg_dist_partition
		WHERE logicalrelid IN ('task'::regclass, 'task_topic'::regclass, 'task_topic_limit'::regclass, 'task_tally'::regclass)`).
		Scan(&groups); err != nil || groups != 1 {
		t.Errorf("the per-topic tables are in %d co-location groups (%v), want 1", groups, err)
	}
	var indexes int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE tablename = 'task'`).Scan(&indexes); err != nil || indexes != 11 {
		t.Errorf("task has %d indexes (%v), want its key and the 10 others", indexes, err)
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
	t.Run("MigrateRefused", func(t *testing.T) {
		if err := repository.Migrate(ctx, pool); err != nil {
			t.Fatalf("Migrate on an up-to-date distributed database: %v; want nothing to do", err)
		}
		version, _, _ := repository.MigrationVersion(ctx, pool)
		exec("UPDATE schema_migrations SET version = $1", int64(version)-1)
		defer exec("UPDATE schema_migrations SET version = $1", int64(version))
		err := repository.Migrate(ctx, pool)
		if !errors.Is(err, repository.ErrDistributed) || !strings.Contains(err.Error(), "nothing was changed") {
			t.Fatalf("Migrate with a migration pending: %v; want ErrDistributed", err)
		}
		if err := repository.MigrateDown(ctx, pool); !errors.Is(err, repository.ErrDistributed) {
			t.Fatalf("MigrateDown: %v; want ErrDistributed", err)
		}
		if dump(t, ctx, pool) != before {
			t.Error("a refused migration changed the tables")
		}
	})
	t.Run("ATopicsReadsRunOnOneNode", func(t *testing.T) {
		// Any statement that would run on more than one shard fails on these
		// connections, also inside functions on the workers.
		cfg := pool.Config().Copy()
		cfg.ConnConfig.RuntimeParams["citus.multi_task_query_log_level"] = "error"
		routed, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer routed.Close()
		if _, err := routed.Exec(ctx, "SELECT count(*) FROM task"); err == nil || !strings.Contains(err.Error(), "multi-task query about to be executed") {
			t.Fatalf("a statement over every shard: %v; want it refused (the guard is off)", err)
		}
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
		"SELECT row_to_json(x)::text FROM task_topic x ORDER BY topic",
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

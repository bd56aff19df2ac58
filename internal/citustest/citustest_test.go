package citustest_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/citustest"
	"github.com/pgtask/pgtask/repository"
)

func TestMain(m *testing.M) {
	if ok, why := citustest.Available(); !ok {
		// the one line the issue asks for: go test -v shows it with the skips
		fmt.Fprintf(os.Stderr, "citustest: the Citus tests did not run (%s): %s\n", why, citustest.HowTo)
	}
	os.Exit(m.Run())
}

// start starts a cluster of a coordinator and two workers for the test, or skips it
// saying how to run it.
func start(t *testing.T) *citustest.Cluster {
	t.Helper()
	if ok, why := citustest.Available(); !ok {
		t.Skipf("Citus tests not run (%s): %s", why, citustest.HowTo)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := citustest.Start(ctx, "", 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("stop the cluster: %v", err)
		}
	})
	return c
}

// migrated starts a cluster for the test and returns it with a pool on its database, in
// which pgtask's migrations are applied (its tables still local to the coordinator).
func migrated(t *testing.T) (*citustest.Cluster, *pgxpool.Pool) {
	t.Helper()
	c := start(t)
	pool, err := pgxpool.New(t.Context(), c.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := repository.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	return c, pool
}

// TestCluster: the harness starts a coordinator with two active workers, a table
// distributed by topic spreads over both and a statement naming one topic is routed to
// one of them, and pgtask's schema and a task's life (its tables local to the
// coordinator: pgtask does not distribute them yet) work on the Citus database.
func TestCluster(t *testing.T) {
	c := start(t)
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	var workers int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM citus_get_active_worker_nodes()").Scan(&workers); err != nil {
		t.Fatal(err)
	}
	if workers != 2 {
		t.Fatalf("%d active workers, want 2", workers)
	}
	for _, q := range []string{
		"CREATE TABLE probe (topic text, n int)",
		"SELECT create_distributed_table('probe', 'topic')",
		"INSERT INTO probe SELECT 't' || i, i FROM generate_series(1, 100) i",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var nodes int
	if err := pool.QueryRow(ctx, "SELECT count(DISTINCT nodename) FROM citus_shards WHERE table_name = 'probe'::regclass").Scan(&nodes); err != nil {
		t.Fatal(err)
	}
	if nodes != 2 {
		t.Errorf("the shards of a distributed table are on %d nodes, want the 2 workers", nodes)
	}
	var plan string
	rows, err := pool.Query(ctx, "EXPLAIN (COSTS OFF) SELECT n FROM probe WHERE topic = 't5'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan += line + "\n"
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if !strings.Contains(plan, "Task Count: 1") {
		t.Errorf("a statement naming one topic is not routed to one shard:\n%s", plan)
	}

	if err := repository.Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate pgtask's schema on the coordinator: %v", err)
	}
	repo, err := repository.New(repository.Config{Owner: "citus"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Register(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.CreateTopic(ctx, pool, "mail"); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Push(ctx, pool, "mail", repository.Append, repository.Creation{Identifier: "a"}); err != nil {
		t.Fatal(err)
	}
	tasks, err := repo.Poll(ctx, pool, "mail", repository.FIFO, repository.None, 10)
	if err != nil || len(tasks) != 1 {
		t.Fatalf("poll: %d tasks, %v; want the one pushed", len(tasks), err)
	}
	done, err := repo.Complete(ctx, pool, "mail", tasks[0].Decide(repository.Succeed("ok")))
	if err != nil || len(done) != 1 || done[0].State != repository.Succeeded {
		t.Fatalf("complete: %v, %v; want the task SUCCEEDED", done, err)
	}
}

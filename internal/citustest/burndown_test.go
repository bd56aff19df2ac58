package citustest_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtask/pgtask/internal/citustest"
	"github.com/pgtask/pgtask/internal/victim"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// TestCitusVictim is not a test of its own: TestBurnDown runs the test binary again as the
// victim processor (internal/victim), which completes tasks of the topic "work" for a
// while and then hangs in the middle of a batch, holding its leases, until it is killed.
func TestCitusVictim(t *testing.T) { victim.Run(t) }

// TestBurnDown: on the distributed database, a processor process is killed (SIGKILL)
// while it holds leases, and a worker node restarts while another processor works; every
// task ends SUCCEEDED, the killed process's leases are taken back once it stops
// heart-beating and done again, and no task is lost or left behind.
func TestBurnDown(t *testing.T) {
	c, pool := migrated(t)
	ctx := t.Context()
	if _, err := repository.DistributeCitus(ctx, pool, repository.CitusOptions{}); err != nil {
		t.Fatal(err)
	}
	repo, err := repository.New(repository.Config{Owner: "survivor"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.CreateTopic(ctx, pool, "work"); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.UpdateSettings(ctx, pool, "work", func(s *repository.TopicSettings) {
		s.BackoffBase, s.BackoffCap = time.Millisecond, time.Millisecond
	}); err != nil {
		t.Fatal(err)
	}
	const tasks = 3000
	for i := 0; i < tasks; i += 500 {
		creations := make([]repository.Creation, 500)
		for k := range creations {
			creations[k] = repository.Creation{Identifier: fmt.Sprintf("t%d", i+k)}
		}
		if _, err := repo.Push(ctx, pool, "work", repository.Append, creations...); err != nil {
			t.Fatal(err)
		}
	}

	// the victim: killed while it hangs over a batch
	victim.Kill(t, "TestCitusVictim", victim.Config{URL: c.URL(), Topic: "work", HangAfter: 299, BatchSize: 50})

	// the survivor, with a worker node crashing under it
	p, err := processor.New(processor.Config{Pool: pool, Repository: repo,
		HeartbeatInterval: 100 * time.Millisecond, ExpiryTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	if _, err := p.Manage(processor.ManagerConfig{Topic: "work", BatchSize: 100,
		Handler: processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			handled.Add(1)
			return repository.Succeed("survivor")
		})}); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- p.Run(runCtx) }()
	for handled.Load() < 500 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.Workers[0].Restart(ctx); err != nil {
		t.Fatalf("restart worker 1: %v", err)
	}
	// A lease that becomes visible only after the reconciliation that followed the crash
	// (seen here about once in 45 runs under load) is found at the survivor's next
	// reconciliation, once a minute when no fault asks for one.
	deadline := time.Now().Add(3*time.Minute + 30*time.Second)
	var counts map[repository.State]int64
	for {
		counts, err = repo.CountByState(ctx, pool, "work")
		if err == nil && counts[repository.Succeeded] == tasks {
			break
		}
		if time.Now().After(deadline) {
			var owners, registered string
			_ = pool.QueryRow(ctx, `SELECT string_agg(DISTINCT owner || ' ' || attempt, ', ') || ', sequences ' || min(sequence) || '..' || max(sequence)
				FROM task WHERE topic = 'work' AND state = 0`).Scan(&owners)
			_ = pool.QueryRow(ctx, "SELECT string_agg(owner || ' ' || (now() - heartbeat), ', ') FROM task_owner").Scan(&registered)
			for _, n := range c.Nodes() {
				var activity string
				_ = pool.QueryRow(ctx, `SELECT string_agg(format('%s %s %s %s [%s]', pid, state, wait_event, now() - query_start, left(query, 150)), E'\n')
					FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, citustest.Database).Scan(&activity)
				t.Logf("node %d:\n%s", n.Port(), activity)
				break
			}
			for i, n := range c.Nodes() {
				// transactions a node prepared and nobody resolved yet
				np, err := pgxpool.New(ctx, n.ConnString(citustest.Database))
				if err != nil {
					t.Logf("node %d: %v", i, err)
					continue
				}
				var prepared string
				if err := np.QueryRow(ctx, "SELECT coalesce(string_agg(gid || ' at ' || prepared, ', '), 'none') FROM pg_prepared_xacts").Scan(&prepared); err != nil {
					prepared = err.Error()
				}
				np.Close()
				t.Logf("node %d: prepared transactions: %s", i, prepared)
			}
			t.Fatalf("after three and a half minutes: %v (%v); want all %d SUCCEEDED; ACTIVE under %s; owners %s", counts, err, tasks, owners, registered)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	if err := <-ran; err != nil && ctx.Err() == nil {
		t.Logf("the survivor's Run: %v", err)
	}
	var expired, byVictim int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE array_to_string(errors, ' ') LIKE '%expired: owner victim%'),
		count(*) FILTER (WHERE output = 'victim') FROM task WHERE topic = 'work'`).Scan(&expired, &byVictim); err != nil {
		t.Fatal(err)
	}
	if expired == 0 {
		t.Error("no task says its lease was taken back from the killed victim")
	}
	// (the survivor may run a task twice when the restart loses a commit's reply)
	if byVictim == 0 || byVictim+handled.Load() < tasks {
		t.Errorf("the victim completed %d and the survivor handled %d of %d tasks", byVictim, handled.Load(), tasks)
	}
	t.Logf("%d tasks: %d completed by the victim before it was killed, %d by the survivor, %d taken back from the victim",
		tasks, byVictim, handled.Load(), expired)
}

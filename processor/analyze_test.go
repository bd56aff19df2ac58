package processor_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/internal/logbuf"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// maintenanceCounter turns autovacuum off for the fixture topic's partition, so that
// only the processor's maintenance counts (and none of autovacuum's makes the
// processor's VACUUM skip the table), and returns a reader of column (analyze_count,
// vacuum_count) of the partition's pg_stat_user_tables row.
func maintenanceCounter(t *testing.T, f *fixture, column string) func() int64 {
	t.Helper()
	var partition string
	if err := f.pool.QueryRow(f.ctx, `SELECT partition FROM task_topic WHERE topic = $1`, f.topic).Scan(&partition); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, `ALTER TABLE `+pgx.Identifier{partition}.Sanitize()+` SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	return func() int64 {
		t.Helper()
		var n int64
		if err := f.pool.QueryRow(f.ctx, `SELECT `+pgx.Identifier{column}.Sanitize()+` FROM pg_stat_user_tables WHERE relname = $1`, partition).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// TestAnalyze checks how often a processor refreshes its topic's statistics: once after
// its first 1 000 leases, then not again for a minute unless as many tasks were leased
// as the topic held (ANALYZE costs a third of a second of a core on a busy table).
func TestAnalyze(t *testing.T) {
	f := setup(t)
	analyzed := maintenanceCounter(t, f, "analyze_count")

	const n = 6000
	f.pushN(n)
	// a slow handler spreads the 6 000 tasks over many heartbeat ticks (20 ms apart):
	// the earlier policy (a refresh every tenth of the rows) ran five or six of them
	handler := processor.HandlerFunc(func(ctx context.Context, batch *processor.Batch) {
		time.Sleep(20 * time.Millisecond)
		decisions := make(map[int64]repository.Decision, len(batch.Tasks))
		for _, task := range batch.Tasks {
			decisions[task.Sequence] = repository.Succeed("")
		}
		if err := batch.Complete(decisions); err != nil {
			t.Error(err)
		}
	})
	p, _ := f.processor("analyzer", processor.Config{HeartbeatInterval: 20 * time.Millisecond},
		processor.ManagerConfig{Handler: handler, BatchSize: 100})
	f.start(p)
	f.eventually("all tasks succeeded", func() bool { return f.count(repository.Succeeded) == n })
	if got := analyzed(); got != 1 {
		t.Fatalf("the topic's table was analyzed %d times while %d tasks were processed, want once (after the first 1 000)", got, n)
	}

	// a topic whose table doubles is refreshed again at once: 6 000 more leases after a
	// refresh that saw 6 000 rows
	f.pushN(2 * n)
	f.eventually("the new tasks succeeded", func() bool { return f.count(repository.Succeeded) == 3*n })
	f.eventually("analyzed again", func() bool { return analyzed() >= 2 })
}

// TestVacuum checks that a processor vacuums its topic's partition once its managers
// leased VacuumEvery tasks since the last VACUUM, and never with VacuumEvery negative.
func TestVacuum(t *testing.T) {
	for _, tc := range []struct {
		name  string
		every int64
		want  func(n int64) bool
	}{
		{"AfterEveryThousandLeases", 1000, func(n int64) bool { return n >= 2 }},
		{"NeverWhenNegative", -1, func(n int64) bool { return n == 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			vacuumed := maintenanceCounter(t, f, "vacuum_count")
			const n = 3000
			f.pushN(n)
			handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
				return repository.Succeed("")
			})
			p, _ := f.processor("vacuumer", processor.Config{HeartbeatInterval: 20 * time.Millisecond, VacuumEvery: tc.every},
				processor.ManagerConfig{Handler: handler, BatchSize: 100})
			f.start(p)
			f.eventually("all tasks succeeded", func() bool { return f.count(repository.Succeeded) == n })
			// the last lease may have just crossed the threshold: give the tick time to act
			// and the statistics time to arrive before judging. A backend that reported its
			// statistics less than a second before sends a VACUUM's count only when it is
			// next busy or after 10 s idle (PostgreSQL's PGSTAT_IDLE_INTERVAL), and the pool
			// connection that ran it may stay idle.
			deadline := time.Now().Add(15 * time.Second)
			for !tc.want(vacuumed()) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if got := vacuumed(); !tc.want(got) {
				t.Fatalf("the topic's table was vacuumed %d times while %d tasks were processed with VacuumEvery %d", got, n, tc.every)
			}
		})
	}
}

// TestQuietWhileATransactionIsHeld: while a transaction has held its snapshot for
// longer than the processor's threshold, the processor does not VACUUM its topic's table
// (nor ANALYZE it, nor read it from the head: Processor.quiet), and after the
// transaction ends it stays quiet for about as long as the transaction was open, then
// vacuums again.
func TestQuietWhileATransactionIsHeld(t *testing.T) {
	f := setup(t)
	maintenanceCounter(t, f, "vacuum_count") // autovacuum off for the table
	holder, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.WithoutCancel(f.ctx))
	if _, err := holder.Exec(f.ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(f.ctx, "SELECT count(*) FROM task_topic"); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	held := time.Now()
	var logs logbuf.Buffer
	p, _ := f.processor("vacuumer", processor.Config{HeartbeatInterval: 20 * time.Millisecond, VacuumEvery: 500,
		Logger: jsonLogger(&logs, slog.LevelDebug)},
		processor.ManagerConfig{Handler: processor.TaskFunc(succeed), BatchSize: 100})
	// The transaction counts once held for a second (30 s outside tests); the short
	// transactions of the processor and the test never do.
	processor.SetHeldSnapshot(p, time.Second)
	time.Sleep(1100 * time.Millisecond)
	f.start(p)
	const n = 3000
	f.pushN(n)
	f.eventually("all tasks succeeded", func() bool { return f.count(repository.Succeeded) == n })
	if !processor.Quiet(p) {
		t.Fatalf("not quiet while a transaction is held:\n%s", logs.String())
	}
	if got := len(logs.Lines(`"msg":"vacuumed topic"`)); got != 0 {
		t.Fatalf("%d VACUUMs ran while a transaction was held, want none:\n%s", got, logs.String())
	}
	if err := holder.Rollback(f.ctx); err != nil {
		t.Fatal(err)
	}
	open := time.Since(held)
	released := time.Now()
	f.pushN(n)
	f.eventually("the new tasks succeeded", func() bool { return f.count(repository.Succeeded) == 2*n })
	f.eventually("vacuumed once the quiet ended", func() bool { return len(logs.Lines(`"msg":"vacuumed topic"`)) >= 1 })
	// the quiet after the transaction lasts as long as it was open (less the second it
	// took to count, and a tick)
	if after := time.Since(released); after < open-1500*time.Millisecond {
		t.Errorf("vacuumed %v after a transaction open for %v ended, want no sooner than about %v", after, open, open-time.Second)
	}
	if processor.Quiet(p) {
		t.Errorf("still quiet after vacuuming")
	}
}

package processor_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

// BenchmarkIdle measures what an idle processor costs its database: one processor
// managing N topics that receive no work, at the default pause interval and heartbeat,
// for idleDuration after its first polls. It reports polls per second (counted by its
// Listener) and the database's transactions per second (pg_stat_database: every
// statement the processor runs outside a transaction is one):
//
//	go test -run '^$' -bench Idle -benchtime 1x ./processor/
func BenchmarkIdle(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("topics=%d", n), func(b *testing.B) {
			var polls, xacts float64
			for range b.N {
				p, x := idleRun(b, n)
				polls += p
				xacts += x
			}
			b.ReportMetric(polls/float64(b.N), "polls/s")
			b.ReportMetric(xacts/float64(b.N), "xacts/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

const idleDuration = 30 * time.Second

func idleRun(b *testing.B, topics int) (polls, xacts float64) {
	ctx := context.Background()
	url := pgtest.NewDatabase(b, schema.Hash(), repository.Migrate)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	repo, err := repository.New(repository.Config{Owner: "idle"})
	if err != nil {
		b.Fatal(err)
	}
	p, err := processor.New(processor.Config{Pool: pool, Repository: repo})
	if err != nil {
		b.Fatal(err)
	}
	var count atomic.Int64
	listener := processor.Listener{
		OnEmpty:    func(string, time.Duration) { count.Add(1) },
		OnDispatch: func(string, []repository.Task, time.Duration) { count.Add(1) },
	}
	for i := range topics {
		topic := fmt.Sprintf("idle-%d", i)
		if _, err := repo.Initialize(ctx, pool, topic); err != nil {
			b.Fatal(err)
		}
		handler := processor.TaskFunc(func(context.Context, repository.Task) repository.Decision { return repository.Succeed("") })
		if _, err := p.Manage(processor.ManagerConfig{Topic: topic, Handler: handler, Listener: listener}); err != nil {
			b.Fatal(err)
		}
	}
	committed := func() int64 {
		b.Helper()
		var n int64
		if _, err := pool.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
			b.Fatal(err)
		}
		if err := pool.QueryRow(ctx, "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()").Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	// past the start, when every manager polls at once
	for count.Load() < int64(topics) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second)
	b.ResetTimer()
	n0, x0 := count.Load(), committed()
	time.Sleep(idleDuration)
	n1, x1 := count.Load(), committed()
	b.StopTimer()
	// the two reads of pg_stat_database are transactions of their own
	return float64(n1-n0) / idleDuration.Seconds(), float64(x1-x0-2) / idleDuration.Seconds()
}

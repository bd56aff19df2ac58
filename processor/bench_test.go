package processor_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

// BenchmarkProcessor burns down a backlog of b.N tasks pushed beforehand with one
// processor: only the processing is timed (from the start of Run until the last
// completion committed). It runs only with -bench:
//
//	go test -run '^$' -bench Processor -benchtime 20000x ./processor/
func BenchmarkProcessor(b *testing.B) {
	for _, c := range []struct {
		name    string
		batch   int
		workers int
		delay   time.Duration
	}{
		{"noop/batch=100", 100, 1, 0},
		{"noop/batch=1000", 1000, 1, 0},
		{"noop/batch=1000/workers=4", 1000, 4, 0},
		// the "4 workers with 1 ms handlers" (target ≥ 2000 tasks/s)
		{"delay=1ms/batch=10/workers=4", 10, 4, time.Millisecond},
	} {
		b.Run(c.name, func(b *testing.B) {
			benchProcessor(b, c.batch, c.workers, c.delay)
		})
	}
}

func benchProcessor(b *testing.B, batch, workers int, delay time.Duration) {
	ctx := context.Background()
	url := pgtest.NewDatabase(b, schema.Hash(), repository.Migrate)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	repo, err := repository.New(repository.Config{Owner: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	const topic = "bench"
	if _, err := repo.CreateTopic(ctx, pool, topic); err != nil {
		b.Fatal(err)
	}
	for done := 0; done < b.N; {
		n := min(5000, b.N-done)
		cs := make([]repository.Creation, n)
		for i := range cs {
			cs[i] = repository.Creation{Identifier: "t" + strconv.Itoa(done+i)}
		}
		if _, err := repo.Push(ctx, pool, topic, repository.Append, cs...); err != nil {
			b.Fatal(err)
		}
		done += n
	}
	if _, err := pool.Exec(ctx, "ANALYZE task"); err != nil {
		b.Fatal(err)
	}

	var completed atomic.Int64
	all := make(chan struct{})
	handler := processor.Handler(processor.TaskFunc(func(ctx context.Context, _ repository.Task) repository.Decision {
		if delay > 0 {
			time.Sleep(delay)
		}
		return repository.Decision{Result: repository.Success}
	}))
	if workers > 1 {
		if handler, err = processor.Buffer(handler, processor.BufferConfig{Queue: workers, MinWorkers: workers}); err != nil {
			b.Fatal(err)
		}
	}
	procPool, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer procPool.Close()
	p, err := processor.New(processor.Config{Pool: procPool})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := p.Manage(processor.ManagerConfig{
		Topic: topic, Handler: handler, BatchSize: batch,
		Listener: processor.Listener{
			OnComplete: func(_ string, tasks []repository.Task, _ time.Duration) {
				if completed.Add(int64(len(tasks))) == int64(b.N) {
					close(all)
				}
			},
			OnError: func(_ string, err error) { b.Error(err) },
		},
	}); err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	b.ResetTimer()
	go func() { done <- p.Run(runCtx) }()
	select {
	case <-all:
	case <-time.After(10 * time.Minute):
		b.Fatalf("%d of %d tasks completed after 10 minutes", completed.Load(), b.N)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

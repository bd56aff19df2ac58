package processor_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

// BenchmarkLateness measures how late a processor that was idle starts tasks that fall
// due other than by a push for now: latenessTasks tasks become due at random moments
// over latenessSpread, and each start is compared with the task's not-before time (the
// moment it became runnable). The processor polls every minute at most on its own: only
// its timers and notifications make it start a task on time. It reports the lateness
// p50, p99 and maximum in ms over every task of the b.N runs:
//
//	go test -run '^$' -bench Lateness -benchtime 1x ./processor/
//
// delay: one push of tasks with random delays; retry: another process fails every task
// of one batch, and the topic's backoff (jitter alone) spreads the retries; handback:
// another process hands back one lease at a time (the completion a processor's shutdown
// writes for a task it never started), one every latenessSpread/latenessTasks; expiry:
// another process takes back the leases of a dead owner, and the topic's backoff (100
// ms plus jitter) spreads them.
func BenchmarkLateness(b *testing.B) {
	for _, cause := range []string{"delay", "retry", "handback", "expiry"} {
		b.Run(cause, func(b *testing.B) {
			var late []time.Duration
			for range b.N {
				late = append(late, latenessRun(b, cause)...)
			}
			slices.Sort(late)
			q := func(p float64) float64 {
				return float64(late[min(len(late)-1, int(p*float64(len(late))))]) / float64(time.Millisecond)
			}
			b.ReportMetric(q(0.5), "p50-ms")
			b.ReportMetric(q(0.99), "p99-ms")
			b.ReportMetric(q(1), "max-ms")
			b.ReportMetric(0, "ns/op") // the run's length is set by latenessSpread, not by pgtask
		})
	}
}

const (
	latenessTasks  = 1000
	latenessSpread = 5 * time.Second
)

// latenessRun makes latenessTasks tasks fall due by cause, in a database of its own, and
// returns how late an idle processor started each.
func latenessRun(b *testing.B, cause string) []time.Duration {
	ctx := context.Background()
	url := pgtest.NewDatabase(b, schema.Hash(), repository.Migrate)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	const topic = "lateness"
	repo := latenessRepo(b, pool, "test")
	if _, err := repo.Initialize(ctx, pool, topic); err != nil {
		b.Fatal(err)
	}
	// retries and expiries come back once, after 100 ms (expiry) or nothing (retry) plus
	// a jitter of up to latenessSpread
	base := 100 * time.Millisecond
	if cause == "retry" {
		base = 0
	}
	if _, err := repo.Configure(ctx, pool, topic, repository.TopicSettings{
		MaxAttempts: 2, BackoffBase: base, BackoffCap: time.Hour, BackoffJitter: latenessSpread}); err != nil {
		b.Fatal(err)
	}
	creations := make([]repository.Creation, latenessTasks)
	for i := range creations {
		creations[i] = repository.Creation{Identifier: fmt.Sprintf("task-%d", i)}
		if cause == "delay" {
			creations[i].Delay = time.Millisecond + time.Duration(rand.Int64N(int64(latenessSpread)))
		}
	}
	if _, err := repo.Push(ctx, pool, topic, repository.Append, creations...); err != nil {
		b.Fatal(err)
	}
	// Every cause but the delay leases the tasks first, as another process, before the
	// idle processor starts.
	var other *repository.Repository
	var leased []repository.Task
	if cause != "delay" {
		other = latenessRepo(b, pool, "other")
		leased, err = other.Poll(ctx, pool, topic, repository.FIFO, repository.None, latenessTasks)
		if err != nil || len(leased) != latenessTasks {
			b.Fatalf("poll: %d tasks, %v", len(leased), err)
		}
	}

	var (
		mu   sync.Mutex
		late []time.Duration
		all  = make(chan struct{})
	)
	handler := processor.TaskFunc(func(_ context.Context, t repository.Task) repository.Decision {
		at := time.Now()
		mu.Lock()
		late = append(late, at.Sub(t.NotBefore))
		if len(late) == latenessTasks {
			close(all)
		}
		mu.Unlock()
		return repository.Succeed("")
	})
	empty := make(chan struct{}, 1)
	p, err := processor.New(processor.Config{Pool: pool, Repository: latenessRepo(b, pool, "idle"),
		HeartbeatInterval: 100 * time.Millisecond, ExpiryTimeout: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := p.Manage(processor.ManagerConfig{Topic: topic, Handler: handler, PauseInterval: time.Minute,
		Listener: processor.Listener{OnEmpty: func(string, time.Duration) {
			select {
			case empty <- struct{}{}:
			default:
			}
		}}}); err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	connected := p.Notifier().Connected()
	go func() { done <- p.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	<-connected
	if cause != "delay" {
		<-empty // hibernating: the tasks are all leased
	}

	switch cause {
	case "retry":
		completions := make([]repository.Completion, len(leased))
		for i, t := range leased {
			completions[i] = t.Decide(repository.Fail(errors.New("again")))
		}
		if _, err := other.Complete(ctx, pool, topic, completions...); err != nil {
			b.Fatal(err)
		}
	case "handback":
		tick := time.NewTicker(latenessSpread / latenessTasks)
		defer tick.Stop()
		for _, t := range leased {
			<-tick.C
			if _, err := other.Complete(ctx, pool, topic, t.Decide(repository.SnoozeFor(0))); err != nil {
				b.Fatal(err)
			}
		}
	case "expiry":
		if _, err := pool.Exec(ctx, "UPDATE task_owner SET heartbeat = now() - interval '30 minutes' WHERE owner = 'other'"); err != nil {
			b.Fatal(err)
		}
		expired, err := repo.Expire(ctx, pool, time.Minute)
		if err != nil || len(expired) != 1 || expired[0].Retried != latenessTasks {
			b.Fatalf("expire: %+v, %v", expired, err)
		}
	}
	select {
	case <-all:
	case <-time.After(latenessSpread + time.Minute):
		mu.Lock()
		n := len(late)
		mu.Unlock()
		b.Fatalf("%s: %d of %d tasks started within a minute of the last due time", cause, n, latenessTasks)
	}
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(late)
}

// latenessRepo returns a repository of owner, registered.
func latenessRepo(b *testing.B, pool *pgxpool.Pool, owner string) *repository.Repository {
	repo, err := repository.New(repository.Config{Owner: owner})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := repo.Register(context.Background(), pool); err != nil {
		b.Fatal(err)
	}
	return repo
}

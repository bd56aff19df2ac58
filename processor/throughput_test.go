package processor_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// statementLog is a pgx tracer that records the statements a pool sends.
type statementLog struct {
	mu    sync.Mutex
	stmts []string
}

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stmts = append(l.stmts, data.SQL)
	return ctx
}

func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (l *statementLog) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.stmts {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

func TestThroughput(t *testing.T) {
	t.Run("DecisionsOfManyWorkersAreCommittedTogether", func(t *testing.T) {
		f := setup(t)
		const n = 400
		f.pushN(n)
		cfg, err := pgxpool.ParseConfig(f.url)
		if err != nil {
			t.Fatal(err)
		}
		log := &statementLog{}
		cfg.ConnConfig.Tracer = log
		pool, err := pgxpool.NewWithConfig(f.ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		var inTx, looked atomic.Int32
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			// No transaction may be held open while a handler runs: no session of the
			// database (the processor's pool's; the fixture's pool runs this query) is
			// idle in a transaction. (The pool's idle connections could not tell: pgxpool
			// destroys a connection released inside a transaction.)
			var n int32
			if err := f.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()`).Scan(&n); err == nil {
				inTx.Add(n)
				looked.Add(1)
			}
			time.Sleep(time.Millisecond)
			return repository.Succeed("")
		})
		buffered, err := processor.Buffer(handler, processor.BufferConfig{Queue: 8, MinWorkers: 8, MaxWorkers: 8})
		if err != nil {
			t.Fatal(err)
		}
		// Small batches, and a flush interval that lets several workers' decisions meet.
		p, _ := f.processor("worker", processor.Config{Pool: pool, DisableNotifications: true}, processor.ManagerConfig{
			Handler: buffered, BatchSize: 5, FlushInterval: 200 * time.Millisecond,
		})
		f.start(p)
		f.eventually("all succeeded", func() bool { return f.count(repository.Succeeded) == n })
		polls := log.count("-- name: TaskPoll ")
		completes := log.count("-- name: TaskComplete")
		if polls < n/5 {
			t.Fatalf("only %d polls for %d tasks in batches of 5", polls, n)
		}
		if completes*2 > polls {
			t.Fatalf("%d complete statements for %d batches: decisions were not committed together", completes, polls)
		}
		if looked.Load() < n/2 {
			t.Fatalf("the handlers looked for open transactions %d times of %d", looked.Load(), n)
		}
		if inTx.Load() != 0 {
			t.Fatalf("a session was idle in a transaction %d times while handlers ran", inTx.Load())
		}
	})

	t.Run("WorkersGrowWithTheBacklogAndShrinkWhenIdle", func(t *testing.T) {
		f := setup(t)
		release := make(chan struct{})
		var running, peak atomic.Int32
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			now := running.Add(1)
			for {
				p := peak.Load()
				if now <= p || peak.CompareAndSwap(p, now) {
					break
				}
			}
			<-release
			running.Add(-1)
			return repository.Succeed("")
		})
		buffered, err := processor.Buffer(handler, processor.BufferConfig{Queue: 1, MinWorkers: 1, MaxWorkers: 4, IdleTimeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if got := buffered.Workers(); got != 1 {
			t.Fatalf("workers at start = %d, want the minimum 1", got)
		}
		f.pushN(20)
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: buffered, BatchSize: 1})
		f.start(p)
		f.eventually("workers grew to the maximum", func() bool { return running.Load() == 4 })
		if got := buffered.Workers(); got != 4 {
			t.Fatalf("workers under backlog = %d, want 4", got)
		}
		close(release)
		f.eventually("all succeeded", func() bool { return f.count(repository.Succeeded) == 20 })
		f.eventually("workers shrank to the minimum", func() bool { return buffered.Workers() == 1 })
		if peak.Load() > 4 {
			t.Fatalf("%d handlers ran at once, above the maximum of 4", peak.Load())
		}
	})
}

func TestLimiter(t *testing.T) {
	t.Run("BoundLimitsOutstandingBatches", func(t *testing.T) {
		f := setup(t)
		f.pushN(10)
		release := make(chan struct{})
		var outstanding, peak atomic.Int32
		handler := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			n := outstanding.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			go func() { // reports asynchronously, later
				<-release
				outstanding.Add(-1)
				_ = b.Complete(map[int64]repository.Decision{b.Tasks[0].Sequence: repository.Succeed("")})
			}()
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler, BatchSize: 1, Limiter: processor.Bound(3)})
		f.start(p)
		f.eventually("three batches outstanding", func() bool { return outstanding.Load() == 3 })
		time.Sleep(100 * time.Millisecond) // a fourth batch would be polled by now
		if got := f.count(repository.Active); got != 3 {
			t.Fatalf("%d tasks leased with Bound(3) and batches of 1", got)
		}
		close(release)
		f.eventually("all succeeded", func() bool { return f.count(repository.Succeeded) == 10 })
		if peak.Load() != 3 {
			t.Fatalf("peak outstanding %d, want 3", peak.Load())
		}
	})

	t.Run("PriorityLimiterServesLowerValuesFirstAndEqualsInTurn", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		l := processor.NewPriorityLimiter(1)
		if err := l.Limiter(0).Acquire(ctx); err != nil { // hold the only slot
			t.Fatal(err)
		}
		var (
			mu    sync.Mutex
			order []string
			wg    sync.WaitGroup
		)
		wait := func(name string, priority int) {
			defer wg.Done()
			lim := l.Limiter(priority)
			if err := lim.Acquire(ctx); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			lim.Release()
		}
		// Queue them one after another so arrival order is known.
		for _, w := range []struct {
			name     string
			priority int
		}{{"low-a", 5}, {"low-b", 5}, {"high", 1}} {
			wg.Add(1)
			waiting := l.Waiting()
			go wait(w.name, w.priority)
			for l.Waiting() == waiting {
				time.Sleep(time.Millisecond)
			}
		}
		l.Limiter(0).Release()
		wg.Wait()
		if got := strings.Join(order, ","); got != "high,low-a,low-b" {
			t.Fatalf("served %s, want high,low-a,low-b", got)
		}
	})
}

package repository_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

// ledger is the test's own record of what the workers did, to check against the
// guarantees of SingularByIdentifier.
type ledger struct {
	mu        sync.Mutex
	inFlight  map[string]int64   // identifier → sequence currently leased
	polled    map[string][]int64 // identifier → sequences in the order they were leased
	completer map[int64]int      // sequence → worker that completed it
	problems  []string
	progress  chan struct{} // closed and replaced whenever a task completes
}

func newLedger() *ledger {
	return &ledger{
		inFlight:  map[string]int64{},
		polled:    map[string][]int64{},
		completer: map[int64]int{},
		progress:  make(chan struct{}),
	}
}

func (l *ledger) fail(format string, args ...any) {
	if len(l.problems) < 20 {
		l.problems = append(l.problems, fmt.Sprintf(format, args...))
	}
}

// leased records tasks a poll returned; a task whose identifier is already in flight
// breaks the condition.
func (l *ledger) leased(worker int, tasks []repository.Task) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, task := range tasks {
		if other, busy := l.inFlight[task.Identifier]; busy {
			l.fail("worker %d leased %s@%d while %s@%d is in flight", worker, task.Identifier, task.Sequence, task.Identifier, other)
		}
		if by, done := l.completer[task.Sequence]; done {
			l.fail("worker %d leased task %d, already completed by worker %d", worker, task.Sequence, by)
		}
		l.inFlight[task.Identifier] = task.Sequence
		l.polled[task.Identifier] = append(l.polled[task.Identifier], task.Sequence)
	}
}

// releasing removes tasks from the in-flight set just BEFORE they are completed: once
// the completion commits, another worker may lease the next task of the identifier at
// once, and must not find this one still recorded.
func (l *ledger) releasing(tasks []repository.Task) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, task := range tasks {
		delete(l.inFlight, task.Identifier)
	}
}

// completed records the tasks a completion returned and wakes waiting workers.
func (l *ledger) completed(worker int, tasks []repository.Task) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, task := range tasks {
		if by, dup := l.completer[task.Sequence]; dup {
			l.fail("task %d completed by worker %d and again by worker %d", task.Sequence, by, worker)
		}
		if task.State != repository.Succeeded {
			l.fail("task %d completed as %v, want SUCCEEDED", task.Sequence, task.State)
		}
		l.completer[task.Sequence] = worker
	}
	close(l.progress)
	l.progress = make(chan struct{})
	return len(l.completer)
}

// next returns a channel closed at the next completion.
func (l *ledger) next() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.progress
}

func TestConcurrentPollersSingularByIdentifier(t *testing.T) {
	t.Parallel()
	const (
		workers     = 8
		identifiers = 100
		total       = 10_000
	)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// Every worker has its own pool (its own connections) and its own owner, as separate
	// processes would.
	connString := pgtest.NewDatabase(t, schema.Hash(), migrate)
	pools := make([]*pgxpool.Pool, workers)
	repos := make([]*repository.Repository, workers)
	for i := range workers {
		pool, err := pgxpool.New(ctx, connString)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		repo, err := repository.New(repository.Config{Owner: fmt.Sprintf("worker-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := repo.RegisterOwner(ctx, pool); err != nil {
			t.Fatalf("register worker %d: %v", i, err)
		}
		pools[i], repos[i] = pool, repo
	}
	const topic = "topic"
	if _, err := repos[0].CreateTopic(ctx, pools[0], topic); err != nil {
		t.Fatal(err)
	}

	// One batch in a known order: task k (sequence k+1) has identifier k mod 100.
	creations := make([]repository.Creation, total)
	for k := range creations {
		creations[k] = repository.Creation{Identifier: fmt.Sprintf("id-%03d", k%identifiers)}
	}
	pushed, err := repos[0].Push(ctx, pools[0], topic, repository.Append, creations...)
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	if len(pushed) != total || pushed[0].Sequence != 1 || pushed[total-1].Sequence != total {
		t.Fatalf("pushed %d tasks, sequences %d..%d; want %d, 1..%d",
			len(pushed), pushed[0].Sequence, pushed[len(pushed)-1].Sequence, total, total)
	}
	// Give the planner statistics of the new partition, as autovacuum would within a
	// minute: without them the SINGULAR poll plan probes the primary key for every READY
	// row (~60 ms per poll at 10 000 rows instead of ~2 ms), which makes this test slow.
	if _, err := pools[0].Exec(ctx, "ANALYZE task"); err != nil {
		t.Fatal(err)
	}

	l := newLedger()
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		size := 10 + 40*w/(workers-1) // 10..50
		wg.Go(func() {
			errs <- singularWorker(ctx, l, w, repos[w], pools[w], topic, size, total)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.problems {
		t.Error(p)
	}

	t.Run("EveryTaskCompletedExactlyOnce", func(t *testing.T) {
		if len(l.completer) != total {
			t.Errorf("%d distinct tasks completed, want %d", len(l.completer), total)
		}
		for seq := int64(1); seq <= total; seq++ {
			if _, ok := l.completer[seq]; !ok {
				t.Errorf("task %d never completed", seq)
				break
			}
		}
		counts, err := repos[0].Count(t.Context(), pools[0], topic, repository.TaskFilter{},
			repository.MinSequence, repository.MaxSequence, repository.Total)
		if err != nil {
			t.Fatal(err)
		}
		if got := counts[topic]; len(got) != 1 || got[repository.Succeeded].Count != total {
			t.Errorf("counts by state = %v, want only SUCCEEDED: %d", got, total)
		}
	})

	t.Run("EachIdentifierLeasedInSequenceOrder", func(t *testing.T) {
		if len(l.polled) != identifiers {
			t.Errorf("%d identifiers leased, want %d", len(l.polled), identifiers)
		}
		for id, seqs := range l.polled {
			if !slices.IsSorted(seqs) || len(seqs) != total/identifiers {
				t.Errorf("%s leased as %v, want %d ascending sequences", id, seqs, total/identifiers)
			}
		}
	})

	per := make([]int, workers)
	for _, w := range l.completer {
		per[w]++
	}
	t.Logf("completions per worker: %v", per)
}

// singularWorker is one worker's loop: poll a batch, complete it with SUCCESS, until all total
// tasks are done. An empty poll waits for some worker's next completion rather than
// spinning (the condition blocks every identifier that is in flight).
func singularWorker(ctx context.Context, l *ledger, w int, repo *repository.Repository, pool *pgxpool.Pool, topic string, size, total int) error {
	for {
		progress := l.next() // before polling, so a completion in between is not missed
		tasks, err := repo.Poll(ctx, pool, topic, repository.FIFO, repository.SingularByIdentifier, size)
		if err != nil {
			return fmt.Errorf("worker %d: poll: %w", w, err)
		}
		if len(tasks) == 0 {
			l.mu.Lock()
			done := len(l.completer) >= total
			l.mu.Unlock()
			if done {
				return nil
			}
			select {
			case <-progress:
				continue
			case <-ctx.Done():
				return fmt.Errorf("worker %d: waiting for work: %w", w, ctx.Err())
			}
		}
		if len(tasks) > size {
			return fmt.Errorf("worker %d: poll of %d returned %d tasks", w, size, len(tasks))
		}
		l.leased(w, tasks)

		completions := make([]repository.Completion, len(tasks))
		for i, task := range tasks {
			if task.State != repository.Active || task.Owner != repo.Owner() {
				return fmt.Errorf("worker %d: polled task %d is %v owned by %q", w, task.Sequence, task.State, task.Owner)
			}
			completions[i] = task.Decide(repository.Succeed(""))
		}
		l.releasing(tasks)
		done, err := repo.Complete(ctx, pool, topic, completions...)
		if err != nil {
			return fmt.Errorf("worker %d: complete: %w", w, err)
		}
		if n := l.completed(w, done); n >= total {
			return nil
		}
	}
}

// TestSingularLeaseInFlight: under SingularByIdentifier a poll leasing a task of an
// identifier, not committed yet, keeps every other poll from leasing another task of
// it. Their snapshots saw the task READY, not ACTIVE: under LIFO the newer task of the
// identifier went to a second poll while the first one's lease was in flight, and under
// FIFO an older one (its push committed after the newer's) did; both then ran at once.
func TestSingularLeaseInFlight(t *testing.T) {
	for _, tc := range []struct {
		name  string
		order repository.Order
	}{{"LIFO", repository.LIFO}, {"FIFO", repository.FIFO}} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			other := f.newRepo("other")
			var late pgx.Tx // FIFO: the older task's push, committed after the lease began
			if tc.order == repository.FIFO {
				var err error
				if late, err = f.pool.Begin(f.ctx); err != nil {
					t.Fatal(err)
				}
				defer late.Rollback(f.ctx)
				if _, err := f.repo.Push(f.ctx, late, f.topic, repository.Append, repository.Creation{Identifier: "foo"}); err != nil {
					t.Fatal(err)
				}
			}
			f.push(repository.Append, "foo")
			leasing, err := f.pool.Begin(f.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer leasing.Rollback(f.ctx)
			leased, err := f.repo.Poll(f.ctx, leasing, f.topic, tc.order, repository.SingularByIdentifier, 10)
			if err != nil || len(leased) != 1 {
				t.Fatalf("the first poll: %v, %v; want foo", leased, err)
			}
			if late != nil {
				if err := late.Commit(f.ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				f.push(repository.Append, "foo")
			}
			// the other poll waits for the topic's turn, which the lease in flight holds,
			// then sees it committed
			polled := pollAside(f, other, tc.order)
			select {
			case r := <-polled:
				t.Fatalf("a poll while foo %d's lease is in flight returned %v, %v; want it to wait for the lease's commit", leased[0].Sequence, r.tasks, r.err)
			case <-time.After(200 * time.Millisecond):
			}
			if err := leasing.Commit(f.ctx); err != nil {
				t.Fatal(err)
			}
			if r := <-polled; r.err != nil || len(r.tasks) != 0 {
				t.Errorf("the poll that waited for foo %d's lease: %v, %v; want none", leased[0].Sequence, r.tasks, r.err)
			}
			got, err := other.Poll(f.ctx, f.pool, f.topic, tc.order, repository.SingularByIdentifier, 10)
			if err != nil || len(got) != 0 {
				t.Errorf("a poll while foo %d runs: %v, %v; want none", leased[0].Sequence, got, err)
			}
		})
	}
}

// TestConditionalPollLeasesWhatItChoseAfterItsTurn: a conditional poll that waited for
// the topic's turn leases the tasks committed while it waited, which its choice (after
// the turn) takes: as a single statement, whose snapshot came before the wait, it chose
// and locked them, and left them READY.
func TestConditionalPollLeasesWhatItChoseAfterItsTurn(t *testing.T) {
	f := setup(t)
	other := f.newRepo("other")
	f.push(repository.Append, "foo")
	leasing, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer leasing.Rollback(f.ctx)
	if leased, err := f.repo.Poll(f.ctx, leasing, f.topic, repository.LIFO, repository.SingularByIdentifier, 10); err != nil || len(leased) != 1 {
		t.Fatalf("the first poll: %v, %v; want foo", leased, err)
	}
	polled := pollAside(f, other, repository.LIFO)
	// the other poll waits for the turn (its statement began, its snapshot taken)
	f.eventually("the other poll waits for the topic's turn", func() bool {
		var waiting bool
		return f.pool.QueryRow(f.ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = 1885828451 AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`).Scan(&waiting) == nil && waiting
	})
	bar := f.push(repository.Append, "bar")[0]
	if err := leasing.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	r := <-polled
	if r.err != nil || len(r.tasks) != 1 || r.tasks[0].Sequence != bar.Sequence {
		t.Errorf("the poll that waited: %v, %v; want bar, pushed while it waited", r.tasks, r.err)
	}
	if got := f.get(bar.Sequence); got.State != repository.Active {
		t.Errorf("bar after the poll: %v, want ACTIVE", got.State)
	}
}

// pollOutcome is a poll's outcome, as pollAside sends it.
type pollOutcome struct {
	tasks []repository.Task
	err   error
}

// pollAside polls f's topic under SingularByIdentifier as repo, on a goroutine of its
// own (the poll may wait for the topic's turn), and sends its outcome.
func pollAside(f *fixture, repo *repository.Repository, order repository.Order) <-chan pollOutcome {
	out := make(chan pollOutcome, 1)
	go func() {
		tasks, err := repo.Poll(f.ctx, f.pool, f.topic, order, repository.SingularByIdentifier, 10)
		out <- pollOutcome{tasks, err}
	}()
	return out
}

package repository_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/repository"
)

// TestCompleteAndPoll: the decisions of a batch and the lease of the next, in one
// statement; under a concurrency limit the capacity the decisions free is leased again,
// and a refused decision writes and leases nothing.
func TestCompleteAndPoll(t *testing.T) {
	t.Run("CompletesThenLeasesTheCapacityFreed", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Concurrency: 3})
		pushed := f.push(repository.Append, "a", "b", "c", "d", "e", "f", "g")
		first := f.poll(repository.FIFO, repository.None, 10)
		if len(first) != 3 {
			t.Fatalf("polled %d with a limit of 3", len(first))
		}
		// two of three decided: two slots free, leased at once, in poll order
		done, leased, err := f.repo.CompleteAndPoll(f.ctx, f.pool, f.topic,
			[]repository.Completion{first[0].Decide(repository.Succeed("ok")), first[1].Decide(repository.Fail(errors.New("no")))},
			repository.FIFO, repository.None, 10, repository.Position{})
		if err != nil {
			t.Fatal(err)
		}
		if len(done) != 2 || done[0].State != repository.Succeeded || done[1].State != repository.Failed {
			t.Fatalf("completed %+v, want SUCCEEDED and FAILED", done)
		}
		// lean rows are filled in from the leased tasks
		if done[0].Topic != f.topic || done[0].Identifier != "a" || done[0].Input != "input-a" || done[0].Output != "ok" {
			t.Errorf("completed task %+v lacks what it was leased with", done[0])
		}
		if got, want := sequences(leased), sequences(pushed[3:5]); !slices.Equal(got, want) {
			t.Fatalf("leased %v, want %v", got, want)
		}
		for _, l := range leased {
			if l.State != repository.Active || l.Owner != "owner-1" || l.Attempt != 1 || l.Input != "input-"+l.Identifier {
				t.Errorf("leased task %+v, want ACTIVE under owner-1 in attempt 1 with its input", l)
			}
			if stored := f.get(l.Sequence); stored.State != repository.Active {
				t.Errorf("task %d is %v, want ACTIVE", l.Sequence, stored.State)
			}
		}
		// at the limit: the decision frees one slot, one task comes
		_, leased, err = f.repo.CompleteAndPoll(f.ctx, f.pool, f.topic,
			[]repository.Completion{first[2].Decide(repository.Succeed(""))}, repository.FIFO, repository.None, 10, repository.Position{})
		if err != nil || len(leased) != 1 || leased[0].Sequence != pushed[5].Sequence {
			t.Fatalf("leased %v, %v after one decision at the limit, want task %d", sequences(leased), err, pushed[5].Sequence)
		}
	})

	t.Run("UnderALimitLoweredSinceTheLeaseItLeasesWithinIt", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Concurrency: 4})
		pushed := f.push(repository.Append, "a", "b", "c", "d", "e", "f", "g", "h", "i")
		first := f.poll(repository.FIFO, repository.None, 10)
		f.limit(repository.TopicSettings{Concurrency: 2})
		// two of four decided: two left ACTIVE fill the new limit, nothing comes
		if _, leased := f.handOver(f.repo, 10, repository.Position{}, first[:2]...); len(leased) != 0 {
			t.Fatalf("leased %v with 2 ACTIVE at a limit lowered to 2, want none", sequences(leased))
		}
		// the two others decided: two slots, not the four the decisions free
		_, leased := f.handOver(f.repo, 10, repository.Position{}, first[2:4]...)
		if got, want := sequences(leased), sequences(pushed[4:6]); !slices.Equal(got, want) {
			t.Fatalf("leased %v at a limit of 2 with none ACTIVE, want %v", got, want)
		}
	})

	t.Run("UnderARaisedLimitItLeasesTheRoomBeyondTheSlotsFreed", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Concurrency: 2})
		pushed := f.push(repository.Append, "a", "b", "c", "d", "e", "f", "g", "h", "i")
		first := f.poll(repository.FIFO, repository.None, 10)
		f.limit(repository.TopicSettings{Concurrency: 5})
		done, leased := f.handOver(f.repo, 10, repository.Position{}, first...)
		if len(done) != 2 {
			t.Fatalf("completed %d, want 2", len(done))
		}
		if got, want := sequences(leased), sequences(pushed[2:7]); !slices.Equal(got, want) {
			t.Fatalf("leased %v at a limit raised to 5, want the five next in poll order %v", got, want)
		}
		// and no more than the size asked for
		if _, leased := f.handOver(f.repo, 0, repository.Position{}, leased[0]); len(leased) != 0 {
			t.Fatalf("leased %v with size 0, want none", sequences(leased))
		}
	})

	t.Run("SharesTheLimitWithOtherOwners", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Concurrency: 4})
		f.push(repository.Append, "a", "b", "c", "d", "e", "f", "g", "h")
		mine := f.poll(repository.FIFO, repository.None, 2)
		other := f.newRepo("owner-2")
		theirs, err := other.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 10)
		if err != nil || len(theirs) != 2 {
			t.Fatalf("the other owner polled %d, %v; want the 2 slots left", len(theirs), err)
		}
		if _, leased := f.handOver(f.repo, 10, repository.Position{}, mine...); len(leased) != 2 {
			t.Fatalf("leased %d beside the other owner's 2 at a limit of 4, want 2", len(leased))
		}
		// the other owner's decisions free its own slots, for it
		if _, leased := f.handOver(other, 10, repository.Position{}, theirs[0]); len(leased) != 1 {
			t.Fatalf("the other owner leased %d after one decision, want 1", len(leased))
		}
		if stats, err := f.repo.Stats(f.ctx, f.pool, f.topic); err != nil || stats.Active != 4 {
			t.Fatalf("%d ACTIVE (%v), want the limit, 4", stats.Active, err)
		}
	})

	t.Run("UnderALimitItLeasesInPollOrderFromThePosition", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Concurrency: 2})
		tasks, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append,
			repository.Creation{Identifier: "low", Priority: 5}, repository.Creation{Identifier: "a"},
			repository.Creation{Identifier: "b"}, repository.Creation{Identifier: "c"}, repository.Creation{Identifier: "d"},
			repository.Creation{Identifier: "later", Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		first := f.poll(repository.FIFO, repository.None, 10)
		if got, want := sequences(first), sequences(tasks[1:3]); !slices.Equal(got, want) {
			t.Fatalf("polled %v, want the first two of priority 0 %v", got, want)
		}
		// from the position of d: c stays READY for a poll from the head
		_, leased := f.handOver(f.repo, 10, repository.PositionOf(tasks[4]), first...)
		if got, want := sequences(leased), []int64{tasks[4].Sequence, tasks[0].Sequence}; !slices.Equal(got, want) {
			t.Fatalf("leased %v from the position of d, want d then the priority-5 task %v", got, want)
		}
		// from the head, the one left of priority 0; the delayed task is not due
		_, leased = f.handOver(f.repo, 10, repository.Position{}, leased...)
		if got, want := sequences(leased), []int64{tasks[3].Sequence}; !slices.Equal(got, want) {
			t.Fatalf("leased %v from the head, want c alone %v", got, want)
		}
	})

	t.Run("StartsAtThePosition", func(t *testing.T) {
		f := setup(t)
		pushed := f.push(repository.Append, "a", "b", "c", "d")
		first := f.poll(repository.FIFO, repository.None, 1)
		_, leased, err := f.repo.CompleteAndPoll(f.ctx, f.pool, f.topic,
			[]repository.Completion{first[0].Decide(repository.Succeed(""))}, repository.FIFO, repository.None, 10,
			repository.PositionOf(pushed[2]))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := sequences(leased), sequences(pushed[2:]); !slices.Equal(got, want) {
			t.Fatalf("leased %v from the position of task %d, want %v", got, pushed[2].Sequence, want)
		}
	})

	t.Run("ARefusedDecisionWritesAndLeasesNothing", func(t *testing.T) {
		f := setup(t)
		f.push(repository.Append, "a", "b", "c")
		first := f.poll(repository.FIFO, repository.None, 2)
		f.complete(repository.Succeed(""), first[1]) // completed meanwhile: refused below
		_, _, err := f.repo.CompleteAndPoll(f.ctx, f.pool, f.topic,
			[]repository.Completion{first[0].Decide(repository.Succeed("")), first[1].Decide(repository.Succeed(""))},
			repository.FIFO, repository.None, 10, repository.Position{})
		var te *repository.TaskError
		if !errors.As(err, &te) || !errors.Is(err, repository.ErrWrongState) {
			t.Fatalf("err = %v, want a TaskError naming the task no longer ACTIVE", err)
		}
		if got := f.get(first[0].Sequence); got.State != repository.Active {
			t.Errorf("task %d is %v after the refusal, want still ACTIVE", first[0].Sequence, got.State)
		}
		if rest := f.poll(repository.FIFO, repository.None, 10); len(rest) != 1 {
			t.Errorf("%d tasks READY after the refusal, want the one no statement leased", len(rest))
		}
		// no decision qualifies at all: the same, nothing leased
		_, leased, err := f.repo.CompleteAndPoll(f.ctx, f.pool, f.topic,
			[]repository.Completion{first[1].Decide(repository.Succeed(""))}, repository.FIFO, repository.None, 10, repository.Position{})
		if !errors.Is(err, repository.ErrWrongState) || leased != nil {
			t.Fatalf("leased %v, err = %v, want ErrWrongState and nothing leased", sequences(leased), err)
		}
	})

	t.Run("InsideTheCallersTransaction", func(t *testing.T) {
		f := setup(t)
		f.push(repository.Append, "a", "b")
		first := f.poll(repository.FIFO, repository.None, 1)
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, leased, err := f.repo.CompleteAndPoll(f.ctx, tx, f.topic,
			[]repository.Completion{first[0].Decide(repository.Succeed(""))}, repository.FIFO, repository.None, 10, repository.Position{})
		if err != nil || len(leased) != 1 {
			t.Fatalf("leased %d, %v", len(leased), err)
		}
		if err := tx.Rollback(f.ctx); err != nil {
			t.Fatal(err)
		}
		if got := f.get(first[0].Sequence); got.State != repository.Active {
			t.Errorf("task %d is %v after the rollback, want ACTIVE", first[0].Sequence, got.State)
		}
		if got := f.get(leased[0].Sequence); got.State != repository.Ready {
			t.Errorf("task %d is %v after the rollback, want READY", leased[0].Sequence, got.State)
		}
	})

	t.Run("BadInputChangesNothing", func(t *testing.T) {
		f := setup(t)
		f.push(repository.Append, "a", "b")
		first := f.poll(repository.FIFO, repository.None, 1)
		ok := []repository.Completion{first[0].Decide(repository.Succeed(""))}
		for _, c := range []struct {
			name        string
			topic       string
			completions []repository.Completion
			condition   repository.Condition
			size        int
			want        error
		}{
			{"negative size", f.topic, ok, repository.None, -1, repository.ErrInvalid},
			{"unknown condition", f.topic, ok, repository.Condition(9), 1, repository.ErrInvalid},
			{"snooze delay", f.topic, []repository.Completion{first[0].Decide(repository.SnoozeFor(-time.Second))}, repository.None, 1, repository.ErrInvalid},
			{"unknown topic", "nowhere", ok, repository.None, 1, repository.ErrUnknownTopic},
		} {
			if _, _, err := f.repo.CompleteAndPoll(f.ctx, f.pool, c.topic, c.completions, repository.FIFO, c.condition, c.size, repository.Position{}); !errors.Is(err, c.want) {
				t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
			}
		}
		if got := f.get(first[0].Sequence); got.State != repository.Active {
			t.Errorf("task %d is %v after bad input, want still ACTIVE", first[0].Sequence, got.State)
		}
		var ready int
		if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task WHERE state = 1").Scan(&ready); err != nil || ready != 1 {
			t.Errorf("%d tasks READY after bad input (%v), want 1", ready, err)
		}
	})

	t.Run("WithoutDecisionsItPolls", func(t *testing.T) {
		f := setup(t)
		f.push(repository.Append, "a")
		done, leased, err := f.repo.CompleteAndPoll(f.ctx, f.pool, f.topic, nil, repository.FIFO, repository.None, 5, repository.Position{})
		if err != nil || done != nil || len(leased) != 1 {
			t.Fatalf("completed %d, leased %d, %v", len(done), len(leased), err)
		}
	})
}

// TestHandOverTakesNoLock: at a topic's concurrency limit, a completion hands the slots
// it frees over to the next tasks without the topic's advisory lock (migration 000026),
// so that chains sharing a limit do not wait for each other's commits; a lease that
// could raise the ACTIVE count (room beyond the slots freed) and the polls the hand-over
// does not serve (LIFO, a condition, a per-key limit, a rate, fairness) still take the
// lock. Another transaction holds the lock while each completion runs with a
// lock_timeout: waiting for the lock is then ErrLockTimeout, and nothing changes.
// Plain PostgreSQL only: on Citus the completion and the lease are two statements and
// the lease takes the lock (docs/citus.md).
func TestHandOverTakesNoLock(t *testing.T) {
	for _, c := range []struct {
		name      string
		settings  repository.TopicSettings
		raise     bool // the limit rises by one after the poll: room beyond the slots freed
		order     repository.Order
		condition repository.Condition
		locks     bool
	}{
		{name: "ConcurrencyAlone", settings: repository.TopicSettings{Concurrency: 2}},
		{name: "RoomBeyondTheSlotsFreed", settings: repository.TopicSettings{Concurrency: 2}, raise: true, locks: true},
		{name: "LIFO", settings: repository.TopicSettings{Concurrency: 2}, order: repository.LIFO, locks: true},
		{name: "UnderACondition", settings: repository.TopicSettings{Concurrency: 2}, condition: repository.SingularByIdentifier, locks: true},
		{name: "WithAPerKeyLimit", settings: repository.TopicSettings{Concurrency: 2, KeyConcurrency: 5}, locks: true},
		{name: "WithARate", settings: repository.TopicSettings{Concurrency: 2, Rate: 1000, RatePeriod: time.Second, RateBurst: 100}, locks: true},
		{name: "Fair", settings: repository.TopicSettings{Concurrency: 2, Fair: true}, locks: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t)
			f.limit(c.settings)
			f.push(repository.Append, "a", "b", "c", "d", "e", "f")
			first := f.poll(c.order, c.condition, 10)
			if len(first) != 2 {
				t.Fatalf("polled %d at a limit of 2", len(first))
			}
			if c.raise {
				c.settings.Concurrency++
				f.limit(c.settings)
			}
			f.holdTopicLock()
			var leased []repository.Task
			err := repository.Atomically(f.ctx, f.pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(f.ctx, "SET LOCAL lock_timeout = '200ms'"); err != nil {
					return err
				}
				var err error
				_, leased, err = f.repo.CompleteAndPoll(f.ctx, tx, f.topic, decide(first), c.order, c.condition, 10, repository.Position{})
				return err
			})
			if !c.locks {
				if err != nil || len(leased) != 2 {
					t.Fatalf("leased %d, %v while another transaction holds the topic's lock, want the 2 slots freed handed over", len(leased), err)
				}
				return
			}
			if !errors.Is(err, repository.ErrLockTimeout) {
				t.Fatalf("err = %v, leased %d, want ErrLockTimeout: this lease takes the topic's lock", err, len(leased))
			}
			for _, task := range first {
				if got := f.get(task.Sequence); got.State != repository.Active {
					t.Fatalf("task %d is %v after the lock timed out, want still ACTIVE", task.Sequence, got.State)
				}
			}
		})
	}
}

// TestHandOverHoldsTheLimitUnderConcurrency: owners chaining at a topic's limit (each
// completion hands its slots over, part of a batch at a time), beside owners that poll
// under the lock, never have more tasks ACTIVE than the limit in any snapshot a reader
// takes, never lease a task another holds, and do every task once.
func TestHandOverHoldsTheLimitUnderConcurrency(t *testing.T) {
	f := setup(t)
	const limit, tasks = 5, 600
	f.limit(repository.TopicSettings{Concurrency: limit})
	ids := make([]string, tasks)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%03d", i)
	}
	f.push(repository.Append, ids...)

	var (
		mu      sync.Mutex
		holder  = map[int64]int{} // sequence → worker holding its lease
		done    = map[int64]bool{}
		problem []string
	)
	took := func(worker int, leased []repository.Task) {
		mu.Lock()
		defer mu.Unlock()
		for _, task := range leased {
			if w, held := holder[task.Sequence]; held || done[task.Sequence] {
				problem = append(problem, fmt.Sprintf("worker %d leased task %d, held by %d or done", worker, task.Sequence, w))
			}
			holder[task.Sequence] = worker
		}
	}
	finished := func(completed []repository.Task) int {
		mu.Lock()
		defer mu.Unlock()
		for _, task := range completed {
			delete(holder, task.Sequence)
			done[task.Sequence] = true
		}
		return len(done)
	}

	// a connection for each worker and the reader (a pool's default is 4 on 2 cores)
	cfg := f.pool.Config()
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(f.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
	defer cancel()
	var highest atomic.Int64
	sampling := make(chan struct{})
	go func() {
		defer close(sampling)
		for ctx.Err() == nil {
			var n int64
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM task WHERE topic = $1 AND state = 0", f.topic).Scan(&n); err == nil {
				highest.Store(max(highest.Load(), n))
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for w := range 6 {
		repo := f.newRepo(fmt.Sprintf("worker-%d", w))
		wg.Go(func() {
			var held []repository.Task
			for ctx.Err() == nil {
				if len(held) == 0 || w >= 4 { // workers 4 and 5 complete, then poll under the lock
					if len(held) > 0 {
						completed, err := repo.Complete(ctx, pool, f.topic, decide(held)...)
						if err != nil {
							errs[w] = err
							return
						}
						held = nil
						if finished(completed) == tasks {
							cancel()
							return
						}
					}
					leased, err := repo.Poll(ctx, pool, f.topic, repository.FIFO, repository.None, limit)
					if err != nil {
						errs[w] = err
						return
					}
					took(w, leased)
					held = leased
					if len(held) == 0 {
						time.Sleep(time.Millisecond)
					}
					continue
				}
				// a part of the batch, so that the chains hand over different numbers
				part := 1 + (len(held)+w)%len(held)
				completed, leased, err := repo.CompleteAndPoll(ctx, pool, f.topic, decide(held[:part]),
					repository.FIFO, repository.None, limit, repository.Position{})
				if err != nil {
					errs[w] = err
					return
				}
				took(w, leased)
				held = append(held[part:], leased...)
				if finished(completed) == tasks {
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	cancel()
	<-sampling
	for w, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("worker %d: %v", w, err)
		}
	}
	if len(problem) > 0 {
		t.Fatalf("%d problems, the first: %v", len(problem), problem[:min(len(problem), 5)])
	}
	if n := finished(nil); n != tasks {
		t.Fatalf("%d of %d tasks done", n, tasks)
	}
	if h := highest.Load(); h > limit || h == 0 {
		t.Fatalf("at most %d tasks ACTIVE in the samples, want 1 to the limit %d", h, limit)
	}
}

// handOver succeeds tasks through repo's CompleteAndPoll, FIFO without a condition, and
// fails the test on error.
func (f *fixture) handOver(repo *repository.Repository, size int, from repository.Position, tasks ...repository.Task) (done, leased []repository.Task) {
	f.t.Helper()
	done, leased, err := repo.CompleteAndPoll(f.ctx, f.pool, f.topic, decide(tasks), repository.FIFO, repository.None, size, from)
	if err != nil {
		f.t.Fatalf("complete and poll %v: %v", sequences(tasks), err)
	}
	return done, leased
}

// decide succeeds each of tasks.
func decide(tasks []repository.Task) []repository.Completion {
	out := make([]repository.Completion, len(tasks))
	for i, task := range tasks {
		out[i] = task.Decide(repository.Succeed(""))
	}
	return out
}

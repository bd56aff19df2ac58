package repository_test

import (
	"errors"
	"slices"
	"testing"
	"time"

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

package repository_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/repository"
)

// sum adds up tallies.
func sum(tallies []repository.Tally) repository.Tally {
	var s repository.Tally
	for _, y := range tallies {
		s.Pushed += y.Pushed
		s.Retried += y.Retried
		s.Failed += y.Failed
		s.Suspended += y.Suspended
		s.Filtered += y.Filtered
		s.Succeeded += y.Succeeded
	}
	return s
}

// tallied waits (the current second is never in a tally) until the sum of the topic's
// tallies ("" for every topic) over the last minute is want, and fails the test if it
// is not within 5 s.
func (f *fixture) tallied(topic string, want repository.Tally) {
	f.t.Helper()
	var got repository.Tally
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		tallies, err := f.repo.Tallies(f.ctx, f.pool, topic, time.Minute)
		if err != nil {
			f.t.Fatal(err)
		}
		if len(tallies) != 60 {
			f.t.Fatalf("%d tallies for a minute, want one per second", len(tallies))
		}
		for i := 1; i < len(tallies); i++ {
			if d := tallies[i].Second.Sub(tallies[i-1].Second); d != time.Second {
				f.t.Fatalf("tallies %d and %d are %v apart, want 1s", i-1, i, d)
			}
		}
		if got = sum(tallies); got == want {
			return
		}
	}
	f.t.Fatalf("tallies of %q add up to %+v, want %+v", topic, got, want)
}

// TestTallies: every push and every decision on a leased task is counted in its topic's
// tally, by result; snoozes and refused completions are not; Tallies("") adds up every
// topic; old tallies are pruned.
func TestTallies(t *testing.T) {
	f := setup(t)
	f.createTopic("other")
	if _, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.MaxAttempts, s.BackoffBase = 2, 0 }); err != nil {
		t.Fatal(err)
	}

	// pushes from Go (both statements) and from SQL
	f.push(repository.Append, "a", "b", "c")
	f.push(repository.Replace, "c", "d", "e") // c's older task is made REDUNDANT: 3 pushed
	if _, err := f.pool.Exec(f.ctx, "SELECT task_push_batch('topic', ARRAY['f', 'g'])"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.repo.Push(f.ctx, f.pool, "other", repository.Append, repository.Creation{Identifier: "x"}); err != nil {
		t.Fatal(err)
	}
	f.tallied(f.topic, repository.Tally{Pushed: 8})
	f.tallied("other", repository.Tally{Pushed: 1})

	// a refused completion (all or nothing: one decision for a task not leased) counts nothing
	leased := f.poll(repository.FIFO, repository.None, 6)
	if len(leased) != 6 {
		t.Fatalf("leased %d tasks, want 6", len(leased))
	}
	stale := leased[5].Decide(repository.Succeed(""))
	stale.Attempt++
	if _, err := f.repo.Complete(f.ctx, f.pool, f.topic, leased[4].Decide(repository.Succeed("")), stale); err == nil {
		t.Fatal("a completion with a wrong attempt was accepted")
	}
	f.complete(repository.Succeed("ok"), leased[0], leased[1])
	f.complete(repository.Fail(errors.New("again")), leased[2]) // 2 attempts: retried
	f.complete(repository.Skip("no"), leased[3])
	f.complete(repository.SnoozeFor(time.Hour), leased[4]) // not counted
	f.complete(repository.Suspend("wait"), leased[5])
	f.tallied(f.topic, repository.Tally{Pushed: 8, Succeeded: 2, Retried: 1, Filtered: 1, Suspended: 1})

	// the retried task fails for good on its second attempt
	again := f.poll(repository.FIFO, repository.None, 10)
	var second []repository.Task
	for _, task := range again {
		if task.Attempt == 2 {
			second = append(second, task)
		}
	}
	if len(second) != 1 {
		t.Fatalf("polled %d tasks on their second attempt, want the one retried", len(second))
	}
	f.complete(repository.Fail(errors.New("still")), second...)
	f.tallied(f.topic, repository.Tally{Pushed: 8, Succeeded: 2, Retried: 1, Failed: 1, Filtered: 1, Suspended: 1})
	f.tallied("", repository.Tally{Pushed: 9, Succeeded: 2, Retried: 1, Failed: 1, Filtered: 1, Suspended: 1})
	f.tallied("unknown", repository.Tally{})

	// each writing session has its own rows: pushes from two connections at once
	c1, err := f.pool.Acquire(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Release()
	c2, err := f.pool.Acquire(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Release()
	tx1, err := c1.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.repo.Push(f.ctx, tx1, "other", repository.Append, repository.Creation{Identifier: "y"}); err != nil {
		t.Fatal(err)
	}
	// the second session's push does not wait for the first's transaction
	if _, err := f.repo.Push(f.ctx, c2, "other", repository.Append, repository.Creation{Identifier: "z"}); err != nil {
		t.Fatal(err)
	}
	if err := tx1.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	f.tallied("other", repository.Tally{Pushed: 3})

	for _, window := range []time.Duration{0, time.Second - 1, repository.TallyKept + time.Second} {
		if _, err := f.repo.Tallies(f.ctx, f.pool, f.topic, window); err == nil || !strings.Contains(err.Error(), "tally window") {
			t.Errorf("Tallies with a window of %v: %v, want an error naming the window", window, err)
		}
	}

	// pruning deletes what is older than TallyKept, and only that
	if _, err := f.pool.Exec(f.ctx, `INSERT INTO task_tally (topic, second, writer, pushed)
		VALUES ('topic', now() - interval '2 hours', 1, 5)`); err != nil {
		t.Fatal(err)
	}
	n, err := f.repo.PruneTallies(f.ctx, f.pool)
	if err != nil || n != 1 {
		t.Fatalf("PruneTallies: %d, %v; want the one old row", n, err)
	}
	f.tallied("", repository.Tally{Pushed: 11, Succeeded: 2, Retried: 1, Failed: 1, Filtered: 1, Suspended: 1})
}

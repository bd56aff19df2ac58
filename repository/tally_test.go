package repository_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/internal/pgtest"
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

// TestTallyLongTransaction: the statements of one transaction count in a new tally row
// every 64 statements (migration 000025), so that a long transaction does not update one
// row again and again (each update walking every version before it): 150 pushes, then 130
// completions, one statement each in one transaction, count in three rows each, under
// the writers pid, pid+2^22 and pid+2·2^22, and add up to what was done; a transaction
// of one statement counts under the process id, as before.
func TestTallyLongTransaction(t *testing.T) {
	f := setup(t)
	const step = 1 << 22
	// writers returns the tally rows' writers of the topic with pushed (or succeeded)
	// counts, keyed by writer.
	writers := func(column string) map[int64]int64 {
		t.Helper()
		rows, err := f.pool.Query(f.ctx, "SELECT writer, sum("+column+")::bigint FROM task_tally WHERE topic = $1 AND "+
			column+" > 0 GROUP BY writer", f.topic)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int64]int64{}
		for rows.Next() {
			var w, n int64
			if err := rows.Scan(&w, &n); err != nil {
				t.Fatal(err)
			}
			out[w] += n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// inOneTransaction runs n statements of stmt(i) in one transaction and returns its
	// server process id.
	inOneTransaction := func(n int, stmt func(tx pgx.Tx, i int) error) (pid int64) {
		t.Helper()
		if err := repository.Atomically(f.ctx, f.pool, func(tx pgx.Tx) error {
			if err := tx.QueryRow(f.ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				return err
			}
			for i := range n {
				if err := stmt(tx, i); err != nil {
					return fmt.Errorf("statement %d: %w", i, err)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return pid
	}
	want := func(what string, got map[int64]int64, pid int64, counts ...int64) {
		t.Helper()
		base := pid % step
		if pgtest.OnCitus() {
			// the worker's session writes (task_citus_push, task_citus_complete)
			base = slices.Min(slices.Collect(maps.Keys(got))) % step
		}
		w := map[int64]int64{}
		for i, n := range counts {
			w[base+int64(i)*step] = n
		}
		if !maps.Equal(got, w) {
			t.Fatalf("%s counted under writers %v, want %v (process %d)", what, got, w, pid)
		}
	}

	pid := inOneTransaction(150, func(tx pgx.Tx, i int) error {
		_, err := tx.Exec(f.ctx, "SELECT task_push($1, $2)", f.topic, fmt.Sprintf("t%03d", i))
		return err
	})
	want("150 pushes in one transaction", writers("pushed"), pid, 64, 64, 22)

	leased := f.poll(repository.FIFO, repository.None, 130)
	if len(leased) != 130 {
		t.Fatalf("leased %d tasks, want 130", len(leased))
	}
	pid = inOneTransaction(130, func(tx pgx.Tx, i int) error {
		_, err := f.repo.Complete(f.ctx, tx, f.topic, leased[i].Decide(repository.Succeed("")))
		return err
	})
	want("130 completions in one transaction", writers("succeeded"), pid, 64, 64, 2)

	// a transaction of one statement: the process id alone, its row of this second
	if _, err := f.pool.Exec(f.ctx, "TRUNCATE task_tally"); err != nil {
		t.Fatal(err)
	}
	pid = inOneTransaction(1, func(tx pgx.Tx, _ int) error {
		_, err := tx.Exec(f.ctx, "SELECT task_push_batch($1, ARRAY['u1', 'u2', 'u3'])", f.topic)
		return err
	})
	want("a push of 3 in a transaction of its own", writers("pushed"), pid, 3)
	f.tallied(f.topic, repository.Tally{Pushed: 3})

	if pgtest.OnCitus() {
		t.Log("the count's setting is the worker session's on Citus: its wrap and a session's own value are checked on plain PostgreSQL")
		return
	}
	// The count goes round after 32 768 upserts (the writer stays an integer), and a
	// value the session set itself counts as none.
	if _, err := f.pool.Exec(f.ctx, "TRUNCATE task_tally"); err != nil {
		t.Fatal(err)
	}
	pid = inOneTransaction(3, func(tx pgx.Tx, i int) error {
		if i == 0 {
			if _, err := tx.Exec(f.ctx, "SELECT set_config('pgtask.tally_statements', '32767', true)"); err != nil {
				return err
			}
		}
		_, err := tx.Exec(f.ctx, "SELECT task_push($1, $2)", f.topic, fmt.Sprintf("w%d", i))
		return err
	})
	if got, w := writers("pushed"), map[int64]int64{pid%step + 511*step: 1, pid % step: 2}; !maps.Equal(got, w) {
		t.Fatalf("pushes after 32 767 upserts counted under writers %v, want %v", got, w)
	}
	for _, junk := range []string{"abc", "-70", "99999999999", ""} {
		if _, err := f.pool.Exec(f.ctx, "TRUNCATE task_tally"); err != nil {
			t.Fatal(err)
		}
		pid = inOneTransaction(1, func(tx pgx.Tx, _ int) error {
			if _, err := tx.Exec(f.ctx, "SELECT set_config('pgtask.tally_statements', $1, true)", junk); err != nil {
				return err
			}
			_, err := tx.Exec(f.ctx, "SELECT task_push($1, 'j' || $2)", f.topic, junk)
			return err
		})
		want(fmt.Sprintf("a push after the setting was set to %q", junk), writers("pushed"), pid, 1)
	}
}

package repository_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
)

// Acceptance tests of the repository operations (design §3-§5), one behaviour per subtest.

// dbNow reads the database clock. A statement run after dbNow sees now() at or after it.
func dbNow(f *fixture) time.Time {
	f.t.Helper()
	var now time.Time
	if err := f.pool.QueryRow(f.ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
		f.t.Fatalf("read database clock: %v", err)
	}
	return now
}

// makeDue lets a task's backoff elapse without sleeping: a direct UPDATE clearing its
// not-before time (tests only; no operation moves time forward for READY tasks).
func makeDue(f *fixture, sequence int64) {
	f.t.Helper()
	if _, err := f.pool.Exec(f.ctx, "UPDATE task SET not_before = NULL WHERE topic = $1 AND sequence = $2", f.topic, sequence); err != nil {
		f.t.Fatalf("make task %d due: %v", sequence, err)
	}
}

// pushOne pushes one creation and fails the test on error.
func pushOne(f *fixture, c repository.Creation) repository.Task {
	f.t.Helper()
	tasks, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, c)
	if err != nil {
		f.t.Fatalf("push %+v: %v", c, err)
	}
	return tasks[0]
}

// pollOne polls exactly one task (FIFO, no condition) and checks it is want.
func pollOne(f *fixture, repo *repository.Repository, want int64) repository.Task {
	f.t.Helper()
	got, err := repo.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 1)
	if err != nil {
		f.t.Fatalf("poll: %v", err)
	}
	if len(got) != 1 || got[0].Sequence != want {
		f.t.Fatalf("poll = %v, want [%d]", sequences(got), want)
	}
	return got[0]
}

// configure replaces the topic's settings and fails the test on error.
func configure(f *fixture, s repository.TopicSettings) {
	f.t.Helper()
	if _, err := f.repo.Configure(f.ctx, f.pool, f.topic, s); err != nil {
		f.t.Fatalf("configure: %v", err)
	}
}

// clockedRepo returns a repository of owner whose clock runs offset ahead of real time,
// registered (heartbeat) at that time.
func clockedRepo(f *fixture, owner string, offset time.Duration) *repository.Repository {
	f.t.Helper()
	repo, err := repository.New(repository.Config{Owner: owner, Now: func() time.Time { return time.Now().Add(offset) }})
	if err != nil {
		f.t.Fatalf("new repository: %v", err)
	}
	if _, err := repo.RegisterOwner(f.ctx, f.pool); err != nil {
		f.t.Fatalf("register %s: %v", owner, err)
	}
	return repo
}

// wantTaskError checks that err is a *repository.TaskError naming exactly seqs and
// matching sentinel.
func wantTaskError(t *testing.T, err error, sentinel error, seqs ...int64) {
	t.Helper()
	var te *repository.TaskError
	if !errors.As(err, &te) {
		t.Fatalf("err = %v, want a *repository.TaskError", err)
	}
	if !errors.Is(err, sentinel) {
		t.Errorf("err = %v, want errors.Is %v", err, sentinel)
	}
	if !slices.Equal(te.Sequences(), seqs) {
		t.Errorf("TaskError names %v, want %v", te.Sequences(), seqs)
	}
}

// wantUnchanged checks that the stored task still equals before.
func wantUnchanged(f *fixture, before repository.Task) {
	f.t.Helper()
	after := f.get(before.Sequence)
	if after.State != before.State || after.Descent != before.Descent || after.Owner != before.Owner ||
		after.Attempt != before.Attempt || after.Output != before.Output || !after.Completed.Equal(before.Completed) {
		f.t.Errorf("task %d changed: %+v, want %+v", before.Sequence, after, before)
	}
}

// wantState checks a task's state and descent.
func wantState(t *testing.T, task repository.Task, state, descent repository.State) {
	t.Helper()
	if task.State != state || task.Descent != descent {
		t.Errorf("task %d is %v/%v, want %v/%v", task.Sequence, task.State, task.Descent, state, descent)
	}
}

// wantWindow checks lo <= got <= hi, with a millisecond for interval rounding.
func wantWindow(t *testing.T, what string, got, lo, hi time.Time) {
	t.Helper()
	if got.Before(lo.Add(-time.Millisecond)) || got.After(hi.Add(time.Millisecond)) {
		t.Errorf("%s = %v, want within [%v, %v]", what, got, lo, hi)
	}
}

// isolated runs the subtest in parallel on its own topic (named after the subtest) of the
// shared fixture's database: as independent as a database of its own, and cheaper.
func isolated(t *testing.T, shared *fixture) *fixture {
	t.Helper()
	t.Parallel()
	return onTopic(t, shared, t.Name())
}

func TestFreshDatabase(t *testing.T) {
	t.Run("FirstPushedTaskGetsSequenceOne", func(t *testing.T) {
		f := setup(t)
		if got := f.push(repository.Append, "a")[0].Sequence; got != 1 {
			t.Fatalf("first sequence = %d, want 1", got)
		}
	})
}

func TestEmptyInput(t *testing.T) {
	t.Run("DoesNothingAtAll", func(t *testing.T) {
		f := setup(t)
		for name, op := range map[string]func() (int, error){
			"push": func() (int, error) {
				got, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Replace)
				return len(got), err
			},
			"poll size 0": func() (int, error) {
				got, err := f.repo.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 0)
				return len(got), err
			},
			"complete": func() (int, error) {
				got, err := f.repo.Complete(f.ctx, f.pool, f.topic)
				return len(got), err
			},
			"cancel": func() (int, error) {
				got, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "alice")
				return len(got), err
			},
			"reassign": func() (int, error) {
				got, err := f.repo.Reassign(f.ctx, f.pool, f.topic, repository.Success)
				return len(got), err
			},
			"recreate": func() (int, error) {
				got, err := f.repo.Recreate(f.ctx, f.pool, f.topic, repository.RecreateAppend)
				return len(got), err
			},
			"junction": func() (int, error) {
				got, err := f.repo.Junction(f.ctx, f.pool, f.topic, repository.Eternal)
				return len(got), err
			},
		} {
			if n, err := op(); n != 0 || err != nil {
				t.Errorf("%s of nothing = %d, %v; want nothing, no error", name, n, err)
			}
		}
		if got := f.push(repository.Append, "a")[0].Sequence; got != 1 {
			t.Errorf("first sequence after empty operations = %d, want 1", got)
		}
	})
}

func TestTransitions(t *testing.T) {
	f := setup(t)
	fail := repository.Fail(errors.New("boom"))
	// Each case drives a task of identifier "x" and returns its sequence; the task is then
	// read back and its state and descent compared.
	for _, tc := range []struct {
		name           string
		do             func(c *fixture) int64
		state, descent repository.State
	}{
		{"FreshIsReadyReady", func(c *fixture) int64 {
			return c.push(repository.Append, "x")[0].Sequence
		}, repository.Ready, repository.Ready},
		{"PushedSuspendedIsSuspendedReady", func(c *fixture) int64 {
			// Every fresh task has descent READY, suspended or not (design §3, issue 17).
			return pushOne(c, repository.Creation{Identifier: "x", Suspended: true}).Sequence
		}, repository.Suspended, repository.Ready},
		{"PushedSuspendedFromSQLIsSuspendedReady", func(c *fixture) int64 {
			var seq int64
			if err := c.pool.QueryRow(c.ctx, "SELECT task_push($1, 'x', suspended => true)", c.topic).Scan(&seq); err != nil {
				c.t.Fatal(err)
			}
			return seq
		}, repository.Suspended, repository.Ready},
		{"PushedSuspendedThenReleasedIsReadyReady", func(c *fixture) int64 {
			// a junction leaves descent as it is
			seq := pushOne(c, repository.Creation{Identifier: "x", Suspended: true}).Sequence
			if _, err := c.repo.Junction(c.ctx, c.pool, c.topic, repository.Singular, []string{"x"}); err != nil {
				c.t.Fatal(err)
			}
			return seq
		}, repository.Ready, repository.Ready},
		{"PolledIsActiveReady", func(c *fixture) int64 {
			return driveTo(c, "x", repository.Active).Sequence
		}, repository.Active, repository.Ready},
		{"CompletedWithFailureIsFailedReady", func(c *fixture) int64 {
			return driveTo(c, "x", repository.Failed).Sequence
		}, repository.Failed, repository.Ready},
		{"CompletedWithSuspensionIsSuspendedReady", func(c *fixture) int64 {
			return driveTo(c, "x", repository.Suspended).Sequence
		}, repository.Suspended, repository.Ready},
		{"CompletedWithFilterIsFilteredReady", func(c *fixture) int64 {
			return driveTo(c, "x", repository.Filtered).Sequence
		}, repository.Filtered, repository.Ready},
		{"CompletedWithSuccessIsSucceededReady", func(c *fixture) int64 {
			return driveTo(c, "x", repository.Succeeded).Sequence
		}, repository.Succeeded, repository.Ready},
		{"ReadyMadeRedundantIsRedundantReady", func(c *fixture) int64 {
			old := c.push(repository.Append, "x")[0]
			c.push(repository.Supersede, "x")
			return old.Sequence
		}, repository.Redundant, repository.Ready},
		{"SucceededMadeRedundantIsRedundantSucceeded", func(c *fixture) int64 {
			old := driveTo(c, "x", repository.Succeeded)
			c.push(repository.Replace, "x")
			return old.Sequence
		}, repository.Redundant, repository.Succeeded},
		{"FailedRecreatedIsRecreatedFailed", func(c *fixture) int64 {
			old := driveTo(c, "x", repository.Failed)
			if _, err := c.repo.Recreate(c.ctx, c.pool, c.topic, repository.RecreateAppend, old.Sequence); err != nil {
				c.t.Fatalf("recreate: %v", err)
			}
			return old.Sequence
		}, repository.Recreated, repository.Failed},
		{"FailedResetIsReadyFailed", func(c *fixture) int64 {
			old := driveTo(c, "x", repository.Failed)
			if _, err := c.repo.Recreate(c.ctx, c.pool, c.topic, repository.Reset, old.Sequence); err != nil {
				c.t.Fatalf("reset: %v", err)
			}
			return old.Sequence
		}, repository.Ready, repository.Failed},
		{"ResetTaskPolledAndSucceededIsSucceededFailed", func(c *fixture) int64 {
			old := driveTo(c, "x", repository.Failed)
			if _, err := c.repo.Recreate(c.ctx, c.pool, c.topic, repository.Reset, old.Sequence); err != nil {
				c.t.Fatalf("reset: %v", err)
			}
			c.complete(repository.Succeed(""), pollOne(c, c.repo, old.Sequence))
			return old.Sequence
		}, repository.Succeeded, repository.Failed},
		{"FailedReassignedSuccessIsSucceededFailed", func(c *fixture) int64 {
			old := driveTo(c, "x", repository.Failed)
			if _, err := c.repo.Reassign(c.ctx, c.pool, c.topic, repository.Success, old.Sequence); err != nil {
				c.t.Fatalf("reassign: %v", err)
			}
			return old.Sequence
		}, repository.Succeeded, repository.Failed},
		{"ReadyCancelledIsRedundantReady", func(c *fixture) int64 {
			return driveTo(c, "x", repository.Redundant).Sequence
		}, repository.Redundant, repository.Ready},
		{"SuspendedCancelledIsRedundantSuspended", func(c *fixture) int64 {
			old := driveTo(c, "x", repository.Suspended)
			if _, err := c.repo.Cancel(c.ctx, c.pool, c.topic, "test", old.Sequence); err != nil {
				c.t.Fatalf("cancel: %v", err)
			}
			return old.Sequence
		}, repository.Redundant, repository.Suspended},
		{"ExpiredCancelledIsRedundantExpired", func(c *fixture) int64 {
			old := driveTo(c, "x", repository.Expired)
			if _, err := c.repo.Cancel(c.ctx, c.pool, c.topic, "test", old.Sequence); err != nil {
				c.t.Fatalf("cancel: %v", err)
			}
			return old.Sequence
		}, repository.Redundant, repository.Expired},
		{"ExpiredLeavesDescentUntouched", func(c *fixture) int64 {
			return driveTo(c, "x", repository.Expired).Sequence
		}, repository.Expired, repository.Ready},
		{"JunctionReleaseLeavesDescentUntouched", func(c *fixture) int64 {
			// SUSPENDED/READY: a descent set by the usual rule would become SUSPENDED.
			old := driveTo(c, "x", repository.Suspended)
			if _, err := c.repo.Junction(c.ctx, c.pool, c.topic, repository.Singular, []string{"x"}); err != nil {
				c.t.Fatalf("junction: %v", err)
			}
			return old.Sequence
		}, repository.Ready, repository.Ready},
		{"FailedAfterRetryKeepsDescentReady", func(c *fixture) int64 {
			configure(c, repository.TopicSettings{MaxAttempts: 2, BackoffCap: time.Hour})
			task := c.push(repository.Append, "x")[0]
			c.complete(fail, pollOne(c, c.repo, task.Sequence))
			c.complete(fail, pollOne(c, c.repo, task.Sequence))
			return task.Sequence
		}, repository.Failed, repository.Ready},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := onTopic(t, f, "transition-"+tc.name)
			wantState(t, c.get(tc.do(c)), tc.state, tc.descent)
		})
	}
}

func TestUnknownTopic(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   func(f *fixture, tx pgx.Tx) error
	}{
		{"Push", func(f *fixture, tx pgx.Tx) error {
			_, err := f.repo.Push(f.ctx, tx, "nope", repository.Replace, repository.Creation{Identifier: "a"}, repository.Creation{Identifier: "b"})
			return err
		}},
		{"Poll", func(f *fixture, tx pgx.Tx) error {
			_, err := f.repo.Poll(f.ctx, tx, "nope", repository.FIFO, repository.SingularByIdentifier, 10)
			return err
		}},
		{"Page", func(f *fixture, tx pgx.Tx) error {
			_, err := f.repo.Page(f.ctx, tx, "nope", repository.TaskFilter{}, 0, 10, repository.Forward)
			return err
		}},
		{"Count", func(f *fixture, tx pgx.Tx) error {
			_, err := f.repo.Count(f.ctx, tx, "nope", repository.TaskFilter{}, 0, repository.MaxSequence, repository.Total)
			return err
		}},
		// said nothing: an unknown topic read as tasks that are not there
		{"GetMany", func(f *fixture, tx pgx.Tx) error {
			_, err := f.repo.GetMany(f.ctx, tx, "nope", 1, 2)
			return err
		}},
		// these found nothing to change and said nothing: a typo looked like "nothing to do"
		{"Junction", func(f *fixture, tx pgx.Tx) error {
			_, err := f.repo.Junction(f.ctx, tx, "nope", repository.Singular, []string{"a"})
			return err
		}},
		{"Purge", func(f *fixture, tx pgx.Tx) error {
			_, err := f.repo.Purge(f.ctx, tx, "nope", 0, repository.MaxSequence, nil)
			return err
		}},
		{"ReassignAll", func(f *fixture, tx pgx.Tx) error {
			_, err := f.repo.ReassignAll(f.ctx, tx, "nope", repository.Failed, repository.Success, 0, repository.MaxSequence)
			return err
		}},
		{"RecreateStateReset", func(f *fixture, tx pgx.Tx) error {
			_, err := f.repo.RecreateState(f.ctx, tx, "nope", repository.Failed, repository.Reset, 0, repository.MaxSequence, 10)
			return err
		}},
		{"RecreateStateAppend", func(f *fixture, tx pgx.Tx) error {
			_, err := f.repo.RecreateState(f.ctx, tx, "nope", repository.Failed, repository.RecreateAppend, 0, repository.MaxSequence, 10)
			return err
		}},
	} {
		t.Run(tc.name+"ReturnsErrUnknownTopicAndLeavesTransactionUsable", func(t *testing.T) {
			f := setup(t)
			tx, err := f.pool.Begin(f.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(f.ctx)
			if err := tc.op(f, tx); !errors.Is(err, repository.ErrUnknownTopic) {
				t.Fatalf("err = %v, want ErrUnknownTopic", err)
			}
			// The transaction is still usable, and nothing was written: not even a sequence.
			pushed, err := f.repo.Push(f.ctx, tx, f.topic, repository.Append, repository.Creation{Identifier: "a"})
			if err != nil {
				t.Fatalf("push after the error in the same transaction: %v", err)
			}
			if pushed[0].Sequence != 1 {
				t.Errorf("sequence after the error = %d, want 1 (none consumed)", pushed[0].Sequence)
			}
			if err := tx.Commit(f.ctx); err != nil {
				t.Fatalf("commit: %v", err)
			}
			topics, err := f.repo.Topics(f.ctx, f.pool)
			if err != nil || len(topics) != 1 || topics[0].Name != f.topic {
				t.Errorf("topics = %v, %v; want only %q", topics, err, f.topic)
			}
		})
	}
}

func TestCompleteRefused(t *testing.T) {
	// Each case leaves a task "bad" whose given completion must be refused; it is
	// completed in one batch with a valid lease, and nothing of the batch may change.
	for _, tc := range []struct {
		name     string
		sentinel error
		bad      func(f *fixture) repository.Completion
	}{
		{"ReadyTaskIsWrongState", repository.ErrWrongState, func(f *fixture) repository.Completion {
			return f.push(repository.Append, "bad")[0].Decide(repository.Succeed(""))
		}},
		{"TaskOfAnotherOwnerIsNotOwned", repository.ErrNotOwned, func(f *fixture) repository.Completion {
			task := f.push(repository.Append, "bad")[0]
			return pollOne(f, f.newRepo("owner-2"), task.Sequence).Decide(repository.Succeed(""))
		}},
		{"EarlierAttemptAfterExpiryIsNotOwned", repository.ErrNotOwned, func(f *fixture) repository.Completion {
			configure(f, repository.TopicSettings{MaxAttempts: 2})
			task := f.push(repository.Append, "bad")[0]
			old := pollOne(f, f.repo, task.Sequence)
			// Another owner, an hour ahead, finds owner-1 stale: the lease goes back to READY.
			if _, err := clockedRepo(f, "owner-2", time.Hour).Expire(f.ctx, f.pool, time.Minute); err != nil {
				f.t.Fatalf("expire: %v", err)
			}
			pollOne(f, f.repo, task.Sequence)
			return old.Decide(repository.Succeed(""))
		}},
		{"EarlierAttemptAfterExpiryAndResetIsNotOwned", repository.ErrNotOwned, func(f *fixture) repository.Completion {
			task := f.push(repository.Append, "bad")[0]
			old := pollOne(f, f.repo, task.Sequence)
			if _, err := clockedRepo(f, "owner-2", time.Hour).Expire(f.ctx, f.pool, time.Minute); err != nil {
				f.t.Fatalf("expire: %v", err)
			}
			if _, err := f.repo.Recreate(f.ctx, f.pool, f.topic, repository.Reset, task.Sequence); err != nil {
				f.t.Fatalf("reset: %v", err)
			}
			pollOne(f, f.repo, task.Sequence)
			return old.Decide(repository.Succeed(""))
		}},
		{"EarlierAttemptAfterSnoozeIsNotOwned", repository.ErrNotOwned, func(f *fixture) repository.Completion {
			task := f.push(repository.Append, "bad")[0]
			old := pollOne(f, f.repo, task.Sequence)
			f.complete(repository.SnoozeFor(0), old)
			pollOne(f, f.repo, task.Sequence)
			return old.Decide(repository.Succeed(""))
		}},
		{"CompletedTaskIsWrongState", repository.ErrWrongState, func(f *fixture) repository.Completion {
			task := f.push(repository.Append, "bad")[0]
			lease := pollOne(f, f.repo, task.Sequence)
			f.complete(repository.Succeed("first"), lease)
			return lease.Decide(repository.Fail(errors.New("second")))
		}},
		{"UnknownTaskIsUnknown", repository.ErrUnknownTask, func(f *fixture) repository.Completion {
			return repository.Completion{Sequence: 999, Attempt: 1, Decision: repository.Succeed("")}
		}},
	} {
		// The refusal undoes the statement on its own outside a transaction, and through a
		// savepoint inside the caller's transaction, which must stay usable.
		for _, via := range []string{"Pool", "Transaction", "ConnInTransactionBlock"} {
			t.Run(tc.name+"Via"+via, func(t *testing.T) {
				f := setup(t)
				bad := tc.bad(f)
				// priority -1: leased before a READY bad task
				good := pushOne(f, repository.Creation{Identifier: "good", Priority: -1})
				lease := pollOne(f, f.repo, good.Sequence)
				var before repository.Task
				if bad.Sequence != 999 {
					before = f.get(bad.Sequence)
				}
				var h repository.Handle = f.pool
				finish := func() {}
				switch via {
				case "Transaction":
					tx, err := f.pool.Begin(f.ctx)
					if err != nil {
						t.Fatal(err)
					}
					defer tx.Rollback(f.ctx)
					h, finish = tx, func() {
						if err := tx.Commit(f.ctx); err != nil {
							t.Fatalf("commit after the refusal: %v", err)
						}
					}
				case "ConnInTransactionBlock":
					conn, err := f.pool.Acquire(f.ctx)
					if err != nil {
						t.Fatal(err)
					}
					defer conn.Release()
					if _, err := conn.Exec(f.ctx, "BEGIN"); err != nil {
						t.Fatal(err)
					}
					h, finish = conn, func() {
						if _, err := conn.Exec(f.ctx, "COMMIT"); err != nil {
							t.Fatalf("commit after the refusal: %v", err)
						}
					}
				}
				_, err := f.repo.Complete(f.ctx, h, f.topic, lease.Decide(repository.Succeed("ok")), bad)
				wantTaskError(t, err, tc.sentinel, bad.Sequence)
				// the problem names the state the task is in
				var te *repository.TaskError
				if errors.As(err, &te) && bad.Sequence != 999 && te.Problems[0].State != before.State {
					t.Errorf("the problem's State is %v, want the task's %v", te.Problems[0].State, before.State)
				}
				// The caller's transaction goes on: a push in it commits.
				after, err := f.repo.Push(f.ctx, h, f.topic, repository.Append, repository.Creation{Identifier: "after"})
				if err != nil {
					t.Fatalf("push after the refusal on the same handle: %v", err)
				}
				finish()
				if got := f.get(after[0].Sequence); got.State != repository.Ready {
					t.Errorf("task pushed after the refusal = %v, want READY and committed", got.State)
				}
				// The valid lease of the refused batch is still ACTIVE, untouched.
				wantUnchanged(f, lease)
				if bad.Sequence != 999 {
					wantUnchanged(f, before)
				}
			})
		}
	}
}

// orphanedLease pushes a task of identifier id and leases it under an owner that never
// registered: an ACTIVE task whose owner row is missing.
func orphanedLease(f *fixture, id string) repository.Task {
	f.t.Helper()
	task := f.push(repository.Append, id)[0]
	unregistered, err := repository.New(repository.Config{Owner: "never-registered"})
	if err != nil {
		f.t.Fatal(err)
	}
	return pollOne(f, unregistered, task.Sequence)
}

func TestExpire(t *testing.T) {
	t.Run("OnlyOtherOwnersStaleTasksExpire", func(t *testing.T) {
		f := setup(t)
		own := f.push(repository.Append, "own")[0]
		pollOne(f, f.repo, own.Sequence)
		stale := f.push(repository.Append, "stale")[0]
		pollOne(f, f.newRepo("owner-2"), stale.Sequence) // heartbeat now: stale 10 minutes on
		fresh := f.push(repository.Append, "fresh")[0]
		pollOne(f, clockedRepo(f, "owner-3", 10*time.Minute), fresh.Sequence) // heartbeat 10 minutes on
		// owner-1 with its clock 10 minutes ahead, and a 5 minute timeout.
		expirer, err := repository.New(repository.Config{Owner: "owner-1", Now: func() time.Time { return time.Now().Add(10 * time.Minute) }})
		if err != nil {
			t.Fatal(err)
		}
		got, err := expirer.Expire(f.ctx, f.pool, 5*time.Minute)
		if err != nil {
			t.Fatalf("expire: %v", err)
		}
		if want := []repository.Expiry{{Topic: f.topic, Expired: 1}}; !slices.Equal(got, want) {
			t.Errorf("expire = %+v, want %+v", got, want)
		}
		wantState(t, f.get(stale.Sequence), repository.Expired, repository.Ready)
		wantState(t, f.get(own.Sequence), repository.Active, repository.Ready)
		wantState(t, f.get(fresh.Sequence), repository.Active, repository.Ready)
	})
	t.Run("TaskWhoseOwnerRowIsMissingExpires", func(t *testing.T) {
		f := setup(t)
		task := orphanedLease(f, "a")
		got, err := f.repo.Expire(f.ctx, f.pool, time.Hour)
		if err != nil {
			t.Fatalf("expire: %v", err)
		}
		if len(got) != 1 || got[0].Expired != 1 {
			t.Errorf("expire = %+v, want one task expired", got)
		}
		if task := f.get(task.Sequence); task.State != repository.Expired || task.Output == "" {
			t.Errorf("task is %v with output %q, want EXPIRED with an output saying why", task.State, task.Output)
		}
	})
	// On Citus each topic's leases are taken back by a statement of its own, committed
	// on its own: when a later topic's fails, the expiries already committed come back
	// with the error (the processor logs them and wakes their managers). On plain
	// PostgreSQL the expiry is one statement, and the failure injected here never comes.
	t.Run("ExpiriesCommittedBeforeAFailureAreReported", func(t *testing.T) {
		f := setup(t)
		other := f.topic + "-b"
		if _, err := f.repo.CreateTopic(f.ctx, f.pool, other); err != nil {
			t.Fatal(err)
		}
		dead, err := repository.New(repository.Config{Owner: "never-registered"})
		if err != nil {
			t.Fatal(err)
		}
		for _, topic := range []string{f.topic, other} {
			if _, err := f.repo.Push(f.ctx, f.pool, topic, repository.Append, repository.Creation{Identifier: "a"}); err != nil {
				t.Fatal(err)
			}
			if got, err := dead.Poll(f.ctx, f.pool, topic, repository.FIFO, repository.None, 1); err != nil || len(got) != 1 {
				t.Fatalf("poll of %s: %v %v", topic, got, err)
			}
		}
		failing := &failNth{Pool: f.pool, match: "task_citus_expire", n: 2}
		got, err := f.repo.Expire(f.ctx, failing, time.Hour)
		first := min(f.topic, other) // the topics go in order
		if pgtest.OnCitus() {
			if !errors.Is(err, errInjected) || len(got) != 1 || got[0].Topic != first || got[0].Expired != 1 {
				t.Errorf("expire failing at the second topic = %+v, %v; want the first topic's expiry and the failure", got, err)
			}
		} else if err != nil || len(got) != 2 {
			t.Errorf("expire = %+v, %v; want both topics' expiries", got, err)
		}
	})
	t.Run("StaleOnlyLeavesTasksOfMissingOwnersToExpire", func(t *testing.T) {
		f := setup(t)
		task := orphanedLease(f, "a")
		got, err := f.repo.ExpireStale(f.ctx, f.pool, time.Hour)
		if err != nil {
			t.Fatalf("expire stale: %v", err)
		}
		if len(got) != 0 {
			t.Fatalf("expire stale = %+v, want nothing: no registered owner is stale", got)
		}
		wantState(t, f.get(task.Sequence), repository.Active, repository.Ready)
		if got, err := f.repo.Expire(f.ctx, f.pool, time.Hour); err != nil || len(got) != 1 || got[0].Expired != 1 {
			t.Fatalf("expire = %+v, %v; want one task expired", got, err)
		}
	})
	t.Run("StaleOnlyExpiresStaleOwnersTasksAndMissingOnesWithThem", func(t *testing.T) {
		f := setup(t)
		stale := f.push(repository.Append, "stale")[0]
		pollOne(f, f.newRepo("owner-2"), stale.Sequence) // heartbeat now: stale 10 minutes on
		own := f.push(repository.Append, "own")[0]
		expirer := clockedRepo(f, "owner-1", 10*time.Minute)
		pollOne(f, expirer, own.Sequence)
		orphan := orphanedLease(f, "orphan")
		got, err := expirer.ExpireStale(f.ctx, f.pool, 5*time.Minute)
		if err != nil {
			t.Fatalf("expire stale: %v", err)
		}
		// once a stale owner makes it read the ACTIVE tasks, missing owners' go too
		if want := []repository.Expiry{{Topic: f.topic, Expired: 2}}; !slices.Equal(got, want) {
			t.Errorf("expire stale = %+v, want %+v", got, want)
		}
		wantState(t, f.get(stale.Sequence), repository.Expired, repository.Ready)
		wantState(t, f.get(orphan.Sequence), repository.Expired, repository.Ready)
		wantState(t, f.get(own.Sequence), repository.Active, repository.Ready)
	})
	t.Run("NegativeTimeoutIsInvalid", func(t *testing.T) {
		f := setup(t)
		if _, err := f.repo.Expire(f.ctx, f.pool, -time.Second); !errors.Is(err, repository.ErrInvalid) {
			t.Fatalf("err = %v, want ErrInvalid", err)
		}
		if _, err := f.repo.ExpireStale(f.ctx, f.pool, -time.Second); !errors.Is(err, repository.ErrInvalid) {
			t.Fatalf("stale: err = %v, want ErrInvalid", err)
		}
	})
}

// suspended pushes suspended tasks of the identifiers to f's topic.
func suspended(f *fixture, identifiers ...string) []repository.Task {
	f.t.Helper()
	creations := make([]repository.Creation, len(identifiers))
	for i, id := range identifiers {
		creations[i] = repository.Creation{Identifier: id, Suspended: true}
	}
	tasks, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, creations...)
	if err != nil {
		f.t.Fatalf("push suspended: %v", err)
	}
	return tasks
}

func TestJunction(t *testing.T) {
	shared := setup(t)
	junction := func(f *fixture, kind repository.Junction, groups ...[]string) []string {
		f.t.Helper()
		released, err := f.repo.Junction(f.ctx, f.pool, f.topic, kind, groups...)
		if err != nil {
			f.t.Fatalf("junction: %v", err)
		}
		return released
	}
	t.Run("SingularReleasesGroupWhenEveryIdentifierIsSuspended", func(t *testing.T) {
		f := isolated(t, shared)
		tasks := suspended(f, "a", "b", "c")
		if got := junction(f, repository.Singular, []string{"a", "b"}); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("released %v, want [a b]", got)
		}
		// released READY/READY: a junction leaves descent as the push made it (READY)
		wantState(t, f.get(tasks[0].Sequence), repository.Ready, repository.Ready)
		wantState(t, f.get(tasks[2].Sequence), repository.Suspended, repository.Ready)
	})
	// a task a SUSPENSION decision suspended carries its completion; released, it is
	// READY and no longer completed (it kept the time, shown on a READY task)
	t.Run("AReleasedTaskIsNoLongerCompleted", func(t *testing.T) {
		f := isolated(t, shared)
		task := driveTo(f, "s", repository.Suspended)
		if task.Completed.IsZero() {
			t.Fatalf("a task suspended by its decision has no completion time: %+v", task)
		}
		if got := junction(f, repository.Singular, []string{"s"}); !slices.Equal(got, []string{"s"}) {
			t.Fatalf("released %v, want [s]", got)
		}
		if got := f.get(task.Sequence); got.State != repository.Ready || !got.Completed.IsZero() {
			t.Errorf("released task %v completed at %v, want READY and not completed", got.State, got.Completed)
		}
	})
	t.Run("SingularHoldsGroupWithAnIdentifierNotSuspended", func(t *testing.T) {
		f := isolated(t, shared)
		a := suspended(f, "a")[0]
		driveTo(f, "b", repository.Succeeded)
		if got := junction(f, repository.Singular, []string{"a", "b"}); len(got) != 0 {
			t.Fatalf("released %v, want nothing", got)
		}
		wantState(t, f.get(a.Sequence), repository.Suspended, repository.Ready)
	})
	t.Run("SingularIgnoresSameIdentifierInAnotherTopic", func(t *testing.T) {
		f := isolated(t, shared)
		suspended(f, "a")
		suspended(onTopic(t, f, t.Name()+"/other"), "b")
		if got := junction(f, repository.Singular, []string{"a", "b"}); len(got) != 0 {
			t.Fatalf("released %v, want nothing: b is suspended only in another topic", got)
		}
	})
	t.Run("SingularCountsDistinctIdentifiers", func(t *testing.T) {
		f := isolated(t, shared)
		suspended(f, "a", "a") // two tasks of a do not stand in for b
		if got := junction(f, repository.Singular, []string{"a", "b"}); len(got) != 0 {
			t.Fatalf("released %v, want nothing: b has no task", got)
		}
		// a group listing a twice is complete with a alone
		if got := junction(f, repository.Singular, []string{"a", "a"}); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("released %v, want [a]", got)
		}
		if page := allTasks(f); page[0].State != repository.Ready || page[1].State != repository.Ready {
			t.Errorf("tasks of a are %v and %v, want both READY", page[0].State, page[1].State)
		}
	})
	t.Run("EternalCountsAnyStateButRedundant", func(t *testing.T) {
		f := isolated(t, shared)
		a := suspended(f, "a")[0]
		driveTo(f, "b", repository.Succeeded)
		driveTo(f, "c", repository.Redundant)
		if got := junction(f, repository.Eternal, []string{"a", "c"}); len(got) != 0 {
			t.Fatalf("released %v, want nothing: c is only REDUNDANT", got)
		}
		if got := junction(f, repository.Eternal, []string{"a", "b"}); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("released %v, want [a]", got)
		}
		wantState(t, f.get(a.Sequence), repository.Ready, repository.Ready)
	})
	t.Run("EternalIgnoresSameIdentifierInAnotherTopic", func(t *testing.T) {
		f := isolated(t, shared)
		suspended(f, "a")
		driveTo(onTopic(t, f, t.Name()+"/other"), "b", repository.Succeeded)
		if got := junction(f, repository.Eternal, []string{"a", "b"}); len(got) != 0 {
			t.Fatalf("released %v, want nothing: b exists only in another topic", got)
		}
	})
	t.Run("EternalCountsDistinctIdentifiers", func(t *testing.T) {
		f := isolated(t, shared)
		suspended(f, "a")
		driveTo(f, "a", repository.Succeeded)
		if got := junction(f, repository.Eternal, []string{"a", "b"}); len(got) != 0 {
			t.Fatalf("released %v, want nothing: b has no task", got)
		}
		if got := junction(f, repository.Eternal, []string{"a", "a"}); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("released %v, want [a]", got)
		}
	})
	t.Run("EmptyGroupsAreIgnored", func(t *testing.T) {
		f := isolated(t, shared)
		suspended(f, "a")
		if got := junction(f, repository.Singular, []string{}, nil); len(got) != 0 {
			t.Fatalf("released %v from empty groups, want nothing", got)
		}
		if got := junction(f, repository.Singular, []string{}, []string{"a"}, nil); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("released %v, want [a]", got)
		}
	})
}

// pageAll lists every task of f's topic in sequence order.
func allTasks(f *fixture) []repository.Task {
	f.t.Helper()
	tasks, err := f.repo.Page(f.ctx, f.pool, f.topic, repository.TaskFilter{}, 0, 1000, repository.Forward)
	if err != nil {
		f.t.Fatalf("page: %v", err)
	}
	return tasks
}

func TestPurgeOwners(t *testing.T) {
	t.Run("DeletesDeadOwnersWhileOwnerlessTasksExist", func(t *testing.T) {
		f := setup(t)
		f.push(repository.Append, "never-polled") // READY, no owner
		dead := clockedRepo(f, "dead", -2*time.Hour)
		n, err := f.repo.PurgeOwners(f.ctx, f.pool, time.Hour)
		if err != nil || n != 1 {
			t.Fatalf("purge owners = %d, %v; want 1", n, err)
		}
		if err := dead.Heartbeat(f.ctx, f.pool); !errors.Is(err, repository.ErrNotRegistered) {
			t.Errorf("heartbeat of the purged owner: %v, want ErrNotRegistered", err)
		}
		if err := f.repo.Heartbeat(f.ctx, f.pool); err != nil {
			t.Errorf("live owner-1 was purged: %v", err)
		}
	})
	t.Run("NeverPurgesItself", func(t *testing.T) {
		// With timeout 0 every owner, this one included, has a heartbeat at or before
		// now − timeout; only the others go.
		f := setup(t)
		other := clockedRepo(f, "other", 0)
		n, err := f.repo.PurgeOwners(f.ctx, f.pool, 0)
		if err != nil || n != 1 {
			t.Fatalf("purge owners with timeout 0 = %d, %v; want 1 (the other owner)", n, err)
		}
		if err := f.repo.Heartbeat(f.ctx, f.pool); err != nil {
			t.Errorf("the purging owner's heartbeat after the purge: %v, want its row kept", err)
		}
		if err := other.Heartbeat(f.ctx, f.pool); !errors.Is(err, repository.ErrNotRegistered) {
			t.Errorf("the other owner's heartbeat: %v, want ErrNotRegistered", err)
		}
		// a stale heartbeat of its own does not make it purge itself either
		if _, err := f.pool.Exec(f.ctx, "UPDATE task_owner SET heartbeat = now() - interval '2 hours' WHERE owner = 'owner-1'"); err != nil {
			t.Fatal(err)
		}
		if n, err := f.repo.PurgeOwners(f.ctx, f.pool, time.Hour); err != nil || n != 0 {
			t.Fatalf("an owner with a stale heartbeat purging = %d, %v; want 0", n, err)
		}
		if err := f.repo.Heartbeat(f.ctx, f.pool); err != nil {
			t.Errorf("an owner with a stale heartbeat purged itself: %v", err)
		}
	})
	t.Run("KeepsDeadOwnerWithActiveTask", func(t *testing.T) {
		f := setup(t)
		task := f.push(repository.Append, "a")[0]
		busy := clockedRepo(f, "busy", -2*time.Hour)
		pollOne(f, busy, task.Sequence)
		n, err := f.repo.PurgeOwners(f.ctx, f.pool, time.Hour)
		if err != nil || n != 0 {
			t.Fatalf("purge owners = %d, %v; want 0", n, err)
		}
		if err := busy.Heartbeat(f.ctx, f.pool); err != nil {
			t.Errorf("owner with an ACTIVE task was purged: %v", err)
		}
	})
}

func TestDeregister(t *testing.T) {
	f := setup(t)
	task := f.push(repository.Append, "a")[0]
	owner := clockedRepo(f, "leaving", 0)
	lease := pollOne(f, owner, task.Sequence)
	if gone, err := owner.DeregisterOwner(f.ctx, f.pool); err != nil || gone {
		t.Fatalf("deregister with an ACTIVE task = %v, %v; want the row kept", gone, err)
	}
	if err := owner.Heartbeat(f.ctx, f.pool); err != nil {
		t.Fatalf("heartbeat after a refused deregister: %v", err)
	}
	if _, err := owner.Complete(f.ctx, f.pool, f.topic, lease.Decide(repository.Succeed(""))); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if gone, err := owner.DeregisterOwner(f.ctx, f.pool); err != nil || !gone {
		t.Fatalf("deregister with no task leased = %v, %v; want the row deleted", gone, err)
	}
	if err := owner.Heartbeat(f.ctx, f.pool); !errors.Is(err, repository.ErrNotRegistered) {
		t.Fatalf("heartbeat after deregister: %v, want ErrNotRegistered", err)
	}
	if gone, err := owner.DeregisterOwner(f.ctx, f.pool); err != nil || gone {
		t.Fatalf("second deregister = %v, %v; want nothing to delete", gone, err)
	}
	if err := f.repo.Heartbeat(f.ctx, f.pool); err != nil {
		t.Fatalf("another owner's row went too: %v", err)
	}
}

func TestRetry(t *testing.T) {
	shared := setup(t)
	failWith := func(f *fixture, task repository.Task, msg string) (repository.Task, time.Time, time.Time) {
		f.t.Helper()
		lease := pollOne(f, f.repo, task.Sequence)
		before := dbNow(f)
		done := f.complete(repository.Fail(errors.New(msg)), lease)
		return done[0], before, dbNow(f)
	}
	t.Run("FailureWithAttemptsLeftBacksOffUntilLastAttemptFails", func(t *testing.T) {
		f := isolated(t, shared)
		base, jitter := time.Second, 250*time.Millisecond
		configure(f, repository.TopicSettings{MaxAttempts: 3, BackoffBase: base, BackoffCap: time.Hour, BackoffJitter: jitter})
		task := f.push(repository.Append, "a")[0]
		for attempt, msg := range []string{"e1", "e2"} {
			got, before, after := failWith(f, task, msg)
			delay := base << attempt // base·2^(attempt−1), attempts counted from 1
			if got.State != repository.Ready || got.Output != msg || !got.Completed.IsZero() {
				t.Errorf("attempt %d: task %v output %q completed %v, want READY with output %q and no completion",
					attempt+1, got.State, got.Output, got.Completed, msg)
			}
			wantWindow(t, "not-before", got.NotBefore, before.Add(delay), after.Add(delay+jitter))
			if polled := f.poll(repository.FIFO, repository.None, 1); len(polled) != 0 {
				t.Errorf("polled %v during the backoff", sequences(polled))
			}
			makeDue(f, task.Sequence)
		}
		got, _, _ := failWith(f, task, "e3")
		if got.State != repository.Failed || got.Output != "e3" || got.Completed.IsZero() || got.Attempt != 3 {
			t.Errorf("last attempt: %v output %q attempt %d, want FAILED e3 after attempt 3", got.State, got.Output, got.Attempt)
		}
		if !slices.Equal(got.Errors, []string{"e1", "e2", "e3"}) {
			t.Errorf("errors = %q, want every attempt's error", got.Errors)
		}
	})
	t.Run("AFinalFailureIsFailedWithAttemptsLeft", func(t *testing.T) {
		f := isolated(t, shared)
		configure(f, repository.TopicSettings{MaxAttempts: 5, BackoffBase: time.Second, BackoffCap: time.Hour})
		task := f.push(repository.Append, "a")[0]
		failWith(f, task, "e1") // retried
		makeDue(f, task.Sequence)
		lease := pollOne(f, f.repo, task.Sequence)
		got := f.complete(repository.FailFinal(errors.New("bad input")), lease)[0]
		if got.State != repository.Failed || got.Output != "bad input" || got.Completed.IsZero() || got.Attempt != 2 {
			t.Errorf("final failure at attempt 2 of 5: %v output %q completed %v attempt %d, want FAILED \"bad input\" at attempt 2",
				got.State, got.Output, got.Completed, got.Attempt)
		}
		if !slices.Equal(got.Errors, []string{"e1", "bad input"}) {
			t.Errorf("errors = %q, want e1 and bad input", got.Errors)
		}
		if stored := f.get(task.Sequence); stored.State != repository.Failed {
			t.Errorf("stored state %v, want FAILED", stored.State)
		}
		// Final is for a FAILURE only, and nothing is written when it is misused
		other := f.push(repository.Append, "b")[0]
		lease = pollOne(f, f.repo, other.Sequence)
		for _, d := range []repository.Decision{{Result: repository.Success, Final: true}, {Snooze: true, Final: true}} {
			if _, err := f.repo.Complete(f.ctx, f.pool, f.topic, lease.Decide(d)); !errors.Is(err, repository.ErrInvalid) ||
				!strings.Contains(err.Error(), "final") {
				t.Errorf("Complete with %+v: %v, want ErrInvalid naming final", d, err)
			}
		}
		if stored := f.get(other.Sequence); stored.State != repository.Active {
			t.Errorf("after the refused decisions, state %v, want ACTIVE", stored.State)
		}
	})
	t.Run("BackoffIsCapped", func(t *testing.T) {
		f := isolated(t, shared)
		configure(f, repository.TopicSettings{MaxAttempts: 3, BackoffBase: time.Second, BackoffCap: 1500 * time.Millisecond})
		task := f.push(repository.Append, "a")[0]
		failWith(f, task, "e1")
		makeDue(f, task.Sequence)
		got, before, after := failWith(f, task, "e2") // 2s uncapped
		wantWindow(t, "not-before", got.NotBefore, before.Add(1500*time.Millisecond), after.Add(1500*time.Millisecond))
	})
	t.Run("ExpiryWithAttemptsLeftIsReady", func(t *testing.T) {
		f := isolated(t, shared)
		configure(f, repository.TopicSettings{MaxAttempts: 2, BackoffBase: time.Second, BackoffCap: time.Hour})
		task := f.push(repository.Append, "a")[0]
		pollOne(f, ghost(f), task.Sequence)
		before := dbNow(f)
		got, err := f.repo.Expire(f.ctx, f.pool, time.Hour)
		after := dbNow(f)
		if err != nil {
			t.Fatalf("expire: %v", err)
		}
		if want := []repository.Expiry{{Topic: f.topic, Expired: 1, Retried: 1}}; !slices.Equal(got, want) {
			t.Errorf("expire = %+v, want %+v", got, want)
		}
		stored := f.get(task.Sequence)
		wantState(t, stored, repository.Ready, repository.Ready)
		wantWindow(t, "not-before", stored.NotBefore, before.Add(time.Second), after.Add(time.Second))
		if len(stored.Errors) != 1 {
			t.Errorf("errors = %q, want the expiry recorded", stored.Errors)
		}
		// The second expiry is the last attempt: EXPIRED.
		makeDue(f, task.Sequence)
		pollOne(f, ghost(f), task.Sequence)
		if _, err := f.repo.Expire(f.ctx, f.pool, time.Hour); err != nil {
			t.Fatalf("expire: %v", err)
		}
		if stored := f.get(task.Sequence); stored.State != repository.Expired || len(stored.Errors) != 2 {
			t.Errorf("after the last attempt: %v with errors %q, want EXPIRED with two errors", stored.State, stored.Errors)
		}
	})
	t.Run("SnoozeIsReadyAfterDelayWithAttemptHandedBack", func(t *testing.T) {
		f := isolated(t, shared)
		task := f.push(repository.Append, "a")[0]
		lease := pollOne(f, f.repo, task.Sequence)
		before := dbNow(f)
		got := f.complete(repository.SnoozeFor(10*time.Minute), lease)[0]
		after := dbNow(f)
		// The lease still counts in Attempt (it fences completions) but is returned: no
		// attempt of the retry budget is used.
		if got.State != repository.Ready || got.Attempt != 1 || got.Returned != 1 || len(got.Errors) != 0 {
			t.Errorf("snoozed: %v, attempt %d, returned %d, errors %q; want READY, attempt 1 returned, no error",
				got.State, got.Attempt, got.Returned, got.Errors)
		}
		wantWindow(t, "not-before", got.NotBefore, before.Add(10*time.Minute), after.Add(10*time.Minute))
	})
	t.Run("SnoozeDoesNotUseFailureBudget", func(t *testing.T) {
		f := isolated(t, shared)
		configure(f, repository.TopicSettings{MaxAttempts: 2, BackoffCap: time.Hour})
		task := f.push(repository.Append, "a")[0]
		for range 3 {
			f.complete(repository.SnoozeFor(0), pollOne(f, f.repo, task.Sequence))
		}
		if got, _, _ := failWith(f, task, "e1"); got.State != repository.Ready {
			t.Fatalf("first failure after snoozes: %v, want READY (one attempt left)", got.State)
		}
		makeDue(f, task.Sequence)
		if got, _, _ := failWith(f, task, "e2"); got.State != repository.Failed {
			t.Fatalf("second failure: %v, want FAILED", got.State)
		}
	})
	t.Run("ResetGivesFreshBudget", func(t *testing.T) {
		f := isolated(t, shared)
		configure(f, repository.TopicSettings{MaxAttempts: 2, BackoffCap: time.Hour})
		task := f.push(repository.Append, "a")[0]
		failWith(f, task, "e1")
		makeDue(f, task.Sequence)
		failWith(f, task, "e2")
		if _, err := f.repo.Recreate(f.ctx, f.pool, f.topic, repository.Reset, task.Sequence); err != nil {
			t.Fatalf("reset: %v", err)
		}
		if got, _, _ := failWith(f, task, "e3"); got.State != repository.Ready {
			t.Fatalf("first failure after reset: %v, want READY (a fresh budget of 2)", got.State)
		}
	})
}

func TestCancel(t *testing.T) {
	shared := setup(t)
	t.Run("ReadySuspendedExpiredBecomeRedundantNamingWho", func(t *testing.T) {
		f := isolated(t, shared)
		ready := driveTo(f, "r", repository.Ready)
		susp := driveTo(f, "s", repository.Suspended)
		exp := driveTo(f, "e", repository.Expired)
		got, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "alice", ready.Sequence, susp.Sequence, exp.Sequence)
		if err != nil || len(got) != 3 {
			t.Fatalf("cancel = %v, %v", got, err)
		}
		for _, old := range []repository.Task{ready, susp, exp} {
			task := f.get(old.Sequence)
			wantState(t, task, repository.Redundant, max(old.State, old.Descent))
			if task.Output != "cancelled by alice" {
				t.Errorf("task %d output %q, want it to name alice", task.Sequence, task.Output)
			}
		}
	})
	t.Run("ActiveIsFlaggedAndEndsFailedCancelledWithoutRetry", func(t *testing.T) {
		f := isolated(t, shared)
		configure(f, repository.TopicSettings{MaxAttempts: 3, BackoffCap: time.Hour})
		lease := driveTo(f, "a", repository.Active)
		got, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "alice", lease.Sequence)
		if err != nil || len(got) != 1 || got[0].State != repository.Active || !got[0].Cancelled {
			t.Fatalf("cancel = %+v, %v; want the task still ACTIVE, flagged", got, err)
		}
		done := f.complete(repository.Succeed("finished anyway"), lease)[0]
		if done.State != repository.Failed || done.Output != "cancelled" || done.Completed.IsZero() {
			t.Errorf("completed cancelled task: %v %q, want FAILED \"cancelled\" with no retry", done.State, done.Output)
		}
	})
	t.Run("ActiveWhoseOwnerDiesEndsFailedCancelledOnExpiry", func(t *testing.T) {
		f := setup(t) // its own database: an Expire of a sibling would take the lease back first
		configure(f, repository.TopicSettings{MaxAttempts: 3, BackoffCap: time.Hour})
		task := f.push(repository.Append, "a")[0]
		pollOne(f, ghost(f), task.Sequence)
		if _, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "alice", task.Sequence); err != nil {
			t.Fatalf("cancel: %v", err)
		}
		if _, err := f.repo.Expire(f.ctx, f.pool, time.Hour); err != nil {
			t.Fatalf("expire: %v", err)
		}
		if got := f.get(task.Sequence); got.State != repository.Failed || got.Output != "cancelled" {
			t.Errorf("expired cancelled task: %v %q, want FAILED \"cancelled\" with no retry", got.State, got.Output)
		}
	})
	// A cancelled task reassigned SUSPENDED and released by a junction kept its flag:
	// polled again, whatever its run decided it ended FAILED "cancelled" (and its
	// handler was told to stop), so the revival could never succeed.
	t.Run("ACancelledTaskReassignedAndReleasedRunsAfresh", func(t *testing.T) {
		for _, all := range []bool{false, true} {
			t.Run(fmt.Sprintf("All%v", all), func(t *testing.T) {
				f := isolated(t, shared)
				configure(f, repository.TopicSettings{MaxAttempts: 3, BackoffCap: time.Hour})
				lease := driveTo(f, "a", repository.Active)
				if _, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "alice", lease.Sequence); err != nil {
					t.Fatal(err)
				}
				if done := f.complete(repository.Succeed(""), lease)[0]; done.State != repository.Failed || !done.Cancelled {
					t.Fatalf("completed: %v cancelled=%v, want FAILED cancelled", done.State, done.Cancelled)
				}
				if all {
					if n, err := f.repo.ReassignAll(f.ctx, f.pool, f.topic, repository.Failed, repository.Suspension, lease.Sequence, lease.Sequence); err != nil || n != 1 {
						t.Fatalf("reassign all = %d, %v", n, err)
					}
				} else if _, err := f.repo.Reassign(f.ctx, f.pool, f.topic, repository.Suspension, lease.Sequence); err != nil {
					t.Fatal(err)
				}
				if got := f.get(lease.Sequence); got.State != repository.Suspended || got.Cancelled {
					t.Fatalf("reassigned: %v cancelled=%v, want SUSPENDED, no longer cancelled", got.State, got.Cancelled)
				}
				// as a task reassigned before the fix still is: the release clears it too
				if _, err := f.pool.Exec(f.ctx, "UPDATE task SET cancelled = true WHERE topic = $1 AND sequence = $2", f.topic, lease.Sequence); err != nil {
					t.Fatal(err)
				}
				if _, err := f.repo.Junction(f.ctx, f.pool, f.topic, repository.Singular, []string{"a"}); err != nil {
					t.Fatal(err)
				}
				again := pollOne(f, f.repo, lease.Sequence)
				if leases, err := f.repo.CancelledLeases(f.ctx, f.pool, f.topic); err != nil || len(leases) != 0 {
					t.Fatalf("cancelled leases = %v, %v; want none", leases, err)
				}
				if done := f.complete(repository.Succeed("second run"), again)[0]; done.State != repository.Succeeded || done.Output != "second run" {
					t.Errorf("second run: %v %q, want SUCCEEDED", done.State, done.Output)
				}
			})
		}
	})
	t.Run("FinishedTaskIsRefusedAndNothingChanges", func(t *testing.T) {
		f := isolated(t, shared)
		ready := driveTo(f, "r", repository.Ready)
		done := driveTo(f, "d", repository.Succeeded)
		_, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "alice", ready.Sequence, done.Sequence)
		wantTaskError(t, err, repository.ErrWrongState, done.Sequence)
		wantUnchanged(f, ready)
		wantUnchanged(f, done)
	})
}

func TestReassign(t *testing.T) {
	shared := setup(t)
	t.Run("GivesTasksTheResultState", func(t *testing.T) {
		f := isolated(t, shared)
		failed := driveTo(f, "a", repository.Failed)
		expired := driveTo(f, "b", repository.Expired)
		got, err := f.repo.Reassign(f.ctx, f.pool, f.topic, repository.Filter, expired.Sequence, failed.Sequence)
		if err != nil || !slices.Equal(sequences(got), []int64{expired.Sequence, failed.Sequence}) {
			t.Fatalf("reassign = %v, %v", sequences(got), err)
		}
		wantState(t, f.get(failed.Sequence), repository.Filtered, repository.Failed)
		wantState(t, f.get(expired.Sequence), repository.Filtered, repository.Expired)
	})
	t.Run("RefusesTaskOutsideExpiredToSucceededAndChangesNothing", func(t *testing.T) {
		f := isolated(t, shared)
		failed := driveTo(f, "a", repository.Failed)
		ready := driveTo(f, "b", repository.Ready)
		_, err := f.repo.Reassign(f.ctx, f.pool, f.topic, repository.Success, failed.Sequence, ready.Sequence)
		wantTaskError(t, err, repository.ErrWrongState, ready.Sequence)
		wantUnchanged(f, failed)
		wantUnchanged(f, ready)
	})
	t.Run("AllReassignsStateWithinRangeAndCounts", func(t *testing.T) {
		f := isolated(t, shared)
		a := driveTo(f, "a", repository.Failed)
		b := driveTo(f, "b", repository.Failed)
		c := driveTo(f, "c", repository.Failed)
		s := driveTo(f, "s", repository.Succeeded)
		n, err := f.repo.ReassignAll(f.ctx, f.pool, f.topic, repository.Failed, repository.Success, a.Sequence, b.Sequence)
		if err != nil || n != 2 {
			t.Fatalf("reassign all = %d, %v; want 2", n, err)
		}
		wantState(t, f.get(a.Sequence), repository.Succeeded, repository.Failed)
		wantState(t, f.get(b.Sequence), repository.Succeeded, repository.Failed)
		wantUnchanged(f, c)
		wantUnchanged(f, s)
	})
	t.Run("AllRejectsStateOutsideExpiredToSucceeded", func(t *testing.T) {
		f := isolated(t, shared)
		if _, err := f.repo.ReassignAll(f.ctx, f.pool, f.topic, repository.Ready, repository.Success, 0, repository.MaxSequence); !errors.Is(err, repository.ErrInvalid) {
			t.Fatalf("err = %v, want ErrInvalid", err)
		}
	})
}

func TestRecreate(t *testing.T) {
	shared := setup(t)
	// Each mode revives a FAILED task "a"; an older SUCCEEDED "a" and a newer READY "a"
	// pushed before the revival show the insertion the mode pushes the copy with.
	for _, tc := range []struct {
		mode                     repository.RecreateMode
		oldState                 repository.State
		succeededLeft, readyLeft repository.State
	}{
		{repository.RecreateAppend, repository.Recreated, repository.Succeeded, repository.Ready},
		{repository.RecreateReplace, repository.Recreated, repository.Redundant, repository.Redundant},
		{repository.RecreateSupersede, repository.Recreated, repository.Succeeded, repository.Redundant},
		{repository.Reset, repository.Ready, repository.Succeeded, repository.Ready},
	} {
		check := func(t *testing.T, f *fixture, got []repository.Revival, target, succeeded, ready repository.Task) {
			t.Helper()
			if len(got) != 1 || got[0].Old.Sequence != target.Sequence {
				t.Fatalf("revivals = %+v, want one from task %d", got, target.Sequence)
			}
			fresh := got[0].New
			if tc.mode == repository.Reset {
				if fresh.Sequence != target.Sequence {
					t.Errorf("reset made task %d, want the same task %d", fresh.Sequence, target.Sequence)
				}
			} else if fresh.Sequence <= ready.Sequence || fresh.Identifier != "a" || fresh.Input != target.Input {
				t.Errorf("copy = %+v, want a newer copy of task %d", fresh, target.Sequence)
			}
			// RECREATED/FAILED and a fresh READY/READY copy, or the same task READY/FAILED.
			wantState(t, f.get(target.Sequence), tc.oldState, repository.Failed)
			if tc.mode != repository.Reset {
				wantState(t, f.get(fresh.Sequence), repository.Ready, repository.Ready)
			}
			if got := f.get(succeeded.Sequence).State; got != tc.succeededLeft {
				t.Errorf("older SUCCEEDED task is %v, want %v", got, tc.succeededLeft)
			}
			if got := f.get(ready.Sequence).State; got != tc.readyLeft {
				t.Errorf("READY task is %v, want %v", got, tc.readyLeft)
			}
		}
		arrange := func(f *fixture) (target, succeeded, ready repository.Task) {
			succeeded = driveTo(f, "a", repository.Succeeded)
			target = driveTo(f, "a", repository.Failed)
			ready = f.push(repository.Append, "a")[0]
			return target, succeeded, ready
		}
		t.Run("ByTask/"+tc.mode.String(), func(t *testing.T) {
			f := isolated(t, shared)
			target, succeeded, ready := arrange(f)
			got, err := f.repo.Recreate(f.ctx, f.pool, f.topic, tc.mode, target.Sequence)
			if err != nil {
				t.Fatalf("recreate: %v", err)
			}
			check(t, f, got, target, succeeded, ready)
		})
		t.Run("ByState/"+tc.mode.String(), func(t *testing.T) {
			f := isolated(t, shared)
			target, succeeded, ready := arrange(f)
			later := driveTo(f, "b", repository.Failed) // beyond size 1
			got, err := f.repo.RecreateState(f.ctx, f.pool, f.topic, repository.Failed, tc.mode, 0, repository.MaxSequence, 1)
			if err != nil {
				t.Fatalf("recreate state: %v", err)
			}
			check(t, f, got, target, succeeded, ready)
			wantUnchanged(f, later)
		})
	}
	t.Run("ByStateRespectsSequenceRange", func(t *testing.T) {
		f := isolated(t, shared)
		a := driveTo(f, "a", repository.Failed)
		b := driveTo(f, "b", repository.Failed)
		got, err := f.repo.RecreateState(f.ctx, f.pool, f.topic, repository.Failed, repository.RecreateAppend, b.Sequence, repository.MaxSequence, 10)
		if err != nil || len(got) != 1 || got[0].Old.Sequence != b.Sequence {
			t.Fatalf("recreate state = %+v, %v; want only task %d", got, err, b.Sequence)
		}
		wantUnchanged(f, a)
	})
	t.Run("ByTaskRefusesTaskOutsideExpiredToSucceededAndChangesNothing", func(t *testing.T) {
		f := isolated(t, shared)
		failed := driveTo(f, "a", repository.Failed)
		ready := driveTo(f, "b", repository.Ready)
		for _, mode := range []repository.RecreateMode{repository.RecreateAppend, repository.Reset} {
			_, err := f.repo.Recreate(f.ctx, f.pool, f.topic, mode, failed.Sequence, ready.Sequence)
			wantTaskError(t, err, repository.ErrWrongState, ready.Sequence)
		}
		wantUnchanged(f, failed)
		wantUnchanged(f, ready)
		if n := len(allTasks(f)); n != 2 {
			t.Errorf("topic holds %d tasks, want 2: no copy pushed", n)
		}
	})
}

func TestPage(t *testing.T) {
	f := setup(t)
	// 1 a READY, 2 b SUCCEEDED, 3 a READY ref r, 4 c READY ref r, 5 a SUCCEEDED
	f.push(repository.Append, "a")
	driveTo(f, "b", repository.Succeeded)
	pushOne(f, repository.Creation{Identifier: "a", Reference: "r"})
	pushOne(f, repository.Creation{Identifier: "c", Reference: "r"})
	driveTo(f, "a", repository.Succeeded)
	ready, succeeded := repository.Ready, repository.Succeeded
	for _, tc := range []struct {
		name      string
		filter    repository.TaskFilter
		cursor    int64
		size      int
		direction repository.Direction
		want      []int64
	}{
		{"ForwardFromStartIsUnbounded", repository.TaskFilter{}, 0, 10, repository.Forward, []int64{1, 2, 3, 4, 5}},
		{"BackwardFromEndIsUnbounded", repository.TaskFilter{}, repository.MaxSequence, 10, repository.Backward, []int64{5, 4, 3, 2, 1}},
		{"ForwardCursorIsExclusive", repository.TaskFilter{}, 2, 2, repository.Forward, []int64{3, 4}},
		{"BackwardCursorIsExclusive", repository.TaskFilter{}, 4, 2, repository.Backward, []int64{3, 2}},
		{"FiltersByState", repository.TaskFilter{State: &ready}, 0, 10, repository.Forward, []int64{1, 3, 4}},
		{"FiltersByIdentifier", repository.TaskFilter{Identifier: "a"}, repository.MaxSequence, 10, repository.Backward, []int64{5, 3, 1}},
		{"FiltersByReference", repository.TaskFilter{Reference: "r"}, 0, 10, repository.Forward, []int64{3, 4}},
		{"CombinesFilters", repository.TaskFilter{State: &succeeded, Identifier: "a"}, 0, 10, repository.Forward, []int64{5}},
		{"SizeZeroReturnsNothing", repository.TaskFilter{}, 0, 0, repository.Forward, []int64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.repo.Page(t.Context(), f.pool, f.topic, tc.filter, tc.cursor, tc.size, tc.direction)
			if err != nil {
				t.Fatalf("page: %v", err)
			}
			if !slices.Equal(sequences(got), tc.want) {
				t.Fatalf("page = %v, want %v", sequences(got), tc.want)
			}
		})
	}
	t.Run("ReturnsAllColumns", func(t *testing.T) {
		got, err := f.repo.Page(t.Context(), f.pool, f.topic, repository.TaskFilter{}, 4, 1, repository.Backward)
		if err != nil || len(got) != 1 {
			t.Fatalf("page = %v, %v", got, err)
		}
		p := got[0]
		if p.Topic != f.topic || p.Identifier != "a" || p.Reference != "r" || p.Input != "" || p.Created.IsZero() || p.State != repository.Ready {
			t.Errorf("page row = %+v", p)
		}
	})
}

func TestPushReturnsTheTasksAsStored(t *testing.T) {
	// Push builds its result from the creations and the columns the database decided;
	// every field must equal what a read returns, whatever the insertion.
	shared := setup(t)
	for _, insertion := range []repository.Insertion{repository.Append, repository.Replace, repository.Supersede, repository.Delete} {
		t.Run(insertion.String(), func(t *testing.T) {
			f := isolated(t, shared)
			f.push(repository.Append, "a", "b") // older tasks the insertion may touch
			now := dbNow(f)
			pushed, err := f.repo.Push(f.ctx, f.pool, f.topic, insertion,
				repository.Creation{Identifier: "a", Input: "first", Reference: "r1", Priority: 2},
				repository.Creation{Identifier: "b", Delay: time.Hour},
				repository.Creation{Identifier: "a", Input: "second", Suspended: true},
				repository.Creation{Identifier: "c", NotBefore: now.Add(time.Minute), Priority: -3},
				repository.Creation{Identifier: "ü-ñ", Input: "π"})
			if err != nil {
				t.Fatal(err)
			}
			want := 5
			if insertion == repository.Delete {
				want = 4 // only the last "a"
			}
			if len(pushed) != want {
				t.Fatalf("pushed %d tasks, want %d", len(pushed), want)
			}
			for _, task := range pushed {
				if got := f.get(task.Sequence); !reflect.DeepEqual(got, task) {
					t.Errorf("push returned %+v\nstored        %+v", task, got)
				}
			}
		})
	}
}

func TestCompleteReturnsTheTasksAsStored(t *testing.T) {
	// Complete reads back only the columns a completion writes when its completions come
	// from Task.Decide, and fills the rest in from them; with completions built by hand it
	// reads whole rows. Either way every field must equal what a read returns, whatever
	// the decision.
	shared := setup(t)
	for _, tc := range []struct {
		name   string
		decide func(task repository.Task, d repository.Decision) repository.Completion
	}{
		{"FromTheLease", repository.Task.Decide},
		{"ByHand", func(task repository.Task, d repository.Decision) repository.Completion {
			return repository.Completion{Sequence: task.Sequence, Attempt: task.Attempt, Decision: d}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := isolated(t, shared)
			configure(f, repository.TopicSettings{MaxAttempts: 2, BackoffBase: time.Hour, BackoffCap: time.Hour})
			decisions := []repository.Decision{
				repository.Succeed("done"), repository.Succeed(""), repository.Fail(errors.New("boom")),
				repository.Suspend("later"), repository.Skip("irrelevant"), repository.SnoozeFor(time.Minute),
				repository.Succeed("too late"), // cancelled while leased
			}
			decide := map[string]repository.Decision{"bare": repository.Succeed("bare")}
			for i, d := range decisions {
				id := fmt.Sprintf("ü-%d", i)
				decide[id] = d
				pushOne(f, repository.Creation{Identifier: id, Input: fmt.Sprintf("in %d", i),
					Reference: fmt.Sprintf("ref %d", i%3), Priority: int16(i % 2)})
			}
			pushOne(f, repository.Creation{Identifier: "bare"})
			leased := f.poll(repository.FIFO, repository.None, len(decide))
			if len(leased) != len(decide) {
				t.Fatalf("polled %d tasks, want %d", len(leased), len(decide))
			}
			completions := make([]repository.Completion, len(leased))
			for i, task := range leased {
				if task.Identifier == "ü-6" {
					if _, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "alice", task.Sequence); err != nil {
						t.Fatal(err)
					}
				}
				completions[i] = tc.decide(task, decide[task.Identifier])
			}
			done, err := f.repo.Complete(f.ctx, f.pool, f.topic, completions...)
			if err != nil {
				t.Fatal(err)
			}
			if len(done) != len(leased) {
				t.Fatalf("completed %d tasks, want %d", len(done), len(leased))
			}
			states := map[repository.State]bool{}
			for _, task := range done {
				if got := f.get(task.Sequence); !reflect.DeepEqual(got, task) {
					t.Errorf("complete returned %+v\nstored            %+v", task, got)
				}
				if task.Identifier == "" || task.Owner == "" || task.Topic != f.topic {
					t.Errorf("complete returned %+v without its identifier, owner or topic", task)
				}
				states[task.State] = true
			}
			for _, want := range []repository.State{repository.Ready, repository.Failed, repository.Suspended,
				repository.Filtered, repository.Succeeded} {
				if !states[want] {
					t.Errorf("no task ended %v: the decisions do not cover every outcome", want)
				}
			}
		})
	}
}

func TestGet(t *testing.T) {
	shared := setup(t)
	t.Run("ReturnsExactMatch", func(t *testing.T) {
		f := isolated(t, shared)
		pushed := pushOne(f, repository.Creation{Identifier: "a", Input: "in", Reference: "ref", Priority: 3})
		got := f.get(pushed.Sequence)
		if got.Identifier != "a" || got.Input != "in" || got.Reference != "ref" || got.Priority != 3 || !got.Created.Equal(pushed.Created) {
			t.Errorf("get = %+v, want %+v", got, pushed)
		}
	})
	t.Run("UnknownSequenceIsErrUnknownTask", func(t *testing.T) {
		f := isolated(t, shared)
		task := f.push(repository.Append, "a")[0]
		if _, err := f.repo.Get(f.ctx, f.pool, f.topic, task.Sequence+1); !errors.Is(err, repository.ErrUnknownTask) {
			t.Fatalf("err = %v, want ErrUnknownTask", err)
		}
	})
	t.Run("TaskOfAnotherTopicIsErrUnknownTask", func(t *testing.T) {
		f := isolated(t, shared)
		other := onTopic(t, f, t.Name()+"/other")
		task := other.push(repository.Append, "a")[0]
		if _, err := f.repo.Get(f.ctx, f.pool, f.topic, task.Sequence); !errors.Is(err, repository.ErrUnknownTask) {
			t.Fatalf("err = %v, want ErrUnknownTask", err)
		}
	})
}

func TestCount(t *testing.T) {
	f := setup(t)
	// topic: 1 a SUCCEEDED, 2 a READY, 3 b FAILED, 4 c READY ref r; "empty" has no task.
	driveTo(f, "a", repository.Succeeded)
	f.push(repository.Append, "a")
	driveTo(f, "b", repository.Failed)
	pushOne(f, repository.Creation{Identifier: "c", Reference: "r"})
	onTopic(t, f, "empty")
	succeeded := repository.Succeeded
	type counts = map[string]map[repository.State]repository.Count
	for _, tc := range []struct {
		name     string
		filter   repository.TaskFilter
		from, to int64
		mode     repository.CountMode
		want     counts
	}{
		{"TotalCountsEveryTaskAndEveryTopicAppears", repository.TaskFilter{}, 0, repository.MaxSequence, repository.Total, counts{
			"topic": {repository.Ready: {Count: 2, Highest: 4}, repository.Failed: {Count: 1, Highest: 3}, repository.Succeeded: {Count: 1, Highest: 1}},
			"empty": {},
		}},
		{"RecentCountsLatestTaskPerIdentifier", repository.TaskFilter{}, 0, repository.MaxSequence, repository.Recent, counts{
			"topic": {repository.Ready: {Count: 2, Highest: 4}, repository.Failed: {Count: 1, Highest: 3}},
			"empty": {},
		}},
		{"RecentAppliesStateFilterAfterChoosingLatest", repository.TaskFilter{State: &succeeded}, 0, repository.MaxSequence, repository.Recent, counts{
			"topic": {}, "empty": {},
		}},
		{"TotalAppliesStateFilter", repository.TaskFilter{State: &succeeded}, 0, repository.MaxSequence, repository.Total, counts{
			"topic": {repository.Succeeded: {Count: 1, Highest: 1}}, "empty": {},
		}},
		{"RecentWithinRangeChoosesLatestInRange", repository.TaskFilter{}, 0, 1, repository.Recent, counts{
			"topic": {repository.Succeeded: {Count: 1, Highest: 1}}, "empty": {},
		}},
		{"FiltersByIdentifierAndReference", repository.TaskFilter{Reference: "r"}, 0, repository.MaxSequence, repository.Total, counts{
			"topic": {repository.Ready: {Count: 1, Highest: 4}}, "empty": {},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.repo.Count(t.Context(), f.pool, "", tc.filter, tc.from, tc.to, tc.mode)
			if err != nil {
				t.Fatalf("count: %v", err)
			}
			if !equalCounts(got, tc.want) {
				t.Fatalf("count = %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("OneTopic", func(t *testing.T) {
		got, err := f.repo.Count(t.Context(), f.pool, "empty", repository.TaskFilter{}, 0, repository.MaxSequence, repository.Total)
		if err != nil || !equalCounts(got, counts{"empty": {}}) {
			t.Fatalf("count = %v, %v; want only the empty topic", got, err)
		}
	})
}

func equalCounts(a, b map[string]map[repository.State]repository.Count) bool {
	if len(a) != len(b) {
		return false
	}
	for topic, states := range a {
		other, ok := b[topic]
		if !ok || len(states) != len(other) {
			return false
		}
		for s, c := range states {
			if other[s] != c {
				return false
			}
		}
	}
	return true
}

func TestResults(t *testing.T) {
	t.Run("CountsCompletedTasksPerTopicAndResultWithinTimeRange", func(t *testing.T) {
		f := setup(t)
		driveTo(f, "old", repository.Succeeded)
		from := dbNow(f)
		driveTo(f, "a", repository.Succeeded)
		driveTo(f, "b", repository.Succeeded)
		driveTo(f, "c", repository.Failed)
		driveTo(onTopic(t, f, "other"), "d", repository.Filtered)
		f.push(repository.Append, "unfinished")
		to := dbNow(f)
		got, err := f.repo.Results(f.ctx, f.pool, from, to)
		if err != nil {
			t.Fatalf("results: %v", err)
		}
		want := map[string]map[repository.Result]int64{
			"topic": {repository.Success: 2, repository.Failure: 1},
			"other": {repository.Filter: 1},
		}
		if len(got) != 2 || len(got["topic"]) != 2 || got["topic"][repository.Success] != 2 || got["topic"][repository.Failure] != 1 ||
			len(got["other"]) != 1 || got["other"][repository.Filter] != 1 {
			t.Fatalf("results = %v, want %v", got, want)
		}
	})
	t.Run("EmptyRangeIsInvalid", func(t *testing.T) {
		f := setup(t)
		now := time.Now()
		if _, err := f.repo.Results(f.ctx, f.pool, now, now.Add(-time.Second)); !errors.Is(err, repository.ErrInvalid) {
			t.Fatalf("err = %v, want ErrInvalid", err)
		}
	})
}

func TestResolve(t *testing.T) {
	f := setup(t)
	tasks := make([]repository.Task, 3)
	for i := range tasks {
		tasks[i] = f.push(repository.Append, "a")[0] // one transaction each: distinct creation times
	}
	if !tasks[0].Created.Before(tasks[1].Created) || !tasks[1].Created.Before(tasks[2].Created) {
		t.Fatalf("creation times %v not increasing", []time.Time{tasks[0].Created, tasks[1].Created, tasks[2].Created})
	}
	mid := tasks[1].Created
	for _, tc := range []struct {
		name      string
		at        time.Time
		preceding bool
		want      int64
	}{
		{"FollowingAtCreationTimeIsThatTask", mid, false, tasks[1].Sequence},
		{"FollowingJustAfterIsNextTask", mid.Add(time.Microsecond), false, tasks[2].Sequence},
		{"PrecedingAtCreationTimeIsThatTask", mid, true, tasks[1].Sequence},
		{"PrecedingJustBeforeIsPreviousTask", mid.Add(-time.Microsecond), true, tasks[0].Sequence},
		{"FollowingAfterEverythingIsMaxSequence", tasks[2].Created.Add(time.Hour), false, repository.MaxSequence},
		{"PrecedingBeforeEverythingIsZero", tasks[0].Created.Add(-time.Hour), true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.repo.Resolve(t.Context(), f.pool, tc.at, tc.preceding)
			if err != nil || got != tc.want {
				t.Fatalf("resolve = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// purgeHook is a statementCounter that runs do once, when the batch statement of Purge
// number at starts (0: never).
type purgeHook struct {
	statementCounter
	at int
	do func()
}

func (c *purgeHook) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	ctx = c.statementCounter.TraceQueryStart(ctx, conn, data)
	if c.at > 0 && c.count("TaskPurgeSome") == c.at {
		c.at = 0 // once: do's own statements pass here too
		c.do()
	}
	return ctx
}

// TestPurgeInBatches: on a pool a purge deletes in statements of a bounded number of
// tasks, each committed on its own, so that an interrupted one keeps what it deleted and
// says how many; it passes over locked tasks rather than wait, and does not chase the
// tasks finished after it began. Inside the caller's transaction it is one statement,
// undone with the transaction. Not parallel: it lowers the batch for the whole package
// (to 4).
func TestPurgeInBatches(t *testing.T) {
	repository.SetPurgeBatch(t, 4)
	ctx := t.Context()
	tracer := &purgeHook{}
	pool := tracedPool(t, tracer)
	f := fixtureOn(t, pool)
	// 14 SUCCEEDED tasks and one FAILED, then one READY and one ACTIVE, which stay
	ids := make([]string, 17)
	for i := range ids {
		ids[i] = fmt.Sprint("task-", i)
	}
	f.push(repository.Append, ids...)
	f.complete(repository.Succeed("ok"), f.poll(repository.FIFO, repository.None, 14)...)
	f.complete(repository.Fail(errors.New("boom")), f.poll(repository.FIFO, repository.None, 1)...)
	f.poll(repository.FIFO, repository.None, 1)
	left := func() map[repository.State]int64 {
		t.Helper()
		counts, err := f.repo.CountByState(ctx, pool, f.topic)
		if err != nil {
			t.Fatal(err)
		}
		maps.DeleteFunc(counts, func(_ repository.State, n int64) bool { return n == 0 })
		return counts
	}
	wantLeft := func(what string, want map[repository.State]int64) {
		t.Helper()
		if got := left(); !maps.Equal(got, want) {
			t.Errorf("%s: left %v, want %v", what, got, want)
		}
	}

	t.Run("InTheCallersTransactionOneStatement", func(t *testing.T) {
		tracer.reset()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		n, err := f.repo.Purge(ctx, tx, f.topic, 0, repository.MaxSequence, nil)
		if err != nil || n != 15 {
			t.Fatalf("purge in a transaction = %d, %v; want the 15 finished tasks", n, err)
		}
		if one, batches := tracer.count("TaskPurge"), tracer.count("TaskPurgeSome"); one != 1 || batches != 0 {
			t.Errorf("purge in a transaction sent %v, want one TaskPurge", tracer.names())
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		wantLeft("after the rollback", map[repository.State]int64{repository.Succeeded: 14, repository.Failed: 1,
			repository.Ready: 1, repository.Active: 1})
	})

	t.Run("InterruptedKeepsWhatItDeletedAndSaysHowMany", func(t *testing.T) {
		tracer.reset()
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		// cancelled as the second statement starts: that statement finishes
		tracer.at, tracer.do = 2, cancel
		n, err := f.repo.Purge(cctx, pool, f.topic, 0, repository.MaxSequence, nil)
		if err == nil || n != 8 {
			t.Fatalf("purge interrupted in its second statement = %d, %v; want 8 and the error", n, err)
		}
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "after 8 tasks") {
			t.Errorf("error %q: want context.Canceled, naming the 8 tasks purged", err)
		}
		if got := left(); got[repository.Succeeded]+got[repository.Failed] != 7 {
			t.Errorf("left %v after the interrupted purge, want 7 finished (its two statements committed)", got)
		}
	})

	t.Run("PassesOverLockedTasks", func(t *testing.T) {
		// a finished task locked by another transaction (a revive under way) is left,
		// not waited for
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		var locked int64
		if err := tx.QueryRow(ctx, "SELECT sequence FROM task WHERE topic = $1 AND state >= 3 ORDER BY sequence DESC LIMIT 1 FOR UPDATE",
			f.topic).Scan(&locked); err != nil {
			t.Fatal(err)
		}
		wait, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := f.repo.Purge(wait, pool, f.topic, locked, locked, nil)
		if err != nil || n != 0 {
			t.Fatalf("purge of a locked task = %d, %v; want 0 at once", n, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("OnAPoolStatementsOfTheBatchUpToTheLastSequence", func(t *testing.T) {
		tracer.reset()
		// a task finished while the purge runs (inserted as its second statement
		// starts) is after the sequence the purge began at: it stays
		var late int64
		tracer.at, tracer.do = 2, func() {
			pushed, err := f.repo.Push(ctx, pool, f.topic, repository.Append, repository.Creation{Identifier: "late"})
			if err == nil {
				late = pushed[0].Sequence
				// finished at once (a poll would lease the READY task pushed before it)
				_, err = pool.Exec(ctx, "UPDATE task SET state = 6, completed = now() WHERE topic = $1 AND sequence = $2", f.topic, late)
			}
			if err != nil {
				t.Error(err)
			}
		}
		n, err := f.repo.Purge(ctx, pool, f.topic, 0, repository.MaxSequence, nil)
		if err != nil || n != 7 {
			t.Fatalf("purge = %d, %v; want the 7 finished tasks left", n, err)
		}
		// 4, then 3
		if got := tracer.count("TaskPurgeSome"); got != 2 {
			t.Errorf("purge of 7 in batches of 4 sent %d TaskPurgeSome statements, want 2", got)
		}
		wantLeft("after the purge", map[repository.State]int64{repository.Succeeded: 1, repository.Ready: 1, repository.Active: 1})
		if task, err := f.repo.Get(ctx, pool, f.topic, late); err != nil || task.Identifier != "late" {
			t.Errorf("the task finished during the purge = %+v, %v; want it kept", task, err)
		}
	})
}

func TestPurge(t *testing.T) {
	shared := setup(t)
	// everyState leaves one task of identifier "<state>" in each of the nine states.
	everyState := func(f *fixture) map[repository.State]repository.Task {
		out := make(map[repository.State]repository.Task)
		for _, s := range []repository.State{repository.Failed, repository.Suspended, repository.Filtered,
			repository.Succeeded, repository.Recreated, repository.Redundant, repository.Expired, repository.Ready, repository.Active} {
			out[s] = driveTo(f, s.String(), s)
		}
		return out
	}
	t.Run("DeletesFinishedNeverActiveReadyOrExpired", func(t *testing.T) {
		f := isolated(t, shared)
		tasks := everyState(f)
		n, err := f.repo.Purge(f.ctx, f.pool, f.topic, 0, repository.MaxSequence, nil)
		// RECREATED left a READY copy behind, which stays.
		if err != nil || n != 6 {
			t.Fatalf("purge = %d, %v; want the 6 finished tasks", n, err)
		}
		for s, task := range tasks {
			_, err := f.repo.Get(f.ctx, f.pool, f.topic, task.Sequence)
			if gone := errors.Is(err, repository.ErrUnknownTask); gone != s.Finished() {
				t.Errorf("%v task gone = %v, want %v", s, gone, s.Finished())
			}
		}
	})
	t.Run("StateFilterDeletesOnlyThatState", func(t *testing.T) {
		f := isolated(t, shared)
		tasks := everyState(f)
		failed := repository.Failed
		n, err := f.repo.Purge(f.ctx, f.pool, f.topic, 0, repository.MaxSequence, &failed)
		if err != nil || n != 1 {
			t.Fatalf("purge = %d, %v; want 1", n, err)
		}
		if _, err := f.repo.Get(f.ctx, f.pool, f.topic, tasks[repository.Failed].Sequence); !errors.Is(err, repository.ErrUnknownTask) {
			t.Errorf("FAILED task still there: %v", err)
		}
		wantUnchanged(f, tasks[repository.Succeeded])
	})
	t.Run("RespectsInclusiveSequenceRange", func(t *testing.T) {
		f := isolated(t, shared)
		a := driveTo(f, "a", repository.Succeeded)
		b := driveTo(f, "b", repository.Succeeded)
		c := driveTo(f, "c", repository.Succeeded)
		n, err := f.repo.Purge(f.ctx, f.pool, f.topic, b.Sequence, b.Sequence, nil)
		if err != nil || n != 1 {
			t.Fatalf("purge = %d, %v; want 1", n, err)
		}
		wantUnchanged(f, a)
		wantUnchanged(f, c)
	})
	t.Run("UnfinishedStateIsInvalid", func(t *testing.T) {
		f := isolated(t, shared)
		task := driveTo(f, "a", repository.Ready)
		for _, s := range []repository.State{repository.Active, repository.Ready, repository.Expired, repository.State(42)} {
			if _, err := f.repo.Purge(f.ctx, f.pool, f.topic, 0, repository.MaxSequence, &s); !errors.Is(err, repository.ErrInvalid) {
				t.Errorf("purge state %v: err = %v, want ErrInvalid", s, err)
			}
		}
		wantUnchanged(f, task)
	})
	t.Run("AllTruncatesTopicWhateverTheState", func(t *testing.T) {
		f := isolated(t, shared)
		everyState(f)
		other := onTopic(t, f, t.Name()+"/other")
		kept := other.push(repository.Append, "a")[0]
		n, err := f.repo.PurgeAll(f.ctx, f.pool, f.topic)
		if err != nil || n != 10 {
			t.Fatalf("purge all = %d, %v; want 10", n, err)
		}
		if left := allTasks(f); len(left) != 0 {
			t.Errorf("%d tasks left", len(left))
		}
		other.get(kept.Sequence)
	})
	t.Run("OnAPoolOfUnknownTopicIsErrUnknownTopic", func(t *testing.T) {
		f := setup(t)
		if _, err := f.repo.Purge(f.ctx, f.pool, "nope", 0, repository.MaxSequence, nil); !errors.Is(err, repository.ErrUnknownTopic) {
			t.Fatalf("err = %v, want ErrUnknownTopic", err)
		}
		if n, err := f.repo.Purge(f.ctx, f.pool, f.topic, 0, repository.MaxSequence, nil); err != nil || n != 0 {
			t.Fatalf("purge of a known topic with nothing to purge: %d, %v", n, err)
		}
	})
	t.Run("AllOfUnknownTopicIsErrUnknownTopic", func(t *testing.T) {
		f := isolated(t, shared)
		if _, err := f.repo.PurgeAll(f.ctx, f.pool, "nope"); !errors.Is(err, repository.ErrUnknownTopic) {
			t.Fatalf("err = %v, want ErrUnknownTopic", err)
		}
	})
}

func TestDestroy(t *testing.T) {
	shared := setup(t)
	t.Run("RemovesTopicAndItsTasks", func(t *testing.T) {
		f := isolated(t, shared)
		f.push(repository.Append, "a")
		ok, err := f.repo.Destroy(f.ctx, f.pool, f.topic)
		if err != nil || !ok {
			t.Fatalf("destroy = %v, %v; want true", ok, err)
		}
		if _, err := f.repo.Topic(f.ctx, f.pool, f.topic); !errors.Is(err, repository.ErrUnknownTopic) {
			t.Errorf("topic after destroy: %v, want ErrUnknownTopic", err)
		}
		if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "a"}); !errors.Is(err, repository.ErrUnknownTopic) {
			t.Errorf("push after destroy: %v, want ErrUnknownTopic", err)
		}
		// Initializing it again gives an empty topic.
		if created, err := f.repo.CreateTopic(f.ctx, f.pool, f.topic); err != nil || !created {
			t.Fatalf("initialize again = %v, %v", created, err)
		}
		if left := allTasks(f); len(left) != 0 {
			t.Errorf("%d tasks survived the destroy", len(left))
		}
	})
	t.Run("UnknownTopicIsFalseAndLeavesTransactionUsable", func(t *testing.T) {
		f := isolated(t, shared)
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(f.ctx)
		ok, err := f.repo.Destroy(f.ctx, tx, "nope")
		if err != nil || ok {
			t.Fatalf("destroy = %v, %v; want false without error", ok, err)
		}
		if _, err := f.repo.Push(f.ctx, tx, f.topic, repository.Append, repository.Creation{Identifier: "a"}); err != nil {
			t.Fatalf("push in the same transaction: %v", err)
		}
		if err := tx.Commit(f.ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}
	})
}

func TestTopicSettings(t *testing.T) {
	shared := setup(t)
	// fresh creates a topic with the defaults (isolated's topic has one attempt).
	fresh := func(t *testing.T) *fixture {
		t.Helper()
		f := isolated(t, shared)
		f.topic = t.Name() + "/fresh"
		if _, err := f.repo.CreateTopic(f.ctx, f.pool, f.topic); err != nil {
			t.Fatal(err)
		}
		return f
	}
	stored := func(f *fixture) repository.TopicSettings {
		f.t.Helper()
		got, err := f.repo.Topic(f.ctx, f.pool, f.topic)
		if err != nil {
			f.t.Fatal(err)
		}
		return got.TopicSettings
	}
	t.Run("FreshTopicHasDefaults", func(t *testing.T) {
		f := fresh(t)
		got, err := f.repo.Topic(f.ctx, f.pool, f.topic)
		if err != nil {
			t.Fatal(err)
		}
		want := repository.TopicSettings{MaxAttempts: repository.MaxAttemptsDefault, BackoffBase: repository.BackoffBaseDefault, BackoffCap: repository.BackoffCapDefault}
		if got.TopicSettings != want || !got.Active || got.Name != f.topic {
			t.Errorf("topic = %+v, want defaults %+v, active", got, want)
		}
		if repository.MaxAttemptsDefault != 25 {
			t.Errorf("MaxAttemptsDefault = %d, want 25 (the documented default)", repository.MaxAttemptsDefault)
		}
	})
	t.Run("FreshTopicRetriesAFailure", func(t *testing.T) {
		f := fresh(t)
		f.push(repository.Append, "a")
		got := f.complete(repository.Fail(errors.New("boom")), f.poll(repository.FIFO, repository.None, 1)...)[0]
		if got.State != repository.Ready || got.NotBefore.IsZero() || len(got.Errors) != 1 {
			t.Fatalf("failed task of a fresh topic = %v, not before %v, errors %q; want READY after a backoff, the error kept", got.State, got.NotBefore, got.Errors)
		}
	})
	t.Run("ConfigureRoundTrips", func(t *testing.T) {
		f := isolated(t, shared)
		want := repository.TopicSettings{MaxAttempts: 5, BackoffBase: 2 * time.Second, BackoffCap: time.Minute,
			BackoffJitter: 300 * time.Millisecond, QueueCap: 100, Retention: 48 * time.Hour}
		stored, err := f.repo.Configure(f.ctx, f.pool, f.topic, want)
		if err != nil {
			t.Fatalf("configure: %v", err)
		}
		got, err := f.repo.Topic(f.ctx, f.pool, f.topic)
		if err != nil || got.TopicSettings != want || stored.TopicSettings != want {
			t.Errorf("topic = %+v (returned %+v), %v; want %+v", got.TopicSettings, stored.TopicSettings, err, want)
		}
	})
	for _, tc := range []struct {
		name     string
		settings repository.TopicSettings
		says     string
	}{
		{"ZeroMaxAttemptsIsInvalid", repository.TopicSettings{MaxAttempts: 0}, "max attempts 0 is below 1"},
		{"NegativeBackoffBaseIsInvalid", repository.TopicSettings{MaxAttempts: 1, BackoffBase: -time.Second}, "backoff base -1s is negative"},
		{"NegativeBackoffCapIsInvalid", repository.TopicSettings{MaxAttempts: 1, BackoffCap: -time.Second}, "backoff cap -1s is negative"},
		{"NegativeJitterIsInvalid", repository.TopicSettings{MaxAttempts: 1, BackoffJitter: -time.Second}, "backoff jitter -1s is negative"},
		{"NegativeQueueCapIsInvalid", repository.TopicSettings{MaxAttempts: 1, QueueCap: -1}, "queue cap -1 is negative"},
		{"NegativeRetentionIsInvalid", repository.TopicSettings{MaxAttempts: 1, Retention: -time.Hour}, "retention -1h0m0s is negative"},
		// the database keeps milliseconds: a part of one was stored rounded down, 500µs as 0
		{"SubMillisecondBackoffIsInvalid", repository.TopicSettings{MaxAttempts: 1, BackoffBase: 500 * time.Microsecond}, "backoff base 500µs is not a whole number of milliseconds"},
		{"FractionalRetentionIsInvalid", repository.TopicSettings{MaxAttempts: 1, Retention: time.Millisecond + time.Nanosecond}, "retention 1.000001ms is not a whole number of milliseconds"},
		{"FractionalRatePeriodIsInvalid", repository.TopicSettings{MaxAttempts: 1, Rate: 5, RatePeriod: 1500 * time.Microsecond}, "rate period 1.5ms is not a whole number of milliseconds"},
		// the cap bounds every delay: the first retry came at once (a cap of 0 left out)
		{"BackoffCapBelowBaseIsInvalid", repository.TopicSettings{MaxAttempts: 5, BackoffBase: 30 * time.Second}, "backoff cap 0s is below the backoff base 30s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fresh(t)
			before := stored(f)
			_, err := f.repo.Configure(f.ctx, f.pool, f.topic, tc.settings)
			if !errors.Is(err, repository.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if msg := err.Error(); !strings.Contains(msg, strconv.Quote(f.topic)) || !strings.Contains(msg, tc.says) {
				t.Errorf("error %q does not name the topic and say %q", msg, tc.says)
			}
			if got := stored(f); got != before {
				t.Errorf("settings changed to %+v", got)
			}
		})
	}
	// A topic stored with a cap below its base before the check takes changes of its
	// other settings; only a change of its retry policy is checked.
	t.Run("AStoredCapBelowTheBaseKeepsOtherChanges", func(t *testing.T) {
		f := fresh(t)
		if _, err := f.pool.Exec(f.ctx, `UPDATE task_topic SET max_attempts = 5, backoff_base_ms = 7200000, backoff_cap_ms = 3600000 WHERE topic = $1`, f.topic); err != nil {
			t.Fatal(err)
		}
		if got, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.QueueCap = 10 }); err != nil || got.QueueCap != 10 {
			t.Fatalf("a change of the queue cap: %+v, %v", got.TopicSettings, err)
		}
		_, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.MaxAttempts = 6 })
		if !errors.Is(err, repository.ErrInvalid) || !strings.Contains(err.Error(), "backoff cap 1h0m0s is below the backoff base 2h0m0s") {
			t.Fatalf("a change of the retry policy: %v, want the cap below the base refused", err)
		}
	})
	t.Run("ConfigureUnknownTopicIsErrUnknownTopic", func(t *testing.T) {
		f := isolated(t, shared)
		if _, err := f.repo.Configure(f.ctx, f.pool, "nope", repository.TopicSettings{MaxAttempts: 1}); !errors.Is(err, repository.ErrUnknownTopic) {
			t.Fatalf("err = %v, want ErrUnknownTopic", err)
		}
	})
	t.Run("UpdateSettingsChangesOnlyWhatItSets", func(t *testing.T) {
		f := fresh(t)
		want := stored(f)
		want.BackoffBase = 10 * time.Second
		got, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.BackoffBase = 10 * time.Second })
		if err != nil {
			t.Fatal(err)
		}
		if got.TopicSettings != want || stored(f) != want {
			t.Errorf("after UpdateSettings: returned %+v, stored %+v; want %+v", got.TopicSettings, stored(f), want)
		}
	})
	t.Run("UpdateSettingsInvalidNamesTheTopicAndChangesNothing", func(t *testing.T) {
		f := fresh(t)
		before := stored(f)
		_, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) {
			s.BackoffBase = time.Minute
			s.MaxAttempts = 0
		})
		if !errors.Is(err, repository.ErrInvalid) || !strings.Contains(err.Error(), strconv.Quote(f.topic)) {
			t.Fatalf("err = %v, want ErrInvalid naming the topic", err)
		}
		if got := stored(f); got != before {
			t.Errorf("settings changed to %+v", got)
		}
	})
	t.Run("UpdateSettingsUnknownTopicIsErrUnknownTopic", func(t *testing.T) {
		f := isolated(t, shared)
		called := false
		_, err := f.repo.UpdateSettings(f.ctx, f.pool, "nope", func(*repository.TopicSettings) { called = true })
		if !errors.Is(err, repository.ErrUnknownTopic) || called {
			t.Fatalf("err = %v (change called: %v), want ErrUnknownTopic without calling it", err, called)
		}
	})
	t.Run("ConcurrentUpdatesKeepEachOthersChanges", func(t *testing.T) {
		f := fresh(t)
		// The first update holds the topic's row while a second one runs: the second
		// waits for it and applies its change to what the first wrote.
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(f.ctx)
		if _, err := f.repo.UpdateSettings(f.ctx, tx, f.topic, func(s *repository.TopicSettings) { s.QueueCap = 7 }); err != nil {
			t.Fatal(err)
		}
		second := make(chan error, 1)
		go func() {
			_, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.MaxAttempts = 3 })
			second <- err
		}()
		waitForLock(t, f.pool, "task_topic")
		if err := tx.Commit(f.ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-second; err != nil {
			t.Fatal(err)
		}
		if got := stored(f); got.QueueCap != 7 || got.MaxAttempts != 3 {
			t.Errorf("settings %+v, want both changes (queue cap 7, 3 attempts)", got)
		}
	})
}

// waitForLock waits until a session of the database waits for a lock while running a
// statement that mentions what.
func waitForLock(t *testing.T, pool *pgxpool.Pool, what string) {
	t.Helper()
	awaitLockWait(t, pool, what, true)
}

// waitForNoLockWait waits until no session of the database waits for a lock while
// running a statement that mentions what.
func waitForNoLockWait(t *testing.T, pool *pgxpool.Pool, what string) {
	t.Helper()
	awaitLockWait(t, pool, what, false)
}

// lockWaited reports whether a session of the database waits for a lock while running a
// statement that mentions what.
func lockWaited(ctx context.Context, pool *pgxpool.Pool, what string) (bool, error) {
	var waiting bool
	err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%')`, what).Scan(&waiting)
	return waiting, err
}

func awaitLockWait(t *testing.T, pool *pgxpool.Pool, what string, want bool) {
	t.Helper()
	for {
		waiting, err := lockWaited(t.Context(), pool, what)
		if err != nil {
			t.Fatal(err)
		}
		if waiting == want {
			return
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("waiting for a lock in a statement of %q: still %v", what, waiting)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestDeprecatedNames(t *testing.T) {
	// The names of the previous release still work: Initialize creates a topic, Register
	// and Deregister register and deregister the owner.
	f := setup(t)
	repo, err := repository.New(repository.Config{Owner: "old-names"})
	if err != nil {
		t.Fatal(err)
	}
	if created, err := repo.Initialize(f.ctx, f.pool, "old"); err != nil || !created {
		t.Fatalf("Initialize = %v, %v; want a new topic", created, err)
	}
	if _, err := repo.Topic(f.ctx, f.pool, "old"); err != nil {
		t.Fatalf("topic made by Initialize: %v", err)
	}
	if created, err := repo.Register(f.ctx, f.pool); err != nil || !created {
		t.Fatalf("Register = %v, %v; want a new owner row", created, err)
	}
	if err := repo.Heartbeat(f.ctx, f.pool); err != nil {
		t.Fatalf("heartbeat after Register: %v", err)
	}
	if gone, err := repo.Deregister(f.ctx, f.pool); err != nil || !gone {
		t.Fatalf("Deregister = %v, %v; want the row gone", gone, err)
	}
	if err := repo.Heartbeat(f.ctx, f.pool); !errors.Is(err, repository.ErrNotRegistered) {
		t.Fatalf("heartbeat after Deregister: %v, want ErrNotRegistered", err)
	}
}

func TestQueueCap(t *testing.T) {
	t.Run("PushBeyondCapIsRefusedAndWritesNothing", func(t *testing.T) {
		f := setup(t)
		configure(f, repository.TopicSettings{MaxAttempts: 1, QueueCap: 3})
		first := f.push(repository.Append, "a", "b")
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(f.ctx)
		_, err = f.repo.Push(f.ctx, tx, f.topic, repository.Append, repository.Creation{Identifier: "c"}, repository.Creation{Identifier: "d"})
		if !errors.Is(err, repository.ErrQueueFull) {
			t.Fatalf("err = %v, want ErrQueueFull", err)
		}
		wantQueueFull(f, err, "push", 3, 2)
		// Nothing written, the transaction still usable, no sequence consumed.
		third, err := f.repo.Push(f.ctx, tx, f.topic, repository.Append, repository.Creation{Identifier: "c"})
		if err != nil || third[0].Sequence != first[1].Sequence+1 {
			t.Fatalf("push within the cap = %v, %v; want sequence %d", third, err, first[1].Sequence+1)
		}
		if err := tx.Commit(f.ctx); err != nil {
			t.Fatal(err)
		}
		if n := len(allTasks(f)); n != 3 {
			t.Errorf("topic holds %d tasks, want 3", n)
		}
	})
	t.Run("ReplaceCountsOneLiveTaskPerIdentifierAndTheActiveOnes", func(t *testing.T) {
		f := setup(t)
		configure(f, repository.TopicSettings{MaxAttempts: 1, QueueCap: 2})
		f.push(repository.Replace, "a", "a", "a") // one live task: fits
		if got := f.poll(repository.FIFO, repository.None, 1); len(got) != 1 {
			t.Fatalf("polled %d tasks, want 1", len(got))
		}
		f.push(repository.Replace, "b", "b") // the ACTIVE a and one live b: fits
		_, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Replace, repository.Creation{Identifier: "c"})
		var full *repository.QueueFullError
		if !errors.As(err, &full) || full.Cap != 2 || full.Pushed != 1 {
			t.Fatalf("third identifier: err = %v, want a *QueueFullError for cap 2 and 1 task", err)
		}
	})
	t.Run("FinishedAndSuspendedTasksDoNotCount", func(t *testing.T) {
		f := setup(t)
		configure(f, repository.TopicSettings{MaxAttempts: 1, QueueCap: 1})
		driveTo(f, "a", repository.Succeeded)
		pushOne(f, repository.Creation{Identifier: "s", Suspended: true})
		f.push(repository.Append, "b")
		if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "c"}); !errors.Is(err, repository.ErrQueueFull) {
			t.Fatalf("second READY task: err = %v, want ErrQueueFull", err)
		}
	})
}

// pushPriorities pushes one task of identifier "a" per priority and returns their sequences.
func pushPriorities(f *fixture, priorities ...int16) []int64 {
	f.t.Helper()
	s := make([]int64, len(priorities))
	for i, p := range priorities {
		s[i] = pushOne(f, repository.Creation{Identifier: "a", Priority: p}).Sequence
	}
	return s
}

func TestPollOrder(t *testing.T) {
	shared := setup(t)
	t.Run("PriorityFirstThenFIFO", func(t *testing.T) {
		f := isolated(t, shared)
		s := pushPriorities(f, 5, -1, 0, -1)
		if got, want := sequences(f.poll(repository.FIFO, repository.None, 10)), []int64{s[1], s[3], s[2], s[0]}; !slices.Equal(got, want) {
			t.Fatalf("poll = %v, want %v", got, want)
		}
	})
	t.Run("PriorityFirstThenLIFO", func(t *testing.T) {
		f := isolated(t, shared)
		s := pushPriorities(f, 5, -1, 0, -1)
		if got, want := sequences(f.poll(repository.LIFO, repository.None, 10)), []int64{s[3], s[1], s[2], s[0]}; !slices.Equal(got, want) {
			t.Fatalf("poll = %v, want %v", got, want)
		}
	})
	t.Run("LIFOTakesPriorityLevelsInTurn", func(t *testing.T) {
		f := isolated(t, shared)
		s := pushPriorities(f, 0, -1, 0, -1, 2, 0)
		// A lease that spans levels: both of -1 (newest first), then the newest of 0.
		if got, want := sequences(f.poll(repository.LIFO, repository.None, 3)), []int64{s[3], s[1], s[5]}; !slices.Equal(got, want) {
			t.Fatalf("first poll = %v, want %v", got, want)
		}
		if got, want := sequences(f.poll(repository.LIFO, repository.None, 10)), []int64{s[2], s[0], s[4]}; !slices.Equal(got, want) {
			t.Fatalf("second poll = %v, want %v", got, want)
		}
	})
	t.Run("LIFOSkipsLockedRowsAcrossLevels", func(t *testing.T) {
		f := isolated(t, shared)
		s := pushPriorities(f, -1, 0, 0)
		// Another transaction holds the newest task of level 0: the lease takes the rest.
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(f.ctx)
		if _, err := tx.Exec(f.ctx, "SELECT 1 FROM task WHERE topic = $1 AND sequence = $2 FOR UPDATE", f.topic, s[2]); err != nil {
			t.Fatal(err)
		}
		if got, want := sequences(f.poll(repository.LIFO, repository.None, 10)), []int64{s[0], s[1]}; !slices.Equal(got, want) {
			t.Fatalf("poll = %v, want %v", got, want)
		}
	})
	t.Run("SizeLimitsTheLeaseInPollOrder", func(t *testing.T) {
		f := isolated(t, shared)
		s := sequences(f.push(repository.Append, "a", "b", "c"))
		if got := sequences(f.poll(repository.FIFO, repository.None, 2)); !slices.Equal(got, s[:2]) {
			t.Fatalf("poll = %v, want %v", got, s[:2])
		}
		if got := f.poll(repository.FIFO, repository.None, 0); len(got) != 0 {
			t.Fatalf("poll size 0 = %v, want nothing", sequences(got))
		}
	})
	t.Run("NotBeforeIsRespected", func(t *testing.T) {
		f := isolated(t, shared)
		now := dbNow(f)
		delayed := pushOne(f, repository.Creation{Identifier: "a", Delay: time.Hour})
		future := pushOne(f, repository.Creation{Identifier: "b", NotBefore: now.Add(time.Hour)})
		past := pushOne(f, repository.Creation{Identifier: "c", NotBefore: now.Add(-time.Hour)})
		wantWindow(t, "delayed not-before", delayed.NotBefore, now.Add(time.Hour), dbNow(f).Add(time.Hour))
		if !future.NotBefore.Equal(now.Add(time.Hour).Truncate(time.Microsecond)) {
			t.Errorf("not-before = %v, want %v", future.NotBefore, now.Add(time.Hour))
		}
		if got := sequences(f.poll(repository.FIFO, repository.None, 10)); !slices.Equal(got, []int64{past.Sequence}) {
			t.Fatalf("poll = %v, want only the task whose time has come [%d]", got, past.Sequence)
		}
	})
	t.Run("PolledTaskIsLeasedToThisOwnerWithAttemptCounted", func(t *testing.T) {
		f := isolated(t, shared)
		f.push(repository.Append, "a")
		got := f.poll(repository.FIFO, repository.None, 10)
		if len(got) != 1 || got[0].Owner != "owner-1" || got[0].Attempt != 1 || got[0].State != repository.Active {
			t.Fatalf("poll = %+v", got)
		}
	})
}

func TestStats(t *testing.T) {
	shared := setup(t)
	t.Run("CountsTasksByState", func(t *testing.T) {
		f := isolated(t, shared)
		driveTo(f, "active", repository.Active)
		f.push(repository.Append, "r1", "r2")
		pushOne(f, repository.Creation{Identifier: "delayed", Delay: time.Hour})
		driveTo(f, "expired", repository.Expired)
		driveTo(f, "failed", repository.Failed)
		driveTo(f, "suspended", repository.Suspended)
		driveTo(f, "done", repository.Succeeded)
		got, err := f.repo.Stats(f.ctx, f.pool, f.topic)
		if err != nil {
			t.Fatalf("stats: %v", err)
		}
		got.OldestReady, got.RowsEstimate = 0, 0
		want := repository.TopicStats{Active: 1, Ready: 3, Delayed: 1, Expired: 1, Failed: 1, Suspended: 1}
		if got != want {
			t.Errorf("stats = %+v, want %+v", got, want)
		}
	})
	t.Run("UnknownTopicIsErrUnknownTopic", func(t *testing.T) {
		f := isolated(t, shared)
		if _, err := f.repo.Stats(f.ctx, f.pool, "nope"); !errors.Is(err, repository.ErrUnknownTopic) {
			t.Fatalf("err = %v, want ErrUnknownTopic", err)
		}
	})
	t.Run("RowsEstimateIsNeverBelowTheTasksCounted", func(t *testing.T) {
		// A table never analyzed estimates no row: 100 READY tasks are 100 at least.
		f := isolated(t, shared)
		ids := make([]string, 100)
		for i := range ids {
			ids[i] = fmt.Sprintf("id-%d", i)
		}
		f.push(repository.Append, ids...)
		got, err := f.repo.Stats(f.ctx, f.pool, f.topic)
		if err != nil {
			t.Fatal(err)
		}
		all, err := f.repo.StatsAll(f.ctx, f.pool, f.topic)
		if err != nil || len(all) != 1 {
			t.Fatalf("StatsAll = %v, %v", all, err)
		}
		if got.Ready != 100 || got.RowsEstimate < 100 || all[0].Stats.RowsEstimate < 100 {
			t.Errorf("stats %+v (StatsAll %+v), want 100 READY and a rows estimate of 100 at least", got, all[0].Stats)
		}
	})
}

func TestCountByState(t *testing.T) {
	shared := setup(t)
	t.Run("CountsEveryStateExactly", func(t *testing.T) {
		f := isolated(t, shared)
		driveTo(f, "active", repository.Active)
		f.push(repository.Append, "r1", "r2")
		driveTo(f, "failed", repository.Failed)
		driveTo(f, "done", repository.Succeeded)
		driveTo(f, "done-too", repository.Succeeded)
		got, err := f.repo.CountByState(f.ctx, f.pool, f.topic)
		if err != nil {
			t.Fatal(err)
		}
		want := map[repository.State]int64{repository.Active: 1, repository.Ready: 2, repository.Failed: 1, repository.Succeeded: 2}
		for _, s := range repository.States() {
			if n, ok := got[s]; !ok || n != want[s] {
				t.Errorf("%v: %d (present %v), want %d", s, n, ok, want[s])
			}
		}
	})
	t.Run("UnknownTopicIsErrUnknownTopic", func(t *testing.T) {
		f := isolated(t, shared)
		if _, err := f.repo.CountByState(f.ctx, f.pool, "nope"); !errors.Is(err, repository.ErrUnknownTopic) {
			t.Fatalf("err = %v, want ErrUnknownTopic", err)
		}
	})
}

func TestGetMany(t *testing.T) {
	f := setup(t)
	tasks := f.push(repository.Append, "a", "b", "c")
	got, err := f.repo.GetMany(f.ctx, f.pool, f.topic, tasks[2].Sequence, 999, tasks[0].Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []repository.Task{f.get(tasks[0].Sequence), f.get(tasks[2].Sequence)}) {
		t.Errorf("GetMany = %+v, want tasks %d and %d by sequence, the unknown one left out", got, tasks[0].Sequence, tasks[2].Sequence)
	}
	if none, err := f.repo.GetMany(f.ctx, f.pool, f.topic); err != nil || none != nil {
		t.Errorf("GetMany of nothing = %v, %v", none, err)
	}
	// a registered topic without those tasks is no error; an unknown one is, as for
	// the other calls that name a topic; a name no topic can have is refused unread
	if none, err := f.repo.GetMany(f.ctx, f.pool, f.topic, 999, 1000); err != nil || len(none) != 0 {
		t.Errorf("GetMany of tasks the topic lacks = %v, %v; want none and no error", none, err)
	}
	if got, err := f.repo.GetMany(f.ctx, f.pool, "nope", tasks[0].Sequence); !errors.Is(err, repository.ErrUnknownTopic) || got != nil {
		t.Errorf("GetMany of an unknown topic = %v, %v; want ErrUnknownTopic", got, err)
	}
	if got, err := f.repo.GetMany(f.ctx, f.pool, "", tasks[0].Sequence); !errors.Is(err, repository.ErrInvalid) || got != nil {
		t.Errorf("GetMany of topic \"\" = %v, %v; want ErrInvalid", got, err)
	}
}

func TestAnalyze(t *testing.T) {
	f := setup(t)
	ids := make([]string, 500)
	for i := range ids {
		ids[i] = fmt.Sprintf("id-%d", i)
	}
	f.push(repository.Append, ids...)
	rows, err := f.repo.Analyze(f.ctx, f.pool, f.topic)
	if err != nil || rows != 500 {
		t.Fatalf("Analyze = %d, %v; want 500 rows", rows, err)
	}
	// Migration 000007 samples at statistics target 10: a histogram of at most 11 bounds
	// (at the server's default of 100 the 500 distinct sequences would give 101).
	var bounds int
	if err := f.pool.QueryRow(f.ctx, `
		SELECT coalesce(array_length(s.histogram_bounds::text::text[], 1), 0)
		FROM pg_stats s JOIN task_topic tt ON s.tablename = tt.partition
		WHERE tt.topic = $1 AND s.attname = 'sequence'`, f.topic).Scan(&bounds); err != nil {
		t.Fatal(err)
	}
	if bounds < 2 || bounds > 11 {
		t.Errorf("sequence histogram has %d bounds, want 2 to 11 (statistics target 10)", bounds)
	}
	if _, err := f.repo.Analyze(f.ctx, f.pool, "no-such-topic"); !errors.Is(err, repository.ErrUnknownTopic) {
		t.Errorf("Analyze of an unknown topic: err = %v, want ErrUnknownTopic", err)
	}
}

func TestVacuum(t *testing.T) {
	f := setup(t)
	f.push(repository.Append, "a", "b")
	vacuumed := func() int64 {
		t.Helper()
		var n int64
		if err := f.pool.QueryRow(f.ctx, `SELECT s.vacuum_count FROM pg_stat_user_tables s
			JOIN task_topic tt ON s.relname = tt.partition WHERE tt.topic = $1`, f.topic).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := vacuumed()
	if err := f.repo.Vacuum(f.ctx, f.pool, f.topic); err != nil {
		t.Fatalf("Vacuum: %v", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for vacuumed() == before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := vacuumed(); got != before+1 {
		t.Errorf("vacuum_count %d after Vacuum, want %d", got, before+1)
	}
	if err := f.repo.Vacuum(f.ctx, f.pool, "no-such-topic"); !errors.Is(err, repository.ErrUnknownTopic) {
		t.Errorf("Vacuum of an unknown topic: err = %v, want ErrUnknownTopic", err)
	}
	// a user that does not own the table is told so (PostgreSQL would only warn)
	role := "pgtask_not_owner_" + strings.ReplaceAll(fmt.Sprint(time.Now().UnixNano()), "-", "")
	for _, stmt := range []string{
		"CREATE ROLE " + role,
		"GRANT SELECT ON task_topic TO " + role,
	} {
		if _, err := f.pool.Exec(f.ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(f.ctx)
		_, _ = f.pool.Exec(ctx, "REVOKE ALL ON task_topic FROM "+role)
		_, _ = f.pool.Exec(ctx, "DROP ROLE "+role)
	})
	conn, err := f.pool.Acquire(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(f.ctx, "SET ROLE "+role); err != nil {
		t.Fatal(err)
	}
	err = f.repo.Vacuum(f.ctx, conn, f.topic)
	if _, rerr := conn.Exec(f.ctx, "RESET ROLE"); rerr != nil {
		t.Fatal(rerr)
	}
	conn.Release()
	if !errors.Is(err, repository.ErrNotTableOwner) || !strings.Contains(err.Error(), "not the owner") {
		t.Errorf("Vacuum by a user that does not own the table: err = %v, want ErrNotTableOwner", err)
	}

	// VACUUM cannot run in a transaction: the error says so
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(f.ctx)
	if err := f.repo.Vacuum(f.ctx, tx, f.topic); err == nil || !strings.Contains(err.Error(), "transaction block") {
		t.Errorf("Vacuum in a transaction: err = %v, want one naming the transaction block", err)
	}
}

// TestResolveMatchesAScan: Resolve's binary search over the sequences (migration 000018)
// finds what a scan of every task finds, at each task's creation time and just around
// it, with tasks of several topics, pushed one and many per transaction, some purged
// (gaps in the sequences).
func TestResolveMatchesAScan(t *testing.T) {
	f := setup(t)
	f.createTopic("other")
	var created []time.Time
	for i := range 40 {
		topic := f.topic
		if i%3 == 0 {
			topic = "other"
		}
		n := 1 + i%4
		cs := make([]repository.Creation, n)
		for j := range cs {
			cs[j] = repository.Creation{Identifier: fmt.Sprintf("t%d-%d", i, j)}
		}
		tasks, err := f.repo.Push(f.ctx, f.pool, topic, repository.Append, cs...)
		if err != nil {
			t.Fatal(err)
		}
		created = append(created, tasks[0].Created)
	}
	// gaps: every task of some pushes deleted
	if _, err := f.pool.Exec(f.ctx, `DELETE FROM task WHERE identifier LIKE 't1%' OR identifier LIKE 't2_-%'`); err != nil {
		t.Fatal(err)
	}
	scan := func(at time.Time, preceding bool) int64 {
		var seq int64
		q := `SELECT COALESCE(min(sequence), 9223372036854775807) FROM task WHERE created >= $1`
		if preceding {
			q = `SELECT COALESCE(max(sequence), 0) FROM task WHERE created <= $1`
		}
		if err := f.pool.QueryRow(f.ctx, q, at).Scan(&seq); err != nil {
			t.Fatal(err)
		}
		return seq
	}
	checked := 0
	for _, c := range created {
		for _, at := range []time.Time{c.Add(-time.Microsecond), c, c.Add(time.Microsecond), c.Add(-time.Hour), c.Add(time.Hour)} {
			for _, preceding := range []bool{false, true} {
				got, err := f.repo.Resolve(f.ctx, f.pool, at, preceding)
				if err != nil {
					t.Fatal(err)
				}
				if want := scan(at, preceding); got != want {
					t.Fatalf("Resolve(%v, preceding %v) = %d, a scan of the tasks says %d", at, preceding, got, want)
				}
				checked++
			}
		}
	}
	t.Logf("%d resolutions checked", checked)
}

// TestOldestXmin: a snapshot held by another session is the oldest, the same at every
// look while it is held, whatever else runs; once it is gone, it is no longer.
func TestOldestXmin(t *testing.T) {
	f := setup(t)
	holder, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.WithoutCancel(f.ctx))
	if _, err := holder.Exec(f.ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	var held string
	if err := holder.QueryRow(f.ctx, "SELECT backend_xmin::text FROM pg_stat_activity WHERE pid = pg_backend_pid()").Scan(&held); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		f.push(repository.Append, fmt.Sprintf("t%d", i)) // transactions come and go
		got, err := f.repo.OldestXmin(f.ctx, f.pool, 0)
		if err != nil || got != held {
			t.Fatalf("oldest xmin = %q, %v; want the held snapshot's %q", got, err, held)
		}
	}
	// held for less than asked: it does not count
	if got, err := f.repo.OldestXmin(f.ctx, f.pool, time.Hour); err != nil || got != "" {
		t.Fatalf("oldest xmin held for an hour = %q, %v; want none", got, err)
	}
	if _, err := f.repo.OldestXmin(f.ctx, f.pool, -time.Second); !errors.Is(err, repository.ErrInvalid) {
		t.Fatalf("a negative holding time: %v, want ErrInvalid", err)
	}
	if err := holder.Rollback(f.ctx); err != nil {
		t.Fatal(err)
	}
	f.push(repository.Append, "after")
	if got, err := f.repo.OldestXmin(f.ctx, f.pool, 0); err != nil || got == held {
		t.Fatalf("oldest xmin after the snapshot went = %q, %v; want another", got, err)
	}
}

// TestDeclaredExpiryTimeout: an owner's own expiry timeout (SetExpiryTimeout), recorded
// with its row at registration and at each heartbeat, holds against another owner's
// shorter one: its leases are not taken back, its row is neither purged nor counted
// dead, until it has been silent for the longer of the two. An owner that declares none
// is dead after the other's timeout, as before schema 32.
func TestDeclaredExpiryTimeout(t *testing.T) {
	f := setup(t)
	declaring := func(owner string, timeout time.Duration) *repository.Repository {
		t.Helper()
		repo, err := repository.New(repository.Config{Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		if err := repo.SetExpiryTimeout(timeout); err != nil {
			t.Fatal(err)
		}
		if _, err := repo.RegisterOwner(f.ctx, f.pool); err != nil {
			t.Fatal(err)
		}
		return repo
	}
	slow := declaring("slow", 20*time.Second) // a processor heart-beating every 4 s
	declaring("idle", 20*time.Second)         // the same, leasing nothing
	plain := declaring("plain", 0)            // declares none
	slowTask := f.push(repository.Append, "a")[0]
	pollOne(f, slow, slowTask.Sequence)
	plainTask := f.push(repository.Append, "b")[0]
	pollOne(f, plain, plainTask.Sequence)
	if err := slow.Heartbeat(f.ctx, f.pool); err != nil { // records it again
		t.Fatal(err)
	}
	if o, _, err := slow.RegisteredOwner(f.ctx, f.pool); err != nil || o.ExpiryTimeout != 20*time.Second {
		t.Fatalf("slow's row: %+v, %v; want its expiry timeout of 20s", o, err)
	}
	// another owner (a processor heart-beating every 200 ms: a timeout of 1 s) whose
	// clock is some seconds on
	fast := func(ahead time.Duration) *repository.Repository {
		return clockedRepo(f, fmt.Sprintf("fast-%v", ahead), ahead)
	}
	live := func(r *repository.Repository) []string {
		t.Helper()
		owners, err := r.LiveOwners(f.ctx, f.pool, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, o := range owners {
			if !strings.HasPrefix(o.Name, "fast-") {
				names = append(names, o.Name)
			}
		}
		return names
	}

	at5 := fast(5 * time.Second)
	if got := live(at5); !slices.Equal(got, []string{"idle", "slow"}) {
		t.Errorf("5 s on, live owners %v, want idle and slow (plain's 1 s is over)", got)
	}
	// counted on the same terms, the caller's own owner included
	if n, err := at5.CountLiveOwners(f.ctx, f.pool, time.Second); err != nil || n != 3 {
		t.Errorf("5 s on, live owners counted = %d, %v; want 3: idle, slow and the caller", n, err)
	}
	if got, err := at5.ExpireStale(f.ctx, f.pool, time.Second); err != nil || len(got) != 1 || got[0].Expired != 1 {
		t.Fatalf("5 s on, expire stale = %+v, %v; want plain's task alone", got, err)
	}
	wantState(t, f.get(slowTask.Sequence), repository.Active, repository.Ready)
	wantState(t, f.get(plainTask.Sequence), repository.Expired, repository.Ready)
	if got, err := at5.Expire(f.ctx, f.pool, time.Second); err != nil || len(got) != 0 {
		t.Fatalf("5 s on, expire = %+v, %v; want nothing", got, err)
	}
	rowsLeft := func() []string {
		t.Helper()
		rows, err := f.pool.Query(f.ctx, `SELECT owner FROM task_owner WHERE owner NOT LIKE 'fast-%' ORDER BY owner`)
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	if _, err := at5.PurgeOwners(f.ctx, f.pool, time.Second); err != nil {
		t.Fatal(err)
	}
	if got := rowsLeft(); !slices.Equal(got, []string{"idle", "slow"}) {
		t.Fatalf("5 s on, owner rows after a purge %v, want idle and slow (plain's and owner-1's gone)", got)
	}
	statuses, err := at5.Owners(f.ctx, f.pool, time.Second, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range statuses {
		if s.Name == "slow" && (!s.Alive || s.ExpiryTimeout != 20*time.Second) {
			t.Errorf("5 s on, slow listed %+v, want alive with its timeout", s)
		}
	}

	at25 := fast(25 * time.Second)
	if got := live(at25); len(got) != 0 {
		t.Errorf("25 s on, live owners %v, want none", got)
	}
	if got, err := at25.ExpireStale(f.ctx, f.pool, time.Second); err != nil || len(got) != 1 || got[0].Expired != 1 {
		t.Fatalf("25 s on, expire stale = %+v, %v; want slow's task", got, err)
	}
	wantState(t, f.get(slowTask.Sequence), repository.Expired, repository.Ready)
	// the rows go at twice their timeout, as a processor purges at twice its own
	if _, err := at25.PurgeOwners(f.ctx, f.pool, time.Second); err != nil {
		t.Fatal(err)
	}
	if got := rowsLeft(); !slices.Equal(got, []string{"idle", "slow"}) {
		t.Fatalf("25 s on, owner rows after a purge %v, want idle and slow until 40 s", got)
	}
	if _, err := fast(45*time.Second).PurgeOwners(f.ctx, f.pool, time.Second); err != nil {
		t.Fatal(err)
	}
	if got := rowsLeft(); len(got) != 0 {
		t.Fatalf("45 s on, owner rows after a purge %v, want none", got)
	}

	if err := plain.SetExpiryTimeout(-time.Second); !errors.Is(err, repository.ErrInvalid) || !strings.Contains(err.Error(), "expiry timeout") {
		t.Errorf("a negative expiry timeout: %v, want ErrInvalid naming it", err)
	}
	// rounded up to whole milliseconds; the longest a Duration holds does not overflow
	for _, tc := range []struct{ set, want time.Duration }{
		{1500 * time.Microsecond, 2 * time.Millisecond},
		{time.Duration(math.MaxInt64), time.Duration(math.MaxInt64).Truncate(time.Millisecond)},
	} {
		if err := plain.SetExpiryTimeout(tc.set); err != nil || plain.ExpiryTimeout() != tc.want {
			t.Errorf("SetExpiryTimeout(%v): %v, declares %v; want %v", tc.set, err, plain.ExpiryTimeout(), tc.want)
		}
	}
}

// TestRecreateCopiesTheTask: a fresh copy keeps what the task was pushed with — its
// identifier, input, reference, priority and concurrency key (which a copy without it
// would take out of its key's limit and fair turn).
func TestRecreateCopiesTheTask(t *testing.T) {
	f := setup(t)
	pushed, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{
		Identifier: "a", Input: "in", Reference: "ref", Priority: 5, ConcurrencyKey: "tenant-a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, "UPDATE task SET state = 3, completed = now() WHERE sequence = $1", pushed[0].Sequence); err != nil {
		t.Fatal(err)
	}
	got, err := f.repo.Recreate(f.ctx, f.pool, f.topic, repository.RecreateAppend, pushed[0].Sequence)
	if err != nil {
		t.Fatal(err)
	}
	c := f.get(got[0].New.Sequence)
	if c.Identifier != "a" || c.Input != "in" || c.Reference != "ref" || c.Priority != 5 || c.ConcurrencyKey != "tenant-a" {
		t.Errorf("copy %+v, want identifier a, input in, reference ref, priority 5, key tenant-a", c)
	}
}

// TestOldestReadyFromAPastNotBefore: a task pushed with a not-before in the past has
// waited since its push, not since that time (it read 6.9 years for a task pushed with
// 2020-01-01); one retried waits from its retry's time, after its push.
func TestOldestReadyFromAPastNotBefore(t *testing.T) {
	f := setup(t)
	if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append,
		repository.Creation{Identifier: "past", NotBefore: time.Now().Add(-24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	s, err := f.repo.Stats(f.ctx, f.pool, f.topic)
	if err != nil {
		t.Fatal(err)
	}
	all, err := f.repo.StatsAll(f.ctx, f.pool, f.topic)
	if err != nil || len(all) != 1 {
		t.Fatalf("stats of all: %v, %v", all, err)
	}
	for name, got := range map[string]time.Duration{"Stats": s.OldestReady, "StatsAll": all[0].Stats.OldestReady} {
		if got > time.Hour {
			t.Errorf("%s: the task pushed just now has waited %v, want since its push", name, got)
		}
	}
	// a retry due an hour after the push, now past: it waits from then
	if _, err := f.pool.Exec(f.ctx, `UPDATE task SET created = now() - interval '3 hours', not_before = now() - interval '2 hours' WHERE topic = $1`, f.topic); err != nil {
		t.Fatal(err)
	}
	if s, err = f.repo.Stats(f.ctx, f.pool, f.topic); err != nil || s.OldestReady < 119*time.Minute || s.OldestReady > 121*time.Minute {
		t.Errorf("a task due 2 hours ago, pushed 3 hours ago: waited %v, %v; want 2 hours", s.OldestReady, err)
	}
}

// TestOldestReadyAfterARevive: a task reset by a revive, or released by a junction, is
// READY from then; its wait counted from its push (a day before here), so every revive
// set off the oldest-ready alert.
func TestOldestReadyAfterARevive(t *testing.T) {
	f := setup(t)
	pushed, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append,
		repository.Creation{Identifier: "reset"}, repository.Creation{Identifier: "joined", Suspended: true},
		repository.Creation{Identifier: "bulk"})
	if err != nil {
		t.Fatal(err)
	}
	// a day old: the first and the last failed, the second waits for its junction
	if _, err := f.pool.Exec(f.ctx, `UPDATE task SET created = now() - interval '1 day' WHERE topic = $1`, f.topic); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, `UPDATE task SET state = $2, completed = now() WHERE topic = $1 AND identifier IN ('reset', 'bulk')`,
		f.topic, int16(repository.Failed)); err != nil {
		t.Fatal(err)
	}
	oldest := func(what string) {
		t.Helper()
		s, err := f.repo.Stats(f.ctx, f.pool, f.topic)
		if err != nil {
			t.Fatal(err)
		}
		if s.OldestReady > time.Hour {
			t.Errorf("after %s: the oldest READY task has waited %v, want since then", what, s.OldestReady)
		}
	}
	if _, err := f.repo.Recreate(f.ctx, f.pool, f.topic, repository.Reset, pushed[0].Sequence); err != nil {
		t.Fatal(err)
	}
	oldest("a reset")
	if _, err := f.repo.RecreateState(f.ctx, f.pool, f.topic, repository.Failed, repository.Reset, 0, repository.MaxSequence, 10); err != nil {
		t.Fatal(err)
	}
	oldest("a reset by state")
	if released, err := f.repo.Junction(f.ctx, f.pool, f.topic, repository.Singular, []string{"joined"}); err != nil || len(released) != 1 {
		t.Fatalf("junction: %v, %v", released, err)
	}
	oldest("a junction")
	// a not-before still ahead stays
	if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append,
		repository.Creation{Identifier: "later", Suspended: true, NotBefore: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.repo.Junction(f.ctx, f.pool, f.topic, repository.Singular, []string{"later"}); err != nil {
		t.Fatal(err)
	}
	s, err := f.repo.Stats(f.ctx, f.pool, f.topic)
	if err != nil || s.Delayed != 1 {
		t.Errorf("a task released with its not-before an hour ahead: %d delayed (%v), want 1", s.Delayed, err)
	}
}

// TestResolveAcrossAnOpenTransaction: a task's creation time is its pushing
// transaction's start, its sequence taken when it pushes, so a transaction open while
// others push gives later sequences earlier creation times. Resolve's binary search
// then returns a boundary among those tasks, as its doc says, which need not be the
// first (or last) task a scan finds: following the long transaction's start, 3 where
// tasks 1 and 2 were created at or after it; preceding the first task's creation, 2
// where task 4 was created before it.
func TestResolveAcrossAnOpenTransaction(t *testing.T) {
	f := setup(t)
	long, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = long.Rollback(f.ctx) }()
	pushLong := func(identifier string) repository.Task {
		t.Helper()
		tasks, err := f.repo.Push(f.ctx, long, f.topic, repository.Append, repository.Creation{Identifier: identifier})
		if err != nil {
			t.Fatal(err)
		}
		return tasks[0]
	}
	// sequences 1 to 4, interleaved: the transaction's two tasks, created when it began,
	// after and before tasks pushed (and created) since on their own
	pushed := []repository.Task{f.push(repository.Append, "b")[0], pushLong("a1"), f.push(repository.Append, "c")[0], pushLong("a2")}
	if err := long.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	for i, task := range pushed {
		if task.Sequence != int64(i+1) {
			t.Fatalf("tasks %v: want sequences 1 to 4", pushed)
		}
	}
	if !pushed[1].Created.Before(pushed[0].Created) || !pushed[0].Created.Before(pushed[2].Created) || !pushed[3].Created.Equal(pushed[1].Created) {
		t.Fatalf("tasks created %v, %v, %v, %v: want the transaction's before the others'",
			pushed[0].Created, pushed[1].Created, pushed[2].Created, pushed[3].Created)
	}
	// by Resolve's doc: following, a task created at or after the time whose predecessor
	// by sequence was created before it (or is none), MaxSequence when the last task was
	// created before it; preceding, the mirror image
	boundary := func(at time.Time, preceding bool, got int64) bool {
		n := len(pushed)
		if !preceding {
			if got == repository.MaxSequence {
				return pushed[n-1].Created.Before(at)
			}
			i := slices.IndexFunc(pushed, func(task repository.Task) bool { return task.Sequence == got })
			return i >= 0 && !pushed[i].Created.Before(at) && (i == 0 || pushed[i-1].Created.Before(at))
		}
		if got == repository.MinSequence {
			return pushed[0].Created.After(at)
		}
		i := slices.IndexFunc(pushed, func(task repository.Task) bool { return task.Sequence == got })
		return i >= 0 && !pushed[i].Created.After(at) && (i == n-1 || pushed[i+1].Created.After(at))
	}
	scan := func(at time.Time, preceding bool) int64 {
		want := repository.MaxSequence
		if preceding {
			want = repository.MinSequence
		}
		for _, task := range pushed {
			switch {
			case !preceding && !task.Created.Before(at):
				return task.Sequence
			case preceding && !task.Created.After(at):
				want = task.Sequence
			}
		}
		return want
	}
	differ := 0
	for _, c := range pushed {
		for _, at := range []time.Time{c.Created.Add(-time.Hour), c.Created.Add(-time.Microsecond), c.Created,
			c.Created.Add(time.Microsecond), c.Created.Add(time.Hour)} {
			for _, preceding := range []bool{false, true} {
				got, err := f.repo.Resolve(f.ctx, f.pool, at, preceding)
				if err != nil {
					t.Fatal(err)
				}
				if !boundary(at, preceding, got) {
					t.Errorf("Resolve(%v, preceding %v) = %d: not a boundary of the creation times", at, preceding, got)
				}
				if want := scan(at, preceding); got != want {
					differ++
				}
			}
		}
	}
	t.Logf("%d resolutions differ from a scan of the tasks", differ)
}

// errInjected is the failure failNth injects.
var errInjected = errors.New("injected failure")

// failNth is a pool whose nth QueryRow of a statement containing match fails with
// errInjected, without reaching the server.
type failNth struct {
	*pgxpool.Pool
	match string
	n     int
	seen  atomic.Int64
}

func (p *failNth) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if strings.Contains(sql, p.match) && p.seen.Add(1) == int64(p.n) {
		return failedRow{}
	}
	return p.Pool.QueryRow(ctx, sql, args...)
}

// Begin returns a transaction whose QueryRow fails as the pool's does (the count is the
// pool's): on Citus each topic's expiry runs in a transaction of its own.
func (p *failNth) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := p.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &failNthTx{Tx: tx, p: p}, nil
}

type failNthTx struct {
	pgx.Tx
	p *failNth
}

func (t *failNthTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if strings.Contains(sql, t.p.match) && t.p.seen.Add(1) == int64(t.p.n) {
		return failedRow{}
	}
	return t.Tx.QueryRow(ctx, sql, args...)
}

type failedRow struct{}

func (failedRow) Scan(...any) error { return errInjected }

// TestJunctionConcurrentCompletions: two completions, each suspending one task of a
// group and declaring its SINGULAR junction, in transactions open at the same time (two
// processes, or two flushes of one): each saw the other's task not yet SUSPENDED, both
// released nothing, and the group stayed SUSPENDED for good. The second now waits for
// the first to commit, and releases the group.
func TestJunctionConcurrentCompletions(t *testing.T) {
	f := setup(t)
	f.push(repository.Append, "a", "b")
	leased, err := f.repo.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 10)
	if err != nil || len(leased) != 2 {
		t.Fatalf("poll: %v %v", leased, err)
	}
	suspendAndJoin := func(tx pgx.Tx, task repository.Task) ([]string, error) {
		if _, err := f.repo.Complete(f.ctx, tx, f.topic, task.Decide(repository.Suspend("waiting for the group"))); err != nil {
			return nil, err
		}
		return f.repo.Junction(f.ctx, tx, f.topic, repository.Singular, []string{"a", "b"})
	}
	tx1, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback(f.ctx)
	tx2, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback(f.ctx)
	if released, err := suspendAndJoin(tx1, leased[0]); err != nil || len(released) != 0 {
		t.Fatalf("the first junction: released %v, %v; want nothing (b is ACTIVE)", released, err)
	}
	type result struct {
		released []string
		err      error
	}
	second := make(chan result, 1)
	go func() {
		released, err := suspendAndJoin(tx2, leased[1])
		second <- result{released, err}
	}()
	select {
	case r := <-second:
		t.Fatalf("the second junction did not wait for the first transaction: released %v, %v", r.released, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx1.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	r := <-second
	if r.err != nil || !slices.Equal(r.released, []string{"a", "b"}) {
		t.Fatalf("the second junction: released %v, %v; want [a b]", r.released, r.err)
	}
	if err := tx2.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	for _, task := range leased {
		if got := f.get(task.Sequence); got.State != repository.Ready {
			t.Errorf("task %s is %v, want READY: the group was released", got.Identifier, got.State)
		}
	}
}

// TestPurgeRetentionSparesRevived: a finished task past its topic's retention that a
// revival holds (a reset not yet committed) is not deleted, whether the reset leaves it
// READY or it finishes again within the retention: the pass passes over it.
func TestPurgeRetentionSparesRevived(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func(f *fixture, tx pgx.Tx, seq int64)
	}{
		{"Reset", func(*fixture, pgx.Tx, int64) {}},
		{"ResetAndFinishedAgain", func(f *fixture, tx pgx.Tx, seq int64) {
			if _, err := tx.Exec(f.ctx, `UPDATE task SET state = 6, completed = now() WHERE topic = $1 AND sequence = $2`, f.topic, seq); err != nil {
				f.t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			old := finishedTasks(f, 2, "2 hours")
			if _, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.Retention = time.Hour }); err != nil {
				t.Fatal(err)
			}
			tx, err := f.pool.Begin(f.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.WithoutCancel(f.ctx))
			if _, err := f.repo.Recreate(f.ctx, tx, f.topic, repository.Reset, old[0].Sequence); err != nil {
				t.Fatal(err)
			}
			tc.after(f, tx, old[0].Sequence)
			// the pass passes over the row the revival holds, without waiting for it
			n, err := f.repo.PurgeRetention(f.ctx, f.pool, 100)
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(f.ctx); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Errorf("PurgeRetention = %d, want 1 (the task no revival held)", n)
			}
			if _, err := f.repo.Get(f.ctx, f.pool, f.topic, old[1].Sequence); !errors.Is(err, repository.ErrUnknownTask) {
				t.Errorf("the old task no revival held: %v, want it purged", err)
			}
			if _, err := f.repo.Get(f.ctx, f.pool, f.topic, old[0].Sequence); err != nil {
				t.Errorf("the revived task: %v, want it kept", err)
			}
		})
	}
}

// TestPurgeRetentionPassesAtOnce: retention passes of several processors, each taking
// the topics in its own turn, pass over the tasks another one is deleting. They locked
// them in their own orders, and when a row they both came to was held (a revival, a
// purge), the first to be let go went on into the other's topic and the two
// deadlocked, one pass failing.
func TestPurgeRetentionPassesAtOnce(t *testing.T) {
	if pgtest.OnCitus() {
		t.Skip("Citus runs no FOR UPDATE over many shards: its pass waits (TaskPurgeRetentionDistributed)")
	}
	f := setup(t)
	if _, err := f.pool.Exec(f.ctx, `SELECT task_topic_create(t) FROM unnest(array['ra', 'rb']) t;
		SELECT count(*) FROM unnest(array['ra', 'rb']) t, task_push_batch(t, array(SELECT 'i' || g FROM generate_series(1, 40) g));
		UPDATE task SET state = 6, completed = now() - interval '2 hours' WHERE topic IN ('ra', 'rb');
		UPDATE task_topic SET retention_ms = 3600000 WHERE topic IN ('ra', 'rb')`); err != nil {
		t.Fatal(err)
	}
	// a third transaction holds a task of each topic
	holder, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.WithoutCancel(f.ctx))
	if _, err := holder.Exec(f.ctx, `SELECT 1 FROM task WHERE sequence IN
		(SELECT max(sequence) FROM task WHERE topic IN ('ra', 'rb') GROUP BY topic) FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	type pass struct {
		n   int64
		err error
	}
	passes := make(chan pass, 2)
	for _, after := range []string{"ra", ""} { // rb first, then ra; ra first, then rb
		go func() {
			n, _, err := f.repo.PurgeRetentionAfter(f.ctx, f.pool, after, 100)
			passes <- pass{n, err}
		}()
	}
	// both passes are let go at once, whether they waited for the holder's rows or not
	var got []pass
	for waited := false; len(got) < 2 && !waited; {
		select {
		case p := <-passes:
			got = append(got, p)
		case <-time.After(10 * time.Millisecond):
			var waiting int
			if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%DELETE FROM task%'`).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			waited = waiting+len(got) >= 2
		}
	}
	if err := holder.Rollback(f.ctx); err != nil {
		t.Fatal(err)
	}
	for len(got) < 2 {
		got = append(got, <-passes)
	}
	var deleted int64
	for _, p := range got {
		if p.err != nil {
			t.Errorf("a retention pass failed: %v", p.err)
		}
		deleted += p.n
	}
	if deleted < 78 || deleted > 80 {
		t.Errorf("the passes deleted %d tasks, want the 78 no one held (80 if they waited)", deleted)
	}
}

// TestUpdateSettingsBesideAnOpenPush: a change of the topic's settings does not wait for
// a transaction that pushed to the topic and is still open (an application's own), nor
// hold the topic's pushes back.
func TestUpdateSettingsBesideAnOpenPush(t *testing.T) {
	f := setup(t)
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(f.ctx))
	if _, err := f.repo.Push(f.ctx, tx, f.topic, repository.Append, repository.Creation{Identifier: "open"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	if _, err := f.repo.UpdateSettings(ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.MaxAttempts = 3 }); err != nil {
		t.Fatalf("UpdateSettings beside an open push: %v", err)
	}
	if err := tx.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPushNotBeforeKeepsItsMicroseconds: the push converted a not-before time to a
// timestamp through a float of seconds, whose precision past the year 2255 is coarser
// than a microsecond: 9999-12-31T23:59:59.999999Z, the latest time a push accepts, was
// stored as the year 10000, which no JSON answer of the task can write. Both forms of
// the push (a topic without and with a queue cap) keep the time to the microsecond; on
// a Citus cluster (.ci/run) task_citus_push does too (migration 000059).
func TestPushNotBeforeKeepsItsMicroseconds(t *testing.T) {
	f := setup(t)
	f.createTopic("capped")
	if _, err := f.repo.UpdateSettings(f.ctx, f.pool, "capped", func(s *repository.TopicSettings) { s.QueueCap = 10 }); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Time{
		time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC),
		time.Date(3000, 1, 1, 0, 0, 0, 1000, time.UTC),
		time.Date(2026, 12, 7, 5, 0, 0, 123456000, time.UTC),
	} {
		for _, topic := range []string{f.topic, "capped"} {
			id := topic + at.Format(time.RFC3339Nano)
			pushed, err := f.repo.Push(f.ctx, f.pool, topic, repository.Append, repository.Creation{Identifier: id, NotBefore: at})
			if err != nil {
				t.Fatal(err)
			}
			if got := pushed[0].NotBefore; !got.Equal(at) {
				t.Errorf("%s: pushed with a not-before %s, answered %s", topic, at.Format(time.RFC3339Nano), got.UTC().Format(time.RFC3339Nano))
			}
			var stored time.Time
			if err := f.pool.QueryRow(f.ctx, "SELECT not_before FROM task WHERE topic = $1 AND identifier = $2", topic, id).Scan(&stored); err != nil {
				t.Fatal(err)
			}
			if !stored.Equal(at) {
				t.Errorf("%s: pushed with a not-before %s, stored %s", topic, at.Format(time.RFC3339Nano), stored.UTC().Format(time.RFC3339Nano))
			}
		}
	}
}

// TestPurgeAllSaysWhatItDeleted: PurgeAll on a pool deletes a shared topic's tasks in
// batches, each committed; stopped after some (its context ended while a task locked by
// another transaction held the next batch), it returned 0 and an error that said
// nothing of them. It returns their number, and the error says so.
func TestPurgeAllSaysWhatItDeleted(t *testing.T) {
	f := setup(t)
	ids := make([]string, 10_001)
	for i := range ids {
		ids[i] = fmt.Sprint(i)
	}
	tasks := f.push(repository.Append, ids...)
	holder, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(context.WithoutCancel(f.ctx)) }()
	if _, err := holder.Exec(f.ctx, "SELECT 1 FROM task WHERE topic = $1 AND sequence = $2 FOR UPDATE", f.topic, tasks[len(tasks)-1].Sequence); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(f.ctx, 3*time.Second)
	defer cancel()
	n, err := f.repo.PurgeAll(ctx, f.pool, f.topic)
	if err == nil || n != 10_000 || !strings.Contains(err.Error(), "after 10000 of its tasks were deleted, each batch committed; purge again to finish") {
		t.Fatalf("purge all stopped by its context after a batch: %d, %v; want 10000 and an error saying so", n, err)
	}
	if left := len(allTasks(f)); left != 1 {
		t.Errorf("%d tasks left, want the locked one", left)
	}
}

// TestHold: Hold refuses tasks not in the wanted states, naming each (a *TaskError), and
// holds those it accepts for the rest of the transaction: a completion elsewhere waits.
func TestHold(t *testing.T) {
	f := setup(t)
	pushed := f.push(repository.Append, "a", "b")
	suspended := func(s repository.State) bool { return s == repository.Suspended }
	err := f.repo.Hold(f.ctx, f.pool, "recreate", f.topic, suspended, "SUSPENDED", pushed[0].Sequence, pushed[1].Sequence, 999)
	var te *repository.TaskError
	if !errors.As(err, &te) || len(te.Problems) != 3 || !errors.Is(te.Problems[0].Err, repository.ErrWrongState) ||
		te.Problems[0].State != repository.Ready || !errors.Is(te.Problems[2].Err, repository.ErrUnknownTask) {
		t.Fatalf("Hold of two READY tasks and an unknown one: %v; want each named", err)
	}
	ready := func(s repository.State) bool { return s == repository.Ready }
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(f.ctx) }()
	if err := f.repo.Hold(f.ctx, tx, "recreate", f.topic, ready, "READY", pushed[0].Sequence); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(f.ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := f.pool.Exec(ctx, "UPDATE task SET state = 6 WHERE topic = $1 AND sequence = $2", f.topic, pushed[0].Sequence); err == nil {
		t.Fatal("a held task was changed by another transaction")
	}
}

// lockWatch is a Handle of a caller's own type around a pool (a wrapper that traces,
// say): before each statement whose text holds match, in a transaction it began or not,
// it runs observe.
type lockWatch struct {
	*pgxpool.Pool
	match   string
	observe func()
}

func (w *lockWatch) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if strings.Contains(sql, w.match) {
		w.observe()
	}
	return w.Pool.Query(ctx, sql, args...)
}

func (w *lockWatch) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := w.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &lockWatchTx{Tx: tx, w: w}, nil
}

type lockWatchTx struct {
	pgx.Tx
	w *lockWatch
}

func (t *lockWatchTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if strings.Contains(sql, t.w.match) {
		t.w.observe()
	}
	return t.Tx.Query(ctx, sql, args...)
}

// TestJunctionOnAWrapperOfAPool: a junction given a Handle of the caller's own type
// around a pool runs in a transaction of its own, as on the pool itself, so that its
// groups' locks are held while it looks at the group and releases it; it ran its
// statements one by one, each committing alone, the locks released before the look.
func TestJunctionOnAWrapperOfAPool(t *testing.T) {
	f := setup(t)
	suspendPair(t, f)
	held := -1
	h := &lockWatch{Pool: f.pool, match: "name: TaskJunction :many", observe: func() {
		if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND classid = 1885828202 AND granted
			  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&held); err != nil {
			t.Error(err)
		}
	}}
	released, err := f.repo.Junction(f.ctx, h, f.topic, repository.Singular, []string{"a", "b"})
	if err != nil || len(released) != 2 {
		t.Fatalf("junction: released %v, %v; want a and b", released, err)
	}
	if held != 2 {
		t.Errorf("the group's locks held while the junction looked at it: %d, want its 2 identifiers'", held)
	}
}

// connWrapper is a Handle of a caller's own type around a connection (embedding it).
type connWrapper struct{ *pgx.Conn }

// suspendPair pushes a and b and suspends them: a group a junction releases.
func suspendPair(t *testing.T, f *fixture) []repository.Task {
	t.Helper()
	f.push(repository.Append, "a", "b")
	leased, err := f.repo.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 10)
	if err != nil || len(leased) != 2 {
		t.Fatalf("poll: %v %v", leased, err)
	}
	for _, task := range leased {
		if _, err := f.repo.Complete(f.ctx, f.pool, f.topic, task.Decide(repository.Suspend("waiting for the group"))); err != nil {
			t.Fatal(err)
		}
	}
	return leased
}

// suspendedPair is suspendPair with a connection of the pool, released at the end of
// the test.
func suspendedPair(t *testing.T, f *fixture) ([]repository.Task, *pgxpool.Conn) {
	t.Helper()
	leased := suspendPair(t, f)
	conn, err := f.pool.Acquire(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	return leased, conn
}

// TestJunctionOnAWrapperInTheCallersBlock: a junction given a type of the caller's that
// embeds a connection on which the caller ran BEGIN runs inside that block, as on the
// connection itself: a transaction of its own would have sent BEGIN (a warning) and then
// COMMIT, ending the caller's block.
func TestJunctionOnAWrapperInTheCallersBlock(t *testing.T) {
	f := setup(t)
	leased, conn := suspendedPair(t, f)
	if _, err := conn.Exec(f.ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	released, err := f.repo.Junction(f.ctx, connWrapper{conn.Conn()}, f.topic, repository.Singular, []string{"a", "b"})
	if err != nil || len(released) != 2 {
		t.Fatalf("junction: released %v, %v; want a and b", released, err)
	}
	if status := conn.Conn().PgConn().TxStatus(); status != 'T' {
		t.Fatalf("the caller's block after the junction: status %q, want still open ('T')", status)
	}
	if _, err := conn.Exec(f.ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	for _, task := range leased {
		if got := f.get(task.Sequence); got.State != repository.Suspended {
			t.Errorf("task %d after the caller's rollback: %v, want SUSPENDED (the release rolled back with the block)", task.Sequence, got.State)
		}
	}
}

// connTeller is a type of the caller's around a connection that tells it only by
// Conn() (no PgConn), and records the statements its Exec runs.
type connTeller struct {
	conn  *pgx.Conn
	execs []string
}

func (w *connTeller) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	w.execs = append(w.execs, sql)
	return w.conn.Exec(ctx, sql, args...)
}

func (w *connTeller) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return w.conn.Query(ctx, sql, args...)
}

func (w *connTeller) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return w.conn.QueryRow(ctx, sql, args...)
}

func (w *connTeller) Begin(ctx context.Context) (pgx.Tx, error) { return w.conn.Begin(ctx) }

func (w *connTeller) Conn() *pgx.Conn { return w.conn }

// TestJunctionOnAWrapperUnderRepeatableReadDefault: a junction given a type of the
// caller's around an idle connection whose default_transaction_isolation is REPEATABLE
// READ runs in a READ COMMITTED transaction of its own, as on the connection itself; the
// type's Begin opened one in the default isolation, which the junction refuses.
func TestJunctionOnAWrapperUnderRepeatableReadDefault(t *testing.T) {
	f := setup(t)
	_, conn := suspendedPair(t, f)
	if _, err := conn.Exec(f.ctx, "SET default_transaction_isolation = 'repeatable read'"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(f.ctx, "RESET default_transaction_isolation")
	released, err := f.repo.Junction(f.ctx, connWrapper{conn.Conn()}, f.topic, repository.Singular, []string{"a", "b"})
	if err != nil || len(released) != 2 {
		t.Fatalf("junction: released %v, %v; want a and b", released, err)
	}
}

// TestAtomicallyLargeObjectsInTheCallersBlock: Atomically on a connection in a block the
// caller opened in SQL gives fn a transaction whose LargeObjects work (the connection's),
// as pgx's savepoint did; the repository's own savepoint returned the zero value, whose
// use panicked.
func TestAtomicallyLargeObjectsInTheCallersBlock(t *testing.T) {
	f := setup(t)
	conn, err := f.pool.Acquire(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(f.ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(f.ctx, "ROLLBACK")
	err = repository.Atomically(f.ctx, conn.Conn(), func(tx pgx.Tx) error {
		lo := tx.LargeObjects()
		_, err := lo.Create(f.ctx, 0)
		return err
	})
	if err != nil || conn.Conn().PgConn().TxStatus() != 'T' {
		t.Fatalf("a large object made in Atomically: %v; the caller's block %q, want still open", err, conn.Conn().PgConn().TxStatus())
	}
}

// TestAllOrNothingInTheCallersBlock: an operation of several statements (a completion,
// all or nothing) on a connection on which the caller ran BEGIN, or on a type of the
// caller's around one (embedding it, or telling it by Conn()), runs under a savepoint of
// that block, its statements through the type: a refusal leaves the block usable, and the
// caller's ROLLBACK takes back what it wrote. On the types, it sent BEGIN (a warning)
// and then COMMIT, ending the caller's block. An operation refused inside Atomically,
// given the caller's handle again, does not keep what Atomically wrote from its rollback
// (on the connection, pgx named both savepoints sp_1, and the outer rollback went back
// to the inner one); and a block already failed is answered with its error, left as it
// is for the caller to end.
func TestAllOrNothingInTheCallersBlock(t *testing.T) {
	handles := []struct {
		name string
		wrap func(*pgx.Conn) repository.Handle
	}{
		{"Connection", func(c *pgx.Conn) repository.Handle { return c }},
		{"Embedding", func(c *pgx.Conn) repository.Handle { return connWrapper{c} }},
		{"TellingByConn", func(c *pgx.Conn) repository.Handle { return &connTeller{conn: c} }},
	}
	for _, hc := range handles {
		t.Run(hc.name, func(t *testing.T) {
			f := setup(t)
			f.push(repository.Append, "a", "c")
			leased, err := f.repo.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 10)
			if err != nil || len(leased) != 2 {
				t.Fatalf("poll: %v %v", leased, err)
			}
			pooled, err := f.pool.Acquire(f.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer pooled.Release()
			conn := pooled.Conn()
			h := hc.wrap(conn)
			status := func() byte { return conn.PgConn().TxStatus() }
			if _, err := conn.Exec(f.ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			wrong := leased[0].Decide(repository.Succeed("done"))
			wrong.Attempt++
			if _, err := f.repo.Complete(f.ctx, h, f.topic, wrong); !errors.Is(err, repository.ErrNotOwned) {
				t.Fatalf("completion of another attempt: %v, want ErrNotOwned", err)
			}
			if s := status(); s != 'T' {
				t.Fatalf("the caller's block after a refused completion: status %q, want still open and usable ('T')", s)
			}
			if _, err := f.repo.Complete(f.ctx, h, f.topic, leased[0].Decide(repository.Succeed("done"))); err != nil {
				t.Fatal(err)
			}
			if s := status(); s != 'T' {
				t.Fatalf("the caller's block after the completion: status %q, want still open ('T')", s)
			}
			if got, err := f.repo.Get(f.ctx, conn, f.topic, leased[0].Sequence); err != nil || got.State != repository.Succeeded {
				t.Fatalf("task in the caller's block: %v %v, want SUCCEEDED", got.State, err)
			}
			if teller, ok := h.(*connTeller); ok && !slices.ContainsFunc(teller.execs, func(sql string) bool { return strings.HasPrefix(sql, "SAVEPOINT ") }) {
				t.Errorf("the savepoints did not go through the caller's type: its statements %q", teller.execs)
			}

			// Atomically writes, then an operation inside it on the caller's handle is
			// refused (one of its two tasks qualifies, so its statement wrote and was
			// rolled back to its savepoint): Atomically's rollback takes back its own
			// write too
			var pushed []repository.Task
			err = repository.Atomically(f.ctx, h, func(tx pgx.Tx) error {
				var err error
				if pushed, err = f.repo.Push(f.ctx, tx, f.topic, repository.Append, repository.Creation{Identifier: "b"}); err != nil {
					return err
				}
				_, err = f.repo.Complete(f.ctx, h, f.topic, leased[1].Decide(repository.Succeed("done")), wrong)
				return err
			})
			if !errors.Is(err, repository.ErrWrongState) || len(pushed) != 1 {
				t.Fatalf("Atomically: pushed %v, %v; want one push, then ErrWrongState (the task is SUCCEEDED in the block)", pushed, err)
			}
			if got, err := f.repo.Get(f.ctx, conn, f.topic, leased[1].Sequence); err != nil || got.State != repository.Active {
				t.Errorf("the task the refused completion named first: %v %v, want ACTIVE", got.State, err)
			}
			if _, err := f.repo.Get(f.ctx, conn, f.topic, pushed[0].Sequence); !errors.Is(err, repository.ErrUnknownTask) {
				t.Errorf("the task Atomically pushed before its refusal, in the caller's block: %v, want rolled back (ErrUnknownTask)", err)
			}
			if s := status(); s != 'T' {
				t.Fatalf("the caller's block after Atomically: status %q, want still open ('T')", s)
			}

			if _, err := conn.Exec(f.ctx, "ROLLBACK"); err != nil {
				t.Fatal(err)
			}
			if got := f.get(leased[0].Sequence); got.State != repository.Active {
				t.Errorf("task after the caller's rollback: %v, want ACTIVE (the completion rolled back with the block)", got.State)
			}

			// a block the caller's failed statement aborted
			if _, err := conn.Exec(f.ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(f.ctx, "SELECT 1/0"); err == nil {
				t.Fatal("1/0 did not fail")
			}
			if _, err := f.repo.Complete(f.ctx, h, f.topic, leased[0].Decide(repository.Succeed("done"))); repository.SQLState(err) != "25P02" {
				t.Errorf("completion in an aborted block: %v, want the server's 25P02 (in failed SQL transaction)", err)
			}
			if s := status(); s != 'E' {
				t.Fatalf("the caller's aborted block after the completion: status %q, want still there ('E')", s)
			}
			if _, err := conn.Exec(f.ctx, "ROLLBACK"); err != nil {
				t.Fatal(err)
			}

			// outside a block, the statements commit as the connection's do
			if _, err := f.repo.Complete(f.ctx, h, f.topic, leased[0].Decide(repository.Succeed("done"))); err != nil {
				t.Fatal(err)
			}
			if got := f.get(leased[0].Sequence); got.State != repository.Succeeded {
				t.Errorf("task completed outside a block: %v, want SUCCEEDED", got.State)
			}
		})
	}
}

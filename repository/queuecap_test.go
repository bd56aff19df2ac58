package repository_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/repository"
)

// The queue cap (TopicSettings.QueueCap) holds for every operation that makes tasks
// READY, each refused whole beyond it; TestQueueCap has the push's basics (and checks
// that a refused push takes no sequence, which a push on Citus does).

// capped is an isolated topic of shared with the queue cap given and one attempt per task.
func capped(t *testing.T, shared *fixture, queueCap int64) *fixture {
	t.Helper()
	f := isolated(t, shared)
	configure(f, repository.TopicSettings{MaxAttempts: 1, QueueCap: queueCap})
	return f
}

// wantQueueFull checks that err is a *QueueFullError of op in f's topic, for cap and
// pushed tasks, that its text names the operation and that it matches ErrQueueFull.
func wantQueueFull(f *fixture, err error, op string, queueCap int64, pushed int) {
	f.t.Helper()
	var full *repository.QueueFullError
	if !errors.As(err, &full) || !errors.Is(err, repository.ErrQueueFull) {
		f.t.Fatalf("err = %v, want a *QueueFullError", err)
	}
	if full.Op != op || full.Topic != f.topic || full.Cap != queueCap || full.Pushed != pushed {
		f.t.Errorf("err = %+v, want op %q, topic %q, cap %d, %d tasks", *full, op, f.topic, queueCap, pushed)
	}
	if !strings.HasPrefix(err.Error(), op+" ") {
		f.t.Errorf("err says %q, want it to start with the operation %q", err, op)
	}
}

// refusedInTx runs refused in a transaction of f's pool and checks its error is a
// *QueueFullError of op for cap and pushed; then within, in the same transaction, which
// the refusal left usable. The transaction is rolled back.
func refusedInTx(f *fixture, op string, queueCap int64, pushed int, refused, within func(tx pgx.Tx) error) {
	f.t.Helper()
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	defer tx.Rollback(f.ctx)
	wantQueueFull(f, refused(tx), op, queueCap, pushed)
	if err := within(tx); err != nil {
		f.t.Fatalf("%s within the cap, in the transaction of the refused one: %v", op, err)
	}
}

// wantStates checks the states of f's tasks, in sequence order.
func wantStates(f *fixture, want ...repository.State) {
	f.t.Helper()
	var got []repository.State
	for _, task := range allTasks(f) {
		got = append(got, task.State)
	}
	if !slices.Equal(got, want) {
		f.t.Errorf("states %v, want %v", got, want)
	}
}

func TestQueueCapRecreate(t *testing.T) {
	shared := setup(t)
	for _, mode := range []repository.RecreateMode{repository.RecreateAppend, repository.RecreateReplace, repository.RecreateSupersede} {
		// a READY x and two FAILED tasks under a cap of 2: one copy fits, two do not
		arrange := func(f *fixture) (a, b repository.Task) {
			f.push(repository.Append, "x")
			return driveTo(f, "a", repository.Failed), driveTo(f, "b", repository.Failed)
		}
		t.Run("ByTaskIsRefusedWhole/"+mode.String(), func(t *testing.T) {
			f := capped(t, shared, 2)
			a, b := arrange(f)
			refusedInTx(f, "recreate", 2, 2, func(tx pgx.Tx) error {
				_, err := f.repo.Recreate(f.ctx, tx, f.topic, mode, a.Sequence, b.Sequence)
				return err
			}, func(tx pgx.Tx) error {
				_, err := f.repo.Recreate(f.ctx, tx, f.topic, mode, a.Sequence)
				return err
			})
			wantStates(f, repository.Ready, repository.Failed, repository.Failed) // nothing marked nor pushed
		})
		t.Run("ByStateIsRefusedWhole/"+mode.String(), func(t *testing.T) {
			f := capped(t, shared, 2)
			arrange(f)
			_, err := f.repo.RecreateState(f.ctx, f.pool, f.topic, repository.Failed, mode, 0, repository.MaxSequence, 10)
			wantQueueFull(f, err, "recreate", 2, 2)
			wantStates(f, repository.Ready, repository.Failed, repository.Failed)
			if got, err := f.repo.RecreateState(f.ctx, f.pool, f.topic, repository.Failed, mode, 0, repository.MaxSequence, 1); err != nil || len(got) != 1 {
				t.Fatalf("one copy within the cap: %+v, %v", got, err)
			}
		})
	}
}

func TestQueueCapReset(t *testing.T) {
	shared := setup(t)
	// a READY x and two FAILED tasks under a cap of 2: one reset fits, two do not
	arrange := func(f *fixture) (a, b repository.Task) {
		f.push(repository.Append, "x")
		return driveTo(f, "a", repository.Failed), driveTo(f, "b", repository.Failed)
	}
	t.Run("ByTaskIsRefusedWhole", func(t *testing.T) {
		f := capped(t, shared, 2)
		a, b := arrange(f)
		refusedInTx(f, "reset", 2, 2, func(tx pgx.Tx) error {
			_, err := f.repo.Recreate(f.ctx, tx, f.topic, repository.Reset, a.Sequence, b.Sequence)
			return err
		}, func(tx pgx.Tx) error {
			_, err := f.repo.Recreate(f.ctx, tx, f.topic, repository.Reset, b.Sequence)
			return err
		})
		wantStates(f, repository.Ready, repository.Failed, repository.Failed) // nothing reset
	})
	t.Run("ByStateIsRefusedWhole", func(t *testing.T) {
		f := capped(t, shared, 2)
		arrange(f)
		_, err := f.repo.RecreateState(f.ctx, f.pool, f.topic, repository.Failed, repository.Reset, 0, repository.MaxSequence, 10)
		wantQueueFull(f, err, "reset", 2, 2)
		wantStates(f, repository.Ready, repository.Failed, repository.Failed)
		if got, err := f.repo.RecreateState(f.ctx, f.pool, f.topic, repository.Failed, repository.Reset, 0, repository.MaxSequence, 1); err != nil || len(got) != 1 {
			t.Fatalf("one reset within the cap: %+v, %v", got, err)
		}
		wantStates(f, repository.Ready, repository.Ready, repository.Failed)
	})
	t.Run("ActiveTasksCountAndOthersDoNot", func(t *testing.T) {
		f := capped(t, shared, 2)
		a, c := driveTo(f, "a", repository.Failed), driveTo(f, "c", repository.Expired)
		suspended(f, "s")
		f.push(repository.Append, "x")
		f.poll(repository.FIFO, repository.None, 1)                            // x
		onTopic(t, f, f.topic+"/other").push(repository.Append, "a", "b", "c") // another topic's
		if _, err := f.repo.Recreate(f.ctx, f.pool, f.topic, repository.Reset, a.Sequence); err != nil {
			t.Fatalf("reset to the cap: %v", err)
		}
		_, err := f.repo.RecreateState(f.ctx, f.pool, f.topic, repository.Expired, repository.Reset, 0, repository.MaxSequence, 10)
		wantQueueFull(f, err, "reset", 2, 1)
		wantUnchanged(f, c)
	})
}

func TestQueueCapJunction(t *testing.T) {
	shared := setup(t)
	t.Run("IsRefusedWhole", func(t *testing.T) {
		f := capped(t, shared, 2)
		f.push(repository.Append, "x")
		suspended(f, "a", "b")
		refusedInTx(f, "junction", 2, 2, func(tx pgx.Tx) error {
			_, err := f.repo.Junction(f.ctx, tx, f.topic, repository.Singular, []string{"a", "b"})
			return err
		}, func(tx pgx.Tx) error {
			got, err := f.repo.Junction(f.ctx, tx, f.topic, repository.Singular, []string{"b"})
			if err == nil && !slices.Equal(got, []string{"b"}) {
				err = fmt.Errorf("released %v, want [b]", got)
			}
			return err
		})
		wantStates(f, repository.Ready, repository.Suspended, repository.Suspended) // nothing released
	})
	t.Run("EveryGroupAndEveryTaskCounts", func(t *testing.T) {
		f := capped(t, shared, 3)
		suspended(f, "a", "b", "b", "c")
		_, err := f.repo.Junction(f.ctx, f.pool, f.topic, repository.Singular, []string{"a"}, []string{"b"}, []string{"c"}, []string{"d"})
		wantQueueFull(f, err, "junction", 3, 4)
		wantStates(f, repository.Suspended, repository.Suspended, repository.Suspended, repository.Suspended)
		if got, err := f.repo.Junction(f.ctx, f.pool, f.topic, repository.Singular, []string{"a"}, []string{"b"}); err != nil || !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("releases within the cap: %v, %v", got, err)
		}
	})
	t.Run("EternalAtTheCap", func(t *testing.T) {
		f := capped(t, shared, 1)
		driveTo(f, "done", repository.Succeeded)
		suspended(f, "a")
		active := driveTo(f, "x", repository.Active)
		_, err := f.repo.Junction(f.ctx, f.pool, f.topic, repository.Eternal, []string{"a", "done"})
		wantQueueFull(f, err, "junction", 1, 1)
		f.complete(repository.Succeed("done"), active)
		if got, err := f.repo.Junction(f.ctx, f.pool, f.topic, repository.Eternal, []string{"a", "done"}); err != nil || !slices.Equal(got, []string{"a"}) {
			t.Fatalf("the release once the ACTIVE task completed: %v, %v", got, err)
		}
	})
}

// lockElsewhere locks task sequence of f's topic FOR UPDATE in a transaction of its own
// until the test ends: a push then skips it (SKIP LOCKED).
func lockElsewhere(f *fixture, sequence int64) {
	f.t.Helper()
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(f.ctx)) })
	if _, err := tx.Exec(f.ctx, "SELECT 1 FROM task WHERE topic = $1 AND sequence = $2 FOR UPDATE", f.topic, sequence); err != nil {
		f.t.Fatal(err)
	}
}

func TestQueueCapCountsReplacingPushesNet(t *testing.T) {
	shared := setup(t)
	for _, tc := range []struct {
		insertion repository.Insertion
		ended     repository.State // what becomes of the READY task replaced; Ready: deleted
	}{
		{repository.Replace, repository.Redundant},
		{repository.Supersede, repository.Redundant},
		{repository.Delete, repository.Ready},
	} {
		t.Run("AFullTopicTakesAPushThatEndsAsManyAsItAdds/"+tc.insertion.String(), func(t *testing.T) {
			f := capped(t, shared, 2)
			f.push(repository.Append, "a", "b")
			f.push(tc.insertion, "a", "b", "a")
			if tc.ended == repository.Ready {
				wantStates(f, repository.Ready, repository.Ready) // the old a and b deleted
			} else {
				wantStates(f, tc.ended, tc.ended, repository.Redundant, repository.Ready, repository.Ready)
			}
			if _, err := f.repo.Push(f.ctx, f.pool, f.topic, tc.insertion, repository.Creation{Identifier: "c"}); err == nil {
				t.Fatal("a push that ends no READY task went above the cap")
			}
		})
	}
	t.Run("OnlyTheReadyTasksItEndsCount", func(t *testing.T) {
		// an ACTIVE a is kept, a FAILED b made REDUNDANT: neither leaves the count
		f := capped(t, shared, 3)
		driveTo(f, "b", repository.Failed)
		f.push(repository.Append, "a", "c")
		f.poll(repository.FIFO, repository.None, 1) // a
		_, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Replace,
			repository.Creation{Identifier: "a"}, repository.Creation{Identifier: "b"}, repository.Creation{Identifier: "c"})
		wantQueueFull(f, err, "push", 3, 3) // ACTIVE a, READY c, three added, one ended: 4
		wantStates(f, repository.Failed, repository.Active, repository.Ready)
		f.push(repository.Replace, "a", "c") // ACTIVE a, two added, READY c ended: 3
		wantStates(f, repository.Failed, repository.Active, repository.Redundant, repository.Ready, repository.Ready)
	})
	t.Run("ATopicAboveALoweredCapTakesWhatDoesNotGrowIt", func(t *testing.T) {
		f := capped(t, shared, 3)
		f.push(repository.Append, "a", "b", "c")
		configure(f, repository.TopicSettings{MaxAttempts: 1, QueueCap: 1})
		f.push(repository.Replace, "a")
		suspended(f, "s")
		_, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Replace, repository.Creation{Identifier: "d"})
		wantQueueFull(f, err, "push", 1, 1)
	})
	t.Run("AReadyTaskLockedElsewhereIsNotEndedNorCounted", func(t *testing.T) {
		f := capped(t, shared, 1)
		a := f.push(repository.Append, "a")[0]
		lockElsewhere(f, a.Sequence)
		_, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Replace, repository.Creation{Identifier: "a"})
		wantQueueFull(f, err, "push", 1, 1)
		wantStates(f, repository.Ready)
	})
	t.Run("ARecreateCountsItsCopiesNet", func(t *testing.T) {
		f := capped(t, shared, 1)
		failed := driveTo(f, "a", repository.Failed)
		f.push(repository.Append, "a")
		if _, err := f.repo.Recreate(f.ctx, f.pool, f.topic, repository.RecreateReplace, failed.Sequence); err != nil {
			t.Fatalf("a copy that replaces the READY a: %v", err)
		}
		wantStates(f, repository.Recreated, repository.Redundant, repository.Ready)
	})
}

// TestSQLPushCountsReplacingPushesNet: task_push_batch (and task_push) count a replacing
// push net of the READY tasks it ends, as the Go push (migration 000037).
func TestSQLPushCountsReplacingPushesNet(t *testing.T) {
	shared := setup(t)
	exec := func(f *fixture, query string, args ...any) error {
		_, err := f.pool.Exec(f.ctx, query, append([]any{f.topic}, args...)...)
		return err
	}
	for _, mode := range []string{"replace", "supersede", "delete"} {
		t.Run("AFullTopicTakesAPushThatEndsAsManyAsItAdds/"+mode, func(t *testing.T) {
			f := capped(t, shared, 2)
			f.push(repository.Append, "a", "b")
			if err := exec(f, "SELECT task_push_batch($1, '{a,b,a}', insertion => $2)", mode); err != nil {
				t.Fatalf("task_push_batch %s of a and b: %v", mode, err)
			}
			if err := exec(f, "SELECT task_push($1, 'b', insertion => $2)", mode); err != nil {
				t.Fatalf("task_push %s of b: %v", mode, err)
			}
			wantPgError(t, exec(f, "SELECT task_push($1, 'c', insertion => $2)", mode), "PT004", "queue cap of 2", "push of 1")
		})
	}
	t.Run("OnlyTheReadyTasksItEndsCount", func(t *testing.T) {
		f := capped(t, shared, 2)
		f.push(repository.Append, "a", "b")
		f.poll(repository.FIFO, repository.None, 1) // a
		wantPgError(t, exec(f, "SELECT task_push_batch($1, '{a}', insertion => 'replace')"), "PT004", "queue cap of 2", "push of 1")
		wantStates(f, repository.Active, repository.Ready)
	})
	t.Run("ATopicAboveALoweredCapTakesWhatDoesNotGrowIt", func(t *testing.T) {
		f := capped(t, shared, 3)
		f.push(repository.Append, "a", "b", "c")
		configure(f, repository.TopicSettings{MaxAttempts: 1, QueueCap: 1})
		for _, q := range []string{
			"SELECT task_push_batch($1, '{a,b}', insertion => 'supersede')",
			"SELECT task_push($1, 's', suspended => true)",
		} {
			if err := exec(f, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		wantPgError(t, exec(f, "SELECT task_push($1, 'd', insertion => 'replace')"), "PT004", "queue cap of 1")
	})
	t.Run("AReadyTaskLockedElsewhereIsNotEndedNorCounted", func(t *testing.T) {
		f := capped(t, shared, 1)
		lockElsewhere(f, f.push(repository.Append, "a")[0].Sequence)
		wantPgError(t, exec(f, "SELECT task_push($1, 'a', insertion => 'replace')"), "PT004", "queue cap of 1")
		wantStates(f, repository.Ready)
	})
}

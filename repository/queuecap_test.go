package repository_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

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
			tx, err := f.pool.Begin(f.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(f.ctx)
			_, err = f.repo.Recreate(f.ctx, tx, f.topic, mode, a.Sequence, b.Sequence)
			wantQueueFull(f, err, "recreate", 2, 2)
			// the caller's transaction is usable, and nothing was marked or pushed
			if _, err := f.repo.Recreate(f.ctx, tx, f.topic, mode, a.Sequence); err != nil {
				t.Fatalf("one copy within the cap, in the same transaction: %v", err)
			}
			if err := tx.Rollback(f.ctx); err != nil {
				t.Fatal(err)
			}
			wantStates(f, repository.Ready, repository.Failed, repository.Failed)
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

package processor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/faultproxy"
	"github.com/pgtask/pgtask/internal/logbuf"
	"github.com/pgtask/pgtask/internal/victim"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// TestVictimProcess is not a test of its own: TestCrash runs the test binary again as the
// victim processor (internal/victim), which completes 25 tasks and then hangs in the
// middle of a batch until it is killed.
func TestVictimProcess(t *testing.T) { victim.Run(t) }

func TestCrash(t *testing.T) {
	t.Run("KilledProcessorsTasksComeBackAndAreProcessedOnce", func(t *testing.T) {
		f := setup(t)
		if _, err := f.repo.Configure(f.ctx, f.pool, f.topic, repository.TopicSettings{
			MaxAttempts: 3, BackoffBase: time.Millisecond, BackoffCap: time.Millisecond,
		}); err != nil {
			t.Fatal(err)
		}
		const n = 200
		f.pushN(n)

		victim.Kill(t, "TestVictimProcess", victim.Config{URL: f.url, Topic: f.topic, HangAfter: 25, BatchSize: 10,
			PauseInterval: time.Hour})
		// A statement the victim sent just before dying may still commit: wait until
		// its server backends are gone.
		f.eventually("the victim's connections closed", func() bool {
			var n int
			if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'victim'").Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n == 0
		})

		// What the victim holds now: ACTIVE leases that nobody will complete.
		victimActive := f.activeOf("victim")
		if len(victimActive) == 0 {
			t.Fatal("victim held no ACTIVE task when killed")
		}

		var (
			mu      sync.Mutex
			handled = make(map[int64]int)
		)
		survivor, _ := f.processor("survivor", processor.Config{ExpiryTimeout: 500 * time.Millisecond},
			processor.ManagerConfig{BatchSize: 10, Handler: processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
				mu.Lock()
				handled[task.Sequence]++
				mu.Unlock()
				return repository.Succeed("survivor")
			})})
		f.start(survivor)
		f.eventually("every task succeeded", func() bool { return f.count(repository.Succeeded) == n })

		tasks, err := f.repo.Page(f.ctx, f.pool, f.topic, repository.TaskFilter{}, 0, n, repository.Forward)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, task := range tasks {
			switch task.Owner {
			case "victim":
				if handled[task.Sequence] != 0 {
					t.Errorf("task %d completed by the victim was handled again by the survivor", task.Sequence)
				}
			case "survivor":
				if handled[task.Sequence] != 1 {
					t.Errorf("task %d handled %d times by the survivor, want 1", task.Sequence, handled[task.Sequence])
				}
			default:
				t.Errorf("task %d completed by unexpected owner %q", task.Sequence, task.Owner)
			}
		}
		for _, lease := range victimActive {
			if handled[lease.Sequence] != 1 {
				t.Errorf("task %d leased by the victim was not processed once by the survivor", lease.Sequence)
			}
		}

		// A late completion under the dead owner's lease cannot land.
		ghost, err := repository.New(repository.Config{Owner: "victim"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = ghost.Complete(f.ctx, f.pool, f.topic, victimActive[0].Decide(repository.Fail(errors.New("late"))))
		var te *repository.TaskError
		if !errors.As(err, &te) {
			t.Fatalf("late completion by the dead owner: err = %v, want a *TaskError", err)
		}
		if got := f.get(victimActive[0].Sequence); got.State != repository.Succeeded || got.Owner != "survivor" {
			t.Fatalf("after the late completion the task is %v by %q, want SUCCEEDED by survivor", got.State, got.Owner)
		}
	})
}

func TestLiveness(t *testing.T) {
	t.Run("HeartbeatsGoOnWhileMaintenanceIsStuck", func(t *testing.T) {
		// Maintenance (expiry, purges, ANALYZE) can take longer than a heartbeat
		// interval on a loaded server; the heartbeat must not wait for it, or other
		// processors take back the leases of one that is still working.
		f := setup(t)
		p, _ := f.processor("stuck", processor.Config{HeartbeatInterval: 50 * time.Millisecond})
		stop := f.start(p)
		defer stop()
		beat := func() time.Time {
			var at *time.Time // NULL until Run has registered the owner
			if err := f.pool.QueryRow(f.ctx, "SELECT max(heartbeat) FROM task_owner WHERE owner = 'stuck'").Scan(&at); err != nil {
				t.Fatalf("read heartbeat: %v", err)
			}
			if at == nil {
				return time.Time{}
			}
			return *at
		}
		f.eventually("first heartbeat", func() bool { return !beat().IsZero() })
		// Expiry, the first step of maintenance, waits for this lock on task; heartbeats
		// only touch task_owner.
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(f.ctx)
		if _, err := tx.Exec(f.ctx, "LOCK TABLE task IN ACCESS EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
		// the maintenance loop blocked: a session of the processor waits for the lock
		f.eventually("maintenance waiting for the lock on task", func() bool {
			var waiting int
			if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			return waiting > 0
		})
		// several heartbeats meanwhile, not one that was under way
		for i := range 3 {
			before := beat()
			f.eventually(fmt.Sprintf("heartbeat %d while maintenance waits for the lock", i+1), func() bool { return beat().After(before) })
		}
		if err := tx.Rollback(f.ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("DeadOwnersArePurged", func(t *testing.T) {
		f := setup(t)
		ghost, err := repository.New(repository.Config{Owner: "ghost", Now: func() time.Time { return time.Now().Add(-time.Hour) }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ghost.RegisterOwner(f.ctx, f.pool); err != nil {
			t.Fatal(err)
		}
		p, _ := f.processor("alive", processor.Config{ExpiryTimeout: 500 * time.Millisecond})
		f.start(p)
		f.eventually("ghost purged", func() bool {
			return errors.Is(ghost.Heartbeat(f.ctx, f.pool), repository.ErrNotRegistered)
		})
		live, err := ghost.LiveOwners(f.ctx, f.pool, time.Hour*2)
		if err != nil {
			t.Fatal(err)
		}
		if len(live) != 1 || live[0].Name != "alive" {
			t.Fatalf("live owners %+v, want only alive", live)
		}
	})
}

// activeOf lists the ACTIVE tasks leased by owner.
func (f *fixture) activeOf(owner string) []repository.Task {
	f.t.Helper()
	active := repository.Active
	tasks, err := f.repo.Page(f.ctx, f.pool, f.topic, repository.TaskFilter{State: &active}, 0, 100000, repository.Forward)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []repository.Task
	for _, t := range tasks {
		if t.Owner == owner {
			out = append(out, t)
		}
	}
	return out
}

// get reads one task of the fixture's topic.
func (f *fixture) get(sequence int64) repository.Task {
	f.t.Helper()
	task, err := f.repo.Get(f.ctx, f.pool, f.topic, sequence)
	if err != nil {
		f.t.Fatal(err)
	}
	return task
}

func TestRetention(t *testing.T) {
	t.Run("FinishedTasksPastRetentionArePurged", func(t *testing.T) {
		f := setup(t)
		if _, err := f.repo.Configure(f.ctx, f.pool, f.topic, repository.TopicSettings{MaxAttempts: 1, Retention: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		finished := make(done, 10)
		p, _ := f.processor("worker", processor.Config{RetentionInterval: 50 * time.Millisecond},
			processor.ManagerConfig{Handler: finished.handler(0)})
		f.start(p)
		tasks := f.pushN(1)
		finished.wait(t, tasks[0].Sequence, 10*time.Second)
		f.eventually("finished task purged", func() bool {
			_, err := f.repo.Get(f.ctx, f.pool, f.topic, tasks[0].Sequence)
			return errors.Is(err, repository.ErrUnknownTask)
		})
	})
}

// TestOwnerNameReused: a process that leased tasks dies and a new one starts under the
// same fixed owner name before the leases expire. The new process would heart-beat the
// row, so nobody would ever expire those leases: once the row has been silent for the
// expiry timeout, it takes the row over (it names this process now) and the leases back
// as a dead owner's, in every topic (the attempt counts), and runs those of its own topic
// again. The processor's own expiry never takes its own owner's leases: only the start
// does.
func TestOwnerNameReused(t *testing.T) {
	f := setup(t)
	if _, err := f.repo.Configure(f.ctx, f.pool, f.topic, repository.TopicSettings{
		MaxAttempts: 3, BackoffBase: time.Millisecond, BackoffCap: time.Millisecond,
	}); err != nil {
		t.Fatal(err)
	}
	f.createTopic("other", 1) // not managed by the new process
	f.pushN(3)
	if _, err := f.repo.Push(f.ctx, f.pool, "other", repository.Append, repository.Creation{Identifier: "x"}); err != nil {
		t.Fatal(err)
	}
	crashed, err := repository.New(repository.Config{Owner: "pod-0", Host: "elsewhere.example", PID: 4242})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crashed.RegisterOwner(f.ctx, f.pool); err != nil {
		t.Fatal(err)
	}
	leased, err := crashed.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 2)
	if err != nil || len(leased) != 2 {
		t.Fatalf("the crashed process's poll: %d tasks, %v", len(leased), err)
	}
	other, err := crashed.Poll(f.ctx, f.pool, "other", repository.FIFO, repository.None, 1)
	if err != nil || len(other) != 1 {
		t.Fatalf("the crashed process's poll of other: %d tasks, %v", len(other), err)
	}
	runs := newRunBook()
	var logs logbuf.Buffer
	// An expiry timeout the start is sure to begin within, from the heartbeat just
	// before it: with 500 ms a loaded machine (a CI run under -race) started the
	// processor after the row had been silent that long, and it took the leases back
	// at once, rightly, without the wait this test looks for.
	p, _ := f.processor("pod-0", processor.Config{ExpiryTimeout: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		processor.ManagerConfig{Handler: processor.TaskFunc(runs.handle)})
	if err := crashed.Heartbeat(f.ctx, f.pool); err != nil {
		t.Fatal(err)
	}
	f.start(p)
	f.eventually("every task succeeded", func() bool { return f.count(repository.Succeeded) == 3 })
	runs.mu.Lock()
	defer runs.mu.Unlock()
	for _, task := range leased {
		if got := f.get(task.Sequence); runs.runs[task.Sequence] != 1 || got.Attempt != 2 {
			t.Errorf("task %d leased by the crashed process: handled %d times, attempt %d; want once, in attempt 2",
				task.Sequence, runs.runs[task.Sequence], got.Attempt)
		}
	}
	if got, err := f.repo.Get(f.ctx, f.pool, "other", other[0].Sequence); err != nil || got.State != repository.Expired {
		t.Errorf("the crashed process's task of other: %v, %v; want EXPIRED (one attempt)", got.State, err)
	}
	var host string
	var pid int
	if err := f.pool.QueryRow(f.ctx, "SELECT host, pid FROM task_owner WHERE owner = 'pod-0'").Scan(&host, &pid); err != nil ||
		host == "elsewhere.example" || pid != os.Getpid() {
		t.Errorf("the owner row names host %q, pid %d (%v); want this process's", host, pid, err)
	}
	if len(logs.Lines("may be running")) == 0 {
		t.Errorf("the start did not wait for the row's silence; log:\n%s", strings.Join(logs.Lines(), "\n"))
	}
}

// TestOwnerNameInUse: a process started under the name of a live one (on another host,
// or a second processor of this process) fails with ErrOwnerInUse once it sees the row
// heart-beat, and the live process keeps its leases and completes its tasks.
func TestOwnerNameInUse(t *testing.T) {
	for _, c := range []struct {
		name   string
		second repository.Config
	}{
		{"OnAnotherHost", repository.Config{Owner: "shared", Host: "elsewhere.example", PID: 4242}},
		{"InThisProcess", repository.Config{Owner: "shared"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t)
			pushed := f.pushN(1)
			release := make(chan struct{})
			first, _ := f.processor("shared", processor.Config{HeartbeatInterval: 50 * time.Millisecond, ExpiryTimeout: 2 * time.Second},
				processor.ManagerConfig{Handler: processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
					<-release
					return repository.Succeed("")
				})})
			f.start(first)
			f.eventually("the first process leased the task", func() bool { return f.count(repository.Active) == 1 })

			repo, err := repository.New(c.second)
			if err != nil {
				t.Fatal(err)
			}
			var ran atomic.Int64
			second, _ := f.processor("", processor.Config{Repository: repo, HeartbeatInterval: 50 * time.Millisecond,
				ExpiryTimeout: 2 * time.Second},
				processor.ManagerConfig{Handler: processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
					ran.Add(1)
					return repository.Succeed("")
				})})
			ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
			defer cancel()
			err = second.Run(ctx)
			if !errors.Is(err, processor.ErrOwnerInUse) {
				t.Fatalf("the second process's Run: %v; want ErrOwnerInUse", err)
			}
			t.Logf("the second process's Run: %v", err)
			close(release)
			f.eventually("the first process's task succeeded", func() bool { return f.count(repository.Succeeded) == 1 })
			if got := f.get(pushed[0].Sequence); got.Attempt != 1 || got.Owner != "shared" || ran.Load() != 0 {
				t.Errorf("the task: attempt %d, owner %q; the second process ran %d tasks; want it completed by the first in attempt 1",
					got.Attempt, got.Owner, ran.Load())
			}
		})
	}
}

// TestOwnerNameTakenOverWhileRunning: a process whose owner row another process claimed
// (started under the same name while this one was silent for the expiry timeout: a
// pause, a network cut, a replacement given the name) stops with ErrOwnerInUse at its
// next heartbeat, and leaves the row, the other's now, alone. It heart-beat the claimed
// row on as its own, and both processes leased as one owner.
func TestOwnerNameTakenOverWhileRunning(t *testing.T) {
	f := setup(t)
	pushed := f.pushN(1)
	p, _ := f.processor("pod-0", processor.Config{HeartbeatInterval: 50 * time.Millisecond},
		processor.ManagerConfig{Handler: processor.TaskFunc(succeed)})
	ran := make(chan error, 1)
	go func() { ran <- p.Run(f.ctx) }()
	f.eventually("the process ran its task", func() bool { return f.get(pushed[0].Sequence).State == repository.Succeeded })
	// what another process's claim (repository.ClaimOwner) writes, and a task it leased
	// under the name, which this process must leave alone (not run it, nor hand it
	// back, as a lease of its own it lost)
	if _, err := f.pool.Exec(f.ctx, `UPDATE task_owner SET started = now(), host = 'elsewhere.example', pid = 4242
		WHERE owner = 'pod-0'`); err != nil {
		t.Fatal(err)
	}
	var theirs int64
	if err := f.pool.QueryRow(f.ctx, `INSERT INTO task (topic, identifier, state, owner, attempt) VALUES ($1, 'theirs', 0, 'pod-0', 1)
		RETURNING sequence`, f.topic).Scan(&theirs); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ran:
		if !errors.Is(err, processor.ErrOwnerInUse) || !strings.Contains(err.Error(), "taken over") {
			t.Fatalf("Run after its owner row was claimed: %v; want ErrOwnerInUse", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the process went on after its owner row was claimed by another")
	}
	var host string
	if err := f.pool.QueryRow(f.ctx, "SELECT host FROM task_owner WHERE owner = 'pod-0'").Scan(&host); err != nil || host != "elsewhere.example" {
		t.Errorf("the owner row after the stop: host %q, %v; want the other process's, kept", host, err)
	}
	if got := f.get(theirs); got.State != repository.Active || got.Attempt != 1 {
		t.Errorf("the other process's lease after the stop: %v, attempt %d; want ACTIVE, untouched", got.State, got.Attempt)
	}
}

// TestOwnerRowPurgedRegistersAgain: a process whose owner row was purged (as dead, while
// it was silent) registers it again at its next heartbeat, as itself, and runs on.
func TestOwnerRowPurgedRegistersAgain(t *testing.T) {
	f := setup(t)
	p, _ := f.processor("pod-0", processor.Config{HeartbeatInterval: 50 * time.Millisecond},
		processor.ManagerConfig{Handler: processor.TaskFunc(succeed)})
	ran := make(chan error, 1)
	go func() { ran <- p.Run(f.ctx) }()
	first := f.pushN(1)
	f.eventually("the process ran its task", func() bool { return f.get(first[0].Sequence).State == repository.Succeeded })
	var started time.Time
	if err := f.pool.QueryRow(f.ctx, "DELETE FROM task_owner WHERE owner = 'pod-0' RETURNING started").Scan(&started); err != nil {
		t.Fatal(err)
	}
	f.eventually("the owner row registered again", func() bool {
		var again time.Time
		return f.pool.QueryRow(f.ctx, "SELECT started FROM task_owner WHERE owner = 'pod-0'").Scan(&again) == nil && again.After(started)
	})
	later := f.pushN(1)
	f.eventually("the process ran a task pushed after", func() bool { return f.get(later[0].Sequence).State == repository.Succeeded })
	select {
	case err := <-ran:
		t.Fatalf("Run returned %v after its row was registered again", err)
	default:
	}
}

// TestStoppedWhileAnEarlierOwnerMayRun: a process told to stop while it waits for the
// silence of an owner row that another process wrote returns without error and leaves
// that row as it was (it leases nothing, so a clean stop's deregistration would delete
// it).
func TestStoppedWhileAnEarlierOwnerMayRun(t *testing.T) {
	f := setup(t)
	earlier, err := repository.New(repository.Config{Owner: "pod-0", Host: "elsewhere.example"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := earlier.RegisterOwner(f.ctx, f.pool); err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	p, _ := f.processor("pod-0", processor.Config{ExpiryTimeout: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		processor.ManagerConfig{Handler: processor.TaskFunc(func(context.Context, repository.Task) repository.Decision {
			return repository.Succeed("")
		})})
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	f.eventually("the start waits", func() bool { return len(logs.Lines("may be running")) > 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run stopped while waiting: %v; want nil", err)
	}
	var host string
	if err := f.pool.QueryRow(f.ctx, "SELECT host FROM task_owner WHERE owner = 'pod-0'").Scan(&host); err != nil || host != "elsewhere.example" {
		t.Fatalf("the earlier owner's row: host %q, %v; want it left there", host, err)
	}
}

// TestOwnerRowRegisteredAgainReplyLost: a process whose owner row was purged registers it
// again, and the reply of that registration is lost (the row written all the same): the
// row it then finds is its own, not another process's take-over; it ran on, where it
// stopped with ErrOwnerInUse naming its own host and pid.
func TestOwnerRowRegisteredAgainReplyLost(t *testing.T) {
	f := setup(t)
	proxy := f.startProxy()
	p, _ := f.processor("pod-0", processor.Config{Pool: proxiedPool(t, proxy, f.url), HeartbeatInterval: 50 * time.Millisecond},
		processor.ManagerConfig{Handler: processor.TaskFunc(succeed)})
	ran := make(chan error, 1)
	go func() { ran <- p.Run(f.ctx) }()
	first := f.pushN(1)
	f.eventually("the process ran its task", func() bool { return f.get(first[0].Sequence).State == repository.Succeeded })
	cut := proxy.AddCut(&faultproxy.Cut{Match: faultproxy.Statement("OwnerRegister"), Times: 1})
	var started time.Time
	if err := f.pool.QueryRow(f.ctx, "DELETE FROM task_owner WHERE owner = 'pod-0' RETURNING started").Scan(&started); err != nil {
		t.Fatal(err)
	}
	f.eventually("the registration's reply lost", func() bool { return cut.Lost() == 1 })
	select { // heartbeats after it
	case err := <-ran:
		t.Fatalf("Run returned %v after the reply of its registration was lost", err)
	case <-time.After(time.Second):
	}
	later := f.pushN(1)
	f.eventually("the process ran a task pushed after", func() bool {
		select {
		case err := <-ran:
			t.Fatalf("Run returned %v after the reply of its registration was lost", err)
		default:
		}
		return f.get(later[0].Sequence).State == repository.Succeeded
	})
}

package processor_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// done collects the sequences a handler finished, in order.
type done chan int64

func (d done) handler(delay time.Duration) processor.TaskFunc {
	return func(ctx context.Context, task repository.Task) repository.Decision {
		time.Sleep(delay)
		d <- task.Sequence
		return repository.Succeed("")
	}
}

// wait fails the test unless the handler finishes sequence within the timeout.
func (d done) wait(t *testing.T, sequence int64, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case got := <-d:
			if got == sequence {
				return
			}
		case <-deadline:
			t.Fatalf("task %d not handled within %v", sequence, timeout)
		}
	}
}

// emptyPolls is a Listener that reports each empty poll on a channel, for a test to
// wait until a manager has found its topic empty (and hibernates) before it pushes: a
// push made before that poll would be found by it, without a notification.
type emptyPolls chan struct{}

func (e emptyPolls) listener() processor.Listener {
	return processor.Listener{OnEmpty: func(string, time.Duration) {
		select {
		case e <- struct{}{}:
		default:
		}
	}}
}

// next waits for the next empty poll.
func (e emptyPolls) next(t *testing.T) {
	t.Helper()
	select {
	case <-e:
	case <-time.After(30 * time.Second):
		t.Fatal("no empty poll")
	}
}

func TestWakeup(t *testing.T) {
	t.Run("NotifyWakesAnIdleManagerDespiteAnHourLongPause", func(t *testing.T) {
		f := setup(t)
		finished := make(done, 10)
		empty := make(emptyPolls, 1)
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: finished.handler(0), Listener: empty.listener()})
		connected := p.Notifier().Connected()
		f.start(p)
		<-connected
		// the manager has polled the empty topic, and hibernates for its hour
		empty.next(t)
		tasks := f.pushN(1)
		finished.wait(t, tasks[0].Sequence, 30*time.Second)
	})

	// The listening connection is made as the pool makes its own: with its BeforeConnect
	// hook (here it names the database, as a hook that rotates a password would supply
	// the password) and its AfterConnect hook. Made from the pool's bare ConnConfig, it
	// failed on every try, and tasks waited for the poll interval.
	t.Run("TheListenerConnectsAsThePoolDoes", func(t *testing.T) {
		f := setup(t)
		cfg, err := pgxpool.ParseConfig(f.url)
		if err != nil {
			t.Fatal(err)
		}
		database := cfg.ConnConfig.Database
		cfg.ConnConfig.Database = "pgtask_no_such_database"
		cfg.BeforeConnect = func(_ context.Context, c *pgx.ConnConfig) error {
			c.Database = database
			return nil
		}
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, "SET application_name = 'pgtask hooked'")
			return err
		}
		pool, err := pgxpool.NewWithConfig(f.ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		finished := make(done, 10)
		empty := make(emptyPolls, 1)
		p, _ := f.processor("worker", processor.Config{Pool: pool}, processor.ManagerConfig{Handler: finished.handler(0), Listener: empty.listener()})
		connected := p.Notifier().Connected()
		f.start(p)
		select {
		case <-connected:
		case <-time.After(30 * time.Second):
			t.Fatal("the notifier did not connect with the pool's hooks")
		}
		var name string
		if err := f.pool.QueryRow(f.ctx, "SELECT application_name FROM pg_stat_activity WHERE pid = $1", int32(p.Notifier().PID())).Scan(&name); err != nil {
			t.Fatal(err)
		}
		if name != "pgtask hooked" {
			t.Errorf("the listening connection's application_name is %q: the pool's AfterConnect did not run on it", name)
		}
		empty.next(t)
		tasks := f.pushN(1)
		finished.wait(t, tasks[0].Sequence, 30*time.Second)
	})

	t.Run("NotifyWorksAfterTheListeningConnectionWasTerminated", func(t *testing.T) {
		f := setup(t)
		finished := make(done, 10)
		empty := make(emptyPolls, 1)
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: finished.handler(0), Listener: empty.listener()})
		connected := p.Notifier().Connected()
		f.start(p)
		<-connected
		pid := p.Notifier().PID()
		empty.next(t) // the first poll
		reconnected := p.Notifier().Connected()
		var terminated bool
		if err := f.pool.QueryRow(f.ctx, "SELECT pg_terminate_backend($1)", int32(pid)).Scan(&terminated); err != nil || !terminated {
			t.Fatalf("terminate listener backend %d: %v %v", pid, terminated, err)
		}
		select {
		case <-reconnected:
		case <-time.After(30 * time.Second):
			t.Fatal("notifier did not reconnect")
		}
		// the poll the reconnection asks for, and the manager hibernates again
		empty.next(t)
		tasks := f.pushN(1)
		finished.wait(t, tasks[0].Sequence, 30*time.Second)
	})

	t.Run("ResumeWhileBusyPollsRightAfterTheRunningBatch", func(t *testing.T) {
		f := setup(t)
		release := make(chan struct{})
		started := make(chan int64, 10)
		finished := make(done, 10)
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			started <- task.Sequence
			<-release
			finished <- task.Sequence
			return repository.Succeed("")
		})
		// Notifications off: only Resume can wake the manager before its hour is up.
		p, managers := f.processor("worker", processor.Config{DisableNotifications: true},
			processor.ManagerConfig{Handler: handler, BatchSize: 10})
		first := f.pushN(1)
		f.start(p)
		<-started // a one-task batch is running
		second, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "second"})
		if err != nil {
			t.Fatal(err)
		}
		managers[0].Resume() // arrives while busy
		close(release)
		finished.wait(t, first[0].Sequence, 10*time.Second)
		finished.wait(t, second[0].Sequence, 10*time.Second)
	})
}

// TestRevivalWakesWhatItUnblocks: a task of an identifier that failed is held back by
// SINGULAR_BY_IDENTIFIER_SUSPEND_ON_FAILURE (one behind a SUSPENDED task by
// SUSPEND_UNTIL_SUCCESS); reassigning the failed task SUCCESS (cancelling the suspended
// one) frees it, but no notification said so, and the processor, whose poll had found it
// held back, slept until its pause interval (an hour here, 5 s by default). Reassign, and
// a cancel that makes a task REDUNDANT, send WORK.
func TestRevivalWakesWhatItUnblocks(t *testing.T) {
	for _, c := range []struct {
		name      string
		condition repository.Condition
		first     repository.Decision
		held      repository.State
		free      func(f *fixture, sequence int64) error
	}{
		{"Reassign", repository.SingularByIdentifierSuspendOnFailure, repository.Fail(errors.New("boom")), repository.Failed,
			func(f *fixture, sequence int64) error {
				_, err := f.repo.Reassign(f.ctx, f.pool, f.topic, repository.Success, sequence)
				return err
			}},
		{"Cancel", repository.SingularByIdentifierSuspendUntilSuccess, repository.Suspend("wait"), repository.Suspended,
			func(f *fixture, sequence int64) error {
				_, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "operator", sequence)
				return err
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t)
			handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
				if task.Input == "first" {
					return c.first
				}
				return repository.Succeed("ok")
			})
			p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler, Condition: c.condition})
			connected := p.Notifier().Connected()
			f.start(p)
			<-connected
			first, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "x", Input: "first"})
			if err != nil {
				t.Fatal(err)
			}
			f.eventually("the first task decided", func() bool { return f.get(first[0].Sequence).State == c.held })
			second, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "x", Input: "second"})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // its push's notification polled: held back
			if got := f.get(second[0].Sequence).State; got != repository.Ready {
				t.Fatalf("the second task of the identifier is %v, want READY (held back)", got)
			}
			if err := c.free(f, first[0].Sequence); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for f.get(second[0].Sequence).State != repository.Succeeded {
				if time.Now().After(deadline) {
					t.Fatalf("the task freed is %v after 10 s, want SUCCEEDED (the processor was not woken)", f.get(second[0].Sequence).State)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestExpiryWakesWhatItUnblocks: a dead owner's task expired for good (no attempt left)
// frees the READY task of its identifier that SINGULAR_BY_IDENTIFIER held back while it
// was ACTIVE; the expiry told only the topics where it made tasks READY, and a processor
// of the topic other than the one that expired the task, whose poll had found it held
// back, slept until its pause interval.
func TestExpiryWakesWhatItUnblocks(t *testing.T) {
	f := setup(t)
	dead, err := repository.New(repository.Config{Owner: "dead"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.RegisterOwner(f.ctx, f.pool); err != nil {
		t.Fatal(err)
	}
	first, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if leased, err := dead.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 1); err != nil || len(leased) != 1 {
		t.Fatalf("the dead owner's poll: %v, %v", leased, err)
	}
	second, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "x"})
	if err != nil {
		t.Fatal(err)
	}
	// the worker's first poll finds the second task held back; the other processor's
	// expiry (2 s of silence, the fixture's; the worker's own waits a minute) takes the
	// first back, EXPIRED: its one attempt was used
	worker, _ := f.processor("worker", processor.Config{ExpiryTimeout: time.Minute}, processor.ManagerConfig{
		Handler:   processor.TaskFunc(func(context.Context, repository.Task) repository.Decision { return repository.Succeed("ok") }),
		Condition: repository.SingularByIdentifier,
	})
	f.start(worker)
	expirer, _ := f.processor("expirer", processor.Config{})
	f.start(expirer)
	f.eventually("the dead owner's task expired", func() bool { return f.get(first[0].Sequence).State == repository.Expired })
	deadline := time.Now().Add(10 * time.Second)
	for f.get(second[0].Sequence).State != repository.Succeeded {
		if time.Now().After(deadline) {
			t.Fatalf("the task freed by the expiry is %v 10 s after it, want SUCCEEDED (the processor was not woken)", f.get(second[0].Sequence).State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCompletionWakesWhatItUnblocks: under SINGULAR_BY_IDENTIFIER a task's completion
// frees the next READY task of its identifier, which the poll loop's poll, made before
// the completion committed, had found held back: the processor that committed it polls
// again at once, as a limited topic's does, rather than sleep until its pause interval.
func TestCompletionWakesWhatItUnblocks(t *testing.T) {
	f := setup(t)
	p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{
		Handler:       processor.TaskFunc(func(context.Context, repository.Task) repository.Decision { return repository.Succeed("ok") }),
		Condition:     repository.SingularByIdentifier,
		PauseInterval: time.Hour,
	})
	connected := p.Notifier().Connected()
	f.start(p)
	<-connected
	const n = 5
	tasks, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, slices.Repeat([]repository.Creation{{Identifier: "x"}}, n)...)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.get(tasks[n-1].Sequence).State != repository.Succeeded {
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the push of %d tasks of one identifier: %s, want every one SUCCEEDED", n, f.states())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

package processor_test

import (
	"context"
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

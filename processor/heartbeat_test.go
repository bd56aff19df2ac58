package processor_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// TestHeartbeatWhileThePoolIsBusy: the owner row stays fresh while every connection of
// the processor's pool is taken for three expiry timeouts (polls slowed by a held
// snapshot, a pool smaller than the statements in flight): the heartbeat has a
// connection of its own. On the pool, it waited for one, and other processors would
// have taken the live processor's leases back.
func TestHeartbeatWhileThePoolIsBusy(t *testing.T) {
	f := setup(t)
	cfg, err := pgxpool.ParseConfig(f.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(f.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	const expiry = time.Second
	handler := processor.TaskFunc(func(context.Context, repository.Task) repository.Decision { return repository.Succeed("") })
	p, _ := f.processor("busy", processor.Config{Pool: pool, ExpiryTimeout: expiry}, processor.ManagerConfig{Handler: handler})
	f.start(p)
	age := func() time.Duration {
		t.Helper()
		var ms float64
		if err := f.pool.QueryRow(f.ctx, `SELECT extract(epoch FROM clock_timestamp() - heartbeat) * 1000 FROM task_owner WHERE owner = 'busy'`).Scan(&ms); err != nil {
			t.Fatalf("read the heartbeat: %v", err)
		}
		return time.Duration(ms * float64(time.Millisecond))
	}
	f.eventually("the processor registered and beat", func() bool {
		var n int
		_ = f.pool.QueryRow(f.ctx, `SELECT count(*) FROM task_owner WHERE owner = 'busy'`).Scan(&n)
		return n == 1 && age() < expiry/2
	})
	actx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	for range cfg.MaxConns {
		c, err := pool.Acquire(actx)
		if err != nil {
			t.Fatalf("take the pool's connections: %v", err)
		}
		defer c.Release()
	}
	// The heartbeat goes on (every 100 ms) while the pool is taken: one that waited for
	// a connection of the pool would not move at all. How old it gets is logged, not
	// bounded: a loaded machine can hold one up for a while, which is not what this
	// test is after.
	var worst time.Duration
	beats := 0
	var last float64
	for end := time.Now().Add(3 * expiry); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		worst = max(worst, age())
		var at float64
		if err := f.pool.QueryRow(f.ctx, `SELECT extract(epoch FROM heartbeat) FROM task_owner WHERE owner = 'busy'`).Scan(&at); err != nil {
			t.Fatalf("read the heartbeat: %v", err)
		}
		if at != last {
			beats++
			last = at
		}
	}
	t.Logf("%d heartbeats seen in %v with the pool taken, the heartbeat at most %v old", beats-1, 3*expiry, worst)
	if beats-1 < 3 {
		t.Errorf("%d heartbeats in %v with the pool's connections taken: the heartbeat waits for the pool, and the leases would expire (timeout %v)", beats-1, 3*expiry, expiry)
	}
}

// TestNoLeaseWhileTheHeartbeatFails: a processor whose heartbeat failed while its polls
// did not (its owner row locked here; its connection refused by a connection limit the
// pool's connections are within, in production) went on leasing, and every task it
// leased was taken back by the others as a dead owner's once its heartbeat was older
// than the expiry timeout, and run again, an attempt used each time. It now leases
// nothing from halfway between its heartbeat interval and its expiry timeout until a
// heartbeat succeeds.
func TestNoLeaseWhileTheHeartbeatFails(t *testing.T) {
	f := setup(t)
	var runs atomic.Int32
	handler := processor.TaskFunc(func(context.Context, repository.Task) repository.Decision {
		runs.Add(1)
		return repository.Succeed("")
	})
	p, _ := f.processor("stale", processor.Config{HeartbeatInterval: 100 * time.Millisecond, ExpiryTimeout: 500 * time.Millisecond},
		processor.ManagerConfig{Handler: handler})
	f.start(p)
	f.eventually("the processor registered", func() bool {
		var n int
		_ = f.pool.QueryRow(f.ctx, `SELECT count(*) FROM task_owner WHERE owner = 'stale'`).Scan(&n)
		return n == 1
	})
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(f.ctx) }()
	if _, err := tx.Exec(f.ctx, `SELECT FROM task_owner WHERE owner = 'stale' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // past halfway (300 ms), and past the expiry timeout
	tasks := f.pushN(5)
	time.Sleep(time.Second)
	if n := runs.Load(); n != 0 {
		t.Fatalf("%d tasks run while the heartbeat failed for %v (expiry timeout 500 ms): others would take them back and run them again", n, 2*time.Second)
	}
	for _, task := range tasks {
		if got := f.get(task.Sequence); got.State != repository.Ready {
			t.Fatalf("task %d %v while the heartbeat failed, want READY", task.Sequence, got.State)
		}
	}
	if err := tx.Rollback(f.ctx); err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		f.eventually("the task run once the heartbeat succeeds", func() bool { return f.get(task.Sequence).State == repository.Succeeded })
	}
}

// TestHeartbeatOnThePoolWhenItsConnectionIsRefused: the heartbeat's own connection
// refused (a role's connection limit reached by the pool's connections, made earlier),
// the heartbeat goes through the pool, and the processor goes on working; it failed
// until a connection could be made, and its leases were taken back meanwhile.
func TestHeartbeatOnThePoolWhenItsConnectionIsRefused(t *testing.T) {
	f := setup(t)
	cfg, err := pgxpool.ParseConfig(f.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MinConns, cfg.MaxConns = 4, 4
	var refuse atomic.Bool
	cfg.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
		if refuse.Load() {
			return errors.New("too many connections for role (the test's)")
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(f.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	f.eventually("the pool made its connections", func() bool { return pool.Stat().TotalConns() == cfg.MaxConns })
	refuse.Store(true)
	handler := processor.TaskFunc(func(context.Context, repository.Task) repository.Decision { return repository.Succeed("") })
	p, managers := f.processor("refused", processor.Config{Pool: pool, HeartbeatInterval: 100 * time.Millisecond, ExpiryTimeout: 500 * time.Millisecond},
		processor.ManagerConfig{Handler: handler})
	f.start(p)
	var first time.Time
	f.eventually("the processor registered", func() bool {
		return f.pool.QueryRow(f.ctx, `SELECT heartbeat FROM task_owner WHERE owner = 'refused'`).Scan(&first) == nil
	})
	time.Sleep(time.Second) // past the expiry timeout
	tasks := f.pushN(3)
	managers[0].Resume() // the notifier's connection is refused too
	for _, task := range tasks {
		f.eventually("the task run", func() bool { return f.get(task.Sequence).State == repository.Succeeded })
	}
	var last time.Time
	if err := f.pool.QueryRow(f.ctx, `SELECT heartbeat FROM task_owner WHERE owner = 'refused'`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if !last.After(first.Add(500 * time.Millisecond)) {
		t.Errorf("heartbeat %v after registering at %v: the owner row was not beaten", last, first)
	}
}

// TestHandlersStopWhenTheHeartbeatGoesStale: a processor whose heartbeat fails (its
// owner row locked here; a network cut off, a server that does not answer it, in
// production) while a handler runs cancels the handler's context with ErrLeaseLost
// once the heartbeat is stale, a heartbeat interval before other processors count it
// dead: the handler stops (in 50 ms here, within the interval), its failure is
// committed, and the task runs again (at once: no backoff) after the first run ended.
// The handler used to go on, and the task ran twice at once; with the failure
// committed as the context was cancelled, the other processor started it before the
// handler had stopped.
func TestHandlersStopWhenTheHeartbeatGoesStale(t *testing.T) {
	f := setup(t)
	f.createTopic("lost", 2)
	if _, err := f.repo.UpdateSettings(f.ctx, f.pool, "lost", func(s *repository.TopicSettings) {
		s.BackoffBase, s.BackoffCap, s.BackoffJitter = 0, 0, 0
	}); err != nil {
		t.Fatal(err)
	}
	type run struct {
		owner      string
		start, end time.Time
		cause      error
	}
	runs := make(chan run, 10)
	started := make(chan struct{}, 1)
	// an expiry timeout of seconds: the heartbeat of a loaded test run (-race, the
	// package's tests in parallel on two cores) must not go stale by itself
	const heartbeat, expiry = 250 * time.Millisecond, 3 * time.Second
	handler := func(owner string) processor.Handler {
		return processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			r := run{owner: owner, start: time.Now()}
			defer func() { r.end = time.Now(); runs <- r }()
			if owner != "stalling" {
				return repository.Succeed("")
			}
			started <- struct{}{}
			select {
			case <-ctx.Done():
				r.cause = context.Cause(ctx)
				time.Sleep(heartbeat / 2) // winding down
				return repository.Fail(r.cause)
			case <-time.After(30 * time.Second):
				return repository.Succeed("never cancelled")
			}
		})
	}
	stalling, _ := f.processor("stalling", processor.Config{HeartbeatInterval: heartbeat, ExpiryTimeout: expiry},
		processor.ManagerConfig{Topic: "lost", Handler: handler("stalling")})
	f.start(stalling)
	task, err := f.repo.Push(f.ctx, f.pool, "lost", repository.Append, repository.Creation{Identifier: "long", Input: "1"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the task did not start")
	}
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(f.ctx) }()
	if _, err := tx.Exec(f.ctx, `SELECT FROM task_owner WHERE owner = 'stalling' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	other, _ := f.processor("other", processor.Config{HeartbeatInterval: heartbeat, ExpiryTimeout: expiry},
		processor.ManagerConfig{Topic: "lost", Handler: handler("other")})
	f.start(other)

	var first, second run
	for _, r := range []*run{&first, &second} {
		select {
		case *r = <-runs:
		case <-time.After(30 * time.Second):
			t.Fatalf("runs: got %+v, %+v; want the first run cancelled and the task run by the other processor", first, second)
		}
	}
	if first.owner != "stalling" || first.cause != processor.ErrLeaseLost {
		t.Fatalf("first run %+v, want stalling's, its context cancelled with cause ErrLeaseLost", first)
	}
	if second.owner != "other" {
		t.Fatalf("second run %+v, want the other processor's", second)
	}
	if second.start.Before(first.end) {
		t.Fatalf("the other processor started the task at %v, before the first run ended at %v: it ran twice at once",
			second.start.Format(time.StampMicro), first.end.Format(time.StampMicro))
	}
	f.eventually("the task SUCCEEDED by the other processor", func() bool {
		got, err := f.repo.Get(f.ctx, f.pool, "lost", task[0].Sequence)
		return err == nil && got.State == repository.Succeeded
	})
	if err := tx.Rollback(f.ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-runs:
		t.Fatalf("the task ran a third time: %+v", r)
	case <-time.After(3 * heartbeat):
	}
}

// TestLeaseLostAloneIsRetried: when no other processor takes the leases back (the
// database unreachable for everyone, say), a task whose handler stopped for a stale
// heartbeat and gave it back (SnoozeFor(0) on ErrLeaseLost, as the docs suggest) is
// READY with its attempt unused, and its batch mate not started yet is handed back by
// the processor; both run once the heartbeat succeeds: nothing is lost, no attempt
// spent (the topic has one: a spent attempt would be final). Before the guard, the
// handler ran on; with its first form, a failure was committed at the expiry timeout,
// an attempt spent for every task in flight. The handler gives the task back whenever
// its context ends so, and finishes only when told: a loaded run's heartbeat may go
// stale by itself before the test locks the owner row (two CI runs here).
func TestLeaseLostAloneIsRetried(t *testing.T) {
	f := setup(t)
	f.createTopic("alone", 1)
	started := make(chan struct{}, 10)
	finish := make(chan struct{})
	var lostAfterLock atomic.Bool
	var locked atomic.Bool
	handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
		if task.Identifier != "long" {
			return repository.Succeed("done")
		}
		started <- struct{}{}
		select {
		case <-ctx.Done():
			if context.Cause(ctx) != processor.ErrLeaseLost {
				return repository.Fail(context.Cause(ctx))
			}
			if locked.Load() {
				lostAfterLock.Store(true)
			}
			return repository.SnoozeFor(0)
		case <-finish:
			return repository.Succeed("done")
		}
	})
	// an expiry timeout of seconds: the heartbeat of a loaded test run (-race, the
	// package's tests in parallel on two cores) should not go stale by itself
	p, _ := f.processor("alone", processor.Config{HeartbeatInterval: 250 * time.Millisecond, ExpiryTimeout: 3 * time.Second},
		processor.ManagerConfig{Topic: "alone", Handler: handler, BatchSize: 2})
	f.start(p)
	pushed, err := f.repo.Push(f.ctx, f.pool, "alone", repository.Append,
		repository.Creation{Identifier: "long", Input: "1"}, repository.Creation{Identifier: "next", Input: "2"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("long did not start")
	}
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(f.ctx) }()
	if _, err := tx.Exec(f.ctx, `SELECT FROM task_owner WHERE owner = 'alone' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	locked.Store(true)
	if !f.within(60*time.Second, func() bool {
		got := f.getIn("alone", pushed[0].Sequence)
		return lostAfterLock.Load() && got.State == repository.Ready && got.Attempt-got.Returned == 0 && len(got.Errors) == 0
	}) {
		for _, task := range pushed {
			t.Logf("task %+v", f.getIn("alone", task.Sequence))
		}
		t.Fatalf("timed out waiting for long given back READY, no attempt used (its handler saw ErrLeaseLost after the lock: %v)", lostAfterLock.Load())
	}
	if err := tx.Rollback(f.ctx); err != nil {
		t.Fatal(err)
	}
	close(finish)
	for _, task := range pushed {
		f.eventually("the tasks SUCCEEDED", func() bool { return f.getIn("alone", task.Sequence).State == repository.Succeeded })
		if got := f.getIn("alone", task.Sequence); got.Attempt-got.Returned != 1 || len(got.Errors) != 0 {
			t.Errorf("task %s: attempt %d, %d returned, errors %v; want one attempt used, no error", got.Identifier, got.Attempt, got.Returned, got.Errors)
		}
	}
}

// getIn reads task sequence of topic.
func (f *fixture) getIn(topic string, sequence int64) repository.Task {
	f.t.Helper()
	got, err := f.repo.Get(f.ctx, f.pool, topic, sequence)
	if err != nil {
		f.t.Fatalf("get task %d of %q: %v", sequence, topic, err)
	}
	return got
}

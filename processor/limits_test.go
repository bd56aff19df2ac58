package processor_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// runLog is the table the handlers of the limit tests record each task's run in: when
// the handler started and ended it, by the test process's clock (every processor of a
// test runs in it). A recorded run lies within the task's lease (the handler starts
// after the poll committed, and ends before the decision is committed), so the most
// runs recorded at once is a lower bound of the most tasks ACTIVE at once: a limit the
// records break is a limit the database broke.
const runLog = `CREATE UNLOGGED TABLE IF NOT EXISTS run_log (
	sequence bigint NOT NULL,
	key text NOT NULL,
	started timestamptz NOT NULL,
	ended timestamptz NOT NULL
)`

// limit configures the fixture's topic with s (one attempt unless s says otherwise),
// creates the run log, and fails the test on error.
func (f *fixture) limit(s repository.TopicSettings) {
	f.t.Helper()
	if s.MaxAttempts == 0 {
		s.MaxAttempts = 1
	}
	if _, err := f.repo.Configure(f.ctx, f.pool, f.topic, s); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, runLog); err != nil {
		f.t.Fatal(err)
	}
}

// pushKeys pushes n tasks for each key, key by key, in one statement; identifiers
// <key>-<i>.
func (f *fixture) pushKeys(n int, keys ...string) {
	f.t.Helper()
	var cs []repository.Creation
	for _, k := range keys {
		for i := range n {
			cs = append(cs, repository.Creation{Identifier: fmt.Sprintf("%s-%d", k, i), ConcurrencyKey: k})
		}
	}
	if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, cs...); err != nil {
		f.t.Fatal(err)
	}
}

// recorder returns a handler that sleeps for d (or until its context ends) and records
// the run in the run log; started, when not nil, is called at the start.
func (f *fixture) recorder(d time.Duration, started func(repository.Task)) processor.TaskFunc {
	return func(ctx context.Context, task repository.Task) repository.Decision {
		start := time.Now()
		if started != nil {
			started(task)
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		end := time.Now()
		if _, err := f.pool.Exec(context.WithoutCancel(ctx), `INSERT INTO run_log VALUES ($1, $2, $3, $4)`,
			task.Sequence, task.ConcurrencyKey, start, end); err != nil {
			return repository.Fail(fmt.Errorf("record the run: %w", err))
		}
		return repository.Succeed("")
	}
}

// limitedProcessors starts n processors, each on its own pool and owner, whose manager
// of the fixture's topic hands batches of up to batch tasks to workers running h (a
// Buffer of that many workers); the pause interval is an hour, so only notifications and
// the processors' own commits wake them. None of them stops heart-beating, so the expiry
// timeout is ten seconds, not the fixture's half second: with four processors of eight
// workers beside the race detector's other test binaries on two cores, a heartbeat came
// more than half a second late once, another processor took the lease back, and the
// task ended EXPIRED (one attempt) instead of running.
func (f *fixture) limitedProcessors(n, workers, batch int, h processor.Handler, listener processor.Listener) []func() error {
	f.t.Helper()
	var stops []func() error
	for i := range n {
		buffered, err := processor.Buffer(h, processor.BufferConfig{MinWorkers: workers})
		if err != nil {
			f.t.Fatal(err)
		}
		p, _ := f.processor(fmt.Sprintf("worker-%d", i), processor.Config{ExpiryTimeout: 10 * time.Second},
			processor.ManagerConfig{Handler: buffered, BatchSize: batch, Listener: listener})
		stops = append(stops, f.start(p))
	}
	return stops
}

// overlap returns the most runs recorded at once (since since, when not zero), within
// one key when byKey.
func (f *fixture) overlap(byKey bool, since time.Time) int64 {
	f.t.Helper()
	var most *int64
	if err := f.pool.QueryRow(f.ctx, `
		SELECT max((SELECT count(*) FROM run_log o
			WHERE o.started <= r.started AND o.ended > r.started AND (NOT $1 OR o.key = r.key)))
		FROM run_log r WHERE r.started >= $2`, byKey, since).Scan(&most); err != nil {
		f.t.Fatal(err)
	}
	if most == nil {
		return 0
	}
	return *most
}

// runs returns how many runs are recorded.
func (f *fixture) runs() int64 {
	f.t.Helper()
	var n int64
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM run_log`).Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// TestLimits: a topic's limits hold across processors on separate pools, each of which
// could run more tasks at once than the limit allows.
func TestLimits(t *testing.T) {
	t.Run("ConcurrencyHoldsAcrossProcessors", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Concurrency: 3})
		const n = 120
		f.pushN(n)
		start := time.Now()
		f.limitedProcessors(4, 8, 1, f.recorder(50*time.Millisecond, nil), processor.Listener{})
		f.eventually("every task done", func() bool { return f.count(repository.Succeeded) == n })
		took := time.Since(start)
		if most := f.overlap(false, time.Time{}); most > 3 {
			t.Errorf("%d tasks ran at once; the limit is 3", most)
		} else if most < 2 {
			t.Errorf("at most %d task ran at once: 4 processors of 8 workers never used the limit of 3", most)
		}
		if got := f.runs(); got != n {
			t.Errorf("%d runs recorded, want %d", got, n)
		}
		// not asserted (a timed figure; BenchmarkLimitConcurrency measures it): the
		// rate against 3 tasks per 50 ms
		t.Logf("%d tasks in %v: %.1f/s against 60/s", n, took.Round(time.Millisecond), float64(n)/took.Seconds())
	})

	t.Run("TheFlushThatFreesCapacityLeasesTheNextTasks", func(t *testing.T) {
		// One processor whose tasks fill the limit: each flush of decisions leases the
		// next tasks in its transaction, and the poll loop, at the limit, does not poll.
		f := setup(t)
		f.limit(repository.TopicSettings{Concurrency: 4})
		const n = 200
		f.pushN(n)
		var dispatches, empties atomic.Int64
		p, _ := f.processor("processor", processor.Config{}, processor.ManagerConfig{
			Handler: f.recorder(0, nil), BatchSize: 100, PauseInterval: time.Hour,
			Listener: processor.Listener{
				OnDispatch: func(string, []repository.Task, time.Duration) { dispatches.Add(1) },
				OnEmpty:    func(string, time.Duration) { empties.Add(1) },
			},
		})
		f.start(p)
		f.eventually("every task done", func() bool { return f.count(repository.Succeeded) == n })
		if most := f.overlap(false, time.Time{}); most > 4 {
			t.Errorf("%d tasks ran at once; the limit is 4", most)
		}
		if got := f.runs(); got != n {
			t.Errorf("%d runs recorded, want %d", got, n)
		}
		// A poll loop that polled after each batch would find the limit reached every
		// time: about one empty poll per batch.
		if d, e := dispatches.Load(), empties.Load(); d < n/4 || e > d/5 {
			t.Errorf("%d batches dispatched, %d empty polls: want at least %d batches (the limit of 4 each) and few empty polls",
				d, e, n/4)
		}
		t.Logf("%d batches, %d empty polls", dispatches.Load(), empties.Load())
	})
	// A manager of a limited topic sharing a PriorityLimiter with a manager of higher
	// priority and slow work: the flush that completed its task leased the next one,
	// whose slot the other manager then took and kept for as long as it had work. The
	// task stayed ACTIVE with no handler, the topic at its limit of 1 in every process:
	// another processor of the topic ran nothing meanwhile.
	t.Run("AFlushLeasesOnlyForAManagerAloneOnItsLimiter", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Concurrency: 1})
		f.createTopic("slow", 1)
		const n = 4
		f.pushN(n)
		shared := processor.NewPriorityLimiter(1)
		// the first task of the limited topic runs until the slow topic has work and its
		// manager waits for the shared slot
		first, gate := make(chan struct{}), make(chan struct{})
		var once sync.Once
		limited := f.recorder(0, func(repository.Task) {
			once.Do(func() {
				close(first)
				<-gate
			})
		})
		slowHandler := processor.TaskFunc(func(ctx context.Context, _ repository.Task) repository.Decision {
			select {
			case <-time.After(300 * time.Millisecond):
			case <-ctx.Done():
			}
			return repository.Succeed("")
		})
		p1, _ := f.processor("sharing", processor.Config{},
			processor.ManagerConfig{Handler: limited, BatchSize: 1, Limiter: shared.Limiter(1)},
			processor.ManagerConfig{Topic: "slow", Handler: slowHandler, BatchSize: 1, Limiter: shared.Limiter(0)})
		f.start(p1)
		<-first
		slow := make([]repository.Creation, 10)
		for i := range slow {
			slow[i] = repository.Creation{Identifier: fmt.Sprintf("slow-%d", i)}
		}
		if _, err := f.repo.Push(f.ctx, f.pool, "slow", repository.Append, slow...); err != nil {
			t.Fatal(err)
		}
		f.eventually("the slow topic's manager waits for the shared slot", func() bool { return shared.Waiting() >= 1 })
		// another processor of the limited topic, alone on its limiter, polling often
		p2, _ := f.processor("alone", processor.Config{},
			processor.ManagerConfig{Handler: f.recorder(0, nil), BatchSize: 1, PauseInterval: 50 * time.Millisecond})
		f.start(p2)
		close(gate)
		f.eventually("the limited topic's tasks done", func() bool { return f.count(repository.Succeeded) == n })
		var left int
		if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM task WHERE topic = 'slow' AND state <> 6`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			t.Errorf("the limited topic's %d tasks were done only once the slow topic's were: a task leased by a flush waited for the shared slot, ACTIVE", n)
		}
		if most := f.overlap(false, time.Time{}); most > 1 {
			t.Errorf("%d tasks ran at once; the limit is 1", most)
		}
	})

	t.Run("ASlowTaskHoldsOnlyItsOwnSlot", func(t *testing.T) {
		// A batch fills the limit; three of its tasks are decided and committed, the
		// fourth runs on. The three slots they freed are used while it does, by tasks
		// pushed after (no flush is left to lease them: the poll loop polls).
		f := setup(t)
		f.limit(repository.TopicSettings{Concurrency: 4})
		const n = 40
		f.pushN(4)
		release := make(chan struct{})
		h := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			if task.Identifier == "task-3" {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return repository.Succeed("")
		})
		buffered, err := processor.Buffer(h, processor.BufferConfig{MinWorkers: 2})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := f.processor("processor", processor.Config{}, processor.ManagerConfig{
			Handler: buffered, BatchSize: 4, PauseInterval: time.Hour,
		})
		f.start(p)
		f.eventually("three of the first four done", func() bool { return f.count(repository.Succeeded) == 3 })
		var later []repository.Creation
		for i := range n - 4 {
			later = append(later, repository.Creation{Identifier: fmt.Sprintf("later-%d", i)})
		}
		if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, later...); err != nil {
			t.Fatal(err)
		}
		f.eventually("every task but the slow one done", func() bool { return f.count(repository.Succeeded) == n-1 })
		close(release)
		f.eventually("the slow one done", func() bool { return f.count(repository.Succeeded) == n })
	})
	t.Run("ADecisionThatEndsNoBatchLeasesNothing", func(t *testing.T) {
		// A TaskFunc runs its batch task after task on the poll loop's goroutine. The
		// commit of the first task's decision frees a slot of the topic's limit, but the
		// task a flush at the limit leased in that commit waited, ACTIVE and unrun, for
		// the rest of the batch: here behind a task that hangs until released, holding a
		// slot of the limit that another process's idle worker could have used.
		f := setup(t)
		f.limit(repository.TopicSettings{Concurrency: 3})
		tasks := f.pushN(6)
		release := make(chan struct{})
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			if task.Sequence == tasks[1].Sequence {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return repository.Succeed("")
		})
		p, _ := f.processor("processor", processor.Config{}, processor.ManagerConfig{Handler: handler, BatchSize: 100, PauseInterval: time.Hour})
		f.start(p)
		f.eventually("the first task done", func() bool { return f.count(repository.Succeeded) == 1 })
		if active := f.count(repository.Active); active != 2 {
			t.Errorf("%d tasks ACTIVE while the batch's second runs, want 2 (the second and the third, leased with it)", active)
		}
		close(release)
		f.eventually("every task done", func() bool { return f.count(repository.Succeeded) == 6 })
	})
	t.Run("ABufferSpreadsTheLimitOverItsWorkers", func(t *testing.T) {
		// The library's usual set-up, a Buffer of TaskFuncs polled 100 at a time: a poll
		// of the whole limit would be one batch, run task after task by one worker while
		// the others wait, and the next poll would find the limit full. The tasks each
		// poll and each flush lease reach the workers in one batch each instead; the
		// listener still sees one dispatch a statement.
		f := setup(t)
		f.limit(repository.TopicSettings{Concurrency: 3})
		const n = 15
		f.pushN(n)
		var mu sync.Mutex
		var sizes, dispatches []int // the batches the workers got; the leases dispatched
		// long enough that a worker started late by a loaded machine still overlaps
		run := f.recorder(500*time.Millisecond, nil)
		buffered, err := processor.Buffer(processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			mu.Lock()
			sizes = append(sizes, len(b.Tasks))
			mu.Unlock()
			run.Handle(ctx, b)
		}), processor.BufferConfig{MinWorkers: 4})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := f.processor("processor", processor.Config{}, processor.ManagerConfig{
			Handler: buffered, BatchSize: 100, PauseInterval: time.Hour,
			Listener: processor.Listener{OnDispatch: func(_ string, tasks []repository.Task, _ time.Duration) {
				mu.Lock()
				dispatches = append(dispatches, len(tasks))
				mu.Unlock()
			}},
		})
		f.start(p)
		f.eventually("every task done", func() bool { return f.count(repository.Succeeded) == n })
		if most := f.overlap(false, time.Time{}); most != 3 {
			t.Errorf("at most %d tasks ran at once; 4 workers under a limit of 3 should run 3", most)
		}
		// The first three tasks ran side by side: one batch of three would have run them
		// one after the other, with two slots of the limit idle.
		var first int64
		if err := f.pool.QueryRow(f.ctx, `
			WITH r AS (SELECT * FROM run_log ORDER BY sequence LIMIT 3)
			SELECT max((SELECT count(*) FROM r o WHERE o.started <= r.started AND o.ended > r.started)) FROM r`).Scan(&first); err != nil {
			t.Fatal(err)
		}
		if first != 3 {
			t.Errorf("at most %d of the first three tasks ran at once, want 3", first)
		}
		mu.Lock()
		defer mu.Unlock()
		if biggest := slices.Max(sizes); biggest != 1 {
			t.Errorf("batches of %v: want batches of 1 (a limit of 3 over 4 workers)", sizes)
		}
		// the first poll leased the limit, three tasks in one statement: one dispatch
		total := 0
		for _, d := range dispatches {
			total += d
		}
		if len(dispatches) == 0 || dispatches[0] != 3 || total != n {
			t.Errorf("dispatches of %v: want the first poll's 3 tasks in one, %d tasks in all", dispatches, n)
		}
	})
	t.Run("KeyConcurrencyHoldsAcrossProcessorsAndEveryKeyProgresses", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{KeyConcurrency: 1})
		keys := make([]string, 10)
		for i := range keys {
			keys[i] = fmt.Sprintf("key%d", i)
		}
		f.pushKeys(8, keys...)
		f.limitedProcessors(4, 8, 1, f.recorder(20*time.Millisecond, nil), processor.Listener{})
		f.eventually("every task done", func() bool { return f.count(repository.Succeeded) == 80 })
		if most := f.overlap(true, time.Time{}); most != 1 {
			t.Errorf("%d tasks of one key ran at once; the per-key limit is 1", most)
		}
		if most := f.overlap(false, time.Time{}); most < 2 {
			t.Errorf("at most %d task ran at once across 10 keys: the keys did not progress side by side", most)
		}
		var keysDone int64
		if err := f.pool.QueryRow(f.ctx, `SELECT count(DISTINCT key) FROM run_log`).Scan(&keysDone); err != nil || keysDone != 10 {
			t.Errorf("keys that ran: %d, %v; want 10", keysDone, err)
		}
	})

	t.Run("RateHoldsAcrossProcessors", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Rate: 50, RatePeriod: time.Second, RateBurst: 10})
		// each lease is logged in the poll's transaction with the moment the rate limit
		// counted it (the poll's look at its bucket, by the database's clock, under the
		// topic's poll lock: task_topic_limit.counted), not the moment the handler
		// started, which lags the lease by a varying time
		for _, q := range []string{
			`CREATE TABLE lease_log (at timestamptz NOT NULL)`,
			`CREATE FUNCTION log_lease() RETURNS trigger LANGUAGE plpgsql AS
				$$BEGIN INSERT INTO lease_log SELECT counted FROM task_topic_limit WHERE topic = NEW.topic; RETURN NULL; END$$`,
			`CREATE TRIGGER lease AFTER UPDATE ON task FOR EACH ROW
				WHEN (NEW.state = 0 AND OLD.state <> 0) EXECUTE FUNCTION log_lease()`,
		} {
			if _, err := f.pool.Exec(f.ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		f.pushN(800) // more than 10 s of work at 50/s
		stops := f.limitedProcessors(4, 4, 10, f.recorder(0, nil), processor.Listener{})
		var first time.Time
		f.eventually("the first start", func() bool {
			return f.pool.QueryRow(f.ctx, `SELECT min(at) FROM lease_log HAVING count(*) > 0`).Scan(&first) == nil
		})
		time.Sleep(time.Until(first.Add(10*time.Second + 500*time.Millisecond)))
		for _, stop := range stops {
			_ = stop()
		}
		var total, most int64
		if err := f.pool.QueryRow(f.ctx, `
			SELECT count(*) FILTER (WHERE at < $1::timestamptz + interval '10 s'),
			       (SELECT max(n) FROM (SELECT count(*) OVER (ORDER BY at
			                RANGE BETWEEN CURRENT ROW AND interval '999999 microseconds' FOLLOWING) AS n
			                FROM lease_log) w)
			FROM lease_log`, first).Scan(&total, &most); err != nil {
			t.Fatal(err)
		}
		// a token bucket of 10 refilled at 50/s lets at most 10 + 50 start in any
		// second, and 10 + 500 in ten
		// (the lower bound leaves 20 % for wake-ups made late by a loaded machine: a
		// processor waiting for its next token that wakes more than a burst late loses
		// the tokens beyond the burst)
		if total < 400 || total > 510 {
			t.Errorf("%d tasks started in the first 10 s; want about 500 (10 + 50/s)", total)
		}
		if most > 60 {
			t.Errorf("%d tasks started within one second; want at most 60 (50/s + a burst of 10)", most)
		}
		t.Logf("%d started in the first 10 s, at most %d in a second", total, most)
		var logged, notReady int64
		_ = f.pool.QueryRow(f.ctx, `SELECT (SELECT count(*) FROM lease_log), (SELECT count(*) FROM task WHERE state <> 1)`).Scan(&logged, &notReady)
	})

	t.Run("FairServesASmallKeyBesideABacklog", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Fair: true})
		f.pushKeys(10000, "A")
		var (
			mu       sync.Mutex
			order    []string // keys in start order
			pushedAt = -1     // len(order) when B's tasks were pushed
			pushed   = make(chan struct{})
		)
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			mu.Lock()
			order = append(order, task.ConcurrencyKey)
			if len(order) == 20 {
				// B pushes while A's backlog is being worked through
				cs := make([]repository.Creation, 10)
				for i := range cs {
					cs[i] = repository.Creation{Identifier: fmt.Sprintf("B-%d", i), ConcurrencyKey: "B"}
				}
				if _, err := f.repo.Push(ctx, f.pool, f.topic, repository.Append, cs...); err != nil {
					t.Error(err)
				}
				pushedAt = len(order)
				close(pushed)
			}
			mu.Unlock()
			return repository.Succeed("")
		})
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: handler, BatchSize: 5})
		f.start(p)
		f.eventually("B's ten done", func() bool {
			mu.Lock()
			defer mu.Unlock()
			b := 0
			for _, k := range order {
				if k == "B" {
					b++
				}
			}
			return b == 10
		})
		<-pushed
		mu.Lock()
		defer mu.Unlock()
		last := 0
		for i, k := range order {
			if k == "B" {
				last = i + 1
			}
		}
		if last-pushedAt > 40 {
			t.Errorf("B's last task started %d starts after B pushed; want within 40", last-pushedAt)
		}
		t.Logf("B pushed after start %d; its ten started by start %d", pushedAt, last)
	})

	t.Run("ADeadOwnersLeasesCountUntilTheyExpire", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Concurrency: 2, MaxAttempts: 3})
		f.pushN(10)
		// a process leases 2 tasks and dies: its connection goes, its heartbeat stops
		ghostPool := f.newPool()
		ghost, err := repository.New(repository.Config{Owner: "ghost"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ghost.RegisterOwner(f.ctx, ghostPool); err != nil {
			t.Fatal(err)
		}
		if leased, err := ghost.Poll(f.ctx, ghostPool, f.topic, repository.FIFO, repository.None, 10); err != nil || len(leased) != 2 {
			t.Fatalf("the ghost leased %d tasks (%v); want 2, the limit", len(leased), err)
		}
		// Its leases expire ExpiryTimeout after its last heartbeat, which was at
		// registration (by the database's clock; run_log has this process's, on the
		// same machine).
		var heartbeat time.Time
		if err := f.pool.QueryRow(f.ctx, `SELECT heartbeat FROM task_owner WHERE owner = 'ghost'`).Scan(&heartbeat); err != nil {
			t.Fatal(err)
		}
		ghostPool.Close()

		var expired atomic.Int64
		pcfg := processor.Config{ExpiryTimeout: 2 * time.Second, OnExpire: func(e []repository.Expiry) { expired.Add(int64(len(e))) }}
		buffered, err := processor.Buffer(f.recorder(20*time.Millisecond, nil), processor.BufferConfig{MinWorkers: 8})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := f.processor("survivor", pcfg, processor.ManagerConfig{Handler: buffered, BatchSize: 1})
		f.start(p)
		f.eventually("every task done", func() bool { return f.count(repository.Succeeded) == 10 })
		var before int64
		if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM run_log WHERE started < $1`, heartbeat.Add(2*time.Second)).Scan(&before); err != nil {
			t.Fatal(err)
		}
		if before != 0 {
			t.Errorf("%d tasks ran while the dead owner's 2 leases held the limit of 2", before)
		}
		if most := f.overlap(false, time.Time{}); most > 2 {
			t.Errorf("%d tasks ran at once after the expiry; the limit is 2", most)
		}
		if expired.Load() == 0 {
			t.Errorf("no lease expired")
		}
	})

	t.Run("AChangedLimitHoldsFromTheNextPoll", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Concurrency: 1})
		f.pushN(400)
		f.limitedProcessors(4, 4, 1, f.recorder(30*time.Millisecond, nil), processor.Listener{})
		f.eventually("some tasks done", func() bool { return f.runs() >= 5 })
		if most := f.overlap(false, time.Time{}); most != 1 {
			t.Fatalf("%d tasks ran at once under a limit of 1", most)
		}
		raised := time.Now()
		if _, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.Concurrency = 3 }); err != nil {
			t.Fatal(err)
		}
		// processors at the limit are woken by the change (no poll interval passes)
		f.eventually("3 tasks at once", func() bool { return f.overlap(false, raised) == 3 })
		lowered := time.Now()
		if _, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.Concurrency = 1 }); err != nil {
			t.Fatal(err)
		}
		// the polls that began before the change may lease under the old limit; once
		// they are over and at most one task is ACTIVE, no more than one runs again
		// (a second: a poll lasts milliseconds, but a loaded machine may hold one up)
		time.Sleep(time.Second)
		f.eventually("at most one ACTIVE", func() bool { return f.count(repository.Active) <= 1 })
		settled := time.Now()
		f.eventually("tasks done after the change", func() bool {
			var n int64
			err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM run_log WHERE started > $1`, settled).Scan(&n)
			return err == nil && n >= 10
		})
		var most int64
		if err := f.pool.QueryRow(f.ctx, `
			SELECT coalesce(max((SELECT count(*) FROM run_log o
				WHERE o.started <= r.started AND o.ended > r.started AND o.ended > $1)), 0)
			FROM run_log r WHERE r.started >= $1`, settled).Scan(&most); err != nil {
			t.Fatal(err)
		}
		if most > 1 {
			t.Errorf("%d tasks ran at once after the limit went back to 1", most)
		}
		t.Logf("3 at once %v after the limit was raised", lowered.Sub(raised).Round(time.Millisecond))
	})
}

// TestARaisedLimitStartsMoreAtOnce: a processor whose long tasks fill the topic's limit
// waits for one of them to end before it polls again; a limit raised from Go or SQL
// starts more tasks at once, not when the running ones end or the next read of the
// topic comes (the heartbeat's, 30 s here: the 10 s the test allows are for a loaded
// machine).
func TestARaisedLimitStartsMoreAtOnce(t *testing.T) {
	f := setup(t)
	f.limit(repository.TopicSettings{Concurrency: 3})
	f.pushN(20)
	release := make(chan struct{})
	defer close(release)
	var started atomic.Int64
	h, err := processor.Buffer(processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
		started.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return repository.Succeed("")
	}), processor.BufferConfig{MinWorkers: 8})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := f.processor("p", processor.Config{HeartbeatInterval: 30 * time.Second, ExpiryTimeout: 2 * time.Minute},
		processor.ManagerConfig{Handler: h, BatchSize: 8})
	f.start(p)
	f.eventually("3 tasks started", func() bool { return started.Load() == 3 })
	if _, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.Concurrency = 5 }); err != nil {
		t.Fatal(err)
	}
	if !f.within(10*time.Second, func() bool { return started.Load() == 5 }) {
		t.Fatalf("%d tasks started 10 s after the limit was raised from 3 to 5 in Go, want 5", started.Load())
	}
	if _, err := f.pool.Exec(f.ctx, "SELECT task_topic_set_limits($1, concurrency => 7)", f.topic); err != nil {
		t.Fatal(err)
	}
	if !f.within(10*time.Second, func() bool { return started.Load() == 7 }) {
		t.Fatalf("%d tasks started 10 s after the limit was raised from 5 to 7 in SQL, want 7", started.Load())
	}
	if n := started.Load(); n != 7 {
		t.Fatalf("%d tasks started under a limit of 7", n)
	}
}

// TestALimitRaisedWhileNobodyListensIsSeenOnReconnect: a limit raised while the
// processor's listening connection is down is read when it listens again, not at the
// next heartbeat (30 s here; the test allows 10 s for a loaded machine): its manager, parked at the old limit, would otherwise
// wait for its own tasks to end. The wake-up every reconnect sends is an EventWork,
// which a parked manager goes back to sleep on.
func TestALimitRaisedWhileNobodyListensIsSeenOnReconnect(t *testing.T) {
	f := setup(t)
	f.limit(repository.TopicSettings{Concurrency: 3})
	f.pushN(20)
	// New connections of the processor's pool, the listening one's among them, wait
	// while the gate is shut.
	var shut atomic.Bool
	open := make(chan struct{})
	cfg, err := pgxpool.ParseConfig(f.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.BeforeConnect = func(ctx context.Context, _ *pgx.ConnConfig) error {
		if shut.Load() {
			select {
			case <-open:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	// The pool makes all its connections before the gate shuts: a read of the topic
	// begun before the change (the one the first connect of the listener starts) must not
	// wait behind the gate for a new connection and so answer after the change.
	cfg.MinConns = cfg.MaxConns
	pool, err := pgxpool.NewWithConfig(f.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	release := make(chan struct{})
	defer close(release)
	var started atomic.Int64
	h, err := processor.Buffer(processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
		started.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return repository.Succeed("")
	}), processor.BufferConfig{MinWorkers: 8})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := f.processor("p", processor.Config{Pool: pool, HeartbeatInterval: 30 * time.Second, ExpiryTimeout: 2 * time.Minute},
		processor.ManagerConfig{Handler: h, BatchSize: 8})
	connected := p.Notifier().Connected()
	f.start(p)
	<-connected
	f.eventually("3 tasks started", func() bool { return started.Load() == 3 })
	f.eventually("the pool made all its connections", func() bool {
		s := pool.Stat()
		return s.IdleConns()+s.AcquiredConns() == cfg.MaxConns
	})

	shut.Store(true)
	pid := p.Notifier().PID()
	reconnected := p.Notifier().Connected()
	var terminated bool
	if err := f.pool.QueryRow(f.ctx, "SELECT pg_terminate_backend($1)", int32(pid)).Scan(&terminated); err != nil || !terminated {
		t.Fatalf("terminate the listening backend %d: %v %v", pid, terminated, err)
	}
	f.eventually("the listener disconnected", func() bool { return p.Notifier().PID() == 0 })
	// Whatever the processor was reading (its first connect's read of the topic, the
	// reconciliation the drop asks for) has answered before the change.
	f.eventually("the processor's statements answered", func() bool { return pool.Stat().AcquiredConns() == 0 })
	if _, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.Concurrency = 5 }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := started.Load(); n != 3 {
		t.Fatalf("%d tasks started before the listener reconnected, want 3 (the processor learnt of the limit otherwise)", n)
	}
	close(open)
	select {
	case <-reconnected:
	case <-time.After(30 * time.Second):
		t.Fatal("the notifier did not reconnect")
	}
	if !f.within(10*time.Second, func() bool { return started.Load() == 5 }) {
		t.Fatalf("%d tasks started 10 s after the listener reconnected, want 5 (the limit was raised from 3 to 5 while it was down)", started.Load())
	}
}

// BenchmarkLimitWakeup: a topic limited to one task at a time, 20 ms handlers, 4
// processors: how long after a task's completion is committed the next task starts
// (gap-p50-ms, gap-p99-ms), and how many polls each freed slot costs (polls-per-slot:
// the one that leases the next task and the one that finds the limit reached again, when
// a freed slot wakes one processor; 4 more per slot if it woke them all).
func BenchmarkLimitWakeup(b *testing.B) {
	const tasks = 100
	var gaps, commits []time.Duration
	var polls, slots int64
	for range b.N {
		f := setupSerial(b)
		f.limit(repository.TopicSettings{Concurrency: 1})
		f.pushN(tasks)
		var (
			mu        sync.Mutex
			started   = map[int64]time.Time{}
			ended     = map[int64]time.Time{}
			completed = map[int64]time.Time{}
			n         atomic.Int64
		)
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			mu.Lock()
			started[task.Sequence] = time.Now()
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			ended[task.Sequence] = time.Now()
			mu.Unlock()
			return repository.Succeed("")
		})
		listener := processor.Listener{
			OnDispatch: func(string, []repository.Task, time.Duration) { n.Add(1) },
			OnEmpty:    func(string, time.Duration) { n.Add(1) },
			OnComplete: func(_ string, ts []repository.Task, _ time.Duration) {
				now := time.Now()
				mu.Lock()
				for _, t := range ts {
					completed[t.Sequence] = now
				}
				mu.Unlock()
			},
		}
		stops := f.limitedProcessors(4, 4, 1, handler, listener)
		f.eventually("every task done", func() bool { mu.Lock(); defer mu.Unlock(); return len(completed) == tasks })
		for _, stop := range stops {
			_ = stop()
		}
		type run struct{ start, end, done time.Time }
		runs := make([]run, 0, tasks)
		for seq, s := range started {
			runs = append(runs, run{s, ended[seq], completed[seq]})
		}
		slices.SortFunc(runs, func(a, b run) int { return a.start.Compare(b.start) })
		// the first tasks warm the connections up (plans of the poll functions)
		for i := 10; i < len(runs); i++ {
			gaps = append(gaps, runs[i].start.Sub(runs[i-1].done))
			commits = append(commits, runs[i-1].done.Sub(runs[i-1].end))
		}
		polls += n.Load()
		slots += tasks
	}
	slices.Sort(gaps)
	q := func(p float64) float64 {
		return float64(gaps[min(len(gaps)-1, int(p*float64(len(gaps))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(q(0.5), "gap-p50-ms")
	b.ReportMetric(q(0.99), "gap-p99-ms")
	b.ReportMetric(float64(polls)/float64(slots), "polls-per-slot")
	slices.Sort(commits)
	b.ReportMetric(float64(commits[len(commits)/2])/float64(time.Millisecond), "commit-p50-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkLimitConcurrency: a topic limited to 3 tasks at a time, 50 ms handlers, 4
// processors of 8 workers: tasks per second once warm (ideal 60) and that rate's share
// of the ideal.
func BenchmarkLimitConcurrency(b *testing.B) {
	const tasks = 300
	var rates []float64
	for range b.N {
		f := setupSerial(b)
		f.limit(repository.TopicSettings{Concurrency: 3})
		f.pushN(tasks)
		var (
			mu     sync.Mutex
			starts []time.Time
			ends   []time.Time
		)
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
			mu.Lock()
			ends = append(ends, time.Now())
			mu.Unlock()
			return repository.Succeed("")
		})
		stops := f.limitedProcessors(4, 8, 1, handler, processor.Listener{})
		f.eventually("every task done", func() bool { return f.count(repository.Succeeded) == tasks })
		for _, stop := range stops {
			_ = stop()
		}
		slices.SortFunc(starts, time.Time.Compare)
		slices.SortFunc(ends, time.Time.Compare)
		// from the 30th start (warm connections) to the last end
		rates = append(rates, float64(tasks-30)/ends[len(ends)-1].Sub(starts[30]).Seconds())
	}
	slices.Sort(rates)
	rate := rates[len(rates)/2]
	b.ReportMetric(rate, "tasks/s")
	b.ReportMetric(rate/60, "of-ideal")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkLimitBuffered: a topic limited to limit tasks at a time, one processor whose
// Buffer of workers runs 5 ms TaskFuncs, polled batch at a time: tasks per second from
// the start to the last commit, and that rate's share of the ideal (the smaller of the
// limit and the workers, per 5 ms). The tasks a poll or a flush leases reach the
// workers in one batch each (TaskManager.split).
func BenchmarkLimitBuffered(b *testing.B) {
	for _, c := range []struct{ limit, workers, batch int }{{64, 64, 1000}, {64, 8, 100}, {3, 4, 100}} {
		b.Run(fmt.Sprintf("limit=%d/workers=%d/batch=%d", c.limit, c.workers, c.batch), func(b *testing.B) {
			const tasks = 3000
			var rates []float64
			for range b.N {
				f := setupSerial(b)
				f.limit(repository.TopicSettings{Concurrency: int32(c.limit)})
				f.pushN(tasks)
				h := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
					time.Sleep(5 * time.Millisecond)
					return repository.Succeed("")
				})
				buffered, err := processor.Buffer(h, processor.BufferConfig{MinWorkers: c.workers})
				if err != nil {
					b.Fatal(err)
				}
				p, _ := f.processor("processor", processor.Config{}, processor.ManagerConfig{Handler: buffered, BatchSize: c.batch})
				start := time.Now()
				stop := f.start(p)
				f.eventually("every task done", func() bool { return f.count(repository.Succeeded) == tasks })
				rates = append(rates, float64(tasks)/time.Since(start).Seconds())
				_ = stop()
			}
			slices.Sort(rates)
			rate := rates[len(rates)/2]
			b.ReportMetric(rate, "tasks/s")
			b.ReportMetric(rate/(float64(min(c.limit, c.workers))/0.005), "of-ideal")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// TestDueTaskHeldBackByALimit: a delayed task that falls due while a limit holds it back
// (its key's limit of 1 while its key's other task runs; a rate limit without a token
// left) wakes its manager once: the poll from its position finds nothing, and the probe
// for due tasks does not send the next poll straight back to it. Before, each empty
// poll's probe found the task due and woke the manager at once: the manager polled over
// and over (about 400 times a second here), as fast as the database answered, until
// the limit let the task start.
func TestDueTaskHeldBackByALimit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		settings repository.TopicSettings
		block    bool // the first task runs until the second one has waited
	}{
		{"ByItsKeysLimit", repository.TopicSettings{KeyConcurrency: 1}, true},
		{"ByTheRateLimit", repository.TopicSettings{Rate: 1, RatePeriod: 2 * time.Second, RateBurst: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			f.limit(tc.settings)
			started, release := make(chan struct{}), make(chan struct{})
			handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
				if task.Identifier == "first" {
					close(started)
					if tc.block {
						<-release
					}
				}
				return repository.Succeed("")
			})
			buffered, err := processor.Buffer(handler, processor.BufferConfig{MinWorkers: 4})
			if err != nil {
				t.Fatal(err)
			}
			var empty atomic.Int64
			p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: buffered,
				Listener: processor.Listener{OnEmpty: func(string, time.Duration) { empty.Add(1) }}})
			f.start(p)
			if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "first", ConcurrencyKey: "k"}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-started:
			case <-time.After(time.Minute):
				t.Fatal("the first task did not start")
			}
			delayed, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append,
				repository.Creation{Identifier: "delayed", ConcurrencyKey: "k", Delay: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			before := empty.Load()
			time.Sleep(time.Second) // the delayed task falls due and waits for the limit
			polls := empty.Load() - before
			close(release)
			f.eventually("the delayed task done", func() bool { return f.get(delayed[0].Sequence).State == repository.Succeeded })
			// a handful: the push's, the timer's, a probe's; not one per round trip
			if polls > 20 {
				t.Errorf("%d empty polls in the second the due task waited for the limit; want a few", polls)
			}
			t.Logf("%d empty polls while the due task waited", polls)
		})
	}
}

// TestExpiryOfALimitedTopicWakesItsWaiters: the expiry that takes a dead owner's task
// back (READY again after its backoff) frees its slot of the topic's limit, and the
// processors waiting at the limit poll at once, whoever ran the expiry. Before, the
// expiry's notification carried the retried task's delay: they armed a timer for it and
// waited for it (an hour here) or for their pause interval.
func TestExpiryOfALimitedTopicWakesItsWaiters(t *testing.T) {
	f := setup(t)
	f.limit(repository.TopicSettings{Concurrency: 1, MaxAttempts: 2, BackoffBase: time.Hour, BackoffCap: time.Hour})
	ghost, err := repository.New(repository.Config{Owner: "ghost", Now: func() time.Time { return time.Now().Add(-time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ghost.RegisterOwner(f.ctx, f.pool); err != nil {
		t.Fatal(err)
	}
	tasks, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append,
		repository.Creation{Identifier: "held"}, repository.Creation{Identifier: "waiting"})
	if err != nil {
		t.Fatal(err)
	}
	if leased, err := ghost.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 1); err != nil || len(leased) != 1 {
		t.Fatalf("the ghost's lease: %v, %v", leased, err)
	}
	// a processor waiting at the limit, which does not take the ghost's leases back itself
	p, _ := f.processor("waiter", processor.Config{ExpiryTimeout: 2 * time.Hour},
		processor.ManagerConfig{Handler: processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			return repository.Succeed("")
		})})
	f.start(p)
	time.Sleep(500 * time.Millisecond) // it polls, finds the limit full, and waits
	if got := f.get(tasks[1].Sequence); got.State != repository.Ready {
		t.Fatalf("the waiting task is %v before the expiry, want READY (the limit is full)", got.State)
	}
	if expired, err := f.repo.Expire(f.ctx, f.pool, 30*time.Minute); err != nil || len(expired) != 1 || expired[0].Retried != 1 {
		t.Fatalf("expire: %+v, %v; want the ghost's task retried", expired, err)
	}
	f.eventually("the waiting task done", func() bool { return f.get(tasks[1].Sequence).State == repository.Succeeded })
	if got := f.get(tasks[0].Sequence); got.State != repository.Ready {
		t.Errorf("the ghost's task is %v, want READY for its retry in an hour", got.State)
	}
}

package processor_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/faultproxy"
	"github.com/pgtask/pgtask/internal/logbuf"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// lostReplies is how many replies each case of TestLostReplies loses.
const lostReplies = 50

// TestLostReplies runs a processor through a proxy that loses the replies of one kind
// of statement after the server has committed it — as a failover or a cut network path
// does — at random points of a steady push and burn-down, until 50 replies are lost.
// Afterwards every task pushed exists once and has SUCCEEDED (none stranded under the
// live owner, none lost), each ran exactly once (never two runs of one task at a time,
// nor a second run), and no decision was reported as not committed.
func TestLostReplies(t *testing.T) {
	for _, tc := range []struct {
		name      string
		statement string
		// probability of losing a matching reply
		probability float64
		// concurrency limits the topic: its flushes lease the next tasks in the
		// statement that completes the decisions (TaskCompletePoll), which then loses
		// its reply
		concurrency int32
	}{
		{"Poll", "TaskPoll", 0.5, 0},
		{"Complete", "TaskComplete", 0.2, 0},
		{"CompleteAndLease", "TaskCompletePoll", 0.2, 10},
		{"Heartbeat", "OwnerHeartbeatRow", 0.5, 0},
		{"Expiry", "TaskExpire", 0.5, 0},
		{"Push", "TaskPushAppend", 0.2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			if _, err := f.repo.Configure(f.ctx, f.pool, f.topic, repository.TopicSettings{
				MaxAttempts: 1000, BackoffBase: time.Millisecond, BackoffCap: 10 * time.Millisecond,
				Concurrency: tc.concurrency,
			}); err != nil {
				t.Fatal(err)
			}
			proxy := f.startProxy()
			proxied := proxiedPool(t, proxy, f.url)

			runs := newRunBook()
			var logs logbuf.Buffer
			// the tasks OnComplete reported SUCCEEDED: those of a commit whose reply was
			// lost too (read back), as metrics and Subscribe count them
			var reportedMu sync.Mutex
			reported := map[int64]bool{}
			listener := processor.Listener{OnComplete: func(_ string, tasks []repository.Task, _ time.Duration) {
				reportedMu.Lock()
				defer reportedMu.Unlock()
				for _, task := range tasks {
					if task.State == repository.Succeeded {
						reported[task.Sequence] = true
					}
				}
			}}
			p, _ := f.processor("processor", processor.Config{
				Pool: proxied, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
				HeartbeatInterval: 50 * time.Millisecond, ExpiryTimeout: 400 * time.Millisecond,
			}, processor.ManagerConfig{Handler: processor.TaskFunc(runs.handle), BatchSize: 10, PauseInterval: 100 * time.Millisecond, Listener: listener})
			stop := f.start(p)

			cut := proxy.AddCut(&faultproxy.Cut{Match: faultproxy.Statement(tc.statement), Probability: tc.probability, Times: lostReplies})
			ctx, cancel := context.WithTimeout(f.ctx, 90*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			if tc.name == "Expiry" {
				// Owners that lease a few tasks and die, for the processor to expire.
				wg.Go(func() { zombies(ctx, f, cut) })
			}
			pushVia := f.pool
			if tc.name == "Push" {
				pushVia = proxied
			}
			pushed := pushUntil(ctx, t, f, pushVia, cut, runs.ran)
			wg.Wait()
			if cut.Lost() < lostReplies {
				t.Logf("processor log:\n%s", strings.Join(logs.Lines(), "\n"))
				t.Fatalf("lost %d replies of %s in 90 s, want %d", cut.Lost(), tc.statement, lostReplies)
			}
			proxy.RemoveCut(cut)

			if !f.within(60*time.Second, func() bool { return f.count(repository.Succeeded) >= int64(pushed) }) {
				// what is left, and what the processor said, to tell why
				rows, _ := f.pool.Query(f.ctx, `SELECT state || ' ' || coalesce(owner, '-') || ' attempt ' || attempt || ' returned ' || returned,
					count(*) FROM task WHERE topic = $1 AND state <> 6 GROUP BY 1`, f.topic)
				for rows.Next() {
					var what string
					var n int64
					_ = rows.Scan(&what, &n)
					t.Logf("left: %d tasks %s", n, what)
				}
				rows.Close()
				t.Logf("processor log:\n%s", strings.Join(logs.Lines(), "\n"))
				t.Fatalf("%d of %d tasks SUCCEEDED after a minute", f.count(repository.Succeeded), pushed)
			}
			if err := stop(); err != nil {
				t.Fatalf("processor: %v", err)
			}
			for _, s := range []repository.State{repository.Ready, repository.Active, repository.Expired, repository.Failed} {
				if n := f.count(s); n != 0 {
					t.Errorf("%d tasks %v at the end, want 0", n, s)
				}
			}
			if n := f.count(repository.Succeeded); n != int64(pushed) {
				t.Errorf("%d tasks SUCCEEDED, want the %d pushed (each once)", n, pushed)
			}
			runs.check(t, pushed)
			if tc.name == "Complete" {
				reportedMu.Lock()
				if len(reported) != pushed {
					t.Errorf("OnComplete reported %d tasks SUCCEEDED, want the %d pushed: those of commits whose reply was lost too", len(reported), pushed)
				}
				reportedMu.Unlock()
			}
			if lines := logs.Lines("level=ERROR", "decisions not committed"); len(lines) > 0 {
				t.Errorf("a completion reported as not committed:\n%s", strings.Join(lines, "\n"))
			}
			t.Logf("%d tasks, %d replies of %s lost", pushed, cut.Lost(), tc.statement)
		})
	}
}

// startProxy starts a fault proxy in front of the fixture's server until the test ends.
func (f *fixture) startProxy() *faultproxy.Proxy {
	f.t.Helper()
	proxy, err := faultproxy.Start(f.url)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { proxy.Close() })
	return proxy
}

func proxiedPool(t *testing.T, proxy *faultproxy.Proxy, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := proxy.PoolConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// pushUntil pushes 20 tasks every 10 ms through pool until cut has lost its replies
// (or ctx ends), and returns how many distinct tasks it pushed. It waits while more than
// backlog tasks wait to run (ran says how many ran), so that the burn-down at the end
// does not depend on how long the faults took to happen. A push whose outcome is unknown
// (repository.Uncertain) is settled by looking its tasks up by identifier and pushing
// again only those that are missing: the recipe for pushing exactly once.
func pushUntil(ctx context.Context, t *testing.T, f *fixture, pool *pgxpool.Pool, cut *faultproxy.Cut, ran func() int) int {
	t.Helper()
	const backlog = 2000
	n := 0
	for ctx.Err() == nil && cut.Lost() < lostReplies {
		if n-ran() > backlog {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		batch := make([]repository.Creation, 20)
		for i := range batch {
			batch[i] = repository.Creation{Identifier: fmt.Sprintf("task-%d", n+i)}
		}
		for len(batch) > 0 && ctx.Err() == nil {
			_, err := f.repo.Push(ctx, pool, f.topic, repository.Append, batch...)
			if err == nil {
				break
			}
			if repository.Uncertain(err) {
				batch = missing(ctx, t, f, batch)
			}
			time.Sleep(10 * time.Millisecond)
		}
		n += 20
		time.Sleep(10 * time.Millisecond)
	}
	return n
}

// missing returns the creations whose identifier no task of the topic has.
func missing(ctx context.Context, t *testing.T, f *fixture, batch []repository.Creation) []repository.Creation {
	var out []repository.Creation
	for _, c := range batch {
		tasks, err := f.repo.Page(ctx, f.pool, f.topic, repository.TaskFilter{Identifier: c.Identifier}, 0, 2, repository.Forward)
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("look up %s: %v", c.Identifier, err)
			}
			return nil
		}
		if len(tasks) == 0 {
			out = append(out, c)
		}
	}
	return out
}

// zombies registers an owner every 100 ms that leases 5 tasks and never heart-beats
// again, until cut has lost its replies or ctx ends.
func zombies(ctx context.Context, f *fixture, cut *faultproxy.Cut) {
	for i := 0; ctx.Err() == nil && cut.Lost() < lostReplies; i++ {
		repo, err := repository.New(repository.Config{Owner: fmt.Sprintf("zombie-%d", i)})
		if err == nil {
			if _, err = repo.RegisterOwner(ctx, f.pool); err == nil {
				_, err = repo.Poll(ctx, f.pool, f.topic, repository.FIFO, repository.None, 5)
			}
		}
		if err != nil && ctx.Err() == nil {
			f.t.Errorf("zombie: %v", err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runBook records the runs of each task by the handler.
type runBook struct {
	mu       sync.Mutex
	running  map[int64]bool
	runs     map[int64]int
	overlaps atomic.Int64
}

func newRunBook() *runBook { return &runBook{running: map[int64]bool{}, runs: map[int64]int{}} }

func (b *runBook) handle(ctx context.Context, task repository.Task) repository.Decision {
	b.mu.Lock()
	if b.running[task.Sequence] {
		b.overlaps.Add(1)
	}
	b.running[task.Sequence] = true
	b.runs[task.Sequence]++
	b.mu.Unlock()
	time.Sleep(100 * time.Microsecond)
	b.mu.Lock()
	b.running[task.Sequence] = false
	b.mu.Unlock()
	return repository.Decision{Result: repository.Success}
}

// ran returns how many distinct tasks ran.
func (b *runBook) ran() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.runs)
}

// check asserts that n tasks ran, each once, never two runs at a time.
func (b *runBook) check(t *testing.T, n int) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if o := b.overlaps.Load(); o > 0 {
		t.Errorf("%d runs started while the same task was running", o)
	}
	if len(b.runs) != n {
		t.Errorf("%d tasks ran, want %d", len(b.runs), n)
	}
	again := 0
	for seq, r := range b.runs {
		if r > 1 {
			again++
			if again <= 5 {
				t.Errorf("task %d ran %d times", seq, r)
			}
		}
	}
	if again > 0 {
		t.Errorf("%d tasks ran more than once", again)
	}
}

// TestLostCommits: a server that crashes with synchronous_commit off, or a failover to
// an asynchronous standby, can lose completions it had acknowledged. Their tasks are
// then ACTIVE again under the processor's owner, which goes on heart-beating, so no
// expiry takes them back; the processor, which saw them committed, must find them
// itself once it has seen the outage, and run them again. The outage is a proxy that
// closes every connection and refuses new ones while the tasks of the last completions
// are put back ACTIVE under the owner, as the crashed server would hold them. No poll
// meets the outage: the processor's heartbeat or its listening connection sees it.
func TestLostCommits(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  processor.Config
		// inFlight: the lost completions are those of the first tasks of a batch whose
		// last tasks are still running (blocking one of two Buffer workers); and the
		// first of those, the server holds under an attempt before the one running (as
		// if the lease of this attempt, and the retry before it, were lost): it runs
		// again only once its run under this attempt has ended (its completion is then
		// refused, and its batch mates' committed)
		inFlight bool
		// ping: the processor's pool pings every connection it hands out, so that it
		// replaces those the outage closed without an error any operation sees
		ping bool
	}{
		// without notifications, only the failing heartbeats tell
		{name: "SeenByTheHeartbeat", cfg: processor.Config{DisableNotifications: true,
			HeartbeatInterval: 50 * time.Millisecond, ExpiryTimeout: 400 * time.Millisecond}},
		// the heartbeat does not come round during the outage
		{name: "SeenByTheListener", cfg: processor.Config{HeartbeatInterval: 10 * time.Second, ExpiryTimeout: time.Minute}, ping: true},
		// an expiry timeout well past the outage: a heartbeat stale for it would
		// cancel the batch's handlers (guardLeases), which is not what is tested here
		{name: "ABatchStillRunning", cfg: processor.Config{DisableNotifications: true,
			HeartbeatInterval: 50 * time.Millisecond, ExpiryTimeout: 3 * time.Second}, inFlight: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			proxy := f.startProxy()
			poolCfg, err := proxy.PoolConfig(f.url)
			if err != nil {
				t.Fatal(err)
			}
			if tc.ping {
				poolCfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return true }
			}
			pool, err := pgxpool.NewWithConfig(f.ctx, poolCfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)

			pushed, lost := 100, 15
			if tc.inFlight {
				pushed, lost = 10, 5
			}
			tasks := f.pushN(pushed)
			runs := newRunBook()
			release := make(chan struct{})
			var handler processor.Handler = processor.TaskFunc(runs.handle)
			if tc.inFlight {
				// the batch of all ten: its first five are decided and committed, its
				// last five wait for release, holding one of two workers
				blocked := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
					if task.Sequence >= tasks[lost].Sequence {
						<-release
					}
					return runs.handle(ctx, task)
				})
				if handler, err = processor.Buffer(blocked, processor.BufferConfig{MinWorkers: 2, MaxWorkers: 2}); err != nil {
					t.Fatal(err)
				}
			} else {
				close(release)
			}
			var logs logbuf.Buffer
			cfg := tc.cfg
			cfg.Pool = pool
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			// (the fixture's managers hibernate for an hour: only a wake-up polls)
			p, _ := f.processor("processor", cfg, processor.ManagerConfig{Handler: handler, BatchSize: 10})
			stop := f.start(p)
			defer stop()
			defer func() {
				select {
				case <-release:
				default:
					close(release)
				}
			}()

			states := func() (succeeded, active int64) {
				if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FILTER (WHERE state = 6), count(*) FILTER (WHERE state = 0)
					FROM task WHERE topic = $1`, f.topic).Scan(&succeeded, &active); err != nil {
					t.Fatal(err)
				}
				return succeeded, active
			}
			done := pushed
			if tc.inFlight {
				done = lost
			}
			if !f.within(30*time.Second, func() bool { s, _ := states(); return s == int64(done) }) {
				t.Fatalf("before the outage: %d SUCCEEDED, want %d", first(states()), done)
			}
			time.Sleep(200 * time.Millisecond) // the processor idles, or waits for its last five

			// the crash: every connection cut, and the last completions lost
			proxy.Refuse(true)
			proxy.CutAll()
			tag, err := f.pool.Exec(f.ctx, `UPDATE task SET state = 0, completed = NULL, output = NULL
				WHERE topic = $1 AND sequence IN (SELECT sequence FROM task WHERE topic = $1 AND state = 6
				                                  ORDER BY sequence DESC LIMIT $2)`, f.topic, lost)
			if err != nil || tag.RowsAffected() != int64(lost) {
				t.Fatalf("put %d tasks back ACTIVE: %v, %v", lost, tag, err)
			}
			twice := lost
			if tc.inFlight {
				if _, err := f.pool.Exec(f.ctx, `UPDATE task SET attempt = attempt - 1 WHERE topic = $1 AND sequence = $2`,
					f.topic, tasks[lost].Sequence); err != nil {
					t.Fatal(err)
				}
				twice++
			}
			time.Sleep(300 * time.Millisecond)
			proxy.Refuse(false)
			if tc.inFlight {
				// the reconciliation runs while the batch is in flight: the five run
				// again before their batch mates finish
				if !f.within(30*time.Second, func() bool { s, _ := states(); return s == int64(lost) && runs.ran() == lost && runTwice(runs) == lost }) {
					t.Logf("processor log:\n%s", strings.Join(logs.Lines(), "\n"))
					t.Fatalf("30 s after the outage, with the batch still running: %d SUCCEEDED, %d tasks ran again; want the %d whose completion was lost",
						first(states()), runTwice(runs), lost)
				}
				close(release)
			}

			if !f.within(30*time.Second, func() bool { s, _ := states(); return s == int64(pushed) }) {
				s, a := states()
				t.Logf("processor log:\n%s", strings.Join(logs.Lines(), "\n"))
				t.Fatalf("30 s after the outage: %d SUCCEEDED, %d ACTIVE (want %d and 0: the lost completions' tasks run again)", s, a, pushed)
			}
			if n := runTwice(runs); runs.ran() != pushed || n != twice {
				t.Errorf("%d tasks ran, %d of them twice; want %d and %d twice", runs.ran(), n, pushed, twice)
			}
			if o := runs.overlaps.Load(); o > 0 {
				t.Errorf("%d runs started while the same task was running", o)
			}
			if lines := logs.Lines("running leased tasks no manager knows of"); len(lines) == 0 {
				t.Errorf("the processor did not say it found leases it did not know of:\n%s", strings.Join(logs.Lines(), "\n"))
			}
		})
	}
}

// TestLateLeases: leases under the processor's owner that appear with no fault seen (as
// a lease that becomes visible only after the reconciliation that followed its outage:
// TestBurnDown of internal/citustest) are found by the reconciliation each manager runs
// every so often, and run once.
func TestLateLeases(t *testing.T) {
	f := setup(t)
	runs := newRunBook()
	var logs logbuf.Buffer
	// the poll time reported with the late leases' dispatch (the read that found them)
	var lateMu sync.Mutex
	var latePolls []time.Duration
	listener := processor.Listener{OnDispatch: func(_ string, tasks []repository.Task, poll time.Duration) {
		if strings.HasPrefix(tasks[0].Identifier, "late-") {
			lateMu.Lock()
			latePolls = append(latePolls, poll)
			lateMu.Unlock()
		}
	}}
	p, _ := f.processor("processor", processor.Config{DisableNotifications: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		processor.ManagerConfig{Handler: processor.TaskFunc(runs.handle), PauseInterval: 50 * time.Millisecond, Listener: listener})
	processor.SetReconcileEvery(p, time.Second)
	f.start(p)
	f.pushN(3)
	if !f.within(30*time.Second, func() bool { return runs.ran() == 3 }) {
		t.Fatalf("%d tasks ran, want the 3 pushed", runs.ran())
	}
	// five tasks ACTIVE under the processor's owner, which it never polled
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(f.ctx) }()
	creations := make([]repository.Creation, 5)
	for i := range creations {
		creations[i] = repository.Creation{Identifier: fmt.Sprintf("late-%d", i)}
	}
	if _, err := f.repo.Push(f.ctx, tx, f.topic, repository.Append, creations...); err != nil {
		t.Fatal(err)
	}
	if tag, err := tx.Exec(f.ctx, `UPDATE task SET state = 0, owner = 'processor', attempt = 1
		WHERE topic = $1 AND identifier LIKE 'late-%'`, f.topic); err != nil || tag.RowsAffected() != 5 {
		t.Fatalf("lease the five: %v, %v", tag, err)
	}
	if err := tx.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	var succeeded int64
	if !f.within(30*time.Second, func() bool {
		if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task WHERE topic = $1 AND state = 6", f.topic).Scan(&succeeded); err != nil {
			t.Fatal(err)
		}
		return succeeded == 8
	}) {
		t.Logf("processor log:\n%s", strings.Join(logs.Lines(), "\n"))
		t.Fatalf("%d SUCCEEDED 30 s after the late leases, want 8: the processor heart-beats, so only it can run them", succeeded)
	}
	if n := runTwice(runs); runs.ran() != 8 || n != 0 {
		t.Errorf("%d tasks ran, %d of them twice; want 8 once each", runs.ran(), n)
	}
	if lines := logs.Lines("running leased tasks no manager knows of"); len(lines) != 1 {
		t.Errorf("the processor said %d times that it found leases it did not know of, want once:\n%s", len(lines), strings.Join(logs.Lines(), "\n"))
	}
	lateMu.Lock()
	defer lateMu.Unlock()
	if len(latePolls) != 1 || latePolls[0] <= 0 {
		t.Errorf("the late leases were dispatched with poll times %v; want one dispatch timed by the read that found them", latePolls)
	}
}

// runTwice returns how many tasks ran twice.
func runTwice(b *runBook) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, r := range b.runs {
		if r == 2 {
			n++
		}
	}
	return n
}

// first returns the first of two values.
func first[A, B any](a A, _ B) A { return a }

// TestCompletionPartlyRefused: when the server refuses some of a batch's decisions (those
// tasks are no longer ACTIVE under the owner in the attempt completed: here one is held
// under another attempt, as after a lost retry and lease), the others are committed at
// once, and the refused task, ACTIVE under the owner in its other attempt, is run again
// by the reconciliation that follows: it alone runs twice.
func TestCompletionPartlyRefused(t *testing.T) {
	f := setup(t)
	tasks := f.pushN(4)
	runs := newRunBook()
	proceed := make(chan struct{})
	var first atomic.Bool
	handler := processor.BatchFunc(func(ctx context.Context, batch []repository.Task) (map[int64]repository.Decision, error) {
		if first.CompareAndSwap(false, true) {
			<-proceed
		}
		decisions := map[int64]repository.Decision{}
		for _, task := range batch {
			decisions[task.Sequence] = runs.handle(ctx, task)
		}
		return decisions, nil
	})
	var logs logbuf.Buffer
	p, _ := f.processor("processor", processor.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		processor.ManagerConfig{Handler: handler, BatchSize: 10})
	stop := f.start(p)
	defer stop()
	f.eventually("the four tasks leased", func() bool { return f.count(repository.Active) == 4 })
	leaseElsewhere(t, f, tasks[2].Sequence)
	close(proceed)
	var succeeded int64
	f.eventually("the four tasks SUCCEEDED", func() bool {
		if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM task WHERE topic = $1 AND state = 6`, f.topic).Scan(&succeeded); err != nil {
			t.Fatal(err)
		}
		return succeeded == 4
	})
	if n := runTwice(runs); runs.ran() != 4 || n != 1 {
		t.Errorf("%d tasks ran, %d of them twice; want 4, and only the refused one twice", runs.ran(), n)
	}
	runs.mu.Lock()
	defer runs.mu.Unlock()
	if runs.runs[tasks[2].Sequence] != 2 {
		t.Errorf("the refused task ran %d times, want 2", runs.runs[tasks[2].Sequence])
	}
	wantRefusalWarned(t, &logs)
}

// TestCompletionRefused: a batch whose every decision is refused (its one task leased
// again under another attempt meanwhile) is logged as a warning, not an error, and the
// task runs again under the attempt it now has.
func TestCompletionRefused(t *testing.T) {
	f := setup(t)
	tasks := f.pushN(1)
	runs := newRunBook()
	proceed := make(chan struct{})
	var first atomic.Bool
	handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
		if first.CompareAndSwap(false, true) {
			<-proceed
		}
		return runs.handle(ctx, task)
	})
	var logs logbuf.Buffer
	p, _ := f.processor("processor", processor.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		processor.ManagerConfig{Handler: handler})
	stop := f.start(p)
	defer stop()
	f.eventually("the task leased", func() bool { return f.count(repository.Active) == 1 })
	leaseElsewhere(t, f, tasks[0].Sequence)
	close(proceed)
	f.eventually("the task SUCCEEDED", func() bool { return f.count(repository.Succeeded) == 1 })
	runs.mu.Lock()
	n := runs.runs[tasks[0].Sequence]
	runs.mu.Unlock()
	if n != 2 {
		t.Errorf("the task ran %d times, want 2 (refused once)", n)
	}
	wantRefusalWarned(t, &logs)
}

// leaseElsewhere makes the server hold the task of sequence under another attempt, as
// after a lost retry and lease: the decision of the batch running it is then refused.
func leaseElsewhere(t *testing.T, f *fixture, sequence int64) {
	t.Helper()
	if _, err := f.pool.Exec(f.ctx, `UPDATE task SET attempt = attempt + 5 WHERE topic = $1 AND sequence = $2`,
		f.topic, sequence); err != nil {
		t.Fatal(err)
	}
}

// wantRefusalWarned checks that the processor logged one refused decision, as a warning
// (a lease lost is the queue working as promised, not a fault), and no error.
func wantRefusalWarned(t *testing.T, logs *logbuf.Buffer) {
	t.Helper()
	if lines := logs.Lines("level=WARN", "decisions refused: tasks no longer leased", "tasks=1"); len(lines) != 1 {
		t.Errorf("%d warnings of the refused decision, want 1; log:\n%s", len(lines), strings.Join(logs.Lines(), "\n"))
	}
	if lines := logs.Lines("level=ERROR"); len(lines) > 0 {
		t.Errorf("errors logged for a refused decision:\n%s", strings.Join(lines, "\n"))
	}
}

// TestHungHeartbeatFails: a heartbeat whose statement hangs (a connection that went
// silent) fails after the expiry timeout, and Health names it, rather than waiting for
// the kernel to give the connection up while other processes take the leases back.
func TestHungHeartbeatFails(t *testing.T) {
	f := setup(t)
	proxy := f.startProxy()
	pool := proxiedPool(t, proxy, f.url)
	p, _ := f.processor("p", processor.Config{Pool: pool, DisableNotifications: true,
		HeartbeatInterval: 100 * time.Millisecond, ExpiryTimeout: 500 * time.Millisecond},
		processor.ManagerConfig{Handler: processor.TaskFunc(func(context.Context, repository.Task) repository.Decision {
			return repository.Succeed("")
		})})
	f.start(p)
	// started and heart-beating: its heartbeat moved since it registered
	var first time.Time
	f.eventually("a heartbeat after the registration", func() bool {
		var at time.Time
		if err := f.pool.QueryRow(f.ctx, "SELECT heartbeat FROM task_owner WHERE owner = 'p'").Scan(&at); err != nil {
			return false
		}
		if first.IsZero() {
			first = at
		}
		return at.After(first)
	})
	proxy.Delay(3 * time.Second) // each request held that long: a silent connection
	defer proxy.Delay(0)
	// A hang that waits for the kernel lasts minutes; the failure comes after the
	// expiry timeout (500 ms), and the bound leaves room for a loaded machine.
	if !f.within(30*time.Second, func() bool { err := p.Health(); return err != nil && strings.Contains(err.Error(), "heartbeat") }) {
		t.Fatalf("health 30 s into a hung connection: %v, want the heartbeat failing", p.Health())
	}
}

// TestLostReplyOfARefusal: a completion whose reply is lost is retried and refused, its
// task no longer ACTIVE in the attempt decided. When the lease was taken back before the
// completion reached the server (the process was cut off for longer than the expiry
// timeout), the task is EXPIRED (its last attempt), which no decision makes, or READY
// and run again, not SUCCEEDED as decided: the decisions did not commit, and the
// processor says they were refused. A task cancelled while it ran ends FAILED whatever
// its decision, which tells nothing: that refusal is the mark of the lost attempt's
// commit, as ever.
func TestLostReplyOfARefusal(t *testing.T) {
	for _, c := range []struct {
		name     string
		attempts int32
		// meanwhile takes the lease back, or cancels the task
		meanwhile func(f *fixture, sequence int64)
		want      repository.State
		committed bool  // the lost attempt committed the decisions
		commits   int64 // what the listener hears of
	}{
		{"ExpiredAtTheLastAttempt", 1, takeBack, repository.Expired, false, 0},
		{"ExpiredWithAttemptsLeft", 3, takeBack, repository.Succeeded, false, 1}, // the second attempt's
		{"CancelledWhileItRan", 3, func(f *fixture, sequence int64) {
			if _, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "test", sequence); err != nil {
				f.t.Fatal(err)
			}
		}, repository.Failed, true, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t)
			if _, err := f.repo.Configure(f.ctx, f.pool, f.topic, repository.TopicSettings{
				MaxAttempts: c.attempts, BackoffBase: time.Millisecond, BackoffCap: time.Millisecond,
			}); err != nil {
				t.Fatal(err)
			}
			proxy := f.startProxy()
			var logs logbuf.Buffer
			release := make(chan struct{})
			var completes atomic.Int64
			p, _ := f.processor("cut-off", processor.Config{
				Pool: proxiedPool(t, proxy, f.url), Logger: slog.New(slog.NewTextHandler(&logs, nil)),
				HeartbeatInterval: 50 * time.Millisecond, ExpiryTimeout: time.Hour,
			}, processor.ManagerConfig{
				Handler: processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
					<-release
					return repository.Succeed("")
				}),
				Listener: processor.Listener{OnComplete: func(string, []repository.Task, time.Duration) { completes.Add(1) }},
			})
			f.start(p)
			pushed := f.pushN(1)
			f.eventually("the task was leased", func() bool { return f.count(repository.Active) == 1 })
			c.meanwhile(f, pushed[0].Sequence)
			cut := proxy.AddCut(&faultproxy.Cut{Match: faultproxy.Statement("TaskComplete"), Times: 1})
			close(release)
			f.eventually("the refusal was logged", func() bool {
				return len(logs.Lines("decisions refused")) > 0 || len(logs.Lines("committed by an attempt")) > 0
			})
			if cut.Lost() != 1 {
				t.Fatalf("the cut lost %d replies, want the completion's", cut.Lost())
			}
			f.eventually("the task settled", func() bool {
				return f.get(pushed[0].Sequence).State == c.want && completes.Load() >= c.commits
			})
			if lines := logs.Lines("committed by an attempt"); (len(lines) > 0) != c.committed {
				t.Errorf("reported as committed by the lost attempt: %d log lines, want %v; log:\n%s",
					len(lines), c.committed, strings.Join(logs.Lines(), "\n"))
			}
			if n := completes.Load(); n != c.commits {
				t.Errorf("the listener heard of %d completions; want %d", n, c.commits)
			}
		})
	}
}

// takeBack expires the fixture's task as another process two hours later by its clock
// would: the processor running it was cut off for longer than the expiry timeout.
func takeBack(f *fixture, _ int64) {
	f.t.Helper()
	later, err := repository.New(repository.Config{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	if err != nil {
		f.t.Fatal(err)
	}
	if expired, err := later.Expire(f.ctx, f.pool, time.Hour); err != nil || len(expired) != 1 {
		f.t.Fatalf("expire: %v, %v; want the one lease", expired, err)
	}
}

// TestLostPollReplyAtShutdown: a poll whose reply is lost after the shutdown began (the
// server leased the task, the processor never heard) no longer leaves the task ACTIVE
// under an owner that then keeps its row, for expiry to take it back with its attempt
// counted (a task on its last attempt would end EXPIRED without having run): the
// shutdown looks for the leases no manager knows of and hands them back, the attempt
// unused, and the owner row goes.
func TestLostPollReplyAtShutdown(t *testing.T) {
	f := setup(t)
	if _, err := f.repo.Configure(f.ctx, f.pool, f.topic, repository.TopicSettings{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	proxy := f.startProxy()
	proxied := proxiedPool(t, proxy, f.url)
	var ran atomic.Int64
	var logs logbuf.Buffer
	started := make(chan struct{})
	// Heartbeats that outlast the proxy's delay below: the fixture's (every 100 ms,
	// expiring at 500 ms) all timed out behind it, and once the last that succeeded was
	// 400 ms old the manager leased nothing more (Processor.beatStale); on a loaded
	// machine the push came that late and woke no poll.
	p, _ := f.processor("leaver", processor.Config{
		Pool: proxied, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		HeartbeatInterval: time.Second, ExpiryTimeout: 10 * time.Second,
	}, processor.ManagerConfig{
		Listener:      processor.Listener{OnStart: func(string) { close(started) }},
		Handler:       processor.TaskFunc(func(context.Context, repository.Task) repository.Decision { ran.Add(1); return repository.Succeed("") }),
		PauseInterval: time.Minute, ShutdownTimeout: 10 * time.Second,
	})
	stop := f.start(p)
	<-started
	time.Sleep(300 * time.Millisecond) // its first poll (empty) done: it waits for a notification
	// From here every request of the processor reaches the server 0.5 s late, and the
	// reply to its next poll is lost once the server has leased (and committed).
	proxy.Delay(500 * time.Millisecond)
	cut := proxy.AddCut(&faultproxy.Cut{Match: faultproxy.Statement("TaskPoll"), Times: 1})
	f.pushN(1)
	// Stop once the poll the push's notification woke is in the proxy (its reply
	// claimed by the cut, the request itself still held by the delay).
	for deadline := time.Now().Add(20 * time.Second); cut.Lost() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the push's notification woke no poll within 20 s")
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if cut.Lost() != 1 {
		t.Fatalf("lost %d poll replies, want the one", cut.Lost())
	}
	task, err := f.repo.Get(f.ctx, f.pool, f.topic, 1)
	if err != nil {
		t.Fatal(err)
	}
	if task.State != repository.Ready || task.Attempt-task.Returned != 0 || ran.Load() != 0 {
		t.Logf("processor log:\n%s", strings.Join(logs.Lines(), "\n"))
		t.Errorf("after the shutdown the task is %v under %v with %d attempts used, ran %d times; want READY, no attempt used, not run",
			task.State, task.Owner, task.Attempt-task.Returned, ran.Load())
	}
	var owners int
	if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task_owner WHERE owner = 'leaver'").Scan(&owners); err != nil || owners != 0 {
		t.Errorf("owner rows of the processor after its shutdown: %d (%v), want none", owners, err)
	}
}

// TestSilentCommit: a commit whose request the connection holds (a server gone silent: no
// reply, no reset) is cut short at the commit timeout and made again on another
// connection, so the topic's decisions and its next tasks go on; before, it waited for
// the kernel to give the connection up, some 15 minutes (here, for the 15 s the proxy
// holds the request).
func TestSilentCommit(t *testing.T) {
	f := setup(t)
	proxy := f.startProxy()
	pool := proxiedPool(t, proxy, f.url)
	completes := func(sql string) bool {
		return faultproxy.Statement("TaskComplete")(sql) || faultproxy.Statement("TaskCompletePoll")(sql)
	}
	hold := proxy.AddCut(&faultproxy.Cut{Match: completes, Times: 1, Hold: 15 * time.Second})
	handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
		return repository.Succeed("ok")
	})
	p, _ := f.processor("worker", processor.Config{Pool: pool}, processor.ManagerConfig{Handler: handler, BatchSize: 1})
	processor.SetCommitTimeout(p, time.Second)
	f.start(p)
	tasks := f.pushN(10)
	start := time.Now()
	for f.count(repository.Succeeded) < int64(len(tasks)) {
		if time.Since(start) > 12*time.Second {
			t.Fatalf("12 s after the push, a commit held (%d): %s, want all %d SUCCEEDED", hold.Lost(), f.states(), len(tasks))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if hold.Lost() != 1 {
		t.Fatalf("commits held: %d, want 1", hold.Lost())
	}
	t.Logf("all SUCCEEDED %v after the push", time.Since(start).Round(time.Millisecond))
}

// TestNoHandBackUnderAStaleHeartbeat: a process whose heartbeat is stale at its shutdown
// does not hand back the leases under its owner name that no manager of its knows of:
// its name may have been taken over meanwhile (a replacement started under it, once the
// row was silent for the expiry timeout), and those leases are the other process's, which
// it runs; handed back READY, they ran twice at once. The poll loop reconciles nothing
// while the heartbeat is stale for that reason.
func TestNoHandBackUnderAStaleHeartbeat(t *testing.T) {
	f := setup(t)
	proxy := f.startProxy()
	started := make(chan struct{})
	p, managers := f.processor("pod-0", processor.Config{
		Pool: proxiedPool(t, proxy, f.url), HeartbeatInterval: 100 * time.Millisecond, ExpiryTimeout: time.Second,
	}, processor.ManagerConfig{
		Listener: processor.Listener{OnStart: func(string) { close(started) }},
		Handler:  processor.TaskFunc(succeed), PauseInterval: time.Minute, ShutdownTimeout: 2 * time.Second,
	})
	stop := f.start(p)
	<-started
	// every heartbeat from here hangs: after 0.9 s the process takes its own for stale
	proxy.AddCut(&faultproxy.Cut{Match: faultproxy.Statement("OwnerHeartbeatRow"), Hold: time.Minute})
	time.Sleep(2 * time.Second)
	// the replacement's lease, under the same name
	replacement, err := repository.New(repository.Config{Owner: "pod-0"})
	if err != nil {
		t.Fatal(err)
	}
	f.pushN(1)
	theirs, err := replacement.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 1)
	if err != nil || len(theirs) != 1 {
		t.Fatalf("the replacement's poll: %v, %v", theirs, err)
	}
	processor.SetUnsure(managers[0])
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := f.get(theirs[0].Sequence); got.State != repository.Active || got.Attempt != 1 {
		t.Errorf("the replacement's lease after the shutdown: %v, attempt %d; want ACTIVE, untouched", got.State, got.Attempt)
	}
}

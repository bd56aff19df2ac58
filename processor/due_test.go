package processor_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// start is when a handler began a task, and the not-before time the task had then.
type start struct {
	at        time.Time
	notBefore time.Time
}

// idle is a processor that has polled its empty topic and hibernates, with a pause
// interval of a minute: only a notification or a timer of its own can wake it in time.
type idle struct {
	starts chan start
}

// idle starts such a processor (owner "idle") and returns once it has hibernated (after
// an empty poll or, when its topic is paused, once it started) and finished its start-up
// work (see startup).
func (f *fixture) idle() *idle {
	f.t.Helper()
	topic, err := f.repo.Topic(f.ctx, f.pool, f.topic)
	if err != nil {
		f.t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(f.url)
	if err != nil {
		f.t.Fatal(err)
	}
	started := newStartup(topic.Active)
	cfg.ConnConfig.Tracer = started
	pool, err := pgxpool.NewWithConfig(f.ctx, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(pool.Close)
	w := &idle{starts: make(chan start, 1000)}
	empty := make(chan struct{}, 1)
	signal := func() {
		select {
		case empty <- struct{}{}:
		default:
		}
	}
	handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
		w.starts <- start{at: time.Now(), notBefore: task.NotBefore}
		return repository.Succeed("")
	})
	p, _ := f.processor("idle", processor.Config{Pool: pool, ExpiryTimeout: time.Hour}, processor.ManagerConfig{
		Handler: handler, PauseInterval: time.Minute,
		Listener: processor.Listener{
			OnEmpty: func(string, time.Duration) { signal() },
			OnStart: func(string) {
				if !topic.Active {
					signal()
				}
			},
		},
	})
	connected := p.Notifier().Connected()
	f.start(p)
	<-connected
	select {
	case <-empty:
	case <-time.After(30 * time.Second):
		f.t.Fatal("the idle processor did not poll its empty topic")
	}
	select {
	case <-started.done:
	case <-time.After(30 * time.Second):
		f.t.Fatalf("the idle processor did not finish its start-up work: %v still to come", started.waiting())
	}
	return w
}

// startup traces a processor's pool until the statements of its start-up work have
// ended: the probe for delayed work after its first empty poll (not on a paused topic,
// which is not polled) and its first liveness tick, which ends by reading the topic's
// row. Each is the first of its kind on a connection of a new database, which costs
// catalog and function caches and a plan: 20-60 ms, and 100-200 ms for the tick's
// expiry when the race detector's test binaries load the machine. A task handed back in
// those first few hundred milliseconds found the pool's connections all busy with them
// and waited for a new one: the wake-ups this file measures are those of a processor
// that has been idle for a while, not the start-up of one (the cases with tasks
// pushed before the processor started measure that).
type startup struct {
	mu   sync.Mutex
	want map[string]bool // the names (sqlc's) of the statements still to end
	done chan struct{}
}

func newStartup(active bool) *startup {
	s := &startup{want: map[string]bool{"TopicGetMany": true}, done: make(chan struct{})}
	if active {
		s.want["TaskNextDue"] = true
	}
	return s
}

type startupQuery struct{}

func (s *startup) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, startupQuery{}, data.SQL)
}

func (s *startup) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	sql, _ := ctx.Value(startupQuery{}).(string)
	name, _, _ := strings.Cut(strings.TrimPrefix(sql, "-- name: "), " ")
	s.mu.Lock()
	defer s.mu.Unlock()
	if data.Err != nil || !s.want[name] {
		return
	}
	delete(s.want, name)
	if len(s.want) == 0 {
		close(s.done)
	}
}

// waiting lists the statements still to end.
func (s *startup) waiting() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.want))
}

// next waits for the idle processor to start a task.
func (w *idle) next(t *testing.T) start {
	t.Helper()
	select {
	case s := <-w.starts:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("the idle processor started nothing within 10 s")
	}
	return start{}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// promptWithin is how late after its due time a start still counts as woken: far below
// the pause interval of a minute that a missing wake-up waits for, and far above what a
// busy machine adds. How late a start is on a quiet machine is BenchmarkLateness's to
// measure, not a test's (p50 1–2 ms).
const promptWithin = 2 * time.Second

// prompt reports whether s began within promptWithin of due; a start before the task's
// not-before time fails the test.
func prompt(t *testing.T, s start, due time.Time) bool {
	t.Helper()
	late := s.at.Sub(due)
	t.Logf("started %v after it was due", late)
	if !s.notBefore.IsZero() && s.at.Before(s.notBefore) {
		t.Errorf("started at %v, before its not-before time %v", s.at, s.notBefore)
	}
	return late <= promptWithin
}

// promptly runs one case of TestDueWakeups, in a database of its own each time, until
// run reports the task started within promptWithin of its due time, at most five times: a
// start that is late because the machine was busy with something else is not what the
// test is after (on two cores saturated by other test binaries under the race detector,
// a wake-up took more than 100 ms three times in a row), a mechanism that waits for the
// pause interval (a minute) is late every time. Between attempts it lets the machine
// settle for a moment.
func promptly(t *testing.T, run func(f *fixture) bool) {
	t.Helper()
	const attempts = 5
	for i := range attempts {
		if i > 0 {
			time.Sleep(time.Duration(i) * 200 * time.Millisecond)
		}
		if run(setupSerial(t)) {
			return
		}
	}
	t.Errorf("started more than %v after it was due in %d of %d attempts", promptWithin, attempts, attempts)
}

// TestDueWakeups: whatever makes a task runnable, a processor that was idle, with a pause
// interval of a minute, starts it within promptWithin of the moment it became due (not a
// minute later). The test
// and its subtests run alone (not in parallel with each other or the package's other
// tests), so that nothing else of the package loads the machine while they measure.
func TestDueWakeups(t *testing.T) {
	const delay = 300 * time.Millisecond
	// lease leases the topic's one READY task as another process (owner) would; the
	// function it returns decides on it.
	lease := func(f *fixture, owner string) (decide func(repository.Decision)) {
		f.t.Helper()
		repo, err := repository.New(repository.Config{Owner: owner})
		if err != nil {
			f.t.Fatal(err)
		}
		if _, err := repo.Register(f.ctx, f.pool); err != nil {
			f.t.Fatal(err)
		}
		tasks, err := repo.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 1)
		if err != nil || len(tasks) != 1 {
			f.t.Fatalf("poll: %v, %v", tasks, err)
		}
		return func(d repository.Decision) {
			f.t.Helper()
			if _, err := repo.Complete(f.ctx, f.pool, f.topic, tasks[0].Decide(d)); err != nil {
				f.t.Fatal(err)
			}
		}
	}
	retries := func(f *fixture, base time.Duration) {
		f.t.Helper()
		if _, err := f.repo.Configure(f.ctx, f.pool, f.topic, repository.TopicSettings{MaxAttempts: 3, BackoffBase: base, BackoffCap: time.Hour}); err != nil {
			f.t.Fatal(err)
		}
	}

	t.Run("PushedWithADelayFromGo", func(t *testing.T) {
		promptly(t, func(f *fixture) bool {
			w := f.idle()
			if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "later", Delay: delay}); err != nil {
				t.Fatal(err)
			}
			s := w.next(t)
			return prompt(t, s, s.notBefore)
		})
	})

	t.Run("PushedWithADelayFromSQL", func(t *testing.T) {
		// task_push's notification says nothing of the delay: the processor polls, finds
		// nothing due and looks up when the task is.
		promptly(t, func(f *fixture) bool {
			w := f.idle()
			if _, err := f.pool.Exec(f.ctx, "SELECT task_push('topic', 'later', delay => '300 milliseconds')"); err != nil {
				t.Fatal(err)
			}
			s := w.next(t)
			return prompt(t, s, s.notBefore)
		})
	})

	// Pushed with a delay of 3 s in a transaction that commits 4 s after it began: the
	// task fell due before the commit and starts at once, not 3 s after the commit (the
	// notification's delay counts from the push's statement: until schema 53, nothing
	// told the processor the task was due already).
	for _, via := range []string{"Go", "SQL"} {
		t.Run("PushedWithADelayInALongTransactionFrom"+via, func(t *testing.T) {
			promptly(t, func(f *fixture) bool {
				w := f.idle()
				tx, err := f.pool.Begin(f.ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(f.ctx)
				if via == "Go" {
					_, err = f.repo.Push(f.ctx, tx, f.topic, repository.Append, repository.Creation{Identifier: "later", Delay: 3 * time.Second})
				} else {
					_, err = tx.Exec(f.ctx, "SELECT task_push('topic', 'later', delay => '3 seconds')")
				}
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(4 * time.Second)
				if err := tx.Commit(f.ctx); err != nil {
					t.Fatal(err)
				}
				committed := time.Now()
				s := w.next(t)
				return prompt(t, s, committed)
			})
		})
	}

	t.Run("ManyDelayedTasksFallingDueWhilePolling", func(t *testing.T) {
		// Tasks fall due while the processor polls and probes: none may wait for the
		// pause interval (a minute). The bound is loose, since this measures nothing:
		// a task missed waits a minute.
		f := setupSerial(t)
		w := f.idle()
		creations := make([]repository.Creation, 300)
		for i := range creations {
			creations[i] = repository.Creation{Identifier: fmt.Sprint(i), Delay: time.Duration(1+rand.IntN(2000)) * time.Millisecond}
		}
		if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, creations...); err != nil {
			t.Fatal(err)
		}
		var worst time.Duration
		for range creations {
			s := w.next(t)
			worst = max(worst, s.at.Sub(s.notBefore))
		}
		t.Logf("the latest of %d starts: %v after it was due", len(creations), worst)
		if worst > 5*time.Second {
			t.Errorf("a task started %v after it was due, want well within the pause interval", worst)
		}
	})

	t.Run("PushedWithADelayBeforeTheProcessorStarted", func(t *testing.T) {
		promptly(t, func(f *fixture) bool {
			if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "later", Delay: 2 * time.Second}); err != nil {
				t.Fatal(err)
			}
			w := f.idle()
			s := w.next(t)
			return prompt(t, s, s.notBefore)
		})
	})

	t.Run("RetriedAfterABackoffByAnotherProcess", func(t *testing.T) {
		promptly(t, func(f *fixture) bool {
			retries(f, delay)
			f.pushN(1)
			decide := lease(f, "other")
			w := f.idle()
			decide(repository.Fail(errors.New("try again")))
			s := w.next(t)
			return prompt(t, s, s.notBefore)
		})
	})

	t.Run("SnoozedByAnotherProcess", func(t *testing.T) {
		promptly(t, func(f *fixture) bool {
			f.pushN(1)
			decide := lease(f, "other")
			w := f.idle()
			decide(repository.SnoozeFor(delay))
			s := w.next(t)
			return prompt(t, s, s.notBefore)
		})
	})

	t.Run("HandedBackByAProcessorThatStopped", func(t *testing.T) {
		promptly(t, func(f *fixture) bool {
			tasks := f.pushN(2)
			running := make(chan struct{})
			handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
				close(running)
				<-processor.Stopping(ctx)
				return repository.Succeed("")
			})
			// The task is runnable once the hand-back committed, as after an expiry; its
			// not-before time is the statement's start. The statement is the first
			// completion on its connection of a new database, which costs 20-60 ms of
			// catalog and function caches (100-400 on a loaded machine) that a running
			// processor paid long ago: not what this test measures.
			committed := make(chan time.Time, 2)
			listener := processor.Listener{OnComplete: func(_ string, done []repository.Task, _ time.Duration) {
				for _, task := range done {
					if task.Sequence == tasks[1].Sequence {
						committed <- time.Now()
					}
				}
			}}
			p, _ := f.processor("stopping", processor.Config{}, processor.ManagerConfig{Handler: handler, BatchSize: 2, Listener: listener})
			stop := f.start(p)
			<-running
			f.eventually("both tasks leased", func() bool { return f.count(repository.Active) == 2 })
			w := f.idle()
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			s := w.next(t)
			if got := f.get(tasks[1].Sequence); got.Returned != 1 {
				t.Fatalf("the unstarted task was not handed back: %+v", got)
			}
			var at time.Time
			select {
			case at = <-committed:
			default:
				t.Fatal("the stopping processor did not report the hand-back committed")
			}
			return prompt(t, s, later(s.notBefore, at))
		})
	})

	for _, base := range []time.Duration{0, delay} {
		name := "ExpiredWithoutBackoff"
		if base > 0 {
			name = "ExpiredWithABackoff"
		}
		t.Run(name, func(t *testing.T) {
			// Another process takes the dead owner's lease back; the idle processor's own
			// expiry runs once an hour.
			promptly(t, func(f *fixture) bool {
				retries(f, base)
				f.pushN(1)
				lease(f, "dead") // and never heard of again
				w := f.idle()
				expired, err := f.repo.Expire(f.ctx, f.pool, 0)
				// The expiry's not-before time is its transaction's start, and it reads
				// every table of task: the task is runnable once it committed.
				committed := time.Now()
				if err != nil || len(expired) != 1 || expired[0].Retried != 1 {
					t.Fatalf("expire: %+v, %v", expired, err)
				}
				s := w.next(t)
				return prompt(t, s, later(s.notBefore, committed))
			})
		})
	}

	t.Run("ReleasedByAJunction", func(t *testing.T) {
		promptly(t, func(f *fixture) bool {
			if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "held", Suspended: true}); err != nil {
				t.Fatal(err)
			}
			w := f.idle()
			released, err := f.repo.Junction(f.ctx, f.pool, f.topic, repository.Singular, []string{"held"})
			due := time.Now()
			if err != nil || len(released) != 1 {
				t.Fatalf("junction: %v, %v", released, err)
			}
			return prompt(t, w.next(t), due)
		})
	})

	t.Run("RevivedByAReset", func(t *testing.T) {
		promptly(t, func(f *fixture) bool {
			retries(f, 0)
			if _, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.MaxAttempts = 1 }); err != nil {
				t.Fatal(err)
			}
			tasks := f.pushN(1)
			lease(f, "other")(repository.Fail(errors.New("broken"))) // one attempt: FAILED
			w := f.idle()
			revived, err := f.repo.Recreate(f.ctx, f.pool, f.topic, repository.Reset, tasks[0].Sequence)
			due := time.Now()
			if err != nil || len(revived) != 1 {
				t.Fatalf("reset: %v, %v", revived, err)
			}
			return prompt(t, w.next(t), due)
		})
	})

	t.Run("ResumedTopic", func(t *testing.T) {
		promptly(t, func(f *fixture) bool {
			if err := f.repo.SetActive(f.ctx, f.pool, f.topic, false); err != nil {
				t.Fatal(err)
			}
			f.pushN(1)
			w := f.idle()
			if err := f.repo.SetActive(f.ctx, f.pool, f.topic, true); err != nil {
				t.Fatal(err)
			}
			due := time.Now()
			return prompt(t, w.next(t), due)
		})
	})
}

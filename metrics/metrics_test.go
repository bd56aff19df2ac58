package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/metrics"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fixture is one test's database and a repository (owner "test") to push and inspect.
type fixture struct {
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
	repo *repository.Repository
}

func setup(t *testing.T) *fixture {
	t.Helper()
	t.Parallel()
	f := &fixture{t: t, ctx: t.Context(), pool: pgtest.NewPool(t, schema.Hash(), repository.Migrate)}
	repo, err := repository.New(repository.Config{Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	f.repo = repo
	return f
}

// topic creates a topic with the given settings; zero MaxAttempts stands for one
// attempt (a failure or an expiry is final).
func (f *fixture) topic(name string, s repository.TopicSettings) {
	f.t.Helper()
	if _, err := f.repo.CreateTopic(f.ctx, f.pool, name); err != nil {
		f.t.Fatalf("create topic %q: %v", name, err)
	}
	s.MaxAttempts = max(s.MaxAttempts, 1)
	if _, err := f.repo.Configure(f.ctx, f.pool, name, s); err != nil {
		f.t.Fatalf("configure %q: %v", name, err)
	}
}

func (f *fixture) push(topic string, creations ...repository.Creation) []repository.Task {
	f.t.Helper()
	tasks, err := f.repo.Push(f.ctx, f.pool, topic, repository.Append, creations...)
	if err != nil {
		f.t.Fatalf("push: %v", err)
	}
	return tasks
}

// run runs p until stop is called (or the test ends); stop waits for Run to return.
func (f *fixture) run(p *processor.Processor) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(f.ctx))
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				f.t.Errorf("processor run: %v", err)
			}
		})
	}
	f.t.Cleanup(stop)
	return stop
}

// wait waits for a signal on ch, failing the test after 30 s.
func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	panic("unreachable")
}

// find returns the metric name with exactly the given labels from g.
func find(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, fam := range families {
		if fam.GetName() != name {
			continue
		}
	metric:
		for _, m := range fam.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
					continue metric
				}
			}
			return m
		}
	}
	t.Fatalf("no metric %s%v", name, labels)
	return nil
}

// observations returns how many observations the histogram name{topic} holds.
func observations(t *testing.T, g prometheus.Gatherer, name, topic string) uint64 {
	t.Helper()
	return find(t, g, name, map[string]string{"topic": topic}).GetHistogram().GetSampleCount()
}

func TestListener(t *testing.T) {
	f := setup(t)
	// Two attempts and no backoff: a failure comes straight back once, then is final.
	f.topic("work", repository.TopicSettings{MaxAttempts: 2})
	f.push("work",
		repository.Creation{Identifier: "a", Input: "succeed"},
		repository.Creation{Identifier: "b", Input: "skip"},
		repository.Creation{Identifier: "c", Input: "suspend"},
		repository.Creation{Identifier: "d", Input: "fail"},
		repository.Creation{Identifier: "e", Input: "snooze"},
	)

	reg := prometheus.NewRegistry()
	m := metrics.New(reg)

	var (
		mu                             sync.Mutex
		dispatches, callbacks, empties int
		completed                      int
		snoozed                        = map[int64]bool{}
	)
	done := make(chan struct{})
	emptyAfterDone := make(chan struct{}, 1)
	probe := processor.Listener{
		OnDispatch: func(string, []repository.Task, time.Duration) { mu.Lock(); dispatches++; mu.Unlock() },
		OnCallback: func(string, []repository.Task, map[int64]repository.Decision, time.Duration) {
			mu.Lock()
			callbacks++
			mu.Unlock()
		},
		OnComplete: func(_ string, tasks []repository.Task, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			completed += len(tasks)
			if completed == 7 { // 5 tasks, one retried, one snoozed
				close(done)
			}
		},
		OnEmpty: func(string, time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			empties++
			if completed >= 7 {
				select {
				case emptyAfterDone <- struct{}{}:
				default:
				}
			}
		},
	}
	handler := processor.TaskFunc(func(_ context.Context, task repository.Task) repository.Decision {
		switch task.Input {
		case "succeed":
			return repository.Succeed("done")
		case "skip":
			return repository.Skip("irrelevant")
		case "suspend":
			return repository.Suspend("wait")
		case "snooze":
			mu.Lock()
			defer mu.Unlock()
			if !snoozed[task.Sequence] {
				snoozed[task.Sequence] = true
				return repository.SnoozeFor(0)
			}
			return repository.Succeed("done after a snooze")
		}
		return repository.Fail(errors.New("boom"))
	})
	p, err := processor.New(processor.Config{Pool: f.pool, DisableNotifications: true, HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Manage(processor.ManagerConfig{
		// Retries and snoozes come back without a notification: poll often.
		Topic: "work", Handler: handler, PauseInterval: 20 * time.Millisecond,
		Listener: processor.Listeners(m.Listener(), probe),
	}); err != nil {
		t.Fatal(err)
	}
	stop := f.run(p)
	wait(t, done, "7 completions")
	wait(t, emptyAfterDone, "an empty poll after the last completion")
	stop()

	t.Run("CountsCompletedTasksByStoredResult", func(t *testing.T) {
		want := `
# HELP pgtask_tasks_completed_total Tasks whose decision was committed, by topic and result (the stored state; RETRIED: a failure going back to READY for another attempt; SNOOZED: back to READY without using an attempt).
# TYPE pgtask_tasks_completed_total counter
pgtask_tasks_completed_total{result="FAILED",topic="work"} 1
pgtask_tasks_completed_total{result="FILTERED",topic="work"} 1
pgtask_tasks_completed_total{result="RETRIED",topic="work"} 1
pgtask_tasks_completed_total{result="SNOOZED",topic="work"} 1
pgtask_tasks_completed_total{result="SUCCEEDED",topic="work"} 2
pgtask_tasks_completed_total{result="SUSPENDED",topic="work"} 1
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "pgtask_tasks_completed_total"); err != nil {
			t.Error(err)
		}
	})
	t.Run("ObservesOneBatchSizePerDispatch", func(t *testing.T) {
		if got := observations(t, reg, "pgtask_batch_size", "work"); got != uint64(dispatches) {
			t.Errorf("batch size observations = %d, want %d dispatches", got, dispatches)
		}
	})
	t.Run("ObservesEveryPollEmptyOrNot", func(t *testing.T) {
		if got := observations(t, reg, "pgtask_poll_duration_seconds", "work"); got != uint64(dispatches+empties) {
			t.Errorf("poll observations = %d, want %d dispatches + %d empty polls", got, dispatches, empties)
		}
	})
	t.Run("ObservesHandlerLatencyPerReportedBatch", func(t *testing.T) {
		if got := observations(t, reg, "pgtask_handler_duration_seconds", "work"); got != uint64(callbacks) {
			t.Errorf("handler observations = %d, want %d callbacks", got, callbacks)
		}
	})
	t.Run("ObservesCompletionLatency", func(t *testing.T) {
		if got := observations(t, reg, "pgtask_complete_duration_seconds", "work"); got == 0 || got > uint64(callbacks) {
			t.Errorf("complete observations = %d, want 1..%d", got, callbacks)
		}
	})
	t.Run("CountsEmptyPolls", func(t *testing.T) {
		if got := find(t, reg, "pgtask_empty_polls_total", map[string]string{"topic": "work"}).GetCounter().GetValue(); got != float64(empties) || got == 0 {
			t.Errorf("empty polls = %v, want %d (> 0)", got, empties)
		}
	})
}

// TestListenerHandBacks: the tasks a shutdown hands back unstarted are counted SNOOZED
// once committed and are not timed as the handler's: the handler ran one task of three.
// They were timed (from the dispatch to the shutdown) as one more handler duration.
func TestListenerHandBacks(t *testing.T) {
	f := setup(t)
	f.topic("work", repository.TopicSettings{})
	f.push("work", repository.Creation{Identifier: "a"}, repository.Creation{Identifier: "b"}, repository.Creation{Identifier: "c"})
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	handler := processor.TaskFunc(func(context.Context, repository.Task) repository.Decision {
		once.Do(func() { close(started) })
		<-release
		return repository.Succeed("")
	})
	var completed atomic.Int64
	p, err := processor.New(processor.Config{Pool: f.pool})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Manage(processor.ManagerConfig{Topic: "work", Handler: handler, BatchSize: 3,
		Listener: processor.Listeners(m.Listener(), processor.Listener{OnComplete: func(_ string, tasks []repository.Task, _ time.Duration) {
			completed.Add(int64(len(tasks)))
		}})}); err != nil {
		t.Fatal(err)
	}
	stop := f.run(p)
	wait(t, started, "the first task to start")
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	// the shutdown hands the two unstarted tasks back, then the first one finishes
	for deadline := time.Now().Add(30 * time.Second); completed.Load() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d tasks handed back, want 2", completed.Load())
		}
	}
	close(release)
	wait(t, stopped, "the processor to stop")
	want := `
# HELP pgtask_tasks_completed_total Tasks whose decision was committed, by topic and result (the stored state; RETRIED: a failure going back to READY for another attempt; SNOOZED: back to READY without using an attempt).
# TYPE pgtask_tasks_completed_total counter
pgtask_tasks_completed_total{result="SNOOZED",topic="work"} 2
pgtask_tasks_completed_total{result="SUCCEEDED",topic="work"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "pgtask_tasks_completed_total"); err != nil {
		t.Error(err)
	}
	if got := observations(t, reg, "pgtask_handler_duration_seconds", "work"); got != 1 {
		t.Errorf("handler observations = %d, want 1: the task it ran", got)
	}
}

func TestListenerErrors(t *testing.T) {
	t.Parallel()
	t.Run("CountsRecoverableAndFatalErrorsPerTopic", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		l := metrics.New(reg).Listener()
		l.OnError("a", errors.New("poll failed"))
		l.OnError("a", errors.New("handler panicked"))
		l.OnFatal("a", errors.New("unknown topic"))
		l.OnError("b", errors.New("poll failed"))
		want := `
# HELP pgtask_errors_total Errors a task manager met (database errors, handler misbehaviour, fatal stops).
# TYPE pgtask_errors_total counter
pgtask_errors_total{topic="a"} 3
pgtask_errors_total{topic="b"} 1
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "pgtask_errors_total"); err != nil {
			t.Error(err)
		}
	})
	t.Run("NewWithNilRegistererRegistersNothing", func(t *testing.T) {
		t.Parallel()
		m := metrics.New(nil)
		m.Listener().OnError("a", errors.New("x")) // must not panic
		// a second one, and the same series on a registry of their own: a New(nil) that
		// registered somewhere (the default registerer) would panic on a duplicate
		metrics.New(nil).Listener().OnError("a", errors.New("x"))
		reg := prometheus.NewRegistry()
		own := metrics.New(reg)
		own.Listener().OnError("a", errors.New("x"))
		if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pgtask_errors_total Errors a task manager met (database errors, handler misbehaviour, fatal stops).
# TYPE pgtask_errors_total counter
pgtask_errors_total{topic="a"} 1
`), "pgtask_errors_total"); err != nil {
			t.Errorf("the registry's own series counted the nil ones' errors too, or none: %v", err)
		}
	})
}

func TestOnExpire(t *testing.T) {
	t.Parallel()
	t.Run("CountsLeasesTakenBackFromDeadOwners", func(t *testing.T) {
		f := setup(t)
		f.topic("retrying", repository.TopicSettings{MaxAttempts: 2})
		f.topic("final", repository.TopicSettings{})
		f.push("retrying", repository.Creation{Identifier: "a"}, repository.Creation{Identifier: "b"})
		f.push("final", repository.Creation{Identifier: "c"})

		// An owner whose last heartbeat was an hour ago leases everything.
		dead, err := repository.New(repository.Config{Owner: "dead", Now: func() time.Time { return time.Now().Add(-time.Hour) }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dead.RegisterOwner(f.ctx, f.pool); err != nil {
			t.Fatal(err)
		}
		for _, topic := range []string{"retrying", "final"} {
			if _, err := dead.Poll(f.ctx, f.pool, topic, repository.FIFO, repository.None, 10); err != nil {
				t.Fatal(err)
			}
		}

		reg := prometheus.NewRegistry()
		m := metrics.New(reg)
		expired := make(chan struct{}, 1)
		p, err := processor.New(processor.Config{
			Pool: f.pool, DisableNotifications: true,
			HeartbeatInterval: 20 * time.Millisecond, ExpiryTimeout: time.Second,
			OnExpire: func(e []repository.Expiry) {
				m.OnExpire(e)
				select {
				case expired <- struct{}{}:
				default:
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		// Run returns at once without a manager: keep one busy with an idle topic.
		f.topic("idle", repository.TopicSettings{})
		started := make(chan struct{}, 1)
		if _, err := p.Manage(processor.ManagerConfig{Topic: "idle", PauseInterval: time.Hour,
			Listener: processor.Listener{OnStart: func(string) { started <- struct{}{} }},
			Handler:  processor.TaskFunc(func(context.Context, repository.Task) repository.Decision { return repository.Succeed("") })}); err != nil {
			t.Fatal(err)
		}
		stop := f.run(p)
		wait(t, started, "the manager to start")
		wait(t, expired, "an expiry")
		stop()

		want := `
# HELP pgtask_tasks_expired_total Leases of dead owners taken back by this process's expiry, retried ones included.
# TYPE pgtask_tasks_expired_total counter
pgtask_tasks_expired_total{topic="final"} 1
pgtask_tasks_expired_total{topic="retrying"} 2
# HELP pgtask_tasks_retried_total Expired leases put back to READY because the topic's retry policy granted another attempt.
# TYPE pgtask_tasks_retried_total counter
pgtask_tasks_retried_total{topic="final"} 0
pgtask_tasks_retried_total{topic="retrying"} 2
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "pgtask_tasks_expired_total", "pgtask_tasks_retried_total"); err != nil {
			t.Error(err)
		}
	})
}

func TestQueueCollector(t *testing.T) {
	t.Parallel()
	t.Run("ReportsDepthPerTopicAndState", func(t *testing.T) {
		f := setup(t)
		f.topic("a", repository.TopicSettings{})
		f.topic("b", repository.TopicSettings{})
		if err := f.repo.SetActive(f.ctx, f.pool, "b", false); err != nil {
			t.Fatal(err)
		}
		if _, err := f.repo.RegisterOwner(f.ctx, f.pool); err != nil {
			t.Fatal(err)
		}
		f.push("a",
			repository.Creation{Identifier: "active"},
			repository.Creation{Identifier: "failed"},
			repository.Creation{Identifier: "ready"},
			repository.Creation{Identifier: "suspended", Suspended: true},
			repository.Creation{Identifier: "delayed", Delay: time.Hour},
		)
		if _, err := f.repo.Poll(f.ctx, f.pool, "a", repository.FIFO, repository.None, 1); err != nil {
			t.Fatal(err)
		}
		leased, err := f.repo.Poll(f.ctx, f.pool, "a", repository.FIFO, repository.None, 1)
		if err != nil || len(leased) != 1 {
			t.Fatalf("poll: %v %v", leased, err)
		}
		if _, err := f.repo.Complete(f.ctx, f.pool, "a", leased[0].Decide(repository.Fail(errors.New("boom")))); err != nil {
			t.Fatal(err)
		}

		collectorRepo, err := repository.New(repository.Config{Owner: "collector"})
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(metrics.NewQueueCollector(f.pool, collectorRepo, time.Minute))
		want := `
# HELP pgtask_owners_live Owners (processes) that heart-beat within the default expiry timeout, the collector's own processor among them.
# TYPE pgtask_owners_live gauge
pgtask_owners_live 1
# HELP pgtask_queue_delayed READY tasks of a topic whose not-before time has not come yet, counted up to 100 000.
# TYPE pgtask_queue_delayed gauge
pgtask_queue_delayed{topic="a"} 1
pgtask_queue_delayed{topic="b"} 0
# HELP pgtask_queue_depth Tasks of a topic in a state (ACTIVE, READY, EXPIRED, FAILED, SUSPENDED), counted up to 100 000.
# TYPE pgtask_queue_depth gauge
pgtask_queue_depth{state="ACTIVE",topic="a"} 1
pgtask_queue_depth{state="ACTIVE",topic="b"} 0
pgtask_queue_depth{state="EXPIRED",topic="a"} 0
pgtask_queue_depth{state="EXPIRED",topic="b"} 0
pgtask_queue_depth{state="FAILED",topic="a"} 1
pgtask_queue_depth{state="FAILED",topic="b"} 0
pgtask_queue_depth{state="READY",topic="a"} 2
pgtask_queue_depth{state="READY",topic="b"} 0
pgtask_queue_depth{state="SUSPENDED",topic="a"} 1
pgtask_queue_depth{state="SUSPENDED",topic="b"} 0
# HELP pgtask_topic_active 1 while a topic runs, 0 while it is paused.
# TYPE pgtask_topic_active gauge
pgtask_topic_active{topic="a"} 1
pgtask_topic_active{topic="b"} 0
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
			"pgtask_owners_live", "pgtask_queue_delayed", "pgtask_queue_depth", "pgtask_topic_active"); err != nil {
			t.Error(err)
		}
		if n, err := testutil.GatherAndCount(reg, "pgtask_queue_oldest_ready_seconds", "pgtask_queue_rows_estimate"); err != nil || n != 4 {
			t.Errorf("oldest ready and rows estimate series = %d, %v; want 2 per topic", n, err)
		}
		if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
			t.Errorf("lint: %v %v", problems, err)
		}
	})
	t.Run("ServesCachedValuesWithinTTL", func(t *testing.T) {
		f := setup(t)
		f.topic("a", repository.TopicSettings{})
		reg := prometheus.NewRegistry()
		reg.MustRegister(metrics.NewQueueCollector(f.pool, f.repo, time.Hour))
		ready := func() float64 {
			t.Helper()
			return gauge(t, reg, "pgtask_queue_depth", map[string]string{"topic": "a", "state": "READY"})
		}
		if got := ready(); got != 0 {
			t.Fatalf("READY before push = %v, want 0", got)
		}
		f.push("a", repository.Creation{Identifier: "x"})
		if got := ready(); got != 0 {
			t.Errorf("READY within ttl after a push = %v, want the cached 0", got)
		}
	})
	t.Run("ReadsEveryScrapeWithoutTTL", func(t *testing.T) {
		f := setup(t)
		f.topic("a", repository.TopicSettings{})
		reg := prometheus.NewRegistry()
		reg.MustRegister(metrics.NewQueueCollector(f.pool, f.repo, 0))
		labels := map[string]string{"topic": "a", "state": "READY"}
		if got := gauge(t, reg, "pgtask_queue_depth", labels); got != 0 {
			t.Fatalf("READY before push = %v, want 0", got)
		}
		f.push("a", repository.Creation{Identifier: "x"})
		if got := gauge(t, reg, "pgtask_queue_depth", labels); got != 1 {
			t.Errorf("READY after push = %v, want 1", got)
		}
	})
	t.Run("ReportsOnlyTheTopicsGiven", func(t *testing.T) {
		f := setup(t)
		f.topic("a", repository.TopicSettings{})
		f.topic("b", repository.TopicSettings{})
		f.push("b", repository.Creation{Identifier: "x"})
		reg := prometheus.NewRegistry()
		reg.MustRegister(metrics.NewQueueCollector(f.pool, f.repo, 0, "b"))
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range families {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "topic" && l.GetValue() != "b" {
						t.Errorf("%s reports topic %q, want only b", mf.GetName(), l.GetValue())
					}
				}
			}
		}
		if got := gauge(t, reg, "pgtask_queue_depth", map[string]string{"topic": "b", "state": "READY"}); got != 1 {
			t.Errorf("READY of b = %v, want 1", got)
		}
	})
	t.Run("ReportsReadErrorAsInvalidMetric", func(t *testing.T) {
		f := setup(t)
		reg := prometheus.NewRegistry()
		reg.MustRegister(metrics.NewQueueCollector(f.pool, f.repo, time.Hour))
		f.pool.Close()
		_, err := reg.Gather()
		if err == nil || !strings.Contains(err.Error(), "queue collector") {
			t.Fatalf("gather with a closed pool: error %v, want the collector's read error", err)
		}
		rec := httptest.NewRecorder()
		metrics.Handler(reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "queue collector") {
			t.Errorf("scrape with a closed pool: %d %q, want 500 naming the error", rec.Code, rec.Body.String())
		}
	})
	t.Run("AFailureToConnectNamesNeitherTheDatabaseNorItsUser", func(t *testing.T) {
		f := setup(t)
		// port 1 on the loopback: refused at once
		pool, err := pgxpool.New(f.ctx, "postgres://alice:s3cret@127.0.0.1:1/ledger?connect_timeout=5")
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		reg := prometheus.NewRegistry()
		reg.MustRegister(metrics.NewQueueCollector(pool, f.repo, time.Hour))
		rec := httptest.NewRecorder()
		metrics.Handler(reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		body := rec.Body.String()
		if rec.Code != http.StatusInternalServerError || !strings.Contains(body, "could not connect") {
			t.Errorf("scrape of an unreachable database: %d %q, want 500 saying it could not connect", rec.Code, body)
		}
		for _, secret := range []string{"alice", "s3cret", "ledger", "127.0.0.1"} {
			if strings.Contains(body, secret) {
				t.Errorf("the scrape's answer names %q: %q", secret, body)
			}
		}
	})
}

// gauge reads the gauge name with exactly the given labels from g.
func gauge(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	return find(t, g, name, labels).GetGauge().GetValue()
}

func TestHandler(t *testing.T) {
	t.Parallel()
	t.Run("ServesTheExpositionFormat", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		metrics.New(reg).OnExpire([]repository.Expiry{{Topic: "mail", Expired: 3, Retried: 1}})
		srv := httptest.NewServer(metrics.Handler(reg))
		defer srv.Close()
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `pgtask_tasks_expired_total{topic="mail"} 3`) {
			t.Errorf("GET /metrics: %d\n%s", resp.StatusCode, body)
		}
	})
}

func TestInstrument(t *testing.T) {
	t.Parallel()
	t.Run("WiresEverySeriesOfAProcessor", func(t *testing.T) {
		f := setup(t)
		f.topic("mail", repository.TopicSettings{})
		f.topic("elsewhere", repository.TopicSettings{})
		f.push("elsewhere", repository.Creation{Identifier: "not ours"})
		p, err := processor.New(processor.Config{Pool: f.pool})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{}, 2)
		if _, err := p.Manage(processor.ManagerConfig{Topic: "mail", Handler: processor.TaskFunc(
			func(_ context.Context, task repository.Task) repository.Decision {
				if task.Identifier == "bad" {
					return repository.Fail(errors.New("no"))
				}
				return repository.Succeed("")
			}),
			Listener: processor.Listener{OnComplete: func(_ string, tasks []repository.Task, _ time.Duration) {
				for range tasks {
					done <- struct{}{}
				}
			}}}); err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		if _, err := metrics.Instrument(reg, p); err != nil {
			t.Fatal(err)
		}
		if _, err := metrics.Instrument(reg, p); err == nil {
			t.Error("a second Instrument on the same registry was accepted")
		}
		// two processors of a program on one registry, each under a label of its own
		shared := prometheus.NewRegistry()
		for _, name := range []string{"mail", "other"} {
			q, err := processor.New(processor.Config{Pool: f.pool})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := metrics.Instrument(prometheus.WrapRegistererWith(prometheus.Labels{"processor": name}, shared), q); err != nil {
				t.Errorf("processor %s on a registry wrapped with its label: %v", name, err)
			}
		}
		if _, err := shared.Gather(); err != nil {
			t.Errorf("gather of two processors' series: %v", err)
		}
		f.push("mail", repository.Creation{Identifier: "good"}, repository.Creation{Identifier: "bad"})
		stop := f.run(p)
		wait(t, done, "the first task")
		wait(t, done, "the second task")
		want := `
# HELP pgtask_tasks_completed_total Tasks whose decision was committed, by topic and result (the stored state; RETRIED: a failure going back to READY for another attempt; SNOOZED: back to READY without using an attempt).
# TYPE pgtask_tasks_completed_total counter
pgtask_tasks_completed_total{result="FAILED",topic="mail"} 1
pgtask_tasks_completed_total{result="SUCCEEDED",topic="mail"} 1
# HELP pgtask_queue_depth Tasks of a topic in a state (ACTIVE, READY, EXPIRED, FAILED, SUSPENDED), counted up to 100 000.
# TYPE pgtask_queue_depth gauge
pgtask_queue_depth{state="ACTIVE",topic="mail"} 0
pgtask_queue_depth{state="EXPIRED",topic="mail"} 0
pgtask_queue_depth{state="FAILED",topic="mail"} 1
pgtask_queue_depth{state="READY",topic="mail"} 0
pgtask_queue_depth{state="SUSPENDED",topic="mail"} 0
`
		// The test's listener may hear of the second completion before the metrics' does:
		// the series catch up within moments.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if err = testutil.GatherAndCompare(reg, strings.NewReader(want), "pgtask_tasks_completed_total", "pgtask_queue_depth"); err == nil {
				break
			}
		}
		if err != nil {
			t.Error(err)
		}
		if n, err := testutil.GatherAndCount(reg, "pgtask_poll_duration_seconds", "pgtask_handler_duration_seconds",
			"pgtask_complete_duration_seconds", "pgtask_batch_size"); err != nil || n != 4 {
			t.Errorf("latency and batch series = %d, %v; want one each for topic mail", n, err)
		}
		// the processor is a live owner like every other (it used to leave itself out)
		if v := gauge(t, reg, "pgtask_owners_live", nil); v != 1 {
			t.Errorf("pgtask_owners_live = %v, want 1: the processor itself", v)
		}
		if _, err := metrics.Instrument(prometheus.NewRegistry(), p); err == nil {
			t.Error("Instrument of a running processor was accepted")
		}
		stop()
	})
}

func TestQueueCollectorLimits(t *testing.T) {
	t.Run("ReportsTheLimitsOfLimitedTopicsAndTheirUse", func(t *testing.T) {
		f := setup(t)
		f.topic("api", repository.TopicSettings{Concurrency: 2, KeyConcurrency: 1, Rate: 120, RatePeriod: time.Minute, RateBurst: 5})
		f.topic("plain", repository.TopicSettings{})
		f.push("api", repository.Creation{Identifier: "a", ConcurrencyKey: "acme"}, repository.Creation{Identifier: "b", ConcurrencyKey: "acme"},
			repository.Creation{Identifier: "c", ConcurrencyKey: "zeta"})
		if leased, err := f.repo.Poll(f.ctx, f.pool, "api", repository.FIFO, repository.None, 1); err != nil || len(leased) != 1 {
			t.Fatalf("poll: %v %v", leased, err)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(metrics.NewQueueCollector(f.pool, f.repo, 0))
		want := `
# HELP pgtask_topic_keys_at_limit Concurrency keys of a topic with a per-key limit that have that many tasks ACTIVE.
# TYPE pgtask_topic_keys_at_limit gauge
pgtask_topic_keys_at_limit{topic="api"} 1
# HELP pgtask_topic_keys_waiting Concurrency keys of a topic polled by key (a per-key limit or fair) with READY tasks, counted up to 10 000.
# TYPE pgtask_topic_keys_waiting gauge
pgtask_topic_keys_waiting{topic="api"} 2
# HELP pgtask_topic_limit A limit of a topic (concurrency, key_concurrency, rate per second, rate_burst); only those set.
# TYPE pgtask_topic_limit gauge
pgtask_topic_limit{limit="concurrency",topic="api"} 2
pgtask_topic_limit{limit="key_concurrency",topic="api"} 1
pgtask_topic_limit{limit="rate",topic="api"} 2
pgtask_topic_limit{limit="rate_burst",topic="api"} 5
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
			"pgtask_topic_keys_at_limit", "pgtask_topic_keys_waiting", "pgtask_topic_limit"); err != nil {
			t.Error(err)
		}
		tokens := find(t, reg, "pgtask_topic_rate_tokens", map[string]string{"topic": "api"})
		if v := tokens.GetGauge().GetValue(); v < 4 || v > 5 {
			t.Errorf("tokens %v, want 4 (5 less the one start) up to 5", v)
		}
		if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
			t.Errorf("lint: %v %v", problems, err)
		}
	})
}

// statementCounter counts the statements a pool sends.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func TestQueueCollectorLimitsOfManyTopics(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cfg, err := pgxpool.ParseConfig(pgtest.NewDatabase(t, schema.Hash(), repository.Migrate))
	if err != nil {
		t.Fatal(err)
	}
	counter := &statementCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	f := &fixture{t: t, ctx: ctx, pool: pool}
	if f.repo, err = repository.New(repository.Config{Owner: "test"}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewQueueCollector(pool, f.repo, 0))
	scrape := func() int64 {
		t.Helper()
		before := counter.n.Load()
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
		return counter.n.Load() - before
	}
	// Each topic its own use: topic i has i+1 keys waiting and, with a per-key limit of
	// 1, one key at it after one poll.
	limited := func(from, to int) {
		for i := from; i < to; i++ {
			name := fmt.Sprintf("t%02d", i)
			f.topic(name, repository.TopicSettings{Concurrency: int32(10 + i), KeyConcurrency: 1})
			var creations []repository.Creation
			for k := 0; k <= i; k++ {
				creations = append(creations, repository.Creation{Identifier: fmt.Sprint(k), ConcurrencyKey: fmt.Sprintf("k%d", k)})
			}
			f.push(name, creations...)
			if leased, err := f.repo.Poll(ctx, pool, name, repository.FIFO, repository.None, 1); err != nil || len(leased) != 1 {
				t.Fatalf("poll %s: %v %v", name, leased, err)
			}
		}
	}
	limited(0, 2)
	few := scrape()
	limited(2, 30)
	if many := scrape(); many != few {
		t.Errorf("a scrape of 30 limited topics sent %d statements, of 2 %d: want as many", many, few)
	}
	for i := range 30 {
		name := fmt.Sprintf("t%02d", i)
		if v := gauge(t, reg, "pgtask_topic_keys_waiting", map[string]string{"topic": name}); v != float64(i) {
			t.Errorf("%s: keys waiting %v, want %d", name, v, i)
		}
		if v := gauge(t, reg, "pgtask_topic_keys_at_limit", map[string]string{"topic": name}); v != 1 {
			t.Errorf("%s: keys at limit %v, want 1", name, v)
		}
		if v := gauge(t, reg, "pgtask_topic_limit", map[string]string{"topic": name, "limit": "concurrency"}); v != float64(10+i) {
			t.Errorf("%s: concurrency %v, want %d", name, v, 10+i)
		}
	}
}

func TestOnFire(t *testing.T) {
	t.Parallel()
	t.Run("CountsFiresAndMissedAndObservesLateness", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m := metrics.New(reg)
		at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		m.Listener().OnFire([]repository.Fire{
			{Schedule: "nightly", Times: []time.Time{at}, At: at.Add(2 * time.Second), Missed: 4},
			{Schedule: "tick", Times: []time.Time{at, at.Add(time.Second)}, At: at.Add(time.Second)},
		})
		want := `
# HELP pgtask_schedule_fires_total Fire times of schedules this process pushed, by schedule.
# TYPE pgtask_schedule_fires_total counter
pgtask_schedule_fires_total{schedule="nightly"} 1
pgtask_schedule_fires_total{schedule="tick"} 2
# HELP pgtask_schedule_missed_total Fire times of schedules found late and not pushed (beyond the schedule's catch-up), by schedule.
# TYPE pgtask_schedule_missed_total counter
pgtask_schedule_missed_total{schedule="nightly"} 4
pgtask_schedule_missed_total{schedule="tick"} 0
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "pgtask_schedule_fires_total", "pgtask_schedule_missed_total"); err != nil {
			t.Error(err)
		}
		if n := testutil.CollectAndCount(reg, "pgtask_schedule_lateness_seconds"); n != 2 {
			t.Errorf("%d lateness series, want 2", n)
		}
		m.ForgetSchedule("tick")
		for _, name := range []string{"pgtask_schedule_fires_total", "pgtask_schedule_missed_total", "pgtask_schedule_lateness_seconds"} {
			if n := testutil.CollectAndCount(reg, name); n != 1 {
				t.Errorf("%d series of %s once tick is forgotten, want nightly's", n, name)
			}
		}
	})

	// Instrument's queue collector drops the series of the schedules removed since they
	// fired: they used to stay for the life of the process. So does one of
	// Metrics.NewQueueCollector, as `pgtask serve` and `pgtask dev` register beside the
	// schedules they fire: there too the series stayed.
	for _, tc := range []struct {
		name    string
		metrics func(t *testing.T, f *fixture, reg *prometheus.Registry) *metrics.Metrics
	}{
		{"InstrumentForgetsRemovedSchedules", func(t *testing.T, f *fixture, reg *prometheus.Registry) *metrics.Metrics {
			p, err := processor.New(processor.Config{Pool: f.pool})
			if err != nil {
				t.Fatal(err)
			}
			m, err := metrics.Instrument(reg, p)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}},
		{"ItsQueueCollectorForgetsRemovedSchedules", func(t *testing.T, f *fixture, reg *prometheus.Registry) *metrics.Metrics {
			m := metrics.New(reg)
			reg.MustRegister(m.NewQueueCollector(f.pool, f.repo, 0))
			return m
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			f.topic("reports", repository.TopicSettings{})
			for _, name := range []string{"kept", "removed"} {
				if _, err := f.repo.CreateSchedule(f.ctx, f.pool, name, repository.ScheduleSettings{Topic: "reports", Spec: "@hourly"}); err != nil {
					t.Fatal(err)
				}
			}
			reg := prometheus.NewRegistry()
			m := tc.metrics(t, f, reg)
			at := time.Now()
			m.OnFire([]repository.Fire{{Schedule: "kept", Times: []time.Time{at}, At: at}, {Schedule: "removed", Times: []time.Time{at}, At: at}})
			if n := testutil.CollectAndCount(reg, "pgtask_schedule_fires_total"); n != 2 {
				t.Fatalf("%d fires series, want 2", n)
			}
			if removed, err := f.repo.RemoveSchedule(f.ctx, f.pool, "removed"); err != nil || !removed {
				t.Fatalf("remove: %v %v", removed, err)
			}
			for deadline := time.Now().Add(2 * metrics.QueueTTLDefault); ; time.Sleep(100 * time.Millisecond) {
				// each gather past the queue's TTL reads the queue again, and prunes
				if testutil.CollectAndCount(reg, "pgtask_schedule_fires_total") == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the removed schedule's series are still there after %v", 2*metrics.QueueTTLDefault)
				}
			}
			if v := find(t, reg, "pgtask_schedule_fires_total", map[string]string{"schedule": "kept"}).GetCounter().GetValue(); v != 1 {
				t.Errorf("kept's fires: %v, want 1", v)
			}
		})
	}
}

// BenchmarkQueueCollector10000Topics: one read of the queue (a scrape past the cache) of
// 10 000 topics, every one limited (2 000 by key, 2 000 fair, 2 000 by rate), 20 000
// tasks over the first 100 with 7 keys: the stats, the limits' use and the owners.
func BenchmarkQueueCollector10000Topics(b *testing.B) {
	ctx := b.Context()
	pool := pgtest.NewPool(b, schema.Hash(), repository.Migrate)
	for _, stmt := range []string{
		"SELECT count(task_topic_create('t' || g)) FROM generate_series(1, 10000) g",
		`UPDATE task_topic SET concurrency = 5,
		        key_concurrency = CASE WHEN topic LIKE '%1' OR topic LIKE '%6' THEN 2 END,
		        fair = topic LIKE '%2' OR topic LIKE '%7',
		        rate = CASE WHEN topic LIKE '%3' OR topic LIKE '%8' THEN 10 END,
		        rate_period_ms = CASE WHEN topic LIKE '%3' OR topic LIKE '%8' THEN 1000 END,
		        rate_burst = CASE WHEN topic LIKE '%3' OR topic LIKE '%8' THEN 10 END`,
		"SELECT count(task_push('t' || (g % 100 + 1), 'id' || g, NULL, concurrency_key => 'k' || (g % 7))) FROM generate_series(1, 20000) g",
		"ANALYZE",
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			b.Fatal(err)
		}
	}
	repo, err := repository.New(repository.Config{Owner: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewQueueCollector(pool, repo, 0))
	b.ResetTimer()
	for b.Loop() {
		families, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		if len(families) == 0 {
			b.Fatal("no series")
		}
	}
}

// TestObserveARestartedProcessor: a program that restarts its processor (a new one:
// Run serves once) moves its Metrics to it. A second Instrument on the registry failed,
// and the queue collector went on reading the first processor's pool: closed, every
// scrape of the registry failed. Now the new processor's tasks are counted on the same
// series and the queue's are read through its pool.
func TestObserveARestartedProcessor(t *testing.T) {
	f := setup(t)
	f.topic("mail", repository.TopicSettings{})
	handler := processor.TaskFunc(func(context.Context, repository.Task) repository.Decision { return repository.Succeed("") })
	reg := prometheus.NewRegistry()
	var m *metrics.Metrics
	for round := range 2 {
		pool, err := pgxpool.NewWithConfig(f.ctx, f.pool.Config())
		if err != nil {
			t.Fatal(err)
		}
		p, err := processor.New(processor.Config{Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{}, 1)
		if _, err := p.Manage(processor.ManagerConfig{Topic: "mail", Handler: handler,
			Listener: processor.Listener{OnComplete: func(string, []repository.Task, time.Duration) { done <- struct{}{} }}}); err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			if m, err = metrics.Instrument(reg, p); err != nil {
				t.Fatal(err)
			}
		} else if err := m.Observe(p); err != nil {
			t.Fatal(err)
		}
		if err := m.Observe(p); err == nil {
			t.Fatalf("round %d: Observe of the processor already observed was accepted (its series counted twice)", round)
		}
		f.push("mail", repository.Creation{Identifier: fmt.Sprint("task-", round)})
		stop := f.run(p)
		wait(t, done, "the task")
		stop()
		if _, err := reg.Gather(); err != nil {
			t.Fatalf("round %d: gather: %v", round, err)
		}
		if got := find(t, reg, "pgtask_tasks_completed_total", map[string]string{"topic": "mail", "result": "SUCCEEDED"}).GetCounter().GetValue(); got != float64(round+1) {
			t.Errorf("round %d: %v tasks counted SUCCEEDED, want %d", round, got, round+1)
		}
		pool.Close()                                               // the processor's pool, closed with it
		time.Sleep(metrics.QueueTTLDefault + 100*time.Millisecond) // the queue's series read again
	}
	if err := metrics.New(nil).Observe(nil); err == nil {
		t.Error("Observe of Metrics made by New was accepted")
	}
}

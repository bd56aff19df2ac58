package processor_test

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/faultproxy"
	"github.com/pgtask/pgtask/internal/logbuf"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

func succeed(ctx context.Context, task repository.Task) repository.Decision {
	return repository.Succeed("ok")
}

func TestManage(t *testing.T) {
	t.Run("ASecondManagerOfATopicIsRefused", func(t *testing.T) {
		f := setup(t)
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: processor.TaskFunc(succeed)})
		_, err := p.Manage(processor.ManagerConfig{Topic: f.topic, Handler: processor.TaskFunc(succeed)})
		if !errors.Is(err, processor.ErrTopicManaged) || !strings.Contains(err.Error(), `"topic"`) {
			t.Fatalf("second Manage: %v, want ErrTopicManaged naming the topic", err)
		}
		if got := p.Topics(); len(got) != 1 || got[0] != f.topic {
			t.Errorf("topics %v, want [%s]", got, f.topic)
		}
	})
	// A nil *Buffered or TaskFunc panicked in Manage or at the first batch, and a topic
	// too long failed only when Run started the manager.
	t.Run("ANilHandlerOrABadTopicIsRefused", func(t *testing.T) {
		f := setup(t)
		p, _ := f.processor("worker", processor.Config{})
		for name, cfg := range map[string]processor.ManagerConfig{
			"NilBuffered": {Topic: "a", Handler: (*processor.Buffered)(nil)},
			"NilTaskFunc": {Topic: "a", Handler: processor.TaskFunc(nil)},
			"LongTopic":   {Topic: strings.Repeat("t", 251), Handler: processor.TaskFunc(succeed)},
		} {
			_, err := p.Manage(cfg)
			if err == nil {
				t.Errorf("%s: Manage accepted it", name)
				continue
			}
			if want := map[string]string{"NilBuffered": "Handler is required", "NilTaskFunc": "Handler is required",
				"LongTopic": "251 characters long"}[name]; !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want an error saying %q", name, err, want)
			}
		}
	})
	t.Run("DeprecatedInitializeStillCreatesTheTopic", func(t *testing.T) {
		f := setup(t)
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Topic: "created", Initialize: true,
			Handler: processor.TaskFunc(succeed)})
		f.start(p)
		f.eventually("the topic to be created", func() bool {
			_, err := f.repo.Topic(f.ctx, f.pool, "created")
			return err == nil
		})
	})
}

func TestObserve(t *testing.T) {
	t.Run("ListensToEveryManagerAndToExpiries", func(t *testing.T) {
		f := setup(t)
		f.createTopic("other", 1)
		// A dead owner's lease, for the expiry to take back.
		dead, err := repository.New(repository.Config{Owner: "dead", Now: func() time.Time { return time.Now().Add(-time.Hour) }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dead.RegisterOwner(f.ctx, f.pool); err != nil {
			t.Fatal(err)
		}
		if _, err := f.repo.Push(f.ctx, f.pool, "other", repository.Append, repository.Creation{Identifier: "lost"}); err != nil {
			t.Fatal(err)
		}
		if _, err := dead.Poll(f.ctx, f.pool, "other", repository.FIFO, repository.None, 1); err != nil {
			t.Fatal(err)
		}
		var (
			mu        sync.Mutex
			completed = map[string]int{}
		)
		expired := make(chan []repository.Expiry, 10)
		p, _ := f.processor("worker", processor.Config{ExpiryTimeout: time.Second},
			processor.ManagerConfig{Handler: processor.TaskFunc(succeed)})
		if err := p.Observe(processor.Listener{
			OnComplete: func(topic string, tasks []repository.Task, _ time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				completed[topic] += len(tasks)
			},
			OnExpire: func(e []repository.Expiry) { expired <- e },
		}); err != nil {
			t.Fatal(err)
		}
		// A manager added after Observe is observed too.
		if _, err := p.Manage(processor.ManagerConfig{Topic: "other", Handler: processor.TaskFunc(succeed), PauseInterval: time.Hour}); err != nil {
			t.Fatal(err)
		}
		first := f.pushN(2)
		f.start(p)
		select {
		case e := <-expired:
			if len(e) != 1 || e[0].Topic != "other" || e[0].Expired != 1 {
				t.Errorf("expiry %+v, want the dead owner's lease of topic other", e)
			}
		case <-time.After(time.Minute):
			t.Fatal("the observer saw no expiry")
		}
		ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
		defer cancel()
		if _, err := p.Wait(ctx, f.topic, first[0].Sequence, first[1].Sequence); err != nil {
			t.Fatal(err)
		}
		f.eventually("the observer to see both tasks", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return completed[f.topic] == 2
		})
		if err := p.Observe(processor.Listener{}); err == nil {
			t.Error("Observe after Run was accepted")
		}
	})
}

func TestSubscribe(t *testing.T) {
	t.Run("ReceivesEachCommittedTaskAsStored", func(t *testing.T) {
		f := setup(t)
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: processor.TaskFunc(
			func(ctx context.Context, task repository.Task) repository.Decision {
				if task.Identifier == "task-1" {
					return repository.Fail(errors.New("no"))
				}
				return repository.Succeed("yes")
			})})
		sub := p.Subscribe(f.topic)
		other := p.Subscribe("another-topic")
		tasks := f.pushN(3)
		f.start(p)
		got := map[int64]repository.Task{}
		for len(got) < 3 {
			select {
			case task := <-sub.C:
				got[task.Sequence] = task
			case <-time.After(time.Minute):
				t.Fatalf("received %d of 3 tasks", len(got))
			}
		}
		for _, task := range tasks {
			want := repository.Succeeded
			if task.Identifier == "task-1" {
				want = repository.Failed
			}
			if g := got[task.Sequence]; g.State != want || !reflect.DeepEqual(g, f.get(g.Sequence)) {
				t.Errorf("task %d received as %v, want %v as stored", task.Sequence, g.State, want)
			}
		}
		select {
		case task := <-other.C:
			t.Errorf("a subscription to another topic received task %d", task.Sequence)
		default:
		}
		sub.Close()
		other.Close()
		if _, open := <-sub.C; open {
			t.Error("C still open after Close")
		}
		if sub.Dropped() != 0 {
			t.Errorf("%d tasks dropped", sub.Dropped())
		}
	})
}

func TestWait(t *testing.T) {
	t.Run("UnknownTaskIsAnError", func(t *testing.T) {
		f := setup(t)
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: processor.TaskFunc(succeed)})
		if _, err := p.Wait(f.ctx, f.topic, 12345); !errors.Is(err, repository.ErrUnknownTask) {
			t.Fatalf("err = %v, want ErrUnknownTask", err)
		}
		// a topic nobody registered says so (it said its tasks were unknown)
		if _, err := p.Wait(f.ctx, "nope", 12345); !errors.Is(err, repository.ErrUnknownTopic) {
			t.Fatalf("Wait on an unknown topic: err = %v, want ErrUnknownTopic", err)
		}
	})
	// A processor whose Run failed (a topic it manages unknown) never finishes the tasks
	// waited for: Wait said so only at its deadline (a test's timeout), without why.
	t.Run("EndsWhenRunFails", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(1)
		p, _ := f.processor("worker", processor.Config{},
			processor.ManagerConfig{Topic: "missing", Handler: processor.TaskFunc(succeed)})
		ran := make(chan error, 1)
		go func() { ran <- p.Run(f.ctx) }()
		ctx, cancel := context.WithTimeout(f.ctx, 20*time.Second)
		defer cancel()
		_, err := p.Wait(ctx, f.topic, tasks[0].Sequence)
		if runErr := <-ran; runErr == nil {
			t.Fatal("Run with an unknown topic: nil")
		}
		if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "the processor's Run ended") ||
			!strings.Contains(err.Error(), `"missing"`) || !errors.Is(err, repository.ErrUnknownTopic) {
			t.Fatalf("Wait after Run failed: %v; want Run's error", err)
		}
	})
	t.Run("EndsWithItsContextNamingWhatIsUnfinished", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(1)
		p, _ := f.processor("worker", processor.Config{}) // manages nothing: nothing finishes
		ctx, cancel := context.WithCancel(f.ctx)
		cancel()
		_, err := p.Wait(ctx, f.topic, tasks[0].Sequence)
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "1 unfinished") {
			t.Fatalf("err = %v, want context.Canceled naming the unfinished task", err)
		}
	})
	t.Run("SeesTasksFinishedElsewhere", func(t *testing.T) {
		// Cancelled by hand, not by a processor: Wait reads the task again.
		f := setup(t)
		tasks := f.pushN(1)
		p, _ := f.processor("worker", processor.Config{HeartbeatInterval: 50 * time.Millisecond})
		done := make(chan error, 1)
		go func() {
			_, err := p.Wait(f.ctx, f.topic, tasks[0].Sequence)
			done <- err
		}()
		if _, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "test", tasks[0].Sequence); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Wait did not see the cancelled task")
		}
	})
	// A read that failed (a connection lost in a failover) ended Wait with its error at
	// once, though its context had time left and the task finished a moment later.
	t.Run("TriesAFailedReadAgain", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(1)
		proxy := f.startProxy()
		cut := proxy.AddCut(&faultproxy.Cut{Match: faultproxy.Statement("TaskGetMany"), Times: 1})
		p, _ := f.processor("worker", processor.Config{Pool: proxiedPool(t, proxy, f.url), HeartbeatInterval: 50 * time.Millisecond})
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
			defer cancel()
			_, err := p.Wait(ctx, f.topic, tasks[0].Sequence)
			done <- err
		}()
		f.eventually("a read cut", func() bool { return cut.Lost() == 1 })
		if _, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "test", tasks[0].Sequence); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("Wait: %v, want the task once a read succeeds", err)
		}
	})
	// Only an outage is waited out: a read that cannot succeed (the processor's pool
	// closed, here) ends Wait with its error, as before.
	t.Run("EndsOnAFailureThatWouldNotPass", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(1)
		pool := f.newPool()
		p, _ := f.processor("worker", processor.Config{Pool: pool, HeartbeatInterval: 50 * time.Millisecond})
		pool.Close()
		ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
		defer cancel()
		if _, err := p.Wait(ctx, f.topic, tasks[0].Sequence); err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait on a closed pool: %v, want its error at once", err)
		}
	})
	// EXPIRED (its owner died with no attempt left) waits for a revival as FAILED does:
	// Wait waited on until its context ended.
	t.Run("ReturnsAnExpiredTask", func(t *testing.T) {
		f := setup(t)
		tasks := f.pushN(1)
		if _, err := f.pool.Exec(f.ctx, `UPDATE task SET state = 2 WHERE topic = $1 AND sequence = $2`, f.topic, tasks[0].Sequence); err != nil {
			t.Fatal(err)
		}
		p, _ := f.processor("worker", processor.Config{HeartbeatInterval: 50 * time.Millisecond})
		ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
		defer cancel()
		got, err := p.Wait(ctx, f.topic, tasks[0].Sequence)
		if err != nil || len(got) != 1 || got[0].State != repository.Expired {
			t.Fatalf("Wait on an EXPIRED task: %v, %v; want it returned", got, err)
		}
	})
}

// jsonLogger logs to buf, one JSON object a line.
func jsonLogger(buf *logbuf.Buffer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: level}))
}

func TestLogs(t *testing.T) {
	t.Run("AHappyRunSaysNothingAtInfo", func(t *testing.T) {
		f := setup(t)
		var logs logbuf.Buffer
		p, _ := f.processor("worker", processor.Config{Logger: jsonLogger(&logs, slog.LevelInfo)},
			processor.ManagerConfig{Handler: processor.TaskFunc(succeed), BatchSize: 3})
		tasks := f.pushN(10)
		stop := f.start(p)
		ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
		defer cancel()
		seqs := make([]int64, len(tasks))
		for i, task := range tasks {
			seqs[i] = task.Sequence
		}
		if _, err := p.Wait(ctx, f.topic, seqs...); err != nil {
			t.Fatal(err)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if got := logs.String(); got != "" {
			t.Errorf("a happy run logged at INFO or above:\n%s", got)
		}
	})
	t.Run("FailuresRetriesAndDeadLettersAreLoggedWithTheTask", func(t *testing.T) {
		f := setup(t)
		f.topic = "retried"
		f.createTopic(f.topic, 2)
		if _, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) {
			s.BackoffBase, s.BackoffCap = time.Millisecond, time.Millisecond
		}); err != nil {
			t.Fatal(err)
		}
		var logs logbuf.Buffer
		p, _ := f.processor("worker", processor.Config{Logger: jsonLogger(&logs, slog.LevelInfo)},
			processor.ManagerConfig{Topic: f.topic, Handler: processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
				return repository.Fail(errors.New("smtp down"))
			})})
		task := f.pushN(1)[0]
		f.start(p)
		ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
		defer cancel()
		if got, err := p.Wait(ctx, f.topic, task.Sequence); err != nil || got[0].State != repository.Failed {
			t.Fatalf("wait: %+v, %v; want FAILED", got, err)
		}
		attrs := `"topic":"retried","sequence":` + itoa(task.Sequence) + `,"identifier":"task-0"`
		if lines := logs.Lines(`"level":"WARN"`, `"msg":"task failed, will retry"`, attrs, `"attempt":1`, `"error":"smtp down"`, `"retry_at"`); len(lines) != 1 {
			t.Errorf("retry lines %q in:\n%s", lines, logs.String())
		}
		if lines := logs.Lines(`"level":"ERROR"`, `dead-letter`, attrs, `"attempt":2`, `"error":"smtp down"`); len(lines) != 1 {
			t.Errorf("dead-letter lines %q in:\n%s", lines, logs.String())
		}
	})
	t.Run("AShutdownSaysWhatItHandedBack", func(t *testing.T) {
		f := setup(t)
		f.pushN(6)
		started := make(chan struct{})
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			select {
			case <-started:
			default:
				close(started)
			}
			<-ctx.Done()
			return repository.Fail(context.Cause(ctx))
		})
		var logs logbuf.Buffer
		p, _ := f.processor("worker", processor.Config{Logger: jsonLogger(&logs, slog.LevelInfo)},
			processor.ManagerConfig{Handler: handler, BatchSize: 3, ShutdownTimeout: 200 * time.Millisecond})
		stop := f.start(p)
		await(t, started, "a task to start")
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		// the two behind the running task were handed back as the shutdown began, not
		// at its deadline
		if lines := logs.Lines(`"level":"WARN"`, `"msg":"handler relieved of tasks it did not decide"`, `"failed":1`, `"handed_back":0`); len(lines) != 1 {
			t.Errorf("relief lines %q in:\n%s", lines, logs.String())
		}
		if lines := logs.Lines(`"level":"INFO"`, `shutdown handed back unstarted tasks`, `"topic":"topic"`, `"tasks":2`); len(lines) != 1 {
			t.Errorf("hand-back lines %q in:\n%s", lines, logs.String())
		}
		if lines := logs.Lines(`"level":"ERROR"`, `dead-letter`, `"identifier":"task-0"`, `shutdown timeout`); len(lines) != 1 {
			t.Errorf("the running task's failure %q in:\n%s", lines, logs.String())
		}
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestRunReturnsWhenAManagerStopsFatally: a manager of a topic nobody registered stops
// fatally; Run then shuts the others down and returns its error, where it went on until
// its context ended (the task of the good topic below is still processed first).
func TestRunReturnsWhenAManagerStopsFatally(t *testing.T) {
	f := setup(t)
	finished := make(done, 10)
	tasks := f.pushN(1)
	p, _ := f.processor("worker", processor.Config{},
		processor.ManagerConfig{Handler: finished.handler(0)},
		processor.ManagerConfig{Topic: "nobody-registered-it", Handler: processor.TaskFunc(succeed)})
	ran := make(chan error, 1)
	go func() { ran <- p.Run(context.WithoutCancel(f.ctx)) }()
	select {
	case err := <-ran:
		if !errors.Is(err, repository.ErrUnknownTopic) || !strings.Contains(err.Error(), "nobody-registered-it") {
			t.Fatalf("Run returned %v, want ErrUnknownTopic naming the topic", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run has not returned 30 s after a manager stopped fatally")
	}
	if got := f.get(tasks[0].Sequence); got.State == repository.Active {
		t.Errorf("the good topic's task is left ACTIVE after Run returned")
	}
	var owners int
	if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task_owner").Scan(&owners); err != nil || owners != 0 {
		t.Errorf("%d owner rows after Run returned (%v), want 0: it deregisters", owners, err)
	}
}

package pgtasktest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/pgtasktest"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

func TestMain(m *testing.M) { pgtasktest.Main(m) }

// recorder is a testing.TB whose failures are recorded instead of failing the test, so
// that the kit's own failure messages can be checked.
type recorder struct {
	testing.TB
	mu       sync.Mutex
	failures []string
}

func (r *recorder) Helper() {}

func (r *recorder) record(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, msg)
}

func (r *recorder) Errorf(format string, args ...any) { r.record(fmt.Sprintf(format, args...)) }
func (r *recorder) Fatalf(format string, args ...any) {
	r.record(fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (r *recorder) Fatal(args ...any) {
	r.record(fmt.Sprint(args...))
	runtime.Goexit()
}

// failure runs fn with a recorder and returns what it failed with ("" if nothing).
func failure(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.failures, "\n")
}

// mustContain fails the test unless msg holds every one of parts.
func mustContain(t *testing.T, msg string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Errorf("failure message lacks %q:\n%s", p, msg)
		}
	}
}

func newRepo(t *testing.T, pool *pgxpool.Pool, topics ...string) *repository.Repository {
	t.Helper()
	repo, err := repository.New(repository.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range topics {
		if _, err := repo.CreateTopic(t.Context(), pool, topic); err != nil {
			t.Fatal(err)
		}
	}
	return repo
}

func TestDatabases(t *testing.T) {
	t.Parallel()
	t.Run("EachTestGetsItsOwnMigratedDatabase", func(t *testing.T) {
		t.Parallel()
		a, b := pgtasktest.NewPool(t), pgtasktest.NewPool(t)
		newRepo(t, a, "only-in-a")
		if _, err := newRepo(t, b).Topic(t.Context(), b, "only-in-a"); !errors.Is(err, repository.ErrUnknownTopic) {
			t.Fatalf("a topic of one database is seen in another: %v", err)
		}
		var name string
		if err := a.QueryRow(t.Context(), "SELECT current_database()").Scan(&name); err != nil || !strings.HasPrefix(name, "pgtask_test_") {
			t.Fatalf("database %q, %v", name, err)
		}
	})
	t.Run("ATemplateAddsTheProgramsTables", func(t *testing.T) {
		t.Parallel()
		tpl := pgtasktest.Template{Key: "pgtasktest test: signup v1", Migrate: func(ctx context.Context, pool *pgxpool.Pool) error {
			_, err := pool.Exec(ctx, "CREATE TABLE signup (email text PRIMARY KEY)")
			return err
		}}
		pool := tpl.NewPool(t)
		if _, err := pool.Exec(t.Context(), "INSERT INTO signup VALUES ('a@example.com')"); err != nil {
			t.Fatal(err)
		}
		newRepo(t, pool, "emails") // and pgtask's schema
	})
	t.Run("ATemplateWithoutAKeyIsRefused", func(t *testing.T) {
		t.Parallel()
		msg := failure(t, func(tb testing.TB) {
			pgtasktest.Template{Migrate: func(context.Context, *pgxpool.Pool) error { return nil }}.NewDatabase(tb)
		})
		mustContain(t, msg, "Template.Key is required with Migrate")
	})
}

func TestRequirePushed(t *testing.T) {
	t.Parallel()
	pool := pgtasktest.NewPool(t)
	ctx := t.Context()
	repo := newRepo(t, pool, "emails", "other")
	if _, err := repo.Push(ctx, pool, "emails", repository.Append,
		repository.Creation{Identifier: "a@example.com", Input: `{"template": "welcome", "lang": "en"}`},
		repository.Creation{Identifier: "a@example.com", Input: `{"template": "tips"}`, Delay: time.Hour},
		repository.Creation{Identifier: "b@example.com", Reference: "order-7", Priority: -1},
	); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Push(ctx, pool, "other", repository.Append, repository.Creation{Identifier: "x"}); err != nil {
		t.Fatal(err)
	}
	minus1 := int16(-1)

	t.Run("FindsTheOneTaskThatMatches", func(t *testing.T) {
		got := pgtasktest.RequirePushed(ctx, t, pool, pgtasktest.Want{Topic: "emails", Identifier: "a@example.com",
			Input: `{"lang":"en","template":"welcome"}`, States: []repository.State{repository.Ready}})
		if got.Sequence != 1 {
			t.Errorf("found task %d, want 1", got.Sequence)
		}
		pgtasktest.RequirePushed(ctx, t, pool, pgtasktest.Want{Topic: "emails", Identifier: "b@example.com", Reference: "order-7", Priority: &minus1})
	})
	t.Run("NoMatchListsWhatTheTopicHolds", func(t *testing.T) {
		msg := failure(t, func(tb testing.TB) {
			pgtasktest.RequirePushed(ctx, tb, pool, pgtasktest.Want{Topic: "emails", Identifier: "c@example.com"})
		})
		mustContain(t, msg, `pgtasktest.RequirePushed: no task of topic "emails" matches {identifier "c@example.com"}`,
			`topic "emails" holds 3 tasks:`, `task 1: identifier "a@example.com", READY, input {"template": "welcome", "lang": "en"}`,
			`task 3: identifier "b@example.com", READY, reference "order-7", priority -1`)
	})
	t.Run("SeveralMatchesAskToNarrowIt", func(t *testing.T) {
		msg := failure(t, func(tb testing.TB) {
			pgtasktest.RequirePushed(ctx, tb, pool, pgtasktest.Want{Topic: "emails", Identifier: "a@example.com"})
		})
		mustContain(t, msg, `2 tasks of topic "emails" match`, "want exactly one", "narrow it")
	})
	t.Run("AnUnknownTopicIsSaidSo", func(t *testing.T) {
		msg := failure(t, func(tb testing.TB) {
			pgtasktest.RequirePushed(ctx, tb, pool, pgtasktest.Want{Topic: "nope", Identifier: "x"})
		})
		mustContain(t, msg, `topic "nope" does not exist`)
	})
	t.Run("InsideThePushingTransaction", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := repo.Push(ctx, tx, "other", repository.Append, repository.Creation{Identifier: "uncommitted"}); err != nil {
			t.Fatal(err)
		}
		want := pgtasktest.Want{Topic: "other", Identifier: "uncommitted"}
		pgtasktest.RequirePushedTx(ctx, t, tx, want)
		pgtasktest.RequireNotPushed(ctx, t, pool, want) // not committed: the pool does not see it
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		pgtasktest.RequireNotPushed(ctx, t, pool, want)
	})
	t.Run("RequireNotPushedFailsOnAMatch", func(t *testing.T) {
		msg := failure(t, func(tb testing.TB) {
			pgtasktest.RequireNotPushed(ctx, tb, pool, pgtasktest.Want{Topic: "other", Identifier: "x"})
		})
		mustContain(t, msg, `1 tasks of topic "other" match {identifier "x"}, want none`)
	})
	t.Run("ManyInPushOrder", func(t *testing.T) {
		got := pgtasktest.RequireManyPushed(ctx, t, pool,
			pgtasktest.Want{Topic: "emails", Identifier: "a@example.com", Input: `{"template":"welcome","lang":"en"}`},
			pgtasktest.Want{Topic: "emails", Identifier: "a@example.com", Input: `{"template":"tips"}`},
			pgtasktest.Want{Topic: "emails", Identifier: "b@example.com"},
			pgtasktest.Want{Topic: "other", Identifier: "x"})
		if len(got) != 4 || got[3].Topic != "other" {
			t.Errorf("got %+v", got)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		pgtasktest.RequireManyPushedTx(ctx, t, tx, pgtasktest.Want{Topic: "other", Identifier: "x"})
	})
	t.Run("ManyShowsWhereTheyDiffer", func(t *testing.T) {
		msg := failure(t, func(tb testing.TB) {
			pgtasktest.RequireManyPushed(ctx, tb, pool,
				pgtasktest.Want{Topic: "emails", Identifier: "b@example.com"},
				pgtasktest.Want{Topic: "emails", Identifier: "a@example.com"})
		})
		mustContain(t, msg, `topics ["emails"] hold 3 tasks, want 2`,
			`✗ 1. got task 1: identifier "a@example.com"`, `want {identifier "b@example.com"}`,
			`✗ 3. got task 3: identifier "b@example.com"`, "want (none)")
	})
}

func TestRun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	type email struct{ To string }
	tasks := pgtasktest.NewTasks("emails",
		repository.Creation{Identifier: "a", Input: pgtasktest.JSON(t, email{To: "a@example.com"})},
		repository.Creation{Identifier: "b", Input: `not json`})
	t.Run("NewTasksCarriesTheCreations", func(t *testing.T) {
		at := time.Now().Add(time.Hour).Round(0)
		got := pgtasktest.NewTasks("t",
			repository.Creation{Identifier: "k", Input: "i", Reference: "r", Priority: -2, ConcurrencyKey: "tenant-1", NotBefore: at},
			repository.Creation{Identifier: "d", Delay: time.Minute})
		k, d := got[0], got[1]
		if k.Identifier != "k" || k.Input != "i" || k.Reference != "r" || k.Priority != -2 || k.ConcurrencyKey != "tenant-1" || !k.NotBefore.Equal(at) {
			t.Errorf("task of a full creation: %+v", k)
		}
		if wait := d.NotBefore.Sub(d.Created); wait != time.Minute {
			t.Errorf("task of a creation delayed a minute: not before %v after its creation, want 1m", wait)
		}
	})
	t.Run("Typed", func(t *testing.T) {
		o := pgtasktest.Run(ctx, t, processor.Typed(func(ctx context.Context, task repository.Task, e email) repository.Decision {
			return repository.Succeed("sent to " + e.To)
		}), tasks...)
		if o.Decisions[1] != repository.Succeed("sent to a@example.com") || o.Decisions[2].Result != repository.Failure {
			t.Errorf("outcome %+v", o)
		}
	})
	t.Run("BatchFuncThatFails", func(t *testing.T) {
		o := pgtasktest.Run(ctx, t, processor.BatchFunc(func(ctx context.Context, tasks []repository.Task) (map[int64]repository.Decision, error) {
			return nil, errors.New("mail server down")
		}), tasks...)
		if o.Failed == nil || o.Decisions[1] != repository.Fail(errors.New("mail server down")) {
			t.Errorf("outcome %+v", o)
		}
	})
	t.Run("BufferedWithFollowUps", func(t *testing.T) {
		inner := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			for _, task := range b.Tasks {
				_ = b.Push("audit", repository.Append, repository.Creation{Identifier: task.Identifier})
				_ = b.Decide(task.Sequence, repository.Succeed(""))
			}
		})
		buffered, err := processor.Buffer(inner, processor.BufferConfig{})
		if err != nil {
			t.Fatal(err)
		}
		defer buffered.Stop()
		o := pgtasktest.Run(ctx, t, buffered, tasks...)
		if len(o.Decisions) != 2 || len(o.FollowUps) != 2 || o.FollowUps[1].Topic != "audit" || o.FollowUps[1].Creations[0].Identifier != "b" {
			t.Errorf("outcome %+v", o)
		}
	})
	t.Run("APanicFailsTheBatch", func(t *testing.T) {
		o := pgtasktest.Run(ctx, t, processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) { panic("boom") }), tasks...)
		if o.Failed == nil || !strings.Contains(o.Failed.Error(), "boom") || len(o.Decisions) != 2 {
			t.Errorf("outcome %+v", o)
		}
	})
	// A panic once every task is decided fails no task: it passed unseen.
	t.Run("APanicAfterDecidingEveryTaskFailsTheTest", func(t *testing.T) {
		for name, decide := range map[string]func(b *processor.Batch){
			"Complete": func(b *processor.Batch) { _ = b.Complete(nil) },
			"Decide": func(b *processor.Batch) {
				for _, task := range b.Tasks {
					_ = b.Decide(task.Sequence, repository.Succeed(""))
				}
			},
		} {
			msg := failure(t, func(tb testing.TB) {
				pgtasktest.Run(ctx, tb, processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
					decide(b)
					panic("late boom")
				}), tasks...)
			})
			mustContain(t, msg, "pgtasktest.Run: the handler panicked after deciding every task: late boom", "goroutine")
			t.Logf("%s: %.120s", name, msg)
		}
	})
	t.Run("AHandlerThatNeverDecidesFailsTheTest", func(t *testing.T) {
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		msg := failure(t, func(tb testing.TB) {
			pgtasktest.Run(short, tb, processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
				_ = b.Decide(1, repository.Succeed(""))
			}), tasks...)
		})
		mustContain(t, msg, "pgtasktest.Run: the handler did not decide tasks [2]")
	})
	t.Run("TasksOfTwoTopicsAreNotOneBatch", func(t *testing.T) {
		msg := failure(t, func(tb testing.TB) {
			pgtasktest.Run(ctx, tb, processor.TaskFunc(func(context.Context, repository.Task) repository.Decision { return repository.Succeed("") }),
				append(pgtasktest.NewTasks("a", repository.Creation{Identifier: "x"}), repository.Task{Topic: "b", Sequence: 9})...)
		})
		mustContain(t, msg, `task 9 is of topic "b"`)
		// in either order: a task without a topic is the batch's
		for _, order := range [][]repository.Task{{{Sequence: 8}, {Topic: "b", Sequence: 9}}, {{Topic: "b", Sequence: 9}, {Sequence: 8}}} {
			o := pgtasktest.Run(ctx, t, processor.TaskFunc(func(context.Context, repository.Task) repository.Decision { return repository.Succeed("") }), order...)
			if len(o.Decisions) != 2 {
				t.Errorf("tasks %+v: outcome %+v, want both decided", order, o)
			}
		}
	})
}

func TestWork(t *testing.T) {
	t.Parallel()
	pool := pgtasktest.NewPool(t)
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
		if task.Input == "fail" {
			return repository.Fail(errors.New("no"))
		}
		return repository.Succeed("done " + task.Identifier)
	})
	res := pgtasktest.Work(ctx, t, tx, handler, "jobs",
		repository.Creation{Identifier: "a"}, repository.Creation{Identifier: "b", Input: "fail"})
	if len(res.Tasks) != 2 || res.Tasks[0].State != repository.Succeeded || res.Tasks[0].Output != "done a" {
		t.Fatalf("tasks %+v", res.Tasks)
	}
	// The default retry policy: a failure with attempts left goes back to READY.
	if b := res.Tasks[1]; b.State != repository.Ready || b.Attempt != 1 || len(b.Errors) != 1 {
		t.Errorf("failed task %+v, want READY for a retry with its error kept", b)
	}
	pgtasktest.RequirePushedTx(ctx, t, tx, pgtasktest.Want{Topic: "jobs", Identifier: "a", States: []repository.State{repository.Succeeded}})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := newRepo(t, pool).Topic(ctx, pool, "jobs"); !errors.Is(err, repository.ErrUnknownTopic) {
		t.Errorf("after the rollback the topic is still there: %v", err)
	}
	// A handler may reorder and filter its batch's tasks in place, as a processor lets it
	// (the tasks are its to modify): Work completed from the slice the handler was given,
	// and the filter below made it complete one task twice.
	t.Run("AHandlerMayFilterItsTasksInPlace", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		filter := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			kept := b.Tasks[:0]
			for _, task := range b.Tasks {
				if task.Input == "skip" {
					_ = b.Decide(task.Sequence, repository.Skip("skipped"))
					continue
				}
				kept = append(kept, task)
			}
			for _, task := range kept {
				_ = b.Decide(task.Sequence, repository.Succeed("done"))
			}
		})
		res := pgtasktest.Work(ctx, t, tx, filter, "filtered",
			repository.Creation{Identifier: "a", Input: "skip"}, repository.Creation{Identifier: "b"})
		if len(res.Tasks) != 2 || res.Tasks[0].State != repository.Filtered || res.Tasks[1].State != repository.Succeeded {
			t.Fatalf("tasks %+v, want a FILTERED and b SUCCEEDED", res.Tasks)
		}
	})
	// A follow-up that deleted a task of the batch: Tasks gave the others, shifted, so
	// that Tasks[0] was the second creation's task.
	t.Run("ATaskAFollowUpDeletedFailsTheTest", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		again := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			for _, task := range b.Tasks {
				if task.Identifier == "a" {
					_ = b.Push("again", repository.Delete, repository.Creation{Identifier: "a"})
				}
				_ = b.Decide(task.Sequence, repository.Succeed(""))
			}
		})
		msg := failure(t, func(tb testing.TB) {
			pgtasktest.Work(ctx, tb, tx, again, "again", repository.Creation{Identifier: "a"}, repository.Creation{Identifier: "b"})
		})
		mustContain(t, msg, "(creation 0, identifier \"a\") is gone once the decisions and follow-ups were committed")
	})
	// A follow-up refused fails the batch's tasks under the retry policy, as a processor
	// does, and says why; Work failed the test, so that a test could not see a task retried
	// because its follow-up's topic was full.
	t.Run("ARefusedFollowUpFailsTheTasks", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		onward := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			_ = b.Push("nowhere", repository.Append, repository.Creation{Identifier: "next"})
			for _, task := range b.Tasks {
				_ = b.Decide(task.Sequence, repository.Succeed(""))
			}
		})
		res := pgtasktest.Work(ctx, t, tx, onward, "onward", repository.Creation{Identifier: "a"})
		if !errors.Is(res.Refused, repository.ErrUnknownTopic) {
			t.Errorf("Refused = %v, want the unknown topic of the follow-up", res.Refused)
		}
		if a := res.Tasks[0]; a.State != repository.Ready || a.Attempt != 1 || len(a.Errors) != 1 || !strings.Contains(a.Errors[0], "decisions could not be committed") {
			t.Errorf("task %+v, want READY for a retry, its error saying the decisions could not be committed", a)
		}
	})
	t.Run("OtherReadyTasksAreSaidInTheWay", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		msg := failure(t, func(tb testing.TB) {
			pgtasktest.Work(ctx, tb, tx, handler, "jobs", repository.Creation{Identifier: "later", Delay: time.Hour})
		})
		mustContain(t, msg, "pushed tasks [", "but leased []", "delayed or suspended")
	})
	t.Run("FollowUpsCommitInTheTransaction", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := newRepo(t, pool).CreateTopic(ctx, tx, "next"); err != nil {
			t.Fatal(err)
		}
		chain := processor.HandlerFunc(func(ctx context.Context, b *processor.Batch) {
			_ = b.Push("next", repository.Append, repository.Creation{Identifier: "child"})
			_ = b.Complete(map[int64]repository.Decision{b.Tasks[0].Sequence: repository.Succeed("")})
		})
		pgtasktest.Work(ctx, t, tx, chain, "jobs", repository.Creation{Identifier: "parent"})
		pgtasktest.RequirePushedTx(ctx, t, tx, pgtasktest.Want{Topic: "next", Identifier: "child"})
	})
}

func TestStartAndLogger(t *testing.T) {
	t.Parallel()
	pool := pgtasktest.NewPool(t)
	repo := newRepo(t, pool, "jobs")
	p, err := processor.New(processor.Config{Pool: pool, Logger: pgtasktest.Logger(t, slog.LevelDebug)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Manage(processor.ManagerConfig{Topic: "jobs", Handler: processor.TaskFunc(
		func(ctx context.Context, task repository.Task) repository.Decision { return repository.Succeed("") })}); err != nil {
		t.Fatal(err)
	}
	stop := pgtasktest.Start(t, p)
	pushed, err := repo.Push(t.Context(), pool, "jobs", repository.Append, repository.Creation{Identifier: "a"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	done, err := p.Wait(ctx, "jobs", pushed[0].Sequence)
	if err != nil || done[0].State != repository.Succeeded {
		t.Fatalf("wait: %+v, %v", done, err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil { // stopping twice is fine
		t.Fatal(err)
	}
}

// A processor whose Run fails at once (here: a topic nobody created) fails the test at
// once, naming the error, so that a test waiting on the processor says why instead of
// timing out; and the error is not reported a second time when the test ends.
func TestStartReportsARunThatEndsOnItsOwn(t *testing.T) {
	t.Parallel()
	pool := pgtasktest.NewPool(t)
	p, err := processor.New(processor.Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Manage(processor.ManagerConfig{Topic: "missing", Handler: processor.TaskFunc(
		func(ctx context.Context, task repository.Task) repository.Decision { return repository.Succeed("") })}); err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	t.Run("inner", func(t *testing.T) {
		r.TB = t
		stop := pgtasktest.Start(r, p)
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			r.mu.Lock()
			n := len(r.failures)
			r.mu.Unlock()
			if n > 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		r.mu.Lock()
		early := strings.Join(r.failures, "\n")
		r.mu.Unlock()
		mustContain(t, early, "processor run ended before the test stopped it", `"missing"`)
		if err := stop(); err == nil {
			t.Errorf("stop after Run failed: nil, want Run's error")
		}
	})
	if len(r.failures) != 1 {
		t.Errorf("failures %q, want Run's error once", r.failures)
	}
}

func TestLoggerWritesToTheTestLogUntilItEnds(t *testing.T) {
	t.Parallel()
	var lines []string
	var logger *slog.Logger
	t.Run("inner", func(t *testing.T) {
		r := &logRecorder{TB: t, lines: &lines}
		logger = pgtasktest.Logger(r, slog.LevelInfo)
		logger.Debug("hidden")
		logger.Info("shown", slog.String("topic", "jobs"))
	})
	logger.Info("after the test") // dropped, not a panic
	if len(lines) != 1 || !strings.Contains(lines[0], "msg=shown topic=jobs") {
		t.Fatalf("logged %q", lines)
	}
}

// logRecorder records what is logged to it.
type logRecorder struct {
	testing.TB
	lines *[]string
}

func (r *logRecorder) Log(args ...any) { *r.lines = append(*r.lines, fmt.Sprint(args...)) }

// A Buffer a program keeps for its processor and for its tests: once a processor that
// ran with it has stopped (which stops the Buffer), Run still runs its handler. Before,
// every task came back handed back (snoozed, undecided by the handler), without a word.
func TestRunWithABufferAProcessorStopped(t *testing.T) {
	t.Parallel()
	pool := pgtasktest.NewPool(t)
	repo := newRepo(t, pool, "jobs")
	buf, err := processor.Buffer(processor.TaskFunc(
		func(ctx context.Context, task repository.Task) repository.Decision { return repository.Succeed("ran") }),
		processor.BufferConfig{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := processor.New(processor.Config{Pool: pool, Logger: pgtasktest.Logger(t, slog.LevelInfo)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Manage(processor.ManagerConfig{Topic: "jobs", Handler: buf}); err != nil {
		t.Fatal(err)
	}
	stop := pgtasktest.Start(t, p)
	pushed, err := repo.Push(t.Context(), pool, "jobs", repository.Append, repository.Creation{Identifier: "a"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if done, err := p.Wait(ctx, "jobs", pushed[0].Sequence); err != nil || done[0].State != repository.Succeeded {
		t.Fatalf("wait: %+v, %v", done, err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	out := pgtasktest.Run(t.Context(), t, buf, repository.Task{Topic: "jobs", Sequence: 7, Identifier: "b"})
	if d, ok := out.Decisions[7]; !ok || d.Snooze || d.Result != repository.Success || d.Message != "ran" {
		t.Fatalf("Run after the processor stopped the Buffer: %+v, want the handler's SUCCESS \"ran\"", out)
	}

	// A Buffer stopped by a call of Stop hands batches back, as documented: Run fails
	// the test, saying so. It returned the snooze, whose Result is the zero value
	// (FAILURE): a test expecting a failure passed without the handler running.
	buf.Stop()
	msg := failure(t, func(tb testing.TB) {
		pgtasktest.Run(t.Context(), tb, buf, repository.Task{Topic: "jobs", Sequence: 8, Identifier: "c"})
	})
	mustContain(t, msg, "tasks [8] were handed back before the handler began them", "Buffered.Stop")
}

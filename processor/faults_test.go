package processor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/logbuf"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// TestDatabaseErrors injects a database failure into every poll (the SQLSTATE of an
// exhausted lock table, 53200) and checks that the processor says so once, reports
// itself unhealthy, keeps retrying with backoff, and resumes and recovers when the
// failure clears.
func TestDatabaseErrors(t *testing.T) {
	f := setup(t)
	var logs logbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	var pollErrors atomic.Int64
	done := make(chan int64, 10)
	p, _ := f.processor("faulty", processor.Config{Logger: logger, ErrorLogInterval: time.Hour}, processor.ManagerConfig{
		Handler: processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			done <- task.Sequence
			return repository.Decision{Result: repository.Success}
		}),
		Listener: processor.Listener{OnError: func(_ string, err error) {
			if strings.Contains(err.Error(), "poll") {
				pollErrors.Add(1)
			}
		}},
	})
	// The injected failure: the poll's candidate function raises what PostgreSQL raises
	// when its lock table is full.
	failPolls(f, "out of shared memory", "53200")
	f.start(p)
	pushed := f.pushN(1)[0]

	f.eventually("four failed polls", func() bool { return pollErrors.Load() >= 4 })
	err := p.Health()
	if !errors.Is(err, processor.ErrUnhealthy) || !strings.Contains(err.Error(), `poll topic "topic": SQLSTATE 53200`) {
		t.Fatalf("health while polls fail = %v, want ErrUnhealthy naming the poll and SQLSTATE 53200", err)
	}
	if n := len(logs.Lines("database operations failing", `cause="SQLSTATE 53200"`, `operations="poll topic \"topic\""`)); n != 1 {
		t.Fatalf("%d failed polls logged %d times, want once:\n%s", pollErrors.Load(), n, logs.String())
	}
	select {
	case seq := <-done:
		t.Fatalf("task %d ran although every poll failed", seq)
	default:
	}

	// The condition clears: the next retry polls, the task runs, the processor is healthy.
	for _, stmt := range []string{
		"DROP FUNCTION task_poll_candidates(text, boolean, smallint, integer)",
		"ALTER FUNCTION task_poll_candidates_real(text, boolean, smallint, integer) RENAME TO task_poll_candidates",
	} {
		if _, err := f.pool.Exec(f.ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	select {
	case seq := <-done:
		if seq != pushed.Sequence {
			t.Fatalf("ran task %d, want %d", seq, pushed.Sequence)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the task did not run within 30 s of the failure clearing (the poll backoff is at most 10 s)")
	}
	f.eventually("healthy", func() bool { return p.Health() == nil })
	if n := len(logs.Lines("database operations recovered", `cause="SQLSTATE 53200"`, `operations="poll topic \"topic\""`)); n != 1 {
		t.Errorf("recovery logged %d times, want once:\n%s", n, logs.String())
	}
}

// failPolls makes every poll's candidate function raise message with sqlstate (the
// function kept as task_poll_candidates_real, to be put back).
func failPolls(f *fixture, message, sqlstate string) {
	f.t.Helper()
	for _, stmt := range []string{
		"ALTER FUNCTION task_poll_candidates(text, boolean, smallint, integer) RENAME TO task_poll_candidates_real",
		fmt.Sprintf(`CREATE FUNCTION task_poll_candidates(text, boolean, smallint, integer) RETURNS SETOF tid LANGUAGE plpgsql AS
		 $$ BEGIN RAISE EXCEPTION '%s' USING ERRCODE = '%s'; END $$`, message, sqlstate),
	} {
		if _, err := f.pool.Exec(f.ctx, stmt); err != nil {
			f.t.Fatalf("%s: %v", stmt, err)
		}
	}
}

// TestFailingPollsBackOffUnderNotifications: polls that fail at once wait out their
// backoff however many notifications of work arrive meanwhile. Each wake-up ended the
// wait: while other processes pushed, the manager sent a failing poll at each of their
// notifications, its backoff never growing.
func TestFailingPollsBackOffUnderNotifications(t *testing.T) {
	f := setup(t)
	var pollErrors atomic.Int64
	p, managers := f.processor("faulty", processor.Config{Logger: slog.New(slog.DiscardHandler), ErrorLogInterval: time.Hour}, processor.ManagerConfig{
		Handler: processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision { return repository.Succeed("") }),
		Listener: processor.Listener{OnError: func(_ string, err error) {
			if strings.Contains(err.Error(), "poll") {
				pollErrors.Add(1)
			}
		}},
	})
	failPolls(f, "permission denied", "42501")
	f.start(p)
	f.pushN(1)
	f.eventually("a failed poll", func() bool { return pollErrors.Load() >= 1 })
	// 1.5 s of wake-ups, one a millisecond, as notifications of other processes' pushes
	// would bring them: the backoff (100 ms doubling, at most 2 s) allows 5 polls
	before := pollErrors.Load()
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
		managers[0].Resume()
	}
	if n := pollErrors.Load() - before; n > 8 {
		t.Errorf("%d failed polls in 1.5 s of wake-ups, want at most 8 (the backoff's)", n)
	}
}

// TestADestroyedTopicIsAFault: a topic destroyed under its processor fails every poll;
// the processor said so at each pause interval (cmd/processor: a WARN each time) and
// stayed healthy. It is now a failing operation like any other (unhealthy, logged once,
// retried with backoff), and the topic registered again is polled again.
func TestADestroyedTopicIsAFault(t *testing.T) {
	f := setup(t)
	var logs logbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	done := make(chan int64, 10)
	var polled atomic.Bool
	p, managers := f.processor("faulty", processor.Config{Logger: logger, ErrorLogInterval: time.Hour}, processor.ManagerConfig{
		Handler: processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			done <- task.Sequence
			return repository.Succeed("")
		}),
		Listener: processor.Listener{OnEmpty: func(string, time.Duration) { polled.Store(true) }},
	})
	f.start(p)
	// its first poll, empty: started (a topic destroyed before its start is fatal)
	f.eventually("the first poll", polled.Load)
	if _, err := f.repo.Destroy(f.ctx, f.pool, f.topic); err != nil {
		t.Fatal(err)
	}
	f.eventually("unhealthy", func() bool {
		managers[0].Resume() // the next poll, as a pause interval would bring it
		err := p.Health()
		return errors.Is(err, processor.ErrUnhealthy) && strings.Contains(err.Error(), `poll topic "topic"`)
	})
	if n := len(logs.Lines("database operations failing", `operations="poll topic \"topic\""`)); n != 1 {
		t.Errorf("the destroyed topic's failing polls logged %d times, want once:\n%s", n, logs.String())
	}
	f.createTopic(f.topic, 1)
	pushed := f.pushN(1)[0]
	select {
	case seq := <-done:
		if seq != pushed.Sequence {
			t.Fatalf("ran task %d, want %d", seq, pushed.Sequence)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the task of the topic registered again did not run within 30 s")
	}
	f.eventually("healthy", func() bool { return p.Health() == nil })
}

package processor_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// TestHeartbeatsThatDiffer: a processor heart-beating every 50 ms (its expiry timeout
// 250 ms) beside one heart-beating every second (5 s) does not take the slow one's
// leases while it runs, though it is silent for up to a second between beats: each
// processor records its timeout with its owner row, and expiry waits for the longer
// one. Before schema 32 the fast one took the lease back at once and ran the task a
// second time beside the first run, whose result was then refused.
func TestHeartbeatsThatDiffer(t *testing.T) {
	f := setup(t)
	var runs atomic.Int32
	started := make(chan struct{}, 1)
	handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
		if runs.Add(1) == 1 {
			started <- struct{}{}
			time.Sleep(2500 * time.Millisecond) // 2 of the slow one's heartbeats and more
		}
		return repository.Succeed("done")
	})
	slow, _ := f.processor("slow", processor.Config{HeartbeatInterval: time.Second}, processor.ManagerConfig{Handler: handler})
	f.start(slow)
	task := f.pushN(1)[0]
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the slow processor did not start the task")
	}
	fast, _ := f.processor("fast", processor.Config{HeartbeatInterval: 50 * time.Millisecond}, processor.ManagerConfig{Handler: handler})
	f.start(fast)
	deadline := time.Now().Add(30 * time.Second)
	for f.get(task.Sequence).State == repository.Active && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	got := f.get(task.Sequence)
	if got.State != repository.Succeeded || got.Attempt != 1 || runs.Load() != 1 {
		t.Fatalf("task %v at attempt %d after %d runs, want SUCCEEDED at its first and only run", got.State, got.Attempt, runs.Load())
	}
}

// TestOneTimeoutAnOwner: a Repository that declares one processor's expiry timeout is
// refused, unchanged, to a processor with another (its running processor's row would
// then say the new one's); the same timeout, rounded as it is declared, is accepted.
func TestOneTimeoutAnOwner(t *testing.T) {
	f := setup(t)
	repo, err := repository.New(repository.Config{Owner: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	first := processor.Config{Pool: f.pool, Repository: repo, HeartbeatInterval: time.Second, ExpiryTimeout: 5*time.Second + 500*time.Microsecond}
	if _, err := processor.New(first); err != nil {
		t.Fatal(err)
	}
	if _, err := processor.New(processor.Config{Pool: f.pool, Repository: repo, HeartbeatInterval: 50 * time.Millisecond}); err == nil ||
		!strings.Contains(err.Error(), "ExpiryTimeout 250ms differs from the 5.001s") {
		t.Errorf("a second processor with another timeout: %v, want an error naming both", err)
	}
	if got := repo.ExpiryTimeout(); got != 5001*time.Millisecond {
		t.Errorf("the repository declares %v after the refusal, want 5.001s as before", got)
	}
	if _, err := processor.New(first); err != nil {
		t.Errorf("the same timeout again: %v", err)
	}
}

// TestHeartbeatIntervalTooShort: a heartbeat below HeartbeatIntervalMin (each one a round
// trip and an expiry pass) is refused, naming the value and the bound.
func TestHeartbeatIntervalTooShort(t *testing.T) {
	f := setup(t)
	for _, d := range []time.Duration{-time.Second, time.Nanosecond, processor.HeartbeatIntervalMin - 1} {
		if _, err := processor.New(processor.Config{Pool: f.pool, HeartbeatInterval: d}); err == nil ||
			!strings.Contains(err.Error(), fmt.Sprintf("HeartbeatInterval %v is too short: at least 10ms", d)) {
			t.Errorf("HeartbeatInterval %v: %v, want it refused as too short", d, err)
		}
	}
	if _, err := processor.New(processor.Config{Pool: f.pool, HeartbeatInterval: processor.HeartbeatIntervalMin}); err != nil {
		t.Errorf("HeartbeatInterval %v: %v", processor.HeartbeatIntervalMin, err)
	}
}

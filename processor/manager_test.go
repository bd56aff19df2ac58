package processor_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

func TestManager(t *testing.T) {
	t.Run("ThreeProcessorsCompleteEveryTaskExactlyOnce", func(t *testing.T) {
		f := setup(t)
		const n = 10000
		f.pushN(n)
		var (
			mu   sync.Mutex
			seen = make(map[int64]int)
		)
		handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
			mu.Lock()
			seen[task.Sequence]++
			mu.Unlock()
			return repository.Succeed("")
		})
		for i := range 3 {
			buffered, err := processor.Buffer(handler, processor.BufferConfig{Queue: 2, MinWorkers: 1, MaxWorkers: 4})
			if err != nil {
				t.Fatal(err)
			}
			p, _ := f.processor([]string{"a", "b", "c"}[i], processor.Config{}, processor.ManagerConfig{Handler: buffered, BatchSize: 50})
			f.start(p)
		}
		f.eventually("all tasks succeeded", func() bool { return f.count(repository.Succeeded) == n })
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != n {
			t.Fatalf("handled %d distinct tasks, want %d", len(seen), n)
		}
		for seq, times := range seen {
			if times != 1 {
				t.Fatalf("task %d handled %d times", seq, times)
			}
		}
	})
}

func TestRescanInterval(t *testing.T) {
	// FIFO polls of condition NONE start where the previous full batch did: a task made
	// READY again below that start (a snooze, here) waits until the backlog after it runs
	// short. A negative RescanInterval polls from the head every time, so the snoozed task
	// comes back at once.
	const n = 1000
	for _, tc := range []struct {
		name     string
		rescan   time.Duration
		wantLate bool
	}{
		{"FromTheStart", time.Hour, true},
		{"FromTheHead", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			snoozed := f.pushN(n)[5].Sequence
			var (
				mu      sync.Mutex
				handled []int64
				batches atomic.Int32
				third   = make(chan struct{})
			)
			handler := processor.HandlerFunc(func(_ context.Context, b *processor.Batch) {
				number := batches.Add(1)
				if number == 3 {
					close(third)
				}
				decisions := make(map[int64]repository.Decision, len(b.Tasks))
				mu.Lock()
				for _, task := range b.Tasks {
					handled = append(handled, task.Sequence)
					decisions[task.Sequence] = repository.Succeed("")
					if task.Sequence == snoozed && task.Attempt == 1 {
						decisions[task.Sequence] = repository.SnoozeFor(0)
					}
				}
				mu.Unlock()
				if number == 1 {
					// reported once the third batch is leased, so that the polls already
					// start past the snoozed task when it is READY again
					go func() {
						<-third
						_ = b.Complete(decisions)
					}()
					return
				}
				_ = b.Complete(decisions)
			})
			p, _ := f.processor("rescanner", processor.Config{},
				processor.ManagerConfig{Handler: handler, BatchSize: 10, RescanInterval: tc.rescan})
			f.start(p)
			f.eventually("every task succeeded", func() bool { return f.count(repository.Succeeded) == n })
			mu.Lock()
			defer mu.Unlock()
			first := slices.Index(handled, snoozed)
			again := slices.Index(handled[first+1:], snoozed) + first + 1
			if len(handled) != n+1 || first < 0 || again <= first {
				t.Fatalf("handled %d tasks, the snoozed one at %d and %d", len(handled), first, again)
			}
			if late := again >= n-10; late != tc.wantLate {
				t.Errorf("the snoozed task was handled again as task %d of %d, want late (in the last batch) = %v", again+1, n+1, tc.wantLate)
			}
		})
	}
}

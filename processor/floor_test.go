package processor_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// order records the sequences a handler ran, in order; each run takes delay.
type order struct {
	mu   sync.Mutex
	seqs []int64
}

func (o *order) handler(delay time.Duration) processor.TaskFunc {
	return func(ctx context.Context, task repository.Task) repository.Decision {
		time.Sleep(delay)
		o.mu.Lock()
		o.seqs = append(o.seqs, task.Sequence)
		o.mu.Unlock()
		return repository.Succeed("")
	}
}

func (o *order) ran() []int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.seqs)
}

// TestPollPosition: a busy manager polls from where it last found work, and still finds
// what becomes READY before that position.
func TestPollPosition(t *testing.T) {
	t.Run("WorkMadeReadyBeforeItWithoutANotificationRunsWhileBusy", func(t *testing.T) {
		f := setup(t)
		early := f.pushN(1)[0]
		if _, err := f.pool.Exec(f.ctx, "UPDATE task SET state = 4 WHERE topic = $1 AND sequence = $2", f.topic, early.Sequence); err != nil {
			t.Fatal(err)
		}
		const n = 400 // 10 ms each: busy for 4 s
		f.pushN(n)
		var o order
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: o.handler(10 * time.Millisecond), BatchSize: 5})
		f.start(p)
		f.eventually("50 tasks run", func() bool { return len(o.ran()) >= 50 })
		// READY again below the position, by a write that notifies nobody
		if _, err := f.pool.Exec(f.ctx, "UPDATE task SET state = 1 WHERE topic = $1 AND sequence = $2", f.topic, early.Sequence); err != nil {
			t.Fatal(err)
		}
		f.eventually("every task run", func() bool { return len(o.ran()) == n+1 })
		at := slices.Index(o.ran(), early.Sequence)
		// Without the looks from the head it would run last, when the topic drains. A
		// look comes every second, or 20 times as long as the last one took (a loaded
		// CI, the package's tests beside the repository's, made it 326th): before the
		// last 20 tasks (200 ms of work) is still while the topic was busy.
		if at >= n-20 {
			t.Errorf("the task made READY before the position ran %dth of %d, want while the topic was still busy", at+1, n+1)
		}
	})

	t.Run("AMoreUrgentPushRunsNext", func(t *testing.T) {
		f := setup(t)
		// 80 ms each, batches of 5: 400 ms a batch, so that the two batches the urgent
		// task may wait for leave the notification 800 ms on a loaded machine
		const n = 200
		f.pushN(n)
		var o order
		p, _ := f.processor("worker", processor.Config{}, processor.ManagerConfig{Handler: o.handler(80 * time.Millisecond), BatchSize: 5})
		connected := p.Notifier().Connected()
		f.start(p)
		<-connected
		f.eventually("30 tasks run", func() bool { return len(o.ran()) >= 30 })
		urgent, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "urgent", Priority: -1})
		if err != nil {
			t.Fatal(err)
		}
		before := len(o.ran())
		f.eventually("the urgent task run", func() bool { return slices.Contains(o.ran(), urgent[0].Sequence) })
		// The batch running when it was pushed, then the next poll starts where the
		// notification says.
		if after := slices.Index(o.ran(), urgent[0].Sequence) - before; after > 10 {
			t.Errorf("the urgent task ran %d tasks after its push, want within the next two batches (10)", after)
		}
	})
}

package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/repository"
)

// report is one batch's decisions waiting to be committed.
type report struct {
	batch       *Batch
	completions []repository.Completion
	followups   []followup
	// fallback marks the failure decisions that replace refused ones.
	fallback bool
}

// completer commits the decisions of many batches together: one Complete statement per
// flush, in one transaction with the batches' follow-ups. A flush goes out as soon as the
// previous one is done (decisions arriving meanwhile join it), after FlushInterval, or
// when FlushSize decisions are waiting. No transaction is open while a handler runs.
type completer struct {
	m *TaskManager

	mu      sync.Mutex
	pending []*report
	size    int
	signal  chan struct{} // capacity 1
	closed  bool
	done    chan struct{} // closed by close()
	drained chan struct{} // closed when run returns
}

func newCompleter(m *TaskManager) *completer {
	return &completer{m: m, signal: make(chan struct{}, 1), done: make(chan struct{})}
}

func (c *completer) add(r *report) {
	c.mu.Lock()
	c.pending = append(c.pending, r)
	c.size += len(r.completions)
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// close makes run flush what is pending and return.
func (c *completer) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.done)
	}
}

// take removes up to FlushSize decisions' worth of reports (at least one report).
func (c *completer) take() []*report {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, size := 0, 0
	for n < len(c.pending) && (n == 0 || size+len(c.pending[n].completions) <= c.m.cfg.FlushSize) {
		size += len(c.pending[n].completions)
		n++
	}
	out := c.pending[:n:n]
	c.pending = c.pending[n:]
	c.size -= size
	return out
}

func (c *completer) waiting() (reports, size int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending), c.size
}

func (c *completer) run(ctx context.Context) {
	for {
		if n, size := c.waiting(); n > 0 {
			if c.m.cfg.FlushInterval > 0 && size < c.m.cfg.FlushSize {
				c.gather(ctx)
			}
			c.flush(ctx, c.take())
			continue
		}
		select {
		case <-c.signal:
		case <-c.done:
			if n, _ := c.waiting(); n == 0 {
				return
			}
		case <-ctx.Done():
			// The shutdown deadline passed with reports unflushed: our owner stops
			// heart-beating soon and expiry returns those tasks.
			if n, _ := c.waiting(); n > 0 {
				c.m.p.logger.Error("decisions not committed before shutdown", slog.String("topic", c.m.cfg.Topic), slog.Int("batches", n))
			}
			// Free what they hold (limiter slots may be shared beyond this processor).
			for n, _ := c.waiting(); n > 0; n, _ = c.waiting() {
				for _, r := range c.take() {
					c.m.finished(r.batch)
				}
			}
			return
		}
	}
}

// gather waits up to FlushInterval for FlushSize decisions.
func (c *completer) gather(ctx context.Context) {
	timer := time.NewTimer(c.m.cfg.FlushInterval)
	defer timer.Stop()
	for {
		if _, size := c.waiting(); size >= c.m.cfg.FlushSize {
			return
		}
		select {
		case <-c.signal:
		case <-timer.C:
			return
		case <-c.done:
			return
		case <-ctx.Done():
			return
		}
	}
}

// flush commits reports together; when the joint commit is refused (a stale lease in
// one batch must not fail the others), it commits them one by one. Database errors are
// retried with backoff until ctx is done, so decisions are not lost to a blip.
func (c *completer) flush(ctx context.Context, reports []*report) {
	if len(reports) == 0 {
		return
	}
	topic := c.m.cfg.Topic
	start := time.Now()
	tasks, err := c.commitRetrying(ctx, reports)
	if err == nil {
		c.finish(reports, tasks, time.Since(start))
		return
	}
	if len(reports) > 1 && isRefusal(err) {
		for _, r := range reports {
			c.flush(ctx, []*report{r})
		}
		return
	}
	var te *repository.TaskError
	if r := reports[0]; len(reports) == 1 && isRefusal(err) && !errors.As(err, &te) && !r.fallback {
		// The decisions or follow-ups themselves were refused (say, a follow-up push to
		// an unknown topic): the tasks are still ours, so fail them with the reason.
		c.m.cfg.Listener.error(topic, fmt.Errorf("batch of %d tasks refused, failing it: %w", len(r.completions), err))
		failed := &report{batch: r.batch, fallback: true, completions: make([]repository.Completion, len(r.completions))}
		for i, comp := range r.completions {
			failed.completions[i] = repository.Completion{Sequence: comp.Sequence, Attempt: comp.Attempt,
				Decision: repository.Fail(fmt.Errorf("decisions could not be committed: %w", err))}
		}
		c.flush(ctx, []*report{failed})
		return
	}
	c.m.cfg.Listener.error(topic, fmt.Errorf("commit decisions of %d batches: %w", len(reports), err))
	c.m.p.logger.Error("decisions not committed", slog.String("topic", topic), slog.Any("error", err))
	for _, r := range reports {
		c.m.finished(r.batch)
	}
}

// isRefusal reports whether err is the repository refusing the decisions themselves
// (retrying cannot help), as opposed to a database or connection error.
func isRefusal(err error) bool {
	var te *repository.TaskError
	return errors.As(err, &te) || errors.Is(err, repository.ErrInvalid) || errors.Is(err, repository.ErrUnknownTopic) ||
		errors.Is(err, repository.ErrQueueFull)
}

func (c *completer) commitRetrying(ctx context.Context, reports []*report) ([]repository.Task, error) {
	backoff := newBackoff(50*time.Millisecond, 5*time.Second)
	for {
		tasks, err := c.commit(ctx, reports)
		if err == nil || isRefusal(err) || ctx.Err() != nil {
			if err == nil || isRefusal(err) {
				c.m.p.faults.ok(c.m.commitOp) // the database answered
			}
			return tasks, err
		}
		delay := backoff.next()
		c.m.cfg.Listener.error(c.m.cfg.Topic, fmt.Errorf("commit decisions (%w in %v): %w", ErrWillRetry, delay, err))
		c.m.p.faults.fail(ctx, c.m.commitOp, err)
		sleep(ctx, delay)
	}
}

func (c *completer) commit(ctx context.Context, reports []*report) ([]repository.Task, error) {
	var completions []repository.Completion
	hasFollowups := false
	for _, r := range reports {
		completions = append(completions, r.completions...)
		hasFollowups = hasFollowups || len(r.followups) > 0
	}
	repo, pool, topic := c.m.p.repo, c.m.p.pool, c.m.cfg.Topic
	if !hasFollowups {
		return repo.Complete(ctx, pool, topic, completions...)
	}
	var tasks []repository.Task
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if tasks, err = repo.Complete(ctx, tx, topic, completions...); err != nil {
			return err
		}
		for _, r := range reports {
			for _, f := range r.followups {
				if err := runFollowup(ctx, repo, tx, f); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return tasks, err
}

func runFollowup(ctx context.Context, repo *repository.Repository, tx pgx.Tx, f followup) error {
	if f.push {
		_, err := repo.Push(ctx, tx, f.topic, f.insertion, f.creations...)
		return err
	}
	_, err := repo.Junction(ctx, tx, f.topic, f.junction, f.groups...)
	return err
}

// finish tells everyone about a committed flush.
func (c *completer) finish(reports []*report, tasks []repository.Task, took time.Duration) {
	c.m.cfg.Listener.complete(c.m.cfg.Topic, tasks, took)
	for _, t := range tasks {
		if t.State == repository.Ready {
			// Retried or snoozed: poll again when it is due. The database clock set
			// NotBefore; a little skew only makes the first poll early or late.
			c.m.wakeAt(t.NotBefore)
		}
	}
	for _, r := range reports {
		for _, f := range r.followups {
			if f.topic != c.m.cfg.Topic {
				c.m.p.Resume(f.topic)
			}
		}
		c.m.finished(r.batch)
	}
}

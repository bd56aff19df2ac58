package processor

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/pgtask/pgtask/repository"
)

// SubscriptionBuffer is how many tasks a Subscription's channel holds before further
// ones are dropped (and counted: Subscription.Dropped).
const SubscriptionBuffer = 1000

// Subscription receives the tasks whose decisions a processor commits (Subscribe).
type Subscription struct {
	// C receives each task, as stored, once its decision is committed: SUCCEEDED,
	// FILTERED, SUSPENDED or FAILED, or READY when it was snoozed, handed back or failed
	// with attempts left. It is closed by Close.
	C <-chan repository.Task

	p      *Processor
	topics map[string]bool // nil: every topic

	mu      sync.Mutex
	ch      chan repository.Task
	closed  bool
	dropped int64
}

// Subscribe returns a subscription to the decisions this processor commits for the
// given topics, or for all its topics when none is given: each task is sent on C, as
// stored, after the commit. The channel holds SubscriptionBuffer tasks; a subscriber
// that falls further behind loses tasks (Dropped counts them, and the processor logs a
// warning) rather than slowing the processor down. Close it when done. Decisions
// committed by other processes are not seen: read the database for those (Wait does).
func (p *Processor) Subscribe(topics ...string) *Subscription {
	ch := make(chan repository.Task, SubscriptionBuffer)
	s := &Subscription{C: ch, ch: ch, p: p}
	if len(topics) > 0 {
		s.topics = make(map[string]bool, len(topics))
		for _, t := range topics {
			s.topics[t] = true
		}
	}
	p.subsMu.Lock()
	defer p.subsMu.Unlock()
	subs := slices.Clone(p.subs.Load().list())
	p.subs.Store(&subscribers{subs: append(subs, s)})
	return s
}

// Close ends the subscription and closes C.
func (s *Subscription) Close() {
	s.p.subsMu.Lock()
	subs := slices.DeleteFunc(slices.Clone(s.p.subs.Load().list()), func(x *Subscription) bool { return x == s })
	s.p.subs.Store(&subscribers{subs: subs})
	s.p.subsMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.ch)
	}
}

// Dropped returns how many tasks were not sent because C was full.
func (s *Subscription) Dropped() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// subscribers is the processor's list of subscriptions, replaced as a whole when one
// comes or goes, so that publishing reads it without a lock.
type subscribers struct{ subs []*Subscription }

func (s *subscribers) list() []*Subscription {
	if s == nil {
		return nil
	}
	return s.subs
}

// publish sends committed tasks to the subscriptions that want them.
func (p *Processor) publish(tasks []repository.Task) {
	subs := p.subs.Load().list()
	if len(subs) == 0 || len(tasks) == 0 {
		return
	}
	for _, s := range subs {
		if s.topics != nil && !s.topics[tasks[0].Topic] {
			continue
		}
		s.send(tasks)
	}
}

func (s *Subscription) send(tasks []repository.Task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	before := s.dropped
	for _, t := range tasks {
		select {
		case s.ch <- t:
		default:
			s.dropped++
		}
	}
	if before == 0 && s.dropped > 0 {
		s.p.logger.Warn("subscriber too slow: dropping committed tasks", slog.String("topic", tasks[0].Topic),
			slog.Int("buffer", SubscriptionBuffer))
	}
}

// Wait waits until every given task of topic is finished (FAILED, SUSPENDED, FILTERED,
// SUCCEEDED, RECREATED or REDUNDANT: repository.State.Finished) or EXPIRED (its owner
// died with no attempt left: it waits for a revival, as a FAILED task does) and returns
// them as stored, in the order given. It learns of this processor's commits as they happen
// (Subscribe) and reads the tasks again every HeartbeatInterval, so it also sees tasks
// finished by other processes or by hand. A task retried or snoozed is not finished; an
// unknown one is an error (repository.ErrUnknownTask), as is an unknown topic
// (repository.ErrUnknownTopic). A read that fails because the server cannot be reached
// or is restarting (a connection lost in a failover) is tried again at the next
// interval; any other failure ends Wait with its error. When ctx ends first, Wait returns ctx's
// error naming the tasks still unfinished, and the last read's error if it failed. When
// this processor's Run returns an error (a topic unknown, a database that refused it),
// Wait reads the tasks once more and, if some are unfinished, returns that error (a test
// waiting for its work learns why none comes, not at its deadline). Tests use it to
// wait for the work they pushed.
func (p *Processor) Wait(ctx context.Context, topic string, sequences ...int64) ([]repository.Task, error) {
	sub := p.Subscribe(topic)
	defer sub.Close()
	wanted := make(map[int64]bool, len(sequences))
	for _, seq := range sequences {
		wanted[seq] = true
	}
	finished := make(map[int64]repository.Task, len(sequences))
	remaining := func() []int64 {
		var out []int64
		for _, seq := range sequences {
			if _, ok := finished[seq]; !ok {
				out = append(out, seq)
			}
		}
		return out
	}
	var failed error // the last read's, when it failed for a reason that may pass
	ended := func() error {
		left := remaining()
		if failed != nil {
			return fmt.Errorf("wait for tasks of topic %q: %d unfinished (%v), the last read failing (%v): %w", topic, len(left), left, failed, ctx.Err())
		}
		return fmt.Errorf("wait for tasks of topic %q: %d unfinished (%v): %w", topic, len(left), left, ctx.Err())
	}
	read := func() error {
		left := remaining()
		if len(left) == 0 {
			return nil
		}
		tasks, err := p.repo.GetMany(ctx, p.pool, topic, left...)
		if err != nil && ctx.Err() != nil {
			return ended()
		}
		if err != nil && !outageCause(causeOf(err)) {
			return err // an unknown topic, a closed pool, a refusal: it would not pass
		}
		failed = err
		if err != nil {
			return nil // the server unreachable, restarting: tried again at the next tick
		}
		found := make(map[int64]bool, len(tasks))
		for _, t := range tasks {
			found[t.Sequence] = true
			if settled(t.State) {
				finished[t.Sequence] = t
			}
		}
		for _, seq := range left {
			if !found[seq] {
				return fmt.Errorf("wait for task %d of topic %q: %w", seq, topic, repository.ErrUnknownTask)
			}
		}
		return nil
	}
	if err := read(); err != nil {
		return nil, err
	}
	ticker := time.NewTicker(p.cfg.HeartbeatInterval)
	defer ticker.Stop()
	for len(remaining()) > 0 {
		select {
		case t := <-sub.C:
			if settled(t.State) && wanted[t.Sequence] {
				finished[t.Sequence] = t
			}
		case <-ticker.C:
			if err := read(); err != nil {
				return nil, err
			}
		case <-p.failed:
			if err := read(); err != nil {
				return nil, err
			}
			if left := remaining(); len(left) > 0 {
				return nil, fmt.Errorf("wait for tasks of topic %q: %d unfinished (%v), the processor's Run ended: %w", topic, len(left), left, p.runErr)
			}
		case <-ctx.Done():
			return nil, ended()
		}
	}
	out := make([]repository.Task, len(sequences))
	for i, seq := range sequences {
		out[i] = finished[seq]
	}
	return out, nil
}

// settled reports whether a task in state s is done with as far as Wait goes: finished,
// or EXPIRED, which only a revival moves on.
func settled(s repository.State) bool { return s.Finished() || s == repository.Expired }

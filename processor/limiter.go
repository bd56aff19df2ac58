package processor

import (
	"context"
	"sync"
)

// Limiter bounds the batches a manager has outstanding (polled and not yet completed).
// Acquire blocks until a slot is free or ctx is done; Release frees a slot.
type Limiter interface {
	// Acquire takes a slot, waiting for one to be free; it fails only when ctx ends.
	Acquire(ctx context.Context) error
	// Release gives a slot back.
	Release()
}

// Unbounded is a Limiter that never blocks.
func Unbounded() Limiter { return unbounded{} }

type unbounded struct{}

func (unbounded) Acquire(ctx context.Context) error { return ctx.Err() }
func (unbounded) Release()                          {}
func (unbounded) attach() func()                    { return func() {} }
func (unbounded) sole() bool                        { return true }

// soleLimiter is implemented by the limiters that know whether one manager alone takes
// their slots: a flush leases only for such a manager.
type soleLimiter interface {
	// attach counts a manager running with the limiter until detach is called.
	attach() (detach func())
	// sole reports whether one manager alone runs with the limiter.
	sole() bool
}

// Bound returns a Limiter allowing at most n outstanding batches (n >= 1).
func Bound(n int) Limiter {
	return NewPriorityLimiter(n).Limiter(0)
}

// PriorityLimiter shares n slots among several managers, so one process can serve many
// topics fairly: when a slot frees, the waiting manager with the lowest priority value
// gets it, and managers of equal priority get slots in turn (first come, first served:
// a manager that was just served queues behind the others).
type PriorityLimiter struct {
	mu      sync.Mutex
	free    int
	waiters []*limitWaiter
	// managers counts the managers running with a view of the limiter (attach).
	managers int
}

type limitWaiter struct {
	priority int
	ready    chan struct{}
}

// NewPriorityLimiter returns a limiter with n slots (at least 1).
func NewPriorityLimiter(n int) *PriorityLimiter {
	return &PriorityLimiter{free: max(n, 1)}
}

// Waiting reports how many acquirers are waiting for a slot.
func (p *PriorityLimiter) Waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiters)
}

// Limiter returns the view of the shared limiter for a manager of the given priority
// (lower values are served first).
func (p *PriorityLimiter) Limiter(priority int) Limiter {
	return &priorityView{p: p, priority: priority}
}

type priorityView struct {
	p        *PriorityLimiter
	priority int
}

func (v *priorityView) Acquire(ctx context.Context) error { return v.p.acquire(ctx, v.priority) }
func (v *priorityView) Release()                          { v.p.release() }

func (v *priorityView) attach() (detach func()) {
	v.p.mu.Lock()
	v.p.managers++
	v.p.mu.Unlock()
	return func() {
		v.p.mu.Lock()
		v.p.managers--
		v.p.mu.Unlock()
	}
}

func (v *priorityView) sole() bool {
	v.p.mu.Lock()
	defer v.p.mu.Unlock()
	return v.p.managers == 1
}

func (p *PriorityLimiter) acquire(ctx context.Context, priority int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	if p.free > 0 && len(p.waiters) == 0 {
		p.free--
		p.mu.Unlock()
		return nil
	}
	w := &limitWaiter{priority: priority, ready: make(chan struct{})}
	p.waiters = append(p.waiters, w)
	p.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		p.mu.Lock()
		defer p.mu.Unlock()
		for i, x := range p.waiters {
			if x == w {
				p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
				return ctx.Err()
			}
		}
		// The slot was handed to us while we gave up: pass it on.
		p.handOff()
		return ctx.Err()
	}
}

func (p *PriorityLimiter) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.handOff()
}

// handOff gives a freed slot to the best waiter, or returns it to the pool.
// Called with p.mu held.
func (p *PriorityLimiter) handOff() {
	if len(p.waiters) == 0 {
		p.free++
		return
	}
	best := 0
	for i, w := range p.waiters {
		if w.priority < p.waiters[best].priority {
			best = i
		}
	}
	w := p.waiters[best]
	p.waiters = append(p.waiters[:best], p.waiters[best+1:]...)
	close(w.ready)
}

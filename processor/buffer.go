package processor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// CloseMode is what a Buffer does with queued, unstarted batches when it is stopped.
type CloseMode int

// The close modes.
const (
	// HandBack returns queued batches' tasks to READY with their attempt not consumed
	// (the graceful-shutdown default).
	HandBack CloseMode = iota
	// Drain lets the workers process the queued batches before stopping.
	Drain
	// FailPending fails queued batches.
	FailPending
)

// BufferConfig configures Buffer.
type BufferConfig struct {
	// Queue is how many batches wait, prefetched, for a free worker; Handle blocks while
	// it is full (back-pressure on the poll loop). Default 1.
	Queue int
	// MinWorkers and MaxWorkers bound the workers: they grow while batches wait and all
	// workers are busy, and shrink back after IdleTimeout without work. Defaults 1 and
	// MinWorkers.
	MinWorkers, MaxWorkers int
	// IdleTimeout is how long a worker above MinWorkers waits for work before it exits.
	// Default 10 s.
	IdleTimeout time.Duration
	// OnClose is what happens to queued batches at shutdown: a manager's own when it
	// shuts down, every one at Stop. Default HandBack.
	OnClose CloseMode
}

// Buffered is a Handler that queues batches in front of a pool of workers running the
// inner handler, so the next batch is ready when a worker frees. A queued batch counts
// as started (see Batch) only once a worker hands it to the inner handler: until then
// a shutdown hands it back whole.
//
// One Buffer may serve several managers, of one processor or of several (one pool of
// workers for many topics), and processors run one after another (a process that
// restarts its processor with the handler it built once). It lives until the last
// manager running with it shuts down: a manager that shuts down disposes of its own
// queued batches as OnClose says (with Drain the workers run them), and the others'
// stay queued and run; once no manager runs with it, it stops, and a manager that
// starts with it later starts it again (a batch of no manager given to it meanwhile is
// run on the caller's goroutine: Handle).
type Buffered struct {
	inner Handler
	cfg   BufferConfig
	queue chan queued

	mu      sync.Mutex
	workers int
	busy    int // batches a worker runs
	// pending: batches sent to the queue that no worker has started (nor a shutdown
	// disposed of), those a worker has received but not yet counted busy included: a
	// send to a waiting worker never shows in len(queue), and until that worker counts
	// it, a Handle right after saw no batch waiting and grew no worker for its own
	pending int
	users   int  // managers running with the Buffer (attach, detach)
	stopped bool // by Stop, until a manager starts with the Buffer again (attach)
	// detached: stopped by its last manager's shutdown (detach), not by a call of Stop
	detached bool
	stop     chan struct{}
	space    chan struct{} // closed (and replaced) whenever a worker takes a batch
	// detachHook, when set (by tests only), runs in detach once the last manager's
	// detach stopped the Buffer, before the queue is emptied.
	detachHook func()
}

type queued struct {
	ctx   context.Context
	batch *Batch
}

// Buffer wraps h with a prefetch queue and a pool of workers.
func Buffer(h Handler, cfg BufferConfig) (*Buffered, error) {
	if h == nil || nilValue(h) { // a nil TaskFunc or *Buffered in the interface too
		return nil, errors.New("processor: buffer: handler is nil")
	}
	if cfg.Queue < 0 || cfg.MinWorkers < 0 || cfg.MaxWorkers < 0 || cfg.IdleTimeout < 0 {
		return nil, fmt.Errorf("processor: buffer: negative setting in %+v", cfg)
	}
	if cfg.Queue == 0 {
		cfg.Queue = 1
	}
	if cfg.MinWorkers == 0 {
		cfg.MinWorkers = 1
	}
	if cfg.MaxWorkers == 0 {
		cfg.MaxWorkers = cfg.MinWorkers
	}
	if cfg.MaxWorkers < cfg.MinWorkers {
		return nil, fmt.Errorf("processor: buffer: MaxWorkers %d is below MinWorkers %d", cfg.MaxWorkers, cfg.MinWorkers)
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 10 * time.Second
	}
	if cfg.OnClose < HandBack || cfg.OnClose > FailPending {
		return nil, fmt.Errorf("processor: buffer: unknown close mode %d", cfg.OnClose)
	}
	b := &Buffered{inner: h, cfg: cfg, queue: make(chan queued, cfg.Queue), stop: make(chan struct{}), space: make(chan struct{})}
	b.mu.Lock()
	for range cfg.MinWorkers {
		b.spawn()
	}
	b.mu.Unlock()
	return b, nil
}

// Workers reports the current number of workers.
func (b *Buffered) Workers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.workers
}

// Handle queues the batch, blocking while the queue is full. A batch offered after Stop,
// or while the manager is stopping, is handed back. A batch of no manager (NewBatch,
// pgtasktest.Run) offered once the last manager running with the Buffer has stopped it
// is run by the inner handler on the caller's goroutine: a program keeps one Buffer
// for its processor and for its tests.
func (b *Buffered) Handle(ctx context.Context, batch *Batch) {
	q := queued{ctx: ctx, batch: batch}
	for {
		// Sends happen under b.mu while not stopped, and while the batch's manager is
		// not stopping, so once Stop (or detach) has emptied the queue of such batches
		// none can slip in behind it.
		b.mu.Lock()
		if b.stopped || stopping(batch) {
			alone := b.stopped && b.detached && batch.sink == nil
			b.mu.Unlock()
			if alone {
				callHandler(ctx, b.inner, batch)
				return
			}
			batch.handBack()
			return
		}
		// Grow when this batch would wait behind busy workers.
		if b.busy+b.pending >= b.workers && b.workers < b.cfg.MaxWorkers {
			b.spawn()
		}
		select {
		case b.queue <- q:
			b.pending++
			b.mu.Unlock()
			return
		default:
		}
		space, stop := b.space, b.stop
		b.mu.Unlock()
		select {
		case <-space:
		case <-batch.Stopping():
			batch.handBack()
			return
		case <-stop:
			batch.handBack()
			return
		}
	}
}

// stopping reports whether the manager of batch has begun its shutdown.
func stopping(batch *Batch) bool {
	select {
	case <-batch.Stopping():
		return true
	default:
		return false
	}
}

// spawn starts a worker; called with b.mu held.
func (b *Buffered) spawn() {
	b.workers++
	go b.work()
}

func (b *Buffered) work() {
	idle := time.NewTimer(b.cfg.IdleTimeout)
	defer idle.Stop()
	for {
		b.mu.Lock()
		stop := b.stop // replaced when the Buffer is started again
		b.mu.Unlock()
		select {
		case q := <-b.queue:
			b.take()
			b.run(q)
			idle.Reset(b.cfg.IdleTimeout)
		case <-idle.C:
			b.mu.Lock()
			// Not while a batch waits: a Handle that counted this worker sent it one
			// and grew no other.
			if b.workers > b.cfg.MinWorkers && b.pending == 0 {
				b.workers--
				b.mu.Unlock()
				return
			}
			b.mu.Unlock()
			idle.Reset(b.cfg.IdleTimeout)
		case <-stop:
			if b.cfg.OnClose == Drain {
				select {
				case q := <-b.queue:
					b.take()
					b.run(q)
					continue
				default:
				}
			}
			b.mu.Lock()
			if !b.stopped {
				b.mu.Unlock()
				continue // a manager started the Buffer again meanwhile
			}
			b.workers--
			b.mu.Unlock()
			return
		}
	}
}

// take counts a batch a worker received from the queue as busy (run ends it) and wakes
// every Handle waiting for room in the queue (several managers may share one Buffer).
func (b *Buffered) take() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending--
	b.busy++
	close(b.space)
	b.space = make(chan struct{})
}

// run runs a batch a worker took (take counted it busy).
func (b *Buffered) run(q queued) {
	returned := false
	defer func() {
		b.mu.Lock()
		b.busy--
		b.mu.Unlock()
		if !returned {
			// The handler ended this worker's goroutine (runtime.Goexit; callHandler
			// relieved its batch): another worker takes its place.
			go b.work()
		}
	}()
	if q.batch.isClosed() {
		// Relieved of it while it waited in the queue (handler timeout, shutdown
		// deadline): its tasks are no longer ours to run.
		returned = true
		return
	}
	if b.cfg.OnClose == Drain {
		// processed, not handed back, when the shutdown comes (a TaskFunc inside
		// would stop at Stopping)
		q.batch.drained.Store(true)
	} else if stopping(q.batch) {
		// Its manager's shutdown began while it waited: a worker that took it from the
		// queue as Stop (or detach) was emptying it would start it, and a batch of a
		// BatchFunc or a HandlerFunc still running at the deadline failed, an attempt
		// used, where it was to be handed back (or failed, as OnClose says) unstarted.
		b.dispose(q)
		returned = true
		return
	}
	q.batch.handOver()
	callHandler(q.ctx, b.inner, q.batch)
	returned = true
}

// tracksStarts: a queued batch is started when a worker hands it to the inner handler.
func (*Buffered) tracksStarts() {}

// Stop stops accepting batches and disposes of the queued ones as OnClose says; running
// batches finish, and the workers exit. A manager running with the Buffer does it when
// it is the last one to shut down; call it yourself on a Buffer used outside a
// processor. It stops the Buffer for every manager: one still running hands back every
// batch it polls until it shuts down.
func (b *Buffered) Stop() { b.halt(false) }

// halt is Stop; detached tells that the last manager running with the Buffer stops it.
func (b *Buffered) halt(detached bool) {
	b.mu.Lock()
	if b.stopped {
		b.detached = b.detached && detached // a call of Stop is the last word
		b.mu.Unlock()
		return
	}
	b.stopLocked(detached)
	b.mu.Unlock()
	b.emptyStopped()
}

// stopLocked stops the Buffer; called with b.mu held.
func (b *Buffered) stopLocked(detached bool) {
	b.stopped, b.detached = true, detached
	close(b.stop)
}

// emptyStopped disposes of the queued batches as OnClose says, while the Buffer stays
// stopped: a manager that starts with it meanwhile (attach) runs what it queues.
func (b *Buffered) emptyStopped() {
	if b.cfg.OnClose == Drain {
		return
	}
	for {
		b.mu.Lock()
		if !b.stopped {
			b.mu.Unlock()
			return
		}
		select {
		case q := <-b.queue:
			b.pending--
			b.mu.Unlock()
			b.dispose(q)
		default:
			b.mu.Unlock()
			return
		}
	}
}

// dispose hands back or fails (OnClose) a queued batch its manager's shutdown left.
func (b *Buffered) dispose(q queued) {
	if b.cfg.OnClose == FailPending {
		_ = q.batch.Fail(errors.New("processor shut down before the batch was started"))
	} else {
		q.batch.handBack()
	}
}

// attach counts a manager that starts running with the Buffer, and starts the Buffer
// again if it was stopped.
func (b *Buffered) attach() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.users++
	if !b.stopped {
		return
	}
	b.stopped, b.detached = false, false
	b.stop = make(chan struct{})
	// The workers of before that have not exited yet stay (work).
	for b.workers < b.cfg.MinWorkers {
		b.spawn()
	}
}

// detach is called by a manager running with the Buffer when its shutdown begins, once
// its batches' Stopping is closed: the last one stops the Buffer; before, only the
// queued batches of stopping managers are disposed of as OnClose says.
func (b *Buffered) detach() {
	b.mu.Lock()
	if b.users > 0 {
		b.users--
	}
	if b.users == 0 {
		// Stopped under the lock that counted the last user gone: a manager that starts
		// with the Buffer right after (a processor restarted, another sharing it) starts
		// it again. Stopped after the lock was let go, it stopped under such a manager,
		// which handed back every batch it polled, for ever.
		if !b.stopped {
			b.stopLocked(true)
		}
		b.mu.Unlock()
		if b.detachHook != nil {
			b.detachHook()
		}
		b.emptyStopped()
		return
	}
	if b.cfg.OnClose == Drain {
		b.mu.Unlock()
		return // the workers run them
	}
	// Senders hold b.mu, so what is put back fits; workers may take batches meanwhile.
	var all, leaving []queued
	for len(b.queue) > 0 {
		select {
		case q := <-b.queue:
			all = append(all, q)
		default:
		}
	}
	for _, q := range all {
		if stopping(q.batch) {
			leaving = append(leaving, q)
		} else {
			b.queue <- q
		}
	}
	if len(leaving) > 0 {
		b.pending -= len(leaving)
		close(b.space) // room for the Handles waiting
		b.space = make(chan struct{})
	}
	b.mu.Unlock()
	for _, q := range leaving {
		b.dispose(q)
	}
}

// sharedHandler is implemented by handlers that count the managers running with them
// (Buffered): a manager attaches once it has started, and detaches when its shutdown
// begins, instead of calling Stop.
type sharedHandler interface {
	attach()
	detach()
}

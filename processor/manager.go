package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgtask/pgtask/repository"
)

// Defaults of ManagerConfig.
const (
	BatchSizeDefault       = 100
	PauseIntervalDefault   = 5 * time.Second
	ShutdownTimeoutDefault = 30 * time.Second
	FlushSizeDefault       = 1000
	// OutstandingDefault bounds the outstanding batches of a manager whose handler is
	// not a Buffer: one being handled, the rest being committed.
	OutstandingDefault = 4
)

// ManagerConfig configures the TaskManager of one topic.
type ManagerConfig struct {
	// Topic is the topic to process. Required.
	Topic string
	// Initialize registers the topic if it is not yet registered.
	Initialize bool
	// Handler handles the polled batches. Required. Wrap it with Buffer for a prefetch
	// queue and a pool of workers.
	Handler Handler
	// Order and Condition are passed to every poll (the condition is honoured).
	Order     repository.Order
	Condition repository.Condition
	// BatchSize is the most tasks one poll leases. Default 100.
	BatchSize int
	// PauseInterval is how long the manager hibernates when the topic is empty before it
	// polls again; a NOTIFY or Resume wakes it earlier. Default 5 s.
	PauseInterval time.Duration
	// Limiter bounds the batches outstanding at once (polled and not yet committed). nil
	// bounds them to what the handler can use: a Buffer's workers plus its queue plus
	// two, else OutstandingDefault; leasing further ahead buys nothing and costs memory.
	// Use Unbounded() to lift the bound.
	Limiter Limiter
	// Listener observes the manager.
	Listener Listener
	// HandlerTimeout, when positive, fails a batch whose handler has not reported within
	// it. Zero waits for ever (until shutdown).
	HandlerTimeout time.Duration
	// ShutdownTimeout is how long a graceful shutdown lets running handlers finish
	// before their contexts are cancelled and their tasks failed. Default 30 s.
	ShutdownTimeout time.Duration
	// FlushSize is the most decisions committed in one statement. Default 1000.
	FlushSize int
	// FlushInterval is how long the completer waits for more decisions before it commits
	// a flush smaller than FlushSize. Zero commits as soon as the previous commit is done
	// (decisions that arrive meanwhile are committed together).
	FlushInterval time.Duration
}

func (c *ManagerConfig) validate() error {
	if c.Topic == "" {
		return errors.New("processor: manager config: Topic is required")
	}
	if c.Handler == nil {
		return fmt.Errorf("processor: manager config for topic %q: Handler is required", c.Topic)
	}
	if c.Order != repository.FIFO && c.Order != repository.LIFO {
		return fmt.Errorf("processor: manager config for topic %q: unknown order %d", c.Topic, c.Order)
	}
	if !c.Condition.Valid() {
		return fmt.Errorf("processor: manager config for topic %q: unknown condition %d", c.Topic, c.Condition)
	}
	for _, v := range []struct {
		name string
		d    time.Duration
	}{{"PauseInterval", c.PauseInterval}, {"HandlerTimeout", c.HandlerTimeout}, {"ShutdownTimeout", c.ShutdownTimeout}, {"FlushInterval", c.FlushInterval}} {
		if v.d < 0 {
			return fmt.Errorf("processor: manager config for topic %q: %s %v is negative", c.Topic, v.name, v.d)
		}
	}
	if c.BatchSize < 0 || c.FlushSize < 0 {
		return fmt.Errorf("processor: manager config for topic %q: BatchSize and FlushSize must not be negative", c.Topic)
	}
	if c.BatchSize == 0 {
		c.BatchSize = BatchSizeDefault
	}
	if c.PauseInterval == 0 {
		c.PauseInterval = PauseIntervalDefault
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = ShutdownTimeoutDefault
	}
	if c.FlushSize == 0 {
		c.FlushSize = FlushSizeDefault
	}
	if c.Limiter == nil {
		n := OutstandingDefault
		if b, ok := c.Handler.(*Buffered); ok {
			n = b.cfg.MaxWorkers + b.cfg.Queue + 2
		}
		c.Limiter = Bound(n)
	}
	return nil
}

// TaskManager is the poll loop of one topic (design §7): it leases batches, hands them to
// the handler, and commits the decisions in batches. It hibernates when the topic is
// empty until a NOTIFY, a Resume or the pause interval wakes it, backs off on database
// errors, stops polling while the topic is paused, and shuts down gracefully.
type TaskManager struct {
	p   *Processor
	cfg ManagerConfig

	wake   chan struct{} // capacity 1: a wake-up is never lost
	active atomic.Bool
	// pollOp and commitOp name the manager's polls and commits in Processor.Health.
	pollOp, commitOp string

	// leased counts tasks leased since the topic's statistics were last refreshed;
	// analyzeAt and analyzeSoonAt are how many make the next refresh due after
	// analyzeInterval, or at once, and analyzed is when the last one ran (Unix
	// nanoseconds, 0 before the first); see Processor.analyze.
	leased        atomic.Int64
	analyzeAt     atomic.Int64
	analyzeSoonAt atomic.Int64
	analyzed      atomic.Int64
	// rows is the topic's row estimate at the last refresh; vacuumLeased counts tasks
	// leased since the table holding the topic was last vacuumed (Processor.vacuum).
	rows         atomic.Int64
	vacuumLeased atomic.Int64
	// noVacuum is set once a VACUUM was refused for want of owning the table.
	noVacuum atomic.Bool

	dueMu    sync.Mutex
	due      []time.Time // sorted wake-ups for tasks retried or snoozed here
	dueTimer *time.Timer // fires at due[0]

	mu       sync.Mutex
	inflight map[*Batch]struct{}
	bySeq    map[int64]*Batch
	idle     chan struct{} // closed when inflight becomes empty (while stopping)

	completer *completer
}

func newManager(p *Processor, cfg ManagerConfig) (*TaskManager, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &TaskManager{
		p:        p,
		cfg:      cfg,
		wake:     make(chan struct{}, 1),
		inflight: make(map[*Batch]struct{}),
		bySeq:    make(map[int64]*Batch),
		pollOp:   fmt.Sprintf("poll topic %q", cfg.Topic),
		commitOp: fmt.Sprintf("commit decisions of topic %q", cfg.Topic),
	}
	m.active.Store(true)
	m.analyzeAt.Store(analyzeMinimum)
	m.analyzeSoonAt.Store(analyzeMinimum)
	m.completer = newCompleter(m)
	return m, nil
}

// Topic returns the managed topic.
func (m *TaskManager) Topic() string { return m.cfg.Topic }

// Resume wakes the manager to poll now. A wake-up that arrives while a batch is running
// is kept, so the manager polls again right after instead of hibernating.
func (m *TaskManager) Resume() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// wakeAt schedules a Resume for when a task this manager put back to READY with a
// not-before time (a retry with backoff, a snooze) becomes due, so it does not wait for
// the pause interval. Due times are kept sorted; one timer is armed for the earliest.
func (m *TaskManager) wakeAt(at time.Time) {
	m.dueMu.Lock()
	defer m.dueMu.Unlock()
	i, _ := slices.BinarySearchFunc(m.due, at, func(a, b time.Time) int { return a.Compare(b) })
	if i >= maxDue {
		return // far behind a thousand earlier ones: the pause interval will do
	}
	m.due = slices.Insert(m.due, i, at)
	if len(m.due) > maxDue {
		m.due = m.due[:maxDue]
	}
	if i == 0 {
		m.armDue()
	}
}

// maxDue bounds the due times a manager remembers.
const maxDue = 1000

// armDue (re)arms the timer for the earliest due time; called with dueMu held.
func (m *TaskManager) armDue() {
	if m.dueTimer != nil {
		m.dueTimer.Stop()
	}
	if len(m.due) == 0 {
		return
	}
	m.dueTimer = time.AfterFunc(max(time.Until(m.due[0]), 0), m.dueFired)
}

// dueFired wakes the manager and arms the timer for the next due time.
func (m *TaskManager) dueFired() {
	m.Resume()
	m.dueMu.Lock()
	defer m.dueMu.Unlock()
	now := time.Now()
	n := 0
	for n < len(m.due) && !m.due[n].After(now) {
		n++
	}
	m.due = m.due[n:]
	m.armDue()
}

// Active reports whether the topic is running (not paused) as last seen.
func (m *TaskManager) Active() bool { return m.active.Load() }

func (m *TaskManager) setActive(active bool) {
	if m.active.Swap(active) != active && active {
		m.Resume()
	}
}

// notify handles a notification about the manager's topic (on the notifier goroutine).
func (m *TaskManager) notify(n repository.Notification) {
	switch n.Event {
	case repository.EventWork:
		m.Resume()
	case repository.EventActivation:
		// Re-read the persisted state now rather than at the next heartbeat.
		go m.refreshActive(context.Background())
	case repository.EventCancel:
		m.cancelTask(n.Sequence)
	}
}

func (m *TaskManager) refreshActive(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	t, err := m.p.repo.Topic(ctx, m.p.pool, m.cfg.Topic)
	if err != nil {
		return err
	}
	m.setActive(t.Active)
	return nil
}

// cancelTask cancels the context of a running task of this manager.
func (m *TaskManager) cancelTask(sequence int64) {
	m.mu.Lock()
	b := m.bySeq[sequence]
	m.mu.Unlock()
	if b != nil && b.cancelTask(sequence) {
		m.p.logger.Info("cancelled running task", slog.String("topic", m.cfg.Topic), slog.Int64("sequence", sequence))
	}
}

func (m *TaskManager) track(b *Batch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inflight[b] = struct{}{}
	for _, t := range b.Tasks {
		m.bySeq[t.Sequence] = b
	}
}

func (m *TaskManager) untrack(b *Batch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.inflight, b)
	for _, t := range b.Tasks {
		if m.bySeq[t.Sequence] == b {
			delete(m.bySeq, t.Sequence)
		}
	}
	if len(m.inflight) == 0 && m.idle != nil {
		close(m.idle)
		m.idle = nil
	}
}

// run polls until ctx is done, then shuts down gracefully.
func (m *TaskManager) run(ctx context.Context) error {
	topic := m.cfg.Topic
	// Register the topic if asked, and come up in the state the database holds (pause
	// survives restarts). An unknown topic is a configuration error and fatal; anything
	// else (the database restarting, say) is retried with backoff.
	startup := newBackoff(100*time.Millisecond, 10*time.Second)
	for {
		err := m.start(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			// Told to stop before the topic could be read: a clean stop, nothing was
			// leased yet. (The error is the cancelled statement's, not the topic's.)
			return nil
		}
		if errors.Is(err, repository.ErrUnknownTopic) || errors.Is(err, repository.ErrInvalid) {
			m.cfg.Listener.fatal(topic, err)
			return fmt.Errorf("manager of topic %q: %w", topic, err)
		}
		delay := startup.next()
		m.cfg.Listener.error(topic, fmt.Errorf("start (%w in %v): %w", ErrWillRetry, delay, err))
		m.p.faults.fail(ctx, fmt.Sprintf("start topic %q", topic), err)
		sleep(ctx, delay)
	}
	m.p.faults.ok(fmt.Sprintf("start topic %q", topic))
	// Handlers run on a context that survives the start of a graceful shutdown and is
	// cancelled only when its deadline passes.
	handlerCtx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	stopping := make(chan struct{})
	completerDone := make(chan struct{})
	// Decisions are committed on yet another context, so that those reported at the
	// deadline (failures of handlers that did not finish) still land.
	commitCtx, cancelCommits := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelCommits()
	go func() {
		defer close(completerDone)
		m.completer.run(commitCtx)
	}()

	m.cfg.Listener.start(topic)
	// The poll loop runs on its own goroutine: a synchronous handler blocks it, and the
	// shutdown below must still begin (and its deadline run) while it does.
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		m.poll(ctx, handlerCtx, stopping)
	}()
	select {
	case <-ctx.Done():
	case <-pollDone:
	}

	// Graceful shutdown: polling stops. Unstarted tasks are handed back, running
	// handlers get until the deadline to report, then everything left fails.
	close(stopping)
	if s, ok := m.cfg.Handler.(Stopper); ok {
		s.Stop()
	}
	deadline := time.NewTimer(m.cfg.ShutdownTimeout)
	defer deadline.Stop()
	expired := false
	// Wait for the loop first so that no batch is dispatched after the books close.
	select {
	case <-pollDone:
	case <-deadline.C:
		expired = true
	}
	if !expired {
		select {
		case <-m.drained():
		case <-deadline.C:
			expired = true
		}
	}
	if expired {
		cancelHandlers()
		m.failInflight(fmt.Errorf("processor shut down: the handler did not report within the shutdown timeout of %v", m.cfg.ShutdownTimeout))
		select {
		case <-m.drained():
		case <-time.After(5 * time.Second):
			m.p.logger.Error("batches still not committed after shutdown", slog.String("topic", topic))
		}
	}
	m.completer.close()
	select {
	case <-completerDone:
	case <-time.After(10 * time.Second):
		cancelCommits()
		<-completerDone
	}
	return nil
}

// start registers the topic when configured to and reads its activation.
func (m *TaskManager) start(ctx context.Context) error {
	if m.cfg.Initialize {
		if _, err := m.p.repo.Initialize(ctx, m.p.pool, m.cfg.Topic); err != nil {
			return err
		}
	}
	return m.refreshActive(ctx)
}

// drained returns a channel closed once no batch is in flight.
func (m *TaskManager) drained() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := make(chan struct{})
	if len(m.inflight) == 0 {
		close(ch)
		return ch
	}
	if m.idle == nil {
		m.idle = make(chan struct{})
	}
	return m.idle
}

func (m *TaskManager) failInflight(err error) {
	m.mu.Lock()
	batches := make([]*Batch, 0, len(m.inflight))
	for b := range m.inflight {
		batches = append(batches, b)
	}
	m.mu.Unlock()
	for _, b := range batches {
		if b.Fail(err) == nil {
			m.cfg.Listener.error(m.cfg.Topic, fmt.Errorf("batch of %d tasks: %w", len(b.Tasks), err))
		}
	}
}

// poll is the poll loop proper; it returns when ctx is done.
func (m *TaskManager) poll(ctx, handlerCtx context.Context, stopping chan struct{}) {
	topic := m.cfg.Topic
	backoff := newBackoff(100*time.Millisecond, 10*time.Second)
	for ctx.Err() == nil {
		if !m.active.Load() {
			m.hibernate(ctx)
			continue
		}
		if err := m.cfg.Limiter.Acquire(ctx); err != nil {
			return
		}
		start := time.Now()
		// The poll is not cancelled by the shutdown: a poll cancelled after the server
		// committed it would leave leases nobody knows of until expiry. Its tasks, if
		// any, are handed back by the shutdown like any unstarted batch.
		pollCtx, cancelPoll := context.WithTimeout(context.WithoutCancel(ctx), pollTimeout)
		tasks, err := m.p.repo.Poll(pollCtx, m.p.pool, topic, m.cfg.Order, m.cfg.Condition, m.cfg.BatchSize)
		cancelPoll()
		elapsed := time.Since(start)
		if err != nil {
			m.cfg.Limiter.Release()
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, repository.ErrUnknownTopic) {
				// Destroyed under us, or not yet registered: wait, it may come (back).
				m.cfg.Listener.error(topic, err)
				m.hibernate(ctx)
				continue
			}
			delay := backoff.next()
			m.cfg.Listener.error(topic, fmt.Errorf("poll (%w in %v): %w", ErrWillRetry, delay, err))
			m.p.faults.fail(ctx, m.pollOp, err)
			sleep(ctx, delay)
			continue
		}
		m.p.faults.ok(m.pollOp)
		backoff.reset()
		m.leased.Add(int64(len(tasks)))
		m.vacuumLeased.Add(int64(len(tasks)))
		if len(tasks) == 0 {
			m.cfg.Limiter.Release()
			m.cfg.Listener.empty(topic, elapsed)
			m.hibernate(ctx)
			continue
		}
		m.cfg.Listener.dispatch(topic, tasks, elapsed)
		// Poll again right away, even after a short batch: with several managers SKIP
		// LOCKED or a condition makes batches short long before the topic is empty, and
		// only an empty poll says it is.
		m.dispatch(handlerCtx, tasks, stopping)
	}
}

// pollTimeout bounds one poll statement.
const pollTimeout = 30 * time.Second

// hibernate waits for a wake-up, the pause interval or ctx.
func (m *TaskManager) hibernate(ctx context.Context) {
	timer := time.NewTimer(m.cfg.PauseInterval)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-m.wake:
	case <-timer.C:
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// dispatch hands a batch to the handler, containing panics.
func (m *TaskManager) dispatch(handlerCtx context.Context, tasks []repository.Task, stopping chan struct{}) {
	// Each batch has its own context, cancelled once the batch is committed (after a
	// timeout, say), so a handler cannot go on working on tasks that were failed.
	batchCtx, cancel := context.WithCancel(handlerCtx)
	b := newBatch(batchCtx, m.cfg.Topic, tasks, stopping, m.reported)
	b.cancel = cancel
	if m.cfg.HandlerTimeout > 0 {
		timeout := m.cfg.HandlerTimeout
		b.mu.Lock()
		b.timeout = time.AfterFunc(timeout, func() {
			if b.Fail(fmt.Errorf("handler did not report within %v", timeout)) == nil {
				m.cfg.Listener.error(m.cfg.Topic, fmt.Errorf("batch of %d tasks timed out after %v", len(b.Tasks), timeout))
			}
		})
		b.mu.Unlock()
	}
	m.track(b)
	defer func() {
		if r := recover(); r != nil {
			err := fmt.Errorf("handler panicked: %v", r)
			m.cfg.Listener.error(m.cfg.Topic, err)
			_ = b.Fail(err)
		}
	}()
	m.cfg.Handler.Handle(batchCtx, b)
}

// reported receives a batch's decisions from Batch (exactly once per batch).
func (m *TaskManager) reported(b *Batch, decisions map[int64]repository.Decision, followups []followup) {
	completions := b.leases
	for i := range completions {
		completions[i].Decision = decisions[completions[i].Sequence]
	}
	// Queue the decisions first: a listener that panics must not lose them.
	m.completer.add(&report{batch: b, completions: completions, followups: followups})
	m.cfg.Listener.callback(m.cfg.Topic, b.Tasks, decisions, time.Since(b.started))
}

// finished is called by the completer once a batch's decisions are committed (or given
// up on): the batch leaves the books and frees its limiter slot.
func (m *TaskManager) finished(b *Batch) {
	b.release()
	m.untrack(b)
	m.cfg.Limiter.Release()
	if m.cfg.Condition != repository.None {
		// Tasks this batch excluded by the condition may be pollable now.
		m.Resume()
	}
}

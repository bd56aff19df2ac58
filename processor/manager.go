package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"runtime/debug"
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
	// CreateTopic creates (registers) the topic when the manager starts, if it does not
	// exist yet (Repository.CreateTopic).
	CreateTopic bool
	// Initialize is the former name of CreateTopic; either one creates the topic.
	//
	// Deprecated: use CreateTopic.
	Initialize bool
	// Handler handles the polled batches. Required. Wrap it with Buffer for a prefetch
	// queue and a pool of workers.
	Handler Handler
	// Order is the order of every poll: FIFO (the default) or LIFO.
	Order repository.Order
	// Condition is passed to every poll (and honoured): it can keep the tasks of one
	// identifier in flight one at a time, in order. Default repository.None.
	Condition repository.Condition
	// BatchSize is the most tasks one poll leases. Default 100. Under a topic
	// concurrency limit, the tasks a poll (or a flush) leases go to a Buffer of several
	// workers in one batch for each worker (MaxWorkers; their sizes differ by one at
	// most), so that the slots go to every worker rather than to one worker's batch, run
	// task after task while the others wait.
	BatchSize int
	// PauseInterval is how long the manager hibernates when the topic is empty before it
	// polls again. A notification of new work, a timer for the next task that falls due
	// (a delay, a retry's backoff, a snooze) or Resume wake it earlier, so the interval
	// only bounds how late a task whose notification was lost starts. Default 5 s.
	PauseInterval time.Duration
	// Limiter bounds the batches outstanding at once (polled and not yet committed). nil
	// bounds them to what the handler can use: a Buffer's workers plus its queue plus
	// two, else OutstandingDefault; leasing further ahead buys nothing and costs memory.
	// Use Unbounded() to lift the bound. A manager of a limited topic whose Limiter no
	// other manager shares (the default) leases the next tasks in the flush that frees
	// capacity; one that shares it polls after the flush instead.
	Limiter Limiter
	// Listener observes the manager (as do the listeners given to Processor.Observe).
	Listener Listener
	// HandlerTimeout, when positive, relieves a handler of the tasks of a batch it has
	// not decided within it: those it started fail, the others are handed back (see
	// Batch). With a Buffer it counts again from when a worker takes the batch: one
	// that waits in the queue as long is handed back unstarted. Zero waits for ever
	// (until shutdown).
	HandlerTimeout time.Duration
	// ShutdownTimeout is how long a graceful shutdown lets running handlers decide their
	// tasks before their contexts are cancelled: then the tasks they started fail and
	// the others are handed back (see Batch). Default 30 s.
	ShutdownTimeout time.Duration
	// FlushSize is the most decisions committed in one statement. Default 1000.
	FlushSize int
	// FlushInterval is how long the completer waits for more decisions before it commits
	// a flush smaller than FlushSize. Zero commits as soon as the previous commit is done
	// (decisions that arrive meanwhile are committed together); decisions of a batch
	// whose other tasks are still being decided at a steady pace then wait for them (up to
	// 100 ms), and go out once the batch is quiet for three times its pace or 5 ms (a slow
	// task), so that a batch decided task by task is still one statement.
	FlushInterval time.Duration
}

// nilValue reports whether v holds a nil pointer, func, map, slice, channel or
// interface.
func nilValue(v any) bool {
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Slice, reflect.Chan, reflect.Interface:
		return r.IsNil()
	}
	return false
}

func (c *ManagerConfig) validate() error {
	if c.Topic == "" {
		return errors.New("processor: manager config: Topic is required")
	}
	if c.Handler == nil || nilValue(c.Handler) {
		// a nil *Buffered or TaskFunc in the interface is no handler either: it
		// panicked here, or at the first batch
		return fmt.Errorf("processor: manager config for topic %q: Handler is required", c.Topic)
	}
	if err := repository.ValidateTopic(c.Topic); err != nil {
		return fmt.Errorf("processor: manager config: %w", err)
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

// TaskManager is the poll loop of one topic: it leases batches, hands them to
// the handler, and commits the decisions in batches. It hibernates when the topic is
// empty until a NOTIFY, a Resume or the pause interval wakes it, backs off on database
// errors, stops polling while the topic is paused, and shuts down gracefully.
type TaskManager struct {
	p   *Processor
	cfg ManagerConfig
	// workers is how many batches the handler runs at once, as far as the manager
	// knows: a Buffer's MaxWorkers, else 1 (split).
	workers int

	wake   chan struct{} // capacity 1: a wake-up is never lost
	active atomic.Bool
	// leaseGate is held shared by each statement that leases tasks (a poll, a flush's
	// lease) from the moment it has seen the topic running until it returns: Active
	// reports a pause once none begun before the pause is still out (beginLease).
	leaseGate sync.RWMutex
	// limited and rated say whether the topic has limits a poll enforces, and a rate
	// limit among them, as last read (refreshActive, Processor.tick): a commit then
	// wakes the manager (capacity was freed), and an empty poll asks when the rate
	// limit lets the next task start. keyed says its polls take tasks by concurrency key
	// (a per-key limit, or fairness): those read the topic from its head, whatever the
	// position (schema 21).
	limited, rated, keyed atomic.Bool
	// topicReads numbers the reads of the topic's state (readingTopic), taken as each
	// begins; setTopic takes in a read only if none begun after it was taken in
	// already (topicApplied, under topicMu): a read that answered late (the heartbeat's
	// beside a notification's) would otherwise put back the limit it saw, and a
	// manager parked at an old limit waits for its own tasks to end.
	topicReads   atomic.Uint64
	topicMu      sync.Mutex
	topicApplied uint64
	// reread asks for a read of the topic's state on an ACTIVATION notification
	// (rereadTopic, one read at a time however many notifications come).
	reread chan struct{}
	// startOp, pollOp, dueOp, rateOp, watchOp and commitOp name the manager's start,
	// polls, look-ups of the next due task and of when the rate limit lets one start,
	// looks for work before its poll position (watchFloor) and commits in
	// Processor.Health.
	startOp, pollOp, dueOp, rateOp, watchOp, commitOp string

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
	// vacuumXmin is the database's oldest snapshot (Repository.OldestXmin) when the
	// last VACUUM of the topic's table began.
	vacuumXmin atomic.Pointer[string]
	// probing is set while a probe for the next due task runs (probeDueAside).
	probing atomic.Bool

	dueMu    sync.Mutex
	due      []dueAt     // sorted wake-ups for tasks that fall due (wakeAt)
	dueTimer *time.Timer // fires at due[0]
	// dueStopped: the manager has stopped (stopDue); no due time is taken any more
	dueStopped bool

	// leases is shared by the managers of the topic in this processor: a poll holds it
	// for reading from its statement until its batch is tracked, a reconciliation for
	// writing (reconcile), so that the tasks tracked are all that it has leased.
	leases *sync.RWMutex
	// floor is where the next poll starts.
	floor *floor
	// unsure is set by a poll whose outcome is unknown (repository.Uncertain), the
	// poll loop's or a flush's that leased (completer.commitLeasing), and by any
	// operation of the processor that fails as in an outage, which may have lost
	// commits (Processor.suspectLostCommits): the next round reconciles before it polls.
	unsure atomic.Bool

	// A limited topic's next tasks are leased by the flush that frees its capacity, in
	// the same transaction (completer.commitLeasing), when the poll loop waits for that:
	// parked is set while it does (after an empty poll, or while the tasks this manager
	// holds fill the topic's concurrency limit, which it stores in concurrency; 0: none).
	// The flush hands the batch it leased over in handed, which the poll loop takes
	// before it polls; once the loop has ended (loopDone), a flush hands its batch back.
	parked      atomic.Bool
	concurrency atomic.Int32
	handMu      sync.Mutex
	handed      []*Batch
	loopDone    bool
	// holding counts the tasks leased and not yet decided and committed (or given up
	// on): track adds a batch's, completer.settle takes away those of each report.
	holding atomic.Int64
	// handlerCtx and stopping are run's: the context handlers run on, and the channel
	// closed when the shutdown begins, for every batch the manager prepares. pollCtx is
	// the context of the poll loop's statements: it survives the start of a graceful
	// shutdown (a poll cancelled after the server committed it would leave leases
	// nobody knows of) and is cancelled at its deadline, so that no poll leases tasks
	// after Run has returned.
	handlerCtx context.Context
	stopping   chan struct{}
	pollCtx    context.Context

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
		reread:   make(chan struct{}, 1),
		inflight: make(map[*Batch]struct{}),
		bySeq:    make(map[int64]*Batch),
		startOp:  fmt.Sprintf("start topic %q", cfg.Topic),
		pollOp:   fmt.Sprintf("poll topic %q", cfg.Topic),
		dueOp:    fmt.Sprintf("find the next due task of topic %q", cfg.Topic),
		rateOp:   fmt.Sprintf("find when the rate limit of topic %q lets a task start", cfg.Topic),
		watchOp:  fmt.Sprintf("look for work before the poll position of topic %q", cfg.Topic),
		commitOp: fmt.Sprintf("commit decisions of topic %q", cfg.Topic),
		floor:    newFloor(cfg.Order, cfg.Condition),
		workers:  1,
	}
	if b, ok := cfg.Handler.(*Buffered); ok {
		m.workers = b.cfg.MaxWorkers
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

// dueAt is a moment a READY task falls due, and where it stands in poll order (zero:
// unknown).
type dueAt struct {
	at   time.Time
	from repository.Position
}

// wakeAt schedules a poll for when a READY task falls due: a task this manager retried
// or snoozed, the earliest delayed task found before hibernating (probeDue), the delayed
// work a notification announced. The manager then polls at that moment, not at its next
// pause interval, whether it is idle or busy polling from a position past the task: the
// poll starts at from, the task's position, or at the head of the topic when from is
// zero. Due times are kept sorted; one timer is armed for the earliest, and a later
// time does not move it.
func (m *TaskManager) wakeAt(at time.Time, from repository.Position) {
	m.dueMu.Lock()
	defer m.dueMu.Unlock()
	if m.dueStopped {
		return
	}
	if !from.IsZero() {
		// One entry per task: each empty poll's probe finds the same delayed task again,
		// at a time a few microseconds on (now plus the delay left), and filled the list
		// with copies of it. An earlier time moves it.
		if j := slices.IndexFunc(m.due, func(d dueAt) bool { return d.from == from }); j >= 0 {
			if !at.Before(m.due[j].at) {
				return
			}
			m.due = slices.Delete(m.due, j, j+1)
		}
	}
	i, _ := slices.BinarySearchFunc(m.due, at, func(a dueAt, b time.Time) int { return a.at.Compare(b) })
	if i >= maxDue {
		return // far behind a thousand earlier ones: found by a later probe (probeDue)
	}
	m.due = slices.Insert(m.due, i, dueAt{at: at, from: from})
	if len(m.due) > maxDue {
		m.due = m.due[:maxDue]
	}
	if i == 0 {
		m.armDue()
	}
}

// stopDue disarms the due timer and forgets the due times: the manager has stopped.
// Later due times (a notification of delayed work before the processor unsubscribes)
// are not taken.
func (m *TaskManager) stopDue() {
	m.dueMu.Lock()
	defer m.dueMu.Unlock()
	m.dueStopped = true
	if m.dueTimer != nil {
		m.dueTimer.Stop()
	}
	m.due = nil
}

// maxDue bounds the due times a manager remembers. Those dropped are found again by
// the probe of the next empty poll (probeDue).
const maxDue = 1000

// probeDue arms the timer for the earliest READY task of the topic that falls due after
// the poll from the head that began at head (Repository.NextDue), before the manager
// hibernates. A task that fell due since (while polls started from a position past it,
// or while the last poll ran) makes it poll again at once, from that task's position,
// unless it stands at or after from, where the empty poll that began at polled started:
// that poll passed it over if it was due by then (a limit held it back), and polling it
// again at once would find the same, over and over while the limit holds; the probe
// then asks for what fell due since that poll began (a few milliseconds more: the
// window counts whole milliseconds, and a task that fell due as the poll read the time
// is better polled once more than left to the pause interval). A failure is reported
// and otherwise ignored: the pause interval remains the safety net.
func (m *TaskManager) probeDue(ctx context.Context, head time.Time, from repository.Position, polled time.Time) {
	qctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	due, ok, err := m.p.repo.NextDue(qctx, m.p.pool, m.cfg.Topic, time.Since(head))
	if err == nil && ok && due.Delay == 0 && !from.IsZero() && due.At.Compare(from) >= 0 {
		due, ok, err = m.p.repo.NextDue(qctx, m.p.pool, m.cfg.Topic, time.Since(polled)+5*time.Millisecond)
	}
	if err != nil {
		if ctx.Err() == nil {
			m.cfg.Listener.error(m.cfg.Topic, fmt.Errorf("find the next due task: %w", err))
			m.p.faults.fail(ctx, m.dueOp, err)
		}
		return
	}
	m.p.faults.ok(m.dueOp)
	if ok {
		m.wakeAt(time.Now().Add(due.Delay), due.At)
	}
}

// probeDueAside runs probeDue on a goroutine of its own (one at a time, tracked by wg), so
// that the poll loop goes on to hibernate at once: a notification that comes meanwhile is
// not kept waiting for the probe (a plpgsql call that plans its statement, about 0.2 ms;
// far more when statistics or a held snapshot make it slow), and the probe's timer, or
// its finding that a task is due now, wakes the manager as a notification does.
func (m *TaskManager) probeDueAside(ctx context.Context, head time.Time, from repository.Position, polled time.Time, wg *sync.WaitGroup) {
	if !m.probing.CompareAndSwap(false, true) {
		return // one is under way: it reads the same index
	}
	wg.Go(func() {
		defer m.probing.Store(false)
		m.probeDue(ctx, head, from, polled)
	})
}

// probeRate arms the timer for when the topic's rate limit lets the next task start,
// when it is what held back the empty poll that just ran (Repository.RateWait): the
// manager then polls at that moment, not at its pause interval.
func (m *TaskManager) probeRate(ctx context.Context) {
	qctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	wait, ok, err := m.p.repo.RateWait(qctx, m.p.pool, m.cfg.Topic)
	if err != nil {
		if ctx.Err() == nil {
			m.cfg.Listener.error(m.cfg.Topic, fmt.Errorf("find when the rate limit lets a task start: %w", err))
			m.p.faults.fail(ctx, m.rateOp, err)
		}
		return
	}
	m.p.faults.ok(m.rateOp)
	if ok {
		m.wakeAt(time.Now().Add(wait), repository.Position{})
	}
}

// armDue (re)arms the timer for the earliest due time; called with dueMu held.
func (m *TaskManager) armDue() {
	if m.dueTimer != nil {
		m.dueTimer.Stop()
	}
	if len(m.due) == 0 {
		return
	}
	m.dueTimer = time.AfterFunc(max(time.Until(m.due[0].at), 0), m.dueFired)
}

// dueFired sends the next poll to the tasks falling due (they may lie before the
// position polls start from), wakes the manager and arms the timer for the next due time.
func (m *TaskManager) dueFired() {
	m.dueMu.Lock()
	now := time.Now()
	n := 0
	for n < len(m.due) && !m.due[n].at.After(now) {
		m.floor.notified(m.due[n].from)
		n++
	}
	m.due = m.due[n:]
	m.armDue()
	m.dueMu.Unlock()
	m.Resume()
}

// watchFloor looks, off the poll loop, for READY work before the position polls start
// from that no notification or timer told of (a row changed by hand, a notification
// missed while the manager was busy), and sends the next poll to it: at most every
// checkEvery, and for at most 1/checkShare of the time when reading the topic from its
// head is slow, as a long-held snapshot makes it (see floor). It returns when ctx is
// done.
func (m *TaskManager) watchFloor(ctx context.Context) {
	wait := checkEvery
	for {
		sleep(ctx, wait)
		if ctx.Err() != nil {
			return
		}
		_, now, w := m.floor.look()
		wait = w
		if !now || !m.active.Load() || m.keyed.Load() || m.p.quiet() {
			continue // polls by key take no position; see Processor.quiet
		}
		qctx, cancel := context.WithTimeout(ctx, watchTimeout)
		start := time.Now()
		first, _, err := m.p.repo.FirstReady(qctx, m.p.pool, m.cfg.Topic)
		took := time.Since(start)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			m.p.faults.fail(ctx, m.watchOp, err)
			m.floor.looked(took, repository.Position{}) // a look that timed out was slow
			_, _, wait = m.floor.look()
			continue
		}
		m.p.faults.ok(m.watchOp)
		if m.floor.looked(took, first) {
			m.Resume()
		}
		_, _, wait = m.floor.look()
	}
}

// watchTimeout bounds one look of watchFloor.
const watchTimeout = 2 * time.Minute

// Active reports whether the topic is running (not paused) as last seen: true until the
// manager has first read its topic, as it does before it polls (Listener.OnStart). Once
// it reports a pause, the manager leases no task until the topic is resumed: it waits
// for a poll begun before the pause to return.
func (m *TaskManager) Active() bool {
	if m.active.Load() {
		return true
	}
	m.leaseGate.Lock()
	// empty: it waits for the leases under way
	m.leaseGate.Unlock()
	return false
}

// beginLease is called before a statement that leases tasks of the topic: it reports
// whether the topic is running (and the owner's heartbeat recent: Processor.beatStale)
// and, when it is, holds off Active's report of a pause until endLease. It is taken
// before m.leases.
func (m *TaskManager) beginLease() bool {
	m.leaseGate.RLock()
	if !m.active.Load() || m.p.beatStale() {
		m.leaseGate.RUnlock()
		return false
	}
	return true
}

// endLease ends what beginLease began.
func (m *TaskManager) endLease() { m.leaseGate.RUnlock() }

func (m *TaskManager) setActive(active bool) {
	if m.active.Swap(active) != active && active {
		m.Resume()
	}
}

// dueSlack is how much sooner than its arrival plus its delay a notification's due time
// must be for the manager to go by the due time: the commit and the delivery of a
// notification take a millisecond or so, and a processor whose clock runs a little
// ahead of the database's would otherwise wake early at every delayed push, poll for
// nothing and probe for the due time. A transaction that committed later than this
// after its write (a push in a long transaction) is what the due time is for.
const dueSlack = 100 * time.Millisecond

// notifiedDue is when the delayed work of notification n, arrived at now, falls due:
// its delay counted from its arrival or, when the payload gives a due time (schema 53)
// sooner by more than dueSlack, that time (the write's statement ran long before the
// commit sent the notification). By this process's clock: one ahead of the database's
// by more than dueSlack wakes early, finds nothing due and then probes for the time
// (probeDue).
func notifiedDue(now time.Time, n repository.Notification) time.Time {
	at := now.Add(n.Delay)
	if !n.Due.IsZero() && n.Due.Before(at.Add(-dueSlack)) {
		return n.Due
	}
	return at
}

// notify handles a notification about the manager's topic (on the notifier goroutine).
func (m *TaskManager) notify(n repository.Notification) {
	switch n.Event {
	case repository.EventWork:
		if n.Delay > 0 {
			// Nothing of it is due yet: poll when it is, not now, from where it is.
			m.wakeAt(notifiedDue(time.Now(), n), n.From)
			return
		}
		m.floor.notified(n.From)
		m.Resume()
	case repository.EventActivation:
		// Paused, resumed, or its limits changed (Configure, task_topic_set_limits).
		m.floor.restart()
		// Re-read the persisted state now rather than at the next heartbeat.
		select {
		case m.reread <- struct{}{}:
		default: // a read is asked for already, and begins after this notification
		}
	case repository.EventCancel:
		m.cancelTask(n.Sequence)
	}
}

func (m *TaskManager) refreshActive(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	read := m.readingTopic()
	t, err := m.p.repo.Topic(ctx, m.p.pool, m.cfg.Topic)
	if err != nil {
		return err
	}
	m.setTopic(read, t)
	return nil
}

// rereadTopic reads the topic's state each time an ACTIVATION notification asks for it
// (notify), until ctx is done: one read at a time, however many notifications come (a
// script pausing and resuming topics in a loop started a read, up to 10 s long, per
// notification, which nothing waited for). A failure is reported as the heartbeat's
// reads of every topic's state are, under their name, which the next of those clears.
func (m *TaskManager) rereadTopic(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.reread:
		}
		if err := m.refreshActive(ctx); err != nil {
			if ctx.Err() == nil {
				m.cfg.Listener.error(m.cfg.Topic, fmt.Errorf("read the topic's state: %w", err))
				m.p.faults.fail(ctx, readTopicsOp, err)
			}
		}
	}
}

// readingTopic numbers a read of the topic's state about to begin, for setTopic.
func (m *TaskManager) readingTopic() uint64 { return m.topicReads.Add(1) }

// setTopic takes in the topic's state as read: activation and limits. A topic whose
// limits changed is polled at once: a topic that has just become limited, since a poll
// held back by the new limit before this manager knew of it may have left it asleep,
// and only its own commits wake it now; a concurrency limit raised or lifted, since a
// manager parked at the old one (atLimit) would otherwise wait for its own tasks to end.
// read is the number readingTopic gave the read of t as it began: a read begun before
// one already taken in is ignored, since it may have seen an older state.
func (m *TaskManager) setTopic(read uint64, t repository.Topic) {
	m.topicMu.Lock()
	defer m.topicMu.Unlock()
	if read < m.topicApplied {
		return
	}
	m.topicApplied = read
	was := m.limited.Swap(t.Limited())
	concurrency := m.concurrency.Swap(t.Concurrency)
	m.rated.Store(t.Rate > 0)
	m.keyed.Store(t.KeyConcurrency > 0 || t.Fair)
	m.setActive(t.Active)
	if t.Active && (!was && t.Limited() || concurrency != t.Concurrency) {
		m.Resume()
	}
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
	for _, t := range b.leased {
		m.bySeq[t.Sequence] = b
	}
	m.holding.Add(int64(len(b.leased)))
}

func (m *TaskManager) untrack(b *Batch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.inflight, b)
	for _, t := range b.leased {
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
	startup := newBackoff(100*time.Millisecond, retryCap)
	// a timer left armed for a task due in days (a notification of delayed work comes
	// from the subscription, taken before the start) kept the manager and its processor
	// alive until then, and then woke a manager long gone
	defer m.stopDue()
	for {
		connected := m.reconnection()
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
		m.retry(ctx, "start", m.startOp, err, startup, connected)
	}
	m.p.faults.ok(m.startOp)
	if s, ok := m.cfg.Handler.(sharedHandler); ok {
		s.attach()
	}
	if s, ok := m.cfg.Limiter.(soleLimiter); ok {
		defer s.attach()()
	}
	// Handlers run on a context that survives the start of a graceful shutdown and is
	// cancelled only when its deadline passes.
	handlerCtx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	stopping := make(chan struct{})
	pollCtx, abortPolls := context.WithCancel(context.WithoutCancel(ctx))
	defer abortPolls()
	m.handlerCtx, m.stopping, m.pollCtx = handlerCtx, stopping, pollCtx // before the poll loop and the completer start
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
		m.poll(ctx)
	}()
	asideCtx, stopAside := context.WithCancel(ctx)
	var aside sync.WaitGroup
	aside.Go(func() { m.rereadTopic(asideCtx) })
	if m.floor.enabled {
		aside.Go(func() { m.watchFloor(asideCtx) })
	}
	defer aside.Wait()
	defer stopAside()
	select {
	case <-ctx.Done():
	case <-pollDone:
	}

	// Graceful shutdown: polling stops. Unstarted tasks are handed back, running
	// handlers get until the deadline to report, then everything left fails.
	close(stopping)
	m.completer.stopWaiting() // what is decided commits now
	if s, ok := m.cfg.Handler.(sharedHandler); ok {
		s.detach() // stops it if no other manager runs with it
	} else if s, ok := m.cfg.Handler.(Stopper); ok {
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
		// A poll still running (waiting for a lock, say) is cancelled: answered after
		// Run returned, it would lease tasks nobody runs or hands back.
		abortPolls()
		// Relieve the handlers first: a handler whose context is cancelled may still
		// report, and the shutdown's account of what it did not decide must stand.
		m.failInflight(fmt.Errorf("processor shut down: the handler did not decide this task within the shutdown timeout of %v", m.cfg.ShutdownTimeout))
		cancelHandlers()
		// The loop ends once its poll or its synchronous handler returns; a batch it
		// leased meanwhile is handed back through the completer, still open.
		grace, endGrace := context.WithTimeout(context.Background(), 5*time.Second)
		defer endGrace()
		select {
		case <-pollDone:
		case <-grace.Done():
			m.p.logger.Error("poll loop still running after shutdown", slog.String("topic", topic))
		}
		select {
		case <-m.drained():
		case <-grace.Done():
			m.p.logger.Error("batches still not committed after shutdown", slog.String("topic", topic))
		}
	}
	select {
	case <-pollDone:
		// after a take-over of the owner name the stranded leases are the other
		// process's (its leases are under the same name); so they may be while the
		// heartbeat is stale, the take-over not seen yet (the poll loop reconciles
		// nothing then either): left, this process's own expire, an attempt used
		if m.unsure.Load() && !m.p.taken.Load() && !m.p.beatStale() {
			m.handBackStranded()
		}
	default: // still running (logged above): what it leases is its own
	}
	m.completer.close()
	select {
	case <-completerDone:
	case <-time.After(10 * time.Second):
		cancelCommits()
		<-completerDone
	}
	m.logShutdown()
	return nil
}

// start registers the topic when configured to and reads its activation.
func (m *TaskManager) start(ctx context.Context) error {
	if m.cfg.CreateTopic || m.cfg.Initialize {
		if _, err := m.p.repo.CreateTopic(ctx, m.p.pool, m.cfg.Topic); err != nil {
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
	for _, b := range m.inflightBatches() {
		m.relieve(b, err)
	}
}

// inflightBatches returns the batches in flight.
func (m *TaskManager) inflightBatches() []*Batch {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Keys(m.inflight))
}

// leasesAtRisk hands back the batches waiting for the poll loop (returnHanded), and
// cancels the contexts of the batches in flight, and their tasks', with ErrLeaseLost,
// handing back the tasks their handlers have not started: the owner's heartbeat is
// stale (Processor.guardLeases). It returns how many batches it cancelled that were not
// cancelled already.
func (m *TaskManager) leasesAtRisk() int {
	m.returnHanded(false)
	cancelled := 0
	for _, b := range m.inflightBatches() {
		if b.loseLeases() {
			cancelled++
		}
	}
	return cancelled
}

// poll is the poll loop proper; it returns when ctx is done.
func (m *TaskManager) poll(ctx context.Context) {
	topic := m.cfg.Topic
	backoff := newBackoff(100*time.Millisecond, retryCap)
	// probe says whether an empty poll is followed by a look for the next due task
	// (probeDue): always, except when the pause interval alone woke the manager and it
	// found nothing (nothing happened that a notification would have told of, and an
	// idle manager then costs one poll per pause interval, as it always did) while
	// notifications are on.
	probe := true
	// reconciled is when this loop last reconciled, or began.
	reconciled := time.Now()
	// head is when the last poll from the head of the topic began: it saw every task due
	// then, those before the position of later polls included.
	var head time.Time
	// The probes run beside the loop (probeDueAside); none outlives it.
	var probes sync.WaitGroup
	defer probes.Wait()
	defer m.returnHanded(true) // the loop's side of the handover ends with it
	for ctx.Err() == nil {
		if !m.active.Load() {
			m.returnHanded(false) // leased by a flush as the pause came
			m.hibernate(ctx)
			probe = true
			continue
		}
		if err := m.cfg.Limiter.Acquire(ctx); err != nil {
			return
		}
		if b := m.takeHanded(); b != nil {
			// Leased by a flush (completer.commitLeasing), or split off the loop's last
			// poll: it takes the slot just acquired. Its lease was reported (dispatched).
			m.handle(b)
			continue
		}
		if m.p.beatStale() {
			// Other processors may soon take back what this one leases, or have (the
			// owner name taken over, its leases theirs): no lease, and no reconciliation,
			// which would take their leases for lost ones of this process, until a
			// heartbeat succeeds (Processor.beatStale).
			m.cfg.Limiter.Release()
			m.p.awaitBeat(ctx)
			continue
		}
		// cleared first: a flush whose outcome is unknown may set it again meanwhile
		if m.unsure.Swap(false) || time.Since(reconciled) >= m.p.reconcileEvery {
			reconciled = time.Now()
			connected := m.reconnection()
			b, err := m.reconcile(ctx)
			if err != nil {
				m.unsure.Store(true)
				m.cfg.Limiter.Release()
				if ctx.Err() != nil {
					return
				}
				m.retry(ctx, "reconcile leases", m.pollOp, err, backoff, connected)
				continue
			}
			if b != nil {
				// b holds the limiter slot, as a polled batch does.
				m.handle(b)
				continue
			}
		}
		if m.atLimit() {
			// The tasks this manager holds fill the topic's concurrency limit: a poll
			// would lease none. The flush that frees capacity leases the next ones.
			m.cfg.Limiter.Release()
			m.park(ctx)
			continue
		}
		start := time.Now()
		if !m.beginLease() {
			// paused since the loop looked (it hibernates), or the heartbeat late
			m.cfg.Limiter.Release()
			continue
		}
		// The poll is not cancelled by the shutdown: a poll cancelled after the server
		// committed it would leave leases nobody knows of until expiry. Its tasks, if
		// any, are handed back by the shutdown like any unstarted batch.
		pollCtx, cancelPoll := context.WithTimeout(m.pollCtx, pollTimeout)
		connected := m.reconnection()
		from := m.floor.next()
		if from.IsZero() {
			head = start
		}
		m.leases.RLock()
		tasks, err := m.p.repo.PollFrom(pollCtx, m.p.pool, topic, m.cfg.Order, m.cfg.Condition, m.cfg.BatchSize, from)
		cancelPoll()
		m.endLease()
		elapsed := time.Since(start)
		var b *Batch
		var more []*Batch // the rest of the poll's tasks, for the handler's other workers
		if err == nil && len(tasks) > 0 {
			parts := m.split(tasks)
			b = m.prepare(parts[0])
			more = m.prepareHanded(parts[1:])
		}
		m.leases.RUnlock()
		if err != nil {
			// A poll whose reply was lost may have leased tasks all the same.
			if repository.Uncertain(err) {
				m.unsure.Store(true)
			}
			// what the position had taken in (a notification's, the head after a
			// reconnection) went with this poll: the next starts where it did (the
			// head, for a zero position)
			m.floor.notified(from)
			m.cfg.Limiter.Release()
			if ctx.Err() != nil {
				return
			}
			// An unknown topic (destroyed under us) is retried as any failure: it may
			// come back, and until then the processor is unhealthy and says so once.
			m.retry(ctx, "poll", m.pollOp, err, backoff, connected)
			continue
		}
		m.p.faults.ok(m.pollOp)
		backoff.reset()
		m.polled(from, elapsed, tasks)
		if len(tasks) == 0 {
			m.cfg.Limiter.Release()
			m.cfg.Listener.empty(topic, elapsed)
			if probe {
				m.probeDueAside(ctx, head, from, start, &probes)
			}
			if m.rated.Load() {
				m.probeRate(ctx)
			}
			// Without notifications, only the probe tells of delayed work.
			m.parked.Store(m.limited.Load())
			probe = !m.hibernate(ctx) || m.p.notifier == nil
			m.parked.Store(false)
			continue
		}
		probe = true
		m.dispatched(tasks, elapsed)
		// Each of the others takes a limiter slot of its own, as one leased by a flush,
		// on the loop's next turns (no wake-up: it goes round at once).
		for _, w := range more {
			m.queueHanded(w)
		}
		// Poll again right away, even after a short batch: with several managers SKIP
		// LOCKED or a condition makes batches short long before the topic is empty, and
		// only an empty poll says it is.
		m.handle(b)
	}
}

// dispatched books tasks leased by a poll (or a flush) that took elapsed, before they are
// handled: once a statement, however its tasks are split.
func (m *TaskManager) dispatched(tasks []repository.Task, elapsed time.Duration) {
	m.leased.Add(int64(len(tasks)))
	m.vacuumLeased.Add(int64(len(tasks)))
	m.cfg.Listener.dispatch(m.cfg.Topic, tasks, elapsed)
}

// split cuts tasks leased together into the batches the handler gets: one batch, but
// under a topic concurrency limit one for each of the handler's workers (at most one a
// task), their sizes differing by one at most. A Buffer gives each worker a whole
// batch, and a TaskFunc runs its batch task after task: one batch of the whole limit
// would hold every slot on one worker while the others wait (limit 3, four workers: one
// task at a time), and batches of the limit's share of each worker left workers idle
// while tasks waited behind others (limit 5, four workers: batches of 2, 2 and 1, a
// fourth worker idle). The statement that leased them stays one, whatever its size.
func (m *TaskManager) split(tasks []repository.Task) [][]repository.Task {
	c := int(m.concurrency.Load())
	// Not on a Limiter another manager shares: the batches after the first wait for a
	// slot of their own, which the other may take and keep while they stay ACTIVE,
	// holding the topic's capacity (as a flush's lease would: wantsLease).
	if m.workers <= 1 || c <= 0 || !m.limited.Load() || !m.soleLimiter() {
		return [][]repository.Task{tasks}
	}
	k := min(m.workers, len(tasks))
	parts := make([][]repository.Task, 0, k)
	for i := range k {
		parts = append(parts, tasks[i*len(tasks)/k:(i+1)*len(tasks)/k])
	}
	return parts
}

// prepareHanded prepares batches for the poll loop to take (hand): each then takes a
// limiter slot of its own.
func (m *TaskManager) prepareHanded(parts [][]repository.Task) []*Batch {
	var bs []*Batch
	for _, p := range parts {
		b := m.prepareWaiting(p)
		b.slotless.Store(true)
		bs = append(bs, b)
	}
	return bs
}

// atLimit reports whether the tasks this manager holds fill its limited topic's
// concurrency limit, so that only a commit of theirs can free a slot.
func (m *TaskManager) atLimit() bool {
	c := m.concurrency.Load()
	return m.limited.Load() && c > 0 && m.holding.Load() >= int64(c)
}

// park waits, while the manager is at its topic's concurrency limit, for the flush that
// frees capacity (which leases the next tasks for it, commitLeasing) or any other wake-up.
func (m *TaskManager) park(ctx context.Context) {
	m.parked.Store(true)
	defer m.parked.Store(false)
	if !m.atLimit() || m.hasHanded() {
		return // a flush freed capacity meanwhile
	}
	m.hibernate(ctx)
}

// polled records with the floor a poll from from that took took and leased tasks: the
// poll loop's or a flush's (completer.commitLeasing). One that found nothing on a limited
// topic starts the next poll where it started (floor.heldBack): the limit may have held
// back the work a notification sent it to.
func (m *TaskManager) polled(from repository.Position, took time.Duration, tasks []repository.Task) {
	m.floor.polled(from, took, tasks)
	if len(tasks) == 0 && m.limited.Load() {
		m.floor.heldBack(from)
	}
}

// wantsLease reports whether a flush committing now should lease the next tasks of the
// topic in its transaction (commitLeasing): the topic is limited and running, and the
// poll loop waits for capacity (parked, or about to: its tasks fill the limit) with no
// batch handed over yet.
//
// Only when the manager alone takes the slots of its Limiter: the tasks a flush leases
// wait for a slot the flush itself frees, and a manager that shares the limiter (a
// PriorityLimiter of several topics, a Limiter of the caller's) may take that slot and
// keep it, while the tasks stay ACTIVE with no handler, holding the topic's capacity
// in every process.
func (m *TaskManager) wantsLease() bool {
	return m.limited.Load() && m.active.Load() && (m.parked.Load() || m.atLimit()) && !m.hasHanded() && m.soleLimiter()
}

// soleLimiter reports whether this manager alone takes the slots of its Limiter.
func (m *TaskManager) soleLimiter() bool {
	s, ok := m.cfg.Limiter.(soleLimiter)
	return ok && s.sole()
}

func (m *TaskManager) hasHanded() bool {
	m.handMu.Lock()
	defer m.handMu.Unlock()
	return len(m.handed) > 0
}

// hand gives the poll loop a batch leased by a flush; once the loop has ended, or while
// the topic is paused, the batch's tasks are handed back (READY, no attempt used).
func (m *TaskManager) hand(b *Batch) {
	if m.queueHanded(b) {
		m.Resume()
	}
}

// queueHanded queues b for the poll loop without waking it (the loop's own batches, which
// it takes on its next turns), or hands it back as hand does; it reports whether it
// queued b.
func (m *TaskManager) queueHanded(b *Batch) bool {
	m.handMu.Lock()
	if !m.loopDone && m.active.Load() {
		m.handed = append(m.handed, b)
		m.handMu.Unlock()
		return true
	}
	m.handMu.Unlock()
	b.handBack()
	return false
}

// takeHanded returns the oldest batch a flush leased for the poll loop, if any, which
// then holds the limiter slot the loop acquired, and starts its HandlerTimeout.
func (m *TaskManager) takeHanded() *Batch {
	m.handMu.Lock()
	defer m.handMu.Unlock()
	for len(m.handed) > 0 {
		b := m.handed[0]
		m.handed = m.handed[1:]
		if !b.takeSlot() {
			// every task decided while it waited (handed back: Batch.loseLeases): its
			// report needs no slot, and nothing is left to handle
			continue
		}
		m.armTimeout(b)
		return b
	}
	return nil
}

// returnHanded hands back the batches waiting for the poll loop (it stops, or the topic
// was paused); with done, those a flush leases from now on are handed back too.
func (m *TaskManager) returnHanded(done bool) {
	m.handMu.Lock()
	m.loopDone = m.loopDone || done
	handed := m.handed
	m.handed = nil
	m.handMu.Unlock()
	for _, b := range handed {
		b.handBack()
	}
}

// reconcileSoon makes the poll loop reconcile on its next round, and wakes it for that.
func (m *TaskManager) reconcileSoon() {
	m.unsure.Store(true)
	m.Resume()
}

// reconcile looks for tasks that this processor's owner holds in the topic but that
// none of its managers knows of: the leases of a poll that the server committed but
// whose reply was lost (a connection cut after the commit, a failover), and the tasks
// of a completion the server acknowledged and then lost (a crash with
// synchronous_commit off, an asynchronous standby promoted: Processor.suspectLostCommits).
// Nobody else would run them while the owner heart-beats, so this manager runs them, as
// a batch of their own (nil when there are none). It costs one statement, after such a
// poll or an outage, and once every defaultReconcileEvery besides: a lease can become
// visible after the reconciliation that followed its fault (seen on Citus after a
// worker crash: the worker's statement may take effect after the error the client
// got), and whatever else escapes the checks after a fault is found so.
func (m *TaskManager) reconcile(ctx context.Context) (*Batch, error) {
	m.leases.Lock()
	defer m.leases.Unlock()
	start := time.Now()
	stranded, err := m.stranded(m.pollCtx)
	if err != nil || len(stranded) == 0 {
		return nil, err
	}
	m.p.logger.Warn("running leased tasks no manager knows of (a poll's reply lost, or commits lost in an outage)", slog.String("topic", m.cfg.Topic),
		slog.Int("tasks", len(stranded)))
	// the read that found them stands for the poll (a poll duration of 0 was recorded)
	m.cfg.Listener.dispatch(m.cfg.Topic, stranded, time.Since(start))
	return m.prepare(stranded), nil
}

// handBackStranded is reconcile at shutdown, once the poll loop has ended: the tasks a
// poll whose outcome is unknown leased (its reply lost after the shutdown began, or the
// poll cut off at the deadline) go back READY with their attempt unused, as the tasks
// of any unstarted batch do. Left, they would stay ACTIVE under this owner, which then
// keeps its row, until expiry, which counts the attempt (a task on its last one would
// end EXPIRED without having run).
func (m *TaskManager) handBackStranded() {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownReconcileTimeout)
	defer cancel()
	m.leases.Lock()
	stranded, err := m.stranded(ctx)
	m.leases.Unlock()
	if err != nil {
		m.p.logger.Warn("leases of a poll whose outcome is unknown not looked for at shutdown: expiry returns them",
			slog.String("topic", m.cfg.Topic), slog.Any("error", err))
		return
	}
	if len(stranded) == 0 {
		return
	}
	m.p.logger.Info("handing back tasks a poll leased as the shutdown began (its reply was lost)", slog.String("topic", m.cfg.Topic),
		slog.Int("tasks", len(stranded)))
	b := m.prepareWaiting(stranded)
	b.slotless.Store(true) // taken after the loop ended: it holds no limiter slot
	b.handBack()
}

// shutdownReconcileTimeout bounds handBackStranded's statement.
const shutdownReconcileTimeout = 5 * time.Second

// stranded returns the tasks this processor's owner holds in the topic that none of
// its managers knows of, read under base; m.leases is held.
func (m *TaskManager) stranded(base context.Context) ([]repository.Task, error) {
	// What the managers still run or commit, before the statement: a batch committed
	// meanwhile is then known (and no longer ACTIVE), never taken for a stranded lease.
	// A task whose decision is committed is not known even while its batch is (its
	// batch mates are still being decided): the server may have lost that commit.
	// By sequence, with the attempt held: a flush whose reply was lost may have handed a
	// task back and leased it again, while the batch of its earlier lease is still
	// tracked; that lease waits until the batch has settled the task (which then
	// reconciles again: Batch.deferReconcile), so that one task never runs twice at once.
	type holder struct {
		attempt int32
		batch   *Batch
	}
	held := map[int64]holder{}
	for _, other := range m.p.managersOf(m.cfg.Topic) {
		other.mu.Lock()
		for b := range other.inflight {
			b.eachUnsettled(func(l repository.Completion) { held[l.Sequence] = holder{l.Attempt, b} })
		}
		other.mu.Unlock()
	}
	qctx, cancel := context.WithTimeout(base, pollTimeout)
	defer cancel()
	leased, err := m.p.repo.Leased(qctx, m.p.pool, m.cfg.Topic)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(leased, func(t repository.Task) bool {
		h, ok := held[t.Sequence]
		if ok && h.attempt != t.Attempt && !h.batch.deferReconcile(t.Sequence) {
			m.reconcileSoon() // settled since it was read: the next round
		}
		return ok
	}), nil
}

// retryCap is the longest wait between two tries of a failed start or poll: a try
// against a database that is down costs a connection attempt, and after a failover the
// first try that reaches the new primary should come soon.
const retryCap = 2 * time.Second

// reconnection returns a channel closed at the notifier's next (re)connection, taken
// before a database operation for retry: a reconnection during the operation (a poll
// hung on a dead connection while the notifier reached the new primary) then ends the
// wait after its failure at once. Nil (never ready) without a notifier.
func (m *TaskManager) reconnection() <-chan struct{} {
	if m.p.notifier == nil {
		return nil
	}
	return m.p.notifier.Connected()
}

// retry reports a database operation that failed and will be retried (what names it to
// the Listener, op in Processor.Health), then waits out the next delay of backoff, or
// less when the notifier reconnects (the database answers again) or has reconnected
// since connected was taken (reconnection, before the operation). It reports whether
// the reconnection ended the wait. A wake-up of the manager (a notification of work, a
// due time, a commit) does not end it: it says nothing of the database, and while
// other processes pushed, a poll failing at once (a missing grant, a lock timeout) was
// sent again at each of their notifications, the backoff never growing. The wake-up is
// left for the poll loop.
func (m *TaskManager) retry(ctx context.Context, what, op string, err error, backoff *backoff, connected <-chan struct{}) (reconnected bool) {
	delay := backoff.next()
	m.cfg.Listener.error(m.cfg.Topic, fmt.Errorf("%s (%w in %v): %w", what, ErrWillRetry, delay, err))
	m.p.faults.fail(ctx, op, err)
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-connected:
		return true
	}
	return false
}

// defaultReconcileEvery is how often a manager reconciles its leases when no fault
// asked it to (see reconcile).
const defaultReconcileEvery = time.Minute

// pollTimeout bounds one poll statement.
const pollTimeout = 30 * time.Second

// hibernate waits for a wake-up, the pause interval or ctx; it reports whether the
// pause interval ended it.
func (m *TaskManager) hibernate(ctx context.Context) (paused bool) {
	timer := time.NewTimer(m.cfg.PauseInterval)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-m.wake:
	case <-timer.C:
		return true
	}
	return false
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// prepare makes a batch of leased tasks and tracks it, for handle.
func (m *TaskManager) prepare(tasks []repository.Task) *Batch {
	b := m.prepareWaiting(tasks)
	m.armTimeout(b)
	return b
}

// prepareWaiting is prepare for a batch that waits before it is handled (leased by a
// flush, TaskManager.hand): its HandlerTimeout starts when it is taken (armTimeout).
func (m *TaskManager) prepareWaiting(tasks []repository.Task) *Batch {
	// Each batch has its own context, cancelled once the batch is committed (after a
	// timeout, say), so a handler cannot go on working on tasks that were failed.
	batchCtx, cancel := context.WithCancelCause(m.handlerCtx)
	// The handler's context (b.ctx, which newBatch derives) carries the manager's
	// stopping channel, as each task's does: Stopping works on either, and in the steps
	// of a Composite.
	b := newBatch(batchCtx, m.cfg.Topic, tasks, m.stopping, m.reported)
	b.cancel = cancel
	b.onPanic = func(err error, r any, stack []byte) { m.handlerPanicked(b, err, r, stack) }
	b.onExit = func(err error) { m.handlerExited(b, err) }
	m.track(b)
	return b
}

// armTimeout starts b's HandlerTimeout, if any. A Buffer's worker starts it again when it
// takes the batch (Batch.handOver): the time it waited in the queue, which the timeout
// bounds too (those tasks go back READY unstarted), is not the handler's.
func (m *TaskManager) armTimeout(b *Batch) {
	if m.cfg.HandlerTimeout > 0 {
		timeout := m.cfg.HandlerTimeout
		b.mu.Lock()
		b.timeoutAfter = timeout
		b.timeout = time.AfterFunc(timeout, func() {
			m.relieve(b, fmt.Errorf("handler timed out: it did not decide this task within %v", timeout))
		})
		b.mu.Unlock()
	}
}

// handle hands a prepared batch to the handler, containing panics.
func (m *TaskManager) handle(b *Batch) {
	// A poll (or a flush) that returned after the shutdown began: its tasks are not
	// started, so they go back READY with the attempt unused, whatever the handler (a
	// TaskFunc or a Buffer would hand them back itself; a BatchFunc would run them all).
	select {
	case <-b.Stopping():
		b.handBack()
		return
	default:
	}
	if m.p.beatStale() {
		// Leased by a poll answered after the heartbeat went stale: other processors
		// may take the tasks back before they are done (Processor.guardLeases).
		b.handBack()
		return
	}
	// The handler runs on a goroutine of its own, which the loop waits for: a handler
	// that ends its goroutine (runtime.Goexit, as t.FailNow does) would otherwise end
	// the loop's, and with it the topic's processing, silently.
	done := make(chan struct{})
	go func() {
		defer close(done)
		callHandler(b.ctx, m.cfg.Handler, b)
	}()
	<-done
}

// callHandler hands b to h on the calling goroutine, containing a panic (the tasks
// left undecided fail) and an end of the goroutine (Batch.exited), for the manager and
// a Buffer's workers alike.
func callHandler(ctx context.Context, h Handler, b *Batch) {
	returned := false
	defer func() {
		if r := recover(); r != nil {
			b.panicked(r)
		} else if !returned {
			b.exited()
		}
	}()
	handleBatch(ctx, h, b)
	returned = true
}

// handlerPanicked reports a panic of b's handler, caught here (handle) or by a Buffer's
// worker (Batch.panicked): the log has the stack of the goroutine that panicked, which
// the tasks' error text (the same for every task of the batch) leaves out.
func (m *TaskManager) handlerPanicked(b *Batch, err error, r any, stack []byte) {
	m.cfg.Listener.error(m.cfg.Topic, err)
	m.p.logger.Error("handler panicked", slog.String("topic", m.cfg.Topic), slog.Int("tasks", len(b.leased)),
		slog.Any("panic", r), slog.String("stack", string(stack)))
}

// handlerExited relieves b of a handler that ended its goroutine (Batch.exited), with
// an ERROR in the log as for a panic: the handler ran on a goroutine of its own (the
// manager's or a Buffer's worker), which the manager replaces.
func (m *TaskManager) handlerExited(b *Batch, err error) {
	m.p.logger.Error("handler ended its goroutine", slog.String("topic", m.cfg.Topic), slog.Int("tasks", len(b.leased)),
		slog.String("stack", string(debug.Stack())))
	m.relieve(b, err)
}

// reported receives decisions of a batch's tasks from Batch (each task's once), for
// the next flush; report.go says what it logs.
func (m *TaskManager) reported(b *Batch, completions []repository.Completion, followups []FollowUp, kind reportKind, err error) {
	// The listener hears of the decisions before they are queued, so before their
	// commit reaches OnComplete (a snooze and a retry are both READY once committed: the
	// metrics tell them apart by the report); a listener that panics must not lose them.
	defer m.completer.add(b, completions, followups)
	m.noteReport(b, completions, kind, err)
}

// finished is called once every decision of a batch is committed (or given up on):
// the batch leaves the books and frees its limiter slot.
func (m *TaskManager) finished(b *Batch) {
	b.release()
	m.untrack(b)
	if !b.slotless.Load() {
		m.cfg.Limiter.Release()
	}
	if m.cfg.Condition != repository.None {
		// Tasks this batch excluded by the condition may be pollable now.
		m.Resume()
	}
}

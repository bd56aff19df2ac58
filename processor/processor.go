package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/repository"
)

// Defaults of Config.
const (
	HeartbeatIntervalDefault = time.Second
	// HeartbeatIntervalMin is the shortest HeartbeatInterval a Config takes.
	HeartbeatIntervalMin = 10 * time.Millisecond
	// ExpiryTimeoutDefault is 5 heartbeat intervals: an owner silent that long is dead.
	ExpiryTimeoutDefault = 5 * HeartbeatIntervalDefault
	// VacuumEveryDefault is Config.VacuumEvery's default.
	VacuumEveryDefault = 500_000
	// ErrorLogIntervalDefault is Config.ErrorLogInterval's default.
	ErrorLogIntervalDefault = time.Minute
)

// Config configures a Processor: the process-wide parts shared by all its managers.
type Config struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// Repository is used for every operation; nil creates one with a random owner.
	Repository *repository.Repository
	// Logger receives the processor's logs; nil discards them. A happy run logs nothing
	// at INFO; failed and retried tasks, dead letters, what a shutdown hands back, handler
	// misbehaviour and database errors (once per cause: ErrorLogInterval) are logged with
	// topic, sequence, identifier and attempt (the package documentation lists them).
	Logger *slog.Logger
	// HeartbeatInterval is how often the owner heart-beats and, on the same tick, expires
	// dead owners' leases, purges dead owners, notices missed cancels and re-reads each
	// topic's activation and limits. Default HeartbeatIntervalDefault; at least
	// HeartbeatIntervalMin.
	HeartbeatInterval time.Duration
	// ExpiryTimeout is how long an owner may be silent before its leases are taken back;
	// it must exceed HeartbeatInterval. Default: 5 heartbeat intervals. The processor
	// records it with its owner row (Repository.SetExpiryTimeout), and waits for the
	// longer of it and another owner's own before it takes that one's leases back, so
	// processes with different heartbeats share a database safely. A Repository that
	// declares another one already (another processor's) is refused. A heartbeat that
	// has not returned within it fails (Health names it) and the next tick tries again.
	// While the last heartbeat that succeeded is older than ExpiryTimeout less a
	// HeartbeatInterval (or halfway between them, when they are closer), the managers
	// lease nothing: other processors would soon take the tasks back. Once it is that old,
	// the contexts of the tasks in flight are cancelled with ErrLeaseLost, and those not
	// started handed back, so that the handlers stop before the tasks run again
	// elsewhere.
	ExpiryTimeout time.Duration
	// DisableNotifications turns off LISTEN: managers then find work only by polling
	// every PauseInterval.
	DisableNotifications bool
	// RetentionInterval is how often the processor deletes finished tasks older than
	// their topic's retention (a topic without retention keeps everything). Default 1
	// minute; negative disables it. A pass deletes for about a second (half a heartbeat
	// interval when that is longer) and, when tasks past their retention remain (a
	// backlog of millions), goes on at the next heartbeat, so that the expiry of dead
	// owners' leases on the same goroutine never waits long for it.
	RetentionInterval time.Duration
	// OnExpire, when set, is called after every expiry that took leases back (for
	// metrics); it runs on the heartbeat goroutine and must be quick. The OnExpire of the
	// listeners given to Observe is called too.
	OnExpire func([]repository.Expiry)
	// VacuumEvery is how many tasks this processor's managers of a topic lease, in all,
	// between two VACUUMs of the table holding the topic; with a larger table, a quarter
	// of its rows (as of the last statistics refresh). Each poll walks over the index
	// entries of the tasks leased before it until a VACUUM removes them, so a sustained
	// load slows down without one; the VACUUM runs in the background, one at a time, and
	// only the table's owner may run it (others leave it to autovacuum, with a warning).
	// Default 500 000; negative leaves vacuuming to autovacuum.
	VacuumEvery int64
	// ErrorLogInterval is how often a database error that goes on is logged again. Each
	// cause of failing operations (a SQLSTATE, or a kind of connection failure) is logged
	// when it starts, then at most once per interval while operations fail with it, with
	// those operations, how long it has lasted and how often, and once more when the
	// last of them succeeds again. Default 1 minute.
	ErrorLogInterval time.Duration
	// DisableSchedules stops this processor firing schedules. By default every processor
	// fires the due schedules of the database (all topics', not only its own) every
	// HeartbeatInterval, so a fire is late by at most one interval while any processor
	// runs; any number of them may, each fire time is pushed once
	// (Repository.FireSchedules).
	DisableSchedules bool
	// OnFire, when set, is called with what each round of firing schedules pushed (for
	// metrics); it runs on the schedules' goroutine and must be quick. The OnFire of the
	// listeners given to Observe is called too.
	OnFire func([]repository.Fire)
}

func (c *Config) validate() error {
	if c.Pool == nil {
		return errors.New("processor: config: Pool is required")
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = HeartbeatIntervalDefault
	}
	if c.HeartbeatInterval < HeartbeatIntervalMin {
		return fmt.Errorf("processor: config: HeartbeatInterval %v is too short: at least %v (each heartbeat is a round trip to the database and an expiry pass)",
			c.HeartbeatInterval, HeartbeatIntervalMin)
	}
	if c.ExpiryTimeout == 0 {
		c.ExpiryTimeout = 5 * c.HeartbeatInterval
	}
	if c.ExpiryTimeout <= c.HeartbeatInterval {
		return fmt.Errorf("processor: config: ExpiryTimeout %v must exceed HeartbeatInterval %v", c.ExpiryTimeout, c.HeartbeatInterval)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.RetentionInterval == 0 {
		c.RetentionInterval = time.Minute
	}
	if c.VacuumEvery == 0 {
		c.VacuumEvery = VacuumEveryDefault
	}
	if c.ErrorLogInterval < 0 {
		return fmt.Errorf("processor: config: ErrorLogInterval %v is negative", c.ErrorLogInterval)
	}
	if c.ErrorLogInterval == 0 {
		c.ErrorLogInterval = ErrorLogIntervalDefault
	}
	if c.Repository == nil {
		repo, err := repository.New(repository.Config{})
		if err != nil {
			return fmt.Errorf("processor: config: %w", err)
		}
		c.Repository = repo
	}
	// recorded with the owner row: processors whose timeouts differ wait for this one's
	// before they take its leases back. One owner, one timeout: a Repository that
	// declares another (another processor's) is refused and left as it is, or the
	// running processor's row would say the new one's.
	if declared := c.Repository.ExpiryTimeout(); declared != 0 && declared != repository.DeclaredExpiryTimeout(c.ExpiryTimeout) {
		return fmt.Errorf("processor: config: ExpiryTimeout %v differs from the %v its Repository (owner %q) declares already: give each processor a Repository of its own",
			c.ExpiryTimeout, declared, c.Repository.Owner())
	}
	// a fire time due within two heartbeats of a round is on time, not missed
	if err := c.Repository.SetScheduleGrace(2 * c.HeartbeatInterval); err != nil {
		return fmt.Errorf("processor: config: %w", err)
	}
	return c.Repository.SetExpiryTimeout(c.ExpiryTimeout)
}

// Processor runs the task managers of one process: it registers the owner, heart-beats,
// expires the leases of dead owners so their tasks come back, routes notifications from
// ONE listening connection to its managers, and shuts them down gracefully.
type Processor struct {
	cfg Config
	// failed is closed when Run has returned an error, runErr (written before).
	failed chan struct{}
	runErr error
	// ownRow is the owner row as this process made it its own (registered it, or
	// claimed it at its start): its start time, host and pid. A heartbeat that finds them
	// changed finds the name taken over by another process (takenOver).
	ownRow atomic.Pointer[repository.Owner]
	// registering says a registration again (registerAgain) failed without telling
	// whether it wrote the row (its reply lost): the row of the name found next, of this
	// process's host and pid and a later start, is its own, not a take-over.
	registering atomic.Bool
	// takeOver stops Run with the error of a take-over, once Run is running; taken is
	// set once it did (Run then leaves the owner row, the other process's, alone).
	takeOver func(error)
	taken    atomic.Bool
	// reconcileEvery is how often each manager reconciles its leases besides after a
	// fault (TaskManager.reconcile): defaultReconcileEvery, or a test's.
	reconcileEvery time.Duration
	// heldSnapshot is how long a transaction must have been open for its snapshot to
	// hold back the VACUUM (see vacuum): defaultHeldSnapshot, shorter in tests.
	heldSnapshot time.Duration
	// commitTimeout bounds one attempt to commit decisions: defaultCommitTimeout, or a
	// test's.
	commitTimeout time.Duration
	pool          *pgxpool.Pool
	repo          *repository.Repository
	logger        *slog.Logger
	notifier      *Notifier
	faults        *faults
	// outageWoke is when suspectLostCommits last woke the managers, outageTimedOut
	// when a timeout last made them reconcile (Unix nanoseconds).
	outageWoke, outageTimedOut atomic.Int64

	mu        sync.Mutex
	managers  map[string][]*TaskManager // by topic
	running   bool
	observers []Listener // Observe

	// subs are the subscriptions (Subscribe); subsMu serialises their changes.
	subsMu sync.Mutex
	subs   atomic.Pointer[subscribers]
	// onExpire is Config.OnExpire and the observers', set by Run.
	onExpire func([]repository.Expiry)
	// onFire is Config.OnFire and the observers', set by Run.
	onFire func([]repository.Fire)

	// vacuuming is set while a VACUUM runs on vacuums (one at a time); draining once
	// Run's context is done, when no new one starts.
	vacuuming atomic.Bool
	draining  atomic.Bool
	vacuums   sync.WaitGroup

	// quietUntil is when the processor stops being quiet (see quiet), as nanoseconds
	// since epoch (a monotonic reading taken by New); heldFrom is when the long-held
	// transaction being followed began (zero: none), which only the liveness goroutine
	// touches.
	epoch      time.Time
	quietUntil atomic.Int64
	heldFrom   time.Time

	// lastBeat is when the last heartbeat that succeeded began (nanoseconds since epoch);
	// beaten is closed, and replaced, at each such heartbeat (beatMu); beatNow asks the
	// heartbeat goroutine for one at once (beatStale, awaitBeat).
	lastBeat atomic.Int64
	beatMu   sync.Mutex
	beaten   chan struct{}
	beatNow  chan struct{}

	// retentionAfter is the topic the retention's next batch starts after (retain; only
	// the liveness goroutine touches it).
	retentionAfter string
}

// quiet reports whether the processor holds back the work that reads a topic's table
// from its head, or all of it, while a transaction open for heldSnapshot or more keeps
// the row versions that left READY or ACTIVE since it began, and after it ends for as
// long as it was open (at most maxQuiet): the looks for work before the poll position
// (watchFloor) and for orphaned leases, the processor's VACUUM and ANALYZE. During the
// hold such reads grow with every task processed and free nothing; right after it, the
// first of them would prune millions of pages at once, and the write-ahead log and the
// checkpoints they cause stall every commit for seconds. Autovacuum, which paces its
// writes, cleans the table meanwhile; polls go on from their positions (floor).
func (p *Processor) quiet() bool { return int64(time.Since(p.epoch)) < p.quietUntil.Load() }

// quietFor keeps the processor quiet for d from now.
func (p *Processor) quietFor(d time.Duration) { p.quietUntil.Store(int64(time.Since(p.epoch) + d)) }

// maxQuiet bounds how long the processor stays quiet after a long-held transaction ends.
const maxQuiet = 30 * time.Minute

// watchHeld follows the oldest long-held transaction (Repository.OldestTransaction) and
// keeps the processor quiet while one is open and after it (see quiet).
func (p *Processor) watchHeld(ctx context.Context) {
	var ok bool
	age, err := maintain(ctx, p, "read the oldest transaction", func(c context.Context) (time.Duration, error) {
		age, held, err := p.repo.OldestTransaction(c, p.pool, p.heldSnapshot)
		ok = held
		return age, err
	})
	if err != nil {
		return
	}
	now := time.Now()
	if ok {
		if from := now.Add(-age); p.heldFrom.IsZero() || from.Before(p.heldFrom) {
			if p.heldFrom.IsZero() {
				p.logger.Info("a transaction open for a long time holds back VACUUM: reads from the head of topics, VACUUM and ANALYZE wait until after it",
					slog.Duration("open", age.Round(time.Second)))
			}
			p.heldFrom = from
		}
		// renewed at every tick (a tick may take long on a bloated table); lapses if the
		// ticks stop reaching the database
		p.quietFor(max(3*p.cfg.HeartbeatInterval, time.Minute))
		return
	}
	if !p.heldFrom.IsZero() {
		quiet := min(now.Sub(p.heldFrom), maxQuiet)
		p.quietFor(quiet)
		p.heldFrom = time.Time{}
		p.logger.Info("the long-held transaction ended: reads from the head of topics, VACUUM and ANALYZE wait while autovacuum cleans",
			slog.Duration("for", quiet.Round(time.Second)))
	}
}

// New validates cfg and returns a Processor; add managers with Manage, then Run.
func New(cfg Config) (*Processor, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Processor{
		cfg:            cfg,
		heldSnapshot:   defaultHeldSnapshot,
		reconcileEvery: defaultReconcileEvery,
		commitTimeout:  defaultCommitTimeout,
		epoch:          time.Now(),
		pool:           cfg.Pool,
		repo:           cfg.Repository,
		logger:         cfg.Logger,
		faults:         newFaults(cfg.Logger, cfg.ErrorLogInterval, max(30*time.Second, 3*cfg.HeartbeatInterval)),
		managers:       make(map[string][]*TaskManager),
		beaten:         make(chan struct{}),
		failed:         make(chan struct{}),
		beatNow:        make(chan struct{}, 1),
	}
	p.faults.outage = func(cause string, begins bool) {
		if cause == "timeout" {
			// a server gone silent, or only a slow one: no wake-up, and at most once
			// per poll timeout, since an overloaded server times out again and again
			p.suspectLostCommitsEvery(pollTimeout)
			return
		}
		p.suspectLostCommits(begins)
	}
	if !cfg.DisableNotifications {
		p.notifier = newPoolNotifier(cfg.Pool.Config(), cfg.Logger)
		p.notifier.dropped = func(err error, connected bool) {
			if outageCause(causeOf(err)) {
				p.suspectLostCommits(connected) // woken once a drop, not at each retry
			}
		}
		// A limit changed or a pause lifted while nobody listened is read now, not at
		// the next heartbeat: the notifier's own wake-up after a (re)connect is an
		// EventWork, which a manager parked at its old limit would sleep through.
		p.notifier.listening = func(ctx context.Context) {
			if topics := p.topics(); len(topics) > 0 {
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				p.refreshTopics(ctx, topics)
			}
		}
	}
	return p, nil
}

// suspectLostCommits makes every manager reconcile its leases before its next poll
// (TaskManager.reconcile): a database operation failed as it does when the server
// crashes, restarts or fails over, and a server that lost commits it had acknowledged
// (synchronous_commit off, an asynchronous standby promoted, a Citus worker that
// crashed) may hold a completion this processor saw committed as never made. Its tasks
// are then ACTIVE again under this owner, which heart-beats, so nobody else would take
// them back: the reconciliation finds them, as it finds a poll whose reply was lost,
// and runs them again. When an operation begins to fail so (wake), the managers are
// woken too, at most once a second (a hibernating one would reconcile only at its next
// wake-up): they retry until the database answers, then reconcile. It costs each
// manager about one statement per outage.
func (p *Processor) suspectLostCommits(wake bool) {
	wake = wake && throttle(&p.outageWoke, time.Second)
	for _, m := range p.allManagers() {
		m.unsure.Store(true)
		if wake {
			m.Resume()
		}
	}
}

// suspectLostCommitsEvery is suspectLostCommits without the wake-up, at most once per
// interval.
func (p *Processor) suspectLostCommitsEvery(interval time.Duration) {
	if throttle(&p.outageTimedOut, interval) {
		p.suspectLostCommits(false)
	}
}

// throttle reports whether interval has passed since the last time it returned true for
// last (Unix nanoseconds), and if so records now.
func throttle(last *atomic.Int64, interval time.Duration) bool {
	now := time.Now().UnixNano()
	l := last.Load()
	return now-l >= int64(interval) && last.CompareAndSwap(l, now)
}

// Repository returns the repository the processor uses (its owner identity).
func (p *Processor) Repository() *repository.Repository { return p.repo }

// Pool returns the database pool the processor uses (Config.Pool).
func (p *Processor) Pool() *pgxpool.Pool { return p.pool }

// Observe adds a listener to every manager of the processor, those added by Manage
// before and after the call, and to its expiries (Listener.OnExpire). Package metrics
// observes a processor this way. It must be called before Run.
func (p *Processor) Observe(l Listener) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		return errors.New("processor: Observe called after Run")
	}
	p.observers = append(p.observers, l)
	return nil
}

// Health returns nil while the processor's database operations succeed, and an error
// wrapping ErrUnhealthy, naming each failing operation with its cause (SQLSTATE or kind
// of connection failure) and how long it has failed, while any of them fails: polls,
// commits, the heartbeat and the periodic maintenance. An operation is healthy again as
// soon as it succeeds once, or when it has not failed for 30 s (or 3 heartbeat
// intervals, if longer): some run rarely (a VACUUM every few hundred thousand tasks).
// Serve it as a health check (cmd/processor's /healthz does).
func (p *Processor) Health() error { return p.faults.health() }

// Notifier returns the listening connection's notifier, nil when disabled.
func (p *Processor) Notifier() *Notifier { return p.notifier }

// Manage adds the manager of a topic. It must be called before Run, once per topic: a
// second manager of a topic is refused (ErrTopicManaged); for more concurrency give the
// one manager a larger BatchSize, a Buffer with more workers, or a Limiter.
func (p *Processor) Manage(cfg ManagerConfig) (*TaskManager, error) {
	m, err := newManager(p, cfg)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		return nil, errors.New("processor: Manage called after Run")
	}
	if len(p.managers[cfg.Topic]) > 0 {
		return nil, fmt.Errorf("processor: manage topic %q: %w", cfg.Topic, ErrTopicManaged)
	}
	if others := p.managers[cfg.Topic]; len(others) > 0 {
		m.leases = others[0].leases
	} else {
		m.leases = new(sync.RWMutex)
	}
	p.managers[cfg.Topic] = append(p.managers[cfg.Topic], m)
	return m, nil
}

// ErrTopicManaged is returned by Manage for a topic the processor already manages.
var ErrTopicManaged = errors.New("topic already managed by this processor")

// Topics returns the topics the processor manages, by name.
func (p *Processor) Topics() []string { return p.topics() }

// Resume wakes every local manager of topic (as a NOTIFY would).
func (p *Processor) Resume(topic string) {
	for _, m := range p.managersOf(topic) {
		m.Resume()
	}
}

func (p *Processor) managersOf(topic string) []*TaskManager {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.managers[topic]
}

func (p *Processor) allManagers() []*TaskManager {
	p.mu.Lock()
	defer p.mu.Unlock()
	var all []*TaskManager
	for _, ms := range p.managers {
		all = append(all, ms...)
	}
	return all
}

// Run registers the owner and runs every manager until ctx is done, then shuts them down
// gracefully (each within its ShutdownTimeout: at its end, the tasks still running are
// failed and their handlers' contexts cancelled; a handler that ignores its context can
// keep its manager up to 5 s more, and the last commits up to 10 s more; right after
// database faults, handing back the tasks of a poll whose reply was lost up to 5 s more,
// and deleting the owner's row 5 s: docs/processor.md) and returns.
// It returns an error if the
// owner cannot be registered or a manager stopped fatally (an unknown topic without
// CreateTopic, say), which shuts the other managers down as a done ctx does; a ctx done
// before or while they start is a clean stop, not an error.
func (p *Processor) Run(ctx context.Context) error {
	p.mu.Lock()
	if p.running {
		p.mu.Unlock()
		return errors.New("processor: Run called twice")
	}
	p.running = true
	p.mu.Unlock()
	err := p.run(ctx)
	if err != nil {
		// Wait returns it: the tasks waited for may never finish now
		p.runErr = err
		close(p.failed)
	}
	return err
}

// run is Run, called once.
func (p *Processor) run(ctx context.Context) error {
	p.mu.Lock()
	// The observers join each manager's listener now that no more come.
	observers := p.observers
	for _, ms := range p.managers {
		for _, m := range ms {
			if len(observers) > 0 {
				m.cfg.Listener = Listeners(append([]Listener{m.cfg.Listener}, observers...)...)
			}
		}
	}
	p.onExpire = p.cfg.OnExpire
	for _, o := range observers {
		if o.OnExpire != nil {
			p.onExpire = chainExpire(p.onExpire, o.OnExpire)
		}
	}
	p.onFire = p.cfg.OnFire
	for _, o := range observers {
		if o.OnFire != nil {
			p.onFire = chainFire(p.onFire, o.OnFire)
		}
	}
	p.mu.Unlock()

	registering := time.Now()
	if err := p.registerAtStart(ctx); err != nil {
		if ctx.Err() != nil {
			// Told to stop before it started. The owner row may have been written all
			// the same (the cancellation can reach pgx after the server committed):
			// delete it if so, unless it is another process's, whose silence this
			// one was waiting for. Best effort: a row left behind is purged as dead
			// later.
			if !errors.As(err, new(notOurs)) {
				_, _ = p.deleteOwnerRow(ctx)
			}
			return nil
		}
		return err
	}
	p.beatSucceeded(registering) // the registration beat the row
	if row, _, err := p.repo.RegisteredOwner(ctx, p.pool); err == nil {
		p.ownRow.Store(&row)
	}
	// A manager that stops fatally stops the others, gracefully, and Run returns its
	// error: the process cannot do what it was told to.
	ctx, stopManagers := context.WithCancel(ctx)
	defer stopManagers()
	var (
		errs = make([]error, 0)
		emu  sync.Mutex
	)
	// so does a take-over of the owner name (beat)
	p.takeOver = func(err error) {
		if p.taken.Swap(true) {
			return
		}
		p.logger.Error("owner name taken over by another process: stopping", slog.String("owner", p.repo.Owner()), slog.Any("error", err))
		emu.Lock()
		errs = append(errs, err)
		emu.Unlock()
		stopManagers()
	}
	// The notifier and the liveness loop outlive the managers' polling: they keep
	// heart-beating while handlers finish during a graceful shutdown.
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	var bg sync.WaitGroup
	if p.notifier != nil {
		for _, m := range p.allManagers() {
			unsubscribe := p.notifier.Subscribe(m.cfg.Topic, m.notify)
			defer unsubscribe()
		}
		bg.Go(func() { p.notifier.Run(bgCtx) })
	}
	bg.Go(func() { p.heartbeats(bgCtx) })
	bg.Go(func() { p.liveness(bgCtx) })
	bg.Go(func() { p.guardLeases(bgCtx) })
	if !p.cfg.DisableSchedules {
		// Schedules stop with the managers: a stopping process pushes no more.
		bg.Go(func() { p.schedules(ctx) })
	}
	stopVacuums := context.AfterFunc(ctx, func() { p.draining.Store(true) })
	defer stopVacuums()

	var wg sync.WaitGroup
	for _, m := range p.allManagers() {
		wg.Go(func() {
			if err := m.run(ctx); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
				stopManagers()
			}
		})
	}
	wg.Wait()
	// Without managers the process still heart-beats and expires dead owners' leases
	// until it is told to stop (or a manager stopped fatally).
	<-ctx.Done()
	stopBackground()
	bg.Wait()
	p.vacuums.Wait()
	if !p.taken.Load() { // the row is the other process's now
		p.deregister(ctx)
	}
	emu.Lock()
	defer emu.Unlock()
	return errors.Join(errs...)
}

// chainExpire calls a (if any), then b.
func chainExpire(a, b func([]repository.Expiry)) func([]repository.Expiry) {
	if a == nil {
		return b
	}
	return func(e []repository.Expiry) {
		a(e)
		b(e)
	}
}

// chainFire calls a (if any), then b.
func chainFire(a, b func([]repository.Fire)) func([]repository.Fire) {
	if a == nil {
		return b
	}
	return func(f []repository.Fire) {
		a(f)
		b(f)
	}
}

// deregisterTimeout bounds the deletion of the owner row at the end of Run.
const deregisterTimeout = 5 * time.Second

// deregister deletes the owner row once the managers have stopped, unless a task is still
// leased (a handler that outlived the shutdown): then the row stays, goes silent, and
// the task expires like any dead owner's. Other processors need not wait for a cleanly
// stopped one to look dead, and task_owner lists the running processes only.
func (p *Processor) deregister(ctx context.Context) {
	gone, err := p.deleteOwnerRow(ctx)
	if err != nil {
		p.logger.Warn("deregister owner", slog.String("owner", p.repo.Owner()), slog.Any("error", err))
		return
	}
	if !gone {
		p.logger.Info("owner row kept: tasks are still leased", slog.String("owner", p.repo.Owner()))
	}
}

// deleteOwnerRow runs Repository.DeregisterOwner within deregisterTimeout, also when
// ctx is already done (it runs at the end of Run).
func (p *Processor) deleteOwnerRow(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deregisterTimeout)
	defer cancel()
	return p.repo.DeregisterOwner(ctx, p.pool)
}

// registerAtStart registers the owner when Run starts, once the pool's isolation is
// known to suit the processor (checkIsolation: nothing is written otherwise). An owner
// row that is there already belongs to an earlier process of the same owner name (a
// fixed name, such as a pod's, restarted after a crash within the expiry timeout), or
// to another process running under this name now, which is a mistake: owner names must
// be unique. So it first waits for the row to be silent for the expiry timeout, the
// silence after which expiry counts an owner dead, and fails with ErrOwnerInUse when
// the row heart-beats meanwhile (awaitSilence). The earlier process's leases would stay
// ACTIVE for as long as this one heart-beats the row, in every topic, so it then takes
// them back as a dead owner's (expired: the attempt counts, the topic's retry policy
// applies) in one transaction: the row taken over if nobody beat or took it over since
// (Repository.ClaimOwner: it names this process now, its heartbeat far in the past),
// the expiry under another name, and the heartbeat that makes the row live again.
// Another process starting under the name meanwhile waits on the row's lock, and then
// finds it heart-beaten.
func (p *Processor) registerAtStart(ctx context.Context) error {
	if err := checkIsolation(ctx, p.pool); err != nil {
		return err
	}
	owner := p.repo.Owner()
	expirer, err := repository.New(repository.Config{})
	if err != nil {
		return fmt.Errorf("processor: %w", err)
	}
	for {
		created, err := p.repo.RegisterOwner(ctx, p.pool)
		if err != nil {
			return fmt.Errorf("processor: %w", err)
		}
		if created {
			return nil
		}
		earlier, err := p.awaitSilence(ctx)
		if errors.Is(err, repository.ErrNotRegistered) {
			continue // purged meanwhile: register again
		}
		if err != nil {
			return notOurs{err}
		}
		var expired []repository.Expiry
		claimed := false
		err = repository.Atomically(ctx, p.pool, func(tx pgx.Tx) error {
			var err error
			if claimed, err = p.repo.ClaimOwner(ctx, tx, earlier.Heartbeat); err != nil || !claimed {
				return err
			}
			if expired, err = expirer.Expire(ctx, tx, p.cfg.ExpiryTimeout); err != nil {
				return fmt.Errorf("take back the leases of owner %q: %w", owner, err)
			}
			return p.repo.Heartbeat(ctx, tx)
		})
		if err != nil {
			return notOurs{fmt.Errorf("processor: %w", err)}
		}
		if !claimed {
			if _, _, err := p.repo.RegisteredOwner(ctx, p.pool); errors.Is(err, repository.ErrNotRegistered) {
				continue // purged meanwhile: register again
			}
			return notOurs{fmt.Errorf("processor: owner %q was heart-beaten or taken over by another process while this one started: %w; give each process a name of its own (repository.Config.Owner)",
				owner, ErrOwnerInUse)}
		}
		p.logger.Warn("owner row silent for the expiry timeout: took back the leases of the earlier process of this owner name",
			slog.String("owner", owner))
		p.tookBack(expired)
		return nil
	}
}

// checkIsolation refuses a pool whose sessions begin their transactions in an isolation
// other than READ COMMITTED (a database's, a role's or the pool's own
// default_transaction_isolation). The processor's statements run outside a transaction
// and each takes the rows it finds other processes changing (SKIP LOCKED), and a limited
// topic's poll counts the topic's ACTIVE tasks after waiting for its turn: in REPEATABLE
// READ or SERIALIZABLE a poll that meets a row another one leased fails (40001), and
// one that waited counts from its snapshot taken before the wait, leasing past the
// limit.
func checkIsolation(ctx context.Context, pool *pgxpool.Pool) error {
	var level string
	if err := pool.QueryRow(ctx, "SELECT current_setting('default_transaction_isolation')").Scan(&level); err != nil {
		return fmt.Errorf("processor: read the pool's default_transaction_isolation: %w", err)
	}
	// PostgreSQL runs READ UNCOMMITTED as READ COMMITTED
	if level != "read committed" && level != "read uncommitted" {
		return fmt.Errorf("processor: the pool's sessions begin transactions %s (default_transaction_isolation, the database's or the role's): the processor needs READ COMMITTED, or its polls fail with serialization errors and a limited topic's polls lease past its limit; set default_transaction_isolation to 'read committed' in the pool's RuntimeParams (or in its URL: ?default_transaction_isolation=read%%20committed)",
			strings.ToUpper(level))
	}
	return nil
}

// ErrOwnerInUse is what Run returns when another live process heart-beats under the
// owner name it was given (repository.Config.Owner): two processes must not share one.
var ErrOwnerInUse = errors.New("owner name in use by a live process")

// notOurs marks an error of a start that found the owner row there already: a start
// stopped then leaves the row, another process's, alone.
type notOurs struct{ error }

func (e notOurs) Unwrap() error { return e.error }

// awaitSilence returns this owner's row once its heartbeat has been silent for
// ExpiryTimeout, or the longer one the row declares, reading it every HeartbeatInterval meanwhile (the wait is timed by
// this process's clock, from the silence the first read found). A heartbeat in that
// time is a live process's: ErrOwnerInUse, naming it. ErrNotRegistered: the row went.
func (p *Processor) awaitSilence(ctx context.Context) (repository.Owner, error) {
	earlier, silent, err := p.repo.RegisteredOwner(ctx, p.pool)
	if err != nil {
		return repository.Owner{}, fmt.Errorf("processor: %w", err)
	}
	// the longer of this process's timeout and the one the earlier declared, as expiry
	timeout := max(p.cfg.ExpiryTimeout, earlier.ExpiryTimeout)
	if silent >= timeout {
		return earlier, nil
	}
	p.logger.Warn("owner row already there, of a process that may be running: waiting for its heartbeat to be silent for the expiry timeout before taking back its leases (two live processes must not share an owner name)",
		slog.String("owner", earlier.Name), slog.String("host", earlier.Host), slog.Int("pid", earlier.PID),
		slog.Duration("silent", silent), slog.Duration("expiry_timeout", timeout))
	deadline := time.Now().Add(timeout - silent)
	for {
		wait := min(p.cfg.HeartbeatInterval, time.Until(deadline))
		if wait <= 0 {
			return earlier, nil
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return repository.Owner{}, fmt.Errorf("processor: %w", ctx.Err())
		case <-timer.C:
		}
		now, _, err := p.repo.RegisteredOwner(ctx, p.pool)
		if err != nil {
			return repository.Owner{}, fmt.Errorf("processor: %w", err)
		}
		if !now.Heartbeat.Equal(earlier.Heartbeat) {
			return repository.Owner{}, fmt.Errorf("processor: owner %q heart-beats under host %q, pid %d (registered %s): %w; give each process a name of its own (repository.Config.Owner)",
				now.Name, now.Host, now.PID, now.Started.Format(time.RFC3339), ErrOwnerInUse)
		}
	}
}

// heartbeats proves this owner alive every HeartbeatInterval, on a goroutine and a
// connection of its own: the maintenance of liveness (expiry, purges, ANALYZE,
// retention) can take longer than an interval on a loaded server, and the pool's
// connections can all be busy for longer than the expiry timeout (polls slowed by a
// long-held snapshot, a pool smaller than the managers' statements in flight); a late
// heartbeat lets other processors take this one's leases back while it is still working
// on them. The connection is made from the pool's configuration, made again after a
// failure, and closed when ctx ends.
func (p *Processor) heartbeats(ctx context.Context) {
	conn := &beatConn{pool: p.pool.Config()}
	defer conn.close()
	ticker := time.NewTicker(p.cfg.HeartbeatInterval)
	defer ticker.Stop()
	var last time.Time // when the last heartbeat began
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-p.beatNow: // a manager waits for one (awaitBeat)
			if time.Since(last) < p.cfg.HeartbeatInterval/4 {
				// at most one asked for each quarter interval, however many managers
				// wait: a server down fails each at once
				continue
			}
		}
		last = time.Now()
		p.heartbeat(ctx, conn)
	}
}

func (p *Processor) heartbeat(ctx context.Context, conn *beatConn) {
	// A heartbeat that takes an expiry timeout comes too late to keep the leases: it
	// fails then (a hung connection, a server that does not answer), so that Health says
	// so and the next tick tries again on a new connection, rather than hang until the
	// kernel gives the connection up.
	start := time.Now()
	hctx, cancel := context.WithTimeout(ctx, p.cfg.ExpiryTimeout)
	defer cancel()
	c, err := conn.get(hctx)
	if err == nil {
		err = p.beat(hctx, c)
	} else if perr := p.beat(hctx, p.pool); perr == nil {
		// The heartbeat's own connection cannot be made (a connection limit that the
		// pool's connections, made earlier, are within): one of the pool's, when free,
		// keeps the owner alive meanwhile.
		err = nil
	}
	if err != nil {
		conn.close()
	} else {
		p.beatSucceeded(start)
	}
	p.outcome(ctx, "heartbeat", err)
}

// beatSucceeded records a heartbeat of the owner row that succeeded, begun at start.
func (p *Processor) beatSucceeded(start time.Time) {
	p.lastBeat.Store(int64(start.Sub(p.epoch)))
	p.beatMu.Lock()
	close(p.beaten)
	p.beaten = make(chan struct{})
	p.beatMu.Unlock()
}

// beatStale reports whether the owner's last heartbeat that succeeded is old enough
// that other processors may soon count it dead and take back its leases: older than
// ExpiryTimeout less a HeartbeatInterval (4 s by default), or than halfway from the
// interval to the timeout when they are closer than two intervals (a heartbeat is
// that old between two beats). The managers then
// lease nothing until a heartbeat succeeds (awaitBeat): what they leased would be taken
// back and run again elsewhere, over and over for as long as the heartbeat fails while
// polls do not (its connection refused by a connection limit the pool's are within,
// its owner row locked), each time with an attempt used.
func (p *Processor) beatStale() bool {
	since := time.Since(p.epoch) - time.Duration(p.lastBeat.Load())
	return since > p.staleAfter()
}

// staleAfter is how old the last heartbeat that succeeded is when it is stale
// (beatStale).
func (p *Processor) staleAfter() time.Duration {
	return max(p.cfg.ExpiryTimeout-p.cfg.HeartbeatInterval, (p.cfg.HeartbeatInterval+p.cfg.ExpiryTimeout)/2)
}

// guardLeases protects the tasks in flight when the owner's heartbeat fails: other
// processors count the owner dead once its last heartbeat that succeeded is as old as
// the expiry timeout, and take its leases back, and its tasks would then run twice at
// once. While that heartbeat is stale (beatStale: a heartbeat interval before the
// expiry timeout, by default), the batches' contexts, and their tasks', are cancelled
// with ErrLeaseLost, and the tasks not started are handed back
// (TaskManager.leasesAtRisk), every quarter of a heartbeat interval (a poll answered
// late leases a batch meanwhile): a handler has until the expiry timeout to stop. What
// it decides is committed as usual, when the lease is still this owner's. It goes on
// until ctx ends, waking when the last heartbeat would go stale, or at the next one.
func (p *Processor) guardLeases(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		p.beatMu.Lock()
		beaten := p.beaten
		p.beatMu.Unlock()
		silent := time.Since(p.epoch) - time.Duration(p.lastBeat.Load())
		wait := p.staleAfter() - silent
		if wait <= 0 {
			p.leasesAtRisk(silent)
			wait = p.cfg.HeartbeatInterval / 4
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-beaten:
		case <-timer.C:
		}
	}
}

// leasesAtRisk cancels every manager's batches in flight with ErrLeaseLost and hands
// back their tasks not started, the owner's last heartbeat that succeeded being silent
// old (guardLeases).
func (p *Processor) leasesAtRisk(silent time.Duration) {
	cancelled := 0
	for _, m := range p.allManagers() {
		cancelled += m.leasesAtRisk()
	}
	if cancelled > 0 {
		p.logger.Error("heartbeat stale: cancelled the handlers' work, which other processors may take back and run again once it is as old as the expiry timeout",
			slog.String("owner", p.repo.Owner()), slog.Int("batches", cancelled), slog.Duration("silent", silent),
			slog.Duration("expiry_timeout", p.cfg.ExpiryTimeout))
	}
}

// awaitBeat asks the heartbeat goroutine for a heartbeat now and waits until one
// succeeds, or ctx ends. It asks again every quarter of a heartbeat interval, so that
// the first heartbeat after an outage (the server back, the row's lock released) comes
// that soon, not at the next tick.
func (p *Processor) awaitBeat(ctx context.Context) {
	p.beatMu.Lock()
	beaten := p.beaten
	p.beatMu.Unlock()
	again := time.NewTicker(p.cfg.HeartbeatInterval / 4)
	defer again.Stop()
	for {
		select {
		case p.beatNow <- struct{}{}:
		default: // asked already
		}
		select {
		case <-beaten:
			return
		case <-ctx.Done():
			return
		case <-again.C:
		}
	}
}

// beat heart-beats the owner row on h, or registers it again when it is gone: this
// owner was silent long enough to be purged as dead (its leases were taken back, and its
// late completions will be refused), and comes back as a fresh owner row.
//
// It writes the row only as this process registered or claimed it (HeartbeatRow): a row
// whose start time, host or pid are no longer those was claimed by another process
// started under the same name while this one was silent for the expiry timeout (a
// process paused, a network cut off, the name given to a replacement): that process
// took back this one's leases and runs under the name now. Run stops (ErrOwnerInUse):
// both would lease as one owner and each take the other's tasks for leases it lost.
func (p *Processor) beat(ctx context.Context, h repository.Handle) error {
	own := p.ownRow.Load()
	if own == nil {
		err := p.repo.Heartbeat(ctx, h)
		if errors.Is(err, repository.ErrNotRegistered) {
			return p.registerAgain(ctx, h, nil)
		}
		if err == nil {
			// the read-back after the start failed: the row is this process's, which
			// has heart-beaten it since
			if row, _, rerr := p.repo.RegisteredOwner(ctx, h); rerr == nil {
				p.ownRow.Store(&row)
			}
		}
		return err
	}
	// one statement: a row taken over is not written (its heartbeat is the other's),
	// however close the claim came to the beat
	if ok, err := p.repo.HeartbeatRow(ctx, h, *own); err != nil || ok {
		return err
	}
	row, _, err := p.repo.RegisteredOwner(ctx, h)
	switch {
	case errors.Is(err, repository.ErrNotRegistered):
		// gone (purged as dead): registered again, not heart-beaten by name, which
		// would write a row another process registered meanwhile as this one's
		return p.registerAgain(ctx, h, own)
	case err != nil:
		return err
	case p.registeredUnsure(row, *own):
		p.ownRow.Store(&row)
		own = &row
	case takenOver(row, *own):
		return p.takenOverBy(row)
	}
	// the row as this process has it after all (gone and back between the statements,
	// or its registration's outcome learnt only now)
	if ok, err := p.repo.HeartbeatRow(ctx, h, *own); err != nil || ok {
		return err
	}
	return errors.New("processor: owner row changed during the heartbeat: the next one settles it")
}

// registerAgain registers the owner row anew, its earlier one (own, when known) gone:
// purged as dead while this process was silent. A row of the name registered meanwhile
// by another process (not created here, its start, host or pid not own's) is a take-over.
func (p *Processor) registerAgain(ctx context.Context, h repository.Handle, own *repository.Owner) error {
	p.logUnlessStopping(ctx, slog.LevelWarn, "owner row missing, registering again", slog.String("owner", p.repo.Owner()))
	created, err := p.repo.RegisterOwner(ctx, h)
	if err != nil {
		if repository.Uncertain(err) {
			p.registering.Store(true)
		}
		return err
	}
	if created {
		p.registering.Store(false) // this registration wrote the row
	}
	row, _, err := p.repo.RegisteredOwner(ctx, h)
	if err != nil {
		if created {
			// the row is this process's, its start unknown here: judged against the
			// purged one, the next beat would take it for another process's
			p.ownRow.Store(nil)
		}
		return err
	}
	if !created && own != nil && takenOver(row, *own) && !p.registeredUnsure(row, *own) {
		return p.takenOverBy(row) // another process registered the name meanwhile
	}
	p.registering.Store(false)
	p.ownRow.Store(&row)
	return nil
}

// registeredUnsure reports whether row, not own, is the one a registration of this
// process wrote though its reply was lost (registering): this host's and pid's, started
// after own. It clears the mark when it says so. (A process of another container
// sharing the host's name and pid that registered the name in that moment would be
// taken for this one: that takes a replacement started while this process runs, on the
// host's network with the same pid, and a lost reply at that instant.)
func (p *Processor) registeredUnsure(row, own repository.Owner) bool {
	if !p.registering.Load() || row.Host != own.Host || row.PID != own.PID || !row.Started.After(own.Started) {
		return false
	}
	p.registering.Store(false)
	return true
}

// takenOver reports whether the owner row is no longer the one this process registered
// or claimed (own): another process's claim wrote its start, host and pid.
func takenOver(row, own repository.Owner) bool {
	return !row.Started.Equal(own.Started) || row.Host != own.Host || row.PID != own.PID
}

// takenOverBy stops Run for the take-over of its owner row, now row, and returns the
// error it stops with.
func (p *Processor) takenOverBy(row repository.Owner) error {
	err := fmt.Errorf("processor: owner %q was taken over by another process (host %q, pid %d, started %s) while this one was silent: %w",
		p.repo.Owner(), row.Host, row.PID, row.Started.Format(time.RFC3339Nano), ErrOwnerInUse)
	if p.takeOver != nil {
		p.takeOver(err)
	}
	return err
}

// beatConn is the heartbeat's own connection, made when first needed as the pool makes
// its own (repository.ConnectAsPool).
type beatConn struct {
	pool *pgxpool.Config
	conn *pgx.Conn
}

// get returns the connection, connecting first when there is none.
func (b *beatConn) get(ctx context.Context) (*pgx.Conn, error) {
	if b.conn != nil && !b.conn.IsClosed() {
		return b.conn, nil
	}
	conn, err := repository.ConnectAsPool(ctx, b.pool)
	if err != nil {
		return nil, err
	}
	b.conn = conn
	return conn, nil
}

// close closes the connection, if any; the next get makes another.
func (b *beatConn) close() {
	if b.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = b.conn.Close(ctx)
		b.conn = nil
	}
}

// outcome records the result of a database operation in p.faults.
func (p *Processor) outcome(ctx context.Context, op string, err error) {
	if err != nil {
		p.faults.fail(ctx, op, err)
	} else {
		p.faults.ok(op)
	}
}

// liveness, every HeartbeatInterval, expires dead owners' leases, purges dead owners,
// forwards missed cancels and refreshes the managers' pause state.
func (p *Processor) liveness(ctx context.Context) {
	ticker := time.NewTicker(p.cfg.HeartbeatInterval)
	defer ticker.Stop()
	lastRetention := time.Now()
	retentionMore := false    // the last retention pass left tasks past their retention
	var lastOrphans time.Time // the first tick looks for orphaned leases too
	// orphansTook is how long the last look for orphaned leases took: the next waits
	// orphanShare times as long at least, so that a look that reads for seconds (the
	// ACTIVE tasks' index entries a long-held snapshot keeps: 1-8 s each after minutes
	// at 20 000 tasks/s) does not run back to back.
	var orphansTook time.Duration
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		p.watchHeld(ctx)
		orphans := !p.quiet() && orphansDue(time.Since(lastOrphans), p.cfg.ExpiryTimeout, orphansTook)
		if orphans {
			lastOrphans = time.Now()
		}
		took := p.tick(ctx, orphans)
		if orphans {
			orphansTook = took
		}
		if p.cfg.RetentionInterval > 0 && (retentionMore || time.Since(lastRetention) >= p.cfg.RetentionInterval) {
			lastRetention = time.Now()
			retentionMore = p.retain(ctx, max(p.cfg.HeartbeatInterval/2, time.Second))
		}
	}
}

// orphanShare bounds the time the looks for orphaned leases take (liveness): one that
// took d is followed by the next no sooner than orphanShare × d later.
const orphanShare = 20

// orphansDue reports whether the look for orphaned leases is due, since after the last
// one that took took: every expiry timeout, or orphanShare times its own duration when
// that is longer.
func orphansDue(since, expiry, took time.Duration) bool {
	return since >= max(expiry, orphanShare*took)
}

// analyzeMinimum is how many tasks a manager leases before it first refreshes its
// topic's statistics. After a refresh that found the topic holding rows rows, the next is
// due once a tenth of rows were leased (like autovacuum's default) and analyzeInterval
// has passed (like its naptime), or at once when as many as rows were leased: a young
// topic whose table keeps doubling is refreshed at each doubling, a large one at most
// once per interval. ANALYZE reads a sample of up to 30 000 rows, a third of a second of
// a core on a busy table: refreshed every 10 % at a steady 25 000 tasks/s it took a
// twentieth of the machine.
const (
	analyzeMinimum  = 1000
	analyzeInterval = time.Minute
)

// analyzeDue says whether a manager that leased leased tasks since the last refresh, at
// elapsed since it, is due another; at and soonAt are its thresholds (TaskManager).
func analyzeDue(leased, at, soonAt int64, elapsed time.Duration) bool {
	return leased >= at && (leased >= soonAt || elapsed >= analyzeInterval)
}

// analyze refreshes the statistics of topics whose managers leased many tasks since the
// last refresh. Plans that pgx cached while a topic's table was nearly empty (a seq scan
// is right for ten rows, ruinous for a million) are invalidated by it, so a young topic
// under load does not depend on autovacuum being on and quick.
func (p *Processor) analyze(ctx context.Context) {
	for _, m := range p.allManagers() {
		elapsed := time.Duration(time.Now().UnixNano() - m.analyzed.Load())
		if !analyzeDue(m.leased.Load(), m.analyzeAt.Load(), m.analyzeSoonAt.Load(), elapsed) {
			continue
		}
		rows, err := maintain(ctx, p, fmt.Sprintf("analyze topic %q", m.cfg.Topic), func(c context.Context) (int64, error) {
			return p.repo.Analyze(c, p.pool, m.cfg.Topic)
		})
		if err != nil {
			continue
		}
		now := time.Now().UnixNano()
		for _, other := range p.managersOf(m.cfg.Topic) {
			other.rows.Store(rows)
			other.leased.Store(0)
			other.analyzeAt.Store(max(analyzeMinimum, rows/10))
			other.analyzeSoonAt.Store(max(analyzeMinimum, rows))
			other.analyzed.Store(now)
		}
	}
}

// vacuum starts a VACUUM of the table holding a topic whose managers leased, in all,
// max(VacuumEvery, rows/4) tasks since the last one. Every poll reads the READY index
// from its head, and the entries of the tasks leased before it stay there, marked dead,
// until VACUUM removes them: a poll under a sustained load walked over more of them with
// every task processed (twice the index-scan time after 40 s at 38 000 tasks/s), and a
// VACUUM every 20 s let processing keep up (BENCHMARKS.md). Autovacuum does the same,
// but only once the dead rows reach a fifth of the table and at most once a minute.
//
// The VACUUM runs on a goroutine of its own, one at a time, so that the maintenance
// tick (expiry, cancels, pause and resume) does not wait for it; none starts once Run's
// context is done. It is skipped when another VACUUM (autovacuum's) holds the table.
func (p *Processor) vacuum(ctx context.Context) {
	if p.cfg.VacuumEvery < 0 {
		return
	}
	for _, m := range p.allManagers() {
		if p.draining.Load() || ctx.Err() != nil {
			return
		}
		topic := m.cfg.Topic
		if m.noVacuum.Load() {
			continue
		}
		managers := p.managersOf(topic)
		var leased int64
		for _, other := range managers {
			leased += other.vacuumLeased.Load()
		}
		if leased < max(p.cfg.VacuumEvery, m.rows.Load()/4) {
			continue
		}
		if !p.vacuuming.CompareAndSwap(false, true) {
			return // one is running: the others wait for a later tick
		}
		for _, other := range managers {
			other.vacuumLeased.Store(0)
		}
		p.vacuums.Go(func() {
			defer p.vacuuming.Store(false)
			// A VACUUM removes the row versions no snapshot can see any more. While the
			// oldest snapshot is the one it was at the last VACUUM (a transaction held
			// open for minutes), nothing became removable since: another VACUUM would
			// read the table for seconds and free nothing. Only snapshots held for
			// p.heldSnapshot count: a short transaction that happened to span two
			// decisions is no reason to wait.
			xmin, err := p.repo.OldestXmin(ctx, p.pool, p.heldSnapshot)
			p.outcome(ctx, "read the oldest snapshot", err)
			if err != nil {
				return
			}
			if last := m.vacuumXmin.Load(); last != nil && *last == xmin && xmin != "" {
				p.logger.Debug("VACUUM skipped: the oldest snapshot has not moved since the last one",
					slog.String("topic", topic), slog.String("xmin", xmin))
				return
			}
			for _, other := range p.managersOf(topic) {
				other.vacuumXmin.Store(&xmin)
			}
			start := time.Now()
			err = p.repo.Vacuum(ctx, p.pool, topic)
			if errors.Is(err, repository.ErrNotTableOwner) {
				// not a failure of the database: say so once, and leave the table to
				// autovacuum from now on
				for _, other := range p.managersOf(topic) {
					other.noVacuum.Store(true)
				}
				p.logger.Warn("VACUUM left to autovacuum", slog.String("topic", topic), slog.Any("error", err))
				return
			}
			p.outcome(ctx, fmt.Sprintf("vacuum topic %q", topic), err)
			if err != nil {
				return
			}
			p.logger.Debug("vacuumed topic", slog.String("topic", topic), slog.Duration("took", time.Since(start)))
		})
	}
}

// defaultHeldSnapshot is how long a transaction must have been open for its snapshot to
// hold back the processor's VACUUM (see vacuum).
const defaultHeldSnapshot = 30 * time.Second

// retentionBatch is how many finished tasks one retention statement deletes, so that a
// large backlog of old rows is removed in short transactions.
const retentionBatch = 10000

// retain deletes finished tasks older than their topic's retention, in batches, and the
// tallies older than repository.TallyKept. It starts no batch once budget has passed, so
// that a backlog of millions (a retention just set, a processor back after days) does
// not hold the maintenance tick, whose expiry of dead owners' leases waits for it; it
// reports whether tasks past their retention may remain, for the next tick to go on.
func (p *Processor) retain(ctx context.Context, budget time.Duration) (more bool) {
	start := time.Now()
	var total int64
	for ctx.Err() == nil {
		// the topics in turn, from where the last batch stopped: a topic with more old
		// tasks than a pass deletes does not hold the others back until it is cleared
		n, err := maintain(ctx, p, "purge by retention", func(c context.Context) (int64, error) {
			n, last, err := p.repo.PurgeRetentionAfter(c, p.pool, p.retentionAfter, retentionBatch)
			if errors.Is(err, repository.ErrRetentionUnderWay) {
				return 0, nil // another processor's pass (Citus): it deletes them
			}
			if err == nil {
				p.retentionAfter = last
			}
			return n, err
		})
		if err != nil {
			return false
		}
		total += n
		if n < retentionBatch {
			break
		}
		if time.Since(start) >= budget {
			more = true
			break
		}
	}
	if total > 0 {
		p.logger.Debug("purged finished tasks past their retention", slog.Int64("tasks", total), slog.Bool("more", more))
	}
	// the charts' counts (repository.Tally) are kept for an hour
	_, _ = maintain(ctx, p, "prune tallies", func(c context.Context) (int64, error) { return p.repo.PruneTallies(c, p.pool) })
	return more
}

// logUnlessStopping logs a failed step of the heartbeat or the periodic maintenance,
// unless shutdown cut it short: a cancelled context is not worth a warning.
func (p *Processor) logUnlessStopping(ctx context.Context, level slog.Level, msg string, attrs ...any) {
	if ctx.Err() != nil {
		return
	}
	p.logger.Log(ctx, level, msg, attrs...)
}

// tick runs the periodic maintenance. Leases of stale owners are taken back on every
// tick, which reads the ACTIVE tasks only when some registered owner is stale; with
// orphans (once per ExpiryTimeout, less often when slow: orphansDue) it also looks for
// leases whose owner row is gone. It returns how long the expiry took.
func (p *Processor) tick(ctx context.Context, orphans bool) (expiry time.Duration) {
	expire := p.repo.ExpireStale
	if orphans {
		expire = p.repo.Expire
	}
	start := time.Now()
	expired, _ := maintain(ctx, p, "expire dead owners' leases", func(c context.Context) ([]repository.Expiry, error) {
		return expire(c, p.pool, p.cfg.ExpiryTimeout)
	})
	expiry = time.Since(start)
	p.tookBack(expired)
	_, _ = maintain(ctx, p, "purge dead owners", func(c context.Context) (int64, error) {
		return p.repo.PurgeOwners(c, p.pool, 2*p.cfg.ExpiryTimeout)
	})
	topics := p.topics()
	if len(topics) == 0 {
		return expiry // nothing leased, nothing to refresh
	}
	// Only this processor's topics: their tables, and their rows of task_topic, whatever
	// the number of other topics.
	cancelled, _ := maintain(ctx, p, "list cancelled leases", func(c context.Context) ([]repository.Lease, error) {
		return p.repo.CancelledLeases(c, p.pool, topics...)
	})
	for _, l := range cancelled {
		for _, m := range p.managersOf(l.Topic) {
			m.cancelTask(l.Sequence)
		}
	}
	if !p.quiet() {
		p.analyze(ctx)
		p.vacuum(ctx)
	}
	p.refreshTopics(ctx, topics)
	return expiry
}

// maintain runs f, one statement of the periodic maintenance, under a context that
// ends after the longer of the expiry timeout and maintenanceTimeout (a connection gone
// silent would otherwise hold the ticks after it, and with them the expiry of dead
// owners' leases, cancels and pause state, until the kernel gives the connection up,
// some 15 minutes on), and reports its outcome as what under ctx, the tick's own.
func maintain[T any](ctx context.Context, p *Processor, what string, f func(context.Context) (T, error)) (T, error) {
	sctx, cancel := context.WithTimeout(ctx, max(p.cfg.ExpiryTimeout, maintenanceTimeout))
	defer cancel()
	v, err := f(sctx)
	p.outcome(ctx, what, err)
	return v, err
}

// maintenanceTimeout is the least time one statement of the maintenance has: a look for
// orphaned leases under a long-held snapshot reads for seconds (1-8 s seen).
const maintenanceTimeout = 30 * time.Second

// readTopicsOp names the reads of the topics' state (activation and limits) in
// Processor.Health: the heartbeat's (refreshTopics) and a manager's on an ACTIVATION.
const readTopicsOp = "read topic activation"

// refreshTopics reads the state of topics (activation and limits) in one statement and
// gives it to their managers (TaskManager.setTopic).
func (p *Processor) refreshTopics(ctx context.Context, topics []string) {
	reads := make(map[*TaskManager]uint64)
	for _, topic := range topics {
		for _, m := range p.managersOf(topic) {
			reads[m] = m.readingTopic()
		}
	}
	states, _ := maintain(ctx, p, readTopicsOp, func(c context.Context) ([]repository.Topic, error) {
		return p.repo.TopicsNamed(c, p.pool, topics...)
	})
	for _, t := range states {
		for _, m := range p.managersOf(t.Name) {
			m.setTopic(reads[m], t)
		}
	}
}

// tookBack reports leases an expiry took back, and wakes the managers of their topics.
func (p *Processor) tookBack(expired []repository.Expiry) {
	if len(expired) > 0 && p.onExpire != nil {
		p.onExpire(expired)
	}
	for _, e := range expired {
		p.logger.Info("took back leases of dead owners", slog.String("topic", e.Topic),
			slog.Int64("expired", e.Expired), slog.Int64("retried", e.Retried))
		p.Resume(e.Topic)
	}
}

// topics lists the topics this processor manages, by name.
func (p *Processor) topics() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	topics := make([]string, 0, len(p.managers))
	for topic := range p.managers {
		topics = append(topics, topic)
	}
	slices.Sort(topics)
	return topics
}

package processor

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/repository"
)

// Notifier holds the ONE listening connection of a process and fans task_notification
// events out to the managers that subscribed to a topic. It reconnects after a drop;
// after every (re)connect it tells every subscriber that it may have missed events, so
// they poll and refresh instead of waiting for their pause interval.
type Notifier struct {
	// connect makes the listening connection.
	connect func(ctx context.Context) (*pgx.Conn, error)
	logger  *slog.Logger
	// dropped, when set, is called with the error each time the connection is lost
	// (connected) or cannot be made (the Processor's: the server may have restarted,
	// Processor.suspectLostCommits).
	dropped func(err error, connected bool)
	// listening, when set, is called on a goroutine of its own after each (re)connect,
	// once the connection listens, with the context Run was given: anything may have
	// changed unannounced (the Processor's re-reads its topics' state).
	listening func(ctx context.Context)
	// aside tracks the calls of listening, which Run waits for before it returns.
	aside sync.WaitGroup

	mu   sync.Mutex
	subs map[string]map[*subscription]struct{} // by topic hash

	connected chan struct{} // closed and replaced on each successful connect (for tests)
	connMu    sync.Mutex
	conn      *pgx.Conn

	// malformed counts the notifications ignored since the last warning about them, the
	// last of those at warnedAt (malformedWarning); only the notifier's goroutine uses them
	malformed int
	warnedAt  time.Time

	// pingEvery and pingTimeout: after pingEvery without a notification the connection
	// is pinged, and taken for lost when the ping does not answer within pingTimeout
	// (pingEveryDefault and pingTimeoutDefault; tests set shorter ones).
	pingEvery, pingTimeout time.Duration
	// connectTimeout bounds an attempt to connect and listen (connectTimeoutDefault).
	connectTimeout time.Duration
}

// A listening connection that goes silent without a reset (its host gone, a NAT or a
// load balancer dropping a flow idle for a few minutes) would be found only when TCP
// keepalive gives up, minutes later: until then no wake-up arrives and every task waits
// for its manager's pause interval. A ping after pingEveryDefault of silence finds it
// within pingEveryDefault + pingTimeoutDefault, and keeps such a flow from going idle.
const (
	pingEveryDefault   = 30 * time.Second
	pingTimeoutDefault = 10 * time.Second
	// connectTimeoutDefault bounds an attempt to connect and listen as a silent
	// connection is bounded: pgx sets no connect timeout of its own, and an address that
	// drops packets (a failed-over primary's) or a peer that accepts and never answers
	// held the attempt for minutes, every wake-up lost meanwhile.
	connectTimeoutDefault = pingEveryDefault + pingTimeoutDefault
)

type subscription struct {
	fn func(repository.Notification)
}

// NewNotifier returns a notifier that connects with connConfig. Run starts it. (A
// Processor's notifier connects as its pool does, with the pool's BeforeConnect and
// AfterConnect hooks.)
func NewNotifier(connConfig *pgx.ConnConfig, logger *slog.Logger) *Notifier {
	connConfig = connConfig.Copy()
	return newNotifier(func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, connConfig) }, logger)
}

// newPoolNotifier returns a notifier that connects as the pool of config does
// (repository.ConnectAsPool): a pool whose password a BeforeConnect hook sets, say, would
// otherwise give the processor tasks to poll but no notifications.
func newPoolNotifier(config *pgxpool.Config, logger *slog.Logger) *Notifier {
	return newNotifier(func(ctx context.Context) (*pgx.Conn, error) { return repository.ConnectAsPool(ctx, config) }, logger)
}

func newNotifier(connect func(ctx context.Context) (*pgx.Conn, error), logger *slog.Logger) *Notifier {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Notifier{
		connect:        connect,
		logger:         logger,
		subs:           make(map[string]map[*subscription]struct{}),
		connected:      make(chan struct{}),
		pingEvery:      pingEveryDefault,
		pingTimeout:    pingTimeoutDefault,
		connectTimeout: connectTimeoutDefault,
	}
}

// Subscribe calls fn for every notification about topic, and with a synthetic
// EventWork after every (re)connect. fn runs on the notifier's goroutine and must not
// block. The returned function ends the subscription.
func (n *Notifier) Subscribe(topic string, fn func(repository.Notification)) (unsubscribe func()) {
	hash := repository.TopicHash(topic)
	s := &subscription{fn: fn}
	n.mu.Lock()
	if n.subs[hash] == nil {
		n.subs[hash] = make(map[*subscription]struct{})
	}
	n.subs[hash][s] = struct{}{}
	n.mu.Unlock()
	return func() {
		n.mu.Lock()
		delete(n.subs[hash], s)
		if len(n.subs[hash]) == 0 {
			delete(n.subs, hash)
		}
		n.mu.Unlock()
	}
}

// Connected returns a channel closed at the next successful (re)connect.
func (n *Notifier) Connected() <-chan struct{} {
	n.connMu.Lock()
	defer n.connMu.Unlock()
	return n.connected
}

// PID returns the backend process id of the listening connection (0 when disconnected),
// so tests can terminate it.
func (n *Notifier) PID() uint32 {
	n.connMu.Lock()
	defer n.connMu.Unlock()
	if n.conn == nil {
		return 0
	}
	return n.conn.PgConn().PID()
}

// Run listens until ctx is done, reconnecting with backoff after errors.
func (n *Notifier) Run(ctx context.Context) {
	defer n.aside.Wait()
	backoff := newBackoff(50*time.Millisecond, retryCap)
	for ctx.Err() == nil {
		connected, err := n.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		if connected {
			backoff.reset()
		}
		if n.dropped != nil {
			n.dropped(err, connected)
		}
		delay := backoff.next()
		n.logger.Warn("notification listener disconnected", slog.Any("error", err), slog.Duration("retry_in", delay))
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// listen connects, listens and delivers until the connection fails; connected reports
// whether it got as far as listening.
// Connecting and the LISTEN are bounded by connectTimeout.
func (n *Notifier) listen(ctx context.Context) (connected bool, err error) {
	setup, cancel := context.WithTimeout(ctx, n.connectTimeout)
	defer cancel()
	conn, err := n.connect(setup)
	if err != nil {
		return false, err
	}
	defer func() {
		n.connMu.Lock()
		n.conn = nil
		n.connMu.Unlock()
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(setup, "LISTEN "+repository.NotificationChannel); err != nil {
		return false, err
	}
	cancel()
	n.connMu.Lock()
	n.conn = conn
	close(n.connected)
	n.connected = make(chan struct{})
	n.connMu.Unlock()
	n.logger.Debug("listening for notifications", slog.Uint64("pid", uint64(conn.PgConn().PID())))
	// Anything may have happened while we were not listening.
	if n.listening != nil {
		n.aside.Go(func() { n.listening(ctx) })
	}
	n.broadcast()
	for {
		// the read deadline ends a wait of pingEvery without a notification, for a ping
		// (pgconn keeps a connection whose read timed out)
		if err := conn.PgConn().Conn().SetReadDeadline(time.Now().Add(n.pingEvery)); err != nil {
			return true, err
		}
		msg, err := conn.WaitForNotification(ctx)
		if err != nil && ctx.Err() == nil && pgconn.Timeout(err) {
			if err := n.ping(ctx, conn); err != nil {
				return true, err
			}
			continue
		}
		if err != nil {
			return true, err
		}
		note, err := repository.ParseNotification(msg.Payload)
		if err != nil {
			n.ignored(msg.Payload, err, time.Now())
			continue
		}
		n.deliver(note)
	}
}

// malformedWarning is how often at most the notifier warns of notifications it cannot
// read: a newer release's functions sending an event this one does not know (a rolling
// upgrade) would otherwise log a warning at every push.
const malformedWarning = time.Minute

// ignored logs a notification it cannot read: the first, then at most one a
// malformedWarning, saying how many were ignored since the last.
func (n *Notifier) ignored(payload string, err error, now time.Time) {
	n.malformed++
	if !n.warnedAt.IsZero() && now.Sub(n.warnedAt) < malformedWarning {
		return
	}
	n.logger.Warn("ignoring malformed notification", slog.String("payload", payload), slog.Any("error", err),
		slog.Int("ignored_since_last_warning", n.malformed))
	n.malformed, n.warnedAt = 0, now
}

// ping checks the listening connection after a wait without a notification: an error
// when it does not answer within pingTimeout. Notifications that arrive meanwhile are
// kept by pgx for the next wait.
func (n *Notifier) ping(ctx context.Context, conn *pgx.Conn) error {
	if err := conn.PgConn().Conn().SetReadDeadline(time.Time{}); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, n.pingTimeout)
	defer cancel()
	if _, err := conn.Exec(pctx, "SELECT 1"); err != nil {
		return fmt.Errorf("the listening connection did not answer a ping within %v: %w", n.pingTimeout, err)
	}
	return nil
}

func (n *Notifier) deliver(note repository.Notification) {
	n.mu.Lock()
	fns := make([]func(repository.Notification), 0, len(n.subs[note.TopicHash]))
	for s := range n.subs[note.TopicHash] {
		fns = append(fns, s.fn)
	}
	n.mu.Unlock()
	for _, fn := range fns {
		fn(note)
	}
}

func (n *Notifier) broadcast() {
	n.mu.Lock()
	var calls []func()
	for hash, subs := range n.subs {
		note := repository.Notification{Event: repository.EventWork, TopicHash: hash}
		for s := range subs {
			calls = append(calls, func() { s.fn(note) })
		}
	}
	n.mu.Unlock()
	for _, call := range calls {
		call()
	}
}

// backoff yields exponentially growing delays with jitter, capped.
type backoff struct {
	base, cap, cur time.Duration
}

func newBackoff(base, cap time.Duration) *backoff { return &backoff{base: base, cap: cap} }

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.base
	} else {
		b.cur = min(b.cur*2, b.cap)
	}
	// up to 25% jitter so that many processes do not retry in lockstep
	return b.cur + time.Duration(float64(b.cur)*0.25*rand.Float64())
}

func (b *backoff) reset() { b.cur = 0 }

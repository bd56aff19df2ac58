package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// queueReadTimeout bounds the database reads of one scrape: below Prometheus's default
// scrape timeout (10 s), so that a scrape of a slow database gets the error rather than
// giving up first.
const queueReadTimeout = 8 * time.Second

// queueStates are the states pgtask_queue_depth reports: the ones repository.Stats
// counts from its small index of unfinished tasks, exactly up to repository.StatsCap.
var queueStates = []repository.State{repository.Active, repository.Ready, repository.Expired, repository.Failed, repository.Suspended}

var (
	depthDesc = prometheus.NewDesc("pgtask_queue_depth",
		"Tasks of a topic in a state (ACTIVE, READY, EXPIRED, FAILED, SUSPENDED), counted up to 100 000.", []string{"topic", "state"}, nil)
	delayedDesc = prometheus.NewDesc("pgtask_queue_delayed",
		"READY tasks of a topic whose not-before time has not come yet, counted up to 100 000.", []string{"topic"}, nil)
	oldestDesc = prometheus.NewDesc("pgtask_queue_oldest_ready_seconds",
		"How long the longest-waiting pollable READY task of a topic has waited (0 when none).", []string{"topic"}, nil)
	rowsDesc = prometheus.NewDesc("pgtask_queue_rows_estimate",
		"The planner's estimate of all rows of a topic, finished ones included.", []string{"topic"}, nil)
	activeDesc = prometheus.NewDesc("pgtask_topic_active",
		"1 while a topic runs, 0 while it is paused.", []string{"topic"}, nil)
	limitDesc = prometheus.NewDesc("pgtask_topic_limit",
		"A limit of a topic (concurrency, key_concurrency, rate per second, rate_burst); only those set.", []string{"topic", "limit"}, nil)
	keysAtLimitDesc = prometheus.NewDesc("pgtask_topic_keys_at_limit",
		"Concurrency keys of a topic with a per-key limit that have that many tasks ACTIVE.", []string{"topic"}, nil)
	keysWaitingDesc = prometheus.NewDesc("pgtask_topic_keys_waiting",
		"Concurrency keys of a topic polled by key (a per-key limit or fair) with READY tasks, counted up to 10 000.", []string{"topic"}, nil)
	tokensDesc = prometheus.NewDesc("pgtask_topic_rate_tokens",
		"How many task starts a topic's rate limit allows now (whole or not), up to its burst.", []string{"topic"}, nil)
	ownersDesc = prometheus.NewDesc("pgtask_owners_live",
		"Owners (processes) that heart-beat within the default expiry timeout, the collector's own processor among them.", nil, nil)
)

// queueCollector reads the queue's state from the database at scrape time.
type queueCollector struct {
	pool   *pgxpool.Pool
	repo   *repository.Repository
	ttl    time.Duration
	topics []string // only these, when not empty
	// topicsOf, when set, names the topics at each read (a processor's): none, no
	// topic is read.
	topicsOf func() []string
	now      func() time.Time // injectable for tests
	// afterStats, when set (tests), runs between the read of the topics' stats and
	// that of their limits.
	afterStats func()
	// afterRead, when set (Instrument), runs at the end of each successful read of the
	// database: the series of removed schedules are dropped (a failure is ignored).
	afterRead func(ctx context.Context, h repository.Handle) error

	mu      sync.Mutex // held during a read: the scrapes that wait for it share its outcome
	read    time.Time
	metrics []prometheus.Metric // nil until a read succeeded
	// ended is when the last read ended, and failed its error (nil when it succeeded):
	// a scrape that arrived before then takes that outcome rather than read again.
	ended  time.Time
	failed error
}

// NewQueueCollector returns a collector of the queue's depth per topic and state, its
// delayed tasks, the age of its oldest pollable task (all from repository.StatsAll, one
// statement over the small indexes of unfinished tasks, so it stays cheap at millions of
// rows and thousands of topics), whether each topic runs, the limits of a limited topic
// with their use (repository.LimitUsageAll: keys at their limit, keys waiting, rate tokens
// left; one more statement for all the limited topics), and the number of live owners
// (repository.CountLiveOwners with processor.ExpiryTimeoutDefault: a processor's own
// owner included, so that every process of a fleet reports the same number). Given topics, it reports
// only those (a processor reports its own); otherwise every registered topic. A
// successful read is served for ttl, so frequent scrapes cost one read per ttl; ttl 0
// reads on every scrape. A read goes through one of the pool's connections, or, when
// none is free within a second, over a connection of its own for the read (made as the
// pool makes its connections), so that busy handlers do not fail the scrape. A failed
// read is reported to the scrape as an invalid metric carrying the error, and retried
// at the next scrape; a failure to connect, or a broken connection, is told without the
// database's address, name or user.
func NewQueueCollector(pool *pgxpool.Pool, repo *repository.Repository, ttl time.Duration, topics ...string) prometheus.Collector {
	return &queueCollector{pool: pool, repo: repo, ttl: ttl, topics: topics, now: time.Now}
}

// Describe sends the descriptors of every metric the collector exports.
func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{depthDesc, delayedDesc, oldestDesc, rowsDesc, activeDesc, ownersDesc,
		limitDesc, keysAtLimitDesc, keysWaitingDesc, tokensDesc} {
		ch <- d
	}
}

// attach makes the collector read the topics topicsOf names through pool and repo (a
// processor's, after another's: Metrics.Observe), from its next scrape on.
func (c *queueCollector) attach(pool *pgxpool.Pool, repo *repository.Repository, topicsOf func() []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pool, c.repo, c.topicsOf = pool, repo, topicsOf
	c.metrics, c.read, c.ended, c.failed = nil, time.Time{}, time.Time{}, nil
}

// Collect sends the cached metrics, reading them anew once they are older than the ttl.
// A scrape that arrives while a read runs takes that read's outcome, its failure too:
// while the database was slow, each waiting scrape read again after the one before it,
// for up to queueReadTimeout each, and they queued up beyond the scrapers' timeouts.
func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	arrived := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	shared := c.ended.After(arrived)
	if shared && c.failed != nil {
		ch <- prometheus.NewInvalidMetric(depthDesc, c.failed)
		return
	}
	if !shared && (c.metrics == nil || c.now().Sub(c.read) >= c.ttl) {
		metrics, err := c.collect()
		c.ended = c.now()
		if err != nil {
			c.failed = scrapeError(err)
			ch <- prometheus.NewInvalidMetric(depthDesc, c.failed)
			return
		}
		c.failed = nil
		c.metrics, c.read = metrics, c.ended
	}
	for _, m := range c.metrics {
		ch <- m
	}
}

// errCollector is the collector's own misconfiguration.
var errCollector = errors.New("queue collector: pool and repository are required")

// scrapeError is what a failed read tells the scrape (whoever reaches /metrics): the
// error itself, but for a failure to connect or of the network, which would name the
// database's address, name and user (repository.ClientText says what failed without).
func scrapeError(err error) error {
	var (
		connectErr *pgconn.ConnectError
		netErr     net.Error
	)
	if errors.As(err, &connectErr) || errors.As(err, &netErr) {
		return fmt.Errorf("queue collector: %s", repository.ClientText(err))
	}
	return err
}

// limits reports a limited topic's limits and their use u.
func limits(t repository.Topic, u repository.LimitUsage, gauge func(*prometheus.Desc, float64, ...string)) {
	if t.Concurrency > 0 {
		gauge(limitDesc, float64(t.Concurrency), t.Name, "concurrency")
	}
	if t.KeyConcurrency > 0 {
		gauge(limitDesc, float64(t.KeyConcurrency), t.Name, "key_concurrency")
		gauge(keysAtLimitDesc, float64(u.KeysAtLimit), t.Name)
	}
	if t.KeyConcurrency > 0 || t.Fair {
		gauge(keysWaitingDesc, float64(u.KeysWaiting), t.Name)
	}
	if t.Rate > 0 {
		gauge(limitDesc, float64(t.Rate)/t.RatePeriod.Seconds(), t.Name, "rate")
		gauge(limitDesc, float64(t.RateBurst), t.Name, "rate_burst")
		gauge(tokensDesc, u.Tokens, t.Name)
	}
}

// reader is the connection a read goes through, and done ends it: one of the pool's,
// when one is free within queueAcquireWait; else, every connection the pool may hold in
// use (a processor whose handlers hold them for long work, where a scrape waited out its
// 8 s and failed, the process's own series with it), a connection of its own made as
// the pool makes its connections, closed after the read; and when the database refuses
// that one too (a role's connection limit), the pool's first free one after all.
func (c *queueCollector) reader(ctx context.Context) (h repository.Handle, done func(), err error) {
	wait, cancel := context.WithTimeout(ctx, queueAcquireWait)
	pooled, err := c.pool.Acquire(wait)
	full := errors.Is(wait.Err(), context.DeadlineExceeded)
	cancel()
	if err == nil {
		return pooled, pooled.Release, nil
	}
	if !full || ctx.Err() != nil {
		// not for want of a free connection: a pool closed, the database down
		return nil, nil, err
	}
	conn, connErr := repository.ConnectAsPool(ctx, c.pool.Config())
	if connErr == nil {
		return conn, func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = conn.Close(ctx)
		}, nil
	}
	if pooled, err = c.pool.Acquire(ctx); err != nil {
		// the connection refused says why (the database down, its connection limit)
		return nil, nil, errors.Join(connErr, err)
	}
	return pooled, pooled.Release, nil
}

// queueAcquireWait is how long a read waits for one of the pool's connections before it
// makes one of its own.
const queueAcquireWait = time.Second

// collect reads the topics, their stats and the live owners.
func (c *queueCollector) collect() ([]prometheus.Metric, error) {
	if c.pool == nil || c.repo == nil {
		return nil, errCollector
	}
	ctx, cancel := context.WithTimeout(context.Background(), queueReadTimeout)
	defer cancel()
	h, done, err := c.reader(ctx)
	if err != nil {
		return nil, fmt.Errorf("queue collector: %w", err)
	}
	defer done()
	var topics []repository.TopicStatus
	if names := c.topics; c.topicsOf == nil || len(c.topicsOf()) > 0 {
		if c.topicsOf != nil {
			names = c.topicsOf()
		}
		var err error
		if topics, err = c.repo.StatsAll(ctx, h, names...); err != nil {
			return nil, fmt.Errorf("queue collector: %w", err)
		}
	}
	if c.afterStats != nil {
		c.afterStats()
	}
	var limited []string
	for _, t := range topics {
		if t.Limited() {
			limited = append(limited, t.Name)
		}
	}
	usage, err := c.repo.LimitUsageAll(ctx, h, limited...)
	if err != nil {
		return nil, fmt.Errorf("queue collector: %w", err)
	}
	var out []prometheus.Metric
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		for i := range labels {
			labels[i] = label(labels[i])
		}
		out = append(out, prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...))
	}
	for _, t := range topics {
		s := t.Stats
		counts := map[repository.State]int64{
			repository.Active: s.Active, repository.Ready: s.Ready, repository.Expired: s.Expired,
			repository.Failed: s.Failed, repository.Suspended: s.Suspended,
		}
		for _, state := range queueStates {
			gauge(depthDesc, float64(counts[state]), t.Name, state.String())
		}
		gauge(delayedDesc, float64(s.Delayed), t.Name)
		gauge(oldestDesc, s.OldestReady.Seconds(), t.Name)
		gauge(rowsDesc, float64(s.RowsEstimate), t.Name)
		active := 0.0
		if t.Active {
			active = 1
		}
		gauge(activeDesc, active, t.Name)
		// a topic destroyed since StatsAll read it has no limits left to show
		if u, ok := usage[t.Name]; ok {
			limits(t.Topic, u, gauge)
		}
	}
	owners, err := c.repo.CountLiveOwners(ctx, h, processor.ExpiryTimeoutDefault)
	if err != nil {
		return nil, fmt.Errorf("queue collector: %w", err)
	}
	gauge(ownersDesc, float64(owners))
	if c.afterRead != nil {
		// housekeeping: a failure leaves the removed schedules' series to the next read,
		// and takes nothing from this one
		_ = c.afterRead(ctx, h)
	}
	return out, nil
}

package metrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// queueReadTimeout bounds the database reads of one scrape.
const queueReadTimeout = 10 * time.Second

// queueStates are the states pgtask_queue_depth reports: the ones repository.Stats
// counts exactly from its small index of unfinished tasks.
var queueStates = []repository.State{repository.Active, repository.Ready, repository.Expired, repository.Failed, repository.Suspended}

var (
	depthDesc = prometheus.NewDesc("pgtask_queue_depth",
		"Tasks of a topic in a state (ACTIVE, READY, EXPIRED, FAILED, SUSPENDED).", []string{"topic", "state"}, nil)
	delayedDesc = prometheus.NewDesc("pgtask_queue_delayed",
		"READY tasks of a topic whose not-before time has not come yet.", []string{"topic"}, nil)
	oldestDesc = prometheus.NewDesc("pgtask_queue_oldest_ready_seconds",
		"How long the longest-waiting pollable READY task of a topic has waited (0 when none).", []string{"topic"}, nil)
	rowsDesc = prometheus.NewDesc("pgtask_queue_rows_estimate",
		"The planner's estimate of all rows of a topic, finished ones included.", []string{"topic"}, nil)
	activeDesc = prometheus.NewDesc("pgtask_topic_active",
		"1 while a topic runs, 0 while it is paused.", []string{"topic"}, nil)
	ownersDesc = prometheus.NewDesc("pgtask_owners_live",
		"Owners (processes) that heart-beat within the default expiry timeout, other than the collector's own repository owner.", nil, nil)
)

// queueCollector reads the queue's state from the database at scrape time.
type queueCollector struct {
	pool   *pgxpool.Pool
	repo   *repository.Repository
	ttl    time.Duration
	topics []string         // only these, when not empty
	now    func() time.Time // injectable for tests

	mu      sync.Mutex // held during a read: concurrent scrapes share it
	read    time.Time
	metrics []prometheus.Metric // nil until a read succeeded
}

// NewQueueCollector returns a collector of the queue's depth per topic and state, its
// delayed tasks, the age of its oldest pollable task (all from repository.StatsAll, one
// statement over the small indexes of unfinished tasks, so it stays cheap at millions of
// rows and thousands of topics), whether each topic runs, and the number of live owners
// (repository.LiveOwners with processor.ExpiryTimeoutDefault). Given topics, it reports
// only those (a processor reports its own); otherwise every registered topic. A
// successful read is served for ttl, so frequent scrapes cost one read per ttl; ttl 0
// reads on every scrape. A failed read is reported to the scrape as an invalid metric
// carrying the error, and retried at the next scrape.
func NewQueueCollector(pool *pgxpool.Pool, repo *repository.Repository, ttl time.Duration, topics ...string) prometheus.Collector {
	return &queueCollector{pool: pool, repo: repo, ttl: ttl, topics: topics, now: time.Now}
}

// Describe sends the descriptors of every metric the collector exports.
func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{depthDesc, delayedDesc, oldestDesc, rowsDesc, activeDesc, ownersDesc} {
		ch <- d
	}
}

// Collect sends the cached metrics, reading them anew once they are older than the ttl.
func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.metrics == nil || c.now().Sub(c.read) >= c.ttl {
		metrics, err := c.collect()
		if err != nil {
			ch <- prometheus.NewInvalidMetric(depthDesc, err)
			return
		}
		c.metrics, c.read = metrics, c.now()
	}
	for _, m := range c.metrics {
		ch <- m
	}
}

// collect reads the topics, their stats and the live owners.
func (c *queueCollector) collect() ([]prometheus.Metric, error) {
	if c.pool == nil || c.repo == nil {
		return nil, errors.New("queue collector: pool and repository are required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), queueReadTimeout)
	defer cancel()
	topics, err := c.repo.StatsAll(ctx, c.pool, c.topics...)
	if err != nil {
		return nil, fmt.Errorf("queue collector: %w", err)
	}
	var out []prometheus.Metric
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
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
	}
	owners, err := c.repo.LiveOwners(ctx, c.pool, processor.ExpiryTimeoutDefault)
	if err != nil {
		return nil, fmt.Errorf("queue collector: %w", err)
	}
	gauge(ownersDesc, float64(len(owners)))
	return out, nil
}

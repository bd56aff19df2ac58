package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// Values of the result label of pgtask_tasks_completed_total besides the names of the
// final states (SUCCEEDED, FILTERED, SUSPENDED, FAILED).
const (
	// ResultRetried counts failures that went back to READY because the topic's retry
	// policy granted another attempt.
	ResultRetried = "RETRIED"
	// ResultSnoozed counts tasks put back to READY without using an attempt: snoozes, and
	// leased tasks handed back unstarted at shutdown.
	ResultSnoozed = "SNOOZED"
)

// maxTrackedSnoozes bounds the snoozes remembered between a handler's report and the
// commit. Entries only linger when a completion is never committed (its lease lost);
// when the bound is reached, those older than snoozeForgotten are forgotten, and if
// that frees nothing new snoozes are counted as RETRIED rather than growing memory.
const maxTrackedSnoozes = 10000

// snoozeForgotten is how long a snooze is remembered uncommitted before it may be
// forgotten: a completion commits within moments, or within its retries while the
// database is unreachable, well within it.
const snoozeForgotten = 15 * time.Minute

// Metrics holds the collectors fed by task managers and by expiry. Create it with New;
// it is safe for concurrent use.
type Metrics struct {
	completed *prometheus.CounterVec
	poll      *prometheus.HistogramVec
	complete  *prometheus.HistogramVec
	handler   *prometheus.HistogramVec
	batch     *prometheus.HistogramVec
	errors    *prometheus.CounterVec
	empty     *prometheus.CounterVec
	expired   *prometheus.CounterVec
	retried   *prometheus.CounterVec
	fires     *prometheus.CounterVec
	missed    *prometheus.CounterVec
	lateness  *prometheus.HistogramVec

	mu        sync.Mutex
	schedules map[string]struct{}  // the schedules with series
	snoozed   map[lease]snooze     // snooze decisions reported but not yet committed
	swept     time.Time            // the last time snoozed was full and its old entries dropped
	now       func() time.Time     // time.Now; injectable for tests
	queue     *queueCollector      // Instrument's, which Observe moves to another processor
	observed  *processor.Processor // the processor queue reads (Instrument's, or Observe's)
}

// lease names one attempt of a task.
type lease struct {
	topic    string
	sequence int64
	attempt  int32
}

// latencyBuckets span a fast poll (1 ms) to a slow handler (5 min), in seconds.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

// New creates the collectors of the managers' and expiries' series and registers them
// on reg (nil registers nothing). Like prometheus.MustRegister, it panics when they are
// already registered there. Feed them with Listener; Instrument does all of it for a
// processor, the queue's series included.
func New(reg prometheus.Registerer) *Metrics {
	m := newMetrics()
	if reg != nil {
		reg.MustRegister(m.collectors()...)
	}
	return m
}

// QueueTTLDefault is how long the queue collector that Instrument registers serves one
// read of the queue (the pgtask binaries use the same).
const QueueTTLDefault = 5 * time.Second

// Instrument wires every series the pgtask binaries export into a Go program's
// processor: it registers on reg the collectors of New, observes every manager and the
// expiries of p with them (Processor.Observe), and registers a queue collector
// (NewQueueCollector) of the topics p manages, read at most every QueueTTLDefault, which
// also drops the series of the schedules removed since they fired. Call
// it before p.Run, and serve reg (promhttp, or Handler):
//
//	m, err := metrics.Instrument(prometheus.DefaultRegisterer, p)
//
// It fails, registering nothing, when the series are already registered on reg or p
// is running. A program with more than one processor instruments each on reg wrapped
// with a label of its own (every one of them: a series has the same labels
// throughout a registry), so that their series stay apart:
//
//	metrics.Instrument(prometheus.WrapRegistererWith(prometheus.Labels{"processor": "mail"}, reg), mail)
//	metrics.Instrument(prometheus.WrapRegistererWith(prometheus.Labels{"processor": "bulk"}, reg), bulk)
func Instrument(reg prometheus.Registerer, p *processor.Processor) (*Metrics, error) {
	m := newMetrics()
	queue := &queueCollector{pool: p.Pool(), repo: p.Repository(), ttl: QueueTTLDefault, topicsOf: p.Topics, now: time.Now}
	m.pruneAfterReads(queue)
	m.queue, m.observed = queue, p
	var registered []prometheus.Collector
	undo := func() {
		for _, c := range registered {
			reg.Unregister(c)
		}
	}
	for _, c := range append(m.collectors(), queue) {
		if err := reg.Register(c); err != nil {
			undo()
			return nil, fmt.Errorf("metrics: instrument: %w", err)
		}
		registered = append(registered, c)
	}
	if err := p.Observe(m.Listener()); err != nil {
		undo()
		return nil, fmt.Errorf("metrics: instrument: %w", err)
	}
	return m, nil
}

// Observe moves m, made by Instrument, to p: a processor that replaces the one m
// instruments (Run serves once, so a program that restarts its processor makes a new
// one). p's managers and expiries feed the same series from then on, and the queue's
// series read p's topics through p's pool (the old processor's may be closed). Call it
// before p.Run; the old processor must have stopped, or its managers go on feeding the
// series too. It fails when m was made by New (give p.Observe its Listener) or p is
// running.
func (m *Metrics) Observe(p *processor.Processor) error {
	if m.queue == nil {
		return errors.New("metrics: observe: made by New, not Instrument: give p.Observe its Listener")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if p == m.observed {
		// its managers would feed every series twice
		return errors.New("metrics: observe: the processor these metrics observe already")
	}
	if err := p.Observe(m.Listener()); err != nil {
		return fmt.Errorf("metrics: observe: %w", err)
	}
	m.queue.attach(p.Pool(), p.Repository(), p.Topics)
	m.observed = p
	return nil
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.completed, m.poll, m.complete, m.handler, m.batch, m.errors, m.empty, m.expired, m.retried, m.fires, m.missed, m.lateness}
}

func newMetrics() *Metrics {
	return &Metrics{
		completed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgtask_tasks_completed_total",
			Help: "Tasks whose decision was committed, by topic and result (the stored state; RETRIED: a failure going back to READY for another attempt; SNOOZED: back to READY without using an attempt).",
		}, []string{"topic", "result"}),
		poll: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pgtask_poll_duration_seconds",
			Help:    "Time one poll took, empty polls included.",
			Buckets: latencyBuckets,
		}, []string{"topic"}),
		complete: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pgtask_complete_duration_seconds",
			Help:    "Time one flush of decisions took to commit.",
			Buckets: latencyBuckets,
		}, []string{"topic"}),
		handler: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pgtask_handler_duration_seconds",
			Help:    "Time from handing a batch to the handler until it reported decisions (for a task a TaskFunc decides alone, from its start on that task).",
			Buckets: latencyBuckets,
		}, []string{"topic"}),
		batch: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pgtask_batch_size",
			Help:    "Tasks leased by one non-empty poll.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11), // 1 … 1024
		}, []string{"topic"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgtask_errors_total",
			Help: "Errors a task manager met (database errors, handler misbehaviour, fatal stops).",
		}, []string{"topic"}),
		empty: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgtask_empty_polls_total",
			Help: "Polls that found no pollable task.",
		}, []string{"topic"}),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgtask_tasks_expired_total",
			Help: "Leases of dead owners taken back by this process's expiry, retried ones included.",
		}, []string{"topic"}),
		retried: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgtask_tasks_retried_total",
			Help: "Expired leases put back to READY because the topic's retry policy granted another attempt.",
		}, []string{"topic"}),
		fires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgtask_schedule_fires_total",
			Help: "Fire times of schedules this process pushed, by schedule.",
		}, []string{"schedule"}),
		missed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgtask_schedule_missed_total",
			Help: "Fire times of schedules found late and not pushed (beyond the schedule's catch-up), by schedule.",
		}, []string{"schedule"}),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pgtask_schedule_lateness_seconds",
			Help:    "How long after its latest fire time a schedule's fire was pushed, by schedule.",
			Buckets: latencyBuckets,
		}, []string{"schedule"}),
		schedules: make(map[string]struct{}),
		snoozed:   make(map[lease]snooze),
		now:       time.Now,
	}
}

// Listener returns a processor.Listener that records the managers' events and the
// expiries: give it to a processor (Processor.Observe), or the same one to every
// manager (the topic is a label) with OnExpire to processor.Config.
func (m *Metrics) Listener() processor.Listener {
	return processor.Listener{
		OnExpire: m.OnExpire,
		OnFire:   m.OnFire,
		OnDispatch: func(topic string, tasks []repository.Task, poll time.Duration) {
			m.poll.WithLabelValues(label(topic)).Observe(poll.Seconds())
			m.batch.WithLabelValues(label(topic)).Observe(float64(len(tasks)))
		},
		OnEmpty: func(topic string, poll time.Duration) {
			m.poll.WithLabelValues(label(topic)).Observe(poll.Seconds())
			m.empty.WithLabelValues(label(topic)).Inc()
		},
		OnCallback: func(topic string, tasks []repository.Task, decisions map[int64]repository.Decision, handling time.Duration) {
			m.handler.WithLabelValues(label(topic)).Observe(handling.Seconds())
			m.rememberSnoozes(topic, tasks, func(t repository.Task) bool { return decisions[t.Sequence].Snooze })
		},
		// Tasks handed back unstarted are no handler's work: not timed, but counted as
		// SNOOZED once committed (READY, no attempt used).
		OnHandBack: func(topic string, tasks []repository.Task) {
			m.rememberSnoozes(topic, tasks, func(repository.Task) bool { return true })
		},
		OnComplete: func(topic string, tasks []repository.Task, flush time.Duration) {
			m.complete.WithLabelValues(label(topic)).Observe(flush.Seconds())
			for _, t := range tasks {
				m.completed.WithLabelValues(label(topic), m.result(topic, t)).Inc()
			}
		},
		OnError: func(topic string, _ error) {
			m.errors.WithLabelValues(label(topic)).Inc()
		},
		OnFatal: func(topic string, _ error) {
			m.errors.WithLabelValues(label(topic)).Inc()
		},
	}
}

// rememberSnoozes notes the tasks of a report that snoozed tells are snoozed (or handed
// back): once committed, a snoozed task is READY just like a failure granted a retry,
// and only the decision tells them apart.
func (m *Metrics) rememberSnoozes(topic string, tasks []repository.Task, snoozed func(repository.Task) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var now time.Time
	for _, t := range tasks {
		if !snoozed(t) {
			continue
		}
		if now.IsZero() {
			now = m.now()
		}
		if len(m.snoozed) >= maxTrackedSnoozes && now.Sub(m.swept) >= time.Second {
			// full: forget the snoozes whose completion was never committed (at most a
			// sweep a second, when the entries are all recent)
			m.swept = now
			for l, s := range m.snoozed {
				if now.Sub(s.at) >= snoozeForgotten {
					delete(m.snoozed, l)
				}
			}
		}
		if len(m.snoozed) < maxTrackedSnoozes {
			m.snoozed[lease{topic, t.Sequence, t.Attempt}] = snooze{at: now, returned: t.Returned}
		}
	}
}

// snooze is a snooze decision reported: when, and the lease's Returned before it.
type snooze struct {
	at       time.Time
	returned int32
}

// result is the result label of a committed task, from the task as stored.
func (m *Metrics) result(topic string, t repository.Task) string {
	key := lease{topic, t.Sequence, t.Attempt}
	m.mu.Lock()
	s, ok := m.snoozed[key]
	delete(m.snoozed, key)
	m.mu.Unlock()
	// a snooze committed gives the lease back (Returned); one whose commit was refused
	// and replaced by a failure (the processor's "decisions could not be committed")
	// did not: a retry
	snoozed := ok && t.Returned > s.returned
	switch {
	case t.State == repository.Ready && snoozed:
		return ResultSnoozed
	case t.State == repository.Ready:
		return ResultRetried
	}
	return t.State.String()
}

// OnExpire records what an expiry took back; it matches processor.Config.OnExpire.
func (m *Metrics) OnExpire(expired []repository.Expiry) {
	for _, e := range expired {
		m.expired.WithLabelValues(label(e.Topic)).Add(float64(e.Expired))
		m.retried.WithLabelValues(label(e.Topic)).Add(float64(e.Retried))
	}
}

// OnFire records what a round of firing schedules pushed; it matches
// processor.Config.OnFire.
func (m *Metrics) OnFire(fires []repository.Fire) {
	// under the lock, so that a concurrent ForgetSchedule of a name cannot leave series
	// it no longer tracks
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range fires {
		m.schedules[f.Schedule] = struct{}{}
		m.fires.WithLabelValues(label(f.Schedule)).Add(float64(len(f.Times)))
		m.missed.WithLabelValues(label(f.Schedule)).Add(float64(f.Missed))
		m.lateness.WithLabelValues(label(f.Schedule)).Observe(f.Lateness().Seconds())
	}
}

// ForgetSchedule removes the series of a schedule (pgtask_schedule_fires_total,
// pgtask_schedule_missed_total, pgtask_schedule_lateness_seconds): call it when the
// schedule is removed, or its series stay for the life of the process. Instrument's
// queue collector, and Metrics.NewQueueCollector's, do it for the schedules they find
// removed.
func (m *Metrics) ForgetSchedule(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.schedules, name)
	m.fires.DeleteLabelValues(label(name))
	m.missed.DeleteLabelValues(label(name))
	m.lateness.DeleteLabelValues(label(name))
}

// NewQueueCollector is the package's NewQueueCollector whose reads also drop m's series
// of the schedules removed since they fired, as Instrument's queue collector does: for a
// program that fires schedules (processor.RunSchedules with m.OnFire) without a
// processor to instrument, such as `pgtask serve`.
func (m *Metrics) NewQueueCollector(pool *pgxpool.Pool, repo *repository.Repository, ttl time.Duration, topics ...string) prometheus.Collector {
	queue := &queueCollector{pool: pool, repo: repo, ttl: ttl, topics: topics, now: time.Now}
	m.pruneAfterReads(queue)
	return queue
}

// pruneAfterReads makes each read of queue forget the series of removed schedules.
func (m *Metrics) pruneAfterReads(queue *queueCollector) {
	queue.afterRead = func(ctx context.Context, h repository.Handle) error {
		return m.forgetRemovedSchedules(func(names []string) ([]string, error) {
			return queue.repo.ExistingSchedules(ctx, h, names...)
		})
	}
}

// forgetRemovedSchedules forgets the series of the schedules with series that are not
// among the existing ones that exist returns (one read of those names).
func (m *Metrics) forgetRemovedSchedules(exist func(names []string) ([]string, error)) error {
	m.mu.Lock()
	names := make([]string, 0, len(m.schedules))
	for name := range m.schedules {
		names = append(names, name)
	}
	m.mu.Unlock()
	if len(names) == 0 {
		return nil
	}
	existing, err := exist(names)
	if err != nil {
		return err
	}
	kept := make(map[string]bool, len(existing))
	for _, name := range existing {
		kept[name] = true
	}
	for _, name := range names {
		if !kept[name] {
			m.ForgetSchedule(name)
		}
	}
	return nil
}

// Handler serves the metrics gathered by g in the Prometheus exposition format. When a
// collector fails (say the queue collector cannot reach the database) the scrape fails
// with status 500 and the error text, so Prometheus marks the target down rather than
// silently serving a partial picture. The queue collector's text names what failed but
// never the database's address, name or user (NewQueueCollector).
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
}

// label is s as a label value: Prometheus takes UTF-8 only, and refuses (panics, in a
// Vec) any other, where a topic or schedule of a database whose encoding is not UTF-8
// (LATIN1, say: pgx then reads its text byte for byte) may hold other bytes. Each byte
// that is not UTF-8 is written \xNN, so that names stay apart.
func label(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n == 1 {
			fmt.Fprintf(&b, "\\x%02x", s[0])
		} else {
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

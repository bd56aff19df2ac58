// Package metrics exports pgtask's Prometheus metrics with the official client: the
// series the pgtask binaries serve at /metrics, for a Go program that embeds a
// processor.
//
// # Wiring
//
// A program that runs a processor wires every series with one call, before p.Run:
//
//	p, err := processor.New(processor.Config{Pool: pool})
//	...
//	m, err := metrics.Instrument(prometheus.DefaultRegisterer, p)
//
// and serves the registry as it already does (promhttp.Handler(), or Handler here).
// A scrape whose read of the queue fails (the database down or slow: the read is given
// 8 s, below Prometheus's default scrape timeout) fails whole with the default
// promhttp.Handler(), the program's own series with it; to keep those, register pgtask
// on a registry of its own served at a path of its own, or serve the shared one with
// promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}, which serves the rest
// and leaves the queue's series out while the read fails.
// [Instrument] feeds three sources, which a program can also wire one by one:
//
//   - [Metrics.Listener] observes task managers (processor.Processor.Observe, or
//     processor.ManagerConfig.Listener), a processor's expiry of dead owners' leases and
//     its schedules' fires: given to managers one by one, pass its OnExpire to
//     processor.Config.OnExpire and its OnFire to processor.Config.OnFire.
//   - [NewQueueCollector] reads the queue itself at scrape time, cached for a while so
//     frequent scrapes cost the database little. A program that only pushes tasks
//     registers just this one.
//   - [Handler] serves a registry, failing the scrape when a collector fails.
//
// # Series
//
// From the managers: pgtask_tasks_completed_total{topic,result} (result: the stored
// state, or RETRIED, SNOOZED), pgtask_poll_duration_seconds, pgtask_handler_duration_seconds,
// pgtask_complete_duration_seconds, pgtask_batch_size, pgtask_errors_total and
// pgtask_empty_polls_total, each by topic. From the expiry:
// pgtask_tasks_expired_total and pgtask_tasks_retried_total by topic: an expiry takes
// back dead owners' leases of every topic, so these count the topics whose leases this
// process took back, its own or not (sum them over the fleet). From the schedules
// this process fires (Metrics.OnFire): pgtask_schedule_fires_total,
// pgtask_schedule_missed_total and pgtask_schedule_lateness_seconds by schedule (a
// removed schedule's series are dropped by Instrument's queue collector, by one made
// with Metrics.NewQueueCollector, or by Metrics.ForgetSchedule). From the
// queue: pgtask_queue_depth{topic,state}, pgtask_queue_delayed,
// pgtask_queue_oldest_ready_seconds, pgtask_queue_rows_estimate and pgtask_topic_active by
// topic; for limited topics pgtask_topic_limit{topic,limit}, pgtask_topic_keys_at_limit,
// pgtask_topic_keys_waiting and pgtask_topic_rate_tokens; and pgtask_owners_live.
// The depths and pgtask_queue_delayed are repository.Stats' counts, which stop at
// repository.StatsCap (100 000) so that a scrape's reads stay bounded: a gauge at that
// value means that many tasks or more. A topic or schedule name is its label as it is;
// one that is not UTF-8 (from a database whose encoding is not) has each byte that is
// not written \xNN, since Prometheus takes UTF-8 only.
//
// # Cost
//
// The queue collector reads every topic in two statements (repository.StatsAll, then
// repository.LimitUsageAll for the limited ones, in a transaction of its own without
// JIT), whatever their number, then counts the live owners; 10 000 topics are read in
// under a second (BENCHMARKS.md). Each topic has nine series of the queue (five depths,
// delayed, oldest, rows estimate, active), a limited one up to seven more, and each topic
// a manager polled about 80 more from the managers (three histograms of 19 series each,
// the batch sizes' 14, up to six results, the errors and empty polls): with thousands
// of topics, give NewQueueCollector the topics worth watching, or drop series at the
// scrape. On a distributed database (Citus) repository.StatsAll reads the topics a
// statement each, so that a collector of every topic makes one per topic at each
// scrape, within the read's 8 s: there, give it the topics worth watching.
//
// # Many processes
//
// The queue's series are the database's state, not a process's: every process whose
// collector reads a topic reports the same values for it (pgtask serve and pgtask dev
// read every topic). Aggregate them across processes with max (or avg) by topic, not
// sum. The managers' and the expiries' series are each process's own: sum them.
package metrics

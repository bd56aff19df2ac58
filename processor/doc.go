// Package processor turns queued tasks into work: one Processor per process, one
// TaskManager per topic it serves. The README's "The processor" section shows it in use.
//
// # A tour
//
// A Processor owns the process-wide parts. It registers the repository's owner,
// heart-beats every HeartbeatInterval and, on the same tick, expires the leases of owners
// that stopped heart-beating (so a killed process's tasks come back within a few
// seconds), purges dead owners, notices cancels it missed, re-reads each topic's
// activation and limits and applies each topic's retention. It holds the ONE listening
// connection of the process (Notifier) and routes task_notification events to its
// managers: WORK wakes them, ACTIVATION re-reads the topic's activation and limits,
// CANCEL cancels a running task's context. Every HeartbeatInterval it also fires the
// database's due schedules (Repository.FireSchedules: each fire time is pushed once
// however many processors run; Config.DisableSchedules opts out), so a schedule fires
// late by at most one interval while any processor runs.
//
// A TaskManager polls one topic (Manage, once per topic): it leases batches (size,
// FIFO/LIFO order, condition), hands each to its Handler and commits the decisions. When
// the topic runs dry it hibernates until a NOTIFY, a Resume or its PauseInterval; a
// wake-up that arrives while a batch runs is kept. It backs off on database errors and
// stops polling while its topic is paused. Decisions of many tasks and batches are
// committed together in ONE statement (the completer), in one transaction with the
// follow-up pushes and junctions the handlers declared; no transaction is open while a
// handler runs.
//
// A Handler receives a *Batch and gives each task one decision: Batch.Decide for one
// task, committed in the next flush whatever its batch mates do, Batch.Complete for all
// those left (tasks without one fail) or Batch.Fail. Reports may come from any goroutine,
// after Handle returned; the Batch documentation states the contract in full. Adapters:
// TaskFunc (one task at a time, each with its own context and decided as it returns),
// BatchFunc, Typed (JSON input decoded into a struct), Buffer (a bounded prefetch queue in
// front of a pool of workers that grows and shrinks with the backlog) and Composite (a
// DAG of named steps). NewBatch runs any of them outside a processor, as package
// pgtasktest does in tests.
//
// Run(ctx) runs until ctx is done, then shuts down gracefully: polling stops, tasks that
// were leased but never started are handed back (READY, the attempt not used), running
// handlers get ShutdownTimeout to decide, and every decision is committed; then the
// tasks a handler started and did not decide fail with a message saying so (the retry
// policy applies), and those it never started are handed back.
//
// Wait waits for given tasks to finish and Subscribe streams every task the processor
// commits. The Logger hears of failed, retried and dead-lettered tasks, of what a
// shutdown handed back, of handler misbehaviour and of database errors (once per cause),
// each task line with its topic, sequence, identifier and attempt; a happy run logs
// nothing at INFO.
//
// Limiter bounds the batches a manager has outstanding; a PriorityLimiter shares slots
// among managers so one process can serve many topics fairly. Listener observes a
// manager (start, dispatch, callback, complete, error, empty, fatal) for logs and
// metrics; Observe gives one to every manager of a processor, and its expiries (package
// metrics wires its Prometheus series so: metrics.Instrument).
//
// A processor allocates a few kilobytes per task on a small live heap, so at Go's default
// GOGC of 100 the collector runs many times a second; pgtask's own binaries use 400
// (debug.SetGCPercent) unless the environment sets GOGC, which cut their CPU by about a
// third. Next to PostgreSQL on a small machine, GOMAXPROCS=1 leaves the other cores to
// the database (BENCHMARKS.md).
package processor

// Package processor turns queued tasks into work: one Processor per process, one
// TaskManager per topic it serves (design §6–§7).
//
// # A tour
//
// A Processor owns the process-wide parts. It registers the repository's owner,
// heart-beats every HeartbeatInterval and, on the same tick, expires the leases of owners
// that stopped heart-beating (so a killed process's tasks come back within a few
// seconds), purges dead owners, notices cancels it missed, re-reads pause/resume state
// and applies each topic's retention. It holds the ONE listening connection of the
// process (Notifier) and routes task_notification events to its managers: WORK wakes
// them, ACTIVATION re-reads pause state, CANCEL cancels a running task's context.
//
// A TaskManager polls one topic: it leases batches (size, FIFO/LIFO order, condition),
// hands each to its Handler and commits the decisions. When the topic runs dry it
// hibernates until a NOTIFY, a Resume or its PauseInterval; a wake-up that arrives while
// a batch runs is kept. It backs off on database errors and stops polling while its topic
// is paused. Decisions of many batches are committed together in ONE statement (the
// completer), in one transaction with the follow-up pushes and junctions the handlers
// declared; no transaction is open while a handler runs.
//
// A Handler receives a *Batch and must report exactly once: Batch.Complete with a
// decision per task (tasks without one fail; decisions for foreign tasks fail the batch)
// or Batch.Fail. Reports may come from any goroutine, after Handle returned. Adapters:
// TaskFunc (one task at a time, each with its own context), BatchFunc, Typed (JSON input
// decoded into a struct), Buffer (a bounded prefetch queue in front of a pool of workers
// that grows and shrinks with the backlog) and Composite (a DAG of named steps).
//
// Run(ctx) runs until ctx is done, then shuts down gracefully: polling stops, tasks that
// were leased but never started are handed back (READY, the attempt not used), running
// handlers get ShutdownTimeout to report and their decisions are committed; what is
// still running then fails with a message saying so.
//
// Limiter bounds the batches a manager has outstanding; a PriorityLimiter shares slots
// among managers so one process can serve many topics fairly. Listener observes a
// manager (start, dispatch, callback, complete, error, empty, fatal) for logs and metrics.
//
// A processor allocates a few kilobytes per task on a small live heap, so at Go's default
// GOGC of 100 the collector runs many times a second; pgtask's own binaries use 400
// (debug.SetGCPercent) unless the environment sets GOGC, which cut their CPU by about a
// third. Next to PostgreSQL on a small machine, GOMAXPROCS=1 leaves the other cores to
// the database (BENCHMARKS.md).
package processor

// Package repository is pgtask's queue on PostgreSQL: every operation on topics, owners
// and tasks, each run as a few (usually one) SQL statements on a handle the caller gives.
// It holds no state of its own besides its owner name; all queue state lives in the
// database, so any number of processes can share one.
//
// # Getting started
//
// Apply the schema once with [Migrate] (safe to call from every process at start-up),
// create one [Repository] per process with [New], register its owner with
// [Repository.RegisterOwner] and create the topics it uses with [Repository.CreateTopic]
// (a new topic retries a failed task 25 times: [TopicSettings]; change some settings
// with [Repository.UpdateSettings]). Then [Repository.Push] tasks, [Repository.Poll]
// leases batches of them and [Repository.Complete] records a [Decision] for each leased
// task; package processor does the polling and completing for you. [Repository.Stats],
// [Repository.CountByState] and [Repository.Count] tell how many tasks are where.
//
// # Handles
//
// Every operation takes a [Handle]: a *pgxpool.Pool, a *pgx.Conn or an open pgx.Tx. The
// repository never commits for the caller, so a push inside the caller's transaction
// commits, and notifies listeners, together with the caller's own writes, or not at all.
// Operations that need several statements run them in a nested transaction (a savepoint
// inside the caller's), so a failed call leaves no partial effect behind; the exceptions
// are the operations over a whole state or topic, which on a pool commit a batch at a
// time so that no transaction grows with the topic ([Repository.Purge],
// [Repository.ReassignAll], [Repository.PurgeAll], [Repository.Destroy], and on Citus
// the expiry, a topic at a time): stopped or failing, they keep what they committed and
// say how much (in a caller's transaction, all of it commits or rolls back with it).
// Batch operations (push, poll, complete) are one statement whatever their size.
//
// # Errors
//
// Errors wrap one of the sentinels [ErrInvalid], [ErrUnknownTopic], [ErrUnknownTask],
// [ErrNotOwned], [ErrWrongState], [ErrQueueFull], [ErrNotRegistered] and
// [ErrSchemaMissing] (and a few more for storage and migrations), or a database error;
// test them with errors.Is. A batch refused because of some of its tasks returns a
// [*TaskError] naming each task and why (errors.As gives the detail); a push, reset,
// recreate or junction that would take a topic above its queue cap
// (TopicSettings.QueueCap) returns a [*QueueFullError]. A refused call writes nothing.
// Text is refused, never rewritten, when it is not UTF-8 or beyond its limit
// (MaxTopicLength and the others); [ValidateTopic], [ValidateIdentifier],
// [ValidateCanceller], [ValidateFilter] and [Creation.Validate] let a front end apply the
// same rules first.
//
// # States
//
// A task is in one of nine states ([State]) with fixed ordinals, visible in SQL: [Active] (0,
// leased), [Ready] (1), [Expired] (2, its owner stopped heart-beating), [Failed] (3, the
// dead-letter set), [Suspended] (4), [Filtered] (5), [Succeeded] (6), [Recreated] (7) and
// [Redundant] (8). A [Result] maps onto state result+3 when a task is completed. Pushes
// choose an [Insertion] mode that decides what happens to older tasks of the same
// identifier; polls choose an [Order] and a [Condition] that can keep tasks of one
// identifier in flight one at a time, in order. Revival ([Repository.Reassign],
// [Repository.Recreate]) brings finished tasks back; [Repository.Expire],
// [Repository.Purge] and [Repository.PurgeRetention] keep the tables healthy.
//
// # Schedules
//
// A [Schedule] pushes a task to a topic at each fire time of a cron spec in an IANA time
// zone ([ScheduleSettings]): create, change, pause and remove them with
// [Repository.CreateSchedule], [Repository.UpdateSchedule], [Repository.PauseSchedule],
// [Repository.ResumeSchedule] and [Repository.RemoveSchedule], read them with
// [Repository.Schedules]. [Repository.FireSchedules] pushes the due ones, each fire time
// exactly once however many processes call it (every processor does, on its heartbeat):
// a compare-and-set of the schedule's next fire time commits with the push. Bad input
// returns [ErrInvalid] naming the field, [ErrUnknownTopic], [ErrScheduleExists] or
// [ErrUnknownSchedule].
package repository

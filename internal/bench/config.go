package bench

import (
	"context"
	"os/exec"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/repository"
)

// Mode is what a run measures.
type Mode string

// The modes of a run.
const (
	// Burndown pushes Config.Tasks tasks, then processes them all; tasks/s counts from
	// the start of the push.
	Burndown Mode = "burndown"
	// Sustained pushes as fast as it can (or at Config.Rate) while the processors work,
	// for Config.Duration.
	Sustained Mode = "sustained"
	// Latency pushes one task at a time into an idle topic, each after the previous one
	// completed (or open loop at Config.Rate), and reports percentiles.
	Latency Mode = "latency"
)

// Connect opens a pool of at most maxConns connections on the benchmark's database,
// named application (PostgreSQL's application_name) unless the connection string names
// it, and checks that it answers.
type Connect func(ctx context.Context, application string, maxConns int32) (*pgxpool.Pool, error)

// Processing is what each processor of a run does, in this process or in a child.
type Processing struct {
	// Managers is the number of processors per process, each with its own pool, owner
	// and listening connection.
	Managers int
	// Workers is the number of handler workers per manager (a processor.Buffer when
	// above 1).
	Workers int
	// Queue is the number of prefetched batches waiting for a worker; 0: as many as
	// Workers when buffered, no Buffer at all when Workers is 1.
	Queue int
	// BatchSize is the most tasks one poll leases.
	BatchSize int
	// FlushSize is the most decisions committed in one statement.
	FlushSize int
	// FlushInterval is how long the completer waits for FlushSize decisions.
	FlushInterval time.Duration
	// HandlerDelay is the time the handler spends on each task.
	HandlerDelay time.Duration
	// VacuumEvery is as the processor binary's --vacuum-every: the processors VACUUM the
	// topic's table after every VacuumEvery tasks leased; 0 turns their VACUUM off.
	VacuumEvery int64
	// Condition and Order are those of the managers' polls.
	Condition repository.Condition
	Order     repository.Order
}

// Config is one run. cmd/pgtask checks the values of its flags before it builds one:
// Run trusts them.
type Config struct {
	Processing

	Mode Mode
	// Tasks is the number of tasks pushed (Burndown, Latency).
	Tasks int
	// Duration is how long Sustained runs; in Latency mode a limit on the run (0: none).
	Duration time.Duration
	// PushBatch is the number of tasks per push statement (Latency pushes one at a time).
	PushBatch int
	// PushLinger is, in Sustained mode at a Rate, the longest a pusher holds due tasks
	// back to fill a PushBatch; 0 pushes what is due at once.
	PushLinger time.Duration
	// Pushers is the number of concurrent pushing connections.
	Pushers int
	// Processes, when above 0, runs the managers in that many child processes, each
	// started with ChildCommand, instead of in this process.
	Processes int
	// Insertion is the push's insertion mode.
	Insertion repository.Insertion
	// Identifiers is the number of distinct identifiers cycled through; 0 gives every
	// task its own.
	Identifiers int
	// Rate is the tasks per second pushed in all in Sustained and Latency mode; 0: as
	// fast as possible (Latency: the next push after the previous task completed).
	Rate float64
	// Interval is the time between progress lines.
	Interval time.Duration
	// JSON prints one JSON object with the results as the last line.
	JSON bool
	// Migrate applies pending migrations first.
	Migrate bool
	// Topics is the number of topics the run pushes to (in turn) and processes,
	// processor i on topic i mod Topics.
	Topics int
	// Concurrency, when above 0, limits each of the run's topics to that many tasks
	// ACTIVE at once (repository.TopicSettings.Concurrency).
	Concurrency int32
	// Keys, when above 0, makes each of the run's topics fair
	// (repository.TopicSettings.Fair) and gives its tasks Keys concurrency keys in turn
	// (k0, k1, …), so that its polls take them key by key.
	Keys int
	// IdleTopics is the number of topics registered beside them, one per transaction,
	// idle during the run.
	IdleTopics int
	// Topic names the run's topic (with Topics above 1, the first; the others Topic-1…)
	// instead of bench-MODE-RANDOM. It must not exist.
	Topic string

	// Connect opens the run's pools: the pushers' and each in-process processor's.
	Connect Connect
	// ChildCommand returns the command of one child process (needed when Processes is
	// above 0): a program whose main calls RunChild with c. The engine connects its
	// standard input and output.
	ChildCommand func(c Child) (*exec.Cmd, error)
}

// Child is what one child process runs: Managers processors on Topic.
type Child struct {
	Processing
	Topic string
	// Record keeps the latency samples and reports them to the parent.
	Record bool
}

package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/bench"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

const benchAbout = `
Measures pgtask against a database. It registers its own topic (bench-<mode>-<random>),
or --topics of them, runs one of three modes, and destroys the topics at the end, also
when interrupted. With --topics K, the pushes go to the topics in turn and processor i
(in-process manager or child process) works on topic i mod K. With --idle-topics N, it
first registers N more topics, one per transaction, that stay idle during the run, and
destroys them after it (the registration time is reported). Run it on a database of
its own: its processors fire no schedule and purge nothing past a retention, but they
take back any dead owner's leases, remove dead owners' rows, and VACUUM and ANALYZE the
tables its topics share.

  burndown   push --tasks no-op tasks (in batches of --push-batch), then process them
             all. tasks/s is the tasks processed over the time from the start of the
             push (push included, as River counts it); push-only and process-only rates
             are reported too.
  sustained  producers push as fast as they can (or --rate tasks/s in all) while the
             processors work, for --duration; reports pushed/s, processed/s, the backlog
             at the end and how fast it grew over the second half, and the push →
             completed p99 of each --interval (the worst as
             completed_p99_ms_worst_interval in the JSON). At a --rate, each
             producer pushes --push-batch tasks as soon as that many are due, fewer once
             the oldest due task has waited --push-linger.
  latency    pushes one task at a time into an idle topic, each after the previous one
             completed (or open loop at --rate), and reports push→handler start and
             push→completed percentiles. The clock starts before the push statement.

Processing runs --managers processors in this process, each with its own pool, owner
and listening connection; with --processes N, each of N child processes of this binary
runs --managers of them instead. A processor's handler is the batch-at-a-time TaskFunc,
wrapped in a Buffer when --workers > 1 or --queue > 0.

Progress lines go to standard output every --interval; with --json the last line is
one JSON object (tasks_per_second; p50_ms, p95_ms, p99_ms in latency mode).`

// benchChildFlag, as the first argument, runs a child process of --processes (hidden).
const benchChildFlag = "--bench-child"

// runBench is "pgtask bench": its flags become a bench.Config for bench.Run, or, after
// benchChildFlag, a bench.Child for bench.RunChild.
func runBench(ctx context.Context, e *env, args []string) error {
	stderr := e.stderr
	if _, ok := stderr.(*os.File); !ok {
		// the children of --processes share stderr, each through a goroutine of os/exec
		// unless it is a file, and so do the processors' loggers
		stderr = &lockedWriter{w: stderr}
	}
	if len(args) > 0 && args[0] == benchChildFlag {
		return runBenchChild(ctx, e, args[1:], stderr)
	}
	cfg, err := parseBench(e, args)
	if err != nil {
		return err
	}
	return bench.Run(ctx, cfg, e.stdout, stderr)
}

// processingFlags are the flags shared by the bench command and its child processes:
// what each processor does, and the database.
type processingFlags struct {
	condition, order, url *string
}

// registerProcessing registers the shared flags, those with a type of their own into p.
func registerProcessing(f *flags, p *bench.Processing) processingFlags {
	f.IntVar(&p.Workers, "workers", 1, "`N` handler workers per manager (a Buffer when above 1)")
	f.IntVar(&p.Queue, "queue", 0, "prefetched batches (`N`) waiting for a worker; 0: as many as --workers when\nbuffered, no Buffer at all when --workers is 1")
	f.IntVar(&p.BatchSize, "batch-size", 1000, "most tasks (`N`) one poll leases")
	f.IntVar(&p.FlushSize, "flush-size", processor.FlushSizeDefault, "most decisions (`N`) committed in one statement")
	f.Var((*durationValue)(&p.FlushInterval), "flush-interval", "how long (`DURATION`) the completer waits for --flush-size decisions; 0 commits\nas soon as the previous commit is done")
	f.Var((*durationValue)(&p.HandlerDelay), "handler-delay", "time (`DURATION`) the handler spends on each task")
	f.IntVar(&p.Managers, "managers", 1, "processors (`N`), each with its own pool and owner, per process")
	f.Int64Var(&p.VacuumEvery, "vacuum-every", processor.VacuumEveryDefault, "the processors VACUUM the topic's table after every `N` tasks leased (a quarter\nof its rows when more); 0 leaves it to autovacuum")
	return processingFlags{
		condition: f.String("condition", "none", "poll `CONDITION`: none, singular-by-identifier, ...-suspend-on-failure,\n...-suspend-until-success"),
		order:     f.String("order", "fifo", "poll `ORDER`: fifo or lifo"),
		url:       f.databaseURL(),
	}
}

// check validates the shared flags and sets p's condition and order.
func (pf processingFlags) check(f *flags, p *bench.Processing) error {
	c, err := repository.ParseCondition(*pf.condition)
	if err != nil {
		return f.usagef("--condition: %s", stripInvalid(err))
	}
	p.Condition = c
	o, err := repository.ParseOrder(*pf.order)
	if err != nil {
		return f.usagef("--order: %s", stripInvalid(err))
	}
	p.Order = o
	for _, v := range []struct {
		name string
		n    int
	}{{"workers", p.Workers}, {"batch-size", p.BatchSize}, {"flush-size", p.FlushSize}, {"managers", p.Managers}} {
		if v.n < 1 {
			return f.usagef("--%s: %d is below 1", v.name, v.n)
		}
	}
	if p.Queue < 0 {
		return f.usagef("--queue: %d is negative", p.Queue)
	}
	if p.VacuumEvery < 0 {
		return f.usagef("--vacuum-every: %d is negative (0 turns the processors' VACUUM off)", p.VacuumEvery)
	}
	return nil
}

func parseBench(e *env, args []string) (bench.Config, error) {
	f := newFlags(e, "pgtask bench", "[flags]", benchAbout)
	var cfg bench.Config
	shared := registerProcessing(f, &cfg.Processing)
	mode := f.String("mode", string(bench.Burndown), "`MODE`: burndown, sustained or latency")
	insertion := f.String("insertion", "append", "push insertion `MODE`: append, replace, supersede or delete")
	f.IntVar(&cfg.Tasks, "tasks", 200000, "tasks (`N`) to push: burndown default 200000, latency default 1000")
	f.Var((*durationValue)(&cfg.Duration), "duration", "how long (`DURATION`) sustained mode runs (default 60s); in latency mode\na limit on the run")
	f.IntVar(&cfg.PushBatch, "push-batch", 5000, "tasks (`N`) per push statement (latency mode pushes one at a time)")
	cfg.PushLinger = 100 * time.Millisecond
	f.Var((*durationValue)(&cfg.PushLinger), "push-linger", "in sustained mode at a --rate, the longest (`DURATION`) a pusher holds due tasks\nback to fill a --push-batch; 0 pushes what is due at once")
	f.IntVar(&cfg.Pushers, "pushers", 1, "concurrent pushing connections (`N`)")
	f.IntVar(&cfg.Processes, "processes", 0, "run the managers in `N` child processes of this binary instead of in-process")
	f.IntVar(&cfg.Identifiers, "identifiers", 0, "distinct identifiers (`N`) cycled through; 0 gives every task its own")
	f.Float64Var(&cfg.Rate, "rate", 0, "tasks per second (`R`) pushed in all in sustained and latency mode; 0: as fast as\npossible (latency: the next push after the previous task completed)")
	f.Var((*durationValue)(&cfg.Interval), "interval", "progress report `INTERVAL`")
	f.BoolVar(&cfg.JSON, "json", false, "print one JSON object with the results as the last line")
	f.BoolVar(&cfg.Migrate, "migrate", false, "apply pending migrations first")
	f.IntVar(&cfg.Topics, "topics", 1, "topics (`K`) the run pushes to and processes, each processor on one of them")
	f.IntVar(&cfg.Keys, "keys", 0, "make the run's topics fair and give their tasks `N` concurrency keys in turn (0: no keys)")
	f.IntVar(&cfg.IdleTopics, "idle-topics", 0, "idle topics (`N`) registered before the run and destroyed after it")
	concurrency := f.Int("concurrency", 0, "limit the run's topics to `N` tasks ACTIVE at once across every process (0: no limit)")
	f.StringVar(&cfg.Topic, "topic", "", "`NAME` of the run's topic (with --topics, of the first, the others NAME-1...);\nit must not exist, and is destroyed at the end (default bench-MODE-RANDOM)")
	cfg.Interval = 2 * time.Second
	if err := f.noArgs(args); err != nil {
		return cfg, err
	}
	cfg.Mode = bench.Mode(*mode)
	switch cfg.Mode {
	case bench.Burndown, bench.Sustained, bench.Latency:
	default:
		return cfg, f.usagef("--mode: unknown mode %q (want burndown, sustained or latency)", *mode)
	}
	var err error
	if cfg.Insertion, err = f.parseInsertion("insertion", *insertion); err != nil {
		return cfg, err
	}
	if err := shared.check(f, &cfg.Processing); err != nil {
		return cfg, err
	}
	if cfg.Mode == bench.Latency && !f.given("tasks") {
		cfg.Tasks = 1000
	}
	if cfg.Mode == bench.Sustained && !f.given("duration") {
		cfg.Duration = time.Minute
	}
	if cfg.Mode == bench.Sustained && cfg.Duration <= 0 {
		return cfg, f.usagef("--duration: %v is not positive (a sustained run pushes for that long)", cfg.Duration)
	}
	if cfg.Interval <= 0 {
		return cfg, f.usagef("--interval: must be positive")
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"tasks", cfg.Tasks}, {"push-batch", cfg.PushBatch}, {"pushers", cfg.Pushers}, {"topics", cfg.Topics}} {
		if v.n < 1 {
			return cfg, f.usagef("--%s: %d is below 1", v.name, v.n)
		}
	}
	if *concurrency < 0 || *concurrency > 1<<31-1 {
		return cfg, f.usagef("--concurrency: %d is out of range 0..%d", *concurrency, 1<<31-1)
	}
	cfg.Concurrency = int32(*concurrency)
	if cfg.IdleTopics < 0 {
		return cfg, f.usagef("--idle-topics: %d is negative", cfg.IdleTopics)
	}
	if cfg.Keys < 0 {
		return cfg, f.usagef("--keys: %d is negative", cfg.Keys)
	}
	if cfg.Mode == bench.Latency && cfg.Topics > 1 {
		return cfg, f.usagef("--topics: latency mode measures one idle topic, got %d", cfg.Topics)
	}
	// processor i works on topic i mod K: every topic needs one
	if processors := max(cfg.Processes, 0); (processors == 0 && cfg.Managers < cfg.Topics) || (processors > 0 && processors < cfg.Topics) {
		return cfg, f.usagef("--topics: %d topics need as many processors (--managers, or --processes with them)", cfg.Topics)
	}
	if cfg.Processes < 0 || cfg.Identifiers < 0 || cfg.Rate < 0 || math.IsNaN(cfg.Rate) || math.IsInf(cfg.Rate, 0) {
		return cfg, f.usagef("--processes, --identifiers and --rate must not be negative")
	}
	url, err := f.requireURL(*shared.url)
	if err != nil {
		return cfg, err
	}
	cfg.Connect = benchConnect(url)
	cfg.ChildCommand = benchChildCommand(url)
	return cfg, nil
}

// benchConnect opens the benchmark's pools on url.
func benchConnect(url string) bench.Connect {
	return func(ctx context.Context, application string, maxConns int32) (*pgxpool.Pool, error) {
		return openPool(ctx, url, application, poolOptions{maxConns: maxConns})
	}
}

// benchChildCommand returns how the bench command starts a child process of
// --processes: this binary, run as "bench --bench-child" with the shared flags.
func benchChildCommand(url string) func(bench.Child) (*exec.Cmd, error) {
	return func(c bench.Child) (*exec.Cmd, error) {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find this binary for --processes: %w", err)
		}
		p := c.Processing
		// the URL, which may hold a password, goes through the environment, where ps
		// does not show it to the machine's other users
		cmd := exec.Command(exe, "bench", benchChildFlag,
			"--workers", strconv.Itoa(p.Workers), "--queue", strconv.Itoa(p.Queue),
			"--batch-size", strconv.Itoa(p.BatchSize), "--flush-size", strconv.Itoa(p.FlushSize),
			"--flush-interval", p.FlushInterval.String(), "--handler-delay", p.HandlerDelay.String(),
			"--managers", strconv.Itoa(p.Managers), "--vacuum-every", strconv.FormatInt(p.VacuumEvery, 10),
			"--condition", strings.ToLower(p.Condition.String()), "--order", p.Order.String(),
			"--topic", c.Topic, "--record="+strconv.FormatBool(c.Record))
		cmd.Env = append(os.Environ(), "DATABASE_URL="+url) // the last of a name wins
		return cmd, nil
	}
}

// runBenchChild is one child process of --processes (see benchChildCommand): it runs
// processors on --topic until its standard input closes (or a signal), reporting on
// standard output.
func runBenchChild(ctx context.Context, e *env, args []string, stderr io.Writer) error {
	f := newFlags(e, "pgtask bench "+benchChildFlag, "[flags]", "")
	var c bench.Child
	shared := registerProcessing(f, &c.Processing)
	f.StringVar(&c.Topic, "topic", "", "topic")
	f.BoolVar(&c.Record, "record", false, "record latencies")
	if err := f.noArgs(args); err != nil {
		return err
	}
	if err := shared.check(f, &c.Processing); err != nil {
		return err
	}
	url, err := f.requireURL(*shared.url) // DATABASE_URL, as the parent sets it
	if err != nil {
		return err
	}
	return bench.RunChild(ctx, c, benchConnect(url), e.stdin, e.stdout, stderr)
}

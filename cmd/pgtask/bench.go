package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/gctune"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

const benchAbout = `
Measures pgtask against a database. It registers its own topic (bench-<mode>-<random>),
or --topics of them, runs one of three modes, and destroys the topics at the end, also
when interrupted. With --topics K, the pushes go to the topics in turn and processor i
(in-process manager or child process) works on topic i mod K. With --idle-topics N, it
first registers N more topics, one per transaction, that stay idle during the run, and
destroys them after it (the registration time is reported).

  burndown   push --tasks no-op tasks (in batches of --push-batch), then process them
             all. tasks/s counts from the start of the push (push included, as River
             counts it); push-only and process-only rates are reported too.
  sustained  producers push as fast as they can (or --rate tasks/s in all) while the
             processors work, for --duration; reports pushed/s, processed/s, the backlog
             at the end and how fast it grew over the second half. At a --rate, each
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

// benchConfig is what the flags of "pgtask bench" say.
type benchConfig struct {
	mode          string
	tasks         int
	duration      time.Duration
	workers       int
	queue         int
	batchSize     int
	flushSize     int
	flushInterval time.Duration
	pushBatch     int
	pushLinger    time.Duration
	pushers       int
	handlerDelay  time.Duration
	managers      int
	processes     int
	vacuumEvery   int64 // as the processor binary's --vacuum-every: 0 turns the processors' VACUUM off
	insertion     repository.Insertion
	condition     repository.Condition
	order         repository.Order
	identifiers   int
	rate          float64
	interval      time.Duration
	json          bool
	url           string
	migrate       bool
	topics        int    // topics the run uses
	idleTopics    int    // topics registered beside them, idle
	topicName     string // the run's topic instead of bench-<mode>-<random>
}

// benchChildFlag, as the first argument, runs a child process of --processes (hidden).
const benchChildFlag = "--bench-child"

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if _, ok := stderr.(*os.File); !ok {
		// the children of --processes share stderr, each through a goroutine of os/exec
		// unless it is a file, and so do the processors' loggers
		stderr = &lockedWriter{w: stderr}
	}
	e := &env{stdin: os.Stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv}
	if len(args) > 0 && args[0] == benchChildFlag {
		return runBenchChild(ctx, e, args[1:])
	}
	cfg, err := parseBench(e, args)
	if err != nil {
		return err
	}
	return bench(ctx, e, cfg)
}

// benchFlags registers the flags shared by the bench command and its child processes.
func benchFlags(f *flags, cfg *benchConfig) (insertion, condition, order *string) {
	f.StringVar(&cfg.mode, "mode", "burndown", "`MODE`: burndown, sustained or latency")
	f.IntVar(&cfg.workers, "workers", 1, "`N` handler workers per manager (a Buffer when above 1)")
	f.IntVar(&cfg.queue, "queue", 0, "prefetched batches (`N`) waiting for a worker; 0: as many as --workers when\nbuffered, no Buffer at all when --workers is 1")
	f.IntVar(&cfg.batchSize, "batch-size", 1000, "most tasks (`N`) one poll leases")
	f.IntVar(&cfg.flushSize, "flush-size", processor.FlushSizeDefault, "most decisions (`N`) committed in one statement")
	f.Var((*durationValue)(&cfg.flushInterval), "flush-interval", "how long (`DURATION`) the completer waits for --flush-size decisions; 0 commits\nas soon as the previous commit is done")
	f.Var((*durationValue)(&cfg.handlerDelay), "handler-delay", "time (`DURATION`) the handler spends on each task")
	f.IntVar(&cfg.managers, "managers", 1, "processors (`N`), each with its own pool and owner, per process")
	f.Int64Var(&cfg.vacuumEvery, "vacuum-every", processor.VacuumEveryDefault, "the processors VACUUM the topic's table after every `N` tasks leased (a quarter\nof its rows when more); 0 leaves it to autovacuum")
	condition = f.String("condition", "none", "poll `CONDITION`: none, singular-by-identifier, ...-suspend-on-failure,\n...-suspend-until-success")
	order = f.String("order", "fifo", "poll `ORDER`: fifo or lifo")
	insertion = f.String("insertion", "append", "push insertion `MODE`: append, replace, supersede or delete")
	f.StringVar(&cfg.url, "database-url", "", "PostgreSQL connection `URL` (default $DATABASE_URL)")
	return insertion, condition, order
}

func parseBench(e *env, args []string) (*benchConfig, error) {
	f := newFlags(e, "pgtask bench", "[flags]", benchAbout)
	cfg := &benchConfig{}
	insertion, condition, order := benchFlags(f, cfg)
	f.IntVar(&cfg.tasks, "tasks", 200000, "tasks (`N`) to push: burndown default 200000, latency default 1000")
	f.Var((*durationValue)(&cfg.duration), "duration", "how long (`DURATION`) sustained mode runs (default 60s); in latency mode\na limit on the run")
	f.IntVar(&cfg.pushBatch, "push-batch", 5000, "tasks (`N`) per push statement (latency mode pushes one at a time)")
	cfg.pushLinger = 100 * time.Millisecond
	f.Var((*durationValue)(&cfg.pushLinger), "push-linger", "in sustained mode at a --rate, the longest (`DURATION`) a pusher holds due tasks\nback to fill a --push-batch; 0 pushes what is due at once")
	f.IntVar(&cfg.pushers, "pushers", 1, "concurrent pushing connections (`N`)")
	f.IntVar(&cfg.processes, "processes", 0, "run the managers in `N` child processes of this binary instead of in-process")
	f.IntVar(&cfg.identifiers, "identifiers", 0, "distinct identifiers (`N`) cycled through; 0 gives every task its own")
	f.Float64Var(&cfg.rate, "rate", 0, "tasks per second (`R`) pushed in all in sustained and latency mode; 0: as fast as\npossible (latency: the next push after the previous task completed)")
	f.Var((*durationValue)(&cfg.interval), "interval", "progress report `INTERVAL`")
	f.BoolVar(&cfg.json, "json", false, "print one JSON object with the results as the last line")
	f.BoolVar(&cfg.migrate, "migrate", false, "apply pending migrations first")
	f.IntVar(&cfg.topics, "topics", 1, "topics (`K`) the run pushes to and processes, each processor on one of them")
	f.IntVar(&cfg.idleTopics, "idle-topics", 0, "idle topics (`N`) registered before the run and destroyed after it")
	f.StringVar(&cfg.topicName, "topic", "", "`NAME` of the run's topic (with --topics, of the first, the others NAME-1...);\nit must not exist, and is destroyed at the end (default bench-MODE-RANDOM)")
	cfg.interval = 2 * time.Second
	if err := f.noArgs(args); err != nil {
		return nil, err
	}
	if err := cfg.check(f, *insertion, *condition, *order); err != nil {
		return nil, err
	}
	if cfg.mode == "latency" && !f.given("tasks") {
		cfg.tasks = 1000
	}
	if cfg.mode == "sustained" && !f.given("duration") {
		cfg.duration = time.Minute
	}
	if cfg.interval <= 0 {
		return nil, f.usagef("--interval: must be positive")
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"tasks", cfg.tasks}, {"push-batch", cfg.pushBatch}, {"pushers", cfg.pushers}, {"topics", cfg.topics}} {
		if v.n < 1 {
			return nil, f.usagef("--%s: %d is below 1", v.name, v.n)
		}
	}
	if cfg.idleTopics < 0 {
		return nil, f.usagef("--idle-topics: %d is negative", cfg.idleTopics)
	}
	if cfg.mode == "latency" && cfg.topics > 1 {
		return nil, f.usagef("--topics: latency mode measures one idle topic, got %d", cfg.topics)
	}
	// processor i works on topic i mod K: every topic needs one
	if processors := max(cfg.processes, 0); (processors == 0 && cfg.managers < cfg.topics) || (processors > 0 && processors < cfg.topics) {
		return nil, f.usagef("--topics: %d topics need as many processors (--managers, or --processes with them)", cfg.topics)
	}
	if cfg.processes < 0 || cfg.identifiers < 0 || cfg.rate < 0 || math.IsNaN(cfg.rate) || math.IsInf(cfg.rate, 0) {
		return nil, f.usagef("--processes, --identifiers and --rate must not be negative")
	}
	url, err := f.requireURL(cfg.url)
	if err != nil {
		return nil, err
	}
	cfg.url = url
	return cfg, nil
}

// check validates the flags shared with the child processes.
func (cfg *benchConfig) check(f *flags, insertion, condition, order string) error {
	switch cfg.mode {
	case "burndown", "sustained", "latency":
	default:
		return f.usagef("--mode: unknown mode %q (want burndown, sustained or latency)", cfg.mode)
	}
	var err error
	if cfg.insertion, err = f.parseInsertion("insertion", insertion); err != nil {
		return err
	}
	c, err := repository.ParseCondition(condition)
	if err != nil {
		return f.usagef("--condition: %s", stripInvalid(err))
	}
	cfg.condition = c
	o, err := repository.ParseOrder(order)
	if err != nil {
		return f.usagef("--order: %s", stripInvalid(err))
	}
	cfg.order = o
	for _, v := range []struct {
		name string
		n    int
	}{{"workers", cfg.workers}, {"batch-size", cfg.batchSize}, {"flush-size", cfg.flushSize}, {"managers", cfg.managers}} {
		if v.n < 1 {
			return f.usagef("--%s: %d is below 1", v.name, v.n)
		}
	}
	if cfg.queue < 0 {
		return f.usagef("--queue: %d is negative", cfg.queue)
	}
	if cfg.vacuumEvery < 0 {
		return f.usagef("--vacuum-every: %d is negative (0 turns the processors' VACUUM off)", cfg.vacuumEvery)
	}
	return nil
}

// benchStats gathers what the processors did, in-process or reported by children.
type benchStats struct {
	processed atomic.Int64
	errors    atomic.Int64
	// Statement timings seen by the managers: polls that leased tasks, empty polls and
	// completion flushes (count and total ns).
	polls, pollNs, empties, flushes, flushNs atomic.Int64
	progress                                 chan struct{} // capacity 1: signalled on every completion
	logErr                                   func(err error)

	mu       sync.Mutex
	starts   samples // push → handler start, ns
	dones    samples // push → completed, ns
	childRSS float64 // highest peak RSS reported by a child, MB
}

func newBenchStats(stderr io.Writer) *benchStats {
	s := &benchStats{progress: make(chan struct{}, 1)}
	var mu sync.Mutex
	s.logErr = func(err error) {
		if n := s.errors.Add(1); n <= 5 {
			mu.Lock()
			fmt.Fprintf(stderr, "pgtask bench: processor error: %v\n", err)
			mu.Unlock()
		}
	}
	return s
}

func (s *benchStats) signal() {
	select {
	case s.progress <- struct{}{}:
	default:
	}
}

// samples keeps at most sampleCap latencies, a uniform sample of all it was offered.
type samples struct {
	seen int64
	v    []int64
}

const sampleCap = 1 << 18

func (s *samples) add(ns int64) {
	s.seen++
	if len(s.v) < sampleCap {
		s.v = append(s.v, ns)
		return
	}
	if i := mrand.Int64N(s.seen); i < sampleCap {
		s.v[i] = ns
	}
}

// pushStamp encodes the push time into a task's input; zero when the input holds none.
func pushStamp(input string) int64 {
	n, err := strconv.ParseInt(input, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// handler builds the no-op (or --handler-delay) handler of one manager; record says
// whether handler-start latencies are kept.
func (cfg *benchConfig) handler(s *benchStats, record bool) (processor.Handler, error) {
	delay := cfg.handlerDelay
	fn := processor.TaskFunc(func(ctx context.Context, t repository.Task) repository.Decision {
		if record {
			if at := pushStamp(t.Input); at != 0 {
				d := time.Now().UnixNano() - at
				s.mu.Lock()
				s.starts.add(d)
				s.mu.Unlock()
			}
		}
		if delay > 0 {
			timer := time.NewTimer(delay)
			select {
			case <-ctx.Done():
			case <-timer.C:
			}
			timer.Stop()
		}
		return repository.Decision{Result: repository.Success}
	})
	if cfg.workers <= 1 && cfg.queue == 0 {
		return fn, nil
	}
	queue := cfg.queue
	if queue == 0 {
		queue = cfg.workers
	}
	return processor.Buffer(fn, processor.BufferConfig{Queue: queue, MinWorkers: cfg.workers})
}

// listener counts completed tasks (those no longer READY) and, when record is set, their
// push → completed latencies. onDone, when set, runs after each commit (the child uses
// it to report).
func (s *benchStats) listener(record bool, onDone func()) processor.Listener {
	return processor.Listener{
		OnDispatch: func(_ string, _ []repository.Task, poll time.Duration) {
			s.polls.Add(1)
			s.pollNs.Add(int64(poll))
		},
		OnEmpty: func(string, time.Duration) { s.empties.Add(1) },
		OnComplete: func(_ string, tasks []repository.Task, flush time.Duration) {
			s.flushes.Add(1)
			s.flushNs.Add(int64(flush))
			now := time.Now().UnixNano()
			n := 0
			if record {
				s.mu.Lock()
			}
			for _, t := range tasks {
				if t.State == repository.Ready {
					continue
				}
				n++
				if record {
					if at := pushStamp(t.Input); at != 0 {
						s.dones.add(now - at)
					}
				}
			}
			if record {
				s.mu.Unlock()
			}
			s.processed.Add(int64(n))
			s.signal()
			if onDone != nil {
				onDone()
			}
		},
		OnError: func(_ string, err error) { s.logErr(err) },
		OnFatal: func(_ string, err error) { s.logErr(fmt.Errorf("fatal: %w", err)) },
	}
}

// processors is a running set of processors, in-process or in child processes.
type processors interface {
	// stop shuts the processors down gracefully and waits for them.
	stop() error
}

type inProcess struct {
	cancel context.CancelFunc
	done   []chan error
	pools  []*pgxpool.Pool

	once sync.Once
	err  error
}

// startProcessors starts cfg.managers processors in this process and waits until each
// listens for notifications.
func startProcessors(ctx context.Context, cfg *benchConfig, topics []string, s *benchStats, logger *slog.Logger, record bool, onDone func()) (*inProcess, error) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ip := &inProcess{cancel: cancel}
	for i := range cfg.managers {
		topic := topics[i%len(topics)]
		pool, err := openPool(ctx, cfg.url, "pgtask bench processor", 4)
		if err != nil {
			_ = ip.stop()
			return nil, err
		}
		ip.pools = append(ip.pools, pool)
		h, err := cfg.handler(s, record)
		if err != nil {
			_ = ip.stop()
			return nil, err
		}
		repo, err := repository.New(repository.Config{Owner: fmt.Sprintf("%s-%d-%d", topic, os.Getpid(), i)})
		if err != nil {
			_ = ip.stop()
			return nil, err
		}
		vacuumEvery := cfg.vacuumEvery
		if vacuumEvery == 0 {
			vacuumEvery = -1 // processor.Config: negative is off, 0 the default
		}
		p, err := processor.New(processor.Config{Pool: pool, Repository: repo, Logger: logger, VacuumEvery: vacuumEvery})
		if err != nil {
			_ = ip.stop()
			return nil, err
		}
		if _, err := p.Manage(processor.ManagerConfig{
			Topic: topic, Handler: h, Order: cfg.order, Condition: cfg.condition,
			BatchSize: cfg.batchSize, FlushSize: cfg.flushSize, FlushInterval: cfg.flushInterval,
			ShutdownTimeout: 10 * time.Second, Listener: s.listener(record, onDone),
		}); err != nil {
			_ = ip.stop()
			return nil, err
		}
		connected := p.Notifier().Connected()
		done := make(chan error, 1)
		ip.done = append(ip.done, done)
		go func() { done <- p.Run(runCtx) }()
		select {
		case <-connected:
		case err := <-done:
			done <- err
			_ = ip.stop()
			return nil, fmt.Errorf("processor stopped at start: %w", err)
		case <-time.After(30 * time.Second):
			_ = ip.stop()
			return nil, errors.New("processor did not start listening within 30s")
		case <-ctx.Done():
			_ = ip.stop()
			return nil, ctx.Err()
		}
	}
	return ip, nil
}

func (ip *inProcess) stop() error {
	ip.once.Do(func() {
		ip.cancel()
		var errs []error
		for _, done := range ip.done {
			errs = append(errs, <-done)
		}
		for _, p := range ip.pools {
			p.Close()
		}
		ip.err = errors.Join(errs...)
	})
	return ip.err
}

// childLine is one line a child process writes on its standard output.
type childLine struct {
	Ready     bool     `json:"ready,omitempty"`
	Processed int64    `json:"n,omitempty"`
	Starts    []int64  `json:"start,omitempty"`
	Dones     []int64  `json:"done,omitempty"`
	Errors    int64    `json:"errors,omitempty"`
	Timings   [5]int64 `json:"timings,omitzero"` // polls, poll ns, empty polls, flushes, flush ns
	PeakRSS   float64  `json:"peak_rss_mb,omitempty"`
	Exit      bool     `json:"exit,omitempty"`
}

type children struct {
	cmds  []*exec.Cmd
	stdin []io.WriteCloser
	read  sync.WaitGroup

	once sync.Once
	err  error
}

// startChildren runs cfg.processes child processes of this binary, each running
// cfg.managers processors, and waits until all listen.
func startChildren(ctx context.Context, cfg *benchConfig, topics []string, s *benchStats, stderr io.Writer, record bool) (*children, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this binary for --processes: %w", err)
	}
	args := []string{"bench", benchChildFlag, "--mode", cfg.mode, "--database-url", cfg.url,
		"--workers", strconv.Itoa(cfg.workers), "--queue", strconv.Itoa(cfg.queue),
		"--batch-size", strconv.Itoa(cfg.batchSize), "--flush-size", strconv.Itoa(cfg.flushSize),
		"--flush-interval", cfg.flushInterval.String(), "--handler-delay", cfg.handlerDelay.String(),
		"--managers", strconv.Itoa(cfg.managers), "--vacuum-every", strconv.FormatInt(cfg.vacuumEvery, 10), "--condition", strings.ToLower(cfg.condition.String()),
		"--order", cfg.order.String(), "--insertion", cfg.insertion.String(), "--record=" + strconv.FormatBool(record)}
	c := &children{}
	ready := make(chan struct{}, cfg.processes)
	for i := range cfg.processes {
		cmd := exec.Command(exe, append(args, "--topic", topics[i%len(topics)])...)
		cmd.Stderr = stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			_ = c.stop()
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			_ = c.stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			_ = c.stop()
			return nil, fmt.Errorf("start child process: %w", err)
		}
		c.cmds = append(c.cmds, cmd)
		c.stdin = append(c.stdin, in)
		c.read.Go(func() {
			sc := bufio.NewScanner(out)
			sc.Buffer(make([]byte, 64<<10), 64<<20)
			for sc.Scan() {
				var l childLine
				if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
					continue
				}
				if l.Ready {
					ready <- struct{}{}
				}
				s.mu.Lock()
				for _, d := range l.Starts {
					s.starts.add(d)
				}
				for _, d := range l.Dones {
					s.dones.add(d)
				}
				s.childRSS = max(s.childRSS, l.PeakRSS)
				s.mu.Unlock()
				if l.Errors > 0 {
					s.errors.Add(l.Errors)
				}
				s.polls.Add(l.Timings[0])
				s.pollNs.Add(l.Timings[1])
				s.empties.Add(l.Timings[2])
				s.flushes.Add(l.Timings[3])
				s.flushNs.Add(l.Timings[4])
				if l.Processed > 0 {
					s.processed.Add(l.Processed)
					s.signal()
				}
			}
		})
	}
	timeout := time.After(60 * time.Second)
	for range cfg.processes {
		select {
		case <-ready:
		case <-timeout:
			_ = c.stop()
			return nil, errors.New("child processes did not start listening within 60s")
		case <-ctx.Done():
			_ = c.stop()
			return nil, ctx.Err()
		}
	}
	return c, nil
}

// stop closes the children's standard input (their signal to shut down gracefully) and
// waits for them, killing those that take longer than 30 s.
func (c *children) stop() error {
	c.once.Do(func() { c.err = c.stopOnce() })
	return c.err
}

func (c *children) stopOnce() error {
	for _, in := range c.stdin {
		_ = in.Close()
	}
	var errs []error
	for _, cmd := range c.cmds {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			errs = append(errs, err)
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			errs = append(errs, fmt.Errorf("child %d killed after 30s: %w", cmd.Process.Pid, <-done))
		}
	}
	c.read.Wait()
	return errors.Join(errs...)
}

// runBenchChild is one child process of --processes: it runs processors on --topic until
// its standard input closes (or a signal), reporting on standard output.
func runBenchChild(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask bench "+benchChildFlag, "[flags]", "")
	cfg := &benchConfig{}
	insertion, condition, order := benchFlags(f, cfg)
	topic := f.String("topic", "", "topic")
	record := f.Bool("record", false, "record latencies")
	if err := f.noArgs(args); err != nil {
		return err
	}
	if err := cfg.check(f, *insertion, *condition, *order); err != nil {
		return err
	}
	s := newBenchStats(e.stderr)
	var (
		outMu    sync.Mutex
		reported int64
		errs     int64
		timings  [5]int64
	)
	w := bufio.NewWriter(e.stdout)
	emit := func(l childLine) {
		b, _ := json.Marshal(l)
		outMu.Lock()
		defer outMu.Unlock()
		_, _ = w.Write(append(b, '\n'))
		_ = w.Flush()
	}
	report := func() {
		l := childLine{}
		s.mu.Lock()
		l.Starts, s.starts = s.starts.v, samples{}
		l.Dones, s.dones = s.dones.v, samples{}
		s.mu.Unlock()
		outMu.Lock()
		n := s.processed.Load()
		l.Processed, reported = n-reported, n
		en := s.errors.Load()
		l.Errors, errs = en-errs, en
		now := [5]int64{s.polls.Load(), s.pollNs.Load(), s.empties.Load(), s.flushes.Load(), s.flushNs.Load()}
		for i := range now {
			l.Timings[i], timings[i] = now[i]-timings[i], now[i]
		}
		outMu.Unlock()
		if l.Processed != 0 || l.Errors != 0 || len(l.Starts) != 0 || len(l.Dones) != 0 || l.Timings != [5]int64{} {
			emit(l)
		}
	}
	logger := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ip, err := startProcessors(ctx, cfg, []string{*topic}, s, logger, *record, report)
	if err != nil {
		return err
	}
	emit(childLine{Ready: true})
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, e.stdin)
		close(eof)
	}()
	select {
	case <-eof:
	case <-ctx.Done():
	}
	err = ip.stop()
	report()
	emit(childLine{PeakRSS: peakRSSMB(), Exit: true})
	return err
}

// peakRSSMB is this process's peak resident set size (VmHWM) in MB, or the memory the Go
// runtime obtained from the OS where /proc is not available.
func peakRSSMB() float64 {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range bytes.Split(b, []byte("\n")) {
			if rest, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
				kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(string(rest)), " kB"), 64)
				if err == nil {
					return kb / 1024
				}
			}
		}
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.Sys) / (1 << 20)
}

// benchRun is one run of the bench command.
type benchRun struct {
	cfg    *benchConfig
	e      *env
	pool   *pgxpool.Pool
	repo   *repository.Repository
	topic  string   // the first of topics
	topics []string // those the run pushes to and processes
	stats  *benchStats
	logger *slog.Logger
	result map[string]any

	maxHeap atomic.Uint64
	pushed  atomic.Int64 // tasks inserted READY
	pushes  atomic.Int64 // push statements
	next    atomic.Int64 // next task number, for identifiers
}

func bench(ctx context.Context, e *env, cfg *benchConfig) (err error) {
	pool, err := openPool(ctx, cfg.url, "pgtask bench", int32(cfg.pushers+2))
	if err != nil {
		return err
	}
	defer pool.Close()
	if cfg.migrate {
		if err := repository.Migrate(ctx, pool); err != nil {
			return fmt.Errorf("bench: migrate: %w", err)
		}
	}
	repo, err := repository.New(repository.Config{})
	if err != nil {
		return err
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	name := "bench-" + cfg.mode + "-" + hex.EncodeToString(suffix[:])
	if cfg.topicName != "" {
		name = cfg.topicName
	}
	r := &benchRun{
		cfg: cfg, e: e, pool: pool, repo: repo,
		stats:  newBenchStats(e.stderr),
		logger: slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		result: map[string]any{},
	}
	r.topics = make([]string, cfg.topics)
	for i := range r.topics {
		r.topics[i] = name
		if i > 0 || cfg.topics > 1 && cfg.topicName == "" {
			r.topics[i] = fmt.Sprintf("%s-%d", name, i)
		}
	}
	r.topic = r.topics[0]
	idle := make([]string, cfg.idleTopics)
	for i := range idle {
		idle[i] = fmt.Sprintf("%s-idle-%d", name, i)
	}
	// Destroy the topics even when interrupted: on a context of its own.
	var created []string
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
		defer cancel()
		if derr := destroyTopics(dctx, repo, pool, created); derr != nil {
			err = errors.Join(err, fmt.Errorf("bench: %w", derr))
		}
	}()
	for _, topic := range r.topics {
		fresh, err := repo.Initialize(ctx, pool, topic)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		if !fresh {
			// someone else's topic: never destroy it
			return fmt.Errorf("bench: topic %q exists already: choose another --topic", topic)
		}
		created = append(created, topic)
	}
	if len(idle) > 0 {
		// One topic per transaction, as applications register them.
		start := time.Now()
		for _, topic := range idle {
			if _, err := repo.Initialize(ctx, pool, topic); err != nil {
				return fmt.Errorf("bench: idle topics: %w", err)
			}
			created = append(created, topic)
		}
		secs := time.Since(start).Seconds()
		fmt.Fprintf(e.stdout, "registered %d idle topics in %.2fs (%.0f/s)\n", len(idle), secs, float64(len(idle))/secs)
		r.result["idle_topics_register_seconds"] = round(secs, 3)
	}
	procs := "in this process"
	if cfg.processes > 0 {
		procs = fmt.Sprintf("in each of %d child processes", cfg.processes)
	}
	fmt.Fprintf(e.stdout, "pgtask bench: mode %s, topic %s, %d manager(s) %s, %d worker(s) each, batch %d, flush %d/%v, handler delay %v, %s/%s\n",
		cfg.mode, r.topic, cfg.managers, procs, cfg.workers, cfg.batchSize, cfg.flushSize, cfg.flushInterval, cfg.handlerDelay,
		cfg.insertion, cfg.condition)

	stopSampling := r.sampleHeap()
	switch cfg.mode {
	case "burndown":
		err = r.burndown(ctx)
	case "sustained":
		err = r.sustained(ctx)
	case "latency":
		err = r.latency(ctx)
	}
	stopSampling()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("bench: interrupted: %w", ctx.Err())
		}
		return fmt.Errorf("bench: %w", err)
	}
	r.result["mode"] = cfg.mode
	r.result["topic"] = r.topic
	r.result["topics"] = len(r.topics)
	r.result["idle_topics"] = cfg.idleTopics
	r.result["managers"] = cfg.managers
	r.result["processes"] = cfg.processes
	r.result["workers"] = cfg.workers
	r.result["batch_size"] = cfg.batchSize
	r.result["flush_size"] = cfg.flushSize
	r.result["flush_interval_ms"] = ms(cfg.flushInterval)
	r.result["handler_delay_ms"] = ms(cfg.handlerDelay)
	r.result["push_batch"] = cfg.pushBatch
	r.result["push_linger_ms"] = ms(cfg.pushLinger)
	r.result["pushers"] = cfg.pushers
	r.result["vacuum_every"] = cfg.vacuumEvery
	r.result["insertion"] = cfg.insertion.String()
	r.result["condition"] = cfg.condition.String()
	// The processors' Go runtime: on a machine shared with PostgreSQL, its collector and
	// its threads take CPU from the database (BENCHMARKS.md, fifth session).
	r.result["gomaxprocs"] = runtime.GOMAXPROCS(0)
	r.result["gogc"] = gctune.Current()
	r.result["errors"] = r.stats.errors.Load()
	r.result["peak_rss_mb"] = round(peakRSSMB(), 1)
	st := r.stats
	if n := st.polls.Load(); n > 0 {
		r.result["polls"] = n
		r.result["poll_ms_avg"] = round(float64(st.pollNs.Load())/float64(n)/1e6, 3)
	}
	r.result["empty_polls"] = st.empties.Load()
	if n := st.flushes.Load(); n > 0 {
		r.result["flushes"] = n
		r.result["flush_ms_avg"] = round(float64(st.flushNs.Load())/float64(n)/1e6, 3)
	}
	if n := st.polls.Load(); n > 0 && st.flushes.Load() > 0 {
		fmt.Fprintf(e.stdout, "statements: %d polls (%.2f ms each, %.0f tasks each), %d empty polls, %d flushes (%.2f ms each)\n",
			n, r.result["poll_ms_avg"], float64(st.processed.Load())/float64(n), st.empties.Load(), st.flushes.Load(), r.result["flush_ms_avg"])
	}
	r.result["max_heap_mb"] = round(float64(r.maxHeap.Load())/(1<<20), 1)
	if cfg.processes > 0 {
		r.stats.mu.Lock()
		r.result["processor_peak_rss_mb"] = round(r.stats.childRSS, 1)
		r.stats.mu.Unlock()
	}
	fmt.Fprintf(e.stdout, "memory: peak RSS %.1f MB, Go heap at most %.1f MB", r.result["peak_rss_mb"], r.result["max_heap_mb"])
	if v, ok := r.result["processor_peak_rss_mb"]; ok {
		fmt.Fprintf(e.stdout, ", child processor peak RSS %.1f MB", v)
	}
	fmt.Fprintln(e.stdout)
	if n := r.stats.errors.Load(); n > 0 {
		fmt.Fprintf(e.stdout, "processor errors: %d (the first ones are on standard error)\n", n)
	}
	if cfg.json {
		b, err := json.Marshal(r.result)
		if err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, string(b))
	}
	return nil
}

// sampleHeap records the highest Go heap in use until the returned function is called.
func (r *benchRun) sampleHeap() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	sample := func() {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		for {
			old := r.maxHeap.Load()
			if m.HeapInuse <= old || r.maxHeap.CompareAndSwap(old, m.HeapInuse) {
				return
			}
		}
	}
	wg.Go(func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				sample()
				return
			case <-t.C:
				sample()
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// start starts the processors; record keeps latency samples.
func (r *benchRun) start(ctx context.Context, record bool) (processors, error) {
	if r.cfg.processes > 0 {
		return startChildren(ctx, r.cfg, r.topics, r.stats, r.e.stderr, record)
	}
	return startProcessors(ctx, r.cfg, r.topics, r.stats, r.logger, record, nil)
}

// destroyTopics destroys topics, four at a time.
func destroyTopics(ctx context.Context, repo *repository.Repository, pool *pgxpool.Pool, topics []string) error {
	var next atomic.Int64
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for w := range errs {
		wg.Go(func() {
			for i := next.Add(1) - 1; int(i) < len(topics); i = next.Add(1) - 1 {
				if _, err := repo.Destroy(ctx, pool, topics[i]); err != nil {
					errs[w] = fmt.Errorf("destroy topic %q: %w", topics[i], err)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// setActive pauses or resumes every topic of the run.
func (r *benchRun) setActive(ctx context.Context, active bool) error {
	for _, topic := range r.topics {
		if err := r.repo.SetActive(ctx, r.pool, topic, active); err != nil {
			return err
		}
	}
	return nil
}

// ready counts the READY tasks of the run's topics.
func (r *benchRun) ready(ctx context.Context) (int64, error) {
	var n int64
	for _, topic := range r.topics {
		stats, err := r.repo.Stats(ctx, r.pool, topic)
		if err != nil {
			return 0, err
		}
		n += stats.Ready
	}
	return n, nil
}

// creations builds n creations; stamp, when not zero, is written as the input.
func (r *benchRun) creations(n int, stamp int64) []repository.Creation {
	cs := make([]repository.Creation, n)
	input := ""
	if stamp != 0 {
		input = strconv.FormatInt(stamp, 10)
	}
	first := r.next.Add(int64(n)) - int64(n)
	buf := make([]byte, 0, 16*n)
	for i := range cs {
		k := first + int64(i)
		if r.cfg.identifiers > 0 {
			k %= int64(r.cfg.identifiers)
		}
		start := len(buf)
		buf = append(buf, 't')
		buf = strconv.AppendInt(buf, k, 10)
		cs[i] = repository.Creation{Identifier: string(buf[start:]), Input: input}
	}
	return cs
}

// push pushes n tasks in one statement and counts those inserted READY.
func (r *benchRun) push(ctx context.Context, n int, stamp bool) error {
	var at int64
	if stamp {
		at = time.Now().UnixNano()
	}
	// the topics in turn, one statement each
	topic := r.topics[int(r.pushes.Add(1)-1)%len(r.topics)]
	tasks, err := r.repo.Push(ctx, r.pool, topic, r.cfg.insertion, r.creations(n, at)...)
	if err != nil {
		return err
	}
	ready := 0
	for _, t := range tasks {
		if t.State == repository.Ready {
			ready++
		}
	}
	r.pushed.Add(int64(ready))
	return nil
}

// ticker prints a progress line every interval until the returned function is called.
func (r *benchRun) ticker(line func(elapsed time.Duration)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		t := time.NewTicker(r.cfg.interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				line(time.Since(start))
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// waitProcessed waits until n tasks were processed, failing when nothing progresses
// for a minute.
func (r *benchRun) waitProcessed(ctx context.Context, n int64) error {
	last, lastAt := r.stats.processed.Load(), time.Now()
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	for {
		got := r.stats.processed.Load()
		if got >= n {
			return nil
		}
		if got != last {
			last, lastAt = got, time.Now()
		} else if time.Since(lastAt) > time.Minute {
			return fmt.Errorf("stalled: %d of %d tasks processed, none in the last minute", got, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.stats.progress:
		case <-poll.C:
		}
	}
}

func (r *benchRun) burndown(ctx context.Context) error {
	cfg, out := r.cfg, r.e.stdout
	// The processors start first, on a paused topic, so that their start-up is not
	// counted; resuming the topic is the start signal.
	if err := r.setActive(ctx, false); err != nil {
		return err
	}
	procs, err := r.start(ctx, false)
	if err != nil {
		return err
	}
	defer func() { _ = procs.stop() }()

	start := time.Now()
	var last int64
	stopTick := r.ticker(func(el time.Duration) {
		n := r.pushed.Load()
		fmt.Fprintf(out, "%7.1fs  pushed %9d  (%8.0f/s)\n", el.Seconds(), n, float64(n-last)/cfg.interval.Seconds())
		last = n
	})
	var (
		wg    sync.WaitGroup
		batch atomic.Int64
		perr  = make([]error, cfg.pushers)
	)
	batches := int64((cfg.tasks + cfg.pushBatch - 1) / cfg.pushBatch)
	for i := range cfg.pushers {
		wg.Go(func() {
			for b := batch.Add(1) - 1; b < batches && ctx.Err() == nil; b = batch.Add(1) - 1 {
				n := min(cfg.pushBatch, cfg.tasks-int(b)*cfg.pushBatch)
				if err := r.push(ctx, n, false); err != nil {
					perr[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	stopTick()
	if err := errors.Join(perr...); err != nil {
		return err
	}
	pushed := time.Now()
	pushSecs := pushed.Sub(start).Seconds()
	want, err := r.ready(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "pushed %d tasks (%d READY) in %.2fs: %.0f/s\n", cfg.tasks, want, pushSecs, float64(cfg.tasks)/pushSecs)

	procStart := time.Now()
	if err := r.setActive(ctx, true); err != nil {
		return err
	}
	last = 0
	stopTick = r.ticker(func(el time.Duration) {
		n := r.stats.processed.Load()
		fmt.Fprintf(out, "%7.1fs  processed %9d  (%8.0f/s)\n", el.Seconds(), n, float64(n-last)/cfg.interval.Seconds())
		last = n
	})
	err = r.waitProcessed(ctx, want)
	stopTick()
	if err != nil {
		return err
	}
	end := time.Now()
	procSecs := end.Sub(procStart).Seconds()
	total := end.Sub(start).Seconds()
	tps := float64(cfg.tasks) / total
	fmt.Fprintf(out, "processed %d tasks in %.2fs: %.0f/s\n", want, procSecs, float64(want)/procSecs)
	fmt.Fprintf(out, "burn-down of %d tasks in %.2fs: %.0f tasks/s overall (push %.0f/s, process %.0f/s)\n",
		cfg.tasks, total, tps, float64(cfg.tasks)/pushSecs, float64(want)/procSecs)
	r.result["tasks"] = cfg.tasks
	r.result["processed"] = want
	r.result["seconds"] = round(total, 3)
	r.result["push_seconds"] = round(pushSecs, 3)
	r.result["process_seconds"] = round(procSecs, 3)
	r.result["tasks_per_second"] = round(tps, 1)
	r.result["push_per_second"] = round(float64(cfg.tasks)/pushSecs, 1)
	r.result["process_per_second"] = round(float64(want)/procSecs, 1)
	return procs.stop()
}

func (r *benchRun) sustained(ctx context.Context) error {
	cfg, out := r.cfg, r.e.stdout
	procs, err := r.start(ctx, true)
	if err != nil {
		return err
	}
	defer func() { _ = procs.stop() }()

	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	start := time.Now()
	var (
		mu                   sync.Mutex
		lastPushed, lastDone int64
		backlogs             []float64 // backlog at each tick
		ticks                []float64 // seconds
	)
	stopTick := r.ticker(func(el time.Duration) {
		p, d := r.pushed.Load(), r.stats.processed.Load()
		sec := cfg.interval.Seconds()
		fmt.Fprintf(out, "%7.1fs  pushed %9d (%8.0f/s)  processed %9d (%8.0f/s)  backlog %8d\n",
			el.Seconds(), p, float64(p-lastPushed)/sec, d, float64(d-lastDone)/sec, p-d)
		lastPushed, lastDone = p, d
		mu.Lock()
		backlogs, ticks = append(backlogs, float64(p-d)), append(ticks, el.Seconds())
		mu.Unlock()
	})
	var (
		wg   sync.WaitGroup
		perr = make([]error, cfg.pushers)
	)
	for i := range cfg.pushers {
		wg.Go(func() {
			done := 0 // tasks this pusher pushed, for --rate
			for runCtx.Err() == nil {
				n := cfg.pushBatch
				if cfg.rate > 0 {
					var wait time.Duration
					n, wait = paceBatch(cfg.rate/float64(cfg.pushers), time.Since(start), done, cfg.pushBatch, cfg.pushLinger)
					if n == 0 {
						sleepCtx(runCtx, wait)
						continue
					}
				}
				if err := r.push(runCtx, n, true); err != nil {
					if runCtx.Err() == nil {
						perr[i] = err
					}
					return
				}
				done += n
			}
		})
	}
	<-runCtx.Done()
	wg.Wait()
	stopTick()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := errors.Join(perr...); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	pushed, processed := r.pushed.Load(), r.stats.processed.Load()
	backlog, err := r.ready(ctx)
	if err != nil {
		return err
	}
	// Growth of the backlog over the second half of the run, per second.
	growth := 0.0
	mu.Lock()
	if n := len(backlogs); n >= 2 {
		half := n / 2
		if dt := ticks[n-1] - ticks[half-1]; dt > 0 && half >= 1 {
			growth = (backlogs[n-1] - backlogs[half-1]) / dt
		}
	}
	mu.Unlock()
	fmt.Fprintf(out, "sustained %.1fs: pushed %d (%.0f/s), processed %d (%.0f/s), backlog at the end %d READY (%+.0f/s over the second half)\n",
		secs, pushed, float64(pushed)/secs, processed, float64(processed)/secs, backlog, growth)
	r.result["seconds"] = round(secs, 3)
	r.result["pushed"] = pushed
	r.result["push_statements"] = r.pushes.Load()
	r.result["processed"] = processed
	r.result["pushed_per_second"] = round(float64(pushed)/secs, 1)
	r.result["tasks_per_second"] = round(float64(processed)/secs, 1)
	r.result["backlog"] = backlog
	r.result["backlog_growth_per_second"] = round(growth, 1)
	r.result["rate"] = cfg.rate
	r.latencies(false)
	return procs.stop()
}

func (r *benchRun) latency(ctx context.Context) error {
	cfg, out := r.cfg, r.e.stdout
	procs, err := r.start(ctx, true)
	if err != nil {
		return err
	}
	defer func() { _ = procs.stop() }()
	// Let the managers' first (empty) polls finish: the topic is idle.
	sleepCtx(ctx, 200*time.Millisecond)

	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if cfg.duration > 0 {
		runCtx, cancel = context.WithTimeout(ctx, cfg.duration)
	}
	defer cancel()
	var last int64
	stopTick := r.ticker(func(el time.Duration) {
		n := r.stats.processed.Load()
		fmt.Fprintf(out, "%7.1fs  completed %7d  (%6.0f/s)\n", el.Seconds(), n, float64(n-last)/cfg.interval.Seconds())
		last = n
	})
	start := time.Now()
	pushed := 0
	for pushed < cfg.tasks && runCtx.Err() == nil {
		if cfg.rate > 0 {
			at := start.Add(time.Duration(float64(pushed) / cfg.rate * float64(time.Second)))
			sleepCtx(runCtx, time.Until(at))
			if runCtx.Err() != nil {
				break
			}
		}
		if err := r.push(runCtx, 1, true); err != nil {
			if runCtx.Err() != nil {
				break
			}
			stopTick()
			return err
		}
		pushed++
		if cfg.rate == 0 {
			if err := r.waitProcessed(runCtx, r.pushed.Load()); err != nil {
				if runCtx.Err() != nil {
					break
				}
				stopTick()
				return err
			}
		}
	}
	// Wait for the stragglers (not counted against a --duration limit).
	err = r.waitProcessed(ctx, r.pushed.Load())
	stopTick()
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	processed := r.stats.processed.Load()
	r.result["tasks"] = pushed
	r.result["processed"] = processed
	r.result["seconds"] = round(secs, 3)
	r.result["tasks_per_second"] = round(float64(processed)/secs, 1)
	r.result["rate"] = cfg.rate
	fmt.Fprintf(out, "latency: %d tasks in %.2fs (%.0f/s)\n", processed, secs, float64(processed)/secs)
	r.latencies(true)
	return procs.stop()
}

// latencies adds the percentiles to the result and prints them; primary names the
// handler-start figures p50_ms… (latency mode).
func (r *benchRun) latencies(primary bool) {
	r.stats.mu.Lock()
	starts, dones := slices.Clone(r.stats.starts.v), slices.Clone(r.stats.dones.v)
	r.stats.mu.Unlock()
	for _, l := range []struct {
		name, what string
		v          []int64
	}{{"start", "push → handler start", starts}, {"completed", "push → completed", dones}} {
		if len(l.v) == 0 {
			continue
		}
		slices.Sort(l.v)
		p := func(q float64) float64 {
			i := int(math.Ceil(q*float64(len(l.v)))) - 1
			return round(float64(l.v[max(i, 0)])/1e6, 3)
		}
		prefix := l.name + "_"
		if primary && l.name == "start" {
			prefix = ""
		}
		r.result[prefix+"p50_ms"] = p(0.50)
		r.result[prefix+"p95_ms"] = p(0.95)
		r.result[prefix+"p99_ms"] = p(0.99)
		r.result[prefix+"max_ms"] = p(1)
		fmt.Fprintf(r.e.stdout, "%-22s p50 %8.2f ms  p95 %8.2f ms  p99 %8.2f ms  max %8.2f ms  (%d samples)\n",
			l.what, p(0.50), p(0.95), p(0.99), p(1), len(l.v))
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func ms(d time.Duration) float64 { return round(float64(d)/1e6, 3) }

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// paceBatch decides a paced pusher's next step: perSecond is its share of --rate, elapsed
// the time since the run started and done what it pushed so far. It returns how many tasks
// to push now, or 0 and how long to sleep first. A pusher pushes a full batch as soon as
// one is due; fewer only once the oldest due task has waited linger (at once when linger
// is 0), so a fixed-rate producer sends the batches --push-batch asks for rather than
// whatever became due during its previous statement.
func paceBatch(perSecond float64, elapsed time.Duration, done, batch int, linger time.Duration) (int, time.Duration) {
	at := func(n int) time.Duration { // when this pusher's n-th task falls due
		return time.Duration(float64(n) * float64(time.Second) / perSecond)
	}
	due := int(float64(elapsed)*perSecond/float64(time.Second)) - done
	if due >= batch {
		return batch, 0
	}
	if due > 0 && elapsed-at(done+1) >= linger {
		return due, 0
	}
	wake := at(done + 1) // nothing due: when the next task is
	if due > 0 {
		wake = min(at(done+batch), wake+linger)
	}
	return 0, max(wake-elapsed, time.Millisecond)
}

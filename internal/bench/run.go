package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/gctune"
	"github.com/pgtask/pgtask/repository"
)

// Run runs the benchmark cfg describes: it registers the run's topics, runs cfg.Mode,
// prints progress lines every cfg.Interval and the results on stdout, and destroys the
// topics, also when ctx is cancelled. stderr takes the processors' errors and those of
// the child processes; it must be safe for concurrent writes (an *os.File is).
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) (err error) {
	if cfg.Connect == nil {
		return errors.New("bench: no Connect to open pools with")
	}
	pool, err := cfg.Connect(ctx, "pgtask bench", int32(cfg.Pushers+2))
	if err != nil {
		return err
	}
	defer pool.Close()
	if cfg.Migrate {
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
	name := "bench-" + string(cfg.Mode) + "-" + hex.EncodeToString(suffix[:])
	if cfg.Topic != "" {
		name = cfg.Topic
	}
	r := &benchRun{
		cfg: &cfg, stdout: stdout, stderr: stderr, pool: pool, repo: repo,
		stats:  newStats(stderr),
		logger: warnLogger(stderr),
		result: map[string]any{},
	}
	r.keys = make([]string, cfg.Keys)
	for i := range r.keys {
		r.keys[i] = "k" + strconv.Itoa(i)
	}
	r.topics = make([]string, cfg.Topics)
	for i := range r.topics {
		r.topics[i] = name
		if i > 0 || cfg.Topics > 1 && cfg.Topic == "" {
			r.topics[i] = fmt.Sprintf("%s-%d", name, i)
		}
	}
	r.topic = r.topics[0]
	idle := make([]string, cfg.IdleTopics)
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
		fresh, err := repo.CreateTopic(ctx, pool, topic)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		if !fresh {
			// someone else's topic: never destroy it
			return fmt.Errorf("bench: topic %q exists already: choose another --topic", topic)
		}
		created = append(created, topic)
		if cfg.Concurrency > 0 || cfg.Keys > 0 {
			if _, err := repo.UpdateSettings(ctx, pool, topic, func(s *repository.TopicSettings) {
				s.Concurrency = cfg.Concurrency
				s.Fair = cfg.Keys > 0
			}); err != nil {
				return fmt.Errorf("bench: %w", err)
			}
		}
	}
	if len(idle) > 0 {
		// One topic per transaction, as applications register them.
		start := time.Now()
		for _, topic := range idle {
			fresh, err := repo.CreateTopic(ctx, pool, topic)
			if err != nil {
				return fmt.Errorf("bench: idle topics: %w", err)
			}
			if !fresh {
				// someone else's topic: never destroy it
				return fmt.Errorf("bench: idle topic %q exists already: choose another --topic", topic)
			}
			created = append(created, topic)
		}
		secs := time.Since(start).Seconds()
		fmt.Fprintf(stdout, "registered %d idle topics in %.2fs (%.0f/s)\n", len(idle), secs, float64(len(idle))/secs)
		r.result["idle_topics_register_seconds"] = round(secs, 3)
	}
	procs := "in this process"
	if cfg.Processes > 0 {
		procs = fmt.Sprintf("in each of %d child processes", cfg.Processes)
	}
	fmt.Fprintf(stdout, "pgtask bench: mode %s, topic %s, %d manager(s) %s, %d worker(s) each, batch %d, flush %d/%v, handler delay %v, %s/%s\n",
		cfg.Mode, r.topic, cfg.Managers, procs, cfg.Workers, cfg.BatchSize, cfg.FlushSize, cfg.FlushInterval, cfg.HandlerDelay,
		cfg.Insertion, cfg.Condition)

	stopSampling := sampleHeap(&r.maxHeap)
	switch cfg.Mode {
	case Burndown:
		err = r.burndown(ctx)
	case Sustained:
		err = r.sustained(ctx)
	case Latency:
		err = r.latency(ctx)
	default:
		err = fmt.Errorf("unknown mode %q", cfg.Mode)
	}
	stopSampling()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("bench: interrupted: %w", ctx.Err())
		}
		return fmt.Errorf("bench: %w", err)
	}
	return r.summarize()
}

// summarize adds the run's settings and the processors' figures to the result, prints
// the last lines and, with cfg.JSON, the result.
func (r *benchRun) summarize() error {
	cfg := r.cfg
	r.result["mode"] = cfg.Mode
	r.result["topic"] = r.topic
	r.result["topics"] = len(r.topics)
	r.result["idle_topics"] = cfg.IdleTopics
	r.result["concurrency"] = cfg.Concurrency
	r.result["keys"] = cfg.Keys
	r.result["managers"] = cfg.Managers
	r.result["processes"] = cfg.Processes
	r.result["workers"] = cfg.Workers
	r.result["batch_size"] = cfg.BatchSize
	r.result["flush_size"] = cfg.FlushSize
	r.result["flush_interval_ms"] = ms(cfg.FlushInterval)
	r.result["handler_delay_ms"] = ms(cfg.HandlerDelay)
	r.result["push_batch"] = cfg.PushBatch
	r.result["push_linger_ms"] = ms(cfg.PushLinger)
	r.result["pushers"] = cfg.Pushers
	r.result["vacuum_every"] = cfg.VacuumEvery
	r.result["insertion"] = cfg.Insertion.String()
	r.result["condition"] = cfg.Condition.String()
	// The processors' Go runtime: on a machine shared with PostgreSQL, its collector and
	// its threads take CPU from the database (BENCHMARKS.md, "The processor's side").
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
		fmt.Fprintf(r.stdout, "statements: %d polls (%.2f ms each, %.0f tasks each), %d empty polls, %d flushes (%.2f ms each)\n",
			n, r.result["poll_ms_avg"], float64(st.processed.Load())/float64(n), st.empties.Load(), st.flushes.Load(), r.result["flush_ms_avg"])
	}
	r.result["max_heap_mb"] = round(float64(r.maxHeap.Load())/(1<<20), 1)
	if cfg.Processes > 0 {
		r.stats.mu.Lock()
		r.result["processor_peak_rss_mb"] = round(r.stats.childRSS, 1)
		r.stats.mu.Unlock()
	}
	fmt.Fprintf(r.stdout, "memory: peak RSS %.1f MB, Go heap at most %.1f MB", r.result["peak_rss_mb"], r.result["max_heap_mb"])
	if v, ok := r.result["processor_peak_rss_mb"]; ok {
		fmt.Fprintf(r.stdout, ", child processor peak RSS %.1f MB", v)
	}
	fmt.Fprintln(r.stdout)
	if n := r.stats.errors.Load(); n > 0 {
		fmt.Fprintf(r.stdout, "processor errors: %d (the first ones are on standard error)\n", n)
	}
	if cfg.JSON {
		b, err := json.Marshal(r.result)
		if err != nil {
			return err
		}
		fmt.Fprintln(r.stdout, string(b))
	}
	return nil
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

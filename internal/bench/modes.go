package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/repository"
)

// benchRun is one run of the benchmark in progress: what the modes share.
type benchRun struct {
	cfg    *Config
	stdout io.Writer
	stderr io.Writer
	pool   *pgxpool.Pool
	repo   *repository.Repository
	topic  string   // the first of topics
	topics []string // those the run pushes to and processes
	keys   []string // the concurrency keys its tasks take in turn (Config.Keys)
	stats  *stats
	logger *slog.Logger
	result map[string]any

	maxHeap atomic.Uint64
	pushed  atomic.Int64 // tasks inserted READY
	pushes  atomic.Int64 // push statements
	next    atomic.Int64 // next task number, for identifiers
}

// start starts the processors; record keeps latency samples.
func (r *benchRun) start(ctx context.Context, record bool) (processors, error) {
	if r.cfg.Processes > 0 {
		return startChildren(ctx, r.cfg, r.topics, r.stats, r.stderr, record)
	}
	return startProcessors(ctx, r.cfg.Processing, r.cfg.Connect, r.topics, r.stats, r.logger, record, nil)
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

// ready counts the READY tasks of the run's topics, exactly: Stats stops its counts at
// 100 000 (migration 000039), and a burn-down of 200 000 tasks waited for the first
// 100 000 only, then counted all 200 000 in its tasks/s.
func (r *benchRun) ready(ctx context.Context) (int64, error) {
	state := repository.Ready
	var n int64
	for _, topic := range r.topics {
		counts, err := r.repo.Count(ctx, r.pool, topic, repository.TaskFilter{State: &state}, 0, repository.MaxSequence, repository.Total)
		if err != nil {
			return 0, err
		}
		n += counts[topic][repository.Ready].Count
	}
	return n, nil
}

// burndown pushes cfg.Tasks tasks on paused topics, then resumes them and waits until
// the processors have done them all.
func (r *benchRun) burndown(ctx context.Context) error {
	cfg, out := r.cfg, r.stdout
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
		fmt.Fprintf(out, "%7.1fs  pushed %9d  (%8.0f/s)\n", el.Seconds(), n, float64(n-last)/cfg.Interval.Seconds())
		last = n
	})
	var (
		wg    sync.WaitGroup
		batch atomic.Int64
		perr  = make([]error, cfg.Pushers)
	)
	batches := int64((cfg.Tasks + cfg.PushBatch - 1) / cfg.PushBatch)
	for i := range cfg.Pushers {
		wg.Go(func() {
			for b := batch.Add(1) - 1; b < batches && ctx.Err() == nil; b = batch.Add(1) - 1 {
				n := min(cfg.PushBatch, cfg.Tasks-int(b)*cfg.PushBatch)
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
	fmt.Fprintf(out, "pushed %d tasks (%d READY) in %.2fs: %.0f/s\n", cfg.Tasks, want, pushSecs, float64(cfg.Tasks)/pushSecs)

	procStart := time.Now()
	if err := r.setActive(ctx, true); err != nil {
		return err
	}
	last = 0
	stopTick = r.ticker(func(el time.Duration) {
		n := r.stats.processed.Load()
		fmt.Fprintf(out, "%7.1fs  processed %9d  (%8.0f/s)\n", el.Seconds(), n, float64(n-last)/cfg.Interval.Seconds())
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
	// the tasks processed, not pushed: a push that replaces (--insertion with
	// --identifiers) leaves fewer to process than it pushed
	tps := float64(want) / total
	fmt.Fprintf(out, "processed %d tasks in %.2fs: %.0f/s\n", want, procSecs, float64(want)/procSecs)
	fmt.Fprintf(out, "burn-down of %d tasks (%d processed) in %.2fs: %.0f tasks/s overall (push %.0f/s, process %.0f/s)\n",
		cfg.Tasks, want, total, tps, float64(cfg.Tasks)/pushSecs, float64(want)/procSecs)
	r.result["tasks"] = cfg.Tasks
	r.result["processed"] = want
	r.result["seconds"] = round(total, 3)
	r.result["push_seconds"] = round(pushSecs, 3)
	r.result["process_seconds"] = round(procSecs, 3)
	r.result["tasks_per_second"] = round(tps, 1)
	r.result["push_per_second"] = round(float64(cfg.Tasks)/pushSecs, 1)
	r.result["process_per_second"] = round(float64(want)/procSecs, 1)
	return procs.stop()
}

// sustained pushes (at cfg.Rate, or as fast as the pushers can) while the processors
// work, for cfg.Duration.
func (r *benchRun) sustained(ctx context.Context) error {
	cfg, out := r.cfg, r.stdout
	procs, err := r.start(ctx, true)
	if err != nil {
		return err
	}
	defer func() { _ = procs.stop() }()

	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	start := time.Now()
	var (
		mu                   sync.Mutex
		lastPushed, lastDone int64
		backlogs             []float64 // backlog at each tick
		ticks                []float64 // seconds
	)
	worstP99 := 0.0 // the highest push → completed p99 of an interval, ms
	stopTick := r.ticker(func(el time.Duration) {
		p, d := r.pushed.Load(), r.stats.processed.Load()
		sec := cfg.Interval.Seconds()
		p99 := r.stats.takeWindow(0.99)
		fmt.Fprintf(out, "%7.1fs  pushed %9d (%8.0f/s)  processed %9d (%8.0f/s)  backlog %8d  completed p99 %8.1f ms\n",
			el.Seconds(), p, float64(p-lastPushed)/sec, d, float64(d-lastDone)/sec, p-d, p99)
		lastPushed, lastDone = p, d
		mu.Lock()
		worstP99 = max(worstP99, p99)
		backlogs, ticks = append(backlogs, float64(p-d)), append(ticks, el.Seconds())
		mu.Unlock()
	})
	var (
		wg   sync.WaitGroup
		perr = make([]error, cfg.Pushers)
	)
	for i := range cfg.Pushers {
		wg.Go(func() {
			done := 0 // tasks this pusher pushed, for cfg.Rate
			for runCtx.Err() == nil {
				n := cfg.PushBatch
				if cfg.Rate > 0 {
					var wait time.Duration
					n, wait = paceBatch(cfg.Rate/float64(cfg.Pushers), time.Since(start), done, cfg.PushBatch, cfg.PushLinger)
					if n == 0 {
						sleepCtx(runCtx, wait)
						continue
					}
				}
				if err := r.push(runCtx, n, true); err != nil {
					if runCtx.Err() == nil {
						perr[i] = err
						cancel() // the run stops with it, not at the end of --duration
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
	mu.Lock()
	r.result["completed_p99_ms_worst_interval"] = round(worstP99, 1)
	mu.Unlock()
	r.result["rate"] = cfg.Rate
	r.stats.latencies(r.result, out, false)
	return procs.stop()
}

// latency pushes one task at a time into the idle topic, each after the previous one
// completed or, at cfg.Rate, open loop.
func (r *benchRun) latency(ctx context.Context) error {
	cfg, out := r.cfg, r.stdout
	procs, err := r.start(ctx, true)
	if err != nil {
		return err
	}
	defer func() { _ = procs.stop() }()
	// Let the managers' first (empty) polls finish: the topic is idle.
	sleepCtx(ctx, 200*time.Millisecond)

	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if cfg.Duration > 0 {
		runCtx, cancel = context.WithTimeout(ctx, cfg.Duration)
	}
	defer cancel()
	var last int64
	stopTick := r.ticker(func(el time.Duration) {
		n := r.stats.processed.Load()
		fmt.Fprintf(out, "%7.1fs  completed %7d  (%6.0f/s)\n", el.Seconds(), n, float64(n-last)/cfg.Interval.Seconds())
		last = n
	})
	start := time.Now()
	pushed := 0
	for pushed < cfg.Tasks && runCtx.Err() == nil {
		if cfg.Rate > 0 {
			at := start.Add(time.Duration(float64(pushed) / cfg.Rate * float64(time.Second)))
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
		if cfg.Rate == 0 {
			if err := r.waitProcessed(runCtx, r.pushed.Load()); err != nil {
				if runCtx.Err() != nil {
					break
				}
				stopTick()
				return err
			}
		}
	}
	// Wait for the stragglers (not counted against a cfg.Duration limit).
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
	r.result["rate"] = cfg.Rate
	fmt.Fprintf(out, "latency: %d tasks in %.2fs (%.0f/s)\n", processed, secs, float64(processed)/secs)
	r.stats.latencies(r.result, out, true)
	return procs.stop()
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
		if r.cfg.Identifiers > 0 {
			k %= int64(r.cfg.Identifiers)
		}
		start := len(buf)
		buf = append(buf, 't')
		buf = strconv.AppendInt(buf, k, 10)
		cs[i] = repository.Creation{Identifier: string(buf[start:]), Input: input}
		if r.cfg.Keys > 0 {
			cs[i].ConcurrencyKey = r.keys[(first+int64(i))%int64(len(r.keys))]
		}
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
	tasks, err := r.repo.Push(ctx, r.pool, topic, r.cfg.Insertion, r.creations(n, at)...)
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
		t := time.NewTicker(r.cfg.Interval)
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

// sleepCtx sleeps for d or until ctx is done.
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

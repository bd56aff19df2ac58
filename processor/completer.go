package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/repository"
)

// report is decisions of one batch's tasks waiting to be committed: every decision the
// batch reported since its previous report was taken for a flush.
type report struct {
	batch       *Batch
	completions []repository.Completion
	followups   []FollowUp
	since       time.Time // when its first decision arrived
	// fallback marks the failure decisions that replace refused ones.
	fallback bool
	// joins are where each later report of the batch joined this one (add): the
	// follow-ups declared with decisions belong to them alone.
	joins []join
}

// join is where a report's completions and follow-ups stood when more joined it.
type join struct{ completions, followups int }

// parts divides r at its joins: each part the decisions of one report of the batch with
// the follow-ups declared before them.
func (r *report) parts() []*report {
	var out []*report
	from := join{}
	for _, to := range append(r.joins, join{len(r.completions), len(r.followups)}) {
		out = append(out, &report{batch: r.batch, since: r.since, fallback: r.fallback,
			completions: r.completions[from.completions:to.completions], followups: r.followups[from.followups:to.followups]})
		from = to
	}
	return out
}

// completer commits the decisions of many tasks and batches together: one Complete
// statement per flush, in one transaction with the batches' follow-ups. A flush goes out
// as soon as the previous one is done (decisions arriving meanwhile join it), after
// FlushInterval, or when FlushSize decisions are waiting. No transaction is open while a
// handler runs. A batch's decisions join its report still waiting, if any, so a batch
// decided task by task costs one report per flush, not one per task.
//
// Without a FlushInterval, decisions of a batch whose handler is still deciding its other
// tasks at a steady pace wait for them (spare), up to holdMax; once the batch goes quiet
// (a slow task) for three times its usual time between decisions, or two flushes' time,
// or holdMin, its decisions so far go out in the next flush. A batch decided steadily, task by task, is
// then committed in one statement, as one reported whole is.
type completer struct {
	m *TaskManager

	mu      sync.Mutex
	pending []*report
	size    int
	signal  chan struct{} // capacity 1
	closed  bool
	done    chan struct{} // closed by close()
	drained chan struct{} // closed when run returns
	// hurry is closed when the shutdown begins: decisions no longer wait FlushInterval.
	hurry     chan struct{}
	hurryOnce sync.Once

	// handedBack counts the tasks handed back unstarted, for the shutdown's log line.
	handedBack atomic.Int64
	// lastFlush is how long the last flush took (hold); only run touches it.
	lastFlush time.Duration
}

// Bounds of the hold (spare): how long decisions of a batch still being decided may wait
// for their batch mates before a flush without FlushInterval goes out.
const (
	holdMin = 5 * time.Millisecond
	holdMax = 100 * time.Millisecond
)

func newCompleter(m *TaskManager) *completer {
	return &completer{m: m, signal: make(chan struct{}, 1), done: make(chan struct{}), hurry: make(chan struct{})}
}

// add queues decisions of b's tasks, with the follow-ups declared before them. It wakes
// run when they change what a flush would do: a batch's first decisions waiting, its
// last one, FlushSize reached. (More decisions of a batch already waiting only extend
// its hold, which run's timer reads.)
func (c *completer) add(b *Batch, completions []repository.Completion, followups []FollowUp) {
	c.mu.Lock()
	wake := b.open == nil
	if r := b.open; r != nil {
		r.joins = append(r.joins, join{len(r.completions), len(r.followups)})
		r.completions = append(r.completions, completions...)
		r.followups = append(r.followups, followups...)
	} else {
		b.open = &report{batch: b, completions: completions, followups: followups, since: time.Now()}
		c.pending = append(c.pending, b.open)
	}
	c.size += len(completions)
	wake = wake || c.size >= c.m.cfg.FlushSize
	c.mu.Unlock()
	if !wake {
		_, _, wake = b.pace() // its last decision
	}
	if wake {
		select {
		case c.signal <- struct{}{}:
		default:
		}
	}
}

// stopWaiting makes every flush go out at once, without waiting FlushInterval for more
// decisions: the shutdown began, and what was decided is to be committed now.
func (c *completer) stopWaiting() {
	c.hurryOnce.Do(func() { close(c.hurry) })
}

// close makes run flush what is pending and return.
func (c *completer) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.done)
	}
}

// take removes up to FlushSize decisions' worth of reports (at least one report),
// leaving those of spare to wait for a later flush unless nothing else is waiting.
func (c *completer) take(spare map[*report]bool) []*report {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out, rest []*report
	size := 0
	for _, r := range c.pending {
		if spare[r] || len(out) > 0 && size+len(r.completions) > c.m.cfg.FlushSize {
			rest = append(rest, r)
			continue
		}
		out = append(out, r)
		size += len(r.completions)
	}
	if len(out) == 0 && len(rest) > 0 {
		out, rest = rest[:1], rest[1:]
		size = len(out[0].completions)
	}
	c.pending = rest
	c.size -= size
	for _, r := range out {
		r.batch.open = nil // later decisions go to a report of their own
	}
	return out
}

func (c *completer) waiting() (reports, size int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending), c.size
}

func (c *completer) run(ctx context.Context) {
	for {
		if n, size := c.waiting(); n > 0 {
			var spare map[*report]bool
			switch {
			case c.hurried() || size >= c.m.cfg.FlushSize:
			case c.m.cfg.FlushInterval > 0:
				c.gather(ctx)
			default:
				spare = c.hold(ctx)
			}
			start := time.Now()
			c.flush(ctx, c.take(spare))
			c.lastFlush = time.Since(start)
			continue
		}
		select {
		case <-c.signal:
		case <-c.done:
			if n, _ := c.waiting(); n == 0 {
				return
			}
		case <-ctx.Done():
			// The shutdown deadline passed with reports unflushed: our owner stops
			// heart-beating soon and expiry returns those tasks.
			if n, _ := c.waiting(); n > 0 {
				c.m.p.logger.Error("decisions not committed before shutdown", slog.String("topic", c.m.cfg.Topic), slog.Int("batches", n))
			}
			// Free what they hold (limiter slots may be shared beyond this processor).
			for n, _ := c.waiting(); n > 0; n, _ = c.waiting() {
				for _, r := range c.take(nil) {
					c.settle(r)
				}
			}
			return
		}
	}
}

func (c *completer) hurried() bool {
	select {
	case <-c.hurry:
		return true
	default:
		return false
	}
}

// hold waits while every waiting report may wait (spare) and returns those that may wait
// for a later flush: nil when FlushSize decisions wait or the shutdown began.
func (c *completer) hold(ctx context.Context) map[*report]bool {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		spare, next := c.spare()
		if spare == nil || len(spare) < c.reports() {
			return spare
		}
		if timer == nil {
			timer = time.NewTimer(time.Until(next))
		} else {
			timer.Reset(time.Until(next))
		}
		select {
		case <-c.signal:
		case <-timer.C:
		case <-c.hurry:
			return nil
		case <-c.done:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

func (c *completer) reports() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// spare returns the waiting reports that may wait for a later flush, and the earliest
// time one of them no longer may; nil when FlushSize decisions wait. A report may wait
// while its batch has tasks still undecided and goes on deciding them at its pace: until
// holdMax after its first decision, and while the batch's latest decision is more recent
// than three times the batch's average time between decisions, twice the last flush's
// duration, or holdMin, whichever is longest. A batch decided steadily is so committed in one statement, and the decisions
// made before a slow task go out once the batch has gone quiet.
func (c *completer) spare() (spare map[*report]bool, next time.Time) {
	now := time.Now()
	c.mu.Lock()
	if c.size >= c.m.cfg.FlushSize {
		c.mu.Unlock()
		return nil, next
	}
	pending := slices.Clone(c.pending)
	c.mu.Unlock()
	spare = make(map[*report]bool, len(pending))
	for _, r := range pending {
		between, last, all := r.batch.pace()
		if all {
			continue
		}
		deadline := last.Add(max(3*between, 2*c.lastFlush, holdMin))
		if limit := r.since.Add(holdMax); limit.Before(deadline) {
			deadline = limit
		}
		if !now.Before(deadline) {
			continue
		}
		spare[r] = true
		if next.IsZero() || deadline.Before(next) {
			next = deadline
		}
	}
	return spare, next
}

// gather waits up to FlushInterval for FlushSize decisions.
func (c *completer) gather(ctx context.Context) {
	timer := time.NewTimer(c.m.cfg.FlushInterval)
	defer timer.Stop()
	for {
		if _, size := c.waiting(); size >= c.m.cfg.FlushSize {
			return
		}
		select {
		case <-c.signal:
		case <-timer.C:
			return
		case <-c.hurry:
			return
		case <-c.done:
			return
		case <-ctx.Done():
			return
		}
	}
}

// settlesABatch reports whether committing reports decides every task left of one of
// their batches, whose limiter slot is then free for the tasks a flush leases
// (commitLeasing). A flush of part of a batch frees capacity of the topic but no slot
// and no worker: what it leased waited, ACTIVE, for the rest of a batch (a TaskFunc runs
// its batch task after task on the poll loop's goroutine, a Buffer's poll loop waits for
// a slot), indefinitely behind a task that hangs without a HandlerTimeout, while the
// topic's limit kept other processes' idle workers from it. The loop polls once the
// batch ends.
//
// A flush holds one report a batch (add joins a batch's decisions in its open report),
// so each report is checked alone: were a batch's decisions ever split over two, the
// flush would only not lease, and the loop would poll.
func settlesABatch(reports []*report) bool {
	for _, r := range reports {
		if n := int64(len(r.completions)); n > 0 && n >= r.batch.unsettled.Load() {
			return true
		}
	}
	return false
}

// flush commits reports together; when the joint commit is refused (a stale lease in
// one batch must not fail the others), it commits them one by one. Database errors are
// retried with backoff until ctx is done, so decisions are not lost to a blip.
func (c *completer) flush(ctx context.Context, reports []*report) {
	if len(reports) == 0 {
		return
	}
	topic := c.m.cfg.Topic
	start := time.Now()
	unsure := false
	if !c.hurried() && c.m.wantsLease() && settlesABatch(reports) && c.m.beginLease() {
		tasks, leased, batches, err := c.commitLeasing(ctx, reports)
		c.m.endLease()
		if err == nil {
			took := time.Since(start)
			c.finish(reports, tasks, took)
			if len(leased) > 0 {
				c.m.dispatched(leased, took)
			}
			for _, b := range batches {
				c.m.hand(b)
			}
			return
		}
		// Commit the decisions alone (and let the poll loop poll): an attempt whose
		// outcome is unknown may have committed them, and leased tasks nobody knows of.
		if unsure = repository.Uncertain(err); unsure {
			c.m.unsure.Store(true)
		}
		c.m.Resume()
	}
	tasks, err := c.commitRetrying(ctx, reports, unsure)
	if err == nil {
		c.finish(reports, tasks, time.Since(start))
		return
	}
	if errors.Is(err, errCommitted) {
		// An earlier attempt committed; its reply was lost. Not an error: the tasks were
		// completed as decided (those retried or snoozed may be due again: poll).
		c.m.p.logger.Info("decisions committed by an attempt whose reply was lost", slog.String("topic", topic),
			slog.Int("batches", len(reports)))
		c.finish(reports, c.readBack(ctx, reports), time.Since(start))
		// That is read from the refusal; the reconciliation checks it (one statement,
		// after a fault only): a task still ACTIVE under this owner runs again.
		c.m.reconcileSoon()
		return
	}
	if len(reports) > 1 && isRefusal(err) {
		for _, r := range reports {
			c.flush(ctx, []*report{r})
		}
		return
	}
	// leasesLost: the server refused decisions because their tasks are no longer ACTIVE
	// under this owner in the attempt completed
	var te *repository.TaskError
	leasesLost := errors.As(err, &te)
	if leasesLost && len(reports) == 1 {
		// Tasks no longer ACTIVE under this owner in the attempt completed: expired and
		// taken back, cancelled, or, after an outage that lost commits, leased under
		// another attempt. The others of the report are still ours: commit them without
		// the refused ones, and reconcile (the refused may be ours in another attempt,
		// which a reconciliation left alone while this batch held them). Marked once the
		// reports are settled: a reconciliation of the poll loop's before then would
		// leave the tasks they hold alone and clear the mark, and the kept tasks of a
		// report with follow-ups would wait for the next periodic one.
		defer c.m.reconcileSoon()
		// Not when the report carries follow-ups: they may be declared for a refused
		// task, and would then be pushed without its decision (and again when it runs
		// again); the kept tasks are found by the reconciliation and run again instead.
		refused, kept := split(reports[0], te)
		if len(refused.completions) > 0 && len(kept.completions) > 0 && len(reports[0].followups) == 0 {
			c.m.cfg.Listener.error(topic, fmt.Errorf("commit decisions of %d tasks, %d refused: %w", completions(reports), len(refused.completions), err))
			c.m.p.logger.Warn(refusedMessage, slog.String("topic", topic), slog.Int("tasks", len(refused.completions)),
				slog.Any("error", err))
			c.settle(refused)
			c.flush(ctx, []*report{kept})
			return
		}
	}
	if r := reports[0]; len(reports) == 1 && isRefusal(err) && !leasesLost && len(r.joins) > 0 && len(r.followups) > 0 {
		// Decisions reported apart that joined one report: one's follow-up refused must
		// not fail the others ("whatever the batch's other tasks do"). Each part goes
		// alone, with the follow-ups declared before its decisions.
		for _, part := range r.parts() {
			c.flush(ctx, []*report{part})
		}
		return
	}
	if r := reports[0]; len(reports) == 1 && isRefusal(err) && !leasesLost && !r.fallback {
		// The decisions or follow-ups themselves were refused (say, a follow-up push to
		// an unknown topic): the tasks are still ours, so fail them with the reason.
		c.m.cfg.Listener.error(topic, fmt.Errorf("batch of %d tasks refused, failing it: %w", len(r.completions), err))
		failed := &report{batch: r.batch, fallback: true, completions: make([]repository.Completion, len(r.completions))}
		for i, comp := range r.completions {
			failed.completions[i] = repository.Completion{Sequence: comp.Sequence, Attempt: comp.Attempt,
				Decision: repository.Fail(fmt.Errorf("decisions could not be committed: %w", err))}
		}
		c.flush(ctx, []*report{failed})
		return
	}
	c.m.cfg.Listener.error(topic, fmt.Errorf("commit decisions of %d batches: %w", len(reports), err))
	log, msg := c.m.p.logger.Error, "decisions not committed"
	if leasesLost {
		// not a fault of the database or of this process: the leases were lost (expired and
		// taken back, cancelled); the tasks run again, as at-least-once promises
		log, msg = c.m.p.logger.Warn, refusedMessage
	}
	log(msg, slog.String("topic", topic), slog.Int("tasks", completions(reports)), slog.Any("error", err))
	for _, r := range reports {
		c.settle(r)
	}
}

// refusedMessage is what the log says of decisions the database refused because their
// tasks were no longer leased to this processor in the attempt decided (a warning: the
// tasks run again, or ran already under another attempt).
const refusedMessage = "decisions refused: tasks no longer leased in the attempt decided"

// split divides r's decisions (a report without follow-ups) into those te refuses and
// the others.
func split(r *report, te *repository.TaskError) (refused, kept *report) {
	no := make(map[int64]bool, len(te.Problems))
	for _, p := range te.Problems {
		no[p.Sequence] = true
	}
	refused = &report{batch: r.batch, since: r.since, fallback: r.fallback}
	kept = &report{batch: r.batch, since: r.since, fallback: r.fallback}
	for _, comp := range r.completions {
		if no[comp.Sequence] {
			refused.completions = append(refused.completions, comp)
		} else {
			kept.completions = append(kept.completions, comp)
		}
	}
	return refused, kept
}

// completions counts the decisions of reports.
func completions(reports []*report) int {
	n := 0
	for _, r := range reports {
		n += len(r.completions)
	}
	return n
}

// settle books a report's decisions as committed or given up on; the batch is finished
// once every task's is.
func (c *completer) settle(r *report) {
	if r.batch.settle(r.completions) {
		// a reconciliation left a lease of one of these tasks alone while this batch
		// ran it under another attempt (TaskManager.reconcile): its turn now
		for _, m := range c.m.p.managersOf(c.m.cfg.Topic) {
			m.reconcileSoon()
		}
	}
	n := int64(len(r.completions))
	c.m.holding.Add(-n)
	if n > 0 && r.batch.unsettled.Add(-n) == 0 {
		c.m.finished(r.batch)
	}
}

// committedBefore reports whether err, the refusal of a retried commit, is the mark of an
// earlier attempt's commit, whose reply was lost. It is when every task of reports is
// refused as no longer ACTIVE under this owner in the attempt completed: the decisions
// are committed all together or not at all, and the owner's leases are not taken back
// while it heart-beats (a task retried may even have been leased again since). Unless a
// refused task shows they did not commit: in the attempt decided it is EXPIRED, which
// no decision makes (its lease was taken back at its last attempt), or, decided SUCCESS
// or FILTER, it is READY (taken back with attempts left); or it was leased again since,
// which a task left SUCCEEDED or FILTERED is not. A process cut off from the database for
// longer than the expiry timeout sees that when the attempt whose outcome it did not
// learn reached the server after the expiry. A FAILURE, a snooze or a SUSPENSION may have
// made the task READY, and a task cancelled while it ran ends FAILED whatever its
// decision: those tell nothing.
func committedBefore(err error, reports []*report) bool {
	var te *repository.TaskError
	if !errors.As(err, &te) {
		return false
	}
	refused := make(map[int64]repository.TaskProblem, len(te.Problems))
	for _, p := range te.Problems {
		if errors.Is(p.Err, repository.ErrWrongState) || errors.Is(p.Err, repository.ErrNotOwned) {
			refused[p.Sequence] = p
		}
	}
	for _, r := range reports {
		for _, comp := range r.completions {
			p, ok := refused[comp.Sequence]
			if !ok {
				return false
			}
			d := comp.Decision
			final := !d.Snooze && (d.Result == repository.Success || d.Result == repository.Filter)
			switch {
			// still ACTIVE in the attempt completed (the refusal raced a change: raced):
			// nothing was committed
			case p.Attempt == comp.Attempt && p.State == repository.Active,
				p.Attempt == comp.Attempt && p.State == repository.Expired,
				p.Attempt == comp.Attempt && p.State == repository.Ready && final,
				p.Attempt != comp.Attempt && final:
				return false
			}
		}
	}
	return true
}

// isRefusal reports whether err is the repository refusing the decisions themselves
// (retrying cannot help), as opposed to a database or connection error.
func isRefusal(err error) bool {
	var te *repository.TaskError
	return errors.As(err, &te) || errors.Is(err, repository.ErrInvalid) || errors.Is(err, repository.ErrUnknownTopic) ||
		errors.Is(err, repository.ErrQueueFull)
}

// racedRetries is how many times commitRetrying commits again decisions refused as
// raced before it gives them up as refused (and the reconciliation runs their tasks).
const racedRetries = 5

// raced reports whether err refuses decisions although every task of reports is, by the
// repository's re-read that explains the refusal, still ACTIVE under this owner in the
// attempt decided ("changed concurrently"): the decisions raced a change, and committing
// them again may succeed. It is never the mark of an earlier commit (committedBefore).
func raced(err error, reports []*report) bool {
	var te *repository.TaskError
	if err == nil || !errors.As(err, &te) || len(te.Problems) == 0 {
		return false
	}
	attempts := make(map[int64]int32)
	for _, r := range reports {
		for _, comp := range r.completions {
			attempts[comp.Sequence] = comp.Attempt
		}
	}
	for _, p := range te.Problems {
		attempt, ok := attempts[p.Sequence]
		if !ok || !errors.Is(p.Err, repository.ErrNotOwned) || p.State != repository.Active || p.Attempt != attempt {
			return false
		}
	}
	return true
}

// defaultCommitTimeout bounds the first attempt to commit decisions (with or without the
// next lease): a connection gone silent (a server that vanished without a reset, an
// address moved by a failover) would otherwise hold the topic's decisions, and its
// leases, until the kernel gives the connection up, some 15 minutes on. The attempt cut
// short is retried as any whose outcome is unknown (committedBefore), each time with
// twice the time, up to maxCommitTimeout: a commit that is merely long (a transaction of
// many follow-ups) still ends.
const (
	defaultCommitTimeout = 30 * time.Second
	maxCommitTimeout     = 10 * time.Minute
)

// readBack reads the tasks of reports' decisions, committed by an attempt whose reply
// was lost, for what finish tells of them (OnComplete, metrics, Subscribe, the timers of
// retried and snoozed tasks): one statement, on this rare path, bounded by
// readBackTimeout (the completer waits for it, on a connection that just lost a reply).
// Only a task still at the attempt its decision named is the outcome of this commit: one
// leased again since (retried, snoozed, handed back) is left out, its later outcome
// told by its own commit. A failed read gives none, as the lost reply did.
func (c *completer) readBack(ctx context.Context, reports []*report) []repository.Task {
	attempts := make(map[int64]int32, completions(reports))
	seqs := make([]int64, 0, completions(reports))
	for _, d := range decisions(reports) {
		attempts[d.Sequence] = d.Attempt
		seqs = append(seqs, d.Sequence)
	}
	rctx, cancel := context.WithTimeout(ctx, readBackTimeout)
	defer cancel()
	tasks, err := c.m.p.repo.GetMany(rctx, c.m.p.pool, c.m.cfg.Topic, seqs...)
	if err != nil {
		c.m.p.logger.Info("could not read back the tasks of decisions committed by an attempt whose reply was lost",
			slog.String("topic", c.m.cfg.Topic), slog.Int("tasks", len(seqs)), slog.Any("error", err))
		return nil
	}
	return slices.DeleteFunc(tasks, func(t repository.Task) bool {
		return t.State == repository.Active || t.Attempt != attempts[t.Sequence]
	})
}

// readBackTimeout bounds readBack.
const readBackTimeout = 2 * time.Second

// errCommitted is what commitRetrying returns when the decisions were refused because
// an earlier attempt, whose reply was lost, had committed them.
var errCommitted = errors.New("decisions already committed")

// commitRetrying commits reports' decisions, retrying database errors until ctx is
// done; unsure says an earlier attempt (commitLeasing's) may have committed them, and
// becomes true once an attempt here fails after its statement was sent.
func (c *completer) commitRetrying(ctx context.Context, reports []*report, unsure bool) ([]repository.Task, error) {
	backoff := newBackoff(50*time.Millisecond, 5*time.Second)
	// The notifier's reconnection, when it ended a wait, is passed on to the poll loop
	// once the commit is done (the notifications sent meanwhile were lost).
	woken := false
	defer func() {
		if woken {
			c.m.Resume()
		}
	}()
	timeout := c.m.p.commitTimeout
	for races := 0; ; {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		connected := c.m.reconnection()
		tasks, err := c.commit(cctx, reports)
		cut := cctx.Err() != nil && ctx.Err() == nil // the attempt's own time ran out
		cancel()
		if races < racedRetries && raced(err, reports) && ctx.Err() == nil {
			// The statement did not see the leases that the re-read then found: a
			// commit became visible in between (seen on Citus after a worker crash).
			// Nothing stands in the decisions' way now. (The database answered: not
			// a fault to report.)
			races++
			c.m.p.logger.Info("decisions raced a change of their leases, committing them again", slog.String("topic", c.m.cfg.Topic),
				slog.Int("tasks", completions(reports)), slog.Any("error", err))
			sleep(ctx, backoff.next())
			continue
		}
		if err == nil || isRefusal(err) || ctx.Err() != nil {
			if err == nil || isRefusal(err) {
				c.m.p.faults.ok(c.m.commitOp) // the database answered
			}
			if unsure && committedBefore(err, reports) {
				return nil, errCommitted
			}
			return tasks, err
		}
		unsure = unsure || repository.Uncertain(err)
		if cut {
			// cut short: a silent connection, or a commit that takes that long (many
			// follow-ups on a loaded server), which the next attempt is given twice the
			// time to finish
			timeout = min(2*timeout, maxCommitTimeout)
		}
		woken = c.m.retry(ctx, "commit decisions", c.m.commitOp, err, backoff, connected) || woken
	}
}

// followups reports whether a report asks for follow-ups.
func followups(reports []*report) bool {
	for _, r := range reports {
		if len(r.followups) > 0 {
			return true
		}
	}
	return false
}

func (c *completer) commit(ctx context.Context, reports []*report) ([]repository.Task, error) {
	if !followups(reports) {
		return c.m.p.repo.Complete(ctx, c.m.p.pool, c.m.cfg.Topic, decisions(reports)...)
	}
	var tasks []repository.Task
	err := repository.Atomically(ctx, c.m.p.pool, func(tx pgx.Tx) error {
		var err error
		tasks, err = c.decide(ctx, tx, reports)
		return err
	})
	return tasks, err
}

// commitLeasing commits reports' decisions and leases the next tasks of the topic at
// one commit, once (the caller commits the decisions alone after an error): as one
// statement (Repository.CompleteAndPoll), or in one transaction with the follow-ups when
// there are any. It returns the committed tasks, those leased, and the batches of those
// (none: none; more than one when split for a Buffer's workers, TaskManager.split),
// which wait for the poll loop (TaskManager.hand). Under a concurrency limit, the
// capacity the decisions free is so taken again at the same commit: a limited topic with
// fast handlers costs one statement per batch, not a commit to complete and another to
// poll, with the slots idle between them.
func (c *completer) commitLeasing(ctx context.Context, reports []*report) (tasks, leased []repository.Task, batches []*Batch, err error) {
	m := c.m
	ctx, cancel := context.WithTimeout(ctx, m.p.commitTimeout)
	defer cancel()
	// As a poll does, from its statement until its batch is tracked (reconcile).
	m.leases.RLock()
	defer m.leases.RUnlock()
	start := time.Now()
	// The poll loop waits meanwhile: this poll takes its turn with the floor, as the
	// loop's polls do, so that it starts where the last one found work.
	from := m.floor.next()
	var polled time.Duration
	if followups(reports) {
		err = repository.Atomically(ctx, m.p.pool, func(tx pgx.Tx) error {
			var err error
			if tasks, err = c.decide(ctx, tx, reports); err != nil {
				return err
			}
			pollStart := time.Now()
			leased, err = m.p.repo.PollFrom(ctx, tx, m.cfg.Topic, m.cfg.Order, m.cfg.Condition, m.cfg.BatchSize, from)
			polled = time.Since(pollStart)
			return err
		})
	} else {
		// one statement: no round trip, and no wait of the server's, between the two
		tasks, leased, err = m.p.repo.CompleteAndPoll(ctx, m.p.pool, m.cfg.Topic, decisions(reports),
			m.cfg.Order, m.cfg.Condition, m.cfg.BatchSize, from)
		polled = time.Since(start)
	}
	if err != nil {
		// whatever the position had taken in (a notification's) goes with it: from the head
		m.floor.restart()
		return tasks, nil, nil, err
	}
	m.polled(from, polled, leased)
	if len(leased) == 0 {
		return tasks, nil, nil, nil
	}
	return tasks, leased, m.prepareHanded(m.split(leased)), nil
}

// decide completes reports' tasks as decided and runs their follow-ups, in tx.
func (c *completer) decide(ctx context.Context, tx pgx.Tx, reports []*report) ([]repository.Task, error) {
	repo := c.m.p.repo
	tasks, err := repo.Complete(ctx, tx, c.m.cfg.Topic, decisions(reports)...)
	if err != nil {
		return nil, err
	}
	// Several junctions lock their identifiers together first, in one order, before any
	// follow-up: one by one, two commits running two fan-ins' junctions in opposite
	// orders could each wait for the other (a deadlock, one of them failed and retried).
	// So do a junction and a push: a REPLACE or a DELETE locks the older rows of its
	// identifiers, which another commit's junction may release while it holds the lock
	// this commit's junction waits for.
	junctions := map[string][]string{}
	n, pushes := 0, 0
	for _, r := range reports {
		for _, f := range r.followups {
			if f.Push {
				pushes++
				continue
			}
			n++
			for _, g := range f.Groups {
				junctions[f.Topic] = append(junctions[f.Topic], g...)
			}
		}
	}
	if n > 1 || n == 1 && pushes > 0 {
		if err := repo.LockJunctions(ctx, tx, junctions); err != nil {
			return nil, err
		}
	}
	for _, r := range reports {
		for _, f := range r.followups {
			if err := runFollowup(ctx, repo, tx, f); err != nil {
				return nil, err
			}
		}
	}
	return tasks, nil
}

// decisions returns reports' completions, in order.
func decisions(reports []*report) []repository.Completion {
	var out []repository.Completion
	for _, r := range reports {
		out = append(out, r.completions...)
	}
	return out
}

func runFollowup(ctx context.Context, repo *repository.Repository, tx pgx.Tx, f FollowUp) error {
	if f.Push {
		_, err := repo.Push(ctx, tx, f.Topic, f.Insertion, f.Creations...)
		return err
	}
	_, err := repo.Junction(ctx, tx, f.Topic, f.Junction, f.Groups...)
	return err
}

// finish tells everyone about a committed flush.
func (c *completer) finish(reports []*report, tasks []repository.Task, took time.Duration) {
	c.m.cfg.Listener.complete(c.m.cfg.Topic, tasks, took)
	c.m.logCommitted(reports, tasks, took)
	c.m.p.publish(tasks)
	for _, t := range tasks {
		if t.State == repository.Ready {
			// Retried or snoozed: poll again when it is due. The database clock set
			// NotBefore; a little skew only makes the first poll early or late.
			c.m.wakeAt(t.NotBefore, repository.PositionOf(t))
		}
	}
	for _, r := range reports {
		for _, f := range r.followups {
			// the topic's own manager hears of its follow-ups by notification; without
			// notifications, it is woken like the others
			if f.Topic != c.m.cfg.Topic || c.m.p.cfg.DisableNotifications {
				c.m.p.Resume(f.Topic)
			}
		}
		c.settle(r)
	}
	if c.m.limited.Load() && len(tasks) > 0 {
		// The commit freed capacity of a limited topic: this manager, which freed it,
		// polls for the next task now. The other processes waiting at the limit are not
		// told: one freed slot wakes one poll, not all of them.
		c.m.Resume()
	}
}

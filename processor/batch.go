package processor

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgtask/pgtask/repository"
)

// Errors a handler's reports can return.
var (
	// ErrAlreadyReported means the task (Decide) or the batch (Complete, Fail, Push,
	// Junction) was already decided: the report was ignored.
	ErrAlreadyReported = errors.New("already reported")
	// ErrForeignDecision means a decision named a task outside the batch. Decide ignores
	// it; Complete fails every task of the batch not yet decided.
	ErrForeignDecision = errors.New("decision for a task outside the batch")
)

// Batch is a set of tasks leased together and handed to a Handler, which reports a
// decision for each of them.
//
// # The batch contract
//
// Every task of a batch gets exactly one decision; the first one reported stands and
// a later one returns ErrAlreadyReported. A handler reports with any of:
//
//   - Decide(sequence, decision): one task. Its decision is committed in the manager's
//     next flush (one statement for the decisions of many tasks and batches), whatever
//     the batch's other tasks do: a slow or stuck task holds up no other. (While its
//     batch mates are being decided at a steady pace, a decision waits for them, up to
//     100 ms, so that the batch is committed in one statement; once the batch is quiet
//     for three times its pace or 5 ms, as behind a slow task, it goes out.)
//   - Complete(decisions): every task not yet decided, each with its entry of decisions;
//     a task without one FAILS with a message saying so. Entries for tasks already
//     decided are ignored. An entry for a task outside the batch fails every task not
//     yet decided and returns ErrForeignDecision.
//   - Fail(err): every task not yet decided FAILS with err's text.
//
// Complete and Fail close the batch: every report after them returns ErrAlreadyReported.
// Reports may come from any goroutine, also after Handle returned. A FAILURE goes back
// to READY while the topic's retry policy grants another attempt; a snooze
// (repository.SnoozeFor) goes back to READY without using one.
//
// Push and Junction declare follow-ups: they commit in one transaction with the batch's
// next decisions (the next Decide or Complete), so they exist if and only if those
// decisions were committed. Declare a task's follow-ups before its decision. Fail drops
// the follow-ups not yet committed.
//
// A handler that has not decided every task within ManagerConfig.HandlerTimeout, or by
// the end of a graceful shutdown (ManagerConfig.ShutdownTimeout), is relieved of the
// batch: the tasks it started FAIL with a message saying why (the retry policy
// applies: with attempts left they go back to READY), and those it never started are
// handed back, READY with no attempt used. A task counts as started once the handler
// got it: TaskFunc and Typed start their tasks one at a time, a Buffer starts a queued
// batch when a worker takes it, and any other handler starts every task of the batch
// when its Handle is called. Decided tasks are committed whatever happens to the rest.
//
// A batch outside a processor (NewBatch, for tests and tools) keeps what its handler
// reports: read it with Outcome once Done is closed.
type Batch struct {
	// Topic is the topic the tasks were polled from.
	Topic string
	// Tasks are the leased tasks, in poll order. A handler may modify them: what is
	// completed is the tasks as they were leased.
	Tasks []repository.Task

	setupOnce sync.Once // builds a batch made by hand (a composite literal)

	stopping <-chan struct{}
	// drained is set by a Buffer that drains at shutdown (OnClose: Drain) before it
	// hands the batch over: a TaskFunc then goes on past Stopping.
	drained atomic.Bool
	started atomic.Pointer[time.Time] // when the handler was given the batch (OnCallback's handling)
	// sink receives each report: the decided tasks' completions and the follow-ups
	// declared before them (TaskManager.reported); nil outside a processor.
	sink func(b *Batch, completions []repository.Completion, followups []FollowUp, kind reportKind, err error)
	// onPanic is told of a panic of the batch's handler (TaskManager.handlerPanicked),
	// wherever it was caught: in the manager, or in a Buffer's worker, with the stack of
	// the goroutine that panicked; nil outside a processor.
	onPanic func(err error, r any, stack []byte)
	// onExit relieves the batch of a handler that ended its goroutine before returning
	// (TaskManager.handlerExited); nil outside a processor.
	onExit func(err error)

	// leases holds one completion per task as polled (Task.Decide, which carries the
	// task's identifier, input and reference to Repository.Complete): what a handler does
	// to Tasks cannot change what is completed or reported as stored. A report fills in
	// the decision. index maps a sequence to its position.
	leases []repository.Completion
	index  map[int64]int
	// leased is a copy of Tasks as polled, for the manager's books and reports, which
	// may read them while the handler changes Tasks (a batch relieved of its handler).
	leased []repository.Task

	ctx context.Context // given to the handler (TaskManager.prepare)
	// slotless is set while a batch a flush leased waits for the poll loop
	// (TaskManager.hand): it holds no limiter slot to free when it is finished.
	slotless atomic.Bool

	mu        sync.Mutex
	decided   []bool
	settled   []bool      // its decision committed, or given up on (completer.settle)
	deferred  []bool      // a reconciliation waits for it to be settled (TaskManager.reconcile)
	begun     []bool      // started by the handler (TaskFunc)
	begunAt   []time.Time // when (OnCallback's handling of a task decided alone)
	allBegun  bool        // every task counts as started
	undecided int
	// firstDecision and lastDecision are when the first and the latest task were decided
	// (the completer's hold: completer.spare).
	firstDecision, lastDecision time.Time
	closed                      bool  // Complete or Fail (or the manager) closed the batch
	failed                      error // what Fail (or a refusal) failed it with
	followups                   []FollowUp
	sent                        int           // followups[:sent] went with decisions or were dropped
	went                        []FollowUp    // the follow-ups that went with decisions (Outcome)
	handedBack                  []int64       // the tasks handed back unstarted (Outcome)
	done                        chan struct{} // closed when no task is undecided
	timeout                     *time.Timer   // HandlerTimeout, stopped once the batch is committed
	timeoutAfter                time.Duration // the HandlerTimeout timeout runs
	cancel                      context.CancelCauseFunc
	taskCtx                     []context.Context
	cancels                     []context.CancelCauseFunc
	// cancelled marks the tasks cancelled while undecided (cancelTask); cancelledLeft
	// counts those not decided since: when it reaches undecided, the batch's context is
	// cancelled too.
	cancelled     []bool
	cancelledLeft int

	// open is the batch's report waiting in the completer for its next flush, which
	// later reports join (guarded by the completer's mutex). unsettled counts the tasks
	// whose decisions are not yet committed (or given up on).
	open      *report
	unsettled atomic.Int64
}

// reportKind says why a batch's tasks were decided, for the manager's logs.
type reportKind int

const (
	reportDecided    reportKind = iota // the handler decided (Decide, Complete)
	reportFailed                       // the handler failed the batch (Fail, panic)
	reportForeign                      // Complete named tasks outside the batch
	reportHandedBack                   // unstarted tasks handed back (shutdown, Buffer)
	reportAbandoned                    // the manager relieved the handler (timeout, deadline)
)

// ErrTaskCancelled is the cause of a task context cancelled because the task was
// cancelled.
var ErrTaskCancelled = errors.New("task cancelled")

// ErrLeaseLost is the cause of a task context cancelled because the processor's
// heartbeat has failed for so long that other processors may soon count it dead and
// take its leases back (Config.ExpiryTimeout): the task would then run again elsewhere
// while this handler still works on it. The handler should stop at once. What it
// decides is committed as usual when the lease is still this processor's: a failure
// uses an attempt, as an expiry would count it; a handler that would rather give the
// task back with its attempt unused decides repository.SnoozeFor(0) (a task whose work
// itself breaks the heartbeat would then come back for ever).
var ErrLeaseLost = errors.New("lease may be lost")

// NewBatch returns a batch of tasks that no manager leased, for running a handler
// outside a processor: in a test (package pgtasktest builds on it), or in a tool. The
// handler reports to the batch as it would in a processor; nothing is committed, and
// Outcome returns what it reported once Done is closed. ctx is the parent of the
// tasks' contexts (Batch.Context); the batch's Stopping channel is never closed.
// Sequences must be distinct, and each task's Topic empty or topic.
func NewBatch(ctx context.Context, topic string, tasks []repository.Task) (*Batch, error) {
	seen := make(map[int64]bool, len(tasks))
	for _, t := range tasks {
		if seen[t.Sequence] {
			return nil, fmt.Errorf("processor: new batch: sequence %d appears twice", t.Sequence)
		}
		seen[t.Sequence] = true
		if t.Topic != "" && t.Topic != topic {
			return nil, fmt.Errorf("processor: new batch of topic %q: task %d is of topic %q", topic, t.Sequence, t.Topic)
		}
	}
	return newBatch(ctx, topic, tasks, nil, nil), nil
}

func newBatch(ctx context.Context, topic string, tasks []repository.Task, stopping <-chan struct{},
	sink func(*Batch, []repository.Completion, []FollowUp, reportKind, error)) *Batch {
	b := &Batch{Topic: topic, Tasks: tasks, stopping: stopping, sink: sink}
	b.build(ctx)
	b.setupOnce.Do(func() {})
	return b
}

// build sets up the batch's books.
func (b *Batch) build(ctx context.Context) {
	b.leased = slices.Clone(b.Tasks)
	n := len(b.leased)
	now := time.Now()
	b.started.Store(&now)
	b.leases = make([]repository.Completion, n)
	b.index = make(map[int64]int, n)
	b.decided = make([]bool, n)
	b.settled = make([]bool, n)
	b.deferred = make([]bool, n)
	b.begun = make([]bool, n)
	b.begunAt = make([]time.Time, n)
	b.undecided = n
	b.done = make(chan struct{})
	if n == 0 {
		close(b.done)
	}
	b.taskCtx = make([]context.Context, n)
	b.cancels = make([]context.CancelCauseFunc, n)
	b.cancelled = make([]bool, n)
	b.unsettled.Store(int64(n))
	ctx = context.WithValue(ctx, stoppingKey{}, b.stopping)
	for i, t := range b.leased {
		b.leases[i] = t.Decide(repository.Decision{})
		b.index[t.Sequence] = i
		b.taskCtx[i], b.cancels[i] = context.WithCancelCause(ctx)
	}
	if b.ctx == nil {
		b.ctx = ctx
	}
}

// setup builds a batch made as a composite literal on first use.
func (b *Batch) setup() {
	b.setupOnce.Do(func() { b.build(context.Background()) })
}

// Context returns the context of one task of the batch: it is done when the task is
// cancelled, its decision was committed (outside a processor, NewBatch: made), or the
// shutdown deadline passes. For a
// sequence outside the batch it returns an already cancelled context.
func (b *Batch) Context(sequence int64) context.Context {
	b.setup()
	if i, ok := b.index[sequence]; ok {
		return b.taskCtx[i]
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

type stoppingKey struct{}

// Stopping returns the channel closed when the manager running the task of ctx (a
// context from Batch.Context, the context a handler is called with, or one derived from
// either, as a Composite's steps get) begins a graceful shutdown, so a long task can
// wrap up early. It returns nil (never closed) for other contexts.
func Stopping(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(stoppingKey{}).(<-chan struct{})
	return ch
}

// Stopping is closed when the manager begins a graceful shutdown: a handler working
// through the batch task by task should hand back the tasks it has not started
// (decide them with repository.SnoozeFor(0)). It is nil, never closed, for a batch
// from NewBatch.
func (b *Batch) Stopping() <-chan struct{} { return b.stopping }

// Done returns a channel that is closed once every task of the batch is decided.
func (b *Batch) Done() <-chan struct{} {
	b.setup()
	return b.done
}

// Decide reports the decision for one task of the batch; it is committed in the next
// flush, whatever the batch's other tasks do. A second decision for the task returns
// ErrAlreadyReported, a sequence outside the batch ErrForeignDecision; both are
// ignored. A decision that repository.Decision.Validate refuses (an unknown result, a
// negative snooze delay) fails the task with a message saying so.
func (b *Batch) Decide(sequence int64, d repository.Decision) error {
	b.setup()
	b.mu.Lock()
	i, ok := b.index[sequence]
	if !ok {
		b.mu.Unlock()
		return fmt.Errorf("decide task %d of topic %q: %w", sequence, b.Topic, ErrForeignDecision)
	}
	if b.decided[i] {
		b.mu.Unlock()
		return fmt.Errorf("decide task %d of topic %q: %w", sequence, b.Topic, ErrAlreadyReported)
	}
	completions := []repository.Completion{b.decideLocked(i, d)}
	followups := b.takeFollowupsLocked()
	b.mu.Unlock()
	b.emit(completions, followups, reportDecided, nil)
	return nil
}

// Complete reports the decisions for every task of the batch not yet decided, keyed by
// task sequence. Tasks without a decision FAIL with a message saying so; decisions for
// tasks already decided are ignored. Decisions for tasks outside the batch fail every
// task not yet decided (ErrForeignDecision). Complete closes the batch: a later report
// returns ErrAlreadyReported and is ignored.
func (b *Batch) Complete(decisions map[int64]repository.Decision) error {
	b.setup()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return fmt.Errorf("complete batch of topic %q: %w", b.Topic, ErrAlreadyReported)
	}
	b.closed = true
	var foreign []int64
	for seq := range decisions {
		if _, in := b.index[seq]; !in {
			foreign = append(foreign, seq)
		}
	}
	if len(foreign) > 0 {
		slices.Sort(foreign)
		err := fmt.Errorf("complete batch of topic %q: %w: tasks %v", b.Topic, ErrForeignDecision, foreign)
		b.failed = err
		completions := b.decideRestLocked(func(int) repository.Decision {
			return repository.Fail(fmt.Errorf("handler reported decisions for tasks outside the batch: %v", foreign))
		})
		b.sent = len(b.followups)
		b.mu.Unlock()
		b.emit(completions, nil, reportForeign, err)
		return err
	}
	completions := b.decideRestLocked(func(i int) repository.Decision {
		if d, ok := decisions[b.leases[i].Sequence]; ok {
			return d
		}
		return repository.Fail(errors.New("handler reported no decision for this task"))
	})
	followups := b.takeFollowupsLocked()
	b.mu.Unlock()
	b.emit(completions, followups, reportDecided, nil)
	return nil
}

// Fail reports a failure of every task of the batch not yet decided: each FAILS with
// err's text (the topic's retry policy applies); tasks already decided keep their
// decisions. Follow-ups not yet committed are dropped. Fail closes the batch: a later
// report returns ErrAlreadyReported and is ignored.
func (b *Batch) Fail(err error) error {
	b.setup()
	if err == nil {
		err = errors.New("batch failed")
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return fmt.Errorf("fail batch of topic %q: %w", b.Topic, ErrAlreadyReported)
	}
	b.closed = true
	b.failed = err
	completions := b.decideRestLocked(func(int) repository.Decision { return repository.Fail(err) })
	b.sent = len(b.followups)
	b.mu.Unlock()
	b.emit(completions, nil, reportFailed, err)
	return nil
}

// Push declares tasks to push when, and only if, the batch's next decisions commit: they
// are pushed in the same transaction. Managers of that topic in this process are resumed
// after the commit. Once every task of the batch is decided it returns
// ErrAlreadyReported: there is nothing left for the push to commit with. A push the
// repository would refuse whatever the database holds (an invalid topic name, an
// unknown insertion, a creation that Creation.Validate refuses) is refused here, its
// error wrapping repository.ErrInvalid, and not declared: at the commit it would fail
// every decision that went with it.
func (b *Batch) Push(topic string, insertion repository.Insertion, creations ...repository.Creation) error {
	if len(creations) == 0 {
		// nothing to push, as Repository.Push takes it
		return b.declare(FollowUp{Topic: topic, Push: true, Insertion: insertion})
	}
	err := repository.ValidateTopic(topic)
	if err == nil && !insertion.Valid() {
		err = fmt.Errorf("unknown insertion %d: %w", insertion, repository.ErrInvalid)
	}
	for i := 0; err == nil && i < len(creations); i++ {
		if err = creations[i].Validate(); err != nil {
			err = fmt.Errorf("creation %d: %w", i, err)
		}
	}
	if err != nil {
		return fmt.Errorf("push follow-up of a batch of topic %q: %w", b.Topic, err)
	}
	return b.declare(FollowUp{Topic: topic, Push: true, Insertion: insertion, Creations: creations})
}

// Junction declares a junction to run in the transaction of the batch's next decisions
// (see Push). A junction the repository would refuse whatever the database holds (an
// invalid topic name, an unknown kind, an invalid identifier) is refused here, its
// error wrapping repository.ErrInvalid.
func (b *Batch) Junction(topic string, junction repository.Junction, groups ...[]string) error {
	err := repository.ValidateTopic(topic)
	if err == nil && junction != repository.Singular && junction != repository.Eternal {
		err = fmt.Errorf("unknown junction %d: %w", junction, repository.ErrInvalid)
	}
	for g := 0; err == nil && g < len(groups); g++ {
		for _, id := range groups[g] {
			if err = repository.ValidateIdentifier(id); err != nil {
				err = fmt.Errorf("group %d: %w", g, err)
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("junction follow-up of a batch of topic %q: %w", b.Topic, err)
	}
	return b.declare(FollowUp{Topic: topic, Junction: junction, Groups: groups})
}

func (b *Batch) declare(f FollowUp) error {
	b.setup()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.undecided == 0 {
		return fmt.Errorf("follow-up of a batch of topic %q: every task is decided: %w", b.Topic, ErrAlreadyReported)
	}
	b.followups = append(b.followups, f)
	return nil
}

// FollowUp is a push or a junction a handler declared (Batch.Push, Batch.Junction), to
// commit together with the batch's decisions.
type FollowUp struct {
	// Topic is the topic pushed to, or whose suspended tasks the junction releases.
	Topic string
	// Push is true for a push of Creations with Insertion, false for a junction of
	// Groups.
	Push bool
	// Insertion is the push's insertion mode.
	Insertion repository.Insertion
	// Creations are the tasks pushed.
	Creations []repository.Creation
	// Junction is the junction's kind.
	Junction repository.Junction
	// Groups are the junction's groups of identifiers.
	Groups [][]string
}

// Outcome is what a handler reported for a batch (Batch.Outcome).
type Outcome struct {
	// Decisions holds the decision of every task decided so far, by sequence.
	Decisions map[int64]repository.Decision
	// Undecided lists the sequences of the tasks not decided yet, in batch order.
	Undecided []int64
	// Failed is what the batch was failed with: the error given to Batch.Fail, a
	// handler's panic or ErrForeignDecision; nil when it was not.
	Failed error
	// FollowUps are the follow-ups that went with decisions (in a processor: that
	// committed with them, or would have), in the order declared.
	FollowUps []FollowUp
	// HandedBack lists the tasks handed back unstarted (a shutdown, a Buffer stopped,
	// a HandlerTimeout before the handler began them), in the order handed back: their
	// decisions are snoozes without delay (READY again, no attempt used) that the handler
	// did not make.
	HandedBack []int64
}

// Outcome returns what the batch's handler reported so far. Wait for Done to see every
// decision.
func (b *Batch) Outcome() Outcome {
	b.setup()
	b.mu.Lock()
	defer b.mu.Unlock()
	o := Outcome{Decisions: make(map[int64]repository.Decision, len(b.leases)), Failed: b.failed,
		FollowUps: slices.Clone(b.went), HandedBack: slices.Clone(b.handedBack)}
	for i, l := range b.leases {
		if b.decided[i] {
			o.Decisions[l.Sequence] = l.Decision
		} else {
			o.Undecided = append(o.Undecided, l.Sequence)
		}
	}
	return o
}

// decideLocked records the decision of task i and returns its completion.
func (b *Batch) decideLocked(i int, d repository.Decision) repository.Completion {
	if err := d.Validate(); err != nil {
		// Refused by the completion, it would fail every decision committed with it:
		// the task alone fails, saying why.
		d = repository.Fail(fmt.Errorf("invalid decision: %w", err))
	}
	b.decided[i] = true
	b.leases[i].Decision = d
	b.undecided--
	if b.cancelled[i] {
		b.cancelledLeft--
	} else {
		b.cancelIfAllCancelledLocked()
	}
	b.lastDecision = time.Now()
	if b.firstDecision.IsZero() {
		b.firstDecision = b.lastDecision
	}
	if b.undecided == 0 {
		close(b.done)
	}
	return b.leases[i]
}

// decideRestLocked decides every undecided task with decision(i).
func (b *Batch) decideRestLocked(decision func(i int) repository.Decision) []repository.Completion {
	if b.undecided == 0 {
		return nil
	}
	out := make([]repository.Completion, 0, b.undecided)
	for i := range b.leases {
		if !b.decided[i] {
			out = append(out, b.decideLocked(i, decision(i)))
		}
	}
	return out
}

func (b *Batch) takeFollowupsLocked() []FollowUp {
	if b.sent == len(b.followups) {
		return nil
	}
	out := b.followups[b.sent:len(b.followups):len(b.followups)]
	b.sent = len(b.followups)
	b.went = append(b.went, out...)
	return out
}

// emit hands a report to the manager. Outside a processor (NewBatch), where nothing is
// committed, the decided tasks' contexts end at once, as a processor's do once their
// decisions are committed.
func (b *Batch) emit(completions []repository.Completion, followups []FollowUp, kind reportKind, err error) {
	if len(completions) == 0 {
		return
	}
	if b.sink != nil {
		b.sink(b, completions, followups, kind, err)
		return
	}
	for _, c := range completions {
		if i, ok := b.index[c.Sequence]; ok {
			b.cancels[i](context.Canceled)
		}
	}
}

// begin marks a task as started (TaskFunc); false if it is decided already.
func (b *Batch) begin(sequence int64) bool {
	b.setup()
	b.mu.Lock()
	defer b.mu.Unlock()
	i, ok := b.index[sequence]
	if !ok || b.decided[i] {
		return false
	}
	b.begun[i] = true
	b.begunAt[i] = time.Now()
	return true
}

// handling is OnCallback's handling for a report of completions: the time since the
// handler began the task, for a report of one task it began alone (TaskFunc: its batch's
// tasks one after the other); since the batch was handed to the handler otherwise.
func (b *Batch) handling(completions []repository.Completion) time.Duration {
	if len(completions) == 1 {
		b.mu.Lock()
		var at time.Time
		if i, ok := b.index[completions[0].Sequence]; ok {
			at = b.begunAt[i]
		}
		b.mu.Unlock()
		if !at.IsZero() {
			return time.Since(at)
		}
	}
	return time.Since(*b.started.Load())
}

// beginAll marks every task as started; false, and none is, when the batch is closed
// (its handler relieved of it: handed back, or failed by the shutdown deadline).
func (b *Batch) beginAll() bool {
	b.setup()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.undecided == 0 {
		return false
	}
	b.allBegun = true
	return true
}

// handOver is called by a Buffer's worker as it takes the batch from its queue to run
// it: the handler's time (OnCallback's handling, the HandlerTimeout) counts from now, not
// from the poll. A timeout that has fired already is left to relieve the batch.
func (b *Batch) handOver() {
	now := time.Now()
	b.started.Store(&now)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timeout != nil && b.timeout.Stop() {
		b.timeout.Reset(b.timeoutAfter)
	}
}

// startTracker is implemented by the handlers that mark themselves which tasks of a
// batch they start (TaskFunc one at a time, Buffered when a worker takes a batch).
type startTracker interface{ tracksStarts() }

// handleBatch hands b to h: a handler that does not say which tasks it starts is taken
// to start all of them.
// A batch closed before it starts is not handed over: a Buffer's worker that took it
// from the queue as its HandlerTimeout relieved it (handing its tasks back, which other
// processes may be running already) looked before that, and would run them again.
func handleBatch(ctx context.Context, h Handler, b *Batch) {
	if _, ok := h.(startTracker); !ok && (b.failCancelled() || !b.beginAll()) {
		return
	}
	h.Handle(ctx, b)
}

// panicked fails the tasks not yet decided of a batch whose handler panicked with r,
// once the manager has reported the panic. It is called by the deferred function that
// recovered r, whose stack still holds the frames that panicked.
func (b *Batch) panicked(r any) {
	err := fmt.Errorf("handler panicked: %v", r)
	if b.onPanic != nil {
		b.onPanic(err, r, debug.Stack())
	}
	_ = b.Fail(err)
}

// ErrHandlerExited is why the undecided tasks a handler had begun fail when it ended its
// goroutine before returning (runtime.Goexit, which a test's t.FailNow and t.Fatal
// call): its text is their FAILURE's message (the others are handed back).
var ErrHandlerExited = errors.New("the handler ended its goroutine (runtime.Goexit, which t.FailNow and t.Fatal call) before deciding this task")

// exited is called, by the deferred function that saw it, when the handler of b ended
// the goroutine that ran it (runtime.Goexit: recover sees no panic, and the goroutine
// ends once its deferred calls return). The handler is relieved of b as at its
// timeout: the started tasks fail, the others go back READY.
func (b *Batch) exited() {
	if b.onExit != nil {
		b.onExit(ErrHandlerExited)
		return
	}
	b.abandon(ErrHandlerExited)
}

// handBack returns every task not yet decided to READY without consuming its attempt
// (tasks leased but never started) and closes the batch; false if none was left.
func (b *Batch) handBack() bool {
	b.setup()
	b.mu.Lock()
	b.closed = true
	completions := b.decideRestLocked(func(i int) repository.Decision { return b.handBackLocked(i) })
	b.sent = len(b.followups)
	b.mu.Unlock()
	b.emit(completions, nil, reportHandedBack, nil)
	return len(completions) > 0
}

// handBackLocked records the task at i as handed back (Outcome.HandedBack) and returns
// its decision: READY again, its attempt not consumed. b.mu is held.
func (b *Batch) handBackLocked(i int) repository.Decision {
	b.handedBack = append(b.handedBack, b.leases[i].Sequence)
	return repository.SnoozeFor(0)
}

// handBackUnstarted hands back the tasks of the batch its handler has not started
// (TaskFunc, while it runs one as the shutdown begins), leaving the batch open for the
// decisions of those it has. It reports whether it handed any back.
func (b *Batch) handBackUnstarted() bool {
	b.setup()
	b.mu.Lock()
	if b.closed || b.allBegun {
		b.mu.Unlock()
		return false
	}
	var back []repository.Completion
	for i := range b.leases {
		if !b.decided[i] && !b.begun[i] {
			back = append(back, b.decideLocked(i, b.handBackLocked(i)))
		}
	}
	b.mu.Unlock()
	b.emit(back, nil, reportHandedBack, nil)
	return len(back) > 0
}

// abandon relieves the handler of the tasks it has not decided (HandlerTimeout, the
// shutdown deadline): those it started FAIL with err, the others are handed back. It
// returns how many of each.
func (b *Batch) abandon(err error) (failed, handedBack int) {
	b.setup()
	b.mu.Lock()
	b.closed = true
	var back, fail []repository.Completion
	for i := range b.leases {
		if b.decided[i] {
			continue
		}
		if b.allBegun || b.begun[i] {
			fail = append(fail, b.decideLocked(i, repository.Fail(err)))
		} else {
			back = append(back, b.decideLocked(i, b.handBackLocked(i)))
		}
	}
	b.sent = len(b.followups)
	b.mu.Unlock()
	b.emit(fail, nil, reportAbandoned, err)
	b.emit(back, nil, reportHandedBack, nil)
	return len(fail), len(back)
}

// pace returns the average time between the batch's decisions so far (0 before the
// second), when the latest was, and whether every task is decided.
func (b *Batch) pace() (between time.Duration, last time.Time, all bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if decided := len(b.leases) - b.undecided; decided > 1 {
		between = b.lastDecision.Sub(b.firstDecision) / time.Duration(decided-1)
	}
	return between, b.lastDecision, b.undecided == 0
}

// takeSlot makes a batch a flush leased hold the limiter slot the poll loop acquired for
// it (TaskManager.takeHanded), unless every task of it was decided meanwhile (false:
// its report needs no slot). One lock for both: a batch whose tasks were all decided
// between a look and the mark (its leases lost), and whose decisions committed, was
// finished as holding no slot, and the slot the loop acquired was never released.
func (b *Batch) takeSlot() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.undecided == 0 {
		return false
	}
	b.slotless.Store(false)
	return true
}

// isClosed reports whether the batch takes no more reports.
func (b *Batch) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed || b.undecided == 0
}

// cancelTask cancels the context of the batch's task of sequence with ErrTaskCancelled;
// false if the batch has no such task or its context has already ended (cancelled by
// an earlier notice: each heartbeat lists the cancelled leases again, settled).
func (b *Batch) cancelTask(sequence int64) bool {
	i, ok := b.index[sequence]
	if !ok {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.taskCtx[i].Err() != nil {
		return false
	}
	b.cancels[i](ErrTaskCancelled)
	if !b.decided[i] {
		b.cancelled[i] = true
		b.cancelledLeft++
	}
	b.cancelIfAllCancelledLocked()
	return true
}

// cancelIfAllCancelledLocked cancels the batch's context, which a BatchFunc works on (it
// cannot see the tasks' own), with ErrTaskCancelled once every task left undecided, one
// at least, is cancelled. b.mu is held.
func (b *Batch) cancelIfAllCancelledLocked() {
	if b.cancel != nil && b.undecidedCancelledLocked() {
		b.cancel(ErrTaskCancelled)
	}
}

// undecidedCancelledLocked reports whether every task of the batch not decided yet, one
// at least, is cancelled (cancelTask). b.mu is held.
func (b *Batch) undecidedCancelledLocked() bool {
	return b.cancelledLeft > 0 && b.cancelledLeft == b.undecided
}

// failCancelled decides FAILED with ErrTaskCancelled every task not decided yet when
// each of them is cancelled, and reports whether it did: a batch of a handler that does
// not say which tasks it starts (a BatchFunc), queued in a Buffer while its tasks were
// cancelled, is not handed over to work on them.
func (b *Batch) failCancelled() bool {
	b.setup()
	b.mu.Lock()
	if b.closed || !b.undecidedCancelledLocked() {
		b.mu.Unlock()
		return false
	}
	failed := b.decideRestLocked(func(int) repository.Decision { return repository.Fail(ErrTaskCancelled) })
	b.mu.Unlock()
	b.emit(failed, nil, reportDecided, nil)
	return true
}

// loseLeases cancels the batch's context, and its tasks', with ErrLeaseLost, and hands
// back the tasks its handler has not started (Processor.guardLeases); it reports
// whether the batch's context was live until then. It does nothing for a batch of no
// manager.
func (b *Batch) loseLeases() bool {
	if b.cancel == nil {
		return false
	}
	live := b.ctx.Err() == nil
	b.cancel(ErrLeaseLost)
	b.handBackUnstarted()
	return live
}

// settle books completions' tasks as settled: their decisions are committed, or given up
// on, and the manager neither runs nor commits them any more; their contexts end then,
// whatever the batch's other tasks still do. It reports whether a reconciliation waited
// for one of them (deferReconcile).
func (b *Batch) settle(completions []repository.Completion) (deferred bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range completions {
		if i, ok := b.index[c.Sequence]; ok {
			b.settled[i] = true
			deferred = deferred || b.deferred[i]
			b.cancels[i](context.Canceled)
		}
	}
	return deferred
}

// deferReconcile marks the task of sequence as one a reconciliation waits for: the
// server holds it ACTIVE under this owner in another attempt than the one this batch
// runs. Its settlement reconciles again; it reports false when the task was settled
// meanwhile (the caller reconciles again itself).
func (b *Batch) deferReconcile(sequence int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i, ok := b.index[sequence]
	if !ok || b.settled[i] {
		return false
	}
	b.deferred[i] = true
	return true
}

// eachUnsettled calls fn with the lease of each task whose decision is not yet settled: the
// tasks the manager still runs or commits (TaskManager.reconcile).
func (b *Batch) eachUnsettled(fn func(repository.Completion)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, l := range b.leases {
		if !b.settled[i] {
			fn(l)
		}
	}
}

func (b *Batch) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timeout != nil {
		b.timeout.Stop()
	}
	if b.cancel != nil {
		b.cancel(context.Canceled)
	}
	for _, cancel := range b.cancels {
		cancel(context.Canceled)
	}
}

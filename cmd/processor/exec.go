package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// Exit codes of a task program and what they mean (docs/processor.md).
const (
	exitSuccess    = 0  // SUCCESS: stdout is the output message
	exitFailure    = 1  // FAILURE: stderr is the error; the topic's retry policy applies
	exitFilter     = 2  // FILTER: the task was irrelevant
	exitSuspension = 3  // SUSPENSION: wait for a junction or revival
	exitDataErr    = 65 // EX_DATAERR: FAILURE without retry (the input is wrong), stderr is the error
	exitTempFail   = 75 // EX_TEMPFAIL: retry after --retry-delay without using an attempt
)

// waitDelay bounds how long the processor waits for a program's output pipes after the
// program exited or was killed (a background child may still hold them open).
const waitDelay = 2 * time.Second

// errTimedOut is the cause of a task context that ran out of --timeout.
var errTimedOut = errors.New("timed out")

// execHandler runs a program per task (processor --exec).
type execHandler struct {
	program    string
	args       []string
	timeout    time.Duration
	retryDelay time.Duration
	logger     *slog.Logger
	lifeline   *lifeline
	// unstartable counts the tasks in a row whose program could not be started (health)
	unstartable streak
}

// streakLimit tasks in a row retried later for the same reason, over at least
// streakForDefault, make the processor unhealthy: a program swapped by a redeploy
// fails to start for a moment (the tasks it failed start after --retry-delay), one that
// can never start (a missing interpreter, a binary of another architecture, a script
// with CRLF line ends) fails every task, snoozed again and again without using an
// attempt, which nothing but the log would show; so does an endpoint that answers 503
// to everything (a load balancer without a healthy backend).
const (
	streakLimit      = 3
	streakForDefault = time.Minute
)

// streak counts the tasks in a row that met one condition, the first of them at since
// and the latest at last; the workers report at once.
type streak struct {
	mu          sync.Mutex
	n           int
	since, last time.Time
	// after is how long they must have gone on to count (streakForDefault)
	after time.Duration
}

// add records a task that met the condition (met) or did not, and returns how many in
// a row did.
func (s *streak) add(met bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	switch {
	case !met:
		s.n = 0
	case s.n == 0:
		s.n, s.since, s.last = 1, now, now
	default:
		s.n, s.last = s.n+1, now
	}
	return s.n
}

// health says what (a sentence's subject and verb: "the program could not be started")
// for the last streakLimit tasks or more, from the first to the latest over after or
// more, until a task does not. A burst that ended at once (an endpoint's own redeploy,
// its tasks retried later) is no streak, however long ago it began.
func (s *streak) health(what string) error {
	s.mu.Lock()
	n, over := s.n, s.last.Sub(s.since)
	s.mu.Unlock()
	if n >= streakLimit && over >= s.after {
		return fmt.Errorf("%s for the last %d tasks, over %v (see the log)", what, n, over.Round(time.Second))
	}
	return nil
}

// health reports the program failing to start for the last streakLimit tasks or more,
// over streakForDefault or more, until one starts.
func (h *execHandler) health() error {
	return h.unstartable.health("the program could not be started")
}

// newExecHandler returns a handler whose programs die with this process (guard.go).
func newExecHandler(program string, args []string, timeout, retryDelay time.Duration, logger *slog.Logger) (*execHandler, error) {
	l, err := newLifeline()
	if err != nil {
		return nil, err
	}
	return &execHandler{program: program, args: args, timeout: timeout, retryDelay: retryDelay, logger: logger, lifeline: l,
		unstartable: streak{after: streakForDefault}}, nil
}

// execOutcome is how one run of the program ended.
type execOutcome struct {
	// startErr is set when the program could not be started at all.
	startErr error
	// exitCode is the program's exit code; -1 when a signal killed it.
	exitCode int
	signal   string // such as "9 (killed)"
	// started: the program ran (whatever became of it)
	started bool
	// timedOut, cancelled, leaseLost or shutdown say why the processor killed it, if it
	// did.
	timedOut, cancelled, leaseLost, shutdown bool
	stdout, stderr                           string
}

// handle runs the program for one task and decides the task's result from how it ended.
func (h *execHandler) handle(ctx context.Context, task repository.Task) repository.Decision {
	start := time.Now()
	o := h.run(ctx, task)
	d := execDecision(o, h.timeout, h.retryDelay)
	if o.startErr != nil || o.started {
		h.unstartable.add(!o.started)
	}
	if o.startErr != nil {
		h.logger.Error("program could not be started: the task is retried after the retry delay, no attempt used",
			slog.String("program", h.program), slog.Int64("sequence", task.Sequence), slog.Duration("retry_delay", h.retryDelay),
			slog.Any("error", o.startErr))
	}
	logTask(h.logger, task, d, time.Since(start), slog.Int("exit_code", o.exitCode))
	return d
}

func (h *execHandler) run(ctx context.Context, task repository.Task) execOutcome {
	ctx, cancel := context.WithTimeoutCause(ctx, h.timeout, errTimedOut)
	defer cancel()
	// The program runs in a process group of its own task, led by a guard that kills the
	// group if the processor dies (guard.go). The group lets a timeout or cancel kill
	// whatever the program started too, and keeps a Ctrl-C at the terminal to the
	// processor, which then lets running tasks finish.
	guard, err := h.lifeline.guard()
	if err != nil {
		return execOutcome{startErr: err, exitCode: -1}
	}
	group := guard.Process.Pid
	defer func() {
		// The task is over: whatever the program left running in its process group goes
		// with it, so background children cannot pile up over thousands of tasks.
		_ = syscall.Kill(-group, syscall.SIGKILL)
		_ = guard.Wait()
	}()
	stdout := &headBuffer{limit: outputLimit}
	stderr := &tailBuffer{limit: outputLimit}
	cmd := exec.CommandContext(ctx, h.program, h.args...)
	cmd.Stdin = strings.NewReader(task.Input)
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	cmd.Env = append(childEnv(os.Environ()), taskEnv(task)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: group}
	cmd.Cancel = func() error {
		return syscall.Kill(-group, syscall.SIGKILL)
	}
	cmd.WaitDelay = waitDelay

	err = cmd.Run()
	o := execOutcome{stdout: stdout.String(), stderr: stderr.String()}
	state := cmd.ProcessState
	if state == nil {
		// ended before the program could start (cancelled, or the handlers relieved at
		// the shutdown's deadline): not a failure to start it, which would be logged
		// as an ERROR and counted against the health
		switch cause := context.Cause(ctx); {
		case ctx.Err() == nil:
			o.startErr = err
		case errors.Is(cause, processor.ErrTaskCancelled):
			o.cancelled = true
		case errors.Is(cause, errTimedOut):
			o.timedOut = true
		case errors.Is(cause, processor.ErrLeaseLost):
			o.leaseLost = true
		default:
			o.shutdown = true
		}
		o.exitCode = -1
		return o
	}
	o.started = true
	o.exitCode = state.ExitCode()
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		o.signal = fmt.Sprintf("%d (%v)", int(ws.Signal()), ws.Signal())
		// Only a kill of ours counts as timeout or cancel: a program that exited on
		// its own just as the deadline passed keeps its exit code.
		if ctx.Err() != nil {
			switch cause := context.Cause(ctx); {
			case errors.Is(cause, errTimedOut):
				o.timedOut = true
			case errors.Is(cause, processor.ErrTaskCancelled):
				o.cancelled = true
			case errors.Is(cause, processor.ErrLeaseLost):
				o.leaseLost = true
			default:
				o.shutdown = true
			}
		}
	}
	return o
}

// childEnv is the processor's environment (environ) as a program gets it: without the
// processor's own settings (DATABASE_URL and the PGTASK_ variables of options) and the
// passwords libpq's variables give its connection (PGPASSWORD, PGSSLPASSWORD), which
// would give every program, and whatever a task's untrusted input makes it run, the
// database's credentials and the webhook's URL.
func childEnv(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		if name, _, _ := strings.Cut(kv, "="); !processorVars[name] {
			out = append(out, kv)
		}
	}
	return out
}

// processorVars are the variables childEnv leaves out: the settings of options, and
// libpq's passwords.
var processorVars = func() map[string]bool {
	vars := map[string]bool{"PGPASSWORD": true, "PGSSLPASSWORD": true}
	for _, o := range options {
		vars[o.env] = true
	}
	return vars
}()

// taskEnv is what the program learns about its task from the environment.
func taskEnv(t repository.Task) []string {
	return []string{
		"PGTASK_TOPIC=" + t.Topic,
		"PGTASK_IDENTIFIER=" + t.Identifier,
		"PGTASK_SEQUENCE=" + strconv.FormatInt(t.Sequence, 10),
		"PGTASK_ATTEMPT=" + strconv.FormatInt(int64(attempt(t)), 10),
		"PGTASK_REFERENCE=" + t.Reference,
	}
}

// attempt is the number of this try of the task, counting only the leases that use the
// topic's retry budget (not those handed back at a shutdown or snoozed): 1 on the first try.
func attempt(t repository.Task) int32 { return t.Attempt - t.Returned }

// execDecision maps how a program ended to the task's decision (docs/processor.md):
// exit 0 SUCCESS with stdout as message, 1 FAILURE with stderr as error, 2 FILTER,
// 3 SUSPENSION, 65 FAILURE without retry, 75 retry after retryDelay without using an
// attempt, anything else FAILURE; a program killed by a timeout, a cancel or a signal FAILS; one that could
// not be started is retried after retryDelay without using an attempt.
func execDecision(o execOutcome, timeout, retryDelay time.Duration) repository.Decision {
	switch {
	case o.startErr != nil:
		// the task never ran: the program (or its guard) could not start, a problem of
		// the deployment (a binary swapped, no process left to fork), not of the task
		return repository.SnoozeFor(retryDelay)
	case o.cancelled:
		return repository.Fail(errors.New("cancelled"))
	case o.timedOut:
		return repository.Fail(withTail(fmt.Sprintf("timed out after %v", timeout), o.stderr))
	case o.leaseLost:
		// an attempt used, as an expiry would count it: a program whose run itself
		// breaks the heartbeat (a server it overloads) does not come back for ever
		return repository.Fail(withTail("killed: "+leaseLostReason, o.stderr))
	case o.shutdown:
		return repository.Fail(withTail("killed at processor shutdown", o.stderr))
	case o.signal != "":
		return repository.Fail(withTail("killed by signal "+o.signal, o.stderr))
	}
	switch o.exitCode {
	case exitSuccess:
		return repository.Succeed(o.stdout)
	case exitFailure:
		if o.stderr == "" {
			return repository.Fail(errors.New("exit status 1"))
		}
		return repository.Fail(errors.New(o.stderr))
	case exitFilter:
		return repository.Skip(o.stdout)
	case exitSuspension:
		return repository.Suspend(o.stdout)
	case exitTempFail:
		return repository.SnoozeFor(retryDelay)
	case exitDataErr:
		return repository.FailFinal(withTail("exit status 65", o.stderr))
	default:
		return repository.Fail(withTail(fmt.Sprintf("exit status %d", o.exitCode), o.stderr))
	}
}

// withTail joins a reason and the program's stderr tail into an error.
func withTail(reason, tail string) error {
	if tail == "" {
		return errors.New(reason)
	}
	return errors.New(reason + ": " + tail)
}

// logTask logs a task's outcome: failures at info, the rest at debug.
func logTask(logger *slog.Logger, t repository.Task, d repository.Decision, took time.Duration, attrs ...slog.Attr) {
	level := slog.LevelDebug
	result := d.Result.String()
	if d.Snooze {
		result = "RETRY_LATER"
	} else if d.Result == repository.Failure {
		level = slog.LevelInfo
	}
	attrs = append([]slog.Attr{
		slog.Int64("sequence", t.Sequence),
		slog.String("identifier", t.Identifier),
		slog.Int("attempt", int(attempt(t))),
		slog.String("result", result),
		slog.Duration("took", took),
	}, attrs...)
	if d.Result == repository.Failure && !d.Snooze {
		attrs = append(attrs, slog.String("error", d.Message))
	}
	logger.LogAttrs(context.Background(), level, "task handled", attrs...)
}

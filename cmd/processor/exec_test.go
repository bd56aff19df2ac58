package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/logbuf"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

func TestExecDecision(t *testing.T) {
	t.Parallel()
	const timeout, retryDelay = 5 * time.Minute, 30 * time.Second
	for _, tc := range []struct {
		name    string
		outcome execOutcome
		want    repository.Decision
	}{
		{"Exit0SucceedsWithStdout", execOutcome{exitCode: 0, stdout: "sent", stderr: "noise"}, repository.Succeed("sent")},
		{"Exit0WithoutStdoutStoresNothing", execOutcome{exitCode: 0}, repository.Succeed("")},
		{"Exit1FailsWithStderr", execOutcome{exitCode: 1, stdout: "partial", stderr: "smtp refused"}, repository.Fail(errors.New("smtp refused"))},
		{"Exit1WithoutStderrSaysExitStatus", execOutcome{exitCode: 1}, repository.Fail(errors.New("exit status 1"))},
		{"Exit2Filters", execOutcome{exitCode: 2, stdout: "not mine"}, repository.Skip("not mine")},
		{"Exit3Suspends", execOutcome{exitCode: 3, stdout: "needs review"}, repository.Suspend("needs review")},
		{"Exit65FailsWithoutRetry", execOutcome{exitCode: 65, stderr: "not JSON"}, repository.FailFinal(errors.New("exit status 65: not JSON"))},
		{"Exit75RetriesLater", execOutcome{exitCode: 75, stderr: "busy"}, repository.SnoozeFor(retryDelay)},
		{"OtherExitFailsWithStatusAndStderr", execOutcome{exitCode: 42, stderr: "odd"}, repository.Fail(errors.New("exit status 42: odd"))},
		{"OtherExitWithoutStderr", execOutcome{exitCode: 127}, repository.Fail(errors.New("exit status 127"))},
		{"TimeoutFails", execOutcome{exitCode: -1, signal: "killed", timedOut: true}, repository.Fail(errors.New("timed out after 5m0s"))},
		{"TimeoutKeepsStderr", execOutcome{exitCode: -1, signal: "killed", timedOut: true, stderr: "stuck"}, repository.Fail(errors.New("timed out after 5m0s: stuck"))},
		{"CancelFails", execOutcome{exitCode: -1, signal: "killed", cancelled: true, stderr: "x"}, repository.Fail(errors.New("cancelled"))},
		{"LeaseLostKillFails", execOutcome{exitCode: -1, signal: "killed", leaseLost: true, stderr: "x"}, repository.Fail(errors.New("killed: " + leaseLostReason + ": x"))},
		{"ShutdownKillFails", execOutcome{exitCode: -1, signal: "killed", shutdown: true}, repository.Fail(errors.New("killed at processor shutdown"))},
		{"ForeignSignalFails", execOutcome{exitCode: -1, signal: "11 (segmentation fault)", stderr: "core"}, repository.Fail(errors.New("killed by signal 11 (segmentation fault): core"))},
		{"StartErrorRetriesLater", execOutcome{exitCode: -1, startErr: errors.New("permission denied")}, repository.SnoozeFor(retryDelay)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := execDecision(tc.outcome, timeout, retryDelay); got != tc.want {
				t.Errorf("decision %+v, want %+v", got, tc.want)
			}
		})
	}
}

// runScript runs an in-process exec handler on a shell script for one task.
// The program is /bin/sh with the script as its first argument, not the
// script itself: executing a file this process has just written fails now and
// then with "text file busy" when a parallel test forks while the file is open
// for writing (the child holds the descriptor until it execs).
func runScript(t *testing.T, ctx context.Context, body string, timeout time.Duration, task repository.Task, args ...string) repository.Decision {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script.sh")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := newExecHandler("/bin/sh", append([]string{path}, args...), timeout, time.Minute, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return h.handle(ctx, task)
}

func TestExecHandler(t *testing.T) {
	t.Parallel()
	task := repository.Task{Topic: "mail", Sequence: 7, Identifier: "user-1", Input: "hello\x01world", Reference: "r", Attempt: 2}

	t.Run("InputOnStdinTaskInEnvironment", func(t *testing.T) {
		t.Parallel()
		d := runScript(t, t.Context(), `printf '%s|%s|%s|%s|%s|%s|%s' "$(cat)" "$PGTASK_TOPIC" "$PGTASK_IDENTIFIER" "$PGTASK_SEQUENCE" "$PGTASK_ATTEMPT" "$PGTASK_REFERENCE" "$1"`,
			time.Minute, task, "arg")
		if want := repository.Succeed("hello\x01world|mail|user-1|7|2|r|arg"); d != want {
			t.Errorf("decision %+v, want %+v", d, want)
		}
	})

	t.Run("OutputIsMadeStorable", func(t *testing.T) {
		t.Parallel()
		d := runScript(t, t.Context(), `printf '  ok\000\377done  \n'`, time.Minute, task)
		if want := repository.Succeed("ok\uFFFDdone"); d != want {
			t.Errorf("decision %+v, want %+v (no NUL, valid UTF-8, trimmed)", d, want)
		}
	})

	// A program removed after the processor started (a redeploy swapping it): the task
	// never ran, so it is retried later without using an attempt, and the log says why.
	t.Run("AProgramGoneRetriesLaterAndLogs", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "gone.sh")
		if err := os.WriteFile(path, []byte("#!/bin/sh\necho ok\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		var logs logbuf.Buffer
		h, err := newExecHandler(path, nil, time.Minute, 30*time.Second, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if d := h.handle(t.Context(), task); d != repository.SnoozeFor(30*time.Second) {
			t.Errorf("decision %+v, want a retry after the retry delay, no attempt used", d)
		}
		if !strings.Contains(logs.String(), "program could not be started") || !strings.Contains(logs.String(), path) {
			t.Errorf("log %q, want an ERROR naming the program", logs.String())
		}
	})

	// A program that can never start (here: gone) makes the processor unhealthy after
	// three tasks in a row over a while (a minute; here 300 ms), and healthy again once
	// one starts.
	t.Run("AProgramThatCannotStartMakesItUnhealthy", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "job.sh")
		write := func() {
			if err := os.WriteFile(path, []byte("#!/bin/sh\necho ok\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		write()
		h, err := newExecHandler(path, nil, time.Minute, 30*time.Second, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		h.unstartable.after = 300 * time.Millisecond
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		for i := range streakLimit {
			if err := h.health(); err != nil {
				t.Fatalf("health after %d failed starts: %v, want healthy", i, err)
			}
			h.handle(t.Context(), task)
		}
		// a moment's failures (a redeploy swapping the program) do not make it unhealthy
		if err := h.health(); err != nil {
			t.Fatalf("health right after %d failed starts: %v, want healthy until they have gone on for a while", streakLimit, err)
		}
		time.Sleep(h.unstartable.after)
		h.handle(t.Context(), task) // the failures go on
		if err := h.health(); err == nil || !strings.Contains(err.Error(), "could not be started for the last 4 tasks") {
			t.Fatalf("health after %d failed starts over %v: %v, want unhealthy saying so", streakLimit+1, h.unstartable.after, err)
		}
		write()
		// (a fork of a parallel test may hold the new file open for a moment: "text file
		// busy", a failed start, tried again)
		d := h.handle(t.Context(), task)
		for i := 0; i < 20 && d.Snooze; i++ {
			time.Sleep(50 * time.Millisecond)
			d = h.handle(t.Context(), task)
		}
		if d != repository.Succeed("ok") {
			t.Fatalf("decision once the program is back: %+v", d)
		}
		if err := h.health(); err != nil {
			t.Errorf("health once a program started: %v, want healthy", err)
		}
	})

	t.Run("TimeoutKillsTheProcessGroup", func(t *testing.T) {
		t.Parallel()
		pidFile := filepath.Join(t.TempDir(), "pid")
		start := time.Now()
		// 2 s: time for the shell to start the grandchild and write its pid and line
		// on a loaded machine; the grandchild would live 30.
		d := runScript(t, t.Context(), `sleep 30 & echo $! > "$1"; echo working >&2; wait`, 2*time.Second, task, pidFile)
		if want := repository.Fail(errors.New("timed out after 2s: working")); d != want {
			t.Errorf("decision %+v, want %+v", d, want)
		}
		if took := time.Since(start); took > 15*time.Second {
			t.Errorf("took %v, want about the 2s timeout", took)
		}
		pid := readPID(t, pidFile)
		waitFor(t, 5*time.Second, "the grandchild to die with its process group", func() bool { return !alive(pid) })
	})

	t.Run("CancelKillsAndFails", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancelCause(t.Context())
		time.AfterFunc(200*time.Millisecond, func() { cancel(processor.ErrTaskCancelled) })
		d := runScript(t, ctx, `sleep 30`, time.Minute, task)
		if want := repository.Fail(errors.New("cancelled")); d != want {
			t.Errorf("decision %+v, want %+v", d, want)
		}
	})

	t.Run("EndedBeforeItStartedIsNoFailedStart", func(t *testing.T) {
		// the shutdown's deadline relieves the handlers with a plain cancel: a program
		// not started by then was counted as one that could not be started (an ERROR,
		// the health's count), and retried as such
		t.Parallel()
		h, err := newExecHandler("/bin/sh", []string{"-c", "true"}, time.Minute, time.Minute, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		o := h.run(ctx, task)
		if o.startErr != nil || o.started || !o.shutdown {
			t.Errorf("outcome %+v, want a shutdown, not a failed start", o)
		}
		if d := execDecision(o, time.Minute, time.Minute); d.Snooze {
			t.Errorf("decision %+v, want no retry of a start", d)
		}
	})

	t.Run("SignalFails", func(t *testing.T) {
		t.Parallel()
		d := runScript(t, t.Context(), `echo dying >&2; kill -KILL $$`, time.Minute, task)
		if want := repository.Fail(errors.New("killed by signal 9 (killed): dying")); d != want {
			t.Errorf("decision %+v, want %+v", d, want)
		}
	})

	t.Run("StderrTailIsKept", func(t *testing.T) {
		t.Parallel()
		d := runScript(t, t.Context(), `head -c 20000 /dev/zero | tr '\0' e >&2; echo " the end" >&2; exit 1`, time.Minute, task)
		if d.Result != repository.Failure || !strings.HasPrefix(d.Message, truncated+"eee") ||
			!strings.HasSuffix(d.Message, "e the end") || len(d.Message) != outputLimit-1+len(truncated) /* the newline is trimmed */ {
			t.Errorf("decision %v with %d-byte message %.20q…, want FAILURE with the last %d bytes of stderr", d.Result, len(d.Message), d.Message, outputLimit)
		}
	})

	t.Run("LeftoverChildrenDoNotBlockAndAreKilled", func(t *testing.T) {
		t.Parallel()
		pidFile := filepath.Join(t.TempDir(), "pid")
		start := time.Now()
		d := runScript(t, t.Context(), `echo quick; sleep 30 & echo $! > "$1"`, time.Minute, task, pidFile)
		if d != repository.Succeed("quick") {
			t.Errorf("decision %+v, want SUCCESS quick", d)
		}
		if took := time.Since(start); took > waitDelay+3*time.Second {
			t.Errorf("took %v, want at most about the %v wait delay", took, waitDelay)
		}
		pid := readPID(t, pidFile)
		waitFor(t, 5*time.Second, "the leftover child to be killed", func() bool { return !alive(pid) })
	})
}

// TestGuard checks both kinds of guard: when the processor's end of the lifeline closes,
// as at its death, the program and what it started are killed.
func TestGuard(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		self bool
	}{
		{"Shell", false},
		{"ProcessorBinary", true},
	} {
		t.Run(tc.name+"KillsTheGroupWhenTheLifelineCloses", func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			script, pidFile := filepath.Join(dir, "script.sh"), filepath.Join(dir, "pids")
			if err := os.WriteFile(script, []byte(`sleep 300 & echo "$$ $!" > "$1.tmp"; mv "$1.tmp" "$1"; wait`), 0o644); err != nil {
				t.Fatal(err)
			}
			h, err := newExecHandler("/bin/sh", []string{script, pidFile}, time.Minute, time.Minute, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if tc.self {
				if h.lifeline.path, h.lifeline.args, err = selfGuard(); err != nil {
					t.Fatal(err)
				}
			}
			decision := make(chan repository.Decision, 1)
			go func() { decision <- h.handle(t.Context(), repository.Task{Topic: "t", Sequence: 1}) }()
			var pids []int
			waitFor(t, 10*time.Second, "the program to write its PID and its child's", func() bool {
				pids = readPIDs(t, pidFile)
				return len(pids) == 2
			})
			group := processGroup(t, pids[0])
			if group == pids[0] || !alive(group) {
				t.Errorf("program %d leads its process group %d, want a live guard to lead it", pids[0], group)
			}

			if err := h.lifeline.write.Close(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, time.Second, "the program, its child and the guard to die", func() bool {
				return len(living([]int{pids[0], pids[1], group})) == 0
			})
			if d, want := <-decision, repository.Fail(errors.New("killed by signal 9 (killed)")); d != want {
				t.Errorf("decision %+v, want %+v", d, want)
			}
		})
	}
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// readPIDs reads the PIDs a program wrote to path, separated by white space; none
// while the file does not exist yet.
func readPIDs(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, field := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(field)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// processGroup reads the process group of a running process from /proc.
func processGroup(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// After the command name in parentheses: state, parent, process group.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 3 {
		t.Fatalf("/proc/%d/stat: %q has no process group", pid, s)
	}
	group, err := strconv.Atoi(fields[2])
	if err != nil {
		t.Fatalf("/proc/%d/stat: %v", pid, err)
	}
	return group
}

// living returns those of pids that are alive.
func living(pids []int) []int {
	var left []int
	for _, pid := range pids {
		if alive(pid) {
			left = append(left, pid)
		}
	}
	return left
}

// alive reports whether a process exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestOutputBuffers(t *testing.T) {
	t.Parallel()
	head := &headBuffer{limit: 5}
	for _, p := range []string{"ab", "cdef", "gh"} {
		if n, err := head.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("head write %q: %d, %v", p, n, err)
		}
	}
	if got := head.String(); got != "abcde"+truncated {
		t.Errorf("head %q, want %q", got, "abcde"+truncated)
	}
	tail := &tailBuffer{limit: 5}
	for _, p := range []string{"ab", "cdef", "gh"} {
		_, _ = tail.Write([]byte(p))
	}
	if got := tail.String(); got != truncated+"defgh" {
		t.Errorf("tail %q, want %q", got, truncated+"defgh")
	}
	small := &tailBuffer{limit: 5}
	_, _ = small.Write([]byte(" ab\n"))
	if got := small.String(); got != "ab" {
		t.Errorf("small tail %q, want %q", got, "ab")
	}
	// A multi-byte rune cut at the edge must not make the text unstorable.
	cut := &headBuffer{limit: 2}
	_, _ = cut.Write([]byte("€!"))
	if got := cut.String(); got != "\uFFFD"+truncated {
		t.Errorf("cut rune %q, want %q", got, "\uFFFD"+truncated)
	}
}

// TestExecEnvironment: a program gets the processor's environment without the
// processor's own settings: DATABASE_URL (the database's credentials) and the PGTASK_
// variables (the webhook's URL among them) would reach every program and whatever a
// task's untrusted input makes it run. Other variables pass, and the task's PGTASK_
// variables are its own.
func TestExecEnvironment(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://app:secret@db/app")
	t.Setenv("PGTASK_HTTP", "https://hooks.example.com/T0/SECRET")
	t.Setenv("PGTASK_TOPIC", "processor-topic")
	t.Setenv("PGTASK_TEST_KEPT", "kept")
	t.Setenv("PGPASSWORD", "secret")
	task := repository.Task{Topic: "mail", Identifier: "user-1", Sequence: 7, Attempt: 1}
	d := runScript(t, t.Context(), `printf '%s|%s|%s|%s|%s' "${DATABASE_URL-unset}" "${PGTASK_HTTP-unset}" "$PGTASK_TOPIC" "$PGTASK_TEST_KEPT" "${PGPASSWORD-unset}"`,
		time.Minute, task)
	if want := repository.Succeed("unset|unset|mail|kept|unset"); d != want {
		t.Errorf("decision %+v, want %+v", d, want)
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
)

// TestBinary runs the built processor as a subprocess against a real database. The
// binary is built once into the parent test's directory and shared by the subtests.
func TestBinary(t *testing.T) {
	bin := buildBinary(t, t.TempDir())
	script := writeScript(t)

	t.Run("ExecDecidesByExitCode", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		p := start(t, bin, f.url, "--topic", f.topic, "--retry-delay", "1h", "--addr", "127.0.0.1:0", "--exec", "/bin/sh", script)
		tasks := f.push("ok", "env", "fail", "skip", "wait", "later", "odd", "big")
		seq := func(i int) int64 { return tasks[i].Sequence }

		want := map[string]struct {
			state  repository.State
			output string
		}{
			"ok":   {repository.Succeeded, "done"},
			"env":  {repository.Succeeded, fmt.Sprintf("topic env %d 1 ref-env", seq(1))},
			"fail": {repository.Failed, "boom"},
			"skip": {repository.Filtered, ""},
			"wait": {repository.Suspended, "waiting"},
		}
		for i, task := range tasks {
			w, ok := want[task.Identifier]
			if !ok {
				continue
			}
			got := f.waitState(task.Sequence, w.state)
			if got.Output != w.output {
				t.Errorf("%s: output %q, want %q", tasks[i].Identifier, got.Output, w.output)
			}
		}

		odd := f.waitState(seq(6), repository.Failed)
		if !strings.HasPrefix(odd.Output, "exit status 42: …eee") || !strings.HasSuffix(odd.Output, "eee\nlast words") {
			t.Errorf("odd exit: output %.40q…%q, want the exit status and the stderr tail", odd.Output, odd.Output[max(len(odd.Output)-20, 0):])
		}
		if len(odd.Output) > outputLimit+40 {
			t.Errorf("odd exit: output is %d bytes, want the stderr tail capped at %d", len(odd.Output), outputLimit)
		}
		big := f.waitState(seq(7), repository.Succeeded)
		if want := strings.Repeat("x", outputLimit) + truncated; big.Output != want {
			t.Errorf("big output: %d bytes, want the first %d bytes marked as cut", len(big.Output), outputLimit)
		}
		// Exit 75 snoozes: READY again, attempt not consumed, not before --retry-delay.
		waitFor(t, 20*time.Second, "the retry-later task to be snoozed", func() bool {
			later := f.get(seq(5))
			return later.State == repository.Ready && later.NotBefore.After(time.Now().Add(30*time.Minute))
		})
		if later := f.get(seq(5)); attempt(later) != 0 {
			t.Errorf("retry-later task: %d attempts used, want 0", attempt(later))
		}

		addr := p.addr()
		if code, body := httpGet(t, "http://"+addr+"/healthz"); code != http.StatusOK {
			t.Errorf("/healthz: %d %q, want 200", code, body)
		}
		// Counters are bumped just after the commit the database shows: poll a little.
		var code int
		var body string
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, body = httpGet(t, "http://"+addr+"/metrics")
			if code == http.StatusOK && strings.Contains(body, `pgtask_tasks_completed_total{result="SUCCEEDED",topic="topic"} 3`) &&
				strings.Contains(body, `pgtask_queue_depth{state="SUSPENDED",topic="topic"} 1`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("/metrics: status %d, want 200 with task and queue metrics; body:\n%s", code, body)
			}
			time.Sleep(100 * time.Millisecond)
		}
		p.stop()
	})

	// What the processor library logs (a handler relieved of its tasks at the shutdown
	// deadline, here) is logged once: the binary's Listener repeated each such line as
	// a "processor error".
	t.Run("AShutdownThatRelievesTheHandlerLogsItOnce", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		p := start(t, bin, f.url, "--topic", f.topic, "--shutdown-timeout", "300ms", "--addr", "", "--exec", "/bin/sh", script)
		tasks := f.push("hang")
		f.waitState(tasks[0].Sequence, repository.Active)
		p.stop()
		logs := p.stderr.String()
		if n := strings.Count(logs, "relieved"); n != 1 || strings.Contains(logs, "processor error") {
			t.Errorf("the relieved batch is logged %d times (want once), and repeated as a processor error: %v; stderr:\n%s",
				n, strings.Contains(logs, "processor error"), logs)
		}
	})

	t.Run("TimeoutKillsHangingProgram", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		p := start(t, bin, f.url, "--topic", f.topic, "--timeout", "500ms", "--addr", "", "--exec", "/bin/sh", script)
		tasks := f.push("hang", "ok")
		start := time.Now()
		hang := f.waitState(tasks[0].Sequence, repository.Failed)
		if hang.Output != "timed out after 500ms" {
			t.Errorf("hanging task: output %q, want %q", hang.Output, "timed out after 500ms")
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("hanging task took %v to fail, want about the 500ms timeout", took)
		}
		f.waitState(tasks[1].Sequence, repository.Succeeded)
		p.stop()
	})

	// A processor leases only what its workers run: with a task running on each worker,
	// it leases no more (before, its Buffer's queue and the batch waiting to enter it
	// held two more leased, for as long as the running tasks took, while another
	// processor of the topic had nothing to do).
	t.Run("LeasesOnlyWhatItsWorkersRun", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		a := start(t, bin, f.url, "--topic", f.topic, "--workers", "1", "--addr", "", "--exec", "/bin/sh", script)
		tasks := f.push("hang", "hang", "hang")
		f.waitState(tasks[0].Sequence, repository.Active)
		time.Sleep(time.Second) // time to lease more, were it to
		active := func() (n int) {
			t.Helper()
			if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task WHERE topic = $1 AND state = 0", f.topic).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := active(); n != 1 {
			t.Errorf("%d tasks leased by a processor of one worker running one, want 1", n)
		}
		b := start(t, bin, f.url, "--topic", f.topic, "--workers", "1", "--addr", "", "--exec", "/bin/sh", script)
		waitFor(t, 20*time.Second, "the second processor to take a task", func() bool { return active() == 2 })
		for _, task := range tasks {
			if _, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "test", task.Sequence); err != nil {
				t.Fatal(err)
			}
		}
		a.stop()
		b.stop()
	})

	t.Run("CancelKillsRunningProgram", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		p := start(t, bin, f.url, "--topic", f.topic, "--addr", "", "--exec", "/bin/sh", script)
		hang := f.push("hang")[0]
		f.waitState(hang.Sequence, repository.Active)
		if _, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "test", hang.Sequence); err != nil {
			t.Fatalf("cancel: %v", err)
		}
		got := f.waitState(hang.Sequence, repository.Failed)
		if got.Output != "cancelled" {
			t.Errorf("cancelled task: output %q, want %q", got.Output, "cancelled")
		}
		p.stop()
	})

	t.Run("KillNineKillsTheProgramAndItsChildren", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		pidFile := filepath.Join(t.TempDir(), "pids")
		p := start(t, bin, f.url, "--topic", f.topic, "--addr", "", "--exec", "/bin/sh", script, pidFile)
		f.push("linger")
		var pids []int
		waitFor(t, 20*time.Second, "the program to write its PID and its child's", func() bool {
			pids = readPIDs(t, pidFile)
			return len(pids) == 2
		})
		// The group's leader too: the program itself today, whatever leads it otherwise.
		group := processGroup(t, pids[0])
		procs := []int{pids[0], pids[1], group}
		t.Cleanup(func() {
			if len(living(procs)) > 0 {
				_ = syscall.Kill(-group, syscall.SIGKILL) // nothing outlives the test
			}
		})

		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second) // at once, but the machine may be loaded
		left := living(procs)
		for len(left) > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			left = living(procs)
		}
		if len(left) > 0 {
			t.Errorf("10 s after kill -9 of the processor, %v still run (program %d, its child %d, process group %d)",
				left, pids[0], pids[1], group)
		}
	})

	// docs/processor.md: a SIGTERM while the processor is still starting is a clean
	// stop. Cut short while reading its topic (held by a lock here), it exited 1 with
	// "read topic: context canceled".
	t.Run("SIGTERMWhileStartingExitsZero", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(f.ctx)
		if _, err := tx.Exec(f.ctx, "LOCK TABLE task_topic IN ACCESS EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
		p := start(t, bin, f.url, "--topic", f.topic, "--addr", "", "--exec", "/bin/true")
		deadline := time.Now().Add(30 * time.Second)
		for {
			var n int
			if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the processor is not waiting on the lock after 30 s; stderr:\n%s", p.stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		p.stop()
	})

	// docs/processor.md: a second SIGTERM or SIGINT ends the processor at once. A second
	// SIGINT to a processor started with SIGINT ignored (a background job of a script)
	// was ignored: the graceful stop waited for the running task.
	t.Run("ASecondSignalEndsItAtOnce", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			name     string
			signal   syscall.Signal
			ignored  bool // SIGINT ignored when the processor starts
			wantCode int
		}{
			{"TwoSIGTERMs", syscall.SIGTERM, false, -1}, // killed by the signal
			{"TwoSIGINTsWithSIGINTIgnored", syscall.SIGINT, true, 130},
		} {
			t.Run(c.name, func(t *testing.T) {
				f := setup(t)
				ignore := ""
				if c.ignored {
					ignore = "INT"
				}
				p := startSleeping(t, bin, f, ignore, "60")
				time.Sleep(200 * time.Millisecond) // the program started
				// the second once the first was received (two pending at once are one
				// signal to the kernel)
				for range 2 {
					if err := p.cmd.Process.Signal(c.signal); err != nil {
						t.Fatal(err)
					}
					time.Sleep(300 * time.Millisecond)
				}
				if code := p.wait(10 * time.Second); code != c.wantCode {
					t.Errorf("exit code %d after two signals, want %d", code, c.wantCode)
				}
			})
		}
	})

	// docs/processor.md: SIGHUP (the terminal closed) stops the processor gracefully, its
	// running task finished; it ended the process at once, the task left ACTIVE to
	// expire. Started with SIGHUP ignored (nohup), it keeps ignoring it.
	t.Run("SIGHUPStopsGracefully", func(t *testing.T) {
		t.Parallel()
		for _, ignored := range []bool{false, true} {
			t.Run(fmt.Sprint("Ignored=", ignored), func(t *testing.T) {
				f := setup(t)
				ignore := ""
				if ignored {
					ignore = "HUP"
				}
				p := startSleeping(t, bin, f, ignore, "1")
				if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
					t.Fatal(err)
				}
				if ignored {
					waitFor(t, 20*time.Second, "the task to finish", func() bool { return f.all()[0].State == repository.Succeeded })
					select {
					case <-p.done:
						t.Fatalf("the processor started under nohup ended on SIGHUP; stderr:\n%s", p.stderr.String())
					default:
					}
					p.stop()
					return
				}
				if code := p.wait(20 * time.Second); code != 0 {
					t.Errorf("exit code %d after SIGHUP, want 0 (a graceful stop); stderr:\n%s", code, p.stderr.String())
				}
				if tasks := f.all(); tasks[0].State != repository.Succeeded {
					t.Errorf("the running task after SIGHUP: %v, want SUCCEEDED (finished by the graceful stop)", tasks[0].State)
				}
			})
		}
	})

	t.Run("SIGTERMLosesNothing", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		const n = 40
		inputs := make([]string, n)
		for i := range inputs {
			inputs[i] = "slow"
		}
		f.push(inputs...)
		args := []string{"--topic", f.topic, "--workers", "4", "--addr", "", "--exec", "/bin/sh", script}
		p := start(t, bin, f.url, args...)
		waitFor(t, 20*time.Second, "some tasks to succeed", func() bool {
			succeeded := 0
			for _, task := range f.all() {
				if task.State == repository.Succeeded {
					succeeded++
				}
			}
			return succeeded >= 8
		})
		p.stop()

		handedBack := 0
		for _, task := range f.all() {
			switch {
			case task.State == repository.Succeeded && attempt(task) == 1:
			case task.State == repository.Ready && attempt(task) == 0:
				if task.Attempt > 0 {
					handedBack++
				}
			default:
				t.Errorf("after SIGTERM task %d is %v with %d attempts used, want SUCCEEDED or READY with none used",
					task.Sequence, task.State, attempt(task))
			}
		}
		if handedBack == 0 {
			t.Log("no leased task was waiting for a worker at SIGTERM: nothing was handed back")
		}

		p = start(t, bin, f.url, args...)
		waitFor(t, 30*time.Second, "the restarted processor to finish the rest", func() bool {
			for _, task := range f.all() {
				if task.State != repository.Succeeded {
					return false
				}
			}
			return true
		})
		for _, task := range f.all() {
			if attempt(task) != 1 || task.Output != "done" {
				t.Errorf("task %d: %d attempts used, output %q; want 1 attempt, output %q", task.Sequence, attempt(task), task.Output, "done")
			}
		}
		p.stop()
	})

	t.Run("HTTPDecidesByStatus", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("read request: %v", err)
				return
			}
			if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); r.Method != http.MethodPost || ct != "application/json" {
				t.Errorf("request: %s with Content-Type %q, want POST of application/json", r.Method, r.Header.Get("Content-Type"))
			}
			var task httpTask
			if err := json.Unmarshal(body, &task); err != nil {
				t.Errorf("decode request: %v", err)
			}
			if task.Topic != f.topic || task.Input != task.Identifier || task.Reference != "ref-"+task.Identifier ||
				task.Attempt != 1 || task.Sequence == 0 || time.Since(task.Created) > time.Minute {
				t.Errorf("request body %+v: want the task's topic, sequence, identifier, input, reference, attempt and created", task)
			}
			switch task.Input {
			case "ok":
				fmt.Fprintf(w, "done %d\n", task.Sequence)
			case "skip":
				w.WriteHeader(http.StatusUnprocessableEntity)
				fmt.Fprint(w, "not for me")
			case "wait":
				w.WriteHeader(http.StatusConflict)
			case "later":
				w.Header().Set("Retry-After", "3600")
				w.WriteHeader(http.StatusServiceUnavailable)
			case "fail":
				w.WriteHeader(http.StatusInternalServerError)
				fmt.Fprint(w, "kaput")
			case "hang":
				select {
				case <-r.Context().Done():
				case <-release:
				}
			}
		}))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(release) })
		p := start(t, bin, f.url, "--topic", f.topic, "--timeout", "1s", "--addr", "", "--http", srv.URL+"/tasks")
		tasks := f.push("ok", "skip", "wait", "later", "fail", "hang")

		want := []struct {
			state  repository.State
			output string
		}{
			{repository.Succeeded, fmt.Sprintf("done %d", tasks[0].Sequence)},
			{repository.Filtered, "not for me"},
			{repository.Suspended, ""},
			{repository.Ready, ""},
			{repository.Failed, "HTTP 500 Internal Server Error: kaput"},
			{repository.Failed, "timed out after 1s"},
		}
		for i, w := range want {
			if w.state == repository.Ready {
				continue
			}
			if got := f.waitState(tasks[i].Sequence, w.state); got.Output != w.output {
				t.Errorf("%s: output %q, want %q", tasks[i].Identifier, got.Output, w.output)
			}
		}
		waitFor(t, 20*time.Second, "the 503 task to be snoozed for its Retry-After", func() bool {
			later := f.get(tasks[3].Sequence)
			return later.State == repository.Ready && attempt(later) == 0 &&
				later.NotBefore.After(time.Now().Add(50*time.Minute))
		})
		p.stop()
	})

	t.Run("KillNineCancelsTheHTTPRequest", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		received, gone := make(chan struct{}), make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.ReadAll(r.Body); err != nil {
				t.Errorf("read request: %v", err)
			}
			close(received)
			<-r.Context().Done() // the client went away
			close(gone)
		}))
		t.Cleanup(srv.Close)
		p := start(t, bin, f.url, "--topic", f.topic, "--addr", "", "--http", srv.URL)
		f.push("hang")
		select {
		case <-received:
		case <-time.After(20 * time.Second):
			t.Fatal("no request within 20 s")
		}
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-gone:
		case <-time.After(10 * time.Second): // at once, but the machine may be loaded
			t.Error("10 s after kill -9 of the processor, the endpoint's request is not cancelled")
		}
	})

	t.Run("InitRegistersTopic", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		p := start(t, bin, f.url, "--topic", "fresh", "--addr", "", "--exec", "/bin/sh", script)
		if code := p.wait(30 * time.Second); code != 1 || !strings.Contains(p.stderr.String(), `topic "fresh" is not registered`) {
			t.Errorf("unknown topic without --init: exit %d, stderr %q; want exit 1 naming the topic", code, p.stderr.String())
		}
		p = start(t, bin, f.url, "--topic", "fresh", "--init", "--addr", "", "--exec", "/bin/sh", script)
		waitFor(t, 20*time.Second, "the topic to be registered", func() bool {
			_, err := f.repo.Topic(f.ctx, f.pool, "fresh")
			return err == nil
		})
		p.stop()
	})

	// --no-schedules leaves the database's schedules to other processes.
	t.Run("NoSchedulesFiresNone", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		if _, err := f.repo.CreateSchedule(f.ctx, f.pool, "every-second", repository.ScheduleSettings{Topic: f.topic, Spec: "@every 1s"}); err != nil {
			t.Fatal(err)
		}
		fired := func() int {
			var n int
			if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task WHERE topic = $1 AND reference = 'schedule:every-second'", f.topic).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		p := start(t, bin, f.url, "--topic", f.topic, "--heartbeat", "100ms", "--addr", "", "--no-schedules", "--exec", "/bin/sh", script)
		ok := f.push("ok")
		f.waitState(ok[0].Sequence, repository.Succeeded) // it runs
		time.Sleep(3 * time.Second)                       // 30 heartbeats, 3 fire times
		if n := fired(); n != 0 {
			t.Errorf("%d tasks of the schedule pushed under --no-schedules, want none", n)
		}
		p.stop()
		p = startEnv(t, bin, f.url, []string{"PGTASK_NO_SCHEDULES=false"}, "--topic", f.topic, "--heartbeat", "100ms", "--addr", "", "--exec", "/bin/sh", script)
		waitFor(t, 20*time.Second, "a processor without --no-schedules to fire the schedule", func() bool { return fired() > 0 })
		p.stop()
	})

	// A bad flag or variable exits 2 naming it, before anything starts: no connection,
	// no owner row, no topic, no server.
	t.Run("BadFlagsExitTwo", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		for _, tc := range []struct {
			args []string
			env  []string
			want string
		}{
			{[]string{"--topic", "topic", "--order", "x", "--exec", "true"}, nil, `--order: unknown order "x" (want FIFO or LIFO)`},
			{[]string{"--topic", "topic", "--workers", "0", "--exec", "true"}, nil, `--workers: invalid value "0"`},
			{[]string{"--topic", "topic", "--nope", "--exec", "true"}, nil, "flag provided but not defined: --nope"},
			{[]string{"--topic", "topic"}, nil, "a handler is required"},
			{[]string{"--topic", "topic", "--exec", "/no/such/program"}, nil, `--exec: program "/no/such/program" not found`},
			// A heartbeat of 1ns spun two cores, its expiry timeout (5ns) failed every
			// heartbeat, and expiry read it as 0 ms: any owner that declares no timeout of
			// its own lost its leases at once.
			{[]string{"--topic", "topic", "--heartbeat", "1ns", "--exec", "true"}, nil, `--heartbeat: duration "1ns" is too short`},
			{[]string{"--topic", "topic", "--exec", "true"}, []string{"PGTASK_HEARTBEAT=99ms"}, `PGTASK_HEARTBEAT: duration "99ms" is too short`},
			// 5 heartbeats overflowed: exit 1 after connecting, "ExpiryTimeout -2124095h… must exceed".
			{[]string{"--topic", "topic", "--heartbeat", "600000h", "--exec", "true"}, nil, `--heartbeat: duration "600000h" is too long`},
			// An idle processor polled as fast as the database answered.
			{[]string{"--topic", "topic", "--pause-interval", "1ns", "--exec", "true"}, nil, `--pause-interval: duration "1ns" is too short`},
			// A program exiting 75 ran again as fast as it exited.
			{[]string{"--topic", "topic", "--retry-delay", "0s", "--exec", "true"}, nil, `--retry-delay: duration "0s" is too short`},
			// Refused only by net.Listen, after connecting: exit 1.
			{[]string{"--topic", "topic", "--addr", ":99999", "--exec", "true"}, nil, `--addr: invalid address ":99999": port 99999 out of range`},
			{[]string{"--topic", "topic", "--exec", "true"}, []string{"PGTASK_ADDR=127.0.0.1:-1"}, `PGTASK_ADDR: invalid address "127.0.0.1:-1": port -1 out of range`},
			{[]string{"--topic", "topic", "--addr", "127.0.0.1:9090/metrics", "--exec", "true"}, nil, `--addr: invalid address "127.0.0.1:9090/metrics": unknown port "9090/metrics"`},
			// A variable set to the empty string is that empty value, as for its flag,
			// not the default.
			{[]string{"--topic", "topic", "--exec", "true"}, []string{"PGTASK_WORKERS="}, `PGTASK_WORKERS: invalid value ""`},
		} {
			t.Run(strings.Join(append(tc.env, tc.args...), " "), func(t *testing.T) {
				p := startEnv(t, bin, f.url, tc.env, tc.args...)
				if code := p.wait(10 * time.Second); code != 2 {
					t.Errorf("exit %d, want 2", code)
				}
				if stderr := p.stderr.String(); !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "--help") {
					t.Errorf("stderr %q, want it to contain %q and point to --help", stderr, tc.want)
				}
			})
		}
		var owners int
		if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task_owner").Scan(&owners); err != nil {
			t.Fatal(err)
		}
		if owners != 0 {
			t.Errorf("%d owner rows after bad command lines, want none", owners)
		}
	})

	// A port in use is no usage error: exit 1, naming --addr, before the processor
	// connects (it migrated the schema first).
	t.Run("AddrInUseExitsOneBeforeTheDatabase", func(t *testing.T) {
		t.Parallel()
		url := pgtest.NewDatabase(t, "processor-empty", nil)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		p := start(t, bin, url, "--topic", "t", "--init", "--migrate", "--addr", ln.Addr().String(), "--exec", "true")
		if code := p.wait(30 * time.Second); code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		if stderr := p.stderr.String(); !strings.Contains(stderr, "processor: --addr: ") || !strings.Contains(stderr, "address already in use") ||
			strings.Contains(stderr, "--help") {
			t.Errorf("stderr %q, want the --addr failure, no usage hint", stderr)
		}
		pool, err := pgxpool.New(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		var tables int
		if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(&tables); err != nil {
			t.Fatal(err)
		}
		if tables != 0 {
			t.Errorf("%d tables in the database, want none: the processor migrated before it found the port in use", tables)
		}
	})

	// PGTASK_ADDR set to the empty string disables the server, as --addr '' does (it
	// served on the default address).
	t.Run("EmptyAddrVariableDisablesTheServer", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		p := startEnv(t, bin, f.url, []string{"PGTASK_ADDR="}, "--topic", f.topic, "--exec", "/bin/sh", script)
		f.waitState(f.push("ok")[0].Sequence, repository.Succeeded)
		p.stop()
		if stderr := p.stderr.String(); strings.Contains(stderr, "serving /metrics") || strings.Contains(stderr, "--addr") {
			t.Errorf("PGTASK_ADDR='': the server was started (or tried); stderr:\n%s", stderr)
		}
	})

	t.Run("FailingStatementsAreLoggedOnceAndUnhealthy", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		p := start(t, bin, f.url, "--topic", f.topic, "--addr", "127.0.0.1:0", "--exec", "/bin/sh", script)
		addr := p.addr()
		waitFor(t, 10*time.Second, "a healthy processor", func() bool {
			code, _ := httpGet(t, "http://"+addr+"/healthz")
			return code == http.StatusOK
		})
		// Every poll raises what a full lock table raises. The swap is one
		// transaction: a poll between its statements would fail for another
		// cause (the function missing) and be logged as such.
		f.exec(
			"ALTER FUNCTION task_poll_candidates(text, boolean, smallint, integer) RENAME TO task_poll_candidates_real",
			`CREATE FUNCTION task_poll_candidates(text, boolean, smallint, integer) RETURNS SETOF tid LANGUAGE plpgsql AS
			 $$ BEGIN RAISE EXCEPTION 'out of shared memory' USING ERRCODE = '53200'; END $$`,
		)
		task := f.push("ok")[0]
		var body string
		waitFor(t, 20*time.Second, "/healthz to report the failing polls", func() bool {
			var code int
			code, body = httpGet(t, "http://"+addr+"/healthz")
			return code == http.StatusServiceUnavailable && strings.Contains(body, "SQLSTATE 53200")
		})
		if !strings.Contains(body, `poll topic \"`+f.topic+`\"`) && !strings.Contains(body, `poll topic "`+f.topic+`"`) {
			t.Errorf("/healthz body %q does not name the failing poll", body)
		}
		// a few retries later, still one line
		waitFor(t, 20*time.Second, "three failed polls", func() bool {
			_, body = httpGet(t, "http://"+addr+"/healthz")
			m := regexp.MustCompile(`\((\d+) failures\)`).FindStringSubmatch(body)
			n, _ := strconv.Atoi(append(m, "", "0")[1])
			return n >= 3
		})
		if n := strings.Count(p.stderr.String(), `"msg":"database operations failing"`); n != 1 {
			t.Errorf("the failing poll was logged %d times, want once:\n%s", n, p.stderr.String())
		}
		f.exec(
			"DROP FUNCTION task_poll_candidates(text, boolean, smallint, integer)",
			"ALTER FUNCTION task_poll_candidates_real(text, boolean, smallint, integer) RENAME TO task_poll_candidates",
		)
		f.waitState(task.Sequence, repository.Succeeded)
		waitFor(t, 10*time.Second, "/healthz to recover", func() bool {
			code, _ := httpGet(t, "http://"+addr+"/healthz")
			return code == http.StatusOK
		})
		if !strings.Contains(p.stderr.String(), `"msg":"database operations recovered"`) {
			t.Errorf("no recovery line in the log:\n%s", p.stderr.String())
		}
		p.stop()
	})

	t.Run("HelpPrintsUsage", func(t *testing.T) {
		t.Parallel()
		p := start(t, bin, "", "--help")
		if code := p.wait(10 * time.Second); code != 0 {
			t.Errorf("--help: exit %d, want 0", code)
		}
		for _, want := range []string{"--exec PROGRAM", "--http URL", "PGTASK_WORKERS", "DATABASE_URL"} {
			if !strings.Contains(p.stdout.String(), want) {
				t.Errorf("--help output lacks %q:\n%s", want, p.stdout.String())
			}
		}
	})
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return res.StatusCode, string(body)
}

// startSleeping starts the processor bin on f's topic, with one task pushed that runs
// /bin/sleep seconds, and waits for it to run. With ignore (a signal's name: INT, HUP)
// the processor starts with that signal ignored, as a background job of a script or
// nohup starts it (exec keeps the shell's pid and what it ignores).
func startSleeping(t *testing.T, bin string, f *fixture, ignore, seconds string) *process {
	t.Helper()
	f.push("slow")
	var p *process
	if ignore != "" {
		p = start(t, "/bin/sh", "", "-c", `trap "" `+ignore+`; exec "$0" "$@"`, bin, "--database-url", f.url,
			"--topic", f.topic, "--addr", "", "--exec", "/bin/sleep", seconds)
	} else {
		p = start(t, bin, f.url, "--topic", f.topic, "--addr", "", "--exec", "/bin/sleep", seconds)
	}
	waitFor(t, 20*time.Second, "the task to run", func() bool {
		tasks := f.all()
		return len(tasks) == 1 && tasks[0].State == repository.Active
	})
	return p
}

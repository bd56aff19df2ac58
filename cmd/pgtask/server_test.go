package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/logbuf"
	"github.com/pgtask/pgtask/repository"
)

// lineWatcher collects the lines a process prints and lets a test wait for one.
type lineWatcher struct {
	mu    sync.Mutex
	lines []string
	added chan struct{} // closed and replaced whenever a line arrives
	done  bool
}

func watchLines(r io.Reader) *lineWatcher {
	w := &lineWatcher{added: make(chan struct{})}
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			w.mu.Lock()
			w.lines = append(w.lines, s.Text())
			close(w.added)
			w.added = make(chan struct{})
			w.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, r)
		w.mu.Lock()
		w.done = true
		close(w.added)
		w.mu.Unlock()
	}()
	return w
}

// waitFor returns the first line matching re, waiting up to d for it.
func (w *lineWatcher) waitFor(t *testing.T, re *regexp.Regexp, d time.Duration) []string {
	t.Helper()
	timeout := time.After(d)
	for {
		w.mu.Lock()
		for _, l := range w.lines {
			if m := re.FindStringSubmatch(l); m != nil {
				w.mu.Unlock()
				return m
			}
		}
		added, done := w.added, w.done
		w.mu.Unlock()
		if done {
			t.Fatalf("output ended without a line matching %v:\n%s", re, w.text())
		}
		select {
		case <-added:
		case <-timeout:
			t.Fatalf("no line matching %v within %v:\n%s", re, d, w.text())
		}
	}
}

func (w *lineWatcher) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.lines, "\n")
}

// request sends an HTTP request, JSON when it has a body, with the bearer token if
// any, and returns the status and the body.
func request(t *testing.T, method, target, token, body string) (int, []byte) {
	t.Helper()
	header := map[string]string{}
	if body != "" {
		header["Content-Type"] = "application/json"
	}
	if token != "" {
		header["Authorization"] = "Bearer " + token
	}
	status, b := send(t, method, target, body, header)
	return status, []byte(b)
}

// send sends a request with the given headers ("Host" sets the request's host) and
// returns the status and the body.
func send(t *testing.T, method, target, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// findKey returns the first value stored under key anywhere in a decoded JSON document,
// so the tests do not depend on how the REST API nests it.
func findKey(v any, key string) (any, bool) {
	switch v := v.(type) {
	case map[string]any:
		if x, ok := v[key]; ok {
			return x, true
		}
		for _, x := range v {
			if found, ok := findKey(x, key); ok {
				return found, true
			}
		}
	case []any:
		for _, x := range v {
			if found, ok := findKey(x, key); ok {
				return found, true
			}
		}
	}
	return nil, false
}

// pushREST enqueues one task with POST /topics/{topic}/tasks and returns its sequence.
func pushREST(t *testing.T, base, topic, token, identifier, input string) int64 {
	t.Helper()
	body := fmt.Sprintf(`{"identifier": %q, "input": %q}`, identifier, input)
	status, resp := request(t, http.MethodPost, base+"/topics/"+topic+"/tasks", token, body)
	if status < 200 || status > 299 {
		t.Fatalf("POST /topics/%s/tasks: status %d: %s", topic, status, resp)
	}
	var doc any
	if err := json.Unmarshal(resp, &doc); err != nil {
		t.Fatalf("POST /topics/%s/tasks: %v: %s", topic, err, resp)
	}
	seq, ok := findKey(doc, "sequence")
	n, isNumber := seq.(float64)
	if !ok || !isNumber {
		t.Fatalf("POST /topics/%s/tasks: no sequence in %s", topic, resp)
	}
	return int64(n)
}

func TestServe(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	stdoutR, stdoutW := io.Pipe()
	stderr := &logbuf.Buffer{}
	e := &env{
		stdin: strings.NewReader(""), stdout: stdoutW, stderr: stderr,
		lookupenv: lookupIn(map[string]string{"PGTASK_TOKEN": "sekrit"}),
	}
	done := make(chan error, 1)
	go func() {
		err := runEnv(ctx, e, []string{"serve", "--database-url", f.url, "--addr", "127.0.0.1:0"})
		stdoutW.Close()
		done <- err
	}()
	out := watchLines(stdoutR)
	base := out.waitFor(t, regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`), 30*time.Second)[1]

	t.Run("Healthz", func(t *testing.T) {
		if status, body := request(t, http.MethodGet, base+"/healthz", "", ""); status != http.StatusOK {
			t.Fatalf("GET /healthz: status %d: %s", status, body)
		}
	})
	t.Run("TokenFromEnvironmentIsRequired", func(t *testing.T) {
		status, body := request(t, http.MethodPost, base+"/topics/t/tasks", "", `{"identifier": "x"}`)
		if status != http.StatusUnauthorized {
			t.Fatalf("POST without token: status %d: %s", status, body)
		}
	})
	t.Run("PushTask", func(t *testing.T) {
		seq := pushREST(t, base, "t", "sekrit", "from-rest", "payload")
		task := f.get(seq)
		if task.Identifier != "from-rest" || task.Input != "payload" || task.State != repository.Ready {
			t.Fatalf("task %+v", task)
		}
	})
	t.Run("Metrics", func(t *testing.T) {
		status, body := request(t, http.MethodGet, base+"/metrics", "sekrit", "")
		if status != http.StatusOK || !strings.Contains(string(body), `pgtask_queue_depth{state="READY",topic="t"}`) {
			t.Fatalf("GET /metrics: status %d:\n%s", status, body)
		}
	})
	t.Run("FiresSchedules", func(t *testing.T) {
		status, body := request(t, http.MethodPost, base+"/schedules", "sekrit", `{"name":"tick","topic":"t","spec":"@every 1s"}`)
		if status != http.StatusCreated {
			t.Fatalf("POST /schedules: status %d: %s", status, body)
		}
		eventually(t, 30*time.Second, "the schedule's first task", func() bool {
			tasks, err := f.repo.Page(f.ctx, f.pool, "t", repository.TaskFilter{Reference: "schedule:tick"}, 0, 1, repository.Forward)
			return err == nil && len(tasks) == 1
		})
	})

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v\nstderr: %s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop within 30s of cancellation")
	}
	out.waitFor(t, regexp.MustCompile(`pgtask serve: stopped`), time.Second)
}

// buildPgtask builds this command into a temporary directory and returns its path.
func buildPgtask(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build pgtask: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "pgtask")
	cmd := exec.CommandContext(t.Context(), goBin, "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// child is a process of the pgtask binary that a test started.
type child struct {
	cmd    *exec.Cmd
	out    *lineWatcher
	stderr *logbuf.Buffer
	exited chan struct{} // closed once it exited; err then says how
	err    error
}

// startChild starts bin with args and environment env, watching what it prints. When the
// test ends, a child still running is interrupted (SIGINT), and killed if it has not
// exited 30 s later; its output is logged if the test failed.
func startChild(t *testing.T, bin string, env []string, args ...string) *child {
	t.Helper()
	c := &child{cmd: exec.Command(bin, args...), stderr: &logbuf.Buffer{}, exited: make(chan struct{})}
	c.cmd.Env = env
	// An os.Pipe rather than cmd.StdoutPipe: Wait must not close the reading end while
	// the watcher still reads it.
	stdout, stdoutW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdout.Close() })
	c.cmd.Stdout, c.cmd.Stderr = stdoutW, c.stderr
	err = c.cmd.Start()
	stdoutW.Close()
	if err != nil {
		t.Fatal(err)
	}
	c.out = watchLines(stdout)
	go func() { c.err = c.cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default: // stop the process, and what it started, if it will
			_ = c.cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-c.exited:
			case <-time.After(30 * time.Second):
				_ = c.cmd.Process.Kill()
				<-c.exited
			}
		}
		if t.Failed() {
			t.Logf("%s stdout:\n%s\nstderr:\n%s", args[0], c.out.text(), c.stderr)
		}
	})
	return c
}

// TestDev runs "pgtask dev" as its own process, with no database URL so that it starts
// a throwaway cluster, and drives it like a user: REST push, demo processor, and the
// terminal closed (SIGHUP).
func TestDev(t *testing.T) {
	t.Parallel()
	bin := buildPgtask(t)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "PGTASK_TOKEN=") {
			env = append(env, kv)
		}
	}
	c := startChild(t, bin, env, "dev", "--addr", "127.0.0.1:0")
	cmd, out, stderr, exited := c.cmd, c.out, c.stderr, c.exited

	out.waitFor(t, regexp.MustCompile(`^pgtask dev ready$`), 3*time.Minute)
	out.waitFor(t, regexp.MustCompile(`throwaway PostgreSQL cluster \(durability off: not for data you need\)`), time.Second)
	base := out.waitFor(t, regexp.MustCompile(`REST API\s+(http://127\.0\.0\.1:\d+)`), time.Second)[1]
	dbURL := out.waitFor(t, regexp.MustCompile(`DATABASE_URL\s+(\S+)`), time.Second)[1]
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	clusterDir := u.Query().Get("host")
	if fi, err := os.Stat(clusterDir); err != nil || !fi.IsDir() {
		t.Fatalf("cluster directory %q from DATABASE_URL: %v", clusterDir, err)
	}
	out.waitFor(t, regexp.MustCompile(`pgtask list --database-url .* --topic demo`), time.Second)

	seq := pushREST(t, base, "demo", "", "hello", "world")
	var state any
	eventually(t, 30*time.Second, "the demo processor to finish the task", func() bool {
		status, body := request(t, http.MethodGet, fmt.Sprintf("%s/topics/demo/tasks/%d", base, seq), "", "")
		if status != http.StatusOK {
			t.Fatalf("GET task: status %d: %s", status, body)
		}
		var doc any
		if err := json.Unmarshal(body, &doc); err != nil {
			t.Fatalf("GET task: %v: %s", err, body)
		}
		state, _ = findKey(doc, "state")
		return state == "SUCCEEDED"
	})

	// the terminal closed (the README's test stops its pgtask dev with Ctrl-C, SIGINT):
	// SIGHUP killed it at once, and the cluster stayed; more (a shell's, then the
	// kernel's as the session ends) must not cut the graceful stop short. Tests run
	// with SIGHUP ignored (nohup go test) start pgtask dev so: it keeps ignoring it,
	// and Ctrl-C stops it.
	stopWith := syscall.SIGHUP
	if signal.Ignored(syscall.SIGHUP) {
		stopWith = syscall.SIGINT
	}
	if err := cmd.Process.Signal(stopWith); err != nil {
		t.Fatal(err)
	}
	for _, after := range []time.Duration{0, time.Millisecond, 50 * time.Millisecond} {
		time.Sleep(after)
		_ = cmd.Process.Signal(syscall.SIGHUP) // an error if it has exited already
	}
	select {
	case <-exited:
		if c.err != nil {
			t.Fatalf("pgtask dev exited with %v after %v", c.err, stopWith)
		}
	case <-time.After(time.Minute):
		t.Fatalf("pgtask dev did not exit within a minute of %v", stopWith)
	}
	if _, err := os.Stat(clusterDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cluster directory %s still there after exit (stat: %v)", clusterDir, err)
	}
	if !strings.Contains(stderr.String(), "demo processor: handling task") {
		t.Errorf("the demo processor logged nothing:\n%s", stderr.String())
	}
}

// TestServeUnderNohup: a pgtask serve started with SIGHUP ignored (nohup) keeps
// ignoring it, as nohup means: a handler for SIGHUP undoes the ignoring, and it stopped
// when the user logged out.
func TestServeUnderNohup(t *testing.T) {
	f := setup(t) // parallel
	bin := buildPgtask(t)
	nohup, err := exec.LookPath("nohup")
	if err != nil {
		t.Fatalf("nohup (coreutils) is needed: %v", err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "PGTASK_TOKEN=") {
			env = append(env, kv)
		}
	}
	c := startChild(t, nohup, env, bin, "serve", "--addr", "127.0.0.1:0", "--database-url", f.url)
	c.out.waitFor(t, regexp.MustCompile(`^pgtask serve: listening on `), time.Minute)
	if err := c.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.exited:
		t.Fatalf("pgtask serve under nohup exited on SIGHUP: %v", c.err)
	case <-time.After(time.Second):
	}
	if err := c.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.exited:
		if c.err != nil {
			t.Fatalf("pgtask serve exited with %v after SIGINT", c.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("pgtask serve did not exit within a minute of SIGINT")
	}
}

// TestDevWithDatabaseURL runs "pgtask dev" in-process on the test's database: it
// migrates it, registers the demo topics and processes their tasks.
func TestDevWithDatabaseURL(t *testing.T) {
	f := setup(t)
	// the throwaway cluster's flags with a database of the user's: refused, not ignored
	wantUsage(t, runCLI(f.ctx, "", map[string]string{"DATABASE_URL": f.url}, "dev", "--keep"), "--keep", "database URL")
	wantUsage(t, runCLI(f.ctx, "", nil, "dev", "--dir", t.TempDir(), "--database-url", f.url), "--dir", "database URL")
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	stdoutR, stdoutW := io.Pipe()
	stderr := &logbuf.Buffer{}
	e := &env{stdin: strings.NewReader(""), stdout: stdoutW, stderr: stderr,
		lookupenv: lookupIn(map[string]string{"DATABASE_URL": f.url})}
	done := make(chan error, 1)
	go func() {
		err := runEnv(ctx, e, []string{"dev", "--addr", "127.0.0.1:0"})
		stdoutW.Close()
		done <- err
	}()
	out := watchLines(stdoutR)
	out.waitFor(t, regexp.MustCompile(`^pgtask dev ready$`), time.Minute)
	base := out.waitFor(t, regexp.MustCompile(`REST API\s+(http://127\.0\.0\.1:\d+)`), time.Second)[1]
	if got := out.waitFor(t, regexp.MustCompile(`DATABASE_URL\s+(\S+)`), time.Second)[1]; got != f.url {
		t.Errorf("banner shows DATABASE_URL %s, want %s", got, f.url)
	}
	if strings.Contains(out.text(), "throwaway") {
		t.Errorf("started a throwaway cluster despite DATABASE_URL:\n%s", out.text())
	}

	seq := pushREST(t, base, "echo", "", "e1", "ping")
	eventually(t, 30*time.Second, "the echo processor to finish the task", func() bool {
		task, err := f.repo.Get(f.ctx, f.pool, "echo", seq)
		return err == nil && task.State == repository.Succeeded && task.Output == "ping"
	})
	if _, err := f.repo.Topic(f.ctx, f.pool, "demo"); err != nil {
		t.Errorf("demo topic: %v", err)
	}
	// input "fail" on the demo topic dev registered: retried twice, then FAILED, in
	// seconds (the default policy would retry it for hours)
	failing := pushREST(t, base, "demo", "", "f", "fail")
	eventually(t, 30*time.Second, "the demo task with input fail to end FAILED", func() bool {
		task, err := f.repo.Get(f.ctx, f.pool, "demo", failing)
		return err == nil && task.State == repository.Failed && task.Attempt == 3
	})

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("dev returned %v\nstderr: %s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("dev did not stop within 30s of cancellation")
	}
}

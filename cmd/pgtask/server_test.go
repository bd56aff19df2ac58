package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pgtask/pgtask/repository"
)

// syncBuffer is a bytes.Buffer safe for concurrent writes and reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

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

// request sends an HTTP request and returns the status and the body.
func request(t *testing.T, method, target, token, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, target, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
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
	return resp.StatusCode, b
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
	stderr := &syncBuffer{}
	e := &env{
		stdin: strings.NewReader(""), stdout: stdoutW, stderr: stderr,
		getenv: func(k string) string { return map[string]string{"PGTASK_TOKEN": "sekrit"}[k] },
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

// TestDev runs "pgtask dev" as its own process, with no database URL so that it starts
// a throwaway cluster, and drives it like a user: REST push, demo processor, Ctrl-C.
func TestDev(t *testing.T) {
	t.Parallel()
	bin := buildPgtask(t)
	cmd := exec.Command(bin, "dev", "--addr", "127.0.0.1:0")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "PGTASK_TOKEN=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// An os.Pipe rather than cmd.StdoutPipe: Wait must not close the reading end while
	// the watcher still reads it.
	stdout, stdoutW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	cmd.Stdout = stdoutW
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	err = cmd.Start()
	stdoutW.Close()
	if err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	out := watchLines(stdout)
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default: // the test failed early: stop the process, and its cluster, if it will
			_ = cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", out.text(), stderr.String())
		}
	})

	out.waitFor(t, regexp.MustCompile(`^pgtask dev ready$`), 3*time.Minute)
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

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("pgtask dev exited with %v after SIGINT", waitErr)
		}
	case <-time.After(time.Minute):
		t.Fatal("pgtask dev did not exit within a minute of SIGINT")
	}
	if _, err := os.Stat(clusterDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cluster directory %s still there after exit (stat: %v)", clusterDir, err)
	}
	if !strings.Contains(stderr.String(), "demo processor: handling task") {
		t.Errorf("the demo processor logged nothing:\n%s", stderr.String())
	}
}

// TestDevWithDatabaseURL runs "pgtask dev" in-process on the test's database: it
// migrates it, registers the demo topics and processes their tasks.
func TestDevWithDatabaseURL(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	stdoutR, stdoutW := io.Pipe()
	stderr := &syncBuffer{}
	e := &env{stdin: strings.NewReader(""), stdout: stdoutW, stderr: stderr,
		getenv: func(k string) string { return map[string]string{"DATABASE_URL": f.url}[k] }}
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

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/logbuf"
	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

// TestMain runs the tests, or a guard when the exec handler under test starts this
// test binary as its guard (guard.go).
func TestMain(m *testing.M) {
	if isGuard(os.Args) {
		runGuard()
	}
	pgtest.Main(m)
}

// taskScript is the program the tests run per task: it acts on its input.
const taskScript = `#!/bin/sh
input=$(cat)
case "$input" in
ok) echo done;;
env) echo "$PGTASK_TOPIC $PGTASK_IDENTIFIER $PGTASK_SEQUENCE $PGTASK_ATTEMPT $PGTASK_REFERENCE";;
fail) echo boom >&2; exit 1;;
skip) exit 2;;
wait) echo waiting; exit 3;;
later) exit 75;;
odd) head -c 10000 /dev/zero | tr '\0' e >&2; echo >&2; echo last words >&2; exit 42;;
big) head -c 10000 /dev/zero | tr '\0' x;;
hang) sleep 30;;
linger) sleep 300 & echo "$$ $!" > "$1.tmp"; mv "$1.tmp" "$1"; wait;;
slow) sleep 0.2; echo done;;
*) echo "unexpected input $input" >&2; exit 1;;
esac
`

// writeScript writes the task script into a temporary directory and returns
// its path. The tests run it as "/bin/sh PATH", never PATH itself: executing a
// file the test process has just written can fail with "text file busy" when
// a parallel test forks while the file is still open for writing.
func writeScript(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "task.sh")
	if err := os.WriteFile(path, []byte(taskScript), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// buildBinary builds cmd/processor into dir and returns the binary's path.
func buildBinary(t *testing.T, dir string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to build the processor: %v", err)
	}
	bin := filepath.Join(dir, "processor")
	cmd := exec.Command(goTool, "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// fixture is one test's database with topic "topic" registered.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	url   string
	pool  *pgxpool.Pool
	repo  *repository.Repository
	topic string
}

func setup(t *testing.T) *fixture {
	t.Helper()
	url := pgtest.NewDatabase(t, schema.Hash(), repository.Migrate)
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	repo, err := repository.New(repository.Config{Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, ctx: t.Context(), url: url, pool: pool, repo: repo, topic: "topic"}
	if _, err := repo.CreateTopic(f.ctx, pool, f.topic); err != nil {
		t.Fatal(err)
	}
	// One attempt: a failure is final, as the tests of the exit codes and statuses want
	// to see it (a new topic retries 25 times).
	if _, err := repo.UpdateSettings(f.ctx, pool, f.topic, func(s *repository.TopicSettings) { s.MaxAttempts = 1 }); err != nil {
		t.Fatal(err)
	}
	return f
}

// push pushes one task per input, with the input as identifier too.
func (f *fixture) push(inputs ...string) []repository.Task {
	f.t.Helper()
	creations := make([]repository.Creation, len(inputs))
	for i, in := range inputs {
		creations[i] = repository.Creation{Identifier: in, Input: in, Reference: "ref-" + in}
	}
	tasks, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, creations...)
	if err != nil {
		f.t.Fatalf("push: %v", err)
	}
	return tasks
}

// exec runs statements in one transaction.
func (f *fixture) exec(statements ...string) {
	f.t.Helper()
	err := pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
		for _, stmt := range statements {
			if _, err := tx.Exec(f.ctx, stmt); err != nil {
				return fmt.Errorf("%s: %w", stmt, err)
			}
		}
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

// get reads one task.
func (f *fixture) get(seq int64) repository.Task {
	f.t.Helper()
	task, err := f.repo.Get(f.ctx, f.pool, f.topic, seq)
	if err != nil {
		f.t.Fatalf("get task %d: %v", seq, err)
	}
	return task
}

// all reads every task of the topic in sequence order.
func (f *fixture) all() []repository.Task {
	f.t.Helper()
	tasks, err := f.repo.Page(f.ctx, f.pool, f.topic, repository.TaskFilter{}, 0, 100000, repository.Forward)
	if err != nil {
		f.t.Fatalf("page: %v", err)
	}
	return tasks
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// waitState waits until task seq is in state want and returns it.
func (f *fixture) waitState(seq int64, want repository.State) repository.Task {
	f.t.Helper()
	var task repository.Task
	waitFor(f.t, 20*time.Second, "task "+want.String(), func() bool {
		task = f.get(seq)
		return task.State == want
	})
	return task
}

// process is a running processor binary.
type process struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdout logbuf.Buffer
	stderr logbuf.Buffer
	done   chan struct{}
	err    error
}

// start runs the binary with args (and DATABASE_URL and JSON logs when url is set).
func start(t *testing.T, bin, url string, args ...string) *process {
	t.Helper()
	return startEnv(t, bin, url, nil, args...)
}

// startEnv is start with the environment variables env ("NAME=value") set too.
func startEnv(t *testing.T, bin, url string, env []string, args ...string) *process {
	t.Helper()
	p := &process{t: t, done: make(chan struct{})}
	if url != "" {
		args = append([]string{"--database-url", url, "--log-format", "json", "--log-level", "debug"}, args...)
	}
	p.cmd = exec.Command(bin, args...)
	// The processor's environment fallbacks must not leak in from the test's.
	p.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	p.cmd.Stdout = &p.stdout
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("processor stderr:\n%s", p.stderr.String())
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *process) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("processor still running after %v; stderr:\n%s", timeout, p.stderr.String())
	}
	var exitErr *exec.ExitError
	if errors.As(p.err, &exitErr) {
		return exitErr.ExitCode()
	}
	if p.err != nil {
		p.t.Fatalf("wait: %v", p.err)
	}
	return 0
}

// stop sends SIGTERM and expects a clean exit.
func (p *process) stop() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	if code := p.wait(30 * time.Second); code != 0 {
		p.t.Fatalf("processor exited %d after SIGTERM, want 0; stderr:\n%s", code, p.stderr.String())
	}
}

// addr waits for the processor to log the address of its HTTP server.
func (p *process) addr() string {
	p.t.Helper()
	const key = `"addr":"`
	var addr string
	waitFor(p.t, 10*time.Second, "the metrics server's address in the log", func() bool {
		s := p.stderr.String()
		i := strings.Index(s, key)
		if i < 0 {
			return false
		}
		rest := s[i+len(key):]
		addr = rest[:strings.IndexByte(rest, '"')]
		return true
	})
	return addr
}

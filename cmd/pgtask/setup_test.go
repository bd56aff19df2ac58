package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

func TestMain(m *testing.M) {
	// pgtask bench --processes starts children of its own binary, which in these tests is
	// the test binary: run as such a child, it is the CLI.
	if len(os.Args) > 2 && os.Args[1] == "bench" && os.Args[2] == benchChildFlag {
		os.Exit(runProcess(os.Args[1:]))
	}
	pgtest.Main(m)
}

// fixture is one test's migrated database plus the means to run the CLI against it
// in-process.
type fixture struct {
	t    *testing.T
	ctx  context.Context
	url  string
	pool *pgxpool.Pool
	repo *repository.Repository
}

// setup gives the test its own migrated database with topic "t" registered.
func setup(t *testing.T) *fixture {
	t.Helper()
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t, schema.Hash(), repository.Migrate)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close)
	repo, err := repository.New(repository.Config{Owner: "test-worker"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.RegisterOwner(ctx, pool); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, ctx: ctx, url: url, pool: pool, repo: repo}
	if _, err := repo.CreateTopic(ctx, pool, "t"); err != nil {
		t.Fatal(err)
	}
	// One attempt: a failure is final and an expiry leaves the task EXPIRED, as the
	// commands' tests want to see them (a new topic retries 25 times).
	if _, err := repo.UpdateSettings(ctx, pool, "t", func(s *repository.TopicSettings) { s.MaxAttempts = 1 }); err != nil {
		t.Fatal(err)
	}
	return f
}

// result is what one in-process run of the CLI did.
type result struct {
	stdout, stderr string
	err            error
	code           int // the exit code main would use
}

// cli runs pgtask with args followed by --database-url of the fixture's database.
func (f *fixture) cli(args ...string) result {
	f.t.Helper()
	return f.cliIn("", args...)
}

// cliIn is cli with stdin as standard input.
func (f *fixture) cliIn(stdin string, args ...string) result {
	f.t.Helper()
	return runCLI(f.ctx, stdin, nil, append(args, "--database-url", f.url)...)
}

// ok runs the CLI and fails the test unless it succeeded; it returns stdout.
func (f *fixture) ok(args ...string) string {
	f.t.Helper()
	r := f.cli(args...)
	if r.err != nil {
		f.t.Fatalf("pgtask %s: %v\nstderr: %s", strings.Join(args, " "), r.err, r.stderr)
	}
	return r.stdout
}

// runCLI runs the CLI in-process with the given standard input and environment.
func runCLI(ctx context.Context, stdin string, environ map[string]string, args ...string) result {
	var stdout, stderr, report bytes.Buffer
	e := &env{
		stdin:     strings.NewReader(stdin),
		stdout:    &stdout,
		stderr:    &stderr,
		lookupenv: lookupIn(environ),
	}
	err := runEnv(ctx, e, args)
	code := exitCode(err, &report)
	return result{stdout: stdout.String(), stderr: stderr.String() + report.String(), err: err, code: code}
}

// lookupIn is an env.lookupenv of the variables in environ: a variable given as "" is
// set but empty, one not there is unset.
func lookupIn(environ map[string]string) func(string) (string, bool) {
	return func(key string) (string, bool) {
		v, ok := environ[key]
		return v, ok
	}
}

// get reads a task from the database.
func (f *fixture) get(seq int64) repository.Task {
	f.t.Helper()
	task, err := f.repo.Get(f.ctx, f.pool, "t", seq)
	if err != nil {
		f.t.Fatalf("get task %d: %v", seq, err)
	}
	return task
}

// push pushes tasks with the given identifiers to topic t and returns their sequences.
func (f *fixture) push(identifiers ...string) []int64 {
	f.t.Helper()
	creations := make([]repository.Creation, len(identifiers))
	for i, id := range identifiers {
		creations[i] = repository.Creation{Identifier: id, Input: "in-" + id}
	}
	tasks, err := f.repo.Push(f.ctx, f.pool, "t", repository.Append, creations...)
	if err != nil {
		f.t.Fatal(err)
	}
	seqs := make([]int64, len(tasks))
	for i, task := range tasks {
		seqs[i] = task.Sequence
	}
	return seqs
}

// finish polls every READY task of topic t and completes it with decision.
func (f *fixture) finish(decision repository.Decision) []int64 {
	f.t.Helper()
	tasks, err := f.repo.Poll(f.ctx, f.pool, "t", repository.FIFO, repository.None, 1000)
	if err != nil {
		f.t.Fatal(err)
	}
	completions := make([]repository.Completion, len(tasks))
	seqs := make([]int64, len(tasks))
	for i, task := range tasks {
		completions[i] = task.Decide(decision)
		seqs[i] = task.Sequence
	}
	if _, err := f.repo.Complete(f.ctx, f.pool, "t", completions...); err != nil {
		f.t.Fatal(err)
	}
	return seqs
}

// wantState fails the test unless task seq is in state want.
func (f *fixture) wantState(seq int64, want repository.State) {
	f.t.Helper()
	if got := f.get(seq).State; got != want {
		f.t.Fatalf("task %d is %v, want %v", seq, got, want)
	}
}

// wantUsage fails the test unless r is a usage error (exit 2) whose message contains
// every one of parts.
func wantUsage(t *testing.T, r result, parts ...string) {
	t.Helper()
	var ue *usageError
	if !errors.As(r.err, &ue) || r.code != 2 {
		t.Fatalf("got error %v (exit %d), want a usage error (exit 2)", r.err, r.code)
	}
	for _, p := range parts {
		if !strings.Contains(r.err.Error(), p) {
			t.Errorf("usage error %q does not contain %q", r.err, p)
		}
	}
	if !strings.Contains(r.stderr, "pgtask: ") || !strings.Contains(r.stderr, "--help' for usage") {
		t.Errorf("stderr %q lacks the error report", r.stderr)
	}
}

// wantRuntime fails the test unless r is a runtime error (exit 1) matching target.
func wantRuntime(t *testing.T, r result, target error) {
	t.Helper()
	if r.err == nil || r.code != 1 {
		t.Fatalf("got error %v (exit %d), want a runtime error (exit 1)", r.err, r.code)
	}
	if target != nil && !errors.Is(r.err, target) {
		t.Fatalf("error %v is not %v", r.err, target)
	}
	if !strings.HasPrefix(r.stderr, "pgtask: ") {
		t.Errorf("stderr %q does not start with \"pgtask: \"", r.stderr)
	}
}

func wantContains(t *testing.T, got string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(got, p) {
			t.Errorf("output lacks %q:\n%s", p, got)
		}
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

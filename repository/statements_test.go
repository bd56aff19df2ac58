package repository_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

// statementCounter is a pgx tracer that records every statement a connection sends to
// the server: plain queries, each query of a batch, and COPY.
type statementCounter struct {
	mu         sync.Mutex
	statements []string
}

var (
	_ pgx.QueryTracer    = (*statementCounter)(nil)
	_ pgx.BatchTracer    = (*statementCounter)(nil)
	_ pgx.CopyFromTracer = (*statementCounter)(nil)
)

func (c *statementCounter) record(sql string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.statements = append(c.statements, sql)
}

// reset forgets what was recorded so far.
func (c *statementCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.statements = nil
}

// names returns the sqlc query names ("-- name: TaskPush :many" → "TaskPush") of the
// recorded statements, or their first line when they have none.
func (c *statementCounter) names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.statements))
	for i, sql := range c.statements {
		first, _, _ := strings.Cut(strings.TrimSpace(sql), "\n")
		if name, ok := strings.CutPrefix(first, "-- name: "); ok {
			first, _, _ = strings.Cut(name, " ")
		}
		out[i] = first
	}
	return out
}

// count is how many of the recorded statements are the sqlc query name.
func (c *statementCounter) count(name string) int {
	n := 0
	for _, x := range c.names() {
		if x == name {
			n++
		}
	}
	return n
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.record(data.SQL)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *statementCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	c.record(data.SQL)
}

func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *statementCounter) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceCopyFromStartData) context.Context {
	c.record(fmt.Sprintf("COPY %v", data.TableName))
	return ctx
}

func (c *statementCounter) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// tracedSetup returns a repository, registered with an initialized topic "topic", and a
// pool on its own fresh database whose statements are counted.
func tracedSetup(t *testing.T) (*repository.Repository, *pgxpool.Pool, *statementCounter) {
	t.Helper()
	ctx := t.Context()
	counter := &statementCounter{}
	pool := tracedPool(t, counter)
	repo, err := repository.New(repository.Config{Owner: "owner-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.RegisterOwner(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.CreateTopic(ctx, pool, "topic"); err != nil {
		t.Fatal(err)
	}
	return repo, pool, counter
}

// tracedPool returns a pool on a fresh database of its own whose connections report to
// tracer.
func tracedPool(t *testing.T, tracer pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.NewDatabase(t, schema.Hash(), migrate))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func wantStatements(t *testing.T, counter *statementCounter, op string, want ...string) {
	t.Helper()
	got := counter.names()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("%s sent %d statements %v, want %d %v", op, len(got), got, len(want), want)
	}
}

// TestStatements proves the batch operations of design §4 are one round trip whatever
// their size (on success; a refused call may run a query to explain the refusal).
func TestStatements(t *testing.T) {
	t.Parallel()

	t.Run("PushOfTenThousandIsOneStatement", func(t *testing.T) {
		t.Parallel()
		repo, pool, counter := tracedSetup(t)
		creations := make([]repository.Creation, 10_000)
		for i := range creations {
			creations[i] = repository.Creation{Identifier: fmt.Sprintf("id-%d", i%100), Input: "x"}
		}
		counter.reset()
		tasks, err := repo.Push(t.Context(), pool, "topic", repository.Replace, creations...)
		if err != nil {
			t.Fatal(err)
		}
		if len(tasks) != len(creations) {
			t.Fatalf("pushed %d tasks, want %d", len(tasks), len(creations))
		}
		wantStatements(t, counter, "push of 10 000", "TaskPush")
	})

	t.Run("PushInCallersTransactionIsOneStatement", func(t *testing.T) {
		t.Parallel()
		repo, pool, counter := tracedSetup(t)
		ctx := t.Context()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		counter.reset()
		if _, err := repo.Push(ctx, tx, "topic", repository.Append,
			repository.Creation{Identifier: "a"}, repository.Creation{Identifier: "b"}); err != nil {
			t.Fatal(err)
		}
		wantStatements(t, counter, "push in a transaction", "TaskPushAppend")
	})

	// GetMany tells an unknown topic by a second statement only when it found no task:
	// a task found says the topic is registered.
	t.Run("GetManyThatFindsTasksIsOneStatement", func(t *testing.T) {
		t.Parallel()
		repo, pool, counter := tracedSetup(t)
		ctx := t.Context()
		pushed, err := repo.Push(ctx, pool, "topic", repository.Append, repository.Creation{Identifier: "a"})
		if err != nil {
			t.Fatal(err)
		}
		counter.reset()
		if got, err := repo.GetMany(ctx, pool, "topic", pushed[0].Sequence, 999); err != nil || len(got) != 1 {
			t.Fatalf("GetMany = %v, %v; want the task pushed", got, err)
		}
		wantStatements(t, counter, "get many", "TaskGetMany")
	})

	t.Run("PollOfThousandIsOneStatement", func(t *testing.T) {
		t.Parallel()
		repo, pool, counter := tracedSetup(t)
		ctx := t.Context()
		creations := make([]repository.Creation, 1_000)
		for i := range creations {
			creations[i] = repository.Creation{Identifier: fmt.Sprint(i)}
		}
		if _, err := repo.Push(ctx, pool, "topic", repository.Append, creations...); err != nil {
			t.Fatal(err)
		}
		counter.reset()
		tasks, err := repo.Poll(ctx, pool, "topic", repository.FIFO, repository.SingularByIdentifier, 1_000)
		if err != nil {
			t.Fatal(err)
		}
		if len(tasks) != 1_000 {
			t.Fatalf("polled %d tasks, want 1000", len(tasks))
		}
		// a poll under a condition takes the topic's turn, then leases in a statement
		// after its choice (task_poll, schema 61): TaskPollLimited's one statement
		wantStatements(t, counter, "poll of 1000", "TaskPollLimited")
	})

	t.Run("CompleteOfThousandIsOneStatement", func(t *testing.T) {
		t.Parallel()
		repo, pool, counter := tracedSetup(t)
		ctx := t.Context()
		creations := make([]repository.Creation, 1_000)
		for i := range creations {
			creations[i] = repository.Creation{Identifier: fmt.Sprint(i)}
		}
		if _, err := repo.Push(ctx, pool, "topic", repository.Append, creations...); err != nil {
			t.Fatal(err)
		}
		tasks, err := repo.Poll(ctx, pool, "topic", repository.FIFO, repository.None, 1_000)
		if err != nil {
			t.Fatal(err)
		}
		if len(tasks) != 1_000 {
			t.Fatalf("polled %d tasks, want 1000", len(tasks))
		}
		completions := make([]repository.Completion, len(tasks))
		for i, task := range tasks {
			// Every kind of decision, so no branch of the statement is left out.
			var d repository.Decision
			switch i % 5 {
			case 0:
				d = repository.Succeed("done")
			case 1:
				d = repository.Fail(fmt.Errorf("boom %d", i))
			case 2:
				d = repository.Suspend("")
			case 3:
				d = repository.Skip("irrelevant")
			case 4:
				d = repository.SnoozeFor(0)
			}
			completions[i] = task.Decide(d)
		}
		counter.reset()
		done, err := repo.Complete(ctx, pool, "topic", completions...)
		if err != nil {
			t.Fatal(err)
		}
		if len(done) != len(completions) {
			t.Fatalf("completed %d tasks, want %d", len(done), len(completions))
		}
		wantStatements(t, counter, "complete of 1000", "TaskComplete")
	})
}

package pgtasktest_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/pgtasktest"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// The code under test in the examples below: a sign-up that pushes a welcome e-mail in
// the transaction of its own row, and the handler that sends it.

type welcome struct {
	To string `json:"to"`
}

func signUp(ctx context.Context, tx pgx.Tx, repo *repository.Repository, email string) error {
	if _, err := tx.Exec(ctx, "INSERT INTO signup (email) VALUES ($1)", email); err != nil {
		return err
	}
	_, err := repo.Push(ctx, tx, "emails", repository.Append,
		repository.Creation{Identifier: email, Input: fmt.Sprintf(`{"to": %q}`, email)})
	return err
}

var sendWelcome = processor.Typed(func(ctx context.Context, task repository.Task, w welcome) repository.Decision {
	if w.To == "" {
		return repository.Skip("no address")
	}
	return repository.Succeed("sent to " + w.To)
})

func TestSendWelcomeWithoutADatabase(t *testing.T) {
	t.Parallel()
	tasks := pgtasktest.NewTasks("emails",
		repository.Creation{Identifier: "ada", Input: `{"to": "ada@example.com"}`},
		repository.Creation{Identifier: "nobody", Input: `{}`},
		repository.Creation{Identifier: "broken", Input: `{"to":`})
	outcome := pgtasktest.Run(t.Context(), t, sendWelcome, tasks...)
	want := []repository.Result{repository.Success, repository.Filter, repository.Failure}
	for i, task := range tasks {
		if got := outcome.Decisions[task.Sequence]; got.Result != want[i] {
			t.Errorf("%s: %v %q, want %v", task.Identifier, got.Result, got.Message, want[i])
		}
	}
}

// signupTemplate is pgtask's schema and the program's own table.
var signupTemplate = pgtasktest.Template{
	Key: "example.com/signup v1", // the program's own; change it when Migrate changes
	Migrate: func(ctx context.Context, pool *pgxpool.Pool) error {
		_, err := pool.Exec(ctx, "CREATE TABLE signup (email text PRIMARY KEY)")
		return err
	},
}

func TestSignUpPushesAWelcomeEmail(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := signupTemplate.NewPool(t)
	repo, err := repository.New(repository.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.CreateTopic(ctx, pool, "emails"); err != nil {
		t.Fatal(err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := signUp(ctx, tx, repo, "ada@example.com"); err != nil {
		t.Fatal(err)
	}
	want := pgtasktest.Want{Topic: "emails", Identifier: "ada@example.com", Input: `{"to": "ada@example.com"}`}
	pgtasktest.RequirePushedTx(ctx, t, tx, want)    // seen inside the transaction
	pgtasktest.RequireNotPushed(ctx, t, pool, want) // not outside, until it commits
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	pgtasktest.RequirePushed(ctx, t, pool, want)

	// A second sign-up of the address fails, and its e-mail goes with it.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return signUp(ctx, tx, repo, "ada@example.com") })
	if err == nil {
		t.Fatal("a second sign-up was accepted")
	}
	pgtasktest.RequireManyPushed(ctx, t, pool, want)
}

func TestSendWelcomeInATransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtasktest.NewPool(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) // nothing of the test stays

	res := pgtasktest.Work(ctx, t, tx, sendWelcome, "emails",
		repository.Creation{Identifier: "ada", Input: `{"to": "ada@example.com"}`})
	if task := res.Tasks[0]; task.State != repository.Succeeded || task.Output != "sent to ada@example.com" {
		t.Fatalf("task %v %q, want SUCCEEDED", task.State, task.Output)
	}
}

func TestSendWelcomeWithAProcessor(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtasktest.NewPool(t)
	repo, err := repository.New(repository.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.CreateTopic(ctx, pool, "emails"); err != nil {
		t.Fatal(err)
	}
	p, err := processor.New(processor.Config{Pool: pool, Logger: pgtasktest.Logger(t, slog.LevelInfo)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Manage(processor.ManagerConfig{Topic: "emails", Handler: sendWelcome}); err != nil {
		t.Fatal(err)
	}
	pgtasktest.Start(t, p) // stopped gracefully when the test ends

	tasks, err := repo.Push(ctx, pool, "emails", repository.Append,
		repository.Creation{Identifier: "ada", Input: `{"to": "ada@example.com"}`})
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	done, err := p.Wait(waitCtx, "emails", tasks[0].Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if done[0].State != repository.Succeeded {
		t.Fatalf("task %v %q, want SUCCEEDED", done[0].State, done[0].Output)
	}
}

package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"example.com/app"
	"github.com/pgtask/pgtask/pgtasktest"
	"github.com/pgtask/pgtask/repository"
)

func TestMain(m *testing.M) {
	code := pgtasktest.RunTests(m)
	fmt.Println("app: TestMain's teardown ran after the tests") // pgtasktest's outside_test looks for it
	os.Exit(code)
}

var template = pgtasktest.Template{Key: "example.com/app v1", Migrate: app.Schema}

func TestSignUpPushesAWelcome(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := template.NewPool(t)
	repo, err := repository.New(repository.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.CreateTopic(ctx, pool, app.Topic); err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := app.SignUp(ctx, tx, repo, "ada@example.com"); err != nil {
			return err
		}
		pgtasktest.RequirePushedTx(ctx, t, tx, pgtasktest.Want{Topic: app.Topic, Identifier: "ada@example.com",
			Input: `{"to":"ada@example.com"}`, States: []repository.State{repository.Ready}})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pgtasktest.RequirePushed(ctx, t, pool, pgtasktest.Want{Topic: app.Topic, Identifier: "ada@example.com"})
}

func TestSendDecides(t *testing.T) {
	t.Parallel()
	tasks := pgtasktest.NewTasks(app.Topic,
		repository.Creation{Identifier: "ada", Input: pgtasktest.JSON(t, app.Welcome{To: "ada@example.com"})},
		repository.Creation{Identifier: "nobody", Input: `{}`})
	outcome := pgtasktest.Run(t.Context(), t, app.Send, tasks...)
	if outcome.Decisions[1].Result != repository.Success || outcome.Decisions[2].Result != repository.Filter {
		t.Fatalf("decisions %+v", outcome.Decisions)
	}
}

func TestWorkerSendsAndCounts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := template.NewPool(t)
	reg := prometheus.NewRegistry()
	p, err := app.NewWorker(pool, pgtasktest.Logger(t, slog.LevelInfo), reg)
	if err != nil {
		t.Fatal(err)
	}
	repo := p.Repository()
	if _, err := repo.CreateTopic(ctx, pool, app.Topic); err != nil {
		t.Fatal(err)
	}
	pgtasktest.Start(t, p)
	var pushed []repository.Task
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := app.SignUp(ctx, tx, repo, "ada@example.com"); err != nil {
			return err
		}
		pushed, err = repo.GetMany(ctx, tx, app.Topic, 1)
		return err
	})
	if err != nil || len(pushed) != 1 {
		t.Fatalf("sign up: %v (%d tasks)", err, len(pushed))
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	done, err := p.Wait(waitCtx, app.Topic, pushed[0].Sequence)
	if err != nil || done[0].State != repository.Succeeded {
		t.Fatalf("wait: %+v, %v", done, err)
	}
	if n, err := testutil.GatherAndCount(reg, "pgtask_tasks_completed_total"); err != nil || n != 1 {
		t.Fatalf("pgtask_tasks_completed_total series: %d, %v", n, err)
	}
}

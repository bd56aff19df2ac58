package processor_test

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// A worker process: four workers serve the "emails" topic until SIGTERM, then shut
// down gracefully. (Compiled, not run: it needs a database.)
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := repository.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil)) // failures, retries, dead letters
	p, err := processor.New(processor.Config{Pool: pool, Logger: logger})
	if err != nil {
		log.Fatal(err)
	}
	type email struct {
		To, Subject string
	}
	send := processor.Typed(func(ctx context.Context, task repository.Task, e email) repository.Decision {
		log.Printf("sending %q to %s", e.Subject, e.To)
		return repository.Succeed("sent")
	})
	workers, err := processor.Buffer(send, processor.BufferConfig{Queue: 2, MinWorkers: 1, MaxWorkers: 4})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := p.Manage(processor.ManagerConfig{Topic: "emails", CreateTopic: true, Handler: workers, BatchSize: 50}); err != nil {
		log.Fatal(err)
	}
	if err := p.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// A handler of its own decides each task when its work is done, here from a goroutine
// per task: every decision is committed in the next flush, whatever the batch's other
// tasks do, and a task that is still running at the shutdown deadline fails (to be
// retried) while those never started are handed back.
func ExampleBatch_Decide() {
	notify := processor.HandlerFunc(func(ctx context.Context, batch *processor.Batch) {
		for _, task := range batch.Tasks {
			go func() {
				if err := exampleDeliver(batch.Context(task.Sequence), task.Input); err != nil {
					_ = batch.Decide(task.Sequence, repository.Fail(err))
					return
				}
				_ = batch.Decide(task.Sequence, repository.Succeed("delivered"))
			}()
		}
	})
	_ = notify // pass it as ManagerConfig.Handler
}

// exampleDeliver stands for the work a handler does.
func exampleDeliver(ctx context.Context, input string) error {
	if input == "" {
		return errors.New("nothing to deliver")
	}
	return ctx.Err()
}

// Wait waits until the tasks a program pushed are finished, as tests and command-line
// tools want; Subscribe streams every task the processor commits.
func ExampleProcessor_Wait() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	p, err := processor.New(processor.Config{Pool: pool})
	if err != nil {
		log.Fatal(err)
	}
	// The topic registered before the push: the manager's CreateTopic does it only once
	// Run has started, which a push sent right after it can beat.
	if _, err := p.Repository().CreateTopic(ctx, pool, "emails"); err != nil {
		log.Fatal(err)
	}
	if _, err := p.Manage(processor.ManagerConfig{Topic: "emails", Handler: processor.TaskFunc(
		func(ctx context.Context, task repository.Task) repository.Decision { return repository.Succeed("sent") })}); err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = p.Run(runCtx) }()

	tasks, err := p.Repository().Push(ctx, pool, "emails", repository.Append, repository.Creation{Identifier: "user-42"})
	if err != nil {
		log.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	done, err := p.Wait(waitCtx, "emails", tasks[0].Sequence)
	if err != nil {
		log.Fatal(err)
	}
	log.Print(done[0].State, " ", done[0].Output) // SUCCEEDED sent
}

// A composite handler: "fetch" runs first, "resize" and "index" then run concurrently
// on the tasks fetch succeeded.
func ExampleComposite() {
	type image struct{ bytes []byte }
	c := processor.NewComposite()
	must := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	must(c.Step("fetch", processor.TaskStep(func(ctx context.Context, t repository.Task, s *processor.Supplement) repository.Decision {
		processor.Set(s, image{bytes: []byte(t.Input)})
		return repository.Succeed("")
	})))
	must(c.Step("resize", processor.TaskStep(func(ctx context.Context, t repository.Task, s *processor.Supplement) repository.Decision {
		_ = processor.MustGet[image](s)
		return repository.Succeed("resized")
	}), "fetch"))
	must(c.Step("index", processor.TaskStep(func(ctx context.Context, t repository.Task, s *processor.Supplement) repository.Decision {
		return repository.Succeed("indexed")
	}), "fetch"))
	_ = c // pass c as ManagerConfig.Handler
}

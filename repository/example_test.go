package repository_test

// These examples are compiled but not run by go test (they have no "Output:" comment):
// they need a PostgreSQL server, and the test harness (internal/pgtest) hands out
// databases only to a *testing.T. They connect to the database named by DATABASE_URL.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/repository"
)

// exampleConnect opens a pool on DATABASE_URL with the pgtask schema applied.
func exampleConnect(ctx context.Context) *pgxpool.Pool {
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	if err := repository.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	return pool
}

// A process creates one Repository, registers its owner and initializes the topics it
// uses. Both calls are idempotent, so every process can make them at start-up.
func ExampleRepository_Register() {
	ctx := context.Background()
	pool := exampleConnect(ctx)
	defer pool.Close()

	repo, err := repository.New(repository.Config{}) // owner: a random UUID
	if err != nil {
		log.Fatal(err)
	}
	if _, err := repo.Register(ctx, pool); err != nil {
		log.Fatal(err)
	}
	if _, err := repo.Initialize(ctx, pool, "emails"); err != nil {
		log.Fatal(err)
	}
	// Prove liveness regularly, so other processes do not expire this owner's leases.
	if err := repo.Heartbeat(ctx, pool); err != nil {
		log.Fatal(err)
	}
}

// Initialize registers a topic and creates its partition; it reports whether the topic
// was new.
func ExampleRepository_Initialize() {
	ctx := context.Background()
	pool := exampleConnect(ctx)
	defer pool.Close()

	repo, err := repository.New(repository.Config{Owner: "example"})
	if err != nil {
		log.Fatal(err)
	}
	created, err := repo.Initialize(ctx, pool, "emails")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("new topic:", created)
}

// Push takes the caller's handle: given a transaction, the tasks commit (and listeners
// are notified) together with the caller's own writes, or not at all.
func ExampleRepository_Push() {
	ctx := context.Background()
	pool := exampleConnect(ctx)
	defer pool.Close()
	repo, err := repository.New(repository.Config{Owner: "example"})
	if err != nil {
		log.Fatal(err)
	}

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// ... the caller's own writes on tx, e.g. INSERT INTO signup ...
		tasks, err := repo.Push(ctx, tx, "emails", repository.Append,
			repository.Creation{Identifier: "user-42", Input: `{"template":"welcome"}`},
			repository.Creation{Identifier: "user-42", Input: `{"template":"tips"}`, Delay: 24 * time.Hour},
		)
		if err != nil {
			return err
		}
		fmt.Println("pushed", len(tasks), "tasks, first sequence", tasks[0].Sequence)
		return nil
	})
	switch {
	case errors.Is(err, repository.ErrUnknownTopic):
		log.Fatal("initialize the topic first: ", err)
	case errors.Is(err, repository.ErrQueueFull):
		log.Print("topic is full, nothing was pushed: ", err)
	case err != nil:
		log.Fatal(err)
	}
}

// Poll leases a batch of READY tasks; SingularByIdentifier keeps at most one task of
// each identifier in flight, in sequence order.
func ExampleRepository_Poll() {
	ctx := context.Background()
	pool := exampleConnect(ctx)
	defer pool.Close()
	repo, err := repository.New(repository.Config{Owner: "example"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := repo.Register(ctx, pool); err != nil {
		log.Fatal(err)
	}

	tasks, err := repo.Poll(ctx, pool, "emails", repository.FIFO, repository.SingularByIdentifier, 100)
	if err != nil {
		log.Fatal(err)
	}
	for _, task := range tasks {
		fmt.Println(task.Sequence, task.Identifier, task.State, "attempt", task.Attempt)
	}
}

// Complete records the decisions for leased tasks in one statement. A completion names
// the attempt it was leased in, so a lease that expired and was taken over by another
// owner cannot be completed twice.
func ExampleRepository_Complete() {
	ctx := context.Background()
	pool := exampleConnect(ctx)
	defer pool.Close()
	repo, err := repository.New(repository.Config{Owner: "example"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := repo.Register(ctx, pool); err != nil {
		log.Fatal(err)
	}

	tasks, err := repo.Poll(ctx, pool, "emails", repository.FIFO, repository.SingularByIdentifier, 100)
	if err != nil {
		log.Fatal(err)
	}
	completions := make([]repository.Completion, 0, len(tasks))
	for _, task := range tasks {
		if err := exampleSend(task.Input); err != nil {
			completions = append(completions, task.Decide(repository.Fail(err)))
			continue
		}
		completions = append(completions, task.Decide(repository.Succeed("sent")))
	}
	_, err = repo.Complete(ctx, pool, "emails", completions...)
	var refused *repository.TaskError
	switch {
	case errors.Is(err, repository.ErrNotOwned) && errors.As(err, &refused):
		// Nothing was written: some leases were lost, e.g. expired and re-polled.
		log.Print("leases lost for tasks ", refused.Sequences())
	case err != nil:
		log.Fatal(err)
	}
}

// exampleSend stands for the work a handler does.
func exampleSend(input string) error {
	if input == "" {
		return errors.New("empty input")
	}
	return nil
}

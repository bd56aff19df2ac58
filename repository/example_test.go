package repository_test

// These examples are compiled but not run by go test (they have no "Output:" comment):
// they need a PostgreSQL server, and the test kit (package pgtasktest) hands out
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

// A process creates one Repository, registers its owner and creates the topics it
// uses. Both calls are idempotent, so every process can make them at start-up.
func ExampleRepository_RegisterOwner() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := repository.Migrate(ctx, pool); err != nil { // ErrMigrationInProgress while another migrates
		log.Fatal(err)
	}

	repo, err := repository.New(repository.Config{}) // owner: a random UUID
	if err != nil {
		log.Fatal(err)
	}
	if _, err := repo.RegisterOwner(ctx, pool); err != nil {
		log.Fatal(err)
	}
	if _, err := repo.CreateTopic(ctx, pool, "emails"); err != nil {
		log.Fatal(err)
	}
	// Prove liveness regularly, so other processes do not expire this owner's leases.
	if err := repo.Heartbeat(ctx, pool); err != nil {
		log.Fatal(err)
	}
}

// CreateTopic creates (registers) a topic with the default settings; it reports whether
// the topic was new.
func ExampleRepository_CreateTopic() {
	ctx := context.Background()
	pool := exampleConnect(ctx)
	defer pool.Close()

	repo, err := repository.New(repository.Config{Owner: "example"})
	if err != nil {
		log.Fatal(err)
	}
	created, err := repo.CreateTopic(ctx, pool, "emails")
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
		log.Fatal("create the topic first: ", err)
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
	if _, err := repo.RegisterOwner(ctx, pool); err != nil {
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
	if _, err := repo.RegisterOwner(ctx, pool); err != nil {
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

// UpdateSettings changes the settings it sets and keeps the others: here, fewer attempts
// and a slower backoff for a topic whose tasks call a rate-limited API.
func ExampleRepository_UpdateSettings() {
	ctx := context.Background()
	pool := exampleConnect(ctx)
	defer pool.Close()
	repo, err := repository.New(repository.Config{})
	if err != nil {
		log.Fatal(err)
	}

	topic, err := repo.UpdateSettings(ctx, pool, "emails", func(s *repository.TopicSettings) {
		s.MaxAttempts = 5
		s.BackoffBase = 30 * time.Second
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(topic.MaxAttempts, topic.BackoffBase, topic.BackoffCap) // the cap is as it was
}

// Limits hold across every process: here at most 3 tasks of "partner-api" run at once,
// one per customer, 50 start per second at most, and customers take turns.
func ExampleTopicSettings_limits() {
	ctx := context.Background()
	pool := exampleConnect(ctx)
	defer pool.Close()
	repo, err := repository.New(repository.Config{})
	if err != nil {
		log.Fatal(err)
	}

	_, err = repo.UpdateSettings(ctx, pool, "partner-api", func(s *repository.TopicSettings) {
		s.Concurrency = 3    // ACTIVE at once, whatever the processes and their workers
		s.KeyConcurrency = 1 // per concurrency key
		s.Rate, s.RatePeriod, s.RateBurst = 50, time.Second, 10
		s.Fair = true // keys with READY tasks take turns
	})
	if err != nil {
		log.Fatal(err)
	}
	_, err = repo.Push(ctx, pool, "partner-api", repository.Append,
		repository.Creation{Identifier: "sync-42", ConcurrencyKey: "customer-7"})
	if err != nil {
		log.Fatal(err)
	}
	usage, err := repo.LimitUsage(ctx, pool, "partner-api")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(usage.Active, usage.KeysWaiting, usage.Tokens)
}

// CountByState counts a topic's tasks exactly, by state; Stats is the cheap summary of a
// large topic.
func ExampleRepository_CountByState() {
	ctx := context.Background()
	pool := exampleConnect(ctx)
	defer pool.Close()
	repo, err := repository.New(repository.Config{})
	if err != nil {
		log.Fatal(err)
	}

	counts, err := repo.CountByState(ctx, pool, "emails")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("sent:", counts[repository.Succeeded], "dead letters:", counts[repository.Failed])
	stats, err := repo.Stats(ctx, pool, "emails")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("waiting:", stats.Ready-stats.Delayed, "oldest for", stats.OldestReady)
}

// A schedule pushes a task at each fire time of its spec; every running processor
// fires the due ones. CreateSchedule refuses a name taken (ErrScheduleExists), so a
// process that declares its schedules at start-up updates them instead.
func ExampleRepository_CreateSchedule() {
	ctx := context.Background()
	pool := exampleConnect(ctx)
	defer pool.Close()
	repo, err := repository.New(repository.Config{})
	if err != nil {
		log.Fatal(err)
	}

	settings := repository.ScheduleSettings{
		Topic:      "emails",
		Spec:       "0 8 * * mon-fri", // 08:00 on weekdays
		TimeZone:   "Europe/Paris",
		Identifier: "digest-{time}", // a task of its own per fire time
		CatchUp:    3,               // after a downtime, the 3 latest missed times
	}
	_, err = repo.CreateSchedule(ctx, pool, "weekday-digest", settings)
	if errors.Is(err, repository.ErrScheduleExists) {
		_, err = repo.UpdateSchedule(ctx, pool, "weekday-digest", func(s *repository.ScheduleSettings) { *s = settings })
	}
	if err != nil {
		log.Fatal(err)
	}
	schedules, err := repo.Schedules(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range schedules {
		fmt.Println(s.Name, s.Spec, s.NextFire, s.Paused)
	}
}

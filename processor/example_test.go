package processor_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

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
	p, err := processor.New(processor.Config{Pool: pool})
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
	if _, err := p.Manage(processor.ManagerConfig{Topic: "emails", Initialize: true, Handler: workers, BatchSize: 50}); err != nil {
		log.Fatal(err)
	}
	if err := p.Run(ctx); err != nil {
		log.Fatal(err)
	}
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

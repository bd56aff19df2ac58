package metrics_test

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pgtask/pgtask/metrics"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// A program that embeds a processor exports the series of the pgtask binaries with one
// call, next to its own. (Compiled, not run: it needs a database.)
func ExampleInstrument() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	p, err := processor.New(processor.Config{Pool: pool})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := p.Manage(processor.ManagerConfig{Topic: "emails", CreateTopic: true, Handler: processor.TaskFunc(
		func(ctx context.Context, task repository.Task) repository.Decision { return repository.Succeed("") })}); err != nil {
		log.Fatal(err)
	}

	if _, err := metrics.Instrument(prometheus.DefaultRegisterer, p); err != nil {
		log.Fatal(err)
	}
	http.Handle("GET /metrics", promhttp.Handler())

	go func() { log.Fatal(http.ListenAndServe("127.0.0.1:9090", nil)) }()
	log.Fatal(p.Run(ctx))
}

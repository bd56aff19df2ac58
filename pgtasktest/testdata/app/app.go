// Package app is a program that uses pgtask as a library, from outside its module: it
// signs users up and sends them a welcome e-mail through a topic, with the processor's
// logs and metrics wired in. Its tests use the test kit. It imports only pgtask's public
// packages (the Go tool refuses internal ones outside the module).
package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgtask/pgtask/metrics"
	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// Topic is where welcome e-mails wait to be sent.
const Topic = "welcome"

// Schema creates the program's own table.
func Schema(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, "CREATE TABLE signup (email text PRIMARY KEY)")
	return err
}

// SignUp records a user and, in the same transaction, pushes their welcome e-mail.
func SignUp(ctx context.Context, tx pgx.Tx, repo *repository.Repository, email string) error {
	if _, err := tx.Exec(ctx, "INSERT INTO signup (email) VALUES ($1)", email); err != nil {
		return err
	}
	_, err := repo.Push(ctx, tx, Topic, repository.Append,
		repository.Creation{Identifier: email, Input: fmt.Sprintf(`{"to": %q}`, email)})
	return err
}

// Welcome is the input of a welcome e-mail.
type Welcome struct {
	To string `json:"to"`
}

// Send is the handler that sends the e-mails.
var Send = processor.Typed(func(ctx context.Context, task repository.Task, w Welcome) repository.Decision {
	if w.To == "" {
		return repository.Skip("no address")
	}
	return repository.Succeed("sent to " + w.To)
})

// NewWorker returns the processor of the welcome topic, logging to logger and exporting
// its metrics on reg.
func NewWorker(pool *pgxpool.Pool, logger *slog.Logger, reg prometheus.Registerer) (*processor.Processor, error) {
	p, err := processor.New(processor.Config{Pool: pool, Logger: logger})
	if err != nil {
		return nil, err
	}
	if _, err := p.Manage(processor.ManagerConfig{Topic: Topic, CreateTopic: true, Handler: Send}); err != nil {
		return nil, err
	}
	if _, err := metrics.Instrument(reg, p); err != nil {
		return nil, err
	}
	return p, nil
}

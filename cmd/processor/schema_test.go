package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

// TestOlderSchemaRefused: a processor started on a schema older than its build (upgraded
// before `pgtask migrate up`) refuses to run, naming both versions, as pgtask's commands
// do: it ran on the older schema, a limited topic's polls the unlimited way.
func TestOlderSchemaRefused(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t, schema.Hash(), repository.Migrate)
	pool, err := connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := repository.MigrateTo(ctx, pool, 30); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--database-url", url, "--topic", "t", "--init", "--exec", "true", "--addr", "", "--migrate=false"}, io.Discard, io.Discard)
	}()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the processor runs on schema 30")
	}
	want := fmt.Sprintf("schema is at version 30 and this processor needs %d: run `pgtask migrate up`", repository.LatestMigration())
	if !errors.Is(err, repository.ErrSchemaMissing) || !strings.Contains(fmt.Sprint(err), want) {
		t.Errorf("run on schema 30: %v; want ErrSchemaMissing saying %q", err, want)
	}
	var topics int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM task_topic WHERE topic = 't'").Scan(&topics); err != nil || topics != 0 {
		t.Errorf("topics named t after the refusal: %d, %v; want none written", topics, err)
	}
}

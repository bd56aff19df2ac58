package repository_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
)

// TestCompleteStoresMessagesAsText: a decision's message with NUL bytes or bytes that
// are not UTF-8 (an error quoting a binary reply), which PostgreSQL's text refuses, is
// stored with U+FFFD in their place, and the decision stands, with the others of the
// same call.
func TestCompleteStoresMessagesAsText(t *testing.T) {
	f := setup(t)
	f.push(repository.Append, "a", "b")
	tasks := f.poll(repository.FIFO, repository.None, 2)
	if len(tasks) != 2 {
		t.Fatalf("polled %d, want 2", len(tasks))
	}
	_, err := f.repo.Complete(f.ctx, f.pool, f.topic,
		tasks[0].Decide(repository.Succeed("bad \x00 and \xff\xfe end")),
		tasks[1].Decide(repository.Succeed("fine é")))
	if err != nil {
		t.Fatalf("complete: %v", err)
	}
	for i, want := range []string{"bad \uFFFD and \uFFFD end", "fine é"} {
		got := f.get(tasks[i].Sequence)
		if got.State != repository.Succeeded || got.Output != want {
			t.Errorf("task %d: %v with output %q, want SUCCEEDED with %q", i, got.State, got.Output, want)
		}
	}
}

// TestLatin1Database: in a database whose encoding is not UTF-8, reached with
// client_encoding UTF8, a push whose input holds a character the encoding cannot hold is
// refused as ErrInvalid (the server's 22P05), and nothing is written, rather than
// failing as a database error a caller (or the processor's completer) would retry.
func TestLatin1Database(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, pgtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	name := fmt.Sprintf("pgtask_latin1_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE template0 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'"); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(pgtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Database = name
	migrator, err := pgxpool.NewWithConfig(ctx, cfg.Copy())
	if err != nil {
		t.Fatal(err)
	}
	// pgx leaves client_encoding to the server, whose default is the database's
	// (LATIN1: UTF-8 bytes then pass as LATIN1 ones, unconverted, as the migrations'
	// comments do); a client that asks for UTF8 has its text converted, and refused
	// where LATIN1 has no such character
	cfg.ConnConfig.RuntimeParams["client_encoding"] = "UTF8"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		migrator.Close()
		conn, err := pgx.Connect(context.Background(), pgtest.AdminURL(t))
		if err == nil {
			_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = conn.Close(context.Background())
		}
	})
	if err := repository.Migrate(ctx, migrator); err != nil {
		t.Fatal(err)
	}
	repo, err := repository.New(repository.Config{Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.CreateTopic(ctx, pool, "t"); err != nil {
		t.Fatal(err)
	}
	_, err = repo.Push(ctx, pool, "t", repository.Append,
		repository.Creation{Identifier: "ok", Input: "café"}, repository.Creation{Identifier: "smile", Input: "🙂"})
	if !errors.Is(err, repository.ErrInvalid) {
		t.Fatalf("push of a character LATIN1 cannot hold: %v, want ErrInvalid", err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM task").Scan(&n); err != nil || n != 0 {
		t.Fatalf("tasks after the refused push: %d, %v; want none", n, err)
	}
}

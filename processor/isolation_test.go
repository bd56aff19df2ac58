package processor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// TestRepeatableReadPoolRefused: a processor on a pool whose sessions begin REPEATABLE
// READ transactions (the database's default_transaction_isolation here) refuses to
// start, naming the setting, and writes nothing; on a pool that sets READ UNCOMMITTED
// itself (which PostgreSQL runs as READ COMMITTED) it runs a limited topic's tasks.
// Before, it started, and its polls failed with serialization errors (40001) or, having
// waited for a limited topic's turn, counted its ACTIVE tasks from a snapshot older
// than the wait.
func TestRepeatableReadPoolRefused(t *testing.T) {
	f := setup(t)
	if _, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.Concurrency = 1 }); err != nil {
		t.Fatal(err)
	}
	f.pushN(3)
	if _, err := f.pool.Exec(f.ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = %L', current_database(), 'repeatable read'); END $$`); err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 3)
	handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
		ran <- struct{}{}
		return repository.Succeed("")
	})
	p, _ := f.processor("rr", processor.Config{}, processor.ManagerConfig{Handler: handler})
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	err := p.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "default_transaction_isolation") || !strings.Contains(err.Error(), "REPEATABLE READ") {
		t.Fatalf("Run on a pool of REPEATABLE READ sessions: %v; want a refusal naming default_transaction_isolation", err)
	}
	if n := len(ran); n != 0 {
		t.Fatalf("%d tasks ran on the refused processor", n)
	}
	var owners int
	if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task_owner WHERE owner = 'rr'").Scan(&owners); err != nil || owners != 0 {
		t.Fatalf("the refused processor's owner rows: %d, %v; want none", owners, err)
	}

	pool, err := pgxpool.New(f.ctx, withParam(f.url, "default_transaction_isolation=read%20uncommitted"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	p, _ = f.processor("rc", processor.Config{Pool: pool}, processor.ManagerConfig{Handler: handler, PauseInterval: 50 * time.Millisecond})
	f.start(p)
	for range 3 {
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatalf("the processor on a READ COMMITTED pool ran %d of 3 tasks in 10 s", len(ran))
		}
	}
}

// withParam adds the query parameter param (key=value) to url.
func withParam(url, param string) string {
	if strings.Contains(url, "?") {
		return url + "&" + param
	}
	return url + "?" + param
}

package dashboard

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

// TestChartCache: the every-topic chart reads its whole window once a minute and, in
// between, the seconds since its last read (and a margin before): what was written then
// shows at once, a tally written late into an older second at the next whole read.
func TestChartCache(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.NewPool(t, schema.Hash(), repository.Migrate)
	repo, err := repository.New(repository.Config{Owner: "chart"})
	if err != nil {
		t.Fatal(err)
	}
	tally := func(topic string, ago time.Duration, pushed int) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO task_tally (topic, second, writer, pushed)
			VALUES ($1, date_trunc('second', now()) - $2 * interval '1 second', 1, $3)`, topic, int(ago/time.Second), pushed); err != nil {
			t.Fatal(err)
		}
	}
	var reads []time.Duration
	fetch := func(ctx context.Context, window time.Duration) ([]repository.Tally, error) {
		reads = append(reads, window)
		return repo.Tallies(ctx, pool, "", window)
	}
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &chartCache{now: func() time.Time { return clock }}
	pushed := func() int64 {
		t.Helper()
		rows, err := c.tallies(ctx, fetch)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != int(chartWindow/time.Second) {
			t.Fatalf("%d seconds, want %d", len(rows), int(chartWindow/time.Second))
		}
		var n int64
		for i, r := range rows {
			if i > 0 && !r.Second.Equal(rows[i-1].Second.Add(time.Second)) {
				t.Fatalf("second %d is %v after %v: not one a second", i, r.Second, rows[i-1].Second)
			}
			n += r.Pushed
		}
		return n
	}
	tally("a", 100*time.Second, 1)
	if n := pushed(); n != 1 || len(reads) != 1 || reads[0] != chartWindow {
		t.Fatalf("first read: %d pushed, reads %v; want 1 from one read of the window", n, reads)
	}
	tally("b", 100*time.Second, 5) // late, into a second read already
	tally("b", 2*time.Second, 7)
	clock = clock.Add(3 * time.Second)
	if n := pushed(); n != 8 || len(reads) != 2 || reads[1] > 30*time.Second {
		t.Fatalf("a refresh 3 s later: %d pushed, reads %v; want 8 (the late tally not yet) from a read of the last seconds", n, reads)
	}
	clock = clock.Add(chartFullEvery)
	if n := pushed(); n != 13 || reads[len(reads)-1] != chartWindow {
		t.Fatalf("a minute later: %d pushed, reads %v; want 13 from a read of the whole window", n, reads)
	}
}

// TestChartCacheReadsWithoutTheLock: while a read of the every-topic chart is under way,
// another page is not held by the cache's lock: it waits for that read, which it
// shares, or returns as soon as its own context ends.
func TestChartCacheReadsWithoutTheLock(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.NewPool(t, schema.Hash(), repository.Migrate)
	repo, err := repository.New(repository.Config{Owner: "chart"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO task_tally (topic, second, writer, pushed)
		VALUES ('a', date_trunc('second', now()) - interval '10 seconds', 1, 3)`); err != nil {
		t.Fatal(err)
	}
	entered, held := make(chan struct{}), make(chan struct{})
	enter, release := sync.OnceFunc(func() { close(entered) }), sync.OnceFunc(func() { close(held) })
	t.Cleanup(release)
	slow := func(ctx context.Context, window time.Duration) ([]repository.Tally, error) {
		enter()
		<-held
		return repo.Tallies(ctx, pool, "", window)
	}
	c := &chartCache{}
	type answer struct {
		rows []repository.Tally
		err  error
	}
	first, shared := make(chan answer, 1), make(chan answer, 1)
	go func() {
		rows, err := c.tallies(ctx, slow)
		first <- answer{rows, err}
	}()
	<-entered
	// a page whose request ended while the read is held up returns at once
	gone, cancel := context.WithCancel(ctx)
	cancel()
	left := make(chan error, 1)
	go func() {
		_, err := c.tallies(gone, func(context.Context, time.Duration) ([]repository.Tally, error) {
			t.Error("a second read began while one was under way")
			return nil, nil
		})
		left <- err
	}()
	select {
	case err := <-left:
		if err == nil {
			t.Error("a page whose context ended got the chart")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a page waited for the cache's lock while another page's read was under way")
	}
	go func() {
		rows, err := c.tallies(ctx, slow) // waits for the read under way, or reads after it
		shared <- answer{rows, err}
	}()
	release()
	for _, ch := range []chan answer{first, shared} {
		a := <-ch
		var pushed int64
		for _, r := range a.rows {
			pushed += r.Pushed
		}
		if a.err != nil || pushed != 3 {
			t.Errorf("chart = %d pushed, %v; want 3", pushed, a.err)
		}
	}
}

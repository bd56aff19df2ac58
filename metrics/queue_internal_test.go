package metrics

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

func TestQueueCollectorTTL(t *testing.T) {
	t.Parallel()
	t.Run("ReadsAgainOnceTTLPassed", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool, repo := collectorDatabase(t, []string{"a"}, nil)
		var (
			mu  sync.Mutex
			now = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		)
		advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
		c := NewQueueCollector(pool, repo, time.Minute).(*queueCollector)
		c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		ready := func() float64 {
			t.Helper()
			for _, m := range collect(t, c) {
				if m.Desc() == depthDesc && labelled(t, m, "state", "READY") {
					return value(t, m)
				}
			}
			t.Fatal("no READY depth")
			return 0
		}

		if got := ready(); got != 0 {
			t.Fatalf("READY = %v, want 0", got)
		}
		if _, err := repo.Push(ctx, pool, "a", repository.Append, repository.Creation{Identifier: "x"}); err != nil {
			t.Fatal(err)
		}
		advance(59 * time.Second)
		if got := ready(); got != 0 {
			t.Errorf("READY 59 s into a 1 min ttl = %v, want the cached 0", got)
		}
		advance(time.Second)
		if got := ready(); got != 1 {
			t.Errorf("READY once the ttl passed = %v, want 1", got)
		}
		if n := testutil.CollectAndCount(c, "pgtask_owners_live"); n != 1 {
			t.Errorf("owners series = %d, want 1", n)
		}
	})
}

// collectorDatabase gives the test its own database with the topics created (those
// named in limited with a concurrency limit of 3), and a repository.
func collectorDatabase(t *testing.T, topics, limited []string) (*pgxpool.Pool, *repository.Repository) {
	t.Helper()
	pool := pgtest.NewPool(t, schema.Hash(), repository.Migrate)
	repo, err := repository.New(repository.Config{Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range topics {
		if _, err := repo.CreateTopic(t.Context(), pool, topic); err != nil {
			t.Fatal(err)
		}
	}
	for _, topic := range limited {
		if _, err := repo.UpdateSettings(t.Context(), pool, topic, func(s *repository.TopicSettings) { s.Concurrency = 3 }); err != nil {
			t.Fatal(err)
		}
	}
	return pool, repo
}

func collect(t *testing.T, c prometheus.Collector) []prometheus.Metric {
	t.Helper()
	ch := make(chan prometheus.Metric, 100)
	c.Collect(ch)
	close(ch)
	var out []prometheus.Metric
	for m := range ch {
		out = append(out, m)
	}
	return out
}

func labelled(t *testing.T, m prometheus.Metric, name, value string) bool {
	t.Helper()
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		t.Fatal(err)
	}
	for _, l := range pb.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetGauge().GetValue()
}

// TestQueueCollectorTopicDestroyedMeanwhile: a limited topic destroyed between the read
// of the stats and that of its limits is left out of the limits' series; the scrape
// does not fail for it.
func TestQueueCollectorTopicDestroyedMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, repo := collectorDatabase(t, []string{"gone", "kept"}, []string{"gone", "kept"})
	c := NewQueueCollector(pool, repo, 0).(*queueCollector)
	c.afterStats = func() {
		if _, err := repo.Destroy(ctx, pool, "gone"); err != nil {
			t.Error(err)
		}
	}
	var limits []string
	for _, m := range collect(t, c) {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatalf("the scrape failed: %v", err)
		}
		if m.Desc() == limitDesc {
			for _, l := range d.GetLabel() {
				if l.GetName() == "topic" {
					limits = append(limits, l.GetValue())
				}
			}
		}
	}
	if len(limits) != 1 || limits[0] != "kept" {
		t.Errorf("limits of %v, want those of kept alone", limits)
	}
}

// TestQueueCollectorScrapesShareARead: scrapes that arrive while a read of the database
// runs take its outcome, a failure too, rather than each reading again after the one
// before it (while the database was slow they queued up, each for up to the read's
// timeout, beyond the scrapers' own).
func TestQueueCollectorScrapesShareARead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, repo := collectorDatabase(t, []string{"a"}, []string{"a"})
	const waiting = 3
	c := NewQueueCollector(pool, repo, 0).(*queueCollector) // ttl 0: a read at every scrape
	arrivals := make(chan struct{}, 100)
	c.now = func() time.Time { arrivals <- struct{}{}; return time.Now() }
	release := make(chan struct{})
	var reads sync.Mutex // held by the first read until the others have arrived
	first := true
	c.afterStats = func() {
		reads.Lock()
		defer reads.Unlock()
		if !first {
			return
		}
		first = false
		<-release
		// the read fails after its stats: its limits' table is gone
		if _, err := pool.Exec(ctx, "ALTER TABLE task_topic RENAME TO task_topic_away"); err != nil {
			t.Error(err)
		}
	}
	scrape := func() error {
		for _, m := range collect(t, c) {
			var d dto.Metric
			if err := m.Write(&d); err != nil {
				return err
			}
		}
		return nil
	}
	arrived := func() {
		t.Helper()
		select {
		case <-arrivals:
		case <-time.After(30 * time.Second):
			close(release)
			t.Fatal("a scrape did not take the time of its arrival within 30 s")
		}
	}
	errs := make(chan error, waiting+1)
	go func() { errs <- scrape() }()
	arrived() // the first scrape's arrival; it reads
	for range waiting {
		go func() { errs <- scrape() }()
	}
	for range waiting {
		arrived() // each has arrived and waits for the read
	}
	close(release)
	var got []string
	for range waiting + 1 {
		err := <-errs
		if err == nil {
			t.Fatal("a scrape succeeded; want each to fail with the read")
		}
		got = append(got, err.Error())
	}
	for _, e := range got[1:] {
		if e != got[0] {
			t.Errorf("the scrapes' errors differ; want the one read's for all:\n%s", strings.Join(got, "\n"))
			break
		}
	}
	if _, err := pool.Exec(ctx, "ALTER TABLE task_topic_away RENAME TO task_topic"); err != nil {
		t.Fatal(err)
	}
	// a scrape after the read ended reads again
	if err := scrape(); err != nil {
		t.Errorf("a scrape after the failed read: %v, want a read of its own, which succeeds", err)
	}
}

// TestQueueCollectorReadsBesideAFullPool: with every connection of the pool held (a
// processor whose handlers use its pool for long work), a scrape waited its 8 s for one
// and failed, the process's own series with it. It reads over a connection of its own.
func TestQueueCollectorReadsBesideAFullPool(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	shared, repo := collectorDatabase(t, []string{"a"}, nil)
	if _, err := repo.Push(ctx, shared, "a", repository.Append, repository.Creation{Identifier: "x"}); err != nil {
		t.Fatal(err)
	}
	config := shared.Config()
	config.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, config)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for range config.MaxConns {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
	}
	c := NewQueueCollector(pool, repo, 0).(*queueCollector)
	var ready float64 = -1
	for _, m := range collect(t, c) {
		if m.Desc() == depthDesc && labelled(t, m, "state", "READY") {
			ready = value(t, m)
		}
	}
	if ready != 1 {
		t.Fatalf("READY = %v beside a pool whose connections are all held (err: %v), want 1", ready, c.failed)
	}
	if s := pool.Stat(); s.TotalConns() != config.MaxConns {
		t.Errorf("the pool holds %d connections after the read, want its %d", s.TotalConns(), config.MaxConns)
	}
}

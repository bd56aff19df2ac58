package bench

import (
	"testing"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestReadyCountsEveryTask: the READY tasks a burn-down waits for are counted exactly,
// beyond the 100 000 at which Stats stops (a burn-down of 200 000 tasks waited for the
// first 100 000, then divided all 200 000 by that time).
func TestReadyCountsEveryTask(t *testing.T) {
	pool := pgtest.NewPool(t, schema.Hash(), repository.Migrate)
	repo, err := repository.New(repository.Config{Owner: "bench-ready"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100_005
	topics := []string{"a", "b"}
	for _, topic := range topics {
		if _, err := repo.CreateTopic(t.Context(), pool, topic); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(t.Context(), `SELECT count(*) FROM task_push_batch('a', ARRAY(SELECT 'i' || g FROM generate_series(1, $1::int) g))`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `SELECT count(*) FROM task_push_batch('b', ARRAY['x', 'y'])`); err != nil {
		t.Fatal(err)
	}
	r := &benchRun{pool: pool, repo: repo, topic: topics[0], topics: topics}
	if got, err := r.ready(t.Context()); err != nil || got != n+2 {
		t.Fatalf("ready = %d, %v; want %d", got, err, n+2)
	}
}

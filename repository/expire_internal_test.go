package repository

import (
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/sql/schema"
)

// TestExpireSparesAnOwnerRegisteredMeanwhile: an owner that registers and leases while
// another process expires the leases of a stale one keeps its leases. On Citus the
// expiry reads the owners first and takes back topic by topic (expireCitus): the owner
// registers and leases between the two (testHookExpireCitus). Before migration 000045
// the expiry took every lease of an owner outside the live list read first: the new
// owner's lease was taken back, its task run twice. On plain PostgreSQL the expiry is
// one statement and the hook never runs: the outcome is the same.
func TestExpireSparesAnOwnerRegisteredMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, schema.Hash(), migrateDistributing)
	repo := func(owner string, ahead time.Duration) *Repository {
		t.Helper()
		r, err := New(Config{Owner: owner, Now: func() time.Time { return time.Now().Add(ahead) }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Register(ctx, pool); err != nil {
			t.Fatal(err)
		}
		return r
	}
	expirer := repo("expirer", 0)
	if _, err := expirer.CreateTopic(ctx, pool, "topic"); err != nil {
		t.Fatal(err)
	}
	if _, err := expirer.Push(ctx, pool, "topic", Append, Creation{Identifier: "stale"}, Creation{Identifier: "new"}); err != nil {
		t.Fatal(err)
	}
	lease := func(r *Repository) int64 {
		t.Helper()
		got, err := r.Poll(ctx, pool, "topic", FIFO, None, 1)
		if err != nil || len(got) != 1 {
			t.Fatalf("poll as %s: %v, %v", r.owner, got, err)
		}
		return got[0].Sequence
	}
	stale := lease(repo("stale", -10*time.Minute)) // its heartbeat 10 minutes ago
	var fresh int64
	hooked := false
	testHookExpireCitus = func() {
		hooked = true
		fresh = lease(repo("newcomer", 0))
	}
	t.Cleanup(func() { testHookExpireCitus = nil })
	got, err := expirer.ExpireStale(ctx, pool, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if hooked != pgtest.OnCitus() {
		t.Fatalf("the hook ran: %v, on Citus: %v", hooked, pgtest.OnCitus())
	}
	if !hooked {
		fresh = lease(repo("newcomer", 0))
	}
	if len(got) != 1 || got[0].Expired != 1 || got[0].Retried != 1 {
		t.Errorf("expiry = %+v, want the stale owner's one lease, retried", got)
	}
	for _, c := range []struct {
		sequence int64
		state    State
		owner    string
	}{{stale, Ready, ""}, {fresh, Active, "newcomer"}} {
		task, err := expirer.Get(ctx, pool, "topic", c.sequence)
		if err != nil {
			t.Fatal(err)
		}
		if task.State != c.state || (c.owner != "" && task.Owner != c.owner) {
			t.Errorf("task %d is %v owned by %q, want %v %s", c.sequence, task.State, task.Owner, c.state, c.owner)
		}
	}
}

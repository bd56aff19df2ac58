package repository

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/sql/schema"
)

// TestExpireSparesAnOwnerRegisteredMeanwhile: an owner that registers and leases while
// another process expires the leases of a stale one keeps its leases; so does a stale
// owner that comes back under its name (a pod's) and leases again. On Citus the expiry
// reads the owners first and takes back topic by topic (expireCitus): the owner
// registers and leases in between (Repository.expireHook). Before migration 000045 the
// expiry took every lease of an owner outside the live list read first: the newcomer's
// lease was taken back, its task run twice; and an owner found stale first lost what it
// leased once back. On plain PostgreSQL the expiry is one statement and the hook never
// runs: the owner registers and leases before it, and the outcome is the same.
func TestExpireSparesAnOwnerRegisteredMeanwhile(t *testing.T) {
	for _, tc := range []struct {
		name, comer string // the owner that registers and leases meanwhile
		taken       bool   // whether the stale owner's lease is taken back
	}{
		{"Newcomer", "newcomer", true},
		{"StaleOwnerBack", "pod-0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := pgtest.NewPool(t, schema.Hash(), migrateDistributing)
			repo := func(owner string, ahead time.Duration) *Repository {
				t.Helper()
				r, err := New(Config{Owner: owner, Now: func() time.Time { return time.Now().Add(ahead) }})
				if err != nil {
					t.Fatal(err)
				}
				// registered, and heart-beating now (a process that comes back under
				// its name claims its row so)
				if _, err := r.Register(ctx, pool); err != nil {
					t.Fatal(err)
				}
				if err := r.Heartbeat(ctx, pool); err != nil {
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
			stale := lease(repo("pod-0", -10*time.Minute)) // its heartbeat 10 minutes ago
			var fresh int64
			comes := func() { fresh = lease(repo(tc.comer, 0)) }
			hooked := false
			expirer.expireHook = func() {
				if !hooked {
					hooked = true
					comes()
				}
			}
			if !pgtest.OnCitus() {
				comes()
			}
			got, err := expirer.ExpireStale(ctx, pool, 5*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if hooked != pgtest.OnCitus() {
				t.Fatalf("the hook ran: %v, on Citus: %v", hooked, pgtest.OnCitus())
			}
			want := 0
			if tc.taken {
				want = 1
			}
			if n := len(got); n != want || (n == 1 && (got[0].Expired != 1 || got[0].Retried != 1)) {
				t.Errorf("expiry = %+v, want %d lease taken back and retried", got, want)
			}
			staleState := Active
			if tc.taken {
				staleState = Ready
			}
			for _, c := range []struct {
				sequence int64
				state    State
			}{{stale, staleState}, {fresh, Active}} {
				task, err := expirer.Get(ctx, pool, "topic", c.sequence)
				if err != nil {
					t.Fatal(err)
				}
				owner := tc.comer // the fresh lease's
				if c.sequence == stale {
					owner = "pod-0"
				}
				if task.State != c.state || (c.state == Active && task.Owner != owner) {
					t.Errorf("task %d is %v owned by %q, want %v", c.sequence, task.State, task.Owner, c.state)
				}
			}
		})
	}
}

// TestExpireWhileClaiming: two processes start at once under the names of two dead
// ones, as a processor starts (processor.registerAtStart): each, in a transaction,
// claims its row (ClaimOwner: the heartbeat set far in the past), takes the leases of
// the stale owners back under another name, and heart-beats. Each finds the other's row
// stale in its snapshot: neither waits for the other, and both earlier processes' leases
// are taken back, each by the process that claimed its name (on Citus a row a claim
// holds is passed over by the other, SKIP LOCKED). A lock of the whole of task_owner on
// Citus, taken after the claim's row lock, deadlocked the two (40P01), and one process
// failed to start.
func TestExpireWhileClaiming(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, schema.Hash(), migrateDistributing)
	setupRepo, err := New(Config{Owner: "setup"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := setupRepo.CreateTopic(ctx, pool, "topic"); err != nil {
		t.Fatal(err)
	}
	if _, err := setupRepo.Push(ctx, pool, "topic", Append, Creation{Identifier: "a"}, Creation{Identifier: "b"}); err != nil {
		t.Fatal(err)
	}
	pods := make([]*Repository, 2)
	seen := make([]time.Time, 2)
	var leased []int64
	for i := range pods {
		old, err := New(Config{Owner: fmt.Sprint("pod-", i), Now: func() time.Time { return time.Now().Add(-10 * time.Minute) }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := old.Register(ctx, pool); err != nil {
			t.Fatal(err)
		}
		got, err := old.Poll(ctx, pool, "topic", FIFO, None, 1)
		if err != nil || len(got) != 1 {
			t.Fatalf("poll as %s: %v, %v", old.owner, got, err)
		}
		leased = append(leased, got[0].Sequence)
		if pods[i], err = New(Config{Owner: old.owner}); err != nil {
			t.Fatal(err)
		}
		o, _, err := pods[i].RegisteredOwner(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		seen[i] = o.Heartbeat
	}
	txs := make([]pgx.Tx, 2)
	for i, p := range pods {
		if txs[i], err = pool.Begin(ctx); err != nil {
			t.Fatal(err)
		}
		defer txs[i].Rollback(ctx)
		if claimed, err := p.ClaimOwner(ctx, txs[i], seen[i]); err != nil || !claimed {
			t.Fatalf("claim %s: %v, %v", p.owner, claimed, err)
		}
	}
	errs := make(chan error, 2)
	for i, p := range pods {
		go func() {
			expirer, err := New(Config{})
			if err == nil {
				_, err = expirer.Expire(ctx, txs[i], 5*time.Minute)
			}
			if err == nil {
				err = p.Heartbeat(ctx, txs[i])
			}
			errs <- err
		}()
	}
	for range pods {
		select {
		case err := <-errs:
			if err != nil {
				t.Errorf("expiry while claiming: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the two expiries wait for each other")
		}
	}
	for _, tx := range txs {
		if err := tx.Commit(ctx); err != nil {
			t.Errorf("commit: %v", err)
		}
	}
	for _, seq := range leased {
		if task, err := setupRepo.Get(ctx, pool, "topic", seq); err != nil || task.State != Ready {
			t.Errorf("the earlier process's task %d after both starts: %v (%v), want READY (taken back)", seq, task.State, err)
		}
	}
}

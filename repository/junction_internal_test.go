package repository

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/sql/schema"
)

// TestJunctionOnAPoolIsAllOrNothing: a junction called on a pool runs in a transaction
// of its own, so that an error after the release (here injected where, on Citus, the
// statement of its notification runs: junctionWorkOnCitus) takes the release back. Each
// statement committed alone: the junction answered an error for a task it had
// released, and a retry found nothing left to release.
func TestJunctionOnAPoolIsAllOrNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, schema.Hash(), migrateDistributing)
	r, err := New(Config{Owner: "junction"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateTopic(ctx, pool, "topic"); err != nil {
		t.Fatal(err)
	}
	pushed, err := r.Push(ctx, pool, "topic", Append, Creation{Identifier: "a", Suspended: true})
	if err != nil {
		t.Fatal(err)
	}
	seq := pushed[0].Sequence
	injected := errors.New("injected after the release")
	r.junctionHook = func() error { return injected }
	if released, err := r.Junction(ctx, pool, "topic", Singular, []string{"a"}); !errors.Is(err, injected) || released != nil {
		t.Fatalf("junction with an error after the release: %v, %v; want the error and nothing released", released, err)
	}
	if got, err := r.Get(ctx, pool, "topic", seq); err != nil || got.State != Suspended {
		t.Fatalf("task after the failed junction: %v, %v; want SUSPENDED still", got.State, err)
	}
	r.junctionHook = nil
	released, err := r.Junction(ctx, pool, "topic", Singular, []string{"a"})
	if err != nil || !slices.Equal(released, []string{"a"}) {
		t.Fatalf("junction retried: %v, %v; want a released", released, err)
	}
	if got, err := r.Get(ctx, pool, "topic", seq); err != nil || got.State != Ready {
		t.Fatalf("task after the junction: %v, %v; want READY", got.State, err)
	}
}

// TestAnOperationOnADoneContextKeepsTheCallersConnection: an operation of several
// statements given the caller's connection outside a transaction, with a context
// already done, fails with the context's error and leaves the connection usable: pgx
// closes a connection whose BEGIN its context interrupted.
func TestAnOperationOnADoneContextKeepsTheCallersConnection(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, schema.Hash(), migrateDistributing)
	r, err := New(Config{Owner: "done"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateTopic(t.Context(), pool, "topic"); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	done, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := r.Junction(done, conn, "topic", Singular, []string{"a"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("junction on a done context: %v, want context.Canceled", err)
	}
	if err := conn.Ping(t.Context()); err != nil {
		t.Fatalf("the caller's connection after an operation on a done context: %v", err)
	}
}

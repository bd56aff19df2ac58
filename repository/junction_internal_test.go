package repository

import (
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

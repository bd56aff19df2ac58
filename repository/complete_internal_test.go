package repository

import (
	"testing"

	"github.com/pgtask/pgtask/db"
	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/sql/schema"
)

// TestCompleteLean checks the parts of a lean completion: Task.Decide makes the
// completion carry the leased task's columns, TaskComplete with lean leaves exactly those
// columns out of its rows, and Complete, given only completions from Decide, reports the
// columns they carry rather than reading them back
// (TestCompleteReturnsTheTasksAsStored checks that the result is the stored row).
func TestCompleteLean(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, schema.Hash(), Migrate)
	r, err := New(Config{Owner: "lean-owner"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateTopic(ctx, pool, "lean"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.RegisterOwner(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Push(ctx, pool, "lean", Append, Creation{Identifier: "a", Input: "in", Reference: "ref"}); err != nil {
		t.Fatal(err)
	}
	leased, err := r.Poll(ctx, pool, "lean", FIFO, None, 1)
	if err != nil || len(leased) != 1 {
		t.Fatalf("poll = %v, %v", leased, err)
	}
	c := leased[0].Decide(Succeed("ok"))
	if !c.leased || c.identifier != "a" || c.input != "in" || c.reference != "ref" {
		t.Errorf("Decide = %+v, want the leased task's identifier, input and reference", c)
	}
	rows, err := r.q.TaskComplete(ctx, pool, db.TaskCompleteParams{
		Sequences: []int64{c.Sequence}, Attempts: []int32{c.Attempt}, Results: []int16{int16(Success)},
		Outputs: []string{"ok"}, DelaysMs: []int64{0}, Topic: "lean", Owner: r.owner, Lean: true,
	})
	if err != nil || len(rows) != 1 {
		t.Fatalf("TaskComplete = %+v, %v", rows, err)
	}
	row := rows[0]
	if row.Topic != "" || row.Identifier != "" || row.Owner != nil || row.Input != nil || row.Reference != nil {
		t.Errorf("lean row %+v carries columns the caller has", row)
	}
	if row.Sequence != c.Sequence || row.State != int16(Succeeded) || row.Output == nil || *row.Output != "ok" ||
		row.Attempt != c.Attempt || row.Completed == nil {
		t.Errorf("lean row %+v lacks what the completion wrote", row)
	}

	// Complete: a completion from Decide whose carried input differs from the stored one
	// shows which of the two Complete reports; the same lease built by hand makes it read
	// the row back.
	if _, err := r.Push(ctx, pool, "lean", Append, Creation{Identifier: "b", Input: "stored"},
		Creation{Identifier: "c", Input: "stored"}); err != nil {
		t.Fatal(err)
	}
	for _, byHand := range []bool{false, true} {
		leased, err := r.Poll(ctx, pool, "lean", FIFO, None, 1)
		if err != nil || len(leased) != 1 {
			t.Fatalf("poll = %v, %v", leased, err)
		}
		completion := leased[0].Decide(Succeed("ok"))
		completion.input = "carried"
		want := "carried"
		if byHand {
			completion = Completion{Sequence: completion.Sequence, Attempt: completion.Attempt, Decision: completion.Decision}
			want = "stored"
		}
		done, err := r.Complete(ctx, pool, "lean", completion)
		if err != nil || len(done) != 1 {
			t.Fatalf("complete = %v, %v", done, err)
		}
		if done[0].Input != want {
			t.Errorf("by hand %v: Complete reported input %q, want %q", byHand, done[0].Input, want)
		}
	}
}

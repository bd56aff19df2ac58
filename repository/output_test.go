package repository_test

import (
	"testing"

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

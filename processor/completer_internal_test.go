package processor

import (
	"errors"
	"fmt"
	"testing"

	"github.com/pgtask/pgtask/repository"
)

// TestRefusalsAfterAnUnknownOutcome: how a refusal of decisions retried after an
// attempt whose outcome is unknown is read. Tasks refused although the re-read found
// them still ACTIVE under the owner in the attempt decided ("changed concurrently")
// raced a change: they are committed again, and never taken for the mark of an earlier
// commit, which would leave them ACTIVE under a live owner for ever.
func TestRefusalsAfterAnUnknownOutcome(t *testing.T) {
	reports := []*report{{completions: []repository.Completion{
		{Sequence: 1, Attempt: 2, Decision: repository.Succeed("")},
		{Sequence: 2, Attempt: 1, Decision: repository.Succeed("")},
	}}}
	problem := func(seq int64, err error, state repository.State, attempt int32) repository.TaskProblem {
		return repository.TaskProblem{Sequence: seq, Err: err, State: state, Attempt: attempt}
	}
	refusal := func(problems ...repository.TaskProblem) error {
		return fmt.Errorf("complete: %w", &repository.TaskError{Op: "complete", Topic: "t", Problems: problems})
	}
	for _, tc := range []struct {
		name             string
		err              error
		raced, committed bool
	}{
		{"ChangedConcurrently", refusal(problem(1, repository.ErrNotOwned, repository.Active, 2),
			problem(2, repository.ErrNotOwned, repository.Active, 1)), true, false},
		{"Succeeded", refusal(problem(1, repository.ErrWrongState, repository.Succeeded, 2),
			problem(2, repository.ErrWrongState, repository.Succeeded, 1)), false, true},
		// one still ACTIVE in the attempt decided: the decisions are all or nothing
		{"OneStillActive", refusal(problem(1, repository.ErrWrongState, repository.Succeeded, 2),
			problem(2, repository.ErrNotOwned, repository.Active, 1)), false, false},
		// leased again since (another attempt): not raced
		{"LeasedAgain", refusal(problem(1, repository.ErrNotOwned, repository.Active, 3),
			problem(2, repository.ErrNotOwned, repository.Active, 2)), false, false},
		{"UnknownTask", refusal(problem(1, repository.ErrUnknownTask, 0, 0),
			problem(2, repository.ErrUnknownTask, 0, 0)), false, false},
		{"NotARefusal", errors.New("connection reset"), false, false},
		{"None", nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := raced(tc.err, reports); got != tc.raced {
				t.Errorf("raced = %v, want %v", got, tc.raced)
			}
			if got := committedBefore(tc.err, reports); got != tc.committed {
				t.Errorf("committedBefore = %v, want %v", got, tc.committed)
			}
		})
	}
}

package repository_test

import (
	"slices"
	"testing"

	"github.com/pgtask/pgtask/repository"
)

func TestLifecycle(t *testing.T) {
	t.Run("PushPollComplete", func(t *testing.T) {
		f := setup(t)
		pushed := f.push(repository.Append, "foo", "bar", "foo")
		if got := sequences(pushed); !slices.Equal(got, []int64{1, 2, 3}) {
			t.Fatalf("pushed sequences = %v, want [1 2 3]", got)
		}
		polled := f.poll(repository.FIFO, repository.SingularByIdentifier, 10)
		if got := sequences(polled); !slices.Equal(got, []int64{1, 2}) {
			t.Fatalf("polled = %v, want [1 2]", got)
		}
		if again := f.poll(repository.FIFO, repository.SingularByIdentifier, 10); len(again) != 0 {
			t.Fatalf("second poll = %v, want nothing while foo@1 is ACTIVE", sequences(again))
		}
		done := f.complete(repository.Succeed("ok"), polled[0])
		if done[0].State != repository.Succeeded || done[0].Descent != repository.Ready || done[0].Output != "ok" {
			t.Fatalf("completed = %+v", done[0])
		}
		if next := f.poll(repository.FIFO, repository.SingularByIdentifier, 10); !slices.Equal(sequences(next), []int64{3}) {
			t.Fatalf("third poll = %v, want [3]", sequences(next))
		}
	})
}

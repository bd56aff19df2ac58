package repository_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pgtask/pgtask/repository"
)

// The two tables of the design (§4.2 insertion, §4.3 condition), cell by cell. Cells share
// one database per table and each gets its own topic, so they stay independent (poll
// and push act on one topic) while the test stays fast.

// onTopic returns a copy of f bound to the subtest t and to a freshly initialized topic.
func onTopic(t *testing.T, f *fixture, topic string) *fixture {
	t.Helper()
	g := *f
	g.t, g.ctx, g.topic = t, t.Context(), topic
	g.createTopic(topic)
	return &g
}

// ghost returns a repository whose owner row says its last heartbeat was a day ago: the
// leases it takes are stale at once for any Expire with a timeout below a day.
func ghost(f *fixture) *repository.Repository {
	f.t.Helper()
	repo, err := repository.New(repository.Config{Owner: "ghost", Now: func() time.Time { return time.Now().Add(-24 * time.Hour) }})
	if err != nil {
		f.t.Fatalf("new ghost repository: %v", err)
	}
	if _, err := repo.RegisterOwner(f.ctx, f.pool); err != nil {
		f.t.Fatalf("register ghost: %v", err)
	}
	return repo
}

// pollNewest leases the newest READY task of f's topic with repo and checks it is want.
func pollNewest(f *fixture, repo *repository.Repository, want int64) repository.Task {
	f.t.Helper()
	got, err := repo.Poll(f.ctx, f.pool, f.topic, repository.LIFO, repository.None, 1)
	if err != nil {
		f.t.Fatalf("poll: %v", err)
	}
	if len(got) != 1 || got[0].Sequence != want {
		f.t.Fatalf("poll newest = %v, want [%d]", sequences(got), want)
	}
	return got[0]
}

// driveTo pushes a task of identifier id and takes it into state by the operations a user
// would run, and returns it as stored. ACTIVE leases belong to f.repo ("owner-1"), whose
// leases no Expire in a shared database takes back; EXPIRED goes through a ghost owner's
// lease.
func driveTo(f *fixture, id string, state repository.State) repository.Task {
	f.t.Helper()
	task := f.push(repository.Append, id)[0]
	complete := func(d repository.Decision) {
		f.complete(d, pollNewest(f, f.repo, task.Sequence))
	}
	switch state {
	case repository.Active:
		pollNewest(f, f.repo, task.Sequence)
	case repository.Ready:
	case repository.Expired:
		pollNewest(f, ghost(f), task.Sequence)
		// Expire skips rows locked by a concurrent Expire (of another cell sharing the
		// database), which then expires this one too: try until that has committed.
		for range 100 {
			if _, err := f.repo.Expire(f.ctx, f.pool, time.Hour); err != nil {
				f.t.Fatalf("expire: %v", err)
			}
			if f.get(task.Sequence).State != repository.Active {
				break
			}
			time.Sleep(10 * time.Millisecond) // a loaded machine: let the other commit
		}
	case repository.Failed:
		complete(repository.Fail(errors.New("boom")))
	case repository.Suspended:
		complete(repository.Suspend("wait"))
	case repository.Filtered:
		complete(repository.Skip("irrelevant"))
	case repository.Succeeded:
		complete(repository.Succeed("done"))
	case repository.Recreated:
		// Recreate also pushes a READY copy of the same identifier; the cells look only at
		// the RECREATED row.
		complete(repository.Succeed("done"))
		if _, err := f.repo.Recreate(f.ctx, f.pool, f.topic, repository.RecreateAppend, task.Sequence); err != nil {
			f.t.Fatalf("recreate: %v", err)
		}
	case repository.Redundant:
		if _, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "test", task.Sequence); err != nil {
			f.t.Fatalf("cancel: %v", err)
		}
	default:
		f.t.Fatalf("driveTo: unknown state %v", state)
	}
	got := f.get(task.Sequence)
	if got.State != state {
		f.t.Fatalf("driveTo %v: task is %v", state, got.State)
	}
	return got
}

// effect is what a push does to an older task.
type effect int

const (
	kept effect = iota
	madeRedundant
	deleted
)

func (e effect) String() string { return [...]string{"kept", "REDUNDANT", "deleted"}[e] }

func TestInsertionMatrix(t *testing.T) {
	f := setup(t)
	// Design §4.2, column order as there: APPEND, SUPERSEDE, REPLACE, DELETE.
	matrix := []struct {
		older                              repository.State
		append, supersede, replace, delete effect
	}{
		{repository.Active, kept, kept, kept, kept},
		{repository.Ready, kept, madeRedundant, madeRedundant, deleted},
		{repository.Expired, kept, kept, madeRedundant, deleted},
		{repository.Failed, kept, kept, madeRedundant, deleted},
		{repository.Suspended, kept, kept, madeRedundant, deleted},
		{repository.Filtered, kept, kept, madeRedundant, deleted},
		{repository.Succeeded, kept, kept, madeRedundant, deleted},
		{repository.Recreated, kept, kept, kept, deleted},
		{repository.Redundant, kept, kept, kept, deleted},
	}
	// An Expire (driveTo EXPIRED) whose snapshot predates another cell's expiry of that
	// cell's task may lock the EXPIRED row on its way (a row lock taken on the latest
	// version stays when the recheck fails), and a push skips older rows locked by a
	// concurrent transaction: the cells of EXPIRED older tasks run one at a time.
	var expiring sync.Mutex
	for _, row := range matrix {
		for _, cell := range []struct {
			insertion repository.Insertion
			want      effect
		}{
			{repository.Append, row.append},
			{repository.Supersede, row.supersede},
			{repository.Replace, row.replace},
			{repository.Delete, row.delete},
		} {
			name := fmt.Sprintf("%vLeaves%v/%v", cell.insertion, row.older, cell.want)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				c := onTopic(t, f, fmt.Sprintf("insert-%v-%v", row.older, cell.insertion))
				if row.older == repository.Expired {
					expiring.Lock()
					defer expiring.Unlock()
				}
				older := driveTo(c, "x", row.older)
				pushed := c.push(cell.insertion, "x")
				if len(pushed) != 1 || pushed[0].State != repository.Ready || pushed[0].Sequence <= older.Sequence {
					t.Fatalf("pushed %+v, want one newer READY task", pushed)
				}
				got, err := c.repo.Get(c.ctx, c.pool, c.topic, older.Sequence)
				switch cell.want {
				case deleted:
					if !errors.Is(err, repository.ErrUnknownTask) {
						t.Fatalf("older task: got %v/%v err %v, want it deleted", got.State, got.Descent, err)
					}
					return
				case kept:
					if err != nil || got.State != older.State || got.Descent != older.Descent {
						t.Fatalf("older task: got %v/%v err %v, want kept as %v/%v", got.State, got.Descent, err, older.State, older.Descent)
					}
				case madeRedundant:
					wantDescent := max(older.State, older.Descent)
					if err != nil || got.State != repository.Redundant || got.Descent != wantDescent {
						t.Fatalf("older task: got %v/%v err %v, want REDUNDANT/%v", got.State, got.Descent, err, wantDescent)
					}
				}
			})
		}
	}
}

func TestInsertionDuplicatesInBatch(t *testing.T) {
	f := setup(t)
	type want struct {
		identifier string
		state      repository.State
	}
	allButLastRedundant := []want{{"a", repository.Redundant}, {"b", repository.Ready}, {"a", repository.Redundant}, {"a", repository.Ready}}
	for _, tc := range []struct {
		name      string
		insertion repository.Insertion
		want      []want
	}{
		{"AppendInsertsAll", repository.Append, []want{{"a", repository.Ready}, {"b", repository.Ready}, {"a", repository.Ready}, {"a", repository.Ready}}},
		{"ReplaceInsertsEarlierOccurrencesRedundant", repository.Replace, allButLastRedundant},
		{"SupersedeInsertsEarlierOccurrencesRedundant", repository.Supersede, allButLastRedundant},
		{"DeleteInsertsOnlyLastOccurrence", repository.Delete, []want{{"b", repository.Ready}, {"a", repository.Ready}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := onTopic(t, f, "dup-"+tc.insertion.String())
			pushed := c.push(tc.insertion, "a", "b", "a", "a")
			if len(pushed) != len(tc.want) {
				t.Fatalf("pushed %d tasks, want %d", len(pushed), len(tc.want))
			}
			for i, w := range tc.want {
				p := pushed[i]
				if i > 0 && p.Sequence <= pushed[i-1].Sequence {
					t.Errorf("sequences %v are not ascending in input order", sequences(pushed))
				}
				stored := c.get(p.Sequence)
				if p.Identifier != w.identifier || p.State != w.state || stored.State != w.state || stored.Descent != repository.Ready {
					t.Errorf("task %d: returned %s %v, stored %v/%v; want %s %v/READY",
						i, p.Identifier, p.State, stored.State, stored.Descent, w.identifier, w.state)
				}
			}
		})
	}
}

// conditionCase is one row of the condition matrix: the other task of the candidate's
// identifier, and for each condition (NONE, SINGULAR, SUSPEND_ON_FAILURE,
// SUSPEND_UNTIL_SUCCESS) whether the candidate is polled, per order.
type conditionCase struct {
	other      repository.State
	newer      bool // the other task was pushed after the candidate
	fifo, lifo [4]bool
}

func (c conditionCase) name() string {
	if c.newer {
		return c.other.String() + "Newer"
	}
	return c.other.String() + "Older"
}

var conditionMatrix = []conditionCase{
	// ACTIVE: excluded by any SINGULAR condition wherever it is (at most one task per
	// identifier in flight: migration 000043). READY: when older (FIFO) / newer (LIFO).
	{other: repository.Active, newer: false, fifo: [4]bool{true, false, false, false}, lifo: [4]bool{true, false, false, false}},
	{other: repository.Ready, newer: false, fifo: [4]bool{true, false, false, false}, lifo: [4]bool{true, true, true, true}},
	{other: repository.Active, newer: true, fifo: [4]bool{true, false, false, false}, lifo: [4]bool{true, false, false, false}},
	{other: repository.Ready, newer: true, fifo: [4]bool{true, true, true, true}, lifo: [4]bool{true, false, false, false}},
	// EXPIRED or FAILED anywhere: excluded by SUSPEND_ON_FAILURE and SUSPEND_UNTIL_SUCCESS.
	{other: repository.Expired, newer: false, fifo: [4]bool{true, true, false, false}, lifo: [4]bool{true, true, false, false}},
	{other: repository.Expired, newer: true, fifo: [4]bool{true, true, false, false}, lifo: [4]bool{true, true, false, false}},
	{other: repository.Failed, newer: false, fifo: [4]bool{true, true, false, false}, lifo: [4]bool{true, true, false, false}},
	{other: repository.Failed, newer: true, fifo: [4]bool{true, true, false, false}, lifo: [4]bool{true, true, false, false}},
	// SUSPENDED anywhere: excluded by SUSPEND_UNTIL_SUCCESS only.
	{other: repository.Suspended, newer: false, fifo: [4]bool{true, true, true, false}, lifo: [4]bool{true, true, true, false}},
	{other: repository.Suspended, newer: true, fifo: [4]bool{true, true, true, false}, lifo: [4]bool{true, true, true, false}},
}

var conditions = []repository.Condition{
	repository.None, repository.SingularByIdentifier,
	repository.SingularByIdentifierSuspendOnFailure, repository.SingularByIdentifierSuspendUntilSuccess,
}

// candidateWith pushes the candidate "x" to c's topic, and an other task of identifier
// "x" in state to otherTopic (c itself, or a fixture of another topic), older or newer
// than the candidate. It returns the candidate.
func candidateWith(c, otherTopic *fixture, state repository.State, newer bool) repository.Task {
	c.t.Helper()
	if !newer {
		driveTo(otherTopic, "x", state)
	}
	candidate := c.push(repository.Append, "x")[0]
	if newer {
		driveTo(otherTopic, "x", state)
	}
	return candidate
}

func TestConditionMatrix(t *testing.T) {
	conditionMatrixOn(t, setup(t), "cond", nil, nil)
}

// TestConditionMatrixByKey runs the matrix on fair topics, which a poll takes key by key
// (task_poll_keyed, with a statement of its own per candidate on Citus): the conditions
// hold there as they do in poll order, for tasks pushed once the topic was fair (their
// key is ”) and for tasks pushed before (no key: the turn of tasks without one).
func TestConditionMatrixByKey(t *testing.T) {
	fair := func(c *fixture) { c.limit(repository.TopicSettings{Fair: true}) }
	f := setup(t)
	conditionMatrixOn(t, f, "keyed", fair, nil)
	conditionMatrixOn(t, f, "keyless", nil, fair)
}

// conditionMatrixOn checks every row of the matrix in topics of f's database named after
// prefix, each set up by before (when not nil) before its tasks are pushed and by after
// once they are.
func conditionMatrixOn(t *testing.T, f *fixture, prefix string, before, after func(*fixture)) {
	for _, row := range conditionMatrix {
		for _, order := range []repository.Order{repository.FIFO, repository.LIFO} {
			want := row.fifo
			if order == repository.LIFO {
				want = row.lifo
			}
			for i, condition := range conditions {
				verb := "Polls"
				if !want[i] {
					verb = "Excludes"
				}
				name := fmt.Sprintf("%s/%v/%v/%sCandidateWith%s", prefix, order, condition, verb, row.name())
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					c := onTopic(t, f, fmt.Sprintf("%s-%v-%v-%s", prefix, order, condition, row.name()))
					if before != nil {
						before(c)
					}
					candidate := candidateWith(c, c, row.other, row.newer)
					if after != nil {
						after(c)
					}
					polled := c.poll(order, condition, 10)
					if got := slices.Contains(sequences(polled), candidate.Sequence); got != want[i] {
						t.Fatalf("candidate %d polled = %v, want %v (polled %v)", candidate.Sequence, got, want[i], sequences(polled))
					}
				})
			}
		}
	}
}

func TestConditionIgnoresOtherTopics(t *testing.T) {
	f := setup(t)
	// Every row of the matrix, with the other task moved to another topic and polled in
	// the order under which that row excludes in its own topic, by the strictest
	// condition: the same identifier elsewhere never holds a candidate back.
	for _, row := range conditionMatrix {
		order := repository.FIFO
		if row.newer {
			order = repository.LIFO
		}
		t.Run(fmt.Sprintf("%v/PollsCandidateDespite%sInAnotherTopic", order, row.name()), func(t *testing.T) {
			t.Parallel()
			name := "other-" + row.name()
			c := onTopic(t, f, name)
			elsewhere := onTopic(t, f, name+"-elsewhere")
			candidate := candidateWith(c, elsewhere, row.other, row.newer)
			polled := c.poll(order, repository.SingularByIdentifierSuspendUntilSuccess, 10)
			if !slices.Equal(sequences(polled), []int64{candidate.Sequence}) {
				t.Fatalf("polled %v, want the candidate [%d]", sequences(polled), candidate.Sequence)
			}
		})
	}
}

func TestConditionSingularExample(t *testing.T) {
	t.Run("OneTaskPerIdentifierInFlightInOrder", func(t *testing.T) {
		f := setup(t)
		f.push(repository.Append, "foo", "bar", "foo")
		polled := f.poll(repository.FIFO, repository.SingularByIdentifier, 10)
		if !slices.Equal(sequences(polled), []int64{1, 2}) || polled[0].Identifier != "foo" || polled[1].Identifier != "bar" {
			t.Fatalf("first poll = %v, want foo@1 bar@2", sequences(polled))
		}
		if again := f.poll(repository.FIFO, repository.SingularByIdentifier, 10); len(again) != 0 {
			t.Fatalf("second poll = %v, want nothing while foo@1 is ACTIVE", sequences(again))
		}
		f.complete(repository.Succeed(""), polled[1]) // bar@2 finishing does not free foo@3
		if again := f.poll(repository.FIFO, repository.SingularByIdentifier, 10); len(again) != 0 {
			t.Fatalf("third poll = %v, want nothing while foo@1 is ACTIVE", sequences(again))
		}
		f.complete(repository.Succeed(""), polled[0])
		if next := f.poll(repository.FIFO, repository.SingularByIdentifier, 10); !slices.Equal(sequences(next), []int64{3}) {
			t.Fatalf("poll after foo@1 completed = %v, want [3]", sequences(next))
		}
	})
	// Under LIFO an ACTIVE task is older than the foo pushed after it: it holds that one
	// back all the same (before 000043, LIFO looked at newer tasks only).
	t.Run("LIFOPushedWhileOneRuns", func(t *testing.T) {
		f := setup(t)
		first := f.push(repository.Append, "foo")[0]
		if polled := f.poll(repository.LIFO, repository.SingularByIdentifier, 10); !slices.Equal(sequences(polled), []int64{first.Sequence}) {
			t.Fatalf("first poll = %v, want [%d]", sequences(polled), first.Sequence)
		}
		second := f.push(repository.Append, "foo")[0]
		if again := f.poll(repository.LIFO, repository.SingularByIdentifier, 10); len(again) != 0 {
			t.Fatalf("poll with foo@%d ACTIVE = %v, want nothing", first.Sequence, sequences(again))
		}
		f.complete(repository.Succeed(""), f.get(first.Sequence))
		if next := f.poll(repository.LIFO, repository.SingularByIdentifier, 10); !slices.Equal(sequences(next), []int64{second.Sequence}) {
			t.Fatalf("poll after foo@%d completed = %v, want [%d]", first.Sequence, sequences(next), second.Sequence)
		}
	})
	// Under FIFO an older task revived while a newer one of its identifier runs waits for it.
	t.Run("FIFORevivedWhileANewerOneRuns", func(t *testing.T) {
		f := setup(t)
		old := f.push(repository.Append, "foo")[0]
		f.complete(repository.Suspend("later"), f.poll(repository.FIFO, repository.SingularByIdentifier, 10)...)
		newer := f.push(repository.Append, "foo")[0]
		if polled := f.poll(repository.FIFO, repository.SingularByIdentifier, 10); !slices.Equal(sequences(polled), []int64{newer.Sequence}) {
			t.Fatalf("poll = %v, want the newer foo [%d]", sequences(polled), newer.Sequence)
		}
		if _, err := f.repo.Recreate(f.ctx, f.pool, f.topic, repository.Reset, old.Sequence); err != nil {
			t.Fatal(err)
		}
		if again := f.poll(repository.FIFO, repository.SingularByIdentifier, 10); len(again) != 0 {
			t.Fatalf("poll with foo@%d ACTIVE = %v, want nothing", newer.Sequence, sequences(again))
		}
		f.complete(repository.Succeed(""), f.get(newer.Sequence))
		if next := f.poll(repository.FIFO, repository.SingularByIdentifier, 10); !slices.Equal(sequences(next), []int64{old.Sequence}) {
			t.Fatalf("poll after foo@%d completed = %v, want the revived [%d]", newer.Sequence, sequences(next), old.Sequence)
		}
	})
}

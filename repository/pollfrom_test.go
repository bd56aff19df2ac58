package repository_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/repository"
)

// TestPollFrom: a FIFO poll without a condition leases only the tasks at or after the
// position, in poll order; the head (zero), LIFO and conditions poll the whole topic.
func TestPollFrom(t *testing.T) {
	f := setup(t)
	pushed, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append,
		repository.Creation{Identifier: "a"}, repository.Creation{Identifier: "b"},
		repository.Creation{Identifier: "c"}, repository.Creation{Identifier: "d", Priority: 1},
		repository.Creation{Identifier: "e", Priority: 1}, repository.Creation{Identifier: "f", Priority: -1})
	if err != nil {
		t.Fatal(err)
	}
	at := map[string]repository.Position{}
	for _, task := range pushed {
		at[task.Identifier] = repository.PositionOf(task)
	}
	poll := func(order repository.Order, condition repository.Condition, from repository.Position) string {
		t.Helper()
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.Background()) }() // every poll sees all six
		tasks, err := f.repo.PollFrom(f.ctx, tx, f.topic, order, condition, 10, from)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, task := range tasks {
			got += task.Identifier
		}
		return got
	}
	for _, tc := range []struct {
		name      string
		order     repository.Order
		condition repository.Condition
		from      repository.Position
		want      string
	}{
		{"Head", repository.FIFO, repository.None, repository.Position{}, "fabcde"},
		{"FromB", repository.FIFO, repository.None, at["b"], "bcde"},
		{"BetweenPositions", repository.FIFO, repository.None, repository.Position{Priority: 0, Sequence: at["a"].Sequence + 1}, "bcde"},
		{"FromE", repository.FIFO, repository.None, at["e"], "e"},
		{"PastTheEnd", repository.FIFO, repository.None, repository.Position{Priority: 2, Sequence: 1}, ""},
		{"LIFOIgnoresIt", repository.LIFO, repository.None, at["e"], "fcbaed"},
		{"ConditionIgnoresIt", repository.FIFO, repository.SingularByIdentifier, at["e"], "fabcde"},
	} {
		if got := poll(tc.order, tc.condition, tc.from); got != tc.want {
			t.Errorf("%s: polled %q, want %q", tc.name, got, tc.want)
		}
	}
	// The function of 000009, which processors of earlier versions call, stays.
	var n int
	if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task_poll_candidates('topic', false, 0::smallint, 10)").Scan(&n); err != nil || n != 6 {
		t.Errorf("four-argument task_poll_candidates: %d rows, %v; want 6", n, err)
	}
}

// TestPollFromSkipsWhatAHeldSnapshotKeeps: while a transaction holds a snapshot, the
// row versions of leased tasks stay, and a poll from the head reads each of them; a poll
// from where the work is reads none.
func TestPollFromSkipsWhatAHeldSnapshotKeeps(t *testing.T) {
	f := setup(t)
	holder, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(context.Background()) }()
	if _, err := holder.Exec(f.ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(f.ctx, "SELECT count(*) FROM task_topic"); err != nil { // takes the snapshot
		t.Fatal(err)
	}

	const dead = 2000
	ids := make([]string, dead)
	for i := range ids {
		ids[i] = "done"
	}
	f.push(repository.Append, ids...)
	if got := len(f.poll(repository.FIFO, repository.None, dead)); got != dead {
		t.Fatalf("leased %d, want %d", got, dead)
	}
	fresh := f.push(repository.Append, "x", "y", "z")
	var table string
	if err := f.pool.QueryRow(f.ctx, "SELECT partition FROM task_topic WHERE topic = $1", f.topic).Scan(&table); err != nil {
		t.Fatal(err)
	}
	// index entries a poll reads in the table's indexes
	fetched := func(from repository.Position) (int64, string) {
		t.Helper()
		var n int64
		ids := ""
		err := pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
			// The counts are the backend's not yet reported, which may include an
			// earlier transaction's: the poll's are the difference.
			const read = `SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(indexrelid)), 0)::bigint
				FROM pg_index WHERE indrelid = $1::regclass`
			var before int64
			if err := tx.QueryRow(f.ctx, read, table).Scan(&before); err != nil {
				return err
			}
			tasks, err := f.repo.PollFrom(f.ctx, tx, f.topic, repository.FIFO, repository.None, 10, from)
			if err != nil {
				return err
			}
			for _, task := range tasks {
				ids += task.Identifier
			}
			if err := tx.QueryRow(f.ctx, read, table).Scan(&n); err != nil {
				return err
			}
			n -= before
			return errRollback
		})
		if err != errRollback {
			t.Fatal(err)
		}
		return n, ids
	}
	head, ids0 := fetched(repository.Position{})
	from, ids1 := fetched(repository.PositionOf(fresh[0]))
	if ids0 != "xyz" || ids1 != "xyz" {
		t.Fatalf("polled %q from the head and %q from the position, want xyz both", ids0, ids1)
	}
	if head < dead {
		t.Errorf("a poll from the head read %d index entries, want at least the %d of the versions the snapshot keeps (the test no longer sees what it is about)", head, dead)
	}
	if from > 20 {
		t.Errorf("a poll from the position read %d index entries, want those of the few it leased", from)
	}
	t.Logf("index entries read: %d from the head, %d from the position", head, from)
}

var errRollback = errorString("rollback")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestPushNotificationCarriesPosition: a push's WORK notification names the first of its
// READY tasks in poll order (delayed ones included, suspended ones not), and parses back.
func TestPushNotificationCarriesPosition(t *testing.T) {
	f := setup(t)
	conn, err := pgx.ConnectConfig(f.ctx, f.pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(f.ctx, "LISTEN "+repository.NotificationChannel); err != nil {
		t.Fatal(err)
	}
	next := func() repository.Notification {
		t.Helper()
		ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := repository.ParseNotification(n.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if parsed.String() != n.Payload {
			t.Errorf("notification %q formats back as %q", n.Payload, parsed.String())
		}
		return parsed
	}
	for _, insertion := range []repository.Insertion{repository.Append, repository.Replace} {
		pushed, err := f.repo.Push(f.ctx, f.pool, f.topic, insertion,
			repository.Creation{Identifier: "held", Suspended: true, Priority: -5},
			repository.Creation{Identifier: "late", Priority: 2},
			repository.Creation{Identifier: "urgent", Priority: -1, Delay: time.Hour},
			repository.Creation{Identifier: "plain"})
		if err != nil {
			t.Fatal(err)
		}
		n := next()
		if want := repository.PositionOf(pushed[2]); n.Event != repository.EventWork || n.From != want {
			t.Errorf("%v push: notified %+v, want WORK from %+v", insertion, n, want)
		}
	}

	for _, tc := range []struct {
		payload string
		want    repository.Position
		ok      bool
	}{
		{"WORK " + repository.TopicHash("t"), repository.Position{}, true},
		{"WORK " + repository.TopicHash("t") + " -3 42", repository.Position{Priority: -3, Sequence: 42}, true},
		{"WORK " + repository.TopicHash("t") + " 0 42 0 1700000000000 later-field", repository.Position{Sequence: 42}, true},
		{"WORK " + repository.TopicHash("t") + " x 42", repository.Position{}, false},
		{"WORK " + repository.TopicHash("t") + " 0 0", repository.Position{}, false},
		{"WORK " + repository.TopicHash("t") + " 40000 1", repository.Position{}, false},
	} {
		n, err := repository.ParseNotification(tc.payload)
		if (err == nil) != tc.ok || err == nil && n.From != tc.want {
			t.Errorf("ParseNotification(%q) = %+v, %v; want from %+v, ok %v", tc.payload, n.From, err, tc.want, tc.ok)
		}
	}
}

package repository_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
)

// otherNodeTopic returns a topic whose tasks a distributed database keeps on another node
// than topic's (any other topic on plain PostgreSQL).
func (f *fixture) otherNodeTopic(topic string) string {
	f.t.Helper()
	if !pgtest.OnCitus() { // the tests' databases are distributed (TestTheTestsDatabase)
		return "other"
	}
	node := func(topic string) (n int) {
		f.t.Helper()
		if err := f.pool.QueryRow(f.ctx, `SELECT p.groupid FROM pg_dist_placement p
			WHERE p.shardid = get_shard_id_for_distribution_column('task', $1::text)`, topic).Scan(&n); err != nil {
			f.t.Fatalf("the node of topic %q: %v", topic, err)
		}
		return n
	}
	mine := node(topic)
	for i := range 100 {
		if other := fmt.Sprintf("other-%d", i); node(other) != mine {
			return other
		}
	}
	f.t.Fatal("no topic found on another node")
	return ""
}

// TestTransactionsOverTwoNodes: a transaction that writes to topics on two nodes of a
// distributed database commits with a two-phase commit, which PostgreSQL refuses to a
// transaction that ran NOTIFY. A junction that released tasks (a completion's
// follow-up, say, committed with a push to a topic on the other node), a reset, a
// change of a topic's settings or its pause ran their NOTIFY on the topic's worker,
// and such a transaction failed at its commit, nothing of it written ("cannot PREPARE a
// transaction that has executed LISTEN, UNLISTEN, or NOTIFY"). They now notify on the
// coordinator; on plain PostgreSQL they notify as before.
func TestTransactionsOverTwoNodes(t *testing.T) {
	f := setup(t)
	other := f.otherNodeTopic(f.topic)
	f.createTopic(other)
	if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "p", Suspended: true}); err != nil {
		t.Fatal(err)
	}
	failed := f.push(repository.Append, "q")[0]
	f.complete(repository.Fail(fmt.Errorf("boom")), f.poll(repository.FIFO, repository.None, 1)...)
	if got := f.get(failed.Sequence); got.State != repository.Failed {
		t.Fatalf("task q %v, want FAILED", got.State)
	}
	l := f.listen()
	for _, c := range []struct {
		name string
		op   func(tx pgx.Tx) error
	}{
		{"Junction", func(tx pgx.Tx) error {
			released, err := f.repo.Junction(f.ctx, tx, f.topic, repository.Singular, []string{"p"})
			if err == nil && !slices.Equal(released, []string{"p"}) {
				err = fmt.Errorf("released %v, want [p]", released)
			}
			return err
		}},
		{"Reset", func(tx pgx.Tx) error {
			revived, err := f.repo.RecreateState(f.ctx, tx, f.topic, repository.Failed, repository.Reset, 0, repository.MaxSequence, 10)
			if err == nil && len(revived) != 1 {
				err = fmt.Errorf("revived %v, want task q", revived)
			}
			return err
		}},
		{"Settings", func(tx pgx.Tx) error {
			_, err := f.repo.UpdateSettings(f.ctx, tx, f.topic, func(s *repository.TopicSettings) { s.MaxAttempts = 2 })
			return err
		}},
		{"Pause", func(tx pgx.Tx) error { return f.repo.SetActive(f.ctx, tx, f.topic, false) }},
	} {
		l.drain()
		err := pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
			if _, err := f.repo.Push(f.ctx, tx, other, repository.Append, repository.Creation{Identifier: "x-" + c.name}); err != nil {
				return err
			}
			return c.op(tx)
		})
		if err != nil {
			t.Fatalf("%s with a push to %q in one transaction: %v", c.name, other, err)
		}
		// the push's notification and the operation's, which names the topic
		want := repository.TopicHash(f.topic)
		found := false
		for range 3 {
			if n := l.next(); n.TopicHash == want {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s: no notification of topic %q", c.name, f.topic)
		}
	}
	if got := f.get(failed.Sequence); got.State != repository.Ready {
		t.Errorf("task q %v after the reset, want READY", got.State)
	}
}

// TestPurgeRetentionServesEveryTopic: batches of the retention's purge serve the topics
// in turn (PurgeRetentionAfter): a topic whose old tasks outnumbered a batch was served
// first at every batch, and the topics after it not until it was cleared.
func TestPurgeRetentionServesEveryTopic(t *testing.T) {
	f := setup(t)
	a, b := f.topic, f.topic+"-b"
	f.createTopic(b)
	old := func(topic string, n int) {
		t.Helper()
		creations := make([]repository.Creation, n)
		for i := range creations {
			creations[i] = repository.Creation{Identifier: fmt.Sprint("t", i)}
		}
		if _, err := f.repo.Push(f.ctx, f.pool, topic, repository.Append, creations...); err != nil {
			t.Fatal(err)
		}
		if _, err := f.pool.Exec(f.ctx, `UPDATE task SET state = 6, completed = now() - interval '2 hours' WHERE topic = $1`, topic); err != nil {
			t.Fatal(err)
		}
		if _, err := f.repo.UpdateSettings(f.ctx, f.pool, topic, func(s *repository.TopicSettings) { s.Retention = time.Hour }); err != nil {
			t.Fatal(err)
		}
	}
	old(a, 30)
	old(b, 1)
	count := func(topic string) (n int) {
		t.Helper()
		if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM task WHERE topic = $1`, topic).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if pgtest.OnCitus() {
		// one pass at a time: a pass while another runs (its advisory lock held) deletes
		// nothing and says so, where the two read the same rows unlocked and deadlocked
		other, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Exec(f.ctx, "SELECT pg_advisory_xact_lock(1885828300, 1)"); err != nil {
			t.Fatal(err)
		}
		if n, _, err := f.repo.PurgeRetentionAfter(f.ctx, f.pool, "", 10); !errors.Is(err, repository.ErrRetentionUnderWay) || n != 0 || count(a) != 30 {
			t.Fatalf("a pass while another ran: %d deleted (%v), %d of %q left; want none deleted, ErrRetentionUnderWay", n, err, count(a), a)
		}
		if err := other.Rollback(f.ctx); err != nil {
			t.Fatal(err)
		}
		// no turn on Citus (PurgeRetentionAfter): every old task goes all the same
		for range 5 {
			if _, _, err := f.repo.PurgeRetentionAfter(f.ctx, f.pool, "", 10); err != nil {
				t.Fatal(err)
			}
		}
		if count(a) != 0 || count(b) != 0 {
			t.Fatalf("%d tasks of %q and %d of %q left after 5 batches of 10, want none", count(a), a, count(b), b)
		}
		return
	}
	after := ""
	// the second batch comes round to a after b: the next starts after a, not b
	lasts := []string{a, a, a, a, ""}
	for i, want := range []struct{ a, b int }{{20, 1}, {11, 0}, {1, 0}, {0, 0}, {0, 0}} {
		n, last, err := f.repo.PurgeRetentionAfter(f.ctx, f.pool, after, 10)
		if err != nil {
			t.Fatal(err)
		}
		if got := (struct{ a, b int }{count(a), count(b)}); got != want {
			t.Fatalf("after batch %d (after %q: %d deleted, last %q): %d tasks of %q and %d of %q left, want %d and %d",
				i+1, after, n, last, got.a, a, got.b, b, want.a, want.b)
		}
		if last != lasts[i] {
			t.Errorf("batch %d (after %q) says to start after %q, want %q", i+1, after, last, lasts[i])
		}
		after = last
	}
	if after != "" {
		t.Errorf("a batch that deleted nothing says to start after %q, want \"\"", after)
	}
	if n, err := f.repo.PurgeRetention(f.ctx, f.pool, 0); !errors.Is(err, repository.ErrInvalid) || n != 0 {
		t.Errorf("PurgeRetention of size 0: %d, %v; want ErrInvalid", n, err)
	}
}

package repository_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
)

// The SQL API of migration 000002 (docs/sql.md), called with plain SQL as a psql user or a
// trigger would: task_push and task_push_batch.

// sqlPush runs a statement returning one sequence (a task_push call) and fails the test on
// error.
func sqlPush(f *fixture, query string, args ...any) int64 {
	f.t.Helper()
	var sequence int64
	if err := f.pool.QueryRow(f.ctx, query, args...).Scan(&sequence); err != nil {
		f.t.Fatalf("%s: %v", query, err)
	}
	return sequence
}

// sqlPushBatch runs a statement returning sequences (a task_push_batch call) and fails
// the test on error.
func sqlPushBatch(f *fixture, query string, args ...any) []int64 {
	f.t.Helper()
	rows, err := f.pool.Query(f.ctx, query, args...)
	if err != nil {
		f.t.Fatalf("%s: %v", query, err)
	}
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		f.t.Fatalf("%s: %v", query, err)
	}
	return seqs
}

// sqlRow is what the tests compare of a stored task.
type sqlRow struct {
	Sequence   int64
	Identifier string
	State      repository.State
	Descent    repository.State
	Input      string
}

// sqlRows lists the tasks of a topic in sequence order.
func sqlRows(f *fixture, topic string) []sqlRow {
	f.t.Helper()
	rows, err := f.pool.Query(f.ctx, `SELECT sequence, identifier, state, descent, coalesce(input, '')
		FROM task WHERE topic = $1 ORDER BY sequence`, topic)
	if err != nil {
		f.t.Fatalf("list tasks of %q: %v", topic, err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[sqlRow])
	if err != nil {
		f.t.Fatalf("list tasks of %q: %v", topic, err)
	}
	return got
}

// sqlInitialize registers topics, as a psql user would.
func sqlInitialize(f *fixture, topics ...string) {
	f.t.Helper()
	for _, topic := range topics {
		if _, err := f.pool.Exec(f.ctx, "SELECT task_topic_create($1)", topic); err != nil {
			f.t.Fatalf("create topic %q: %v", topic, err)
		}
	}
}

// wantPgError checks that err is a PostgreSQL error with the SQLSTATE code whose message
// contains every one of want.
func wantPgError(t *testing.T, err error, code string, want ...string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		t.Fatalf("err = %v, want a PostgreSQL error %s", err, code)
	}
	if pgErr.Code != code {
		t.Fatalf("SQLSTATE = %s (%s), want %s", pgErr.Code, pgErr.Message, code)
	}
	for _, w := range want {
		if !strings.Contains(pgErr.Message, w) {
			t.Errorf("message %q does not name %q", pgErr.Message, w)
		}
	}
}

// sequenceState reports the shared sequence's last value and whether any was taken.
func sequenceState(f *fixture) (last int64, taken bool) {
	f.t.Helper()
	if err := f.pool.QueryRow(f.ctx, "SELECT last_value, is_called FROM task_sequence").Scan(&last, &taken); err != nil {
		f.t.Fatalf("read task_sequence: %v", err)
	}
	return last, taken
}

// taskCount counts the tasks of every topic.
func taskCount(f *fixture) int64 {
	f.t.Helper()
	var n int64
	if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task").Scan(&n); err != nil {
		f.t.Fatalf("count tasks: %v", err)
	}
	return n
}

func TestSQLPush(t *testing.T) {
	t.Run("FreshDatabaseReturnsSequenceOneReady", func(t *testing.T) {
		f := setup(t)
		if got := sqlPush(f, "SELECT task_push('topic', 'order-1', 'hello')"); got != 1 {
			t.Fatalf("task_push = %d, want 1", got)
		}
		task := f.get(1)
		if task.Identifier != "order-1" || task.Input != "hello" || task.State != repository.Ready ||
			task.Descent != repository.Ready || !task.NotBefore.IsZero() || task.Priority != 0 || task.Reference != "" {
			t.Fatalf("task = %+v, want order-1 READY/READY with input hello, at once, priority 0", task)
		}
		if got := sqlPush(f, "SELECT task_push('topic', 'order-2')"); got != 2 {
			t.Fatalf("second task_push = %d, want 2", got)
		}
		if task := f.get(2); task.Input != "" || task.State != repository.Ready {
			t.Fatalf("task without input = %+v", task)
		}
	})
	t.Run("SharesTheSequenceWithTheGoPush", func(t *testing.T) {
		f := setup(t)
		f.push(repository.Append, "a")
		if got := sqlPush(f, "SELECT task_push('topic', 'b')"); got != 2 {
			t.Fatalf("task_push after a Go push = %d, want 2", got)
		}
	})
	t.Run("NamedArgumentsAndInsertionNameInAnyCase", func(t *testing.T) {
		f := setup(t)
		first := sqlPush(f, "SELECT task_push('topic', 'id', insertion => 'REPLACE')")
		second := sqlPush(f, "SELECT task_push(topic => 'topic', identifier => 'id', insertion => 'Replace', input => 'in')")
		if s := f.get(first); s.State != repository.Redundant || s.Descent != repository.Ready {
			t.Fatalf("first = %v/%v, want REDUNDANT/READY after a replace", s.State, s.Descent)
		}
		if s := f.get(second); s.State != repository.Ready || s.Input != "in" {
			t.Fatalf("second = %+v, want READY with input in", s)
		}
	})
	t.Run("DelaySetsNotBeforeToNowPlusDelay", func(t *testing.T) {
		f := setup(t)
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(f.ctx) //nolint:errcheck // committed below
		var seq int64
		if err := tx.QueryRow(f.ctx, "SELECT task_push('topic', 'later', delay => '90 minutes')").Scan(&seq); err != nil {
			t.Fatal(err)
		}
		// now() is the transaction's start time, the same in both statements.
		var exact bool
		if err := tx.QueryRow(f.ctx, "SELECT not_before = now() + interval '90 minutes' FROM task WHERE sequence = $1", seq).Scan(&exact); err != nil {
			t.Fatal(err)
		}
		if !exact {
			t.Fatal("not_before is not now() + 90 minutes")
		}
		if err := tx.Commit(f.ctx); err != nil {
			t.Fatal(err)
		}
		if task := f.get(seq); task.State != repository.Ready {
			t.Fatalf("delayed task is %v, want READY", task.State)
		}
		if polled := f.poll(repository.FIFO, repository.None, 10); len(polled) != 0 {
			t.Fatalf("polled %v, want nothing before the delay passed", sequences(polled))
		}
	})
	t.Run("ZeroDelayMeansAtOnce", func(t *testing.T) {
		f := setup(t)
		seq := sqlPush(f, "SELECT task_push('topic', 'now', delay => '0')")
		if task := f.get(seq); !task.NotBefore.IsZero() {
			t.Fatalf("not_before = %v, want none", task.NotBefore)
		}
	})
	t.Run("Suspended", func(t *testing.T) {
		f := setup(t)
		seq := sqlPush(f, "SELECT task_push('topic', 'held', suspended => true)")
		if task := f.get(seq); task.State != repository.Suspended || task.Descent != repository.Ready {
			t.Fatalf("task = %v/%v, want SUSPENDED/READY as the Go push does", task.State, task.Descent)
		}
		if polled := f.poll(repository.FIFO, repository.None, 10); len(polled) != 0 {
			t.Fatalf("polled %v, want nothing", sequences(polled))
		}
	})
	t.Run("PriorityOrdersThePoll", func(t *testing.T) {
		f := setup(t)
		sqlPush(f, "SELECT task_push('topic', 'low')")
		high := sqlPush(f, "SELECT task_push('topic', 'high', priority => -5)")
		if task := f.get(high); task.Priority != -5 {
			t.Fatalf("priority = %d, want -5", task.Priority)
		}
		if polled := f.poll(repository.FIFO, repository.None, 1); !slices.Equal(sequences(polled), []int64{high}) {
			t.Fatalf("polled %v, want the high-priority task %d first", sequences(polled), high)
		}
	})
	t.Run("Reference", func(t *testing.T) {
		f := setup(t)
		seq := sqlPush(f, "SELECT task_push('topic', 'child', reference => 'parent-42')")
		if task := f.get(seq); task.Reference != "parent-42" {
			t.Fatalf("reference = %q, want parent-42", task.Reference)
		}
	})
}

// sqlDesignEffect is the older-task matrix of design §4.2: the state an older task of the
// pushed identifier ends in, or false if it is deleted.
func sqlDesignEffect(insertion repository.Insertion, older repository.State) (repository.State, bool) {
	if older == repository.Active {
		return older, true
	}
	switch insertion {
	case repository.Supersede:
		if older == repository.Ready {
			return repository.Redundant, true
		}
	case repository.Replace:
		if older >= repository.Ready && older <= repository.Succeeded {
			return repository.Redundant, true
		}
	case repository.Delete:
		return 0, false
	}
	return older, true
}

// sqlHistory gives topic one task of identifier "x" in every state, in ordinal order, and
// a READY task of identifier "y", each driven there through the Go API as in production.
// ghost is a repository whose heartbeat is a day old, so its leases can be expired.
func sqlHistory(f *fixture, ghost *repository.Repository, topic string) {
	f.t.Helper()
	g := *f
	g.topic = topic
	c := &g
	push := func() repository.Task { return c.push(repository.Append, "x")[0] }
	lease := func(repo *repository.Repository, want int64) repository.Task {
		c.t.Helper()
		got, err := repo.Poll(c.ctx, c.pool, topic, repository.LIFO, repository.None, 1)
		if err != nil || len(got) != 1 || got[0].Sequence != want {
			c.t.Fatalf("poll newest of %q = %v, %v; want [%d]", topic, sequences(got), err, want)
		}
		return got[0]
	}
	lease(c.repo, push().Sequence) // ACTIVE
	push()                         // READY (polled by no one below: every lease takes a newer task)
	lease(ghost, push().Sequence)
	if _, err := c.repo.Expire(c.ctx, c.pool, time.Hour); err != nil { // EXPIRED
		c.t.Fatalf("expire: %v", err)
	}
	c.complete(repository.Fail(errors.New("boom")), lease(c.repo, push().Sequence))
	c.complete(repository.Suspend("wait"), lease(c.repo, push().Sequence))
	c.complete(repository.Skip("irrelevant"), lease(c.repo, push().Sequence))
	c.complete(repository.Succeed("done"), lease(c.repo, push().Sequence))
	recreated := c.complete(repository.Succeed("done"), lease(c.repo, push().Sequence))[0]
	// RECREATED (the fresh READY copy it pushes stays: one more READY task of x)
	revivals, err := c.repo.Recreate(c.ctx, c.pool, topic, repository.RecreateAppend, recreated.Sequence)
	if err != nil {
		c.t.Fatalf("recreate: %v", err)
	}
	if len(revivals) != 1 {
		c.t.Fatalf("recreate: %d revivals, want 1", len(revivals))
	}
	if _, err := c.repo.Cancel(c.ctx, c.pool, topic, "test", push().Sequence); err != nil { // REDUNDANT
		c.t.Fatalf("cancel: %v", err)
	}
	c.push(repository.Append, "y")
}

func TestSQLPushInsertionMatchesGoPush(t *testing.T) {
	for _, insertion := range []repository.Insertion{repository.Append, repository.Replace, repository.Supersede, repository.Delete} {
		t.Run(insertion.String(), func(t *testing.T) {
			f := setup(t)
			ghost, err := repository.New(repository.Config{Owner: "ghost", Now: func() time.Time { return time.Now().Add(-24 * time.Hour) }})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ghost.RegisterOwner(f.ctx, f.pool); err != nil {
				t.Fatal(err)
			}
			mode := strings.ToLower(insertion.String())
			for _, tc := range []struct {
				name    string
				pushesY bool // the push also pushes identifier y
				goPush  func(topic string) []repository.Task
				sql     string
			}{
				{
					name: "One",
					goPush: func(topic string) []repository.Task {
						tasks, err := f.repo.Push(f.ctx, f.pool, topic, insertion, repository.Creation{Identifier: "x", Input: "new"})
						if err != nil {
							t.Fatalf("go push: %v", err)
						}
						return tasks
					},
					sql: "SELECT task_push($1, 'x', 'new', insertion => $2)",
				},
				{
					name:    "BatchWithDuplicates",
					pushesY: true,
					goPush: func(topic string) []repository.Task {
						tasks, err := f.repo.Push(f.ctx, f.pool, topic, insertion,
							repository.Creation{Identifier: "x", Input: "n1"}, repository.Creation{Identifier: "y", Input: "n2"},
							repository.Creation{Identifier: "x", Input: "n3"})
						if err != nil {
							t.Fatalf("go push: %v", err)
						}
						return tasks
					},
					sql: "SELECT task_push_batch($1, ARRAY['x', 'y', 'x'], ARRAY['n1', 'n2', 'n3'], insertion => $2)",
				},
			} {
				goTopic, sqlTopic := "go-"+mode+"-"+tc.name, "sql-"+mode+"-"+tc.name
				sqlInitialize(f, goTopic, sqlTopic)
				sqlHistory(f, ghost, goTopic)
				sqlHistory(f, ghost, sqlTopic)
				before := sqlRows(f, sqlTopic)

				goPushed := tc.goPush(goTopic)
				sqlPushed := sqlPushBatch(f, tc.sql, sqlTopic, mode)
				if len(sqlPushed) != len(goPushed) {
					t.Fatalf("%s: SQL pushed %v, Go pushed %v", tc.name, sqlPushed, sequences(goPushed))
				}
				if !slices.IsSorted(sqlPushed) || sqlPushed[0] <= before[len(before)-1].Sequence {
					t.Errorf("%s: SQL sequences %v not ascending after the history", tc.name, sqlPushed)
				}

				// Same rows, row by row, as the Go push left on its twin topic.
				goRows, sqlAfter := sqlRows(f, goTopic), sqlRows(f, sqlTopic)
				if len(goRows) != len(sqlAfter) {
					t.Fatalf("%s: SQL left %d tasks, Go %d:\nsql %+v\ngo  %+v", tc.name, len(sqlAfter), len(goRows), sqlAfter, goRows)
				}
				for i := range goRows {
					g, s := goRows[i], sqlAfter[i]
					if g.Identifier != s.Identifier || g.State != s.State || g.Descent != s.Descent || g.Input != s.Input {
						t.Errorf("%s: task %d: SQL %s %v/%v %q, Go %s %v/%v %q", tc.name, i,
							s.Identifier, s.State, s.Descent, s.Input, g.Identifier, g.State, g.Descent, g.Input)
					}
				}

				// And what the design's matrix says of every older task.
				after := make(map[int64]sqlRow, len(sqlAfter))
				for _, r := range sqlAfter {
					after[r.Sequence] = r
				}
				for _, old := range before {
					want, kept := old.State, true
					if old.Identifier == "x" || tc.pushesY {
						want, kept = sqlDesignEffect(insertion, old.State)
					}
					got, found := after[old.Sequence]
					switch {
					case !kept && found:
						t.Errorf("%s: older %s %v: still there as %v, want deleted", tc.name, old.Identifier, old.State, got.State)
					case kept && !found:
						t.Errorf("%s: older %s %v: deleted, want %v", tc.name, old.Identifier, old.State, want)
					case kept && got.State != want:
						t.Errorf("%s: older %s %v: now %v, want %v", tc.name, old.Identifier, old.State, got.State, want)
					}
				}
			}
		})
	}
}

// TestSQLPushAppendStoresAsGoPush: an APPEND by task_push_batch, which runs the insertion
// alone (migration 000025), stores every column as the Go push does, with each option
// and on a topic polled by key (where a task without a key gets the empty key), and its
// sequences follow the identifiers' order.
func TestSQLPushAppendStoresAsGoPush(t *testing.T) {
	f := setup(t)
	type options struct {
		inputs    []string // nil: inputs => NULL
		delay     time.Duration
		priority  int16
		reference string
		suspended bool
		key       string
	}
	ids := []string{"b", "a", "c", "a"}
	for _, keyed := range []bool{false, true} {
		for name, o := range map[string]options{
			"Plain":     {},
			"Inputs":    {inputs: []string{"1", "", "3", "4"}},
			"Delayed":   {delay: time.Hour},
			"Priority":  {priority: -7},
			"Reference": {reference: "order-1"},
			"Suspended": {suspended: true},
			"Key":       {key: "tenant-1"},
			"All":       {inputs: []string{"x", "y", "z", "w"}, delay: time.Minute, priority: 3, reference: "r", key: "k"},
		} {
			goTopic, sqlTopic := fmt.Sprintf("go-%s-%v", name, keyed), fmt.Sprintf("sql-%s-%v", name, keyed)
			for _, topic := range []string{goTopic, sqlTopic} {
				f.createTopic(topic)
				if _, err := f.repo.UpdateSettings(f.ctx, f.pool, topic, func(s *repository.TopicSettings) { s.Fair = keyed }); err != nil {
					t.Fatal(err)
				}
			}
			cs := make([]repository.Creation, len(ids))
			for i, id := range ids {
				cs[i] = repository.Creation{Identifier: id, Reference: o.reference, Suspended: o.suspended,
					Priority: o.priority, Delay: o.delay, ConcurrencyKey: o.key}
				if o.inputs != nil {
					cs[i].Input = o.inputs[i]
				}
			}
			if _, err := f.repo.Push(f.ctx, f.pool, goTopic, repository.Append, cs...); err != nil {
				t.Fatal(err)
			}
			var delay *time.Duration
			if o.delay > 0 {
				delay = &o.delay
			}
			sqlPushed := sqlPushBatch(f, `SELECT * FROM task_push_batch($1, $2, $3, 'append', $4, $5, $6, $7, $8)`,
				sqlTopic, ids, o.inputs, delay, int(o.priority), o.reference, o.suspended, o.key)
			stored := func(topic string) []string {
				rows, err := f.pool.Query(f.ctx, `SELECT format('%s %s/%s input=%s reference=%s priority=%s due_in=%s key=%s attempt=%s/%s owner=%s',
					identifier, state, descent, coalesce(input, 'NULL'), coalesce(reference, 'NULL'), priority,
					coalesce(extract(epoch FROM not_before - created)::text, 'NULL'), coalesce(concurrency_key, 'NULL'),
					attempt, returned, coalesce(owner, 'NULL'))
					FROM task WHERE topic = $1 ORDER BY sequence`, topic)
				if err != nil {
					t.Fatal(err)
				}
				got, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			goRows, sqlRows := stored(goTopic), stored(sqlTopic)
			if !slices.Equal(goRows, sqlRows) {
				t.Errorf("%s, keyed %v: task_push_batch stored\n%s\nthe Go push\n%s", name, keyed,
					strings.Join(sqlRows, "\n"), strings.Join(goRows, "\n"))
			}
			if len(sqlPushed) != len(ids) || !slices.IsSorted(sqlPushed) {
				t.Errorf("%s, keyed %v: sequences %v, want %d ascending", name, keyed, sqlPushed, len(ids))
			}
		}
	}
}

func TestSQLPushBatch(t *testing.T) {
	t.Run("SequencesFollowInputOrder", func(t *testing.T) {
		f := setup(t)
		got := sqlPushBatch(f, "SELECT * FROM task_push_batch('topic', ARRAY['c', 'a', 'b'], ARRAY['1', '2', '3'])")
		if !slices.Equal(got, []int64{1, 2, 3}) {
			t.Fatalf("task_push_batch = %v, want [1 2 3]", got)
		}
		for i, want := range []struct{ id, input string }{{"c", "1"}, {"a", "2"}, {"b", "3"}} {
			if task := f.get(got[i]); task.Identifier != want.id || task.Input != want.input || task.State != repository.Ready {
				t.Errorf("task %d = %s %q %v, want %s %q READY", got[i], task.Identifier, task.Input, task.State, want.id, want.input)
			}
		}
	})
	t.Run("SharedArgumentsApplyToEveryTask", func(t *testing.T) {
		f := setup(t)
		got := sqlPushBatch(f, "SELECT * FROM task_push_batch('topic', '{a,b}', priority => 3, reference => 'r', suspended => true)")
		for _, seq := range got {
			if task := f.get(seq); task.Priority != 3 || task.Reference != "r" || task.State != repository.Suspended || task.Input != "" {
				t.Errorf("task %d = %+v, want priority 3, reference r, SUSPENDED, no input", seq, task)
			}
		}
	})
	t.Run("EmptyBatchDoesNothing", func(t *testing.T) {
		f := setup(t)
		for _, q := range []string{
			"SELECT * FROM task_push_batch('topic', '{}')",
			"SELECT * FROM task_push_batch('topic', NULL)",
			"SELECT * FROM task_push_batch('no-such-topic', ARRAY[]::text[])",
		} {
			if got := sqlPushBatch(f, q); len(got) != 0 {
				t.Errorf("%s = %v, want no rows", q, got)
			}
		}
		if _, taken := sequenceState(f); taken {
			t.Error("an empty batch took a sequence")
		}
	})
	type want struct {
		identifier string
		state      repository.State
	}
	allButLastRedundant := []want{{"a", repository.Redundant}, {"b", repository.Ready}, {"a", repository.Redundant}, {"a", repository.Ready}}
	for _, tc := range []struct {
		name, insertion string
		want            []want
	}{
		{"AppendInsertsAll", "append", []want{{"a", repository.Ready}, {"b", repository.Ready}, {"a", repository.Ready}, {"a", repository.Ready}}},
		{"ReplaceInsertsEarlierOccurrencesRedundant", "replace", allButLastRedundant},
		{"SupersedeInsertsEarlierOccurrencesRedundant", "supersede", allButLastRedundant},
		{"DeleteInsertsOnlyLastOccurrence", "delete", []want{{"b", repository.Ready}, {"a", repository.Ready}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			got := sqlPushBatch(f, "SELECT * FROM task_push_batch('topic', ARRAY['a', 'b', 'a', 'a'], insertion => $1)", tc.insertion)
			if len(got) != len(tc.want) || !slices.IsSorted(got) {
				t.Fatalf("task_push_batch = %v, want %d ascending sequences", got, len(tc.want))
			}
			rows := sqlRows(f, "topic")
			if len(rows) != len(tc.want) {
				t.Fatalf("stored %d tasks, want %d", len(rows), len(tc.want))
			}
			for i, w := range tc.want {
				if r := rows[i]; r.Sequence != got[i] || r.Identifier != w.identifier || r.State != w.state || r.Descent != repository.Ready {
					t.Errorf("task %d: %d %s %v/%v, want %d %s %v/READY", i, r.Sequence, r.Identifier, r.State, r.Descent, got[i], w.identifier, w.state)
				}
			}
		})
	}
}

func TestSQLPushNotifies(t *testing.T) {
	f := setup(t)
	sqlInitialize(f, "other")
	cfg := f.pool.Config().ConnConfig.Copy()
	conn, err := pgx.ConnectConfig(f.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(f.ctx, "LISTEN task_notification"); err != nil {
		t.Fatal(err)
	}
	wait := func(want string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("wait for %q: %v", want, err)
		}
		if n.Channel != "task_notification" || n.Payload != want {
			t.Fatalf("notification %s %q, want task_notification %q", n.Channel, n.Payload, want)
		}
	}
	// WORK <md5(topic)> <priority> <first READY sequence> (migration 000013)
	work := func(topic string, sequence int64) string {
		sum := md5.Sum([]byte(topic))
		return fmt.Sprintf("WORK %s 0 %d", hex.EncodeToString(sum[:]), sequence)
	}

	sqlPush(f, "SELECT task_push('topic', 'a')")
	wait(work("topic", 1))

	sqlPushBatch(f, "SELECT * FROM task_push_batch('topic', '{a,b,c}')")
	wait(work("topic", 2)) // one per call

	// A suspended push has no work to announce: the next notification is other's.
	sqlPush(f, "SELECT task_push('topic', 'held', suspended => true)")
	sqlPush(f, "SELECT task_push('other', 'a')")
	wait(work("other", 6))

	// The other insertions announce their first READY task too: the batch's first, or,
	// when a later occurrence of the identifier makes an earlier one REDUNDANT, the later.
	replaced := sqlPushBatch(f, "SELECT * FROM task_push_batch('topic', '{r1,r2}', insertion => 'replace')")
	wait(work("topic", replaced[0]))
	replaced = sqlPushBatch(f, "SELECT * FROM task_push_batch('topic', '{r3,r3}', insertion => 'supersede')")
	wait(work("topic", replaced[1]))

	// Limits set from SQL: the processors re-read the topic and poll (000028).
	if _, err := f.pool.Exec(f.ctx, "SELECT task_topic_set_limits('topic', concurrency => 2)"); err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum([]byte("topic"))
	wait("ACTIVATION " + hex.EncodeToString(sum[:]))
	wait("WORK " + hex.EncodeToString(sum[:]))
}

func TestSQLPushFromTrigger(t *testing.T) {
	f := setup(t)
	for _, ddl := range []string{
		"CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL)",
		`CREATE FUNCTION orders_push() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM task_push('topic', 'order-' || NEW.id, NEW.item);
			RETURN NEW;
		END
		$$`,
		"CREATE TRIGGER orders_push AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION orders_push()",
	} {
		if _, err := f.pool.Exec(f.ctx, ddl); err != nil {
			t.Fatalf("%s: %v", ddl, err)
		}
	}

	t.Run("InsertPushesTask", func(t *testing.T) {
		var id int
		if err := f.pool.QueryRow(f.ctx, "INSERT INTO orders (item) VALUES ('book') RETURNING id").Scan(&id); err != nil {
			t.Fatal(err)
		}
		var state repository.State
		var input string
		err := f.pool.QueryRow(f.ctx, "SELECT state, input FROM task WHERE topic = 'topic' AND identifier = $1",
			fmt.Sprintf("order-%d", id)).Scan(&state, &input)
		if err != nil || state != repository.Ready || input != "book" {
			t.Fatalf("task of order %d: %v %q, %v; want READY with input book", id, state, input, err)
		}
	})
	t.Run("RolledBackInsertLeavesNoTask", func(t *testing.T) {
		before := taskCount(f)
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(f.ctx, "INSERT INTO orders (item) VALUES ('pen')"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(f.ctx); err != nil {
			t.Fatal(err)
		}
		if n := taskCount(f); n != before {
			t.Fatalf("%d tasks after a rolled-back insert, want %d", n, before)
		}
	})
	t.Run("FailedPushFailsTheInsert", func(t *testing.T) {
		for _, ddl := range []string{
			"CREATE TABLE refunds (id serial PRIMARY KEY, item text NOT NULL)",
			`CREATE FUNCTION refunds_push() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				PERFORM task_push('no-such-topic', 'refund-' || NEW.id, NEW.item);
				RETURN NEW;
			END
			$$`,
			"CREATE TRIGGER refunds_push AFTER INSERT ON refunds FOR EACH ROW EXECUTE FUNCTION refunds_push()",
		} {
			if _, err := f.pool.Exec(f.ctx, ddl); err != nil {
				t.Fatalf("%s: %v", ddl, err)
			}
		}
		before := taskCount(f)
		_, err := f.pool.Exec(f.ctx, "INSERT INTO refunds (item) VALUES ('lamp')")
		wantPgError(t, err, "PT001", "'no-such-topic'")
		var refunds int
		if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM refunds").Scan(&refunds); err != nil || refunds != 0 {
			t.Fatalf("refunds: %d, %v; want none", refunds, err)
		}
		if n := taskCount(f); n != before {
			t.Fatalf("%d tasks, want %d", n, before)
		}
	})
}

func TestSQLPushRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		query string
		code  string
		names []string // parts of the message that name the bad value
	}{
		{"UnknownTopic", "SELECT task_push('no-such-topic', 'a')", "PT001", []string{"unknown topic", "'no-such-topic'"}},
		{"UnknownTopicInBatch", "SELECT task_push_batch('no-such-topic', '{a}')", "PT001", []string{"'no-such-topic'"}},
		{"NullTopic", "SELECT task_push(NULL, 'a')", "PT001", []string{"NULL"}},
		{"UnknownInsertion", "SELECT task_push('topic', 'a', insertion => 'upsert')", "PT002", []string{"unknown insertion", "'upsert'"}},
		{"NullInsertion", "SELECT task_push('topic', 'a', insertion => NULL)", "PT002", []string{"NULL"}},
		{"NullIdentifier", "SELECT task_push('topic', NULL)", "PT003", []string{"identifier NULL"}},
		{"EmptyIdentifier", "SELECT task_push('topic', '')", "PT003", []string{"identifier ''", "empty"}},
		{"TooLongIdentifier", "SELECT task_push('topic', repeat('x', 501))", "PT003", []string{"'xxxxxxxxxx", "501 characters", "500"}},
		{"BadIdentifierInBatchNamesPosition", "SELECT task_push_batch('topic', ARRAY['a', '', 'c'])", "PT003", []string{"''", "position 2"}},
		{"ArraysOfDifferentLengths", "SELECT task_push_batch('topic', '{a,b,c}', '{1,2}')", "22023", []string{"identifiers has 3", "inputs has 2"}},
		{"NegativeDelay", "SELECT task_push('topic', 'a', delay => '-5 minutes')", "22023", []string{"delay", "-00:05:00", "negative"}},
		{"PriorityOutOfRange", "SELECT task_push('topic', 'a', priority => 40000)", "22023", []string{"priority 40000"}},
		{"TooLongReference", "SELECT task_push('topic', 'a', reference => repeat('r', 501))", "22023", []string{"reference", "501 characters"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			_, err := f.pool.Exec(f.ctx, tc.query)
			wantPgError(t, err, tc.code, tc.names...)
			if n := taskCount(f); n != 0 {
				t.Errorf("%d tasks written, want none", n)
			}
			if _, taken := sequenceState(f); taken {
				t.Error("a sequence was taken")
			}
		})
	}

	t.Run("QueueCapExceeded", func(t *testing.T) {
		f := setup(t)
		if _, err := f.pool.Exec(f.ctx, "UPDATE task_topic SET queue_cap = 3 WHERE topic = 'topic'"); err != nil {
			t.Fatal(err)
		}
		sqlPushBatch(f, "SELECT * FROM task_push_batch('topic', '{a,b}')")
		// REPLACE adds one live task per distinct identifier: a, a, a is one.
		sqlPushBatch(f, "SELECT * FROM task_push_batch('topic', '{c,c,c}', insertion => 'replace')")
		last, _ := sequenceState(f)
		before := taskCount(f)
		for _, q := range []string{
			"SELECT task_push('topic', 'd')",
			"SELECT task_push_batch('topic', '{d,e}', insertion => 'delete')",
		} {
			_, err := f.pool.Exec(f.ctx, q)
			wantPgError(t, err, "PT004", "'topic'", "queue cap of 3")
		}
		if n := taskCount(f); n != before {
			t.Errorf("%d tasks, want %d: a refused push wrote", n, before)
		}
		if got, _ := sequenceState(f); got != last {
			t.Errorf("sequence moved from %d to %d: a refused push took sequences", last, got)
		}
		// Suspended tasks do not count against the cap.
		sqlPush(f, "SELECT task_push('topic', 'd', suspended => true)")
	})
	t.Run("InsideCallerTransactionNothingWritten", func(t *testing.T) {
		f := setup(t)
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(f.ctx) //nolint:errcheck // the transaction is aborted
		if _, err := tx.Exec(f.ctx, "SELECT task_push_batch('topic', ARRAY['a', 'b', NULL])"); err == nil {
			t.Fatal("batch with a NULL identifier succeeded")
		}
		if err := tx.Rollback(f.ctx); err != nil {
			t.Fatal(err)
		}
		if n := taskCount(f); n != 0 {
			t.Fatalf("%d tasks written, want none", n)
		}
	})
}

// TestSQLPushDelayAfter9999: a delay whose not-before falls after the year 9999 is
// refused with an error naming delay (22023), as the Go push refuses such a not-before
// (Creation.Validate), and nothing is written. PostgreSQL's own error for a delay past
// its range (22008, "timestamp out of range") named no argument, and a delay short of
// that range stored a not-before that the REST API could not write.
func TestSQLPushDelayAfter9999(t *testing.T) {
	for _, tc := range []struct {
		name, query, delay string
	}{
		{"PastPostgreSQLsRange", "SELECT task_push('topic', 'a', delay => '1000000 years')", "'1000000 years'"},
		{"InPostgreSQLsRange", "SELECT task_push('topic', 'a', delay => '8000 years')", "'8000 years'"},
		{"Batch", "SELECT task_push_batch('topic', '{a,b}', delay => '1000000 years')", "'1000000 years'"},
		{"BatchWithReplace", "SELECT task_push_batch('topic', '{a,b}', insertion => 'replace', delay => '8000 years')", "'8000 years'"},
		{"InDays", "SELECT task_push('topic', 'a', delay => '3000000 days')", "'3000000 days'"},
		{"ASecondAfterTheEnd", "SELECT task_push('topic', 'a', delay => timestamptz '9999-12-31 23:59:59.999999+00' - now() + interval '1 second')", "'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			_, err := f.pool.Exec(f.ctx, tc.query)
			wantPgError(t, err, "22023", "delay "+tc.delay, "puts the not-before")
			if n := taskCount(f); n != 0 {
				t.Errorf("%d tasks written, want none", n)
			}
			if _, taken := sequenceState(f); taken {
				t.Error("a sequence was taken")
			}
		})
	}

	// a minute: on Citus the node holding the topic adds the delay to its own
	// transaction's start, which may come a second or so after the coordinator's
	t.Run("AMinuteBeforeTheEndIsPushed", func(t *testing.T) {
		f := setup(t)
		seq := sqlPush(f, "SELECT task_push('topic', 'last', delay => timestamptz '9999-12-31 23:59:59.999999+00' - now() - interval '1 minute')")
		task := f.get(seq)
		if task.NotBefore.Before(time.Date(9999, 12, 31, 23, 58, 59, 0, time.UTC)) || task.NotBefore.After(time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)) {
			t.Errorf("not-before %v, want a minute before the end of 9999", task.NotBefore)
		}
		// what the Go push would accept
		if err := (repository.Creation{Identifier: "last", NotBefore: task.NotBefore}).Validate(); err != nil {
			t.Errorf("the Go push refuses the not-before SQL stored: %v", err)
		}
	})

	t.Run("OverflowOnTheWay", func(t *testing.T) {
		f := setup(t)
		// positive (-9000·360 + 3 300 000 days), but now() - 9000 years is before 4713 BC
		_, err := f.pool.Exec(f.ctx, "SELECT task_push('topic', 'a', delay => '-9000 years 3300000 days')")
		wantPgError(t, err, "22023", "delay '-9000 years +3300000 days' puts the not-before out of range")
		if n := taskCount(f); n != 0 {
			t.Errorf("%d tasks written, want none", n)
		}
	})
}

// TestSQLPushDelayByTheCalendar: the SQL push's delay is added to now() as PostgreSQL
// adds an interval, by the calendar in the session's time zone: a year is 365 or 366
// days and a month the month's length, on Citus as on a plain database. On Citus the
// delay was counted by extract(epoch) before migration 000047: a year 365.25 days, a
// month 30, so a task pushed with '1 year' was due hours off.
func TestSQLPushDelayByTheCalendar(t *testing.T) {
	f := setup(t)
	for _, delay := range []string{"1 year", "1 month", "1 day", "2 months 3 days 04:05:06"} {
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		var want time.Time
		var seq int64
		if _, err := tx.Exec(f.ctx, "SET LOCAL TimeZone = 'Europe/Paris'"); err != nil {
			_ = tx.Rollback(f.ctx)
			t.Fatal(err)
		}
		if err := tx.QueryRow(f.ctx, "SELECT now() + $1::interval", delay).Scan(&want); err != nil {
			_ = tx.Rollback(f.ctx)
			t.Fatal(err)
		}
		if err := tx.QueryRow(f.ctx, "SELECT task_push('topic', $1::text, delay => $2::interval)", delay, delay).Scan(&seq); err != nil {
			_ = tx.Rollback(f.ctx)
			t.Fatalf("push with delay %s: %v", delay, err)
		}
		if err := tx.Commit(f.ctx); err != nil {
			t.Fatal(err)
		}
		// on Citus the topic's node adds the delay to its own transaction's start, a
		// moment after the coordinator's
		if got := f.get(seq).NotBefore; got.Before(want) || got.Sub(want) > 5*time.Second {
			t.Errorf("delay %s: not-before %v, want now() + delay = %v", delay, got, want)
		}
	}
}

// TestSQLDedicate: task_topic_dedicate gives a paused topic a table of its own on plain
// PostgreSQL; on a distributed database it refuses (0A000), naming Citus's way, and
// changes nothing (before 000056 it failed with "null values cannot be formatted as an
// SQL identifier").
func TestSQLDedicate(t *testing.T) {
	f := setup(t)
	pushed := f.push(repository.Append, "a")
	if err := f.repo.SetActive(f.ctx, f.pool, f.topic, false); err != nil {
		t.Fatal(err)
	}
	var done bool
	err := f.pool.QueryRow(f.ctx, "SELECT task_topic_dedicate($1)", f.topic).Scan(&done)
	topic, terr := f.repo.Topic(f.ctx, f.pool, f.topic)
	if terr != nil {
		t.Fatal(terr)
	}
	if !pgtest.OnCitus() {
		if err != nil || !done || !topic.Dedicated {
			t.Fatalf("task_topic_dedicate: %v, %v, dedicated %v; want the topic dedicated", done, err, topic.Dedicated)
		}
		return
	}
	if repository.SQLState(err) != "0A000" || !strings.Contains(err.Error(), "isolate_tenant_to_new_shard('task', 'topic', 'CASCADE')") {
		t.Errorf("task_topic_dedicate on a distributed database: %v, %v; want 0A000 naming isolate_tenant_to_new_shard", done, err)
	}
	if topic.Dedicated {
		t.Errorf("topic after the refused dedicate: dedicated")
	}
	if got, err := f.repo.Get(f.ctx, f.pool, f.topic, pushed[0].Sequence); err != nil || got.Identifier != "a" {
		t.Errorf("the topic's task after the refused dedicate: %v, %v", got, err)
	}
}

// TestSQLPushNotBefore: task_push and task_push_batch take a not-before time
// (not_before, migration 000057), as the Go push, the REST API and the CLI do: a future
// one is the tasks', a past one too (due at once: a poll leases the task), and one
// after the year 9999 or before the year 1 (000059), an infinite one, or one given
// with a delay is refused with 22023 naming it, nothing written; a time is kept as given,
// to the microsecond (on Citus too since 000059). Before, SQL had only a delay, which a trigger computing it
// from a time already past found refused ("delay is negative").
func TestSQLPushNotBefore(t *testing.T) {
	t.Run("FutureAndPast", func(t *testing.T) {
		f := setup(t)
		at := time.Date(2031, 5, 5, 8, 0, 0, 123000, time.UTC)
		future := sqlPush(f, "SELECT task_push('topic', 'later', not_before => '2031-05-05 10:00:00.000123+02')")
		if got := f.get(future); !got.NotBefore.Equal(at) || got.State != repository.Ready {
			t.Errorf("task pushed with a future not_before: %v %v, want READY not before %v", got.State, got.NotBefore, at)
		}
		var batch []int64
		rows, err := f.pool.Query(f.ctx, "SELECT task_push_batch('topic', '{b1,b2}', not_before => $1)", at)
		if err == nil {
			batch, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		if err != nil || len(batch) != 2 {
			t.Fatalf("task_push_batch with not_before: %v, %v", batch, err)
		}
		for _, seq := range batch {
			if got := f.get(seq); !got.NotBefore.Equal(at) {
				t.Errorf("batch task %d not before %v, want %v", seq, got.NotBefore, at)
			}
		}
		// a zero delay is none, as the Go push has it
		zero := sqlPush(f, "SELECT task_push('topic', 'zero', delay => '0', not_before => '2031-05-05 10:00:00.000123+02')")
		if got := f.get(zero); !got.NotBefore.Equal(at) {
			t.Errorf("task pushed with a zero delay and a not_before: not before %v, want %v", got.NotBefore, at)
		}
		// kept as given, before 1970 too (on Citus it was the epoch) and to the
		// microsecond past the year 2255 (on Citus a float of seconds was coarser)
		for _, at := range []time.Time{
			time.Date(1960, 2, 29, 12, 0, 0, 999999000, time.UTC),
			time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
			time.Date(1969, 12, 31, 23, 59, 59, 999999000, time.UTC),
			time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC),
		} {
			seq := sqlPush(f, "SELECT task_push('topic', $1, not_before => $2)", at.Format(time.RFC3339Nano), at)
			if got := f.get(seq); !got.NotBefore.Equal(at) {
				t.Errorf("task pushed with not_before %s: not before %s", at.Format(time.RFC3339Nano), got.NotBefore.UTC().Format(time.RFC3339Nano))
			}
			if _, err := f.pool.Exec(f.ctx, "DELETE FROM task WHERE topic = 'topic' AND sequence = $1", seq); err != nil {
				t.Fatal(err)
			}
		}
		past := sqlPush(f, "SELECT task_push('topic', 'overdue', not_before => now() - interval '1 hour')")
		leased := f.poll(repository.FIFO, repository.None, 10)
		if len(leased) != 1 || leased[0].Sequence != past {
			t.Fatalf("poll leased %v, want the task due an hour ago alone", leased)
		}
	})
	for _, tc := range []struct{ name, query, says string }{
		{"AfterTheYear9999", "SELECT task_push('topic', 'a', not_before => '10000-01-01T00:00:00Z')", "after the year 9999"},
		{"Infinity", "SELECT task_push_batch('topic', '{a}', not_before => 'infinity')", "after the year 9999"},
		{"MinusInfinity", "SELECT task_push('topic', 'a', not_before => '-infinity')", "is not a time"},
		{"BeforeTheYear1", "SELECT task_push_batch('topic', '{a}', not_before => '0001-12-31 23:59:59.999999+00 BC')", "before the year 1"},
		{"WithADelay", "SELECT task_push('topic', 'a', delay => '1 minute', not_before => now())", "both given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			_, err := f.pool.Exec(f.ctx, tc.query)
			wantPgError(t, err, "22023", tc.says)
			if n := taskCount(f); n != 0 {
				t.Errorf("%d tasks written, want none", n)
			}
		})
	}
}

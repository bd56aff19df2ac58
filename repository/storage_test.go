package repository_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/repository"
)

// lockedRelations lists the task tables (the partitioned task, its buckets, shared and
// dedicated tables) on which the transaction holds a lock, those of them that hold rows
// (leaves), and the tables whose indexes it holds a lock on (one entry per index).
func lockedRelations(t *testing.T, tx pgx.Tx) (tables, leaves, indexed []string) {
	t.Helper()
	rows, err := tx.Query(t.Context(), `
		SELECT DISTINCT c.oid, c.relname::text, c.relkind::text, COALESCE(x.indrelid::regclass::text, '')
		FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
		LEFT JOIN pg_index x ON x.indexrelid = c.oid
		WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation'
		  AND (c.oid IN (SELECT relid FROM pg_partition_tree('task'))
		       OR x.indrelid IN (SELECT relid FROM pg_partition_tree('task')))
		ORDER BY 2`)
	if err != nil {
		t.Fatalf("read pg_locks: %v", err)
	}
	for rows.Next() {
		var oid uint32
		var name, kind, table string
		if err := rows.Scan(&oid, &name, &kind, &table); err != nil {
			t.Fatal(err)
		}
		switch kind {
		case "r":
			leaves = append(leaves, name)
			tables = append(tables, name)
		case "p":
			tables = append(tables, name)
		default:
			indexed = append(indexed, table)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return tables, leaves, indexed
}

// TestHotStatementsLockBoundedRelations registers 300 topics (two of them dedicated) and
// checks, from pg_locks inside each hot statement's transaction, which task tables the
// statement locks: with custom plans a statement that names a topic locks its table and
// no other, with generic plans (which lock every partition before pruning) and for
// statements that name no topic, at most the fixed set of buckets and tables. With one
// partition per topic, as before migration 000009, each of these would lock hundreds.
func TestHotStatementsLockBoundedRelations(t *testing.T) {
	f := setup(t)
	for i := range 300 {
		if _, err := f.repo.CreateTopic(f.ctx, f.pool, fmt.Sprintf("other-%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, topic := range []string{"other-000", "other-001"} {
		if _, err := f.repo.Dedicate(f.ctx, f.pool, topic); err != nil {
			t.Fatalf("dedicate %s: %v", topic, err)
		}
	}
	var buckets, dedicated int
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FILTER (WHERE relname ~ '^task_p[0-9]{3}$'),
		count(*) FILTER (WHERE relname ~ '^task_[0-9a-f]{32}$') FROM pg_class WHERE relkind IN ('r', 'p')`).Scan(&buckets, &dedicated); err != nil {
		t.Fatal(err)
	}
	if dedicated != 2 {
		t.Fatalf("dedicated tables = %d, want 2", dedicated)
	}
	// task, the buckets, their shared tables and the dedicated tables
	allTables := 1 + 2*buckets + dedicated
	topic, err := f.repo.Topic(f.ctx, f.pool, f.topic)
	if err != nil {
		t.Fatal(err)
	}
	cancelled := f.push(repository.Append, "to-cancel")[0]
	for _, task := range f.poll(repository.FIFO, repository.None, 10) {
		if task.Sequence == cancelled.Sequence {
			if _, err := f.repo.Cancel(f.ctx, f.pool, f.topic, "test", task.Sequence); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.push(repository.Append, "a", "b", "c")

	statements := []struct {
		name     string
		perTopic bool // names the fixture's topic
		run      func(tx pgx.Tx) error
	}{
		{"PushAppend", true, func(tx pgx.Tx) error {
			_, err := f.repo.Push(f.ctx, tx, f.topic, repository.Append, repository.Creation{Identifier: "x"})
			return err
		}},
		{"PushReplace", true, func(tx pgx.Tx) error {
			_, err := f.repo.Push(f.ctx, tx, f.topic, repository.Replace, repository.Creation{Identifier: "a"})
			return err
		}},
		{"PushDelete", true, func(tx pgx.Tx) error {
			_, err := f.repo.Push(f.ctx, tx, f.topic, repository.Delete, repository.Creation{Identifier: "b"})
			return err
		}},
		{"SQLPushSupersede", true, func(tx pgx.Tx) error {
			_, err := tx.Exec(f.ctx, "SELECT task_push($1, 'c', insertion => 'supersede')", f.topic)
			return err
		}},
		{"Poll", true, func(tx pgx.Tx) error {
			_, err := f.repo.Poll(f.ctx, tx, f.topic, repository.FIFO, repository.None, 1)
			return err
		}},
		{"FirstReady", true, func(tx pgx.Tx) error {
			_, _, err := f.repo.FirstReady(f.ctx, tx, f.topic)
			return err
		}},
		{"NextDue", true, func(tx pgx.Tx) error {
			_, _, err := f.repo.NextDue(f.ctx, tx, f.topic, 0)
			return err
		}},
		{"PollSingular", true, func(tx pgx.Tx) error {
			_, err := f.repo.Poll(f.ctx, tx, f.topic, repository.LIFO, repository.SingularByIdentifierSuspendUntilSuccess, 1)
			return err
		}},
		{"Complete", true, func(tx pgx.Tx) error {
			tasks, err := f.repo.Poll(f.ctx, tx, f.topic, repository.FIFO, repository.None, 1)
			if err != nil || len(tasks) == 0 {
				return fmt.Errorf("poll before complete: %d tasks, %w", len(tasks), err)
			}
			_, err = f.repo.Complete(f.ctx, tx, f.topic, tasks[0].Decide(repository.Decision{Result: repository.Success}))
			return err
		}},
		{"CompleteAndPoll", true, func(tx pgx.Tx) error {
			leased, err := f.repo.Poll(f.ctx, tx, f.topic, repository.FIFO, repository.None, 1)
			if err != nil {
				return err
			}
			_, _, err = f.repo.CompleteAndPoll(f.ctx, tx, f.topic, []repository.Completion{leased[0].Decide(repository.Succeed(""))},
				repository.FIFO, repository.None, 1, repository.Position{})
			return err
		}},
		{"CompleteAndPollUnderALimit", true, func(tx pgx.Tx) error {
			// the hand-over of migration 000026 (task_hand_over), in the transaction only
			if _, err := f.repo.UpdateSettings(f.ctx, tx, f.topic, func(s *repository.TopicSettings) { s.Concurrency = 5 }); err != nil {
				return err
			}
			leased, err := f.repo.Poll(f.ctx, tx, f.topic, repository.FIFO, repository.None, 1)
			if err != nil || len(leased) == 0 {
				return fmt.Errorf("poll before complete: %d tasks, %w", len(leased), err)
			}
			_, _, err = f.repo.CompleteAndPoll(f.ctx, tx, f.topic, []repository.Completion{leased[0].Decide(repository.Succeed(""))},
				repository.FIFO, repository.None, 1, repository.Position{})
			return err
		}},
		{"Stats", true, func(tx pgx.Tx) error {
			_, err := f.repo.Stats(f.ctx, tx, f.topic)
			return err
		}},
		{"Count", true, func(tx pgx.Tx) error {
			_, err := f.repo.Count(f.ctx, tx, f.topic, repository.TaskFilter{}, 0, repository.MaxSequence, repository.Total)
			return err
		}},
		{"CountRecent", true, func(tx pgx.Tx) error {
			_, err := f.repo.Count(f.ctx, tx, f.topic, repository.TaskFilter{}, 0, repository.MaxSequence, repository.Recent)
			return err
		}},
		{"Page", true, func(tx pgx.Tx) error {
			_, err := f.repo.Page(f.ctx, tx, f.topic, repository.TaskFilter{}, 0, 10, repository.Forward)
			return err
		}},
		{"Cancel", true, func(tx pgx.Tx) error {
			tasks, err := f.repo.Push(f.ctx, tx, f.topic, repository.Append, repository.Creation{Identifier: "y"})
			if err != nil {
				return err
			}
			_, err = f.repo.Cancel(f.ctx, tx, f.topic, "test", tasks[0].Sequence)
			return err
		}},
		{"Heartbeat", false, func(tx pgx.Tx) error { return f.repo.Heartbeat(f.ctx, tx) }},
		{"ExpireStale", false, func(tx pgx.Tx) error {
			_, err := f.repo.ExpireStale(f.ctx, tx, time.Minute)
			return err
		}},
		{"PurgeOwners", false, func(tx pgx.Tx) error {
			_, err := f.repo.PurgeOwners(f.ctx, tx, time.Minute)
			return err
		}},
		{"Expire", false, func(tx pgx.Tx) error {
			_, err := f.repo.Expire(f.ctx, tx, 0)
			return err
		}},
		{"CancelledLeases", false, func(tx pgx.Tx) error {
			leases, err := f.repo.CancelledLeases(f.ctx, tx)
			if err == nil && len(leases) != 1 {
				err = fmt.Errorf("cancelled leases = %v, want the one cancelled task", leases)
			}
			return err
		}},
		{"CancelledLeasesOfTopics", true, func(tx pgx.Tx) error {
			leases, err := f.repo.CancelledLeases(f.ctx, tx, f.topic)
			if err == nil && len(leases) != 1 {
				err = fmt.Errorf("cancelled leases = %v, want the one cancelled task", leases)
			}
			return err
		}},
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run(mode, func(t *testing.T) {
			for _, s := range statements {
				t.Run(s.name, func(t *testing.T) {
					tx, err := f.pool.Begin(t.Context())
					if err != nil {
						t.Fatal(err)
					}
					defer func() { _ = tx.Rollback(t.Context()) }()
					if _, err := tx.Exec(t.Context(), "SET LOCAL plan_cache_mode = "+mode); err != nil {
						t.Fatal(err)
					}
					if err := s.run(tx); err != nil {
						t.Fatalf("%s: %v", s.name, err)
					}
					tables, leaves, indexed := lockedRelations(t, tx)
					t.Logf("%s locks %d tables (%d with rows) and %d indexes", s.name, len(tables), len(leaves), len(indexed))
					if len(tables) > allTables {
						t.Errorf("%s locks %d tables, more than the %d the storage has: %v", s.name, len(tables), allTables, tables)
					}
					// at most every index of every table that holds rows: 9 each
					if max := 9 * (2*buckets + dedicated); len(indexed) > max {
						t.Errorf("%s locks %d indexes, want at most %d", s.name, len(indexed), max)
					}
					if s.perTopic && mode == "force_custom_plan" {
						if len(leaves) > 1 || len(leaves) == 1 && leaves[0] != topic.Table {
							t.Errorf("%s locks the tables %v, want only %s (the topic's)", s.name, leaves, topic.Table)
						}
						for _, table := range indexed {
							if table != topic.Table {
								t.Errorf("%s locks an index of %s, want only indexes of %s", s.name, table, topic.Table)
							}
						}
					}
					if (s.name == "Heartbeat" || s.name == "ExpireStale" || s.name == "PurgeOwners") && len(tables)+len(indexed) > 0 {
						t.Errorf("%s locks task tables %v and indexes of %v; with no stale owner it reads task_owner only", s.name, tables, indexed)
					}
				})
			}
		})
	}
}

// TestDedicate checks Repository.Dedicate (task_topic_dedicate): a topic moves to a table
// of its own with every task intact and keeps working; refusals change nothing.
func TestDedicate(t *testing.T) {
	t.Run("UnknownTopicIsAnErrorAndCreatesNothing", func(t *testing.T) {
		f := setup(t)
		before := tableNames(f)
		_, err := f.repo.Dedicate(f.ctx, f.pool, "no-such-topic")
		if !errors.Is(err, repository.ErrUnknownTopic) || !strings.Contains(err.Error(), `"no-such-topic"`) {
			t.Fatalf("dedicate unknown topic: %v, want ErrUnknownTopic naming it", err)
		}
		if after := tableNames(f); !slices.Equal(after, before) {
			t.Errorf("tables changed: %v → %v", before, after)
		}
		if _, err := f.repo.Dedicate(f.ctx, f.pool, ""); !errors.Is(err, repository.ErrInvalid) {
			t.Errorf("dedicate empty topic name: %v, want ErrInvalid", err)
		}
	})

	t.Run("RunningTopicWithTasksIsRefused", func(t *testing.T) {
		f := setup(t)
		f.push(repository.Append, "a", "b")
		rows := topicRows(f)
		if _, err := f.repo.Dedicate(f.ctx, f.pool, f.topic); !errors.Is(err, repository.ErrTopicInUse) || !strings.Contains(err.Error(), "pause it") {
			t.Fatalf("dedicate a running topic: %v, want ErrTopicInUse saying to pause it", err)
		}
		if err := f.repo.SetActive(f.ctx, f.pool, f.topic, false); err != nil {
			t.Fatal(err)
		}
		f.poll(repository.FIFO, repository.None, 1)
		if _, err := f.repo.Dedicate(f.ctx, f.pool, f.topic); !errors.Is(err, repository.ErrTopicInUse) || !strings.Contains(err.Error(), "1 ACTIVE") {
			t.Fatalf("dedicate a paused topic with an ACTIVE task: %v, want ErrTopicInUse naming 1 ACTIVE task", err)
		}
		if got, err := f.repo.Topic(f.ctx, f.pool, f.topic); err != nil || got.Dedicated {
			t.Errorf("topic after a refused dedicate: dedicated %v, %v; want not dedicated", got.Dedicated, err)
		}
		if got := topicRows(f); len(got) != len(rows) {
			t.Errorf("topic has %d tasks after the refusals, want %d", len(got), len(rows))
		}
	})

	t.Run("MovesEveryTaskAndKeepsWorking", func(t *testing.T) {
		f := setup(t)
		neighbour := sameBucketTopic(f)
		other := f.newRepo("owner-2")
		if _, err := other.Push(f.ctx, f.pool, neighbour, repository.Append, repository.Creation{Identifier: "n"}); err != nil {
			t.Fatal(err)
		}
		f.push(repository.Append, "a", "b", "c", "d")
		done := f.complete(repository.Decision{Result: repository.Failure, Message: "boom"}, f.poll(repository.FIFO, repository.None, 2)...)
		if len(done) != 2 {
			t.Fatalf("completed %d", len(done))
		}
		if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "s", Suspended: true, Reference: "r", Priority: 3}); err != nil {
			t.Fatal(err)
		}
		before := topicRows(f)
		if err := f.repo.SetActive(f.ctx, f.pool, f.topic, false); err != nil {
			t.Fatal(err)
		}
		dedicated, err := f.repo.Dedicate(f.ctx, f.pool, f.topic)
		if err != nil || !dedicated {
			t.Fatalf("dedicate: %v, %v", dedicated, err)
		}
		if again, err := f.repo.Dedicate(f.ctx, f.pool, f.topic); err != nil || again {
			t.Errorf("dedicate twice: %v, %v; want false, nil", again, err)
		}
		topic, err := f.repo.Topic(f.ctx, f.pool, f.topic)
		if err != nil || !topic.Dedicated || !strings.HasPrefix(topic.Table, "task_") || strings.HasSuffix(topic.Table, "_shared") {
			t.Fatalf("topic after dedicate = %+v, %v", topic, err)
		}
		if after := topicRows(f); !slices.Equal(after, before) {
			t.Fatalf("tasks changed by the move:\n%v\n%v", before, after)
		}
		var elsewhere int
		if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task WHERE topic = $1 AND tableoid <> $2::regclass",
			f.topic, topic.Table).Scan(&elsewhere); err != nil || elsewhere != 0 {
			t.Fatalf("tasks of the topic outside its table: %d (%v)", elsewhere, err)
		}
		// It works as before: push, poll (READY left, then the new one), complete.
		if err := f.repo.SetActive(f.ctx, f.pool, f.topic, true); err != nil {
			t.Fatal(err)
		}
		f.push(repository.Append, "e")
		polled := f.poll(repository.FIFO, repository.SingularByIdentifier, 10)
		if got := identifiers(polled); !slices.Equal(got, []string{"c", "d", "e"}) {
			t.Errorf("polled %v after the move, want [c d e]", got)
		}
		f.complete(repository.Decision{Result: repository.Success}, polled...)
		// The topic of the same bucket still works in the shared table.
		tasks, err := other.Poll(f.ctx, f.pool, neighbour, repository.FIFO, repository.None, 10)
		if err != nil || len(tasks) != 1 {
			t.Fatalf("poll the other topic of the bucket: %d, %v", len(tasks), err)
		}
	})

	t.Run("EmptyRunningTopic", func(t *testing.T) {
		f := setup(t)
		if dedicated, err := f.repo.Dedicate(f.ctx, f.pool, f.topic); err != nil || !dedicated {
			t.Fatalf("dedicate an empty topic that is not paused: %v, %v", dedicated, err)
		}
		f.push(repository.Append, "a")
		if got := f.poll(repository.FIFO, repository.None, 1); len(got) != 1 {
			t.Fatalf("polled %d", len(got))
		}
	})

	t.Run("PurgeAllTruncatesAndDestroyDrops", func(t *testing.T) {
		f := setup(t)
		if _, err := f.repo.Dedicate(f.ctx, f.pool, f.topic); err != nil {
			t.Fatal(err)
		}
		topic, err := f.repo.Topic(f.ctx, f.pool, f.topic)
		if err != nil || topic.Table == "" {
			t.Fatalf("the dedicated topic: table %q, %v", topic.Table, err)
		}
		f.push(repository.Append, "a", "b", "c")
		if n, err := f.repo.PurgeAll(f.ctx, f.pool, f.topic); err != nil || n != 3 {
			t.Fatalf("purge all: %d, %v; want 3", n, err)
		}
		f.push(repository.Append, "d")
		if ok, err := f.repo.Destroy(f.ctx, f.pool, f.topic); err != nil || !ok {
			t.Fatalf("destroy: %v, %v", ok, err)
		}
		if slices.Contains(tableNames(f), topic.Table) {
			t.Errorf("table %s still exists after destroy", topic.Table)
		}
		// registered again, the topic is shared
		if _, err := f.repo.CreateTopic(f.ctx, f.pool, f.topic); err != nil {
			t.Fatal(err)
		}
		if again, _ := f.repo.Topic(f.ctx, f.pool, f.topic); again.Dedicated || !strings.HasSuffix(again.Table, "_shared") {
			t.Errorf("registered again: %+v, want a shared topic", again)
		}
	})

	t.Run("DestroyWaitsForABusyBucketASecondAtATime", func(t *testing.T) {
		f := setup(t)
		if _, err := f.repo.Dedicate(f.ctx, f.pool, f.topic); err != nil {
			t.Fatal(err)
		}
		neighbour := sameBucketTopic(f)
		// A transaction that pushed to a topic of the same bucket and stays open holds a
		// lock on the bucket that dropping the dedicated table must wait for.
		busy := func() pgx.Tx {
			tx, err := f.pool.Begin(f.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.repo.Push(f.ctx, tx, neighbour, repository.Append, repository.Creation{Identifier: "n"}); err != nil {
				t.Fatal(err)
			}
			return tx
		}
		// In the caller's transaction: one attempt, refused after lock_timeout.
		tx := busy()
		destroyTx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.repo.Destroy(f.ctx, destroyTx, f.topic); !errors.Is(err, repository.ErrLockTimeout) {
			t.Fatalf("destroy in a transaction while the bucket is busy: %v, want ErrLockTimeout", err)
		}
		_ = destroyTx.Rollback(f.ctx)
		// On a pool: tried again until the bucket is free.
		done := make(chan error, 1)
		go func() {
			_, err := f.repo.Destroy(f.ctx, f.pool, f.topic)
			done <- err
		}()
		f.eventually("the destroy to wait for the bucket's lock", func() bool {
			var waiting bool
			err := f.pool.QueryRow(f.ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
				WHERE NOT l.granted AND a.datname = current_database() AND a.query LIKE '%task_topic_destroy%')`).Scan(&waiting)
			return err == nil && waiting
		})
		select {
		case err := <-done:
			t.Fatalf("destroy returned %v while the bucket was still busy", err)
		default:
		}
		_ = tx.Rollback(f.ctx)
		if err := <-done; err != nil {
			t.Fatalf("destroy once the bucket is free: %v", err)
		}
		if _, err := f.repo.Topic(f.ctx, f.pool, f.topic); !errors.Is(err, repository.ErrUnknownTopic) {
			t.Errorf("topic after the destroy: %v, want unknown", err)
		}
	})
}

// TestDestroySharedTopic checks that a shared topic's tasks go row by row (in batches on
// a pool) and that no other topic waits for it, even while its transaction is open.
func TestDestroySharedTopic(t *testing.T) {
	t.Run("DeletesInBatchesAndLeavesOtherTopics", func(t *testing.T) {
		f := setup(t)
		neighbour := sameBucketTopic(f)
		if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (topic, identifier, state)
			SELECT $1, 'i' || i, i % 9 FROM generate_series(1, 25000) i`, f.topic); err != nil {
			t.Fatal(err)
		}
		other := f.newRepo("owner-2")
		if _, err := other.Push(f.ctx, f.pool, neighbour, repository.Append, repository.Creation{Identifier: "n"}); err != nil {
			t.Fatal(err)
		}
		if n, err := f.repo.PurgeAll(f.ctx, f.pool, f.topic); err != nil || n != 25000 {
			t.Fatalf("purge all: %d, %v; want 25000", n, err)
		}
		f.push(repository.Append, "again")
		if ok, err := f.repo.Destroy(f.ctx, f.pool, f.topic); err != nil || !ok {
			t.Fatalf("destroy: %v, %v", ok, err)
		}
		var left int
		if err := f.pool.QueryRow(f.ctx, "SELECT count(*) FROM task WHERE topic = $1", f.topic).Scan(&left); err != nil || left != 0 {
			t.Fatalf("tasks left: %d (%v)", left, err)
		}
		if tasks, err := other.Poll(f.ctx, f.pool, neighbour, repository.FIFO, repository.None, 10); err != nil || len(tasks) != 1 {
			t.Fatalf("the other topic: %d tasks, %v", len(tasks), err)
		}
		if ok, err := f.repo.Destroy(f.ctx, f.pool, f.topic); err != nil || ok {
			t.Errorf("destroy twice: %v, %v; want false", ok, err)
		}
	})

	t.Run("AFailureAfterBatchesSaysWhatWasDeleted", func(t *testing.T) {
		// The batches commit one by one: when the topic's own deletion then fails (a
		// transaction holds the topic's row, the caller gives up), the error says how
		// many tasks are gone, not the lock timeout's "nothing was changed".
		f := setup(t)
		if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (topic, identifier, state)
			SELECT $1, 'i' || i, 6 FROM generate_series(1, 12000) i`, f.topic); err != nil {
			t.Fatal(err)
		}
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(f.ctx) }()
		if _, err := tx.Exec(f.ctx, "SELECT 1 FROM task_topic WHERE topic = $1 FOR KEY SHARE", f.topic); err != nil {
			t.Fatal(err)
		}
		// the caller gives up while the topic's deletion waits for the lock
		ctx, cancel := context.WithCancel(f.ctx)
		defer cancel()
		go func() {
			defer cancel()
			for {
				waiting, err := lockWaited(ctx, f.pool, "task_topic_destroy")
				if err != nil || waiting {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		ok, err := f.repo.Destroy(ctx, f.pool, f.topic)
		if ok || err == nil || !strings.Contains(err.Error(), "after 12000 of its tasks were deleted") {
			t.Fatalf("destroy with the topic's row held: %v, %v; want an error saying 12000 tasks were deleted", ok, err)
		}
		if !strings.Contains(err.Error(), "unless the statement the cancellation interrupted still ends on the server") {
			t.Errorf("destroy given up by its context: %v; want it to say that its last statement may still end", err)
		}
		// The context's end closed the destroy's connection without cancelling its
		// statement, which waits for the lock until its lock_timeout: the topic
		// remains once the server has given up.
		waitForNoLockWait(t, f.pool, "task_topic_destroy")
		_ = tx.Rollback(f.ctx)
		if _, err := f.repo.Topic(f.ctx, f.pool, f.topic); err != nil {
			t.Errorf("the topic after the failed destroy: %v, want it still there", err)
		}
	})

	t.Run("OtherTopicsNeverWait", func(t *testing.T) {
		f := setup(t)
		neighbour := sameBucketTopic(f)
		f.push(repository.Append, "a", "b", "c")
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(f.ctx) }()
		if ok, err := f.repo.Destroy(f.ctx, tx, f.topic); err != nil || !ok {
			t.Fatalf("destroy in a transaction: %v, %v", ok, err)
		}
		// With the destroy uncommitted, another topic of the same table pushes, polls,
		// completes and is purged without waiting for a lock.
		conn, err := f.pool.Acquire(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if _, err := conn.Exec(f.ctx, "SET lock_timeout = '100ms'"); err != nil {
			t.Fatal(err)
		}
		defer func() { _, _ = conn.Exec(f.ctx, "RESET lock_timeout") }()
		other := f.newRepo("owner-2")
		pushed, err := other.Push(f.ctx, conn, neighbour, repository.Append, repository.Creation{Identifier: "n"})
		if err != nil {
			t.Fatalf("push to another topic during the destroy: %v", err)
		}
		polled, err := other.Poll(f.ctx, conn, neighbour, repository.FIFO, repository.None, 10)
		if err != nil || len(polled) != 1 || polled[0].Sequence != pushed[0].Sequence {
			t.Fatalf("poll another topic during the destroy: %v, %v", polled, err)
		}
		if _, err := other.Complete(f.ctx, conn, neighbour, polled[0].Decide(repository.Decision{Result: repository.Success})); err != nil {
			t.Fatalf("complete during the destroy: %v", err)
		}
		if _, err := other.PurgeAll(f.ctx, conn, neighbour); err != nil {
			t.Fatalf("purge another topic during the destroy: %v", err)
		}
		// Rolled back, the destroyed topic is whole again.
		_ = tx.Rollback(f.ctx)
		if rows := topicRows(f); len(rows) != 3 {
			t.Errorf("tasks after the rolled-back destroy = %d, want 3", len(rows))
		}
	})
}

// TestInitializeInvalidTopicChangesNothing checks topic registration's bad input from Go
// and SQL: a clear error and no row.
func TestInitializeInvalidTopicChangesNothing(t *testing.T) {
	f := setup(t)
	for _, topic := range []string{"", strings.Repeat("t", 251), "bad\xff"} {
		if _, err := f.repo.CreateTopic(f.ctx, f.pool, topic); !errors.Is(err, repository.ErrInvalid) {
			t.Errorf("initialize %.20q: %v, want ErrInvalid", topic, err)
		}
	}
	for _, topic := range []string{"", strings.Repeat("t", 251)} {
		_, err := f.pool.Exec(f.ctx, "SELECT task_topic_create($1)", topic)
		if err == nil || !strings.Contains(err.Error(), "want 1 to 250 characters") {
			t.Errorf("task_topic_create(%.20q): %v, want an error naming the length rule", topic, err)
		}
	}
	if _, err := f.pool.Exec(f.ctx, "SELECT task_topic_create(NULL)"); err == nil || !strings.Contains(err.Error(), "NULL") {
		t.Errorf("task_topic_create(NULL): %v, want an error naming NULL", err)
	}
	topics, err := f.repo.Topics(f.ctx, f.pool)
	if err != nil || len(topics) != 1 {
		t.Errorf("topics after the refusals: %v, %v; want only %q", topics, err, f.topic)
	}
}

// sameBucketTopic registers and returns a topic that lands in the same bucket (shared
// table) as the fixture's.
func sameBucketTopic(f *fixture) string {
	f.t.Helper()
	var want string
	if err := f.pool.QueryRow(f.ctx, "SELECT task_bucket($1)", f.topic).Scan(&want); err != nil {
		f.t.Fatal(err)
	}
	for i := range 1000 {
		name := fmt.Sprintf("neighbour-%d", i)
		var bucket string
		if err := f.pool.QueryRow(f.ctx, "SELECT task_bucket($1)", name).Scan(&bucket); err != nil {
			f.t.Fatal(err)
		}
		if bucket == want {
			if _, err := f.repo.CreateTopic(f.ctx, f.pool, name); err != nil {
				f.t.Fatal(err)
			}
			return name
		}
	}
	f.t.Fatalf("no topic among 1000 shares the bucket %s", want)
	return ""
}

// topicRows returns the fixture topic's tasks as text, in sequence order.
func topicRows(f *fixture) []string {
	f.t.Helper()
	rows, err := f.pool.Query(f.ctx, "SELECT t::text FROM (SELECT * FROM task WHERE topic = $1 ORDER BY sequence) t", f.topic)
	if err != nil {
		f.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

// tableNames lists the task tables, by name.
func tableNames(f *fixture) []string {
	f.t.Helper()
	rows, err := f.pool.Query(f.ctx, "SELECT relname::text FROM pg_class WHERE relkind IN ('r', 'p') AND relname LIKE 'task%' ORDER BY 1")
	if err != nil {
		f.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

// identifiers lists the tasks' identifiers.
func identifiers(tasks []repository.Task) []string {
	out := make([]string, len(tasks))
	for i, t := range tasks {
		out[i] = t.Identifier
	}
	return out
}

// eventually polls cond every 20 ms until it holds, failing the test after 30 s.
func (f *fixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out after 30s waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStatsAll checks that StatsAll gives, in one statement, what Stats gives topic by
// topic, for all topics or the named ones, and that the row estimate follows the topic's
// share of its table once that is analyzed.
func TestStatsAll(t *testing.T) {
	f := setup(t)
	other := f.newRepo("owner-2")
	for _, topic := range []string{"b", "a", "c"} {
		if _, err := f.repo.CreateTopic(f.ctx, f.pool, topic); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (topic, identifier, state, not_before)
		SELECT 'a', 'i' || g, g % 5, CASE WHEN g % 10 = 1 THEN now() + interval '1 hour' END
		FROM generate_series(1, 3000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Push(f.ctx, f.pool, "b", repository.Append, repository.Creation{Identifier: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, "ANALYZE task"); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	all, err := f.repo.StatsAll(f.ctx, f.pool)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range all {
		names = append(names, s.Name)
		want, err := f.repo.Stats(f.ctx, f.pool, s.Name)
		if err != nil {
			t.Fatal(err)
		}
		// the oldest READY task's age grows between the two reads, by at most the time
		// since the first began (and the ages' rounding)
		got := s.Stats
		if d, most := want.OldestReady-got.OldestReady, time.Since(before)+time.Second; d > most || d < -time.Second {
			t.Errorf("StatsAll of %s: oldest READY %v, Stats: %v", s.Name, got.OldestReady, want.OldestReady)
		}
		got.OldestReady = want.OldestReady
		if got != want {
			t.Errorf("StatsAll of %s = %+v, Stats = %+v", s.Name, got, want)
		}
	}
	if want := []string{"a", "b", "c", "topic"}; !slices.Equal(names, want) {
		t.Errorf("StatsAll topics %v, want %v", names, want)
	}
	a := all[0].Stats
	if a.Ready != 600 || a.Delayed != 300 || a.Active != 600 || a.Expired != 600 || a.Failed != 600 || a.Suspended != 600 {
		t.Errorf("stats of a = %+v", a)
	}
	if a.RowsEstimate < 2000 || a.RowsEstimate > 4000 {
		t.Errorf("rows estimate of a (3000 tasks, analyzed) = %d", a.RowsEstimate)
	}
	some, err := f.repo.StatsAll(f.ctx, f.pool, "c", "nope", "b")
	if err != nil || len(some) != 2 || some[0].Name != "b" || some[1].Name != "c" || some[0].Stats.Ready != 1 {
		t.Errorf("StatsAll of c, nope, b = %+v, %v; want b (1 READY) and c", some, err)
	}
}

package repository_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/repository"
)

// listener is a connection listening on the notification channel.
type listener struct {
	t    *testing.T
	conn *pgx.Conn
}

func (f *fixture) listen() *listener {
	f.t.Helper()
	conn, err := pgx.ConnectConfig(f.ctx, f.pool.Config().ConnConfig.Copy())
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(f.ctx, "LISTEN "+repository.NotificationChannel); err != nil {
		f.t.Fatal(err)
	}
	return &listener{t: f.t, conn: conn}
}

// next returns the next notification, parsed (and checked to format back as sent).
func (l *listener) next() repository.Notification {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(l.t.Context(), 10*time.Second)
	defer cancel()
	n, err := l.conn.WaitForNotification(ctx)
	if err != nil {
		l.t.Fatalf("no notification: %v", err)
	}
	parsed, err := repository.ParseNotification(n.Payload)
	if err != nil {
		l.t.Fatal(err)
	}
	if parsed.String() != n.Payload {
		l.t.Errorf("notification %q formats back as %q", n.Payload, parsed.String())
	}
	return parsed
}

// none fails the test if a notification arrives within 200 ms.
func (l *listener) none(after string) {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(l.t.Context(), 200*time.Millisecond)
	defer cancel()
	if n, err := l.conn.WaitForNotification(ctx); err == nil {
		l.t.Errorf("after %s: notified %q, want nothing", after, n.Payload)
	}
}

// drain discards the notifications that arrive within 200 ms.
func (l *listener) drain() {
	l.t.Helper()
	for {
		ctx, cancel := context.WithTimeout(l.t.Context(), 200*time.Millisecond)
		_, err := l.conn.WaitForNotification(ctx)
		cancel()
		if err != nil {
			return
		}
	}
}

// about fails the test unless d is within a second below want (the time a statement
// takes, rounding up to the millisecond).
func about(t *testing.T, what string, d, want time.Duration) {
	t.Helper()
	if d > want || d < want-time.Second {
		t.Errorf("%s = %v, want about %v", what, d, want)
	}
}

// TestWorkNotifications: every write that makes tasks READY notifies their topic with
// the first of them in poll order and, when none is due yet, when the earliest will be.
func TestWorkNotifications(t *testing.T) {
	t.Run("DelayedPushSaysWhenItIsDue", func(t *testing.T) {
		f := setup(t)
		l := f.listen()
		pushed, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append,
			repository.Creation{Identifier: "b", Delay: 2 * time.Hour},
			repository.Creation{Identifier: "a", Delay: time.Hour, Priority: 1})
		if err != nil {
			t.Fatal(err)
		}
		n := l.next()
		if n.From != repository.PositionOf(pushed[0]) {
			t.Errorf("from %+v, want the first in poll order %+v", n.From, repository.PositionOf(pushed[0]))
		}
		about(t, "delay", n.Delay, time.Hour)
		// and when, by the database's clock: the earliest not-before time, rounded up to
		// the millisecond
		if want := time.UnixMilli((pushed[1].NotBefore.UnixMicro() + 999) / 1000); !n.Due.Equal(want) {
			t.Errorf("due %v, want %v (the earliest not-before time %v)", n.Due, want, pushed[1].NotBefore)
		}
	})

	t.Run("PushWithATaskDueNowSaysNoDelay", func(t *testing.T) {
		f := setup(t)
		l := f.listen()
		if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append,
			repository.Creation{Identifier: "later", Delay: time.Hour},
			repository.Creation{Identifier: "now"}); err != nil {
			t.Fatal(err)
		}
		if n := l.next(); n.Delay != 0 {
			t.Errorf("delay %v, want 0", n.Delay)
		}
	})

	t.Run("CompletionsThatMakeTasksReadyNotify", func(t *testing.T) {
		f := setup(t)
		if _, err := f.repo.Configure(f.ctx, f.pool, f.topic, repository.TopicSettings{MaxAttempts: 3, BackoffBase: time.Hour, BackoffCap: time.Hour}); err != nil {
			t.Fatal(err)
		}
		f.push(repository.Append, "ok", "retry", "snooze", "handback")
		tasks, err := f.repo.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 4)
		if err != nil || len(tasks) != 4 {
			t.Fatalf("poll: %v, %v", tasks, err)
		}
		l := f.listen()
		complete := func(c ...repository.Completion) {
			t.Helper()
			if _, err := f.repo.Complete(f.ctx, f.pool, f.topic, c...); err != nil {
				t.Fatal(err)
			}
		}
		complete(tasks[0].Decide(repository.Succeed("")))
		l.none("a success")
		complete(tasks[1].Decide(repository.Fail(errors.New("again"))))
		n := l.next()
		if n.Event != repository.EventWork || n.From != repository.PositionOf(tasks[1]) {
			t.Errorf("retry: notified %+v, want WORK from %+v", n, repository.PositionOf(tasks[1]))
		}
		about(t, "retry's delay", n.Delay, time.Hour)
		about(t, "retry's due time, from now", time.Until(n.Due), time.Hour)
		// a snooze and a hand-back (a snooze of no delay) in one statement: one
		// notification, due at once
		complete(tasks[2].Decide(repository.SnoozeFor(time.Minute)), tasks[3].Decide(repository.SnoozeFor(0)))
		if n := l.next(); n.From != repository.PositionOf(tasks[2]) || n.Delay != 0 {
			t.Errorf("snooze and hand-back: notified %+v, want from %+v without delay", n, repository.PositionOf(tasks[2]))
		}
		l.none("the snooze and hand-back's notification")
	})

	t.Run("ExpiryNotifiesEachTopic", func(t *testing.T) {
		f := setup(t)
		if _, err := f.repo.Initialize(f.ctx, f.pool, "second"); err != nil {
			t.Fatal(err)
		}
		if _, err := f.repo.Configure(f.ctx, f.pool, "second", repository.TopicSettings{MaxAttempts: 2, BackoffBase: time.Hour, BackoffCap: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.repo.Configure(f.ctx, f.pool, f.topic, repository.TopicSettings{MaxAttempts: 2}); err != nil {
			t.Fatal(err)
		}
		// a limited topic whose retried task is not due yet: told without a delay, so that
		// its processors waiting at the limit poll at once (before: the delay, an hour)
		if _, err := f.repo.Initialize(f.ctx, f.pool, "limited"); err != nil {
			t.Fatal(err)
		}
		if _, err := f.repo.Configure(f.ctx, f.pool, "limited", repository.TopicSettings{MaxAttempts: 2, BackoffBase: time.Hour, BackoffCap: time.Hour, Concurrency: 1}); err != nil {
			t.Fatal(err)
		}
		dead := f.newRepo("dead")
		first := f.push(repository.Append, "a", "b")
		if _, err := f.repo.Push(f.ctx, f.pool, "second", repository.Append, repository.Creation{Identifier: "c"}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.repo.Push(f.ctx, f.pool, "limited", repository.Append, repository.Creation{Identifier: "d"}); err != nil {
			t.Fatal(err)
		}
		for _, topic := range []string{f.topic, "second", "limited"} {
			if _, err := dead.Poll(f.ctx, f.pool, topic, repository.FIFO, repository.None, 10); err != nil {
				t.Fatal(err)
			}
		}
		l := f.listen()
		if _, err := f.repo.Expire(f.ctx, f.pool, 0); err != nil {
			t.Fatal(err)
		}
		got := map[string]repository.Notification{}
		for range 3 {
			n := l.next()
			got[n.TopicHash] = n
		}
		if n, ok := got[repository.TopicHash("limited")]; !ok || !n.From.IsZero() || n.Delay != 0 {
			t.Errorf("expiry with a backoff on a limited topic: notified %+v (%v), want the topic without position or delay", n, ok)
		}
		if n := got[repository.TopicHash(f.topic)]; n.From != repository.PositionOf(first[0]) || n.Delay != 0 {
			t.Errorf("expiry without backoff: notified %+v, want from %+v without delay", n, repository.PositionOf(first[0]))
		}
		about(t, "expiry with a backoff: delay", got[repository.TopicHash("second")].Delay, time.Hour)
		about(t, "expiry with a backoff: due time, from now", time.Until(got[repository.TopicHash("second")].Due), time.Hour)
	})

	t.Run("SQLPushJunctionAndResetSayWhere", func(t *testing.T) {
		f := setup(t)
		l := f.listen()
		var seq int64
		if err := f.pool.QueryRow(f.ctx, "SELECT task_push('topic', 'sql', priority => 3)").Scan(&seq); err != nil {
			t.Fatal(err)
		}
		if n := l.next(); n.From != (repository.Position{Priority: 3, Sequence: seq}) || n.Delay != 0 {
			t.Errorf("SQL push: notified %+v, want from 3/%d without delay", n, seq)
		}
		if err := f.pool.QueryRow(f.ctx, "SELECT task_push('topic', 'sql-later', delay => '1 hour')").Scan(&seq); err != nil {
			t.Fatal(err)
		}
		n := l.next()
		if n.From != (repository.Position{Sequence: seq}) {
			t.Errorf("delayed SQL push: notified from %+v, want 0/%d", n.From, seq)
		}
		about(t, "delayed SQL push's delay", n.Delay, time.Hour)
		about(t, "delayed SQL push's due time, from now", time.Until(n.Due), time.Hour)
		// REPLACE inserts earlier duplicates REDUNDANT: the position is the READY one's
		rows, err := f.pool.Query(f.ctx, "SELECT * FROM task_push_batch('topic', ARRAY['d', 'd'], insertion => 'replace')")
		if err != nil {
			t.Fatal(err)
		}
		seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(seqs) != 2 {
			t.Fatalf("task_push_batch: %v, %v", seqs, err)
		}
		if n := l.next(); n.From != (repository.Position{Sequence: seqs[1]}) {
			t.Errorf("REPLACE push from SQL: notified from %+v, want the READY task 0/%d", n.From, seqs[1])
		}
		if _, err := f.pool.Exec(f.ctx, "SELECT task_push('topic', 'held', suspended => true)"); err != nil {
			t.Fatal(err)
		}
		l.none("a suspended push from SQL")

		pushed, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append,
			repository.Creation{Identifier: "j", Suspended: true, Priority: 2}, repository.Creation{Identifier: "j", Suspended: true, Priority: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.repo.Junction(f.ctx, f.pool, f.topic, repository.Singular, []string{"j"}); err != nil {
			t.Fatal(err)
		}
		if n := l.next(); n.From != repository.PositionOf(pushed[1]) {
			t.Errorf("junction: notified from %+v, want the first released in poll order %+v", n.From, repository.PositionOf(pushed[1]))
		}
		leased, err := f.repo.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 1)
		if err != nil || len(leased) != 1 {
			t.Fatalf("poll: %v, %v", leased, err)
		}
		if _, err := f.repo.Complete(f.ctx, f.pool, f.topic, leased[0].Decide(repository.Fail(errors.New("no")))); err != nil {
			t.Fatal(err)
		}
		if _, err := f.repo.Configure(f.ctx, f.pool, f.topic, repository.TopicSettings{MaxAttempts: 1}); err != nil {
			t.Fatal(err)
		}
		for {
			// the failure's retry (the default policy retries) is not what this checks
			got, err := f.repo.Get(f.ctx, f.pool, f.topic, leased[0].Sequence)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != repository.Ready {
				break
			}
			again, err := f.repo.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 1)
			if err != nil || len(again) != 1 {
				t.Fatalf("poll: %v, %v", again, err)
			}
			if _, err := f.repo.Complete(f.ctx, f.pool, f.topic, again[0].Decide(repository.Fail(errors.New("no")))); err != nil {
				t.Fatal(err)
			}
		}
		l.drain()
		if _, err := f.repo.Recreate(f.ctx, f.pool, f.topic, repository.Reset, leased[0].Sequence); err != nil {
			t.Fatal(err)
		}
		if n := l.next(); n.From != repository.PositionOf(leased[0]) {
			t.Errorf("reset: notified from %+v, want %+v", n.From, repository.PositionOf(leased[0]))
		}
	})

	t.Run("ParseDelay", func(t *testing.T) {
		for _, tc := range []struct {
			payload string
			want    time.Duration
			ok      bool
		}{
			{"WORK " + repository.TopicHash("t") + " 0 42 1500", 1500 * time.Millisecond, true},
			{"WORK " + repository.TopicHash("t") + " 0 42 0", 0, true},
			{"WORK " + repository.TopicHash("t") + " 0 42 99999999999999999", 100 * 365 * 24 * time.Hour, true},
			// the sender reads the clock twice (is it due? how long until?): a backend
			// paused between the two writes a negative delay of a task now due; the
			// notification was refused whole, and the wake-up lost
			{"WORK " + repository.TopicHash("t") + " 0 42 -5 1700000000007", 0, true},
			{"WORK " + repository.TopicHash("t") + " 0 42 -5", 0, true},
			{"WORK " + repository.TopicHash("t") + " 0 42 soon", 0, false},
			{"WORK " + repository.TopicHash("t") + " 0 42 7 1700000000007 later-field", 7 * time.Millisecond, true},
			{"WORK " + repository.TopicHash("t") + " 0 42 7 later", 0, false},
			{"WORK " + repository.TopicHash("t") + " 0 42 7 0", 0, false},
			{"WORK " + repository.TopicHash("t") + " 0 42 7 -1700000000007", 0, false},
		} {
			n, err := repository.ParseNotification(tc.payload)
			if (err == nil) != tc.ok || err == nil && n.Delay != tc.want {
				t.Errorf("ParseNotification(%q) = %+v, %v; want delay %v, ok %v", tc.payload, n, err, tc.want, tc.ok)
			}
		}
	})

	t.Run("ParseDue", func(t *testing.T) {
		for _, tc := range []struct {
			payload string
			want    time.Time
		}{
			{"WORK " + repository.TopicHash("t") + " 0 42 7 1700000000007", time.UnixMilli(1700000000007)},
			{"WORK " + repository.TopicHash("t") + " 0 42 7", time.Time{}},
			// past the year 9999: not soon, the delay alone counts
			{"WORK " + repository.TopicHash("t") + " 0 42 7 253402300800001", time.Time{}},
		} {
			n, err := repository.ParseNotification(tc.payload)
			if err != nil || !n.Due.Equal(tc.want) {
				t.Errorf("ParseNotification(%q) = %+v, %v; want due %v", tc.payload, n, err, tc.want)
			}
		}
	})
}

// TestNextDue: the probe finds the earliest READY task not due yet, of its topic only,
// or one that fell due since the poll it follows began, and nothing when there is none.
func TestNextDue(t *testing.T) {
	f := setup(t)
	next := func(topic string) (repository.Due, bool) {
		t.Helper()
		d, ok, err := f.repo.NextDue(f.ctx, f.pool, topic, 0)
		if err != nil {
			t.Fatal(err)
		}
		return d, ok
	}
	if d, ok := next(f.topic); ok {
		t.Errorf("empty topic: next due in %v, want none", d)
	}
	if _, err := f.repo.Initialize(f.ctx, f.pool, "other"); err != nil {
		t.Fatal(err)
	}
	at := map[string]repository.Position{}
	for _, c := range []struct {
		topic string
		c     repository.Creation
	}{
		{f.topic, repository.Creation{Identifier: "now"}},
		{f.topic, repository.Creation{Identifier: "held", Suspended: true, Delay: time.Minute}},
		{f.topic, repository.Creation{Identifier: "hour", Delay: time.Hour}},
		{f.topic, repository.Creation{Identifier: "day", Delay: 24 * time.Hour}},
		{"other", repository.Creation{Identifier: "soon", Delay: time.Second}},
	} {
		pushed, err := f.repo.Push(f.ctx, f.pool, c.topic, repository.Append, c.c)
		if err != nil {
			t.Fatal(err)
		}
		at[c.c.Identifier] = repository.PositionOf(pushed[0])
	}
	d, ok := next(f.topic)
	if !ok {
		t.Fatal("no next due task, want the one delayed by an hour")
	}
	about(t, "next due", d.Delay, time.Hour)
	if d.At != at["hour"] {
		t.Errorf("next due at %+v, want the position of the task delayed by an hour, %+v", d.At, at["hour"])
	}

	// A task that fell due a minute ago: due for a poll that began two minutes ago, not
	// for one that began now (it was there for that poll to lease).
	if _, err := f.pool.Exec(f.ctx, `UPDATE task SET not_before = now() - interval '1 minute'
		WHERE topic = $1 AND identifier = 'hour'`, f.topic); err != nil {
		t.Fatal(err)
	}
	if d, ok, err := f.repo.NextDue(f.ctx, f.pool, f.topic, 2*time.Minute); err != nil || !ok || d.Delay != 0 || d.At != at["hour"] {
		t.Errorf("next due since two minutes ago = %+v, %v, %v; want 0 (due) at %+v", d, ok, err, at["hour"])
	}
	d, ok = next(f.topic)
	if !ok {
		t.Fatal("no next due task, want the one delayed by a day")
	}
	about(t, "next due after the one that fell due", d.Delay, 24*time.Hour)

	if _, _, err := f.repo.NextDue(f.ctx, f.pool, "", 0); !errors.Is(err, repository.ErrInvalid) {
		t.Errorf("next due of an empty topic name: %v, want ErrInvalid", err)
	}
	if _, _, err := f.repo.NextDue(f.ctx, f.pool, f.topic, -time.Second); !errors.Is(err, repository.ErrInvalid) {
		t.Errorf("next due since a negative time: %v, want ErrInvalid", err)
	}
}

// TestNextDueReadsTheDelayedIndex: the probe reads task_delayed from the topic's next
// due time on, not the topic's READY tasks: with 10 000 of them due and 10 000 delayed in
// the topic, it reads one index entry.
func TestNextDueReadsTheDelayedIndex(t *testing.T) {
	f := setup(t)
	if _, err := f.pool.Exec(f.ctx, `
		INSERT INTO task (topic, identifier, state, descent, not_before)
		SELECT $1, 'filler-' || i, 1, 1,
		       CASE WHEN i % 2 = 0 THEN now() - i * interval '1 second' ELSE now() + i * interval '1 minute' END
		FROM generate_series(1, 20000) i`, f.topic); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, "ANALYZE task"); err != nil {
		t.Fatal(err)
	}
	checker := newPlanChecker(f)
	conn, capture := explainedConn(f)
	if _, err := conn.Exec(f.ctx, "SET auto_explain.log_analyze = on"); err != nil {
		t.Fatal(err)
	}
	d, ok, err := f.repo.NextDue(f.ctx, conn, f.topic, 0)
	// the first delayed task falls due a minute after the insert: the setup above takes
	// less, even on a loaded machine
	if err != nil || !ok || d.Delay > time.Minute || d.At.Sequence != 1 {
		t.Fatalf("next due = %v, %v, %v; want task 1 within a minute", d, ok, err)
	}
	plans := capture.take(t)
	if len(plans) == 0 {
		t.Fatal("auto_explain reported no plan: the capture is broken")
	}
	used := checker.scans(plans, func(n planNode, ix partitionIndex) bool { return ix.parent == "task_delayed" })
	if len(used) != 1 {
		t.Errorf("the probe reads %v, want task_delayed\nplan: %s", used, plans[0].raw)
	}
	for _, p := range plans {
		if v := checker.violations(p); len(v) > 0 {
			t.Errorf("the probe reads the topic's table in full: %v\nplan: %s", v, p.raw)
		}
	}
}

// TestNextDueReadsTheDelayedIndexWhateverTheStatistics: statistics taken while the
// topic had no READY task (all finished) made the planner read task_ready for the probe,
// every READY entry of the topic (migration 000019 fixed it); the probe still reads
// task_delayed.
func TestNextDueReadsTheDelayedIndexWhateverTheStatistics(t *testing.T) {
	f := setup(t)
	// As a processor's topic goes: a backlog analyzed, then worked off with many more
	// pushed and done, then vacuumed and analyzed with none READY; then a new backlog.
	for _, q := range []string{
		`SELECT count(*) FROM task_push_batch($1, (SELECT array_agg('a' || g) FROM generate_series(1, 5000) g))`,
		"ANALYZE task",
		"UPDATE task SET state = 6, completed = now() WHERE topic = $1",
		`SELECT count(*) FROM task_push_batch($1, (SELECT array_agg('b' || g) FROM generate_series(1, 200000) g))`,
		"UPDATE task SET state = 6, completed = now() WHERE topic = $1",
		"VACUUM ANALYZE task",
		`SELECT count(*) FROM task_push_batch($1, (SELECT array_agg('c' || g) FROM generate_series(1, 1000) g))`,
		`SELECT task_push($1, 'later', delay => '1 hour')`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = []any{f.topic}
		}
		if _, err := f.pool.Exec(f.ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	checker := newPlanChecker(f)
	conn, capture := explainedConn(f)
	// the custom plans of the first executions and the generic one after them
	for range 7 {
		d, ok, err := f.repo.NextDue(f.ctx, conn, f.topic, 0)
		if err != nil || !ok || d.Delay < 59*time.Minute {
			t.Fatalf("next due = %v, %v, %v; want the task an hour from now", d, ok, err)
		}
	}
	plans := capture.take(t)
	if len(plans) == 0 {
		t.Fatal("auto_explain reported no plan: the capture is broken")
	}
	probes := 0
	for _, p := range plans {
		if !strings.Contains(p.Query, "ORDER BY t.not_before") {
			continue // the call of the function, not its statement
		}
		probes++
		used := checker.scans([]loggedPlan{p}, func(planNode, partitionIndex) bool { return true })
		if !slices.Equal(used, []string{"task_delayed"}) {
			t.Errorf("the probe reads %v, want task_delayed only\nplan: %s", used, p.raw)
		}
	}
	if probes == 0 {
		t.Fatalf("no plan of the probe's statement among %d", len(plans))
	}
}

// TestFirstReady: the first READY task that is due, in FIFO poll order, of its topic
// only, without locking it.
func TestFirstReady(t *testing.T) {
	f := setup(t)
	first := func() (repository.Position, bool) {
		t.Helper()
		at, ok, err := f.repo.FirstReady(f.ctx, f.pool, f.topic)
		if err != nil {
			t.Fatal(err)
		}
		return at, ok
	}
	if at, ok := first(); ok {
		t.Errorf("empty topic: first ready at %+v, want none", at)
	}
	if _, err := f.repo.Initialize(f.ctx, f.pool, "other"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.repo.Push(f.ctx, f.pool, "other", repository.Append, repository.Creation{Identifier: "x", Priority: -9}); err != nil {
		t.Fatal(err)
	}
	pushed, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append,
		repository.Creation{Identifier: "later", Priority: -5, Delay: time.Hour},
		repository.Creation{Identifier: "held", Priority: -5, Suspended: true},
		repository.Creation{Identifier: "b", Priority: 1},
		repository.Creation{Identifier: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if at, ok := first(); !ok || at != repository.PositionOf(pushed[3]) {
		t.Errorf("first ready = %+v, %v; want %+v", at, ok, repository.PositionOf(pushed[3]))
	}
	// a poll holding it locked in another transaction does not hide it, nor block
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(f.ctx, "SELECT 1 FROM task WHERE topic = $1 AND sequence = $2 FOR UPDATE", f.topic, pushed[3].Sequence); err != nil {
		t.Fatal(err)
	}
	if at, ok := first(); !ok || at != repository.PositionOf(pushed[3]) {
		t.Errorf("first ready while locked = %+v, %v; want %+v", at, ok, repository.PositionOf(pushed[3]))
	}
	if _, _, err := f.repo.FirstReady(f.ctx, f.pool, ""); !errors.Is(err, repository.ErrInvalid) {
		t.Errorf("first ready of an empty topic name: %v, want ErrInvalid", err)
	}
}

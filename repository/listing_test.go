package repository_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/repository"
)

func topicNames(topics []repository.Topic) []string {
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.Name
	}
	return names
}

func TestTopicPage(t *testing.T) {
	f := setup(t)
	for _, name := range []string{"Mail-EU", "mail-us", "billing", "zeta"} {
		f.createTopic(name)
	}
	page := func(search, after string, size int) []string {
		t.Helper()
		topics, err := f.repo.TopicPage(f.ctx, f.pool, search, after, size)
		if err != nil {
			t.Fatalf("TopicPage(%q, %q, %d): %v", search, after, size, err)
		}
		return topicNames(topics)
	}
	t.Run("KeysetPagesByName", func(t *testing.T) {
		first := page("", "", 2)
		if want := []string{"Mail-EU", "billing"}; !slices.Equal(first, want) {
			t.Fatalf("first page = %q, want %q", first, want)
		}
		if got, want := page("", first[1], 10), []string{"mail-us", "topic", "zeta"}; !slices.Equal(got, want) {
			t.Fatalf("second page = %q, want %q", got, want)
		}
	})
	t.Run("SearchIgnoresCase", func(t *testing.T) {
		if got, want := page("MAIL", "", 10), []string{"Mail-EU", "mail-us"}; !slices.Equal(got, want) {
			t.Fatalf("search = %q, want %q", got, want)
		}
		if got := page("%", "", 10); len(got) != 0 {
			t.Fatalf("search %% = %q, want none (no pattern characters)", got)
		}
	})
	t.Run("SizeOutOfRange", func(t *testing.T) {
		for _, size := range []int{0, repository.TopicPageMax + 1} {
			if _, err := f.repo.TopicPage(f.ctx, f.pool, "", "", size); !errors.Is(err, repository.ErrInvalid) {
				t.Fatalf("size %d: err = %v, want ErrInvalid", size, err)
			}
		}
	})
}

func TestOwners(t *testing.T) {
	f := setup(t)
	f.newRepo("owner-2")
	f.push(repository.Append, "a", "b")
	f.poll(repository.FIFO, repository.None, 1) // owner-1 leases a
	if _, err := f.pool.Exec(f.ctx, "UPDATE task_owner SET heartbeat = now() - interval '1 hour' WHERE owner = 'owner-2'"); err != nil {
		t.Fatal(err)
	}
	owners, err := f.repo.Owners(f.ctx, f.pool, time.Minute, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(owners) != 2 {
		t.Fatalf("owners = %+v, want 2", owners)
	}
	if o := owners[0]; o.Name != "owner-1" || !o.Alive || o.Leased != 1 || !slices.Equal(o.Topics, []string{"topic"}) {
		t.Fatalf("first owner = %+v, want owner-1 alive leasing 1", o)
	}
	if o := owners[1]; o.Name != "owner-2" || o.Alive || o.Leased != 0 || len(o.Topics) != 0 {
		t.Fatalf("second owner = %+v, want owner-2 dead leasing 0", o)
	}
	if _, err := f.repo.Owners(f.ctx, f.pool, -time.Second, 10); !errors.Is(err, repository.ErrInvalid) {
		t.Fatalf("negative timeout: err = %v, want ErrInvalid", err)
	}
}

// TestOwnerLive: whether one owner heart-beats, by the terms LiveOwners lists them by: a
// silent owner is dead unless the expiry timeout it declares is longer than its silence;
// an unknown name is dead.
func TestOwnerLive(t *testing.T) {
	f := setup(t)
	f.newRepo("owner-2")
	f.newRepo("owner-3")
	if _, err := f.pool.Exec(f.ctx, `UPDATE task_owner SET heartbeat = now() - interval '1 hour' WHERE owner = 'owner-2';
		UPDATE task_owner SET heartbeat = now() - interval '1 hour', expiry_ms = 7200000 WHERE owner = 'owner-3'`); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"owner-1": true, "owner-2": false, "owner-3": true, "nobody": false} {
		if live, err := f.repo.OwnerLive(f.ctx, f.pool, name, time.Minute); err != nil || live != want {
			t.Errorf("OwnerLive(%s) = %v, %v; want %v", name, live, err, want)
		}
	}
	if _, err := f.repo.OwnerLive(f.ctx, f.pool, "owner-1", -time.Second); !errors.Is(err, repository.ErrInvalid) {
		t.Errorf("a negative timeout: %v, want ErrInvalid", err)
	}
}

// TestHeartbeatRow: a heartbeat of the row as this process registered it writes it; once
// another process of the name has claimed the row, it writes nothing and says so, and a
// row gone says so too. Hosts and pids left empty (NULL) compare equal.
func TestHeartbeatRow(t *testing.T) {
	f := setup(t)
	for _, cfg := range []repository.Config{{Owner: "pod-0", Host: "host-a", PID: 42}, {Owner: "anonymous"}} {
		repo, err := repository.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := repo.RegisterOwner(f.ctx, f.pool); err != nil {
			t.Fatal(err)
		}
		if _, err := f.pool.Exec(f.ctx, "UPDATE task_owner SET heartbeat = now() - interval '90 seconds' WHERE owner = $1", cfg.Owner); err != nil {
			t.Fatal(err)
		}
		if cfg.Owner == "anonymous" {
			// as a row written before the columns, or by hand
			if _, err := f.pool.Exec(f.ctx, "UPDATE task_owner SET host = NULL, pid = NULL WHERE owner = $1", cfg.Owner); err != nil {
				t.Fatal(err)
			}
		}
		own, _, err := repo.RegisteredOwner(f.ctx, f.pool)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := repo.HeartbeatRow(f.ctx, f.pool, own); err != nil || !ok {
			t.Fatalf("%s: a heartbeat of its own row: %v, %v; want written", cfg.Owner, ok, err)
		}
		if _, silent, err := repo.RegisteredOwner(f.ctx, f.pool); err != nil || silent > 10*time.Second {
			t.Fatalf("%s: silent %v after its heartbeat (%v)", cfg.Owner, silent, err)
		}
		// another process of the name claims the row (its host and pid, a new start)
		successor, err := repository.New(repository.Config{Owner: cfg.Owner, Host: "host-b", PID: 43})
		if err != nil {
			t.Fatal(err)
		}
		seen, _, err := successor.RegisteredOwner(f.ctx, f.pool)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := successor.ClaimOwner(f.ctx, f.pool, seen.Heartbeat); err != nil || !ok {
			t.Fatalf("%s: claim: %v, %v", cfg.Owner, ok, err)
		}
		if ok, err := repo.HeartbeatRow(f.ctx, f.pool, own); err != nil || ok {
			t.Fatalf("%s: a heartbeat of the row claimed by another: %v, %v; want nothing written", cfg.Owner, ok, err)
		}
		// a replacement of the same host and pid (a pod restarted: pid 1 again) whose
		// claim changed the start time alone
		if _, err := f.pool.Exec(f.ctx, "UPDATE task_owner SET host = NULLIF($2, ''), pid = NULLIF($3, 0), started = started + interval '1 second' WHERE owner = $1",
			cfg.Owner, own.Host, own.PID); err != nil {
			t.Fatal(err)
		}
		if ok, err := repo.HeartbeatRow(f.ctx, f.pool, own); err != nil || ok {
			t.Fatalf("%s: a heartbeat of the row claimed by a process of the same host and pid: %v, %v; want nothing written", cfg.Owner, ok, err)
		}
		if row, _, err := repo.RegisteredOwner(f.ctx, f.pool); err != nil || row.Host != own.Host || !row.Heartbeat.Equal(time.Unix(0, 0)) {
			t.Fatalf("%s: the row after the refused heartbeat: %+v, %v; want the claim's, its heartbeat untouched", cfg.Owner, row, err)
		}
		if _, err := f.pool.Exec(f.ctx, "DELETE FROM task_owner WHERE owner = $1", cfg.Owner); err != nil {
			t.Fatal(err)
		}
		if ok, err := repo.HeartbeatRow(f.ctx, f.pool, own); err != nil || ok {
			t.Fatalf("%s: a heartbeat of a row gone: %v, %v; want nothing written", cfg.Owner, ok, err)
		}
	}
}

// TestRegisteredOwner: an owner reads its own row, with how long its heartbeat has been
// silent; an owner without a row gets ErrNotRegistered. ClaimOwner takes the row over
// only while its heartbeat is the one read.
func TestRegisteredOwner(t *testing.T) {
	f := setup(t)
	repo, err := repository.New(repository.Config{Owner: "pod-0", Host: "host-a", PID: 42})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := repo.RegisteredOwner(f.ctx, f.pool); !errors.Is(err, repository.ErrNotRegistered) {
		t.Fatalf("before registering: err = %v, want ErrNotRegistered", err)
	}
	if _, err := repo.RegisterOwner(f.ctx, f.pool); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, "UPDATE task_owner SET heartbeat = now() - interval '90 seconds' WHERE owner = 'pod-0'"); err != nil {
		t.Fatal(err)
	}
	o, silent, err := repo.RegisteredOwner(f.ctx, f.pool)
	if err != nil {
		t.Fatal(err)
	}
	if o.Name != "pod-0" || o.Host != "host-a" || o.PID != 42 || silent < 90*time.Second || silent > 100*time.Second {
		t.Fatalf("owner %+v silent %v; want pod-0 of host-a, pid 42, silent 90 s", o, silent)
	}

	// Another process of the name takes the row over, if its heartbeat is the one seen.
	successor, err := repository.New(repository.Config{Owner: "pod-0", Host: "host-b", PID: 43})
	if err != nil {
		t.Fatal(err)
	}
	if claimed, err := successor.ClaimOwner(f.ctx, f.pool, o.Heartbeat.Add(time.Microsecond)); err != nil || claimed {
		t.Fatalf("claim with a heartbeat not the row's: %v, %v; want false", claimed, err)
	}
	if again, _, err := repo.RegisteredOwner(f.ctx, f.pool); err != nil || again.Host != "host-a" || !again.Heartbeat.Equal(o.Heartbeat) {
		t.Fatalf("after a refused claim: %+v, %v; want the row unchanged", again, err)
	}
	if claimed, err := successor.ClaimOwner(f.ctx, f.pool, o.Heartbeat); err != nil || !claimed {
		t.Fatalf("claim with the row's heartbeat: %v, %v; want true", claimed, err)
	}
	after, silent, err := repo.RegisteredOwner(f.ctx, f.pool)
	if err != nil || after.Host != "host-b" || after.PID != 43 || silent < 24*time.Hour || !after.Started.After(o.Started) {
		t.Fatalf("after the claim: %+v silent %v, %v; want host-b, pid 43, silent for ages, started again", after, silent, err)
	}
	if err := repo.Heartbeat(f.ctx, f.pool); err != nil {
		t.Fatalf("heartbeat after the claim: %v", err)
	}
	if claimed, err := successor.ClaimOwner(f.ctx, f.pool, after.Heartbeat); err != nil || claimed {
		t.Fatalf("claim after a heartbeat: %v, %v; want false", claimed, err)
	}
}

// TestClaimOwnerWhileAnotherTakesOver: two processes take one silent owner row over at
// once, each in a transaction with the heartbeat that makes it live again: the second
// waits for the first's commit, finds the heartbeat moved, and takes nothing.
func TestClaimOwnerWhileAnotherTakesOver(t *testing.T) {
	f := setup(t)
	crashed := f.newRepo("pod-0")
	o, _, err := crashed.RegisteredOwner(f.ctx, f.pool)
	if err != nil {
		t.Fatal(err)
	}
	first, err := repository.New(repository.Config{Owner: "pod-0", Host: "first"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := repository.New(repository.Config{Owner: "pod-0", Host: "second"})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(f.ctx)
	if claimed, err := first.ClaimOwner(f.ctx, tx, o.Heartbeat); err != nil || !claimed {
		t.Fatalf("the first claim: %v, %v", claimed, err)
	}
	type result struct {
		claimed bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		claimed, err := second.ClaimOwner(f.ctx, f.pool, o.Heartbeat)
		done <- result{claimed, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("the second claim returned %v, %v before the first committed; want it to wait", r.claimed, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := first.Heartbeat(f.ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.claimed {
		t.Fatalf("the second claim: %v, %v; want false", r.claimed, r.err)
	}
	if now, silent, err := first.RegisteredOwner(f.ctx, f.pool); err != nil || now.Host != "first" || silent > time.Minute {
		t.Fatalf("the row: %+v silent %v, %v; want the first's, live", now, silent, err)
	}
}

func TestTimeline(t *testing.T) {
	f := setup(t)
	first := f.push(repository.Append, "a")[0]
	f.push(repository.Append, "b")
	leased := f.poll(repository.FIFO, repository.None, 1)[0] // a@first becomes ACTIVE
	second := f.push(repository.Append, "a")[0]
	third := f.push(repository.Replace, "a")[0] // second (READY) becomes REDUNDANT
	f.complete(repository.Fail(errors.New("boom")), leased)
	timeline := func(identifier string, before int64, size int) []repository.Excerpt {
		t.Helper()
		got, err := f.repo.Timeline(f.ctx, f.pool, f.topic, identifier, before, size)
		if err != nil {
			t.Fatalf("Timeline(%q, %d): %v", identifier, size, err)
		}
		return got
	}
	t.Run("EveryTaskOfTheIdentifierNewestFirst", func(t *testing.T) {
		got := timeline("a", repository.MaxSequence, 10)
		want := []struct {
			seq   int64
			state repository.State
		}{{third.Sequence, repository.Ready}, {second.Sequence, repository.Redundant}, {first.Sequence, repository.Failed}}
		if len(got) != len(want) {
			t.Fatalf("timeline = %d tasks, want %d", len(got), len(want))
		}
		for i, w := range want {
			if got[i].Sequence != w.seq || got[i].State != w.state {
				t.Errorf("timeline[%d] = #%d %s, want #%d %s", i, got[i].Sequence, got[i].State, w.seq, w.state)
			}
		}
		if got[2].Errors[0] != "boom" {
			t.Errorf("errors = %q", got[2].Errors)
		}
	})
	t.Run("TheLatestSize", func(t *testing.T) {
		if got := timeline("a", repository.MaxSequence, 2); len(got) != 2 || got[0].Sequence != third.Sequence {
			t.Fatalf("timeline of 2 = %v", got)
		}
	})
	t.Run("BeforeACursor", func(t *testing.T) {
		if got := timeline("a", third.Sequence, 10); len(got) != 2 || got[0].Sequence != second.Sequence {
			t.Fatalf("timeline before #%d = %v", third.Sequence, got)
		}
	})
	t.Run("BadArguments", func(t *testing.T) {
		if _, err := f.repo.Timeline(f.ctx, f.pool, "nope", "a", repository.MaxSequence, 10); !errors.Is(err, repository.ErrUnknownTopic) {
			t.Errorf("unknown topic: %v", err)
		}
		if _, err := f.repo.Timeline(f.ctx, f.pool, f.topic, "", repository.MaxSequence, 10); !errors.Is(err, repository.ErrInvalid) {
			t.Errorf("empty identifier: %v", err)
		}
		if _, err := f.repo.Timeline(f.ctx, f.pool, f.topic, "a", repository.MaxSequence, 0); !errors.Is(err, repository.ErrInvalid) {
			t.Errorf("size 0: %v", err)
		}
	})
}

// TestLatest checks Latest, and Excerpts in both directions, against Page, which walks
// the topic's sequences, for every kind of filter: those read through an index of their
// own (indexPath) and those that walk.
func TestLatest(t *testing.T) {
	f := setup(t)
	var creations []repository.Creation
	for i := range 40 {
		// three priorities: READY alone is read a priority at a time
		c := repository.Creation{Identifier: []string{"a", "b", "c"}[i%3], Suspended: i%7 == 0, Priority: int16(i%5%3 - 1)}
		if i%2 == 1 {
			c.Reference = []string{"r0", "r1"}[i%4/2]
		}
		creations = append(creations, c)
	}
	if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, creations...); err != nil {
		t.Fatal(err)
	}
	f.push(repository.Append, "a")
	f.push(repository.Replace, "a") // the READY a's before it become REDUNDANT
	polled := f.poll(repository.LIFO, repository.None, 12)
	f.push(repository.Append, "a") // a READY a, which polls leave alone below
	ready := repository.Ready
	if page, err := f.repo.Page(f.ctx, f.pool, f.topic, repository.TaskFilter{State: &ready, Identifier: "a"},
		repository.MinSequence, 5, repository.Forward); err != nil || len(page) == 0 {
		t.Fatalf("READY tasks of a: %v, %v; the filters below want some", page, err)
	}
	f.complete(repository.Fail(errors.New("boom")), polled[:4]...)
	f.complete(repository.Succeed("ok"), polled[4:8]...) // 8..11 stay ACTIVE
	mid := polled[6].Sequence
	states := []*repository.State{nil}
	for _, s := range repository.States() {
		states = append(states, &s)
	}
	walk := func(filter repository.TaskFilter, cursor int64, direction repository.Direction) []int64 {
		t.Helper()
		page, err := f.repo.Page(f.ctx, f.pool, f.topic, filter, cursor, 5, direction)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]int64, len(page))
		for i, task := range page {
			out[i] = task.Sequence
		}
		return out
	}
	for _, state := range states {
		for _, identifier := range []string{"", "a"} {
			for _, reference := range []string{"", "r1"} {
				filter := repository.TaskFilter{State: state, Identifier: identifier, Reference: reference}
				for _, before := range []int64{repository.MaxSequence, mid} {
					want := walk(filter, before, repository.Backward)
					got, err := f.repo.Latest(f.ctx, f.pool, f.topic, filter, before, 5)
					if err != nil {
						t.Fatalf("Latest(%+v, %d): %v", filter, before, err)
					}
					if !slices.Equal(excerptSequences(got), want) {
						t.Errorf("Latest(state %v, identifier %q, reference %q, before %d) = %v, want %v",
							state, identifier, reference, before, excerptSequences(got), want)
					}
				}
				for _, direction := range []repository.Direction{repository.Forward, repository.Backward} {
					cursors := []int64{repository.MaxSequence, mid}
					if direction == repository.Forward {
						cursors = []int64{repository.MinSequence, mid}
					}
					for _, cursor := range cursors {
						want := walk(filter, cursor, direction)
						got, err := f.repo.Excerpts(f.ctx, f.pool, f.topic, filter, cursor, 5, direction)
						if err != nil {
							t.Fatalf("Excerpts(%+v, %d, %v): %v", filter, cursor, direction, err)
						}
						if !slices.Equal(excerptSequences(got), want) {
							t.Errorf("Excerpts(state %v, identifier %q, reference %q, cursor %d, direction %v) = %v, want %v",
								state, identifier, reference, cursor, direction, excerptSequences(got), want)
						}
					}
				}
			}
		}
	}
	if _, err := f.repo.Latest(f.ctx, f.pool, f.topic, repository.TaskFilter{}, repository.MaxSequence, 0); !errors.Is(err, repository.ErrInvalid) {
		t.Errorf("size 0: %v", err)
	}
	for _, direction := range []repository.Direction{repository.Forward, repository.Backward} {
		if _, err := f.repo.Excerpts(f.ctx, f.pool, "nope", repository.TaskFilter{Reference: "r1"}, repository.MaxSequence/2, 5, direction); !errors.Is(err, repository.ErrUnknownTopic) {
			t.Errorf("unknown topic, %v: %v", direction, err)
		}
	}
}

func excerptSequences(excerpts []repository.Excerpt) []int64 {
	out := make([]int64, len(excerpts))
	for i, e := range excerpts {
		out[i] = e.Sequence
	}
	return out
}

// TestFloor: a filter's floor bounds Page and Excerpts from below, in both directions;
// a negative one is refused.
func TestFloor(t *testing.T) {
	f := setup(t)
	tasks := f.push(repository.Append, "a", "b", "c", "d", "e")
	floor := tasks[1].Sequence // keeps c, d, e
	filter := repository.TaskFilter{Floor: floor}
	for _, direction := range []repository.Direction{repository.Forward, repository.Backward} {
		cursor := repository.MaxSequence
		if direction == repository.Forward {
			cursor = repository.MinSequence
		}
		page, err := f.repo.Page(f.ctx, f.pool, f.topic, filter, cursor, 10, direction)
		if err != nil {
			t.Fatal(err)
		}
		excerpts, err := f.repo.Excerpts(f.ctx, f.pool, f.topic, filter, cursor, 10, direction)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) != 3 || len(excerpts) != 3 {
			t.Fatalf("direction %v: %d tasks, %d excerpts above the floor; want 3 (c, d, e)", direction, len(page), len(excerpts))
		}
		for i := range page {
			if page[i].Sequence <= floor || excerpts[i].Sequence <= floor {
				t.Fatalf("direction %v: task %d at or below the floor %d", direction, page[i].Sequence, floor)
			}
		}
	}
	if _, err := f.repo.Page(f.ctx, f.pool, f.topic, repository.TaskFilter{Floor: -1}, 0, 10, repository.Forward); !errors.Is(err, repository.ErrInvalid) {
		t.Fatalf("a negative floor: %v, want ErrInvalid", err)
	}
}

// TestPageAmongManyOthers: a page of a topic with few tasks, in a table it shares with a
// topic of many, reads a bounded number of the table's primary-key entries (it walked
// every one of the other topic's newer tasks, at each refresh of a dashboard's topic
// page), and every way of paging still gives every task once, in order: tasks in the
// window walked, beyond it and found through the topic's indexes (every state), and a
// topic with many tasks beyond the window (walked on).
func TestPageAmongManyOthers(t *testing.T) {
	f := setup(t)
	for _, topic := range []string{"big", "small21", "elsewhere"} {
		f.createTopic(topic)
	}
	table := func(topic string) string {
		var name string
		if err := f.pool.QueryRow(f.ctx, `SELECT partition FROM task_topic WHERE topic = $1`, topic).Scan(&name); err != nil {
			t.Fatal(err)
		}
		return name
	}
	if table("big") != table("small21") || table("big") == table("elsewhere") {
		t.Fatalf("tables: big %s, small21 %s, elsewhere %s; the test wants the first two shared, the third apart",
			table("big"), table("small21"), table("elsewhere"))
	}
	insert := func(topic string, n int) {
		t.Helper()
		// every state, with the columns each has (an owner when ACTIVE, a completion when finished)
		_, err := f.pool.Exec(f.ctx, `
			INSERT INTO task (topic, identifier, state, owner, completed)
			SELECT $1, 'x' || g, s, CASE WHEN s = 0 THEN 'gone' END, CASE WHEN s >= 3 THEN now() END
			FROM generate_series(1, $2) g, LATERAL (SELECT (g % 9)::smallint AS s) x`, topic, n)
		if err != nil {
			t.Fatal(err)
		}
	}
	insert("small21", 30)
	insert("big", 25_000)
	insert("elsewhere", 10_500)
	insert("small21", 5)
	insert("big", 100_000)
	if _, err := f.pool.Exec(f.ctx, `ANALYZE task`); err != nil {
		t.Fatal(err)
	}
	sequencesOf := func(topic string) []int64 {
		t.Helper()
		rows, err := f.pool.Query(f.ctx, `SELECT sequence FROM task WHERE topic = $1 ORDER BY sequence`, topic)
		if err != nil {
			t.Fatal(err)
		}
		seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		return seqs
	}
	small, big := sequencesOf("small21"), sequencesOf("big")

	t.Run("EveryTaskOnceInOrder", func(t *testing.T) {
		for _, size := range []int{1, 7, 100} {
			for _, direction := range []repository.Direction{repository.Forward, repository.Backward} {
				var got, gotExcerpts []int64
				cursor, excerptCursor := repository.MinSequence, repository.MinSequence
				if direction == repository.Backward {
					cursor, excerptCursor = repository.MaxSequence, repository.MaxSequence
				}
				for range len(small) + 2 {
					page, err := f.repo.Page(f.ctx, f.pool, "small21", repository.TaskFilter{}, cursor, size, direction)
					if err != nil {
						t.Fatal(err)
					}
					excerpts, err := f.repo.Excerpts(f.ctx, f.pool, "small21", repository.TaskFilter{}, excerptCursor, size, direction)
					if err != nil {
						t.Fatal(err)
					}
					for _, task := range page {
						got = append(got, task.Sequence)
					}
					gotExcerpts = append(gotExcerpts, excerptSequences(excerpts)...)
					if len(page) < size {
						break
					}
					cursor, excerptCursor = page[len(page)-1].Sequence, excerpts[len(excerpts)-1].Sequence
				}
				want := slices.Clone(small)
				if direction == repository.Backward {
					slices.Reverse(want)
				}
				if !slices.Equal(got, want) || !slices.Equal(gotExcerpts, want) {
					t.Errorf("size %d, direction %v: pages give %v and excerpts %v, want %v", size, direction, got, gotExcerpts, want)
				}
			}
		}
	})

	// A finished state no index of the topic's holds alone: the same pages, filtered.
	t.Run("EveryTaskInAFinishedStateOnceInOrder", func(t *testing.T) {
		for _, topic := range []string{"small21", "big"} {
			for _, state := range []repository.State{repository.Filtered, repository.Succeeded, repository.Recreated, repository.Redundant} {
				rows, err := f.pool.Query(f.ctx, `SELECT sequence FROM task WHERE topic = $1 AND state = $2 ORDER BY sequence`, topic, state)
				if err != nil {
					t.Fatal(err)
				}
				all, err := pgx.CollectRows(rows, pgx.RowTo[int64])
				if err != nil {
					t.Fatal(err)
				}
				for _, size := range []int{1, 3, 100} {
					for _, direction := range []repository.Direction{repository.Forward, repository.Backward} {
						if topic == "big" && size < 100 {
							continue // thousands of pages; big's filtered pages walk, as before
						}
						filter := repository.TaskFilter{State: &state}
						var got, gotExcerpts []int64
						cursor := repository.MinSequence
						if direction == repository.Backward {
							cursor = repository.MaxSequence
						}
						excerptCursor := cursor
						for range 3 {
							page, err := f.repo.Page(f.ctx, f.pool, topic, filter, cursor, size, direction)
							if err != nil {
								t.Fatal(err)
							}
							excerpts, err := f.repo.Excerpts(f.ctx, f.pool, topic, filter, excerptCursor, size, direction)
							if err != nil {
								t.Fatal(err)
							}
							for _, task := range page {
								if task.State != state {
									t.Fatalf("%s %v: task %d is %v", topic, state, task.Sequence, task.State)
								}
								got = append(got, task.Sequence)
							}
							gotExcerpts = append(gotExcerpts, excerptSequences(excerpts)...)
							if len(page) < size || len(excerpts) < size {
								break
							}
							cursor, excerptCursor = page[len(page)-1].Sequence, excerpts[len(excerpts)-1].Sequence
						}
						want := slices.Clone(all)
						if direction == repository.Backward {
							slices.Reverse(want)
						}
						want = want[:min(len(want), 3*size)]
						if !slices.Equal(got, want) || !slices.Equal(gotExcerpts, want) {
							t.Errorf("%s in %v, size %d, direction %v: pages give %v and excerpts %v, want %v",
								topic, state, size, direction, got, gotExcerpts, want)
						}
					}
				}
			}
		}
	})

	t.Run("ManyBeyondTheWindow", func(t *testing.T) {
		// Backward from the end of elsewhere's block: 10 500 sequences without a task of
		// big, then its 25 000 older ones, too many to sort: the page walks on to them.
		cursor := small[30] // the first of small21's second block
		page, err := f.repo.Excerpts(f.ctx, f.pool, "big", repository.TaskFilter{}, cursor, 7, repository.Backward)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(big[25_000-7 : 25_000])
		slices.Reverse(want)
		if got := excerptSequences(page); !slices.Equal(got, want) {
			t.Errorf("backward page %v, want %v", got, want)
		}
		// Forward from the end of big's first block: elsewhere's block, then 100 000 of
		// big's (walked on too).
		forward, err := f.repo.Page(f.ctx, f.pool, "big", repository.TaskFilter{}, big[25_000-1], 7, repository.Forward)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, task := range forward {
			got = append(got, task.Sequence)
		}
		if want := big[25_000 : 25_000+7]; !slices.Equal(got, want) {
			t.Errorf("forward page %v, want %v", got, want)
		}
	})

	t.Run("ReadsFewOfTheOthers", func(t *testing.T) {
		// The newest page of small21 (51, more than it has): it read big's 100 000 newer
		// tasks of the shared table (a scan of the table, or of its primary key); now the
		// window's 10 000 entries at most and each of small21's 35 tasks. Counted by this
		// transaction's own statistics (the table's and its indexes' blocks).
		tx, read := f.blockCounter(t, table("small21"))
		before := read()
		page, err := f.repo.Excerpts(f.ctx, tx, "small21", repository.TaskFilter{}, repository.MaxSequence, 51, repository.Backward)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) != len(small) {
			t.Fatalf("%d tasks, want %d", len(page), len(small))
		}
		blocks := read() - before
		if blocks > 400 {
			t.Errorf("the page read %d blocks of the shared table and its indexes, want at most 400", blocks)
		}
		t.Logf("the page read %d blocks of the shared table and its indexes", blocks)

		// The same page of small21's SUCCEEDED tasks: it read every task of the shared
		// table (a filtered page walked the primary key from the cursor), a state none of
		// the table's indexes keyed by the topic holds alone.
		succeeded := repository.Succeeded
		before = read()
		filtered, err := f.repo.Excerpts(f.ctx, tx, "small21", repository.TaskFilter{State: &succeeded}, repository.MaxSequence, 51, repository.Backward)
		if err != nil {
			t.Fatal(err)
		}
		if len(filtered) == 0 || len(filtered) > 5 {
			t.Fatalf("%d SUCCEEDED tasks of small21, want its 3 or 4", len(filtered))
		}
		if blocks := read() - before; blocks > 400 {
			t.Errorf("the page of SUCCEEDED tasks read %d blocks of the shared table and its indexes, want at most 400", blocks)
		}

		// big's last page forward, from its fourth task from the end: the window reaches
		// past the highest sequence taken, so nothing beyond it is asked for. Asking
		// read every one of big's 125 000 tasks (about 5 000 blocks): none of the
		// topic's indexes is ordered by sequence.
		before = read()
		last, err := f.repo.Excerpts(f.ctx, tx, "big", repository.TaskFilter{}, big[len(big)-4], 7, repository.Forward)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := excerptSequences(last), big[len(big)-3:]; !slices.Equal(got, want) {
			t.Fatalf("big's last page %v, want %v", got, want)
		}
		if blocks := read() - before; blocks > 400 {
			t.Errorf("big's last page read %d blocks of its table and indexes, want at most 400", blocks)
		}
	})

	// A state rare among big's 125 000 tasks: a page of it read big whole, walking on
	// from the window until it found its tasks or the topic ended. Within a span it
	// reads that many sequences at most and says where a next call goes on; the calls
	// give every task of the state once, in order.
	t.Run("ARareStateASpanAtATime", func(t *testing.T) {
		redundant := repository.Redundant
		rows, err := f.pool.Query(f.ctx, `SELECT sequence FROM task WHERE topic = 'big' AND state = $1 ORDER BY sequence`, redundant)
		if err != nil {
			t.Fatal(err)
		}
		all, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		rare := []int64{all[1], all[len(all)/2], all[len(all)-2]}
		if _, err := f.pool.Exec(f.ctx, `UPDATE task SET state = $1 WHERE topic = 'big' AND state = $2 AND NOT sequence = ANY($3)`,
			repository.Succeeded, redundant, rare); err != nil {
			t.Fatal(err)
		}
		filter := repository.TaskFilter{State: &redundant}
		const span = 30_000
		for _, direction := range []repository.Direction{repository.Forward, repository.Backward} {
			name := map[repository.Direction]string{repository.Forward: "forward", repository.Backward: "backward"}[direction]
			cursor := repository.MinSequence
			if direction == repository.Backward {
				cursor = repository.MaxSequence
			}
			var got []int64
			calls, cut := 0, 0
			for ; calls < 100; calls++ {
				page, more, err := f.repo.ExcerptsWithin(f.ctx, f.pool, "big", filter, cursor, 10, direction, span)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, excerptSequences(page)...)
				if more == 0 {
					break
				}
				cut++
				if len(page) == 10 {
					t.Fatalf("%s from %d: a full page and more %d", name, cursor, more)
				}
				if direction == repository.Forward && (more <= cursor || more > cursor+2*span+20_000) ||
					direction == repository.Backward && cursor != repository.MaxSequence && (more >= cursor || more < cursor-2*span-20_000) {
					t.Fatalf("%s from %d: more %d, want a step of at most a window and a span", name, cursor, more)
				}
				cursor = more
			}
			want := slices.Clone(rare)
			if direction == repository.Backward {
				slices.Reverse(want)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: the calls gave %v, want %v", name, got, want)
			}
			if cut < 2 {
				t.Errorf("%s: %d of %d calls stopped at the span, want the walk cut (big spans %d sequences)", name, cut, calls+1, big[len(big)-1]-big[0])
			}
		}

		// From a cursor far above the highest sequence taken (a client's own "newest"),
		// the first call finds the newest: it stepped a span at a time through the
		// sequences no task had.
		page, _, err := f.repo.ExcerptsWithin(f.ctx, f.pool, "big", filter, 1<<53, 1, repository.Backward, span)
		if err != nil {
			t.Fatal(err)
		}
		if got := excerptSequences(page); !slices.Equal(got, rare[2:]) {
			t.Errorf("backward from 2^53: %v, want %v", got, rare[2:])
		}
		// Without a filter, every task of the topic is the page's: the span does not cut
		// the walk to its first tasks (an empty first page, the others' sequences before
		// them).
		page, more, err := f.repo.ExcerptsWithin(f.ctx, f.pool, "big", repository.TaskFilter{}, repository.MinSequence, 10, repository.Forward, 5)
		if err != nil {
			t.Fatal(err)
		}
		if got := excerptSequences(page); !slices.Equal(got, big[:10]) || more != 0 {
			t.Errorf("the first page without a filter: %v, more %d; want %v", got, more, big[:10])
		}

		// The first call reads far less than the walk without a bound.
		tx, read := f.blockCounter(t, table("big"))
		before := read()
		if _, _, err := f.repo.ExcerptsWithin(f.ctx, tx, "big", filter, repository.MinSequence, 10, repository.Forward, span); err != nil {
			t.Fatal(err)
		}
		within := read() - before
		before = read()
		whole, err := f.repo.Excerpts(f.ctx, tx, "big", filter, repository.MinSequence, 10, repository.Forward)
		if err != nil {
			t.Fatal(err)
		}
		unbounded := read() - before
		if len(whole) != len(rare) {
			t.Fatalf("the unbounded page found %d tasks, want %d", len(whole), len(rare))
		}
		if within*3 > unbounded {
			t.Errorf("the first call within a span read %d blocks, the walk without a bound %d: want less than a third", within, unbounded)
		}
		t.Logf("blocks read: within a span of %d %d, the whole walk %d", span, within, unbounded)

		if _, _, err := f.repo.ExcerptsWithin(f.ctx, f.pool, "big", filter, repository.MinSequence, 10, repository.Forward, -1); err == nil ||
			!errors.Is(err, repository.ErrInvalid) || !strings.Contains(err.Error(), "span -1") {
			t.Errorf("a negative span: %v, want an error naming it", err)
		}
	})
}

// blockCounter begins a transaction, rolled back when the test ends, and returns it with
// a function that says how many blocks of table and its indexes the transaction has
// fetched so far (its own statistics).
func (f *fixture) blockCounter(t *testing.T, table string) (pgx.Tx, func() int64) {
	t.Helper()
	conn, err := f.pool.Acquire(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	// the connection's counts not yet sent count as the transaction's: send them
	if _, err := conn.Exec(f.ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(f.ctx)) })
	return tx, func() int64 {
		t.Helper()
		var n int64
		err := tx.QueryRow(f.ctx, `
			SELECT sum(pg_stat_get_xact_blocks_fetched(c.oid))::bigint FROM pg_class c
			WHERE c.oid = $1::regclass OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = $1::regclass)`,
			table).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// TestCountAmongManyOthers: a count of a topic reads its own tasks, not the table it
// shares with a topic of many (a count of small21's 35 tasks read big's 125 000, and a
// count of every topic read the shared table once per topic of it), and counts right.
func TestCountAmongManyOthers(t *testing.T) {
	f := setup(t)
	for _, topic := range []string{"big", "small21"} {
		f.createTopic(topic)
	}
	var shared bool
	if err := f.pool.QueryRow(f.ctx, `SELECT count(DISTINCT partition) = 1 FROM task_topic WHERE topic IN ('big', 'small21')`).Scan(&shared); err != nil || !shared {
		t.Fatalf("big and small21 share a table: %v (%v); the test wants them to", shared, err)
	}
	f.createTopic("own")
	if _, err := f.repo.Dedicate(f.ctx, f.pool, "own"); err != nil {
		t.Fatal(err)
	}
	// every state, with the columns each has; identifiers repeat (Recent keeps the latest)
	for _, c := range []struct {
		topic string
		n     int
	}{{"small21", 35}, {"big", 125_000}, {"own", 50}} {
		_, err := f.pool.Exec(f.ctx, `
			INSERT INTO task (topic, identifier, reference, state, owner, completed)
			SELECT $1, 'x' || (g % 10), CASE WHEN g % 2 = 0 THEN 'even' END, s, CASE WHEN s = 0 THEN 'gone' END, CASE WHEN s >= 3 THEN now() END
			FROM generate_series(1, $2) g, LATERAL (SELECT (g % 9)::smallint AS s) x`, c.topic, c.n)
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.pool.Exec(f.ctx, `ANALYZE task`); err != nil {
		t.Fatal(err)
	}
	var table string
	if err := f.pool.QueryRow(f.ctx, `SELECT partition FROM task_topic WHERE topic = 'small21'`).Scan(&table); err != nil {
		t.Fatal(err)
	}
	tx, read := f.blockCounter(t, table)
	// what the counts should be, from the table itself
	want := func(topic string, filter string, recent bool) map[repository.State]repository.Count {
		t.Helper()
		from := "task WHERE topic = $1" + filter
		if recent {
			from = "(SELECT DISTINCT ON (identifier) * FROM task WHERE topic = $1 ORDER BY identifier, sequence DESC) t WHERE true" + filter
		}
		rows, err := tx.Query(f.ctx, `SELECT state, count(*), max(sequence) FROM `+from+` GROUP BY state`, topic)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[repository.State]repository.Count{}
		for rows.Next() {
			var state int16
			var c repository.Count
			if err := rows.Scan(&state, &c.Count, &c.Highest); err != nil {
				t.Fatal(err)
			}
			out[repository.State(state)] = c
		}
		return out
	}
	even := "even"
	failed := repository.Failed
	for _, c := range []struct {
		name   string
		filter repository.TaskFilter
		sql    string
		mode   repository.CountMode
	}{
		{"Total", repository.TaskFilter{}, "", repository.Total},
		{"Recent", repository.TaskFilter{}, "", repository.Recent},
		{"TotalByReference", repository.TaskFilter{Reference: even}, " AND reference = 'even'", repository.Total},
		{"TotalByIdentifierAndState", repository.TaskFilter{Identifier: "x3", State: &failed}, " AND identifier = 'x3' AND state = " + strconv.Itoa(int(failed)), repository.Total},
		{"RecentByState", repository.TaskFilter{State: &failed}, " AND state = " + strconv.Itoa(int(failed)), repository.Recent},
	} {
		before := read()
		got, err := f.repo.Count(f.ctx, tx, "small21", c.filter, repository.MinSequence, repository.MaxSequence, c.mode)
		if err != nil {
			t.Fatal(err)
		}
		blocks := read() - before
		if w := want("small21", c.sql, c.mode == repository.Recent); !maps.Equal(got["small21"], w) || len(got) != 1 {
			t.Errorf("%s: %v, want small21: %v", c.name, got, w)
		}
		if blocks > 100 {
			t.Errorf("%s: the count of small21's 35 tasks read %d blocks of the table it shares with big's 125 000, want at most 100", c.name, blocks)
		}
	}
	all, err := f.repo.Count(f.ctx, tx, "", repository.TaskFilter{}, repository.MinSequence, repository.MaxSequence, repository.Total)
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"big", "small21"} {
		if w := want(topic, "", false); !maps.Equal(all[topic], w) {
			t.Errorf("every topic's count: %s %v, want %v", topic, all[topic], w)
		}
	}
	// a dedicated topic is counted from its own table
	for _, mode := range []repository.CountMode{repository.Total, repository.Recent} {
		got, err := f.repo.Count(f.ctx, tx, "own", repository.TaskFilter{}, repository.MinSequence, repository.MaxSequence, mode)
		if err != nil {
			t.Fatal(err)
		}
		if w := want("own", "", mode == repository.Recent); len(w) == 0 || !maps.Equal(got["own"], w) {
			t.Errorf("dedicated, mode %v: %v, want %v", mode, got["own"], w)
		}
	}
}

// TestPageOneSnapshot: the statements of a page without a filter read one snapshot, so
// that what other transactions commit between them neither shortens the page nor
// makes the next one pass over a task. Each step below ran on a snapshot of its own.
func TestPageOneSnapshot(t *testing.T) {
	f := setup(t)
	// The filler's 10 500 tasks push small's older ones out of its newest page's window.
	// Topics of this test alone: the hook sees every page of the package's tests, which
	// run in parallel.
	f.createTopic("snapshot-small")
	f.createTopic("snapshot-filler")
	push := func(h repository.Handle, topic string, identifiers ...string) []int64 {
		t.Helper()
		var creations []repository.Creation
		for _, id := range identifiers {
			creations = append(creations, repository.Creation{Identifier: id})
		}
		tasks, err := f.repo.Push(f.ctx, h, topic, repository.Append, creations...)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for _, task := range tasks {
			seqs = append(seqs, task.Sequence)
		}
		return seqs
	}
	filler := func(n int) {
		t.Helper()
		ids := make([]string, n)
		for i := range ids {
			ids[i] = "b" + strconv.Itoa(i)
		}
		push(f.pool, "snapshot-filler", ids...) // a push, as on Citus sequences come with it
	}
	small := push(f.pool, "snapshot-small", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8")
	filler(10_500)
	seqs := func(tasks []repository.Task) []int64 {
		var out []int64
		for _, task := range tasks {
			out = append(out, task.Sequence)
		}
		return out
	}
	// one step at a time: the tests below share the hook
	var stepAt string
	var stepDo func()
	repository.SetPageStep(t, func(topic, statement string) {
		if topic == "snapshot-small" && statement == stepAt && stepDo != nil {
			do := stepDo
			stepDo = nil
			do()
		}
	})

	t.Run("DeletedBetweenStatements", func(t *testing.T) {
		// The newest page of 5 reads the small topic's sequences, then its 5 newest tasks by
		// sequence; one of them is deleted in between. The page still holds 5 (the
		// snapshot's), where it held 4, and a page shorter than asked says "no more".
		for _, excerpts := range []bool{false, true} {
			victim := small[len(small)-2]
			stepAt, stepDo = "TaskPageAt", func() {
				if _, err := f.pool.Exec(f.ctx, `DELETE FROM task WHERE topic = 'snapshot-small' AND sequence = $1`, victim); err != nil {
					t.Error(err)
				}
			}
			var got []int64
			if excerpts {
				page, err := f.repo.Excerpts(f.ctx, f.pool, "snapshot-small", repository.TaskFilter{}, repository.MaxSequence, 5, repository.Backward)
				if err != nil {
					t.Fatal(err)
				}
				got = excerptSequences(page)
			} else {
				page, err := f.repo.Page(f.ctx, f.pool, "snapshot-small", repository.TaskFilter{}, repository.MaxSequence, 5, repository.Backward)
				if err != nil {
					t.Fatal(err)
				}
				got = seqs(page)
			}
			if stepDo != nil {
				t.Fatal("the page did not read by sequence: the test no longer tests the snapshot")
			}
			want := slices.Clone(small[len(small)-5:])
			slices.Reverse(want)
			if !slices.Equal(got, want) {
				t.Errorf("excerpts %v: newest page %v, want %v (the deleted %d included)", excerpts, got, want, victim)
			}
			small = slices.DeleteFunc(small, func(s int64) bool { return s == victim })
		}
	})

	t.Run("CommittedBetweenStatements", func(t *testing.T) {
		// Two pushes wait uncommitted: a inside the window of a forward page from just
		// below it, b beyond it. Both commit, a first, while the page runs,
		// between its window and its read beyond. The page and the next ones must give a
		// before b or neither: a page that took b but not a moved its cursor past a.
		txA, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer txA.Rollback(f.ctx)
		a := push(txA, "snapshot-small", "a")[0]
		filler(10_010)
		txB, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer txB.Rollback(f.ctx)
		b := push(txB, "snapshot-small", "b")[0]
		stepAt, stepDo = "TaskLastSequence", func() {
			for _, tx := range []pgx.Tx{txA, txB} {
				if err := tx.Commit(f.ctx); err != nil {
					t.Error(err)
				}
			}
		}
		// The first page, from just below a, runs the steps; the next ones read anew.
		var got []int64
		cursor := a - 1
		for i := range 5 {
			page, err := f.repo.Page(f.ctx, f.pool, "snapshot-small", repository.TaskFilter{}, cursor, 1, repository.Forward)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				if i == 0 {
					continue // nothing was committed in its snapshot
				}
				break
			}
			got = append(got, page[0].Sequence)
			cursor = page[0].Sequence
		}
		if stepDo != nil {
			t.Fatal("the page did not look beyond its window: the test no longer tests the snapshot")
		}
		if want := []int64{a, b}; !slices.Equal(got, want) {
			t.Errorf("forward pages of 1 from %d gave %v, want %v", a-1, got, want)
		}
	})
}

// TestPageOnACancelledContext: a page asked with a context already done fails, and
// leaves the caller's connection open (pgx closes a connection whose BEGIN fails so).
func TestPageOnACancelledContext(t *testing.T) {
	f := setup(t)
	conn, err := f.pool.Acquire(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	if _, err := f.repo.Page(ctx, conn, f.topic, repository.TaskFilter{}, repository.MaxSequence, 10, repository.Backward); !errors.Is(err, context.Canceled) {
		t.Errorf("page on a cancelled context: %v, want context.Canceled", err)
	}
	if conn.Conn().IsClosed() {
		t.Error("the caller's connection was closed")
	}
	if err := conn.Ping(f.ctx); err != nil {
		t.Errorf("the caller's connection after the page: %v", err)
	}
}

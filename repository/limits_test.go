package repository_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/repository"
)

// limit configures the fixture's topic with s and fails the test on error.
func (f *fixture) limit(s repository.TopicSettings) {
	f.t.Helper()
	if s.MaxAttempts == 0 {
		s.MaxAttempts = 1
	}
	if _, err := f.repo.Configure(f.ctx, f.pool, f.topic, s); err != nil {
		f.t.Fatal(err)
	}
}

// pushKeyed pushes n tasks with the concurrency key (none when empty), identifiers
// key-0, key-1, ...
func (f *fixture) pushKeyed(key string, n int) []repository.Task {
	f.t.Helper()
	cs := make([]repository.Creation, n)
	for i := range cs {
		cs[i] = repository.Creation{Identifier: fmt.Sprintf("%s-%d", key, i), ConcurrencyKey: key}
	}
	tasks, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, cs...)
	if err != nil {
		f.t.Fatal(err)
	}
	return tasks
}

// bucketAged moves the time the topic's token bucket was last counted back by d, as if
// d had passed. It computes the new time here: Citus refuses an UPDATE that applies a
// stable operator (timestamptz - interval) to a column.
func (f *fixture) bucketAged(t *testing.T, d time.Duration) {
	t.Helper()
	var counted time.Time
	if err := f.pool.QueryRow(f.ctx, "SELECT counted FROM task_topic_limit WHERE topic = $1", f.topic).Scan(&counted); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(f.ctx, "UPDATE task_topic_limit SET counted = $2 WHERE topic = $1", f.topic, counted.Add(-d)); err != nil {
		t.Fatal(err)
	}
}

// pollKeys polls up to n tasks and returns their concurrency keys in poll order, "-"
// for none.
func (f *fixture) pollKeys(n int) ([]repository.Task, string) {
	f.t.Helper()
	tasks, err := f.repo.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, n)
	if err != nil {
		f.t.Fatal(err)
	}
	keys := make([]string, len(tasks))
	for i, t := range tasks {
		keys[i] = t.ConcurrencyKey
		if keys[i] == "" {
			keys[i] = "-"
		}
	}
	// a poll returns its tasks in poll order (priority, sequence), whatever order a
	// poll by key took them in: compare the keys as a set
	slices.Sort(keys)
	return tasks, strings.Join(keys, ",")
}

func (f *fixture) succeed(tasks ...repository.Task) {
	f.t.Helper()
	if _, err := f.repo.Complete(f.ctx, f.pool, f.topic, decide(tasks)...); err != nil {
		f.t.Fatal(err)
	}
}

// TestLimits: a topic's limits hold whatever polls ask for, and a topic without limits
// is polled as before.
func TestLimits(t *testing.T) {
	t.Run("ConcurrencyCapsTheActiveTasks", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Concurrency: 3})
		f.pushKeyed("", 10)
		first, _ := f.pollKeys(10)
		if len(first) != 3 {
			t.Fatalf("polled %d with a limit of 3", len(first))
		}
		if again, _ := f.pollKeys(10); len(again) != 0 {
			t.Fatalf("polled %d more at the limit", len(again))
		}
		// another owner's poll counts the same ACTIVE tasks
		other := f.newRepo("owner-2")
		if got, err := other.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 10); err != nil || len(got) != 0 {
			t.Fatalf("another owner polled %d, %v at the limit", len(got), err)
		}
		f.succeed(first[0])
		if next, _ := f.pollKeys(10); len(next) != 1 {
			t.Fatalf("polled %d after one completed, want 1", len(next))
		}
		// a change takes effect at the next poll
		f.limit(repository.TopicSettings{Concurrency: 5})
		if next, _ := f.pollKeys(10); len(next) != 2 {
			t.Fatalf("polled %d after the limit rose to 5, want 2", len(next))
		}
		f.limit(repository.TopicSettings{})
		if rest, _ := f.pollKeys(10); len(rest) != 4 {
			t.Fatalf("polled %d once unlimited, want the 4 left", len(rest))
		}
	})

	t.Run("KeyConcurrencyCapsEachKeyAndServesKeysInTurn", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{KeyConcurrency: 2})
		f.pushKeyed("a", 5)
		f.pushKeyed("b", 5)
		f.pushKeyed("", 2) // no key: '' in a topic polled by key, no per-key limit
		tasks, keys := f.pollKeys(20)
		if keys != "-,-,a,a,b,b" {
			t.Errorf("polled keys %s, want -,-,a,a,b,b (two of each key)", keys)
		}
		// in turns of their keys, keys in the order of their first task
		var order []string
		for _, task := range tasks {
			order = append(order, task.Identifier)
		}
		if s := strings.Join(order, ","); s != "a-0,b-0,-0,a-1,b-1,-1" {
			t.Errorf("polled %s, want a-0,b-0,-0,a-1,b-1,-1", s)
		}
		if _, keys := f.pollKeys(20); keys != "" {
			t.Errorf("polled %s with every key at its limit", keys)
		}
		var a repository.Task
		for _, task := range tasks {
			if task.ConcurrencyKey == "a" {
				a = task
			}
		}
		f.succeed(a)
		if _, keys := f.pollKeys(20); keys != "a" {
			t.Errorf("polled %s after one of a completed, want a", keys)
		}
	})

	t.Run("FairTakesKeysInTurn", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Fair: true})
		f.pushKeyed("big", 1000)
		f.pushKeyed("small", 3)
		var got []string
		for range 4 {
			_, keys := f.pollKeys(1)
			got = append(got, keys)
		}
		// the key served last is kept between polls
		if s := strings.Join(got, ","); s != "big,small,big,small" {
			t.Errorf("four polls of one took %s, want big,small,big,small", s)
		}
		// the last of small and four of big (small has no more)
		if _, keys := f.pollKeys(5); keys != "big,big,big,big,small" {
			t.Errorf("a poll of five took %s, want big,big,big,big,small", keys)
		}
	})

	t.Run("FairHonoursPrioritiesFirst", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Fair: true})
		for _, c := range []repository.Creation{
			{Identifier: "a1", ConcurrencyKey: "a", Priority: 1}, {Identifier: "a2", ConcurrencyKey: "a", Priority: 1},
			{Identifier: "b1", ConcurrencyKey: "b", Priority: 0}, {Identifier: "b2", ConcurrencyKey: "b", Priority: 0},
			{Identifier: "c1", ConcurrencyKey: "c", Priority: 1, Delay: time.Hour},
		} {
			if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, c); err != nil {
				t.Fatal(err)
			}
		}
		tasks, _ := f.pollKeys(10)
		var ids []string
		for _, task := range tasks {
			ids = append(ids, task.Identifier)
		}
		if s := strings.Join(ids, ","); s != "b1,b2,a1,a2" {
			t.Errorf("polled %s, want the priority-0 tasks first, then priority 1 (the delayed one left)", s)
		}
	})

	t.Run("FairHonoursConditions", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Fair: true})
		for _, c := range []repository.Creation{
			{Identifier: "x", ConcurrencyKey: "a"}, {Identifier: "x", ConcurrencyKey: "a"}, {Identifier: "y", ConcurrencyKey: "b"},
		} {
			if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, c); err != nil {
				t.Fatal(err)
			}
		}
		tasks, err := f.repo.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.SingularByIdentifier, 10)
		if err != nil || len(tasks) != 2 {
			t.Fatalf("singular poll: %d tasks, %v; want x once and y", len(tasks), err)
		}
	})

	t.Run("RateLimitsStarts", func(t *testing.T) {
		// 10 a minute: the seconds this test takes add a fraction of a token at most
		f := setup(t)
		f.limit(repository.TopicSettings{Rate: 10, RatePeriod: time.Minute, RateBurst: 3})
		f.pushKeyed("", 20)
		if got, _ := f.pollKeys(20); len(got) != 3 {
			t.Fatalf("first poll took %d, want the burst of 3", len(got))
		}
		if got, _ := f.pollKeys(20); len(got) != 0 {
			t.Fatalf("second poll took %d with no token left", len(got))
		}
		wait, ok, err := f.repo.RateWait(f.ctx, f.pool, f.topic)
		if err != nil || !ok || wait <= 5*time.Second || wait > 6*time.Second {
			t.Errorf("rate wait = %v, %v, %v; want up to 6 s (one token at 10 a minute)", wait, ok, err)
		}
		// 12 s pass: two tokens
		f.bucketAged(t, 12*time.Second)
		if got, _ := f.pollKeys(20); len(got) != 2 {
			t.Fatalf("after 12 s took %d, want 2", len(got))
		}
		// an hour: the burst, no more
		f.bucketAged(t, time.Hour)
		if got, _ := f.pollKeys(20); len(got) != 3 {
			t.Fatalf("after an hour took %d, want the burst of 3", len(got))
		}
		u, err := f.repo.LimitUsage(f.ctx, f.pool, f.topic)
		if err != nil || u.Active != 8 || u.Tokens >= 1 {
			t.Errorf("usage = %+v, %v; want 8 ACTIVE and no whole token", u, err)
		}
		if _, ok, err := f.repo.RateWait(f.ctx, f.pool, "nope"); ok || err != nil {
			t.Errorf("rate wait of an unknown topic = %v, %v; want none", ok, err)
		}
	})

	t.Run("ARateLiftedAndSetAgainStartsWithAFullBucket", func(t *testing.T) {
		// A fair topic's polls write its bucket row (the key its last turn stood at):
		// while the rate is lifted they must not run the bucket into debt (000028).
		f := setup(t)
		rated := repository.TopicSettings{Fair: true, Rate: 10, RatePeriod: time.Minute, RateBurst: 3}
		f.limit(rated)
		f.pushKeyed("a", 3)
		if got, _ := f.pollKeys(10); len(got) != 3 {
			t.Fatalf("first poll took %d, want the burst of 3", len(got))
		}
		f.limit(repository.TopicSettings{Fair: true})
		f.pushKeyed("b", 50)
		if got, _ := f.pollKeys(100); len(got) != 50 {
			t.Fatalf("without the rate took %d, want the 50", len(got))
		}
		f.limit(rated)
		if u, err := f.repo.LimitUsage(f.ctx, f.pool, f.topic); err != nil || u.Tokens != 3 {
			t.Errorf("usage once the rate is back = %+v, %v; want a full bucket of 3", u, err)
		}
		f.pushKeyed("c", 5)
		if got, _ := f.pollKeys(10); len(got) != 3 {
			t.Fatalf("once the rate is back took %d, want the burst of 3", len(got))
		}
	})

	t.Run("UsageCountsActiveKeysAndTokens", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Concurrency: 10, KeyConcurrency: 1, Rate: 100, RatePeriod: time.Hour, RateBurst: 50})
		if u, err := f.repo.LimitUsage(f.ctx, f.pool, f.topic); err != nil || u.Tokens != 50 || u.Active != 0 {
			t.Errorf("usage before any poll = %+v, %v; want a full bucket of 50", u, err)
		}
		f.pushKeyed("a", 3)
		f.pushKeyed("b", 3)
		f.pushKeyed("c", 1)
		f.pollKeys(10)
		u, err := f.repo.LimitUsage(f.ctx, f.pool, f.topic)
		if err != nil || u.Active != 3 || u.KeysAtLimit != 3 || u.KeysWaiting != 2 || u.Tokens < 46.9 || u.Tokens > 47.5 {
			t.Errorf("usage = %+v, %v; want 3 ACTIVE, 3 keys at their limit, 2 keys waiting, about 47 tokens", u, err)
		}
		if _, err := f.repo.LimitUsage(f.ctx, f.pool, "nope"); !errors.Is(err, repository.ErrUnknownTopic) {
			t.Errorf("usage of an unknown topic: %v, want ErrUnknownTopic", err)
		}
	})

	t.Run("UsageOfManyTopicsInOneCall", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Concurrency: 10, KeyConcurrency: 1})
		f.pushKeyed("a", 3)
		f.pushKeyed("b", 1)
		f.pollKeys(10)
		other := f.topic + "-other"
		if _, err := f.repo.CreateTopic(f.ctx, f.pool, other); err != nil {
			t.Fatal(err)
		}
		if _, err := f.repo.Push(f.ctx, f.pool, other, repository.Append, repository.Creation{Identifier: "x", ConcurrencyKey: "x"}); err != nil {
			t.Fatal(err)
		}
		usage, err := f.repo.LimitUsageAll(f.ctx, f.pool, other, "nope", f.topic)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]repository.LimitUsage{
			f.topic: {Active: 2, KeysAtLimit: 2, KeysWaiting: 1},
			other:   {KeysWaiting: 1},
		}
		if !reflect.DeepEqual(usage, want) {
			t.Errorf("usage = %+v, want %+v (the unknown topic left out)", usage, want)
		}
		for topic, u := range usage {
			if one, err := f.repo.LimitUsage(f.ctx, f.pool, topic); err != nil || one != u {
				t.Errorf("LimitUsage(%q) = %+v, %v; want %+v as LimitUsageAll", topic, one, err, u)
			}
		}
		// names no topic could have are left out as unknown ones are: a name read from a
		// database whose encoding is not UTF-8 failed the read of every limited topic
		// (a metrics scrape's)
		if got, err := f.repo.LimitUsageAll(f.ctx, f.pool, f.topic, "", "caf\xe9"); err != nil || len(got) != 1 || got[f.topic] != want[f.topic] {
			t.Errorf("usage with an empty and a non-UTF-8 topic name: %+v, %v; want %s's alone", got, err, f.topic)
		}
		if usage, err := f.repo.LimitUsageAll(f.ctx, f.pool); err != nil || len(usage) != 0 {
			t.Errorf("usage of no topics = %v, %v; want none", usage, err)
		}
	})

	// A topic limited by concurrency alone still counts the keys of its READY tasks (a
	// change of the statement counted them only for a topic polled by key).
	t.Run("UsageCountsTheKeysOfATopicNotPolledByKey", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Concurrency: 5})
		f.pushKeyed("k1", 1)
		f.pushKeyed("k2", 2)
		if u, err := f.repo.LimitUsage(f.ctx, f.pool, f.topic); err != nil || u.KeysWaiting != 2 || u.KeysAtLimit != 0 {
			t.Errorf("usage = %+v, %v; want 2 keys waiting, none at a limit", u, err)
		}
	})

	t.Run("BadSettingsAreRefusedAndNothingIsWritten", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Concurrency: 2})
		for _, tc := range []struct {
			s    repository.TopicSettings
			want string
		}{
			{repository.TopicSettings{MaxAttempts: 1, Concurrency: -1}, "concurrency -1 is negative"},
			{repository.TopicSettings{MaxAttempts: 1, KeyConcurrency: -2}, "key concurrency -2 is negative"},
			{repository.TopicSettings{MaxAttempts: 1, Rate: 5}, "rate 5 needs a period"},
			{repository.TopicSettings{MaxAttempts: 1, RatePeriod: time.Second}, "without a rate"},
			{repository.TopicSettings{MaxAttempts: 1, Rate: 5, RatePeriod: time.Second, RateBurst: -1}, "rate burst -1 is negative"},
		} {
			_, err := f.repo.Configure(f.ctx, f.pool, f.topic, tc.s)
			if !errors.Is(err, repository.ErrInvalid) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `"topic"`) {
				t.Errorf("configure %+v: %v, want ErrInvalid saying %q and naming the topic", tc.s, err, tc.want)
			}
		}
		if got, err := f.repo.Topic(f.ctx, f.pool, f.topic); err != nil || got.Concurrency != 2 || got.Rate != 0 {
			t.Errorf("topic after refusals = %+v, %v; want it unchanged", got.TopicSettings, err)
		}
		if _, err := f.repo.Configure(f.ctx, f.pool, "nope", repository.TopicSettings{MaxAttempts: 1, Concurrency: 1}); !errors.Is(err, repository.ErrUnknownTopic) {
			t.Errorf("configure an unknown topic: %v, want ErrUnknownTopic", err)
		}
		long := strings.Repeat("k", 251)
		if _, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, repository.Creation{Identifier: "x", ConcurrencyKey: long}); !errors.Is(err, repository.ErrInvalid) {
			t.Errorf("push with a key of 251 characters: %v, want ErrInvalid", err)
		}
	})

	t.Run("SQLSetsLimitsAndRefusesBadOnes", func(t *testing.T) {
		f := setup(t)
		if _, err := f.pool.Exec(f.ctx, "SELECT task_topic_set_limits('topic', concurrency => 4, rate => 60, rate_period => '1 minute', fair => true)"); err != nil {
			t.Fatal(err)
		}
		got, err := f.repo.Topic(f.ctx, f.pool, f.topic)
		if err != nil || got.Concurrency != 4 || got.Rate != 60 || got.RatePeriod != time.Minute || got.RateBurst != 60 || !got.Fair {
			t.Fatalf("limits set from SQL = %+v, %v", got.TopicSettings, err)
		}
		for _, tc := range []struct{ sql, want string }{
			{"SELECT task_topic_set_limits('topic', concurrency => 0)", "concurrency 0 is below 1"},
			{"SELECT task_topic_set_limits('topic', key_concurrency => -1)", "key_concurrency -1 is below 1"},
			{"SELECT task_topic_set_limits('topic', rate => 5)", "needs a rate_period"},
			{"SELECT task_topic_set_limits('topic', rate_burst => 5)", "need a rate"},
			{"SELECT task_topic_set_limits('topic', rate => 5, rate_period => '1 second', rate_burst => 0)", "rate_burst 0 is below 1"},
			{"SELECT task_topic_set_limits('topic', rate => 5, rate_period => '1.5 milliseconds')", "rate_period 00:00:00.0015 is not a whole number of milliseconds"},
			{"SELECT task_topic_set_limits('topic', rate => 5, rate_period => '0.5 milliseconds')", "rate_period 00:00:00.0005 is not a whole number of milliseconds"},
			{"SELECT task_topic_set_limits('nope', concurrency => 1)", "unknown topic"},
			{"SELECT task_push('topic', 'x', concurrency_key => repeat('k', 251))", "concurrency key"},
		} {
			if _, err := f.pool.Exec(f.ctx, tc.sql); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want an error saying %q", tc.sql, err, tc.want)
			}
		}
		if again, err := f.repo.Topic(f.ctx, f.pool, f.topic); err != nil || again.TopicSettings != got.TopicSettings {
			t.Errorf("limits after refusals = %+v, want them unchanged", again.TopicSettings)
		}
		var key *string
		var seq int64
		if err := f.pool.QueryRow(f.ctx, "SELECT task_push('topic', 'y', concurrency_key => 'acme')").Scan(&seq); err != nil {
			t.Fatal(err)
		}
		if err := f.pool.QueryRow(f.ctx, "SELECT concurrency_key FROM task WHERE topic = 'topic' AND sequence = $1", seq).Scan(&key); err != nil || key == nil || *key != "acme" {
			t.Errorf("a SQL push's key = %v, %v; want acme", key, err)
		}
	})

	t.Run("AKeyOnATopicWithoutKeyLimitsIsKeptAndIgnored", func(t *testing.T) {
		f := setup(t)
		f.pushKeyed("a", 3)
		tasks, keys := f.pollKeys(10)
		if keys != "a,a,a" {
			t.Fatalf("polled %s, want the three tasks of a", keys)
		}
		if got, err := f.repo.Get(f.ctx, f.pool, f.topic, tasks[0].Sequence); err != nil || got.ConcurrencyKey != "a" {
			t.Errorf("stored key = %q, %v", got.ConcurrencyKey, err)
		}
	})

	t.Run("ALimitedPollStartsAtItsPosition", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{Concurrency: 5})
		pushed := f.pushKeyed("", 10)
		from := repository.PositionOf(pushed[3])
		got, err := f.repo.PollFrom(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 10, from)
		if err != nil || len(got) != 5 {
			t.Fatalf("limited poll from the fourth task: %d tasks, %v; want the limit's 5", len(got), err)
		}
		for i, task := range got {
			if task.Sequence != pushed[3+i].Sequence {
				t.Fatalf("limited poll from the fourth task took %d at %d, want %d: it starts at the position", task.Sequence, i, pushed[3+i].Sequence)
			}
		}
	})

	t.Run("AKeyedPollReadsFromTheHead", func(t *testing.T) {
		f := setup(t)
		f.limit(repository.TopicSettings{KeyConcurrency: 1})
		pushed := f.pushKeyed("a", 3)
		f.pushKeyed("b", 3)
		got, err := f.repo.PollFrom(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 10, repository.PositionOf(pushed[2]))
		if err != nil || len(got) != 2 || got[0].Sequence != pushed[0].Sequence {
			t.Fatalf("keyed poll given a position: %v, %v; want the first task of each key, from the head", got, err)
		}
	})
}

// TestLimitLoweredWhileAPollWaits: a poll of a limited topic that waited for the topic's
// lock while the limit was lowered leases under the new limit (000028 reads the settings
// once it holds the lock). Plain PostgreSQL only: on Citus the lock is taken on the node
// of the topic's shard, which a transaction of the test cannot hold from the coordinator.
func TestLimitLoweredWhileAPollWaits(t *testing.T) {
	f := setup(t)
	f.limit(repository.TopicSettings{Concurrency: 10})
	f.pushKeyed("", 10)
	holder := f.holdTopicLock()
	type result struct {
		tasks []repository.Task
		err   error
	}
	done := make(chan result, 1)
	go func() {
		tasks, err := f.repo.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 10)
		done <- result{tasks, err}
	}()
	// the poll read the limit of 10 and waits for the lock
	waitForLock(t, f.pool, "task_poll")
	f.limit(repository.TopicSettings{Concurrency: 1})
	if err := holder.Rollback(f.ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || len(r.tasks) != 1 {
		t.Fatalf("the poll that waited leased %d, %v; want 1 under the limit lowered to 1", len(r.tasks), r.err)
	}
}

// TestLimitedPollAfterAWaitLeasesWhatItCharges: a poll of a rate-limited topic that
// waited for the topic's lock while a task was pushed leases that task too, and is
// charged a token for each task it leases. Before 000054 the statement that leased
// (TaskPoll's UPDATE, task_complete_poll's last) took its snapshot before the wait: the
// choice, made after it, took and charged the task pushed meanwhile, which the UPDATE
// could not see and left READY. A repository that configured the topic, one that
// learned the limit from a poll's rows, and the chain's statement. Plain PostgreSQL
// only, as TestLimitLoweredWhileAPollWaits (task_citus_poll chose and leased in two
// statements already).
func TestLimitedPollAfterAWaitLeasesWhatItCharges(t *testing.T) {
	for _, mode := range []string{"Poll", "PollLearned", "CompleteAndPoll"} {
		t.Run(mode, func(t *testing.T) {
			f := setup(t)
			// a token an hour: none comes back during the test
			f.limit(repository.TopicSettings{Concurrency: 10, Rate: 1, RatePeriod: time.Hour, RateBurst: 10})
			repo := f.repo
			var leased []repository.Task
			switch mode {
			case "PollLearned":
				// a repository that never read the topic learns the limit from its poll
				var err error
				if repo, err = repository.New(repository.Config{Owner: "owner-2"}); err != nil {
					t.Fatal(err)
				}
				f.push(repository.Append, "first")
				if leased, err = repo.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 1); err != nil || len(leased) != 1 {
					t.Fatalf("poll: %v, %v", leased, err)
				}
			case "CompleteAndPoll":
				// the chain's statement (task_complete_poll), with a task to complete
				f.push(repository.Append, "first")
				var err error
				if leased, err = repo.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 1); err != nil || len(leased) != 1 {
					t.Fatalf("poll: %v, %v", leased, err)
				}
			}
			old := f.push(repository.Append, "old")
			tokens := func() float64 {
				t.Helper()
				var v float64
				if err := f.pool.QueryRow(f.ctx, "SELECT coalesce(tokens, 10) FROM task_topic_limit WHERE topic = $1 UNION ALL SELECT 10 LIMIT 1", f.topic).Scan(&v); err != nil {
					t.Fatal(err)
				}
				return v
			}
			before := tokens()
			holder := f.holdTopicLock()
			type result struct {
				tasks []repository.Task
				err   error
			}
			done := make(chan result, 1)
			go func() {
				var r result
				if mode == "CompleteAndPoll" {
					_, r.tasks, r.err = repo.CompleteAndPoll(f.ctx, f.pool, f.topic, []repository.Completion{leased[0].Decide(repository.Succeed(""))},
						repository.FIFO, repository.None, 10, repository.Position{})
				} else {
					r.tasks, r.err = repo.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 10)
				}
				done <- r
			}()
			waitForLock(t, f.pool, map[string]string{"Poll": "task_poll", "PollLearned": "task_poll", "CompleteAndPoll": "task_complete_poll"}[mode])
			late := f.push(repository.Append, "late")
			if err := holder.Rollback(f.ctx); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil || len(r.tasks) != 2 || r.tasks[0].Sequence != old[0].Sequence || r.tasks[1].Sequence != late[0].Sequence {
				t.Fatalf("the poll that waited leased %v, %v; want %d and the task pushed during the wait, %d", r.tasks, r.err, old[0].Sequence, late[0].Sequence)
			}
			if spent := before - tokens(); spent < 1.5 || spent > 2.5 {
				t.Errorf("the poll that waited spent %.2f tokens for the 2 tasks it leased", spent)
			}
			if next, err := repo.Poll(f.ctx, f.pool, f.topic, repository.FIFO, repository.None, 10); err != nil || len(next) != 0 {
				t.Fatalf("the next poll leased %v, %v; want nothing left", next, err)
			}
		})
	}
}

// TestUpdateSettingsWritesOnlyAChange: a change that leaves the settings as stored
// (REST's PATCH refused after the read) neither rewrites the topic's row nor notifies.
// Plain PostgreSQL only: the row's xmin is read through the coordinator on Citus.
func TestUpdateSettingsWritesOnlyAChange(t *testing.T) {
	f := setup(t)
	f.limit(repository.TopicSettings{Concurrency: 2})
	version := func() string {
		t.Helper()
		var xmin string
		if err := f.pool.QueryRow(f.ctx, "SELECT xmin::text FROM task_topic WHERE topic = $1", f.topic).Scan(&xmin); err != nil {
			t.Fatal(err)
		}
		return xmin
	}
	before := version()
	got, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.Concurrency = 2 })
	if err != nil || got.Concurrency != 2 {
		t.Fatalf("update to the same settings: %+v, %v", got.TopicSettings, err)
	}
	if after := version(); after != before {
		t.Errorf("the topic's row was rewritten (xmin %s, was %s)", after, before)
	}
	if _, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.Concurrency = 3 }); err != nil {
		t.Fatal(err)
	}
	if after := version(); after == before {
		t.Error("a change was not written")
	}
}

// holdTopicLock takes the topic's advisory lock, as a poll under a limit does until it
// commits (task_poll_limited), in a transaction of its own, which it returns; the
// transaction is rolled back when the test ends, if it has not been by then.
func (f *fixture) holdTopicLock() pgx.Tx {
	f.t.Helper()
	holder, err := f.pool.Begin(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = holder.Rollback(context.WithoutCancel(f.ctx)) })
	if _, err := holder.Exec(f.ctx, "SELECT pg_advisory_xact_lock(1885828451, hashtext($1))", f.topic); err != nil {
		f.t.Fatal(err)
	}
	return holder
}

// TestSQLRatePeriodGoHolds: task_topic_set_limits refuses a rate_period longer than a
// Go time.Duration holds (math.MaxInt64 ns: 9 223 372 036 854 ms, about 292 years, the
// bound REST puts on rate_period_ms) with an error naming rate_period (22023), and
// changes nothing. Such a period was stored and read back wrapped round: REST showed
// a negative rate_period_ms.
func TestSQLRatePeriodGoHolds(t *testing.T) {
	f := setup(t)
	if _, err := f.pool.Exec(f.ctx, "SELECT task_topic_set_limits('topic', concurrency => 2, rate => 5, rate_period => '1 minute')"); err != nil {
		t.Fatal(err)
	}
	before, err := f.repo.Topic(f.ctx, f.pool, f.topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, period := range []string{"1000 years", "9223372036855 milliseconds", "178000000 years"} {
		_, err := f.pool.Exec(f.ctx, "SELECT task_topic_set_limits('topic', rate => 1, rate_period => $1::interval)", period)
		if repository.SQLState(err) != "22023" || !strings.Contains(err.Error(), "rate_period ") ||
			!strings.Contains(err.Error(), "longer than 9223372036854 ms") {
			t.Errorf("rate_period %s: %v, want 22023 naming rate_period and the bound", period, err)
		}
	}
	if after, err := f.repo.Topic(f.ctx, f.pool, f.topic); err != nil || after.TopicSettings != before.TopicSettings {
		t.Fatalf("limits after the refusals = %+v, %v; want %+v", after.TopicSettings, err, before.TopicSettings)
	}
	// the longest allowed is read back as it is
	if _, err := f.pool.Exec(f.ctx, "SELECT task_topic_set_limits('topic', rate => 1, rate_period => '9223372036854 milliseconds')"); err != nil {
		t.Fatal(err)
	}
	if got, err := f.repo.Topic(f.ctx, f.pool, f.topic); err != nil || got.RatePeriod != 9223372036854*time.Millisecond {
		t.Errorf("rate period %v, %v; want %v", got.RatePeriod, err, 9223372036854*time.Millisecond)
	}
}

// TestWaitingBehindADelayedBacklog: why a task waits counts the due tasks ahead of it
// among the first 20 000 READY tasks before it: a backlog of delayed tasks ahead (each
// read in the table to tell it from a due one) was read whole at each look.
func TestWaitingBehindADelayedBacklog(t *testing.T) {
	f := setup(t)
	early := f.push(repository.Append, "early")[0]
	if _, err := f.pool.Exec(f.ctx, `SELECT count(*) FROM task_push_batch($1, ARRAY(SELECT 'd' || g FROM generate_series(1, 60000) g),
		delay => interval '1 hour')`, f.topic); err != nil {
		t.Fatal(err)
	}
	late := f.push(repository.Append, "late")[0]
	if _, err := f.pool.Exec(f.ctx, `ANALYZE task`); err != nil {
		t.Fatal(err)
	}
	var table string
	if err := f.pool.QueryRow(f.ctx, `SELECT partition FROM task_topic WHERE topic = $1`, f.topic).Scan(&table); err != nil {
		t.Fatal(err)
	}
	tx, read := f.blockCounter(t, table)
	before := read()
	why, err := f.repo.Waiting(f.ctx, tx, f.topic, late.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	blocks := read() - before
	if len(why) != 1 || why[0].Kind != "ahead" || !strings.Contains(why[0].Text, "at least 1 due READY tasks are ahead of it") ||
		!strings.Contains(why[0].Text, "among the first 20000") {
		t.Errorf("why the last task waits: %+v, want the one due task ahead among the first 20000 read", why)
	}
	if blocks > 700 {
		t.Errorf("Waiting read %d blocks of the topic's table and indexes behind 60 000 delayed tasks, want at most 700 (reading them all: about 1 100)", blocks)
	}
	t.Logf("Waiting read %d blocks", blocks)
	// the due task first: nothing ahead of it holds it
	if _, err := f.pool.Exec(f.ctx, `UPDATE task SET not_before = now() + interval '1 hour' WHERE topic = $1 AND sequence = $2`, f.topic, early.Sequence); err != nil {
		t.Fatal(err)
	}
	why, err = f.repo.Waiting(f.ctx, f.pool, f.topic, late.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if len(why) != 1 || why[0].Kind != "ahead" || !strings.Contains(why[0].Text, "at least 20000 READY tasks are ahead of it in poll order, the first 20000 of them delayed") {
		t.Errorf("why the last task waits behind delayed ones only: %+v", why)
	}
}

// TestWaitingOnAKeyedTopic: in a topic polled by key (fair, or with a per-key limit) a
// task with a key has ahead of it the due tasks of a higher priority and its key's
// before it, not every task before it: behind 300 tasks of key a, b's one task had 300
// "ahead in poll order", though the next poll takes it on b's turn.
func TestWaitingOnAKeyedTopic(t *testing.T) {
	f := setup(t)
	if _, err := f.repo.UpdateSettings(f.ctx, f.pool, f.topic, func(s *repository.TopicSettings) { s.Fair = true }); err != nil {
		t.Fatal(err)
	}
	push := func(key string, n, priority int) []repository.Task {
		t.Helper()
		creations := make([]repository.Creation, n)
		for i := range creations {
			creations[i] = repository.Creation{Identifier: fmt.Sprintf("%s%d", key, i), ConcurrencyKey: key, Priority: int16(priority)}
		}
		tasks, err := f.repo.Push(f.ctx, f.pool, f.topic, repository.Append, creations...)
		if err != nil {
			t.Fatal(err)
		}
		return tasks
	}
	push("a", 300, 0)
	b := push("b", 2, 0)
	why, err := f.repo.Waiting(f.ctx, f.pool, f.topic, b[0].Sequence)
	if err != nil || len(why) != 1 || why[0].Kind != "none" {
		t.Errorf("why b's first task waits behind 300 of a: %+v, %v; want nothing (b's turn)", why, err)
	}
	why, err = f.repo.Waiting(f.ctx, f.pool, f.topic, b[1].Sequence)
	if err != nil || len(why) != 1 || why[0].Kind != "ahead" || !strings.Contains(why[0].Text, `1 due READY tasks go before it`) ||
		!strings.Contains(why[0].Text, `key "b"`) {
		t.Errorf("why b's second task waits: %+v, %v; want b's first ahead of it", why, err)
	}
	push("c", 5, -1) // a higher priority goes first, whatever its key
	why, err = f.repo.Waiting(f.ctx, f.pool, f.topic, b[0].Sequence)
	if err != nil || len(why) != 1 || why[0].Kind != "ahead" || !strings.Contains(why[0].Text, `5 due READY tasks go before it`) {
		t.Errorf("why b's first task waits behind 5 of a higher priority: %+v, %v", why, err)
	}
	// pushed without a key (stored as the key '', which takes its turn as a key does):
	// the higher priority's 5 and its key's 1 before it
	keyless := f.push(repository.Append, "keyless", "keyless too")
	why, err = f.repo.Waiting(f.ctx, f.pool, f.topic, keyless[1].Sequence)
	if err != nil || len(why) != 1 || why[0].Kind != "ahead" || !strings.Contains(why[0].Text, "6 due READY tasks go before it") ||
		!strings.Contains(why[0].Text, "pushed without a concurrency key") {
		t.Errorf("why a task pushed without a key waits: %+v, %v", why, err)
	}
	// without a key at all (NULL: pushed before the topic was polled by key) it waits in
	// poll order, as in a topic not polled by key
	if _, err := f.pool.Exec(f.ctx, "UPDATE task SET concurrency_key = NULL WHERE topic = $1 AND sequence = $2", f.topic, keyless[1].Sequence); err != nil {
		t.Fatal(err)
	}
	why, err = f.repo.Waiting(f.ctx, f.pool, f.topic, keyless[1].Sequence)
	if err != nil || len(why) != 1 || why[0].Kind != "ahead" || !strings.Contains(why[0].Text, "308 due READY tasks are ahead of it in poll order") {
		t.Errorf("why a task without a key waits: %+v, %v", why, err)
	}
}

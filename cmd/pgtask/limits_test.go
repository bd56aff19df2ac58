package main

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/wire"
	"github.com/pgtask/pgtask/repository"
)

// TestTopicLimits: limits set, shown with their use, cleared and refused from the CLI;
// a push carries its concurrency key.
func TestTopicLimits(t *testing.T) {
	f := setup(t)
	f.ok("topic", "add", "api", "--concurrency", "3", "--key-concurrency", "1", "--rate", "50/s", "--burst", "10", "--fair")
	topic, err := f.repo.Topic(f.ctx, f.pool, "api")
	if err != nil {
		t.Fatal(err)
	}
	want := repository.TopicSettings{MaxAttempts: topic.MaxAttempts, BackoffBase: topic.BackoffBase, BackoffCap: topic.BackoffCap,
		BackoffJitter: topic.BackoffJitter, Concurrency: 3, KeyConcurrency: 1, Rate: 50, RatePeriod: time.Second, RateBurst: 10, Fair: true}
	if topic.TopicSettings != want {
		t.Fatalf("settings %+v, want %+v", topic.TopicSettings, want)
	}

	t.Run("PushCarriesTheKey", func(t *testing.T) {
		f.ok("push", "--topic", "api", "--key", "acme", "a")
		if r := f.cliIn(`{"identifier": "b", "key": "zeta"}`+"\n"+"c\n", "push", "--topic", "api", "--key", "acme"); r.err != nil {
			t.Fatalf("push from stdin: %v\n%s", r.err, r.stderr)
		}
		tasks, err := f.repo.Poll(f.ctx, f.pool, "api", repository.FIFO, repository.None, 10)
		if err != nil {
			t.Fatal(err)
		}
		keys := map[string]string{}
		for _, task := range tasks {
			keys[task.Identifier] = task.ConcurrencyKey
		}
		// one per key: the per-key limit is 1
		if len(tasks) != 2 || keys["a"] != "acme" || keys["b"] != "zeta" {
			t.Fatalf("polled %v", keys)
		}
	})

	t.Run("ShowSaysLimitsAndTheirUse", func(t *testing.T) {
		out := f.ok("topic", "show", "api")
		wantContains(t, out, "concurrency 3", "key concurrency 1", "rate 50/1s burst 10", "fair",
			"active", "2 of 3", "2 at their limit, 1 with READY tasks", "tokens", "of 10", "1 READY")
		var got wire.Topic
		if err := json.Unmarshal([]byte(f.ok("topic", "show", "api", "--json")), &got); err != nil {
			t.Fatal(err)
		}
		if got.Usage == nil || got.Usage.Active != 2 || *got.Settings.Concurrency != 3 {
			t.Fatalf("show --json: %+v", got)
		}
	})

	t.Run("SetChangesAndClearsLimits", func(t *testing.T) {
		wantContains(t, f.ok("topic", "set", "api", "--concurrency", "none", "--rate", "600/1m"), "rate 600/1m burst 600")
		wantContains(t, f.ok("topic", "set", "api", "--rate", "none", "--key-concurrency", "none", "--fair=false"), "queue cap")
		topic, err := f.repo.Topic(f.ctx, f.pool, "api")
		if err != nil {
			t.Fatal(err)
		}
		if topic.Limited() {
			t.Fatalf("limits left: %+v", topic.TopicSettings)
		}
		wantContains(t, f.ok("topic", "show", "api"), "limits", "none")
	})

	t.Run("BadLimitsAreRefusedAndNothingIsWritten", func(t *testing.T) {
		f.ok("topic", "set", "api", "--concurrency", "2")
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"--concurrency", "0"}, "--concurrency: 0 is below 1"},
			{[]string{"--concurrency", "-1"}, "--concurrency: -1 is below 1"},
			{[]string{"--concurrency", "many"}, `--concurrency: "many" is not a whole number`},
			{[]string{"--key-concurrency", "0"}, "--key-concurrency: 0 is below 1"},
			{[]string{"--rate", "50"}, `--rate: "50" has no period`},
			{[]string{"--rate", "50/fortnight"}, `--rate: period "fortnight" is not a duration`},
			{[]string{"--rate", "0/s"}, "--rate: 0 is below 1"},
			{[]string{"--rate", "5/s", "--burst", "0"}, "--burst: 0 is below 1"},
			{[]string{"--rate", "none", "--burst", "3"}, "--burst: given with --rate none"},
			{[]string{"--rate", "5/1.5ms"}, "--rate: period 1.5ms is not a whole number of milliseconds"},
			{[]string{"--retention", "1us"}, "--retention: 1µs is not a whole number of milliseconds"},
			{[]string{"--backoff-base", "1500us"}, "--backoff-base: 1.5ms is not a whole number of milliseconds"},
		} {
			wantUsage(t, f.cli(append([]string{"topic", "set", "api", "--max-attempts", "9"}, c.args...)...), c.want)
		}
		// a burst for a topic without a rate: known only once the topic is read
		f.ok("topic", "add", "norate")
		wantUsage(t, f.cli("topic", "set", "norate", "--burst", "3", "--max-attempts", "9"), `--burst: topic "norate" has no rate limit`)
		wantUsage(t, f.cli("topic", "add", "newnorate", "--burst", "3"), `--burst: topic "newnorate" has no rate limit`)
		if _, err := f.repo.Topic(f.ctx, f.pool, "newnorate"); !errors.Is(err, repository.ErrUnknownTopic) {
			t.Errorf("a topic added with a refused burst: %v, want it not written", err)
		}
		if topic, err := f.repo.Topic(f.ctx, f.pool, "norate"); err != nil || topic.MaxAttempts == 9 || topic.RateBurst != 0 {
			t.Errorf("norate after a refused burst: %+v, %v", topic.TopicSettings, err)
		}
		wantUsage(t, f.cli("push", "--topic", "api", "--key", "a\xffb", "x"), "--key: concurrency key is not valid UTF-8")
		wantRuntime(t, f.cli("topic", "show", "nope"), repository.ErrUnknownTopic)
		topic, err := f.repo.Topic(f.ctx, f.pool, "api")
		if err != nil || topic.Concurrency != 2 || topic.MaxAttempts == 9 {
			t.Fatalf("after refusals: %+v, %v", topic.TopicSettings, err)
		}
	})
}

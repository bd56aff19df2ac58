package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/wire"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

// latestMigration is the highest version among the embedded migrations.
func latestMigration(t *testing.T) int {
	t.Helper()
	entries, err := fs.ReadDir(schema.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	latest := 0
	for _, e := range entries {
		if n, err := strconv.Atoi(strings.SplitN(e.Name(), "_", 2)[0]); err == nil && n > latest {
			latest = n
		}
	}
	return latest
}

func TestMigrate(t *testing.T) {
	f := setup(t)
	latest := latestMigration(t)
	if got := f.ok("migrate", "version"); got != fmt.Sprintf("%d\n", latest) {
		t.Fatalf("migrate version printed %q, want %d", got, latest)
	}
	wantContains(t, f.ok("migrate", "up"), fmt.Sprintf("schema at version %d", latest))

	// one step down and up again: the topic and its task stay
	seqs := f.push("kept")
	wantContains(t, f.ok("migrate", "down", "--yes", "--to", strconv.Itoa(latest-1)), fmt.Sprintf("schema at version %d", latest-1))
	if got := f.ok("migrate", "version"); got != fmt.Sprintf("%d\n", latest-1) {
		t.Fatalf("after down --to %d, migrate version printed %q", latest-1, got)
	}
	wantUsage(t, f.cli("migrate", "down", "--yes", "--to", strconv.Itoa(latest)),
		fmt.Sprintf("--to %d: the schema is at version %d, below it", latest, latest-1))
	wantContains(t, f.ok("migrate", "down", "--yes", "--to", strconv.Itoa(latest-2)), fmt.Sprintf("schema at version %d", latest-2))
	wantContains(t, f.ok("migrate", "up", "--to", strconv.Itoa(latest-1)), fmt.Sprintf("schema at version %d", latest-1))
	wantUsage(t, f.cli("migrate", "up", "--to", strconv.Itoa(latest-2)),
		fmt.Sprintf("--to %d: the schema is at version %d, above it", latest-2, latest-1))
	wantContains(t, f.ok("migrate", "up", "--to", strconv.Itoa(latest-1)), fmt.Sprintf("schema at version %d", latest-1)) // no change
	wantContains(t, f.ok("migrate", "up", "--to", strconv.Itoa(latest)), fmt.Sprintf("schema at version %d", latest))
	if task := f.get(seqs[0]); task.Identifier != "kept" || task.State != repository.Ready {
		t.Fatalf("after down --to %d and up again, task %d = %+v, want the READY task kept", latest-2, seqs[0], task)
	}
	wantContains(t, f.ok("migrate", "up"), fmt.Sprintf("schema at version %d", latest))

	wantContains(t, f.ok("migrate", "down", "--yes"), "schema removed")
	if got := f.ok("migrate", "version"); got != "0\n" {
		t.Fatalf("after down, migrate version printed %q", got)
	}
	wantRuntime(t, f.cli("topic", "list"), nil) // no tables any more
	f.ok("migrate", "up")
	wantContains(t, f.ok("topic", "list"), "no topics")
}

func TestDatabaseURLFromEnvironment(t *testing.T) {
	f := setup(t)
	r := runCLI(f.ctx, "", map[string]string{"DATABASE_URL": f.url}, "migrate", "version")
	if r.err != nil || r.stdout != fmt.Sprintf("%d\n", latestMigration(t)) {
		t.Fatalf("err %v, stdout %q", r.err, r.stdout)
	}
	t.Run("FlagWinsOverEnvironment", func(t *testing.T) {
		r := runCLI(f.ctx, "", map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"},
			"migrate", "version", "--database-url", f.url)
		if r.err != nil {
			t.Fatal(r.err)
		}
	})
}

func TestTopic(t *testing.T) {
	f := setup(t)
	t.Run("AddRegistersWithSettings", func(t *testing.T) {
		out := f.ok("topic", "add", "mail", "--max-attempts", "5", "--backoff-base", "2s", "--queue-cap", "100", "--retention", "7d")
		wantContains(t, out, `topic "mail" added`, "max attempts 5", "retention 168h")
		topic, err := f.repo.Topic(f.ctx, f.pool, "mail")
		if err != nil {
			t.Fatal(err)
		}
		if topic.MaxAttempts != 5 || topic.BackoffBase != 2*time.Second || topic.QueueCap != 100 ||
			topic.Retention != 7*24*time.Hour || topic.BackoffCap != repository.BackoffCapDefault {
			t.Fatalf("settings %+v", topic.TopicSettings)
		}
	})
	t.Run("AddIsIdempotent", func(t *testing.T) {
		wantContains(t, f.ok("topic", "add", "mail"), `topic "mail" already exists`)
	})
	t.Run("SetChangesOnlyGivenSettings", func(t *testing.T) {
		wantContains(t, f.ok("topic", "set", "mail", "--backoff-cap", "10m", "--queue-cap", "0"), "backoff 2s..10m", "queue cap unlimited")
		topic, err := f.repo.Topic(f.ctx, f.pool, "mail")
		if err != nil {
			t.Fatal(err)
		}
		want := repository.TopicSettings{MaxAttempts: 5, BackoffBase: 2 * time.Second, BackoffCap: 10 * time.Minute, Retention: 7 * 24 * time.Hour}
		if topic.TopicSettings != want {
			t.Fatalf("settings %+v, want %+v", topic.TopicSettings, want)
		}
	})
	t.Run("SetUnknownTopicFails", func(t *testing.T) {
		wantRuntime(t, f.cli("topic", "set", "nope", "--max-attempts", "2"), repository.ErrUnknownTopic)
	})
	t.Run("ListShowsTopicsAndSettings", func(t *testing.T) {
		out := f.ok("topic", "list")
		wantContains(t, out, "TOPIC", "mail", "active", "10m", "168h")
		var list topicsJSON
		if err := json.Unmarshal([]byte(f.ok("topic", "list", "--json")), &list); err != nil {
			t.Fatal(err)
		}
		topics := list.Topics
		if len(topics) != 2 || topics[0].Name != "mail" || topics[0].Settings.MaxAttempts != 5 ||
			topics[0].Settings.BackoffCapMs != 600000 || topics[1].Name != "t" {
			t.Fatalf("topics %+v", topics)
		}
	})
	t.Run("PauseAndResume", func(t *testing.T) {
		wantContains(t, f.ok("pause", "mail"), `topic "mail" paused`)
		if topic, err := f.repo.Topic(f.ctx, f.pool, "mail"); err != nil || topic.Active {
			t.Fatal("topic still active after pause")
		}
		wantContains(t, f.ok("topic", "list"), "paused")
		wantContains(t, f.ok("resume", "mail"), `topic "mail" resumed`)
		if topic, err := f.repo.Topic(f.ctx, f.pool, "mail"); err != nil || !topic.Active {
			t.Fatal("topic paused after resume")
		}
		wantRuntime(t, f.cli("pause", "nope"), repository.ErrUnknownTopic)
	})
	t.Run("DedicateGivesATableOfItsOwn", func(t *testing.T) {
		wantContains(t, f.ok("topic", "list"), "shared")
		wantContains(t, f.ok("topic", "add", "heavy", "--dedicated"), `topic "heavy" added`, `topic "heavy" dedicated: its tasks are in table task_`)
		wantContains(t, f.ok("topic", "dedicate", "heavy"), `topic "heavy" already has a table of its own`)
		wantContains(t, f.ok("topic", "list"), "dedicated")
		var list topicsJSON
		if err := json.Unmarshal([]byte(f.ok("topic", "list", "--json")), &list); err != nil {
			t.Fatal(err)
		}
		for _, topic := range list.Topics {
			if topic.Dedicated != (topic.Name == "heavy") || topic.Table == "" {
				t.Errorf("topic %s: dedicated %v, table %q", topic.Name, topic.Dedicated, topic.Table)
			}
		}
		wantRuntime(t, f.cli("topic", "dedicate", "nope"), repository.ErrUnknownTopic)
		f.ok("push", "--topic", "mail", "a")
		r := f.cli("topic", "dedicate", "mail")
		wantRuntime(t, r, repository.ErrTopicInUse)
		wantContains(t, r.stderr, "pause it")
		// topic add of a topic in use, with settings: refused, and nothing changed (the
		// settings were committed before the dedication failed)
		r = f.cli("topic", "add", "mail", "--max-attempts", "7", "--dedicated")
		wantRuntime(t, r, repository.ErrTopicInUse)
		wantContains(t, r.stderr, "the settings given were not applied")
		if topic, err := f.repo.Topic(f.ctx, f.pool, "mail"); err != nil || topic.MaxAttempts == 7 || topic.Dedicated {
			t.Errorf("topic mail after a refused add --dedicated: max attempts %d, dedicated %v; want both unchanged", topic.MaxAttempts, topic.Dedicated)
		}
		// settings the repository refuses leave no new topic behind
		r = f.cli("topic", "add", "fresh", "--burst", "3", "--dedicated")
		if r.err == nil {
			t.Fatal("topic add with a burst but no rate succeeded")
		}
		if _, err := f.repo.Topic(f.ctx, f.pool, "fresh"); !errors.Is(err, repository.ErrUnknownTopic) {
			t.Errorf("topic fresh after a refused add: %v, want unknown", err)
		}
		wantContains(t, f.ok("topic", "add", "fresh", "--max-attempts", "4", "--dedicated"), `topic "fresh" dedicated`, "settings: ")
		if topic, _ := f.repo.Topic(f.ctx, f.pool, "fresh"); topic.MaxAttempts != 4 || !topic.Dedicated {
			t.Errorf("topic fresh: max attempts %d, dedicated %v; want 4 and dedicated", topic.MaxAttempts, topic.Dedicated)
		}
		// a new topic whose dedication fails is not left behind, shared (a table of the
		// name the dedication gives the topic's, left over, makes it fail)
		if _, err := f.pool.Exec(f.ctx, `CREATE TABLE "task_`+fmt.Sprintf("%x", md5.Sum([]byte("blocked")))+`" (x int)`); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{}, {"--max-attempts", "3"}} {
			r = f.cli(append([]string{"topic", "add", "blocked", "--dedicated"}, args...)...)
			if r.err == nil || !strings.Contains(r.stderr, "already exists") {
				t.Fatalf("topic add --dedicated %v of a topic whose table exists: %v, stderr %q; want refused", args, r.err, r.stderr)
			}
			if strings.Contains(r.stdout, "added") {
				t.Errorf("refused topic add --dedicated %v says %q", args, r.stdout)
			}
			if _, err := f.repo.Topic(f.ctx, f.pool, "blocked"); !errors.Is(err, repository.ErrUnknownTopic) {
				t.Fatalf("topic blocked after a refused add --dedicated %v: %v, want unknown (nothing written)", args, err)
			}
		}
		wantContains(t, f.ok("topic", "destroy", "heavy"), `topic "heavy" destroyed`)
	})
	t.Run("DestroyRemovesTopic", func(t *testing.T) {
		// its schedules go with it, and the command names them; another topic's stay
		f.ok("schedule", "add", "digest", "--topic", "mail", "--spec", "@daily")
		f.ok("schedule", "add", "weekly", "--topic", "mail", "--spec", "@weekly")
		f.ok("topic", "add", "other")
		f.ok("schedule", "add", "other-daily", "--topic", "other", "--spec", "@daily")
		out := f.ok("topic", "destroy", "mail")
		wantContains(t, out, `topic "mail" destroyed`, `removed with it: schedule "digest", schedule "weekly"`)
		if strings.Contains(out, "other-daily") {
			t.Errorf("topic destroy named another topic's schedule: %s", out)
		}
		if _, err := f.repo.Schedule(f.ctx, f.pool, "digest"); !errors.Is(err, repository.ErrUnknownSchedule) {
			t.Errorf("schedule digest after its topic's destroy: %v, want unknown", err)
		}
		if _, err := f.repo.Schedule(f.ctx, f.pool, "other-daily"); err != nil {
			t.Errorf("another topic's schedule after the destroy: %v", err)
		}
		if _, err := f.repo.Topic(f.ctx, f.pool, "mail"); err == nil {
			t.Fatal("topic survived destroy")
		}
		r := f.cli("topic", "destroy", "mail")
		wantRuntime(t, r, repository.ErrUnknownTopic)
		wantContains(t, r.stderr, `pgtask: topic destroy: topic "mail": unknown topic`)
	})
}

// TestTopicBackoffCapBelowBase: settings whose retries would wait the backoff cap, never
// the base, which the repository refuses, are a usage error naming the flag, with
// nothing written. They exited 1 with the repository's message, naming no flag.
func TestTopicBackoffCapBelowBase(t *testing.T) {
	f := setup(t)
	f.ok("topic", "add", "mail", "--backoff-base", "1s", "--backoff-cap", "1m")
	wantSettings := func(t *testing.T, base, limit time.Duration) {
		t.Helper()
		topic, err := f.repo.Topic(f.ctx, f.pool, "mail")
		if err != nil {
			t.Fatal(err)
		}
		if topic.BackoffBase != base || topic.BackoffCap != limit {
			t.Errorf("backoff %v..%v, want %v..%v (unchanged)", topic.BackoffBase, topic.BackoffCap, base, limit)
		}
	}
	t.Run("SetCapBelowTheStoredBase", func(t *testing.T) {
		wantUsage(t, f.cli("topic", "set", "mail", "--backoff-cap", "1ms"),
			"topic set: --backoff-cap: 1ms is below the backoff base 1s: retries would wait the cap, never the base")
		wantSettings(t, time.Second, time.Minute)
	})
	t.Run("SetBaseAboveTheStoredCap", func(t *testing.T) {
		wantUsage(t, f.cli("topic", "set", "mail", "--backoff-base", "2m", "--retention", "1d"),
			"topic set: --backoff-base: 2m is above the backoff cap 1m")
		wantSettings(t, time.Second, time.Minute)
	})
	t.Run("AddLeavesNoTopic", func(t *testing.T) {
		for _, dedicated := range []string{"--dedicated=false", "--dedicated"} {
			wantUsage(t, f.cli("topic", "add", "fresh", "--backoff-base", "10s", "--backoff-cap", "1s", dedicated),
				"topic add: --backoff-cap: 1s is below the backoff base 10s")
			if _, err := f.repo.Topic(f.ctx, f.pool, "fresh"); !errors.Is(err, repository.ErrUnknownTopic) {
				t.Errorf("topic fresh after a refused add %s: %v, want unknown", dedicated, err)
			}
		}
	})
	t.Run("AddToAnExistingTopic", func(t *testing.T) {
		wantUsage(t, f.cli("topic", "add", "mail", "--backoff-cap", "500ms"), "topic add: --backoff-cap: 500ms is below the backoff base 1s")
		wantSettings(t, time.Second, time.Minute)
	})
	t.Run("WithoutRetriesTheRuleDoesNotApply", func(t *testing.T) {
		wantContains(t, f.ok("topic", "set", "mail", "--max-attempts", "1", "--backoff-cap", "1ms"), "backoff 1s..1ms")
	})
}

var sequenceRE = regexp.MustCompile(`sequences? (\d+)`)

func TestPush(t *testing.T) {
	f := setup(t)
	t.Run("FromArguments", func(t *testing.T) {
		out := f.ok("push", "--topic", "t", "--priority", "-3", "--reference", "ref-1", "--delay", "1h", "--suspended", "id-1", `{"x": 1}`)
		m := sequenceRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no sequence in %q", out)
		}
		seq, _ := strconv.ParseInt(m[1], 10, 64)
		task := f.get(seq)
		if task.Identifier != "id-1" || task.Input != `{"x": 1}` || task.Priority != -3 || task.Reference != "ref-1" ||
			task.State != repository.Suspended || time.Until(task.NotBefore) < 59*time.Minute {
			t.Fatalf("task %+v", task)
		}
	})
	t.Run("IdentifierOnly", func(t *testing.T) {
		out := f.ok("push", "--topic", "t", "lonely")
		seq, _ := strconv.ParseInt(sequenceRE.FindStringSubmatch(out)[1], 10, 64)
		if task := f.get(seq); task.Input != "" || task.State != repository.Ready {
			t.Fatalf("task %+v", task)
		}
	})
	t.Run("FlagsAfterArguments", func(t *testing.T) {
		out := f.ok("push", "late-flags", "--topic", "t", "--priority", "7")
		seq, _ := strconv.ParseInt(sequenceRE.FindStringSubmatch(out)[1], 10, 64)
		if task := f.get(seq); task.Priority != 7 {
			t.Fatalf("task %+v", task)
		}
	})
	t.Run("FromStandardInputInBatches", func(t *testing.T) {
		stdin := "a\tinput a\n\nb\n  \r\nc\twith\ttabs\r\n" +
			`{"identifier": "d", "input": "text", "priority": 2, "delay": "30m", "reference": "r"}` + "\n" +
			`{"identifier": "e", "input": {"n": [1, 2]}, "suspended": true}` // no final newline
		r := f.cliIn(stdin, "push", "--topic", "t", "--batch-size", "2", "--priority", "9")
		if r.err != nil {
			t.Fatal(r.err)
		}
		wantContains(t, r.stdout, "pushed 5 tasks")
		tasks, err := f.repo.Page(f.ctx, f.pool, "t", repository.TaskFilter{}, repository.MaxSequence, 100, repository.Backward)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]repository.Task{}
		for _, task := range tasks[:5] {
			got[task.Identifier] = task
		}
		for id, want := range map[string]struct {
			input    string
			priority int16
			state    repository.State
		}{
			"a": {"input a", 9, repository.Ready},
			"b": {"", 9, repository.Ready},
			"c": {"with\ttabs", 9, repository.Ready},
			"d": {"text", 2, repository.Ready},
			"e": {`{"n": [1, 2]}`, 9, repository.Suspended},
		} {
			task, ok := got[id]
			if !ok || task.Input != want.input || task.Priority != want.priority || task.State != want.state {
				t.Errorf("task %q = %+v, want %+v", id, task, want)
			}
		}
		if d := got["d"]; d.Reference != "r" || time.Until(d.NotBefore) < 29*time.Minute {
			t.Errorf("task d %+v", d)
		}
	})
	// A signal while the input is quiet (tail -f | pgtask push under a service manager)
	// stops the push at once; the lines read are pushed, and the message says where the
	// input stopped. The push waited for the end of the input, then dropped its batch
	// without naming a line.
	t.Run("InterruptedWhileWaitingPushesWhatItRead", func(t *testing.T) {
		ctx, cancel := context.WithCancel(f.ctx)
		in, feed := io.Pipe()
		defer feed.Close()
		var stdout, stderr bytes.Buffer
		e := &env{stdin: in, stdout: &stdout, stderr: &stderr, lookupenv: lookupIn(nil)}
		done := make(chan error, 1)
		go func() {
			done <- runEnv(ctx, e, []string{"push", "--topic", "t", "--batch-size", "100", "--database-url", f.url, "--reference", "interrupted"})
		}()
		if _, err := io.WriteString(feed, "i1\n\ni2\n"); err != nil { // taken by the reader
			t.Fatal(err)
		}
		cancel()
		var err error
		select {
		case err = <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("push still waiting for its input 20 s after its context ended")
		}
		if err == nil {
			t.Fatal("an interrupted push succeeded")
		}
		// the lines taken from the pipe before the signal may not all have reached the
		// batch yet: what was pushed and what the message says agree
		tasks, lerr := f.repo.Excerpts(f.ctx, f.pool, "t", repository.TaskFilter{Reference: "interrupted"}, repository.MinSequence, 10, repository.Forward)
		if lerr != nil {
			t.Fatal(lerr)
		}
		switch len(tasks) {
		case 0:
			wantContains(t, err.Error(), "push: interrupted", "nothing pushed: resume at standard input line 1")
		case 1:
			wantContains(t, err.Error(), "push: interrupted", "1 tasks pushed before it", "lines 1..1: resume at line 2")
		case 2:
			wantContains(t, err.Error(), "push: interrupted", "2 tasks pushed before it", "lines 1..3: resume at line 4")
		default:
			t.Errorf("%d tasks pushed from 2 lines", len(tasks))
		}
		for i, task := range tasks {
			if want := fmt.Sprintf("i%d", i+1); task.Identifier != want {
				t.Errorf("task %d of the interrupted push: %q, want %q", i, task.Identifier, want)
			}
		}
		t.Logf("%d of 2 lines pushed: %v", len(tasks), err)
	})
	t.Run("BadLineIsNamedAndEarlierBatchesStay", func(t *testing.T) {
		r := f.cliIn("x1\nx2\n{\"identifier\": \"x3\", \"colour\": 1}\n", "push", "--topic", "t", "--batch-size", "2")
		wantRuntime(t, r, nil)
		wantContains(t, r.err.Error(), "standard input line 3", `unknown field "colour"`, "2 tasks pushed before it", "lines 1..2: resume at line 3")
		for _, c := range []struct{ line, want string }{
			{`{"input": "no id"}`, `"identifier" is missing`},
			{`{"identifier": "i", "delay": "-1s"}`, `"delay"`},
			{`{"identifier": "i", "priority": 99999}`, `field "priority": got a JSON number 99999, want an integer from -32768 to 32767`},
			// These said: want an integer from -9223372036854775808 to 9223372036854775807.
			{`{"identifier": "i", "priority": 1.5}`, `field "priority": got a JSON number 1.5, want an integer from -32768 to 32767`},
			// One of them was dropped without a word.
			{`{"identifier": "i", "delay": "1h", "not_before": "2030-01-01T00:00:00Z"}`, `give at most one of "delay" and "not_before"`},
			{`{"identifier": "i"} {}`, "unexpected data after the JSON object"},
			{`{"identifier": "i"}}`, "unexpected data after the JSON object"},
			{`{"identifier": "i", "identifier": "j"}`, `field "identifier" is given twice`},
			{`{"identifier": "i", "priority": null}`, `field "priority": got a JSON null, want an integer from -32768 to 32767`},
			{strings.Repeat("y", 501), "at most 500"},
		} {
			r := f.cliIn(c.line, "push", "--topic", "t")
			wantRuntime(t, r, nil)
			wantContains(t, r.err.Error(), "line 1", c.want)
		}
	})
	// A line's "not_before" replaces --delay, the zero time too: it is the distant past,
	// as the REST API takes it. The zero time read as no time, and the task got --delay.
	t.Run("NotBeforeOverridesDelayEvenTheZeroTime", func(t *testing.T) {
		stdin := `{"identifier": "zero", "not_before": "0001-01-01T00:00:00Z"}` + "\n" +
			`{"identifier": "later", "not_before": "2030-01-01T00:00:00Z"}` + "\n" +
			`{"identifier": "delayed"}` + "\n"
		r := f.cliIn(stdin, "push", "--topic", "t", "--delay", "1h")
		if r.err != nil {
			t.Fatal(r.err)
		}
		m := regexp.MustCompile(`sequences (\d+)\.\.`).FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("no sequences in %q", r.stdout)
		}
		first, _ := strconv.ParseInt(m[1], 10, 64)
		if zero := f.get(first); zero.Identifier != "zero" || time.Until(zero.NotBefore) > 0 {
			t.Errorf("task %q: not before %v, want a time past (due at once, not after --delay)", zero.Identifier, zero.NotBefore)
		}
		if later := f.get(first + 1); later.Identifier != "later" || !later.NotBefore.Equal(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)) {
			t.Errorf("task %q: not before %v, want 2030-01-01", later.Identifier, later.NotBefore)
		}
		if delayed := f.get(first + 2); delayed.Identifier != "delayed" || time.Until(delayed.NotBefore) < 59*time.Minute {
			t.Errorf("task %q: not before %v, want --delay 1h from now", delayed.Identifier, delayed.NotBefore)
		}
	})
	t.Run("LargestBatchSize", func(t *testing.T) {
		wantContains(t, f.cliIn("big-1\nbig-2\n", "push", "--topic", "t", "--batch-size", "100000").stdout, "pushed 2 tasks")
	})
	t.Run("EmptyInputPushesNothing", func(t *testing.T) {
		wantContains(t, f.cliIn("\n\n", "push", "--topic", "t").stdout, "nothing pushed")
	})
	t.Run("UnknownTopicFails", func(t *testing.T) {
		wantRuntime(t, f.cli("push", "--topic", "nope", "id"), repository.ErrUnknownTopic)
	})
	t.Run("QueueCapRefusesAndWritesNothing", func(t *testing.T) {
		f.ok("topic", "add", "capped", "--queue-cap", "1")
		wantRuntime(t, f.cliIn("a\nb\n", "push", "--topic", "capped"), repository.ErrQueueFull)
		if n, _ := f.repo.Stats(f.ctx, f.pool, "capped"); n.Ready != 0 {
			t.Fatalf("%d tasks written", n.Ready)
		}
	})
	t.Run("ReplaceMarksOlderRedundant", func(t *testing.T) {
		old := f.push("dup")
		f.ok("push", "--topic", "t", "--insertion", "REPLACE", "dup")
		f.wantState(old[0], repository.Redundant)
	})
}

func TestListAndShow(t *testing.T) {
	f := setup(t)
	seqs := f.push("a", "b", "c", "d", "e")
	f.finish(repository.Fail(fmt.Errorf("boom\nsecond line")))
	more := f.push("f")
	t.Run("PagesWithCursor", func(t *testing.T) {
		out := f.ok("list", "--topic", "t", "--limit", "2")
		wantContains(t, out, "SEQUENCE", "FAILED", "in-a", "boom second line", fmt.Sprintf("next page: --cursor %d", seqs[1]))
		if strings.Contains(out, "in-c") {
			t.Fatalf("first page has a third task:\n%s", out)
		}
		out = f.ok("list", "--topic", "t", "--limit", "2", "--cursor", strconv.FormatInt(seqs[1], 10))
		wantContains(t, out, "in-c", "in-d")
		out = f.ok("list", "--topic", "t", "--limit", "10", "--cursor", strconv.FormatInt(seqs[4], 10))
		wantContains(t, out, "in-f", "READY")
		if strings.Contains(out, "next page") {
			t.Fatalf("last page offers a next page:\n%s", out)
		}
		// a last page as long as the limit: nothing follows it, so no cursor either
		out = f.ok("list", "--topic", "t", "--limit", "2", "--cursor", strconv.FormatInt(seqs[3], 10))
		wantContains(t, out, "in-e", "in-f")
		if strings.Contains(out, "next page") {
			t.Fatalf("a full last page offers a next page:\n%s", out)
		}
		var page struct {
			NextCursor *int64 `json:"next_cursor"`
		}
		if err := json.Unmarshal([]byte(f.ok("list", "--topic", "t", "--limit", "2", "--json",
			"--cursor", strconv.FormatInt(seqs[3], 10))), &page); err != nil || page.NextCursor != nil {
			t.Fatalf("a full last page: next_cursor %v, %v", page.NextCursor, err)
		}
	})
	t.Run("Backward", func(t *testing.T) {
		out := f.ok("list", "--topic", "t", "--backward", "--limit", "1")
		wantContains(t, out, "in-f", fmt.Sprintf("next page: --cursor %d --backward", more[0]))
	})
	t.Run("Filters", func(t *testing.T) {
		var page struct {
			Tasks      []wire.Task `json:"tasks"`
			NextCursor *int64      `json:"next_cursor"`
		}
		if err := json.Unmarshal([]byte(f.ok("list", "--topic", "t", "--state", "ready", "--json")), &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Tasks) != 1 || page.Tasks[0].Identifier != "f" || page.Tasks[0].State != "READY" || page.NextCursor != nil {
			t.Fatalf("page %+v", page)
		}
		out := f.ok("list", "--topic", "t", "--identifier", "c")
		wantContains(t, out, "in-c")
		if strings.Contains(out, "in-d") {
			t.Fatalf("identifier filter let d through:\n%s", out)
		}
		wantContains(t, f.ok("list", "--topic", "t", "--reference", "none"), "no tasks")
	})
	t.Run("UnknownTopicFails", func(t *testing.T) {
		wantRuntime(t, f.cli("list", "--topic", "nope"), repository.ErrUnknownTopic)
	})
	// A state rare among a topic's many tasks: the page is searched --span sequences at
	// a time, a short one (or none) saying where the next search starts.
	t.Run("ARareStateASpanAtATime", func(t *testing.T) {
		if _, err := f.repo.CreateTopic(f.ctx, f.pool, "many"); err != nil {
			t.Fatal(err)
		}
		var rare []int64
		err := f.pool.QueryRow(f.ctx, `
			WITH pushed AS (
				INSERT INTO task (topic, identifier, state, completed)
				SELECT 'many', 'x' || g, CASE WHEN g IN (3, 20990) THEN $1::smallint ELSE $2::smallint END, now()
				FROM generate_series(1, 21000) g
				RETURNING sequence, state)
			SELECT array_agg(sequence ORDER BY sequence) FROM pushed WHERE state = $1::smallint`,
			int16(repository.Filtered), int16(repository.Succeeded)).Scan(&rare)
		if err != nil {
			t.Fatal(err)
		}
		out := f.ok("list", "--topic", "many", "--state", "FILTERED", "--limit", "5", "--span", "2000")
		wantContains(t, out, fmt.Sprintf("%d", rare[0]), "searched as far as sequence ", "; next page: --cursor ")
		out = f.ok("list", "--topic", "many", "--state", "FILTERED", "--limit", "5", "--span", "2000", "--cursor", strconv.FormatInt(rare[0]+5000, 10))
		wantContains(t, out, "no tasks\nsearched as far as sequence ")
		// without a bound, the walk goes on to the end of the topic
		var page struct {
			Tasks      []wire.Task `json:"tasks"`
			NextCursor *int64      `json:"next_cursor"`
		}
		if err := json.Unmarshal([]byte(f.ok("list", "--topic", "many", "--state", "FILTERED", "--span", "0", "--json")), &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Tasks) != 2 || page.Tasks[1].Sequence != rare[1] || page.NextCursor != nil {
			t.Fatalf("page %+v, want tasks %v and no next cursor", page, rare)
		}
		wantUsage(t, f.cli("list", "--topic", "many", "--span", "-1"), "--span: -1 is negative")
	})
	t.Run("ShowPrintsEverything", func(t *testing.T) {
		out := f.ok("show", "--topic", "t", strconv.FormatInt(seqs[0], 10))
		wantContains(t, out, "identifier:  a", "state:       FAILED (descent READY)", "attempt:     1",
			"input:\n  in-a", "output:\n  boom\n  second line", "owner:       test-worker")
		var task wire.Task
		if err := json.Unmarshal([]byte(f.ok("show", "--json", "--topic", "t", strconv.FormatInt(seqs[0], 10))), &task); err != nil {
			t.Fatal(err)
		}
		if task.Sequence != seqs[0] || task.State != "FAILED" || task.Output == nil || *task.Output != "boom\nsecond line" ||
			task.Completed == nil || task.Reference != nil || len(task.Errors) != 1 {
			t.Fatalf("task %+v", task)
		}
	})
	t.Run("ShowSaysWhatHoldsAReadyTask", func(t *testing.T) {
		f.ok("topic", "add", "held")
		tasks, err := f.repo.Push(f.ctx, f.pool, "held", repository.Append, repository.Creation{Identifier: "w"})
		if err != nil {
			t.Fatal(err)
		}
		f.ok("pause", "held")
		seq := strconv.FormatInt(tasks[0].Sequence, 10)
		wantContains(t, f.ok("show", "--topic", "held", seq), "waiting:\n  the topic is paused")
		var task wire.Task
		if err := json.Unmarshal([]byte(f.ok("show", "--json", "--topic", "held", seq)), &task); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(task.Waiting, "the topic is paused") {
			t.Errorf("show --json of a READY task of a paused topic: waiting %q, want it to say the topic is paused", task.Waiting)
		}
		// a finished task has no reason
		if out := f.ok("show", "--topic", "t", strconv.FormatInt(seqs[0], 10)); strings.Contains(out, "waiting:") {
			t.Errorf("show of a FAILED task says it waits:\n%s", out)
		}
	})
	t.Run("ShowUnknownTaskFails", func(t *testing.T) {
		wantRuntime(t, f.cli("show", "--topic", "t", "999999"), repository.ErrUnknownTask)
	})
}

func TestStats(t *testing.T) {
	f := setup(t)
	f.ok("topic", "add", "other")
	f.push("a", "b")
	f.finish(repository.Fail(nil))
	f.push("c", "d", "e")
	f.ok("push", "--topic", "t", "--delay", "1h", "later")
	out := f.ok("stats")
	wantContains(t, out, "TOPIC", "other", "READY")
	var list topicsJSON
	if err := json.Unmarshal([]byte(f.ok("stats", "--topic", "t", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	stats := list.Topics
	if len(stats) != 1 || stats[0].Name != "t" || !stats[0].Active || stats[0].Stats == nil {
		t.Fatalf("stats %+v", stats)
	}
	if s := stats[0].Stats; s.Ready != 4 || s.Delayed != 1 || s.Failed != 2 {
		t.Fatalf("stats %+v", s)
	}
	wantRuntime(t, f.cli("stats", "--topic", "nope"), repository.ErrUnknownTopic)

	t.Run("ACountAtTheCapShowsAPlus", func(t *testing.T) {
		f.ok("topic", "add", "dead")
		if _, err := f.pool.Exec(f.ctx, `INSERT INTO task (topic, identifier, state, completed)
			SELECT 'dead', 'f' || g, 3, now() FROM generate_series(1, $1) g`, repository.StatsCap+1); err != nil {
			t.Fatal(err)
		}
		capped := fmt.Sprintf("%d+", repository.StatsCap)
		row := regexp.MustCompile(`(?m)^dead .*$`).FindString(f.ok("stats", "--topic", "dead"))
		if fields := strings.Fields(row); len(fields) < 7 || fields[6] != capped || fields[2] != "0" {
			t.Errorf("stats row %q, want FAILED %s and READY 0", row, capped)
		}
		wantContains(t, f.ok("topic", "show", "dead"), "0 READY", capped+" FAILED")
		if err := json.Unmarshal([]byte(f.ok("stats", "--topic", "dead", "--json")), &list); err != nil {
			t.Fatal(err)
		}
		if s := list.Topics[0].Stats; s.Failed != repository.StatsCap || !slices.Equal(s.Capped, []string{"failed"}) {
			t.Errorf("JSON stats %+v, want failed %d capped", s, repository.StatsCap)
		}
	})
}

func TestRevive(t *testing.T) {
	f := setup(t)
	failed := f.push("a", "b", "c", "d", "e")
	f.finish(repository.Fail(nil))
	seq := func(i int) string { return strconv.FormatInt(failed[i], 10) }
	t.Run("ResetBySequence", func(t *testing.T) {
		wantContains(t, f.ok("revive", "--topic", "t", "--reset", seq(0)), "reset 1 tasks", seq(0))
		f.wantState(failed[0], repository.Ready)
	})
	t.Run("RecreateBySequence", func(t *testing.T) {
		out := f.ok("revive", "--topic", "t", "--recreate", "append", seq(1))
		f.wantState(failed[1], repository.Recreated)
		m := regexp.MustCompile(seq(1) + `->(\d+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no old->new in %q", out)
		}
		fresh, _ := strconv.ParseInt(m[1], 10, 64)
		if task := f.get(fresh); task.Identifier != "b" || task.Input != "in-b" || task.State != repository.Ready {
			t.Fatalf("fresh copy %+v", task)
		}
	})
	t.Run("AllOrNothing", func(t *testing.T) {
		r := f.cli("revive", "--topic", "t", "--reset", seq(0), seq(2)) // seq(0) is READY now
		wantRuntime(t, r, repository.ErrWrongState)
		f.wantState(failed[2], repository.Failed)
	})
	t.Run("ReassignBySequence", func(t *testing.T) {
		wantContains(t, f.ok("revive", "--topic", "t", "--reassign", "success", seq(2)), "reassigned 1 tasks", "SUCCEEDED")
		f.wantState(failed[2], repository.Succeeded)
	})
	t.Run("ResetByStateWithLimit", func(t *testing.T) {
		out := f.ok("revive", "--topic", "t", "--reset", "--state", "failed", "--limit", "1")
		wantContains(t, out, "reset 1 tasks", seq(3), "more FAILED tasks may remain")
		f.wantState(failed[3], repository.Ready)
		f.wantState(failed[4], repository.Failed)
	})
	t.Run("ReassignByStateWithinRange", func(t *testing.T) {
		out := f.ok("revive", "--topic", "t", "--reassign", "FILTER", "--state", "FAILED", "--from", seq(4), "--to", seq(4))
		wantContains(t, out, "reassigned 1 FAILED tasks")
		f.wantState(failed[4], repository.Filtered)
	})
	t.Run("RangeByTime", func(t *testing.T) {
		// Every task was created before now, so --from now matches none of them.
		from := time.Now().Add(time.Minute).UTC().Format(time.RFC3339)
		wantContains(t, f.ok("revive", "--topic", "t", "--reset", "--state", "FILTERED", "--from", from), "reset 0 tasks")
		to := time.Now().Add(time.Minute).UTC().Format(time.RFC3339)
		wantContains(t, f.ok("revive", "--topic", "t", "--reset", "--state", "FILTERED", "--to", to), "reset 1 tasks")
		f.wantState(failed[4], repository.Ready)
	})
}

// TestReviveAtTheQueueCap: a reset or copies that would take the topic above its queue
// cap exit 1 saying so, and change nothing.
func TestReviveAtTheQueueCap(t *testing.T) {
	f := setup(t)
	failed := f.push("a", "b")
	f.finish(repository.Fail(nil))
	f.ok("topic", "set", "t", "--queue-cap", "1")
	f.push("c")
	seq := strconv.FormatInt(failed[0], 10)
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--reset", seq}, "reset in topic"},
		{[]string{"--recreate", "replace", seq}, "recreate in topic"},
		{[]string{"--reset", "--state", "FAILED"}, "reset in topic"},
		{[]string{"--recreate", "append", "--state", "FAILED", "--limit", "1"}, "recreate in topic"},
	} {
		r := f.cli(append([]string{"revive", "--topic", "t"}, c.args...)...)
		wantRuntime(t, r, repository.ErrQueueFull)
		wantContains(t, r.stderr, c.says, "cap of 1")
	}
	f.wantState(failed[0], repository.Failed)
	f.wantState(failed[1], repository.Failed)
}

func TestCancel(t *testing.T) {
	f := setup(t)
	seqs := f.push("a", "b")
	out := f.ok("cancel", "--topic", "t", strconv.FormatInt(seqs[0], 10))
	wantContains(t, out, fmt.Sprintf("task %d: cancelled (now REDUNDANT)", seqs[0]))
	task := f.get(seqs[0])
	if task.State != repository.Redundant || !strings.Contains(task.Output, "pgtask cancel by") {
		t.Fatalf("task %+v", task)
	}
	t.Run("ActiveTaskIsFlagged", func(t *testing.T) {
		leased, err := f.repo.Poll(f.ctx, f.pool, "t", repository.FIFO, repository.None, 1)
		if err != nil || len(leased) != 1 {
			t.Fatalf("poll: %v %v", leased, err)
		}
		wantContains(t, f.ok("cancel", "--topic", "t", strconv.FormatInt(seqs[1], 10)), "ACTIVE: its handler is told to stop")
		if task := f.get(seqs[1]); !task.Cancelled {
			t.Fatalf("task %+v not flagged", task)
		}
	})
	t.Run("WrongStateRefusesAll", func(t *testing.T) {
		fresh := f.push("c")
		r := f.cli("cancel", "--topic", "t", strconv.FormatInt(fresh[0], 10), strconv.FormatInt(seqs[0], 10))
		wantRuntime(t, r, repository.ErrWrongState)
		f.wantState(fresh[0], repository.Ready)
	})
}

func TestPurge(t *testing.T) {
	f := setup(t)
	done := f.push("a", "b", "c")
	f.finish(repository.Succeed(""))
	failed := f.push("d")
	f.finish(repository.Fail(nil))
	ready := f.push("e")
	t.Run("ByStateAndRange", func(t *testing.T) {
		out := f.ok("purge", "--topic", "t", "--state", "SUCCEEDED", "--to", strconv.FormatInt(done[1], 10))
		wantContains(t, out, `purged 2 tasks from topic "t"`)
		f.wantState(done[2], repository.Succeeded)
	})
	t.Run("FinishedByDefault", func(t *testing.T) {
		wantContains(t, f.ok("purge", "--topic", "t"), "purged 2 tasks")
		f.wantState(ready[0], repository.Ready)
		if _, err := f.repo.Get(f.ctx, f.pool, "t", failed[0]); err == nil {
			t.Fatal("failed task survived purge")
		}
	})
	t.Run("ATimeWindowWithoutTasksPurgesNothing", func(t *testing.T) {
		// no task was created in 2020: the range resolves empty, which is no error
		wantContains(t, f.ok("purge", "--topic", "t", "--from", "2020-01-01T00:00:00Z", "--to", "2020-01-02T00:00:00Z"),
			"no task was created between --from and --to: nothing to do")
		f.wantState(ready[0], repository.Ready)
		// an unknown topic is still one
		wantRuntime(t, f.cli("revive", "--topic", "nope", "--reset", "--state", "FAILED",
			"--from", "2020-01-01T00:00:00Z", "--to", "2020-01-02T00:00:00Z"), repository.ErrUnknownTopic)
	})
	t.Run("All", func(t *testing.T) {
		wantContains(t, f.ok("purge", "--topic", "t", "--all"), "purged 1 tasks")
	})
	t.Run("Retention", func(t *testing.T) {
		f.ok("topic", "set", "t", "--retention", "1ms")
		f.push("old-1", "old-2")
		f.finish(repository.Succeed(""))
		f.ok("topic", "add", "keep")
		if _, err := f.repo.Push(f.ctx, f.pool, "keep", repository.Append, repository.Creation{Identifier: "k"}); err != nil {
			t.Fatal(err)
		}
		kept, err := f.repo.Poll(f.ctx, f.pool, "keep", repository.FIFO, repository.None, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.repo.Complete(f.ctx, f.pool, "keep", kept[0].Decide(repository.Succeed(""))); err != nil {
			t.Fatal(err)
		}
		purged := 0
		eventually(t, 10*time.Second, "both tasks past a 1ms retention purged", func() bool {
			out := f.ok("purge", "--retention")
			m := regexp.MustCompile(`purged (\d+) tasks past`).FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("unexpected output %q", out)
			}
			n, _ := strconv.Atoi(m[1])
			purged += n
			return purged == 2
		})
		if _, err := f.repo.Get(f.ctx, f.pool, "keep", kept[0].Sequence); err != nil {
			t.Fatalf("task of a topic without retention purged: %v", err)
		}
		wantUsage(t, f.cli("purge", "--retention", "--topic", "t"), "does not combine with --topic")
	})
	t.Run("UnknownTopicFails", func(t *testing.T) {
		wantRuntime(t, f.cli("purge", "--topic", "nope"), repository.ErrUnknownTopic)
		wantRuntime(t, f.cli("purge", "--topic", "nope", "--all"), repository.ErrUnknownTopic)
	})
}

func TestExpire(t *testing.T) {
	f := setup(t)
	wantContains(t, f.ok("expire"), "no leases to take back")
	// A worker whose clock says it last heart-beat an hour ago leases a task.
	dead, err := repository.New(repository.Config{Owner: "dead-worker", Now: func() time.Time { return time.Now().Add(-time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.RegisterOwner(f.ctx, f.pool); err != nil {
		t.Fatal(err)
	}
	seqs := f.push("a")
	if _, err := dead.Poll(f.ctx, f.pool, "t", repository.FIFO, repository.None, 1); err != nil {
		t.Fatal(err)
	}
	wantContains(t, f.ok("expire", "--timeout", "2h"), "no leases to take back")
	f.wantState(seqs[0], repository.Active)
	wantContains(t, f.ok("expire", "--timeout", "1m"), `topic "t": 1 leases taken back, 0 of them READY again`)
	f.wantState(seqs[0], repository.Expired)
}

// fullWriter fails every write, as standard output on a full disk does.
type fullWriter struct{}

func (fullWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// TestOutputFailureFails: a command whose output could not be written exits 1 saying so.
// show, schedule show and migrate version wrote with fmt.Fprint and went on: on a full
// disk, "pgtask show --input > input.json" left an empty file and exited 0.
func TestOutputFailureFails(t *testing.T) {
	f := setup(t)
	seq := f.push("a")[0]
	for _, args := range [][]string{
		{"migrate", "version"},
		{"show", "--topic", "t", fmt.Sprint(seq)},
		{"show", "--topic", "t", "--input", fmt.Sprint(seq)},
	} {
		var stderr bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: fullWriter{}, stderr: &stderr, lookupenv: lookupIn(map[string]string{"DATABASE_URL": f.url})}
		if err := runEnv(f.ctx, e, args); err == nil || !strings.Contains(err.Error(), "no space left") {
			t.Errorf("pgtask %s on a full disk: %v, want the write's error", strings.Join(args, " "), err)
		}
	}
}

// TestShowNamesTheUnknownTopic: show of a topic that does not exist says so, not that
// the task is unknown (a mistyped topic read as a missing task).
func TestShowNamesTheUnknownTopic(t *testing.T) {
	f := setup(t)
	seq := f.push("a")[0]
	r := f.cli("show", "--topic", "nosuch", fmt.Sprint(seq))
	if !errors.Is(r.err, repository.ErrUnknownTopic) {
		t.Errorf("show of an unknown topic: %v, want ErrUnknownTopic", r.err)
	}
	r = f.cli("show", "--topic", "t", fmt.Sprint(seq+1000))
	if !errors.Is(r.err, repository.ErrUnknownTask) {
		t.Errorf("show of an unknown task: %v, want ErrUnknownTask", r.err)
	}
}

// TestOlderSchemaRefused: a command (serve too) run against a schema older than the binary's says
// to migrate (an upgraded binary on a database not yet migrated failed with
// PostgreSQL's "column … does not exist", or said the schema was missing); the migrate
// commands still run.
func TestOlderSchemaRefused(t *testing.T) {
	f := setup(t)
	f.ok("migrate", "down", "--yes", "--to", "30")
	r := f.cli("topic", "list")
	if !errors.Is(r.err, repository.ErrSchemaMissing) || !strings.Contains(r.err.Error(), "schema is at version 30") ||
		!strings.Contains(r.err.Error(), "pgtask migrate up") {
		t.Errorf("topic list on schema 30: %v, want the version and pgtask migrate up", r.err)
	}
	// so does serve, before it listens (it started, answered /healthz, then failed each
	// request with a 500); under a deadline: a serve that listens runs until cancelled
	ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	defer cancel()
	r = runCLI(ctx, "", nil, "serve", "--addr", "127.0.0.1:0", "--database-url", f.url)
	if !errors.Is(r.err, repository.ErrSchemaMissing) || !strings.Contains(r.err.Error(), "this pgtask serve needs") {
		t.Errorf("serve on schema 30: %v, want the version and pgtask migrate up", r.err)
	}
	if got := f.ok("migrate", "version"); got != "30\n" {
		t.Errorf("migrate version = %q, want 30", got)
	}
	f.ok("migrate", "up")
	f.ok("topic", "list")
}

// TestSchemaCheckWithoutTheVersionTable: a role granted pgtask's tables but not its
// version table runs the commands as before (the check of the schema's version is
// left out for it), and a standard input holding only a byte order mark pushes nothing.
func TestSchemaCheckWithoutTheVersionTable(t *testing.T) {
	f := setup(t)
	role := fmt.Sprintf("pgtask_reader_%d", time.Now().UnixNano())
	if _, err := f.pool.Exec(f.ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN; GRANT SELECT ON task_topic TO %[1]s`, role)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = f.pool.Exec(context.Background(), fmt.Sprintf(`REVOKE ALL ON task_topic FROM %s; DROP ROLE %[1]s`, role))
	})
	u, err := url.Parse(f.url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	if r := runCLI(f.ctx, "", nil, "topic", "list", "--database-url", u.String()); r.err != nil {
		t.Errorf("topic list as a role without the version table: %v", r.err)
	}
	if r := runCLI(f.ctx, "\uFEFF\n", nil, "push", "--topic", "t", "--database-url", f.url); r.err != nil || !strings.Contains(r.stdout, "nothing pushed") {
		t.Errorf("push of a byte order mark alone: %v, %q; want nothing pushed", r.err, r.stdout)
	}
}

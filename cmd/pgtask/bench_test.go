package main

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// benchJSON runs pgtask bench with --json and returns the JSON object of the last line.
func (f *fixture) benchJSON(args ...string) map[string]any {
	f.t.Helper()
	out := f.ok(append([]string{"bench", "--json", "--interval", "100ms"}, args...)...)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	var result map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &result); err != nil {
		f.t.Fatalf("last line is not a JSON object: %v\n%s", err, out)
	}
	return result
}

// wantOnlyTopicT fails unless the benchmark's topics are gone (only the fixture's "t" is left).
func (f *fixture) wantOnlyTopicT() {
	f.t.Helper()
	topics, err := f.repo.Topics(f.ctx, f.pool)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, topic := range topics {
		if topic.Name != "t" {
			f.t.Errorf("topic %q was left behind", topic.Name)
		}
	}
}

func wantPositive(t *testing.T, result map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		v, ok := result[k].(float64)
		if !ok || v <= 0 {
			t.Errorf("%s = %v, want a positive number (result %v)", k, result[k], result)
		}
	}
}

func TestBench(t *testing.T) {
	f := setup(t)
	t.Run("BurndownProcessesEveryTask", func(t *testing.T) {
		r := f.benchJSON("--mode", "burndown", "--tasks", "500", "--push-batch", "120", "--batch-size", "50")
		wantPositive(t, r, "tasks_per_second", "push_per_second", "process_per_second", "peak_rss_mb", "gomaxprocs")
		if g, ok := r["gogc"].(float64); !ok || g == 0 {
			t.Errorf("gogc = %v, want the collector setting", r["gogc"])
		}
		if r["processed"] != float64(500) || r["mode"] != "burndown" || r["errors"] != float64(0) {
			t.Errorf("result %v", r)
		}
		f.wantOnlyTopicT()
	})
	t.Run("BurndownWithBufferedManagersAndDelay", func(t *testing.T) {
		r := f.benchJSON("--tasks", "200", "--managers", "2", "--workers", "3", "--batch-size", "10",
			"--handler-delay", "1ms", "--pushers", "2", "--push-batch", "30", "--flush-interval", "5ms")
		wantPositive(t, r, "tasks_per_second")
		if r["processed"] != float64(200) || r["managers"] != float64(2) || r["workers"] != float64(3) {
			t.Errorf("result %v", r)
		}
		f.wantOnlyTopicT()
	})
	t.Run("BurndownInChildProcesses", func(t *testing.T) {
		// the children take the shared flags, --vacuum-every among them, from the parent
		r := f.benchJSON("--tasks", "300", "--processes", "2", "--managers", "2", "--batch-size", "20",
			"--push-batch", "50", "--vacuum-every", "100")
		wantPositive(t, r, "tasks_per_second", "processor_peak_rss_mb")
		if r["processed"] != float64(300) || r["errors"] != float64(0) || r["vacuum_every"] != float64(100) {
			t.Errorf("result %v", r)
		}
		f.wantOnlyTopicT()
	})
	t.Run("BurndownOverTopicsBesideIdleOnes", func(t *testing.T) {
		// three child processes on three topics, 40 idle topics registered and removed
		r := f.benchJSON("--tasks", "300", "--topics", "3", "--processes", "3", "--idle-topics", "40",
			"--push-batch", "25", "--batch-size", "20")
		wantPositive(t, r, "tasks_per_second", "idle_topics_register_seconds")
		if r["processed"] != float64(300) || r["topics"] != float64(3) || r["idle_topics"] != float64(40) || r["errors"] != float64(0) {
			t.Errorf("result %v", r)
		}
		f.wantOnlyTopicT()
	})
	t.Run("BurndownFairOverKeys", func(t *testing.T) {
		// a fair topic whose tasks take 7 keys in turn, under a limit of 5, in two processes
		r := f.benchJSON("--tasks", "300", "--keys", "7", "--concurrency", "5", "--processes", "2",
			"--push-batch", "50", "--batch-size", "20")
		wantPositive(t, r, "tasks_per_second")
		if r["processed"] != float64(300) || r["keys"] != float64(7) || r["concurrency"] != float64(5) || r["errors"] != float64(0) {
			t.Errorf("result %v", r)
		}
		f.wantOnlyTopicT()
	})
	t.Run("SustainedOverTopics", func(t *testing.T) {
		r := f.benchJSON("--mode", "sustained", "--duration", "1s", "--rate", "300", "--push-batch", "20",
			"--topics", "2", "--managers", "2")
		wantPositive(t, r, "tasks_per_second", "pushed_per_second")
		f.wantOnlyTopicT()
	})
	t.Run("BurndownWithInsertionAndCondition", func(t *testing.T) {
		// 300 pushes over 100 identifiers: with REPLACE only the last of each stays READY.
		r := f.benchJSON("--tasks", "300", "--identifiers", "100", "--push-batch", "100",
			"--insertion", "replace", "--condition", "singular-by-identifier")
		if r["processed"] != float64(100) || r["insertion"] != "REPLACE" || r["condition"] != "SINGULAR_BY_IDENTIFIER" {
			t.Errorf("result %v", r)
		}
		// the rate of the tasks processed: it counted the 300 pushed
		tps, _ := r["tasks_per_second"].(float64)
		secs, _ := r["seconds"].(float64)
		if got := tps * secs; math.Abs(got-100) > 2 {
			t.Errorf("tasks_per_second %v over %v s: %v tasks, want the 100 processed", tps, secs, got)
		}
		f.wantOnlyTopicT()
	})
	// A bench run's processors fire none of the database's schedules and purge none of
	// its topics' finished tasks: they were full processors, doing that work on the
	// data of a database the user shares with them.
	t.Run("LeavesTheDatabasesSchedulesAlone", func(t *testing.T) {
		if _, err := f.pool.Exec(f.ctx, `SELECT task_schedule('users', 't', '@every 1s', identifier => 'u{time}')`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = f.pool.Exec(context.WithoutCancel(f.ctx), `DELETE FROM task_schedule WHERE name = 'users'`)
		})
		f.benchJSON("--mode", "sustained", "--duration", "2500ms", "--rate", "100", "--push-batch", "10")
		var fired bool
		if err := f.pool.QueryRow(f.ctx, `SELECT last_fire IS NOT NULL FROM task_schedule WHERE name = 'users'`).Scan(&fired); err != nil {
			t.Fatal(err)
		}
		if fired {
			t.Error("the bench's processors fired the database's schedule")
		}
		f.wantOnlyTopicT()
	})
	t.Run("SustainedReportsBothRates", func(t *testing.T) {
		r := f.benchJSON("--mode", "sustained", "--duration", "1s", "--rate", "400", "--push-batch", "50")
		wantPositive(t, r, "tasks_per_second", "pushed_per_second", "completed_p50_ms")
		if _, ok := r["backlog"].(float64); !ok {
			t.Errorf("no backlog in %v", r)
		}
		if pushed := r["pushed"].(float64); pushed > 480 {
			t.Errorf("pushed %v tasks in 1s at --rate 400", pushed)
		}
		// 400/s in batches of 50 with the default linger of 100 ms: every statement carries
		// the 40 or more tasks due by then (pushing what is due every few ms would send 2).
		if pushed, n := r["pushed"].(float64), r["push_statements"].(float64); n < 1 || pushed/n < 25 {
			t.Errorf("%v tasks in %v push statements: the pacing does not fill batches", pushed, n)
		}
		f.wantOnlyTopicT()
	})
	t.Run("LatencyOneAtATime", func(t *testing.T) {
		r := f.benchJSON("--mode", "latency", "--tasks", "20")
		wantPositive(t, r, "tasks_per_second", "p50_ms", "p95_ms", "p99_ms", "max_ms", "completed_p50_ms")
		if r["processed"] != float64(20) {
			t.Errorf("result %v", r)
		}
		if r["p50_ms"].(float64) > r["completed_p50_ms"].(float64) {
			t.Errorf("handler start after completion: %v", r)
		}
		f.wantOnlyTopicT()
	})
	t.Run("LatencyAtRate", func(t *testing.T) {
		r := f.benchJSON("--mode", "latency", "--tasks", "20", "--rate", "200")
		wantPositive(t, r, "p50_ms", "p99_ms")
		f.wantOnlyTopicT()
	})
	t.Run("InterruptedRunDestroysItsTopic", func(t *testing.T) {
		ctx, cancel := context.WithCancel(f.ctx)
		time.AfterFunc(1500*time.Millisecond, cancel)
		r := runCLI(ctx, "", nil, "bench", "--mode", "sustained", "--duration", "1m", "--rate", "200", "--database-url", f.url)
		if r.err == nil || !strings.Contains(r.err.Error(), "interrupted") {
			t.Fatalf("err %v, want an interruption", r.err)
		}
		f.wantOnlyTopicT()
	})
	t.Run("SustainedStopsAtAPushersFailure", func(t *testing.T) {
		// the benchmark's topic destroyed under it: its pushes fail, and the run stops
		// with the error rather than push on for the rest of its minute
		ctx, cancel := context.WithTimeout(f.ctx, 40*time.Second)
		defer cancel()
		time.AfterFunc(2*time.Second, func() { _, _ = f.repo.Destroy(f.ctx, f.pool, "gone") })
		r := runCLI(ctx, "", nil, "bench", "--topic", "gone", "--mode", "sustained", "--duration", "1m", "--rate", "200",
			"--push-batch", "10", "--database-url", f.url)
		if r.err == nil || !strings.Contains(r.err.Error(), "gone") || strings.Contains(r.err.Error(), "interrupted") {
			t.Fatalf("err %v, want the push's failure naming the topic, before the run's minute", r.err)
		}
		f.wantOnlyTopicT()
	})
	t.Run("UsageErrors", func(t *testing.T) {
		wantUsage(t, f.cli("bench", "--mode", "fast"), "--mode", "fast")
		wantUsage(t, f.cli("bench", "--workers", "0"), "--workers")
		wantUsage(t, f.cli("bench", "--vacuum-every", "-5"), "--vacuum-every", "-5")
		wantUsage(t, f.cli("bench", "--push-linger", "-1s"), "--push-linger", "-1s")
		wantUsage(t, f.cli("bench", "--condition", "sometimes"), "--condition")
		wantUsage(t, f.cli("bench", "--topics", "0"), "--topics", "0")
		wantRuntime(t, f.cli("bench", "--topic", "t", "--tasks", "10"), nil)
		if _, err := f.repo.Topic(f.ctx, f.pool, "t"); err != nil {
			t.Errorf("bench --topic naming an existing topic destroyed it: %v", err)
		}
		wantUsage(t, f.cli("bench", "--idle-topics", "-1"), "--idle-topics", "-1")
		wantUsage(t, f.cli("bench", "--mode", "sustained", "--duration", "0s"), "--duration", "0s")
		// an idle topic's name taken: someone else's topic, never destroyed
		if _, err := f.repo.CreateTopic(f.ctx, f.pool, "mine-idle-1"); err != nil {
			t.Fatal(err)
		}
		wantRuntime(t, f.cli("bench", "--topic", "mine", "--idle-topics", "3", "--tasks", "10"), nil)
		if _, err := f.repo.Topic(f.ctx, f.pool, "mine-idle-1"); err != nil {
			t.Errorf("bench --idle-topics naming an existing topic destroyed it: %v", err)
		}
		if _, err := f.repo.Destroy(f.ctx, f.pool, "mine-idle-1"); err != nil {
			t.Fatal(err)
		}
		f.wantOnlyTopicT()
		wantUsage(t, f.cli("bench", "--keys", "-1"), "--keys", "-1")
		wantUsage(t, f.cli("bench", "--topics", "3", "--managers", "2"), "--topics", "processors")
		wantUsage(t, f.cli("bench", "--topics", "3", "--processes", "2", "--managers", "4"), "--topics", "processors")
		wantUsage(t, f.cli("bench", "--mode", "latency", "--topics", "2"), "--topics", "latency")
		// neither --database-url nor DATABASE_URL (runCLI's environment is empty)
		wantUsage(t, runCLI(f.ctx, "", nil, "bench"), "--database-url")
	})
}

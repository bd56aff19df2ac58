package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgtask/pgtask/repository"
)

// TestSnoozesNeverCommittedAreForgotten: snoozes whose completion never commits (the
// lease lost) are forgotten once old, when the memory of snoozes is full, so that
// later snoozes are still told from retries. They used to stay for the life of the
// process: past 10 000 of them, every snooze was counted as RETRIED.
func TestSnoozesNeverCommittedAreForgotten(t *testing.T) {
	t.Parallel()
	m := newMetrics()
	clock := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	m.now = func() time.Time { return clock }
	snooze := func(seq int64) repository.Task {
		t := repository.Task{Topic: "t", Sequence: seq, Attempt: 1}
		m.rememberSnoozes("t", []repository.Task{t}, func(repository.Task) bool { return true })
		return t
	}
	// lost leases: never committed
	for i := range maxTrackedSnoozes {
		snooze(int64(i + 1))
	}
	committed := func(task repository.Task) string {
		task.State = repository.Ready
		task.Returned++ // a snooze gives its lease back
		return m.result("t", task)
	}
	if got := committed(snooze(maxTrackedSnoozes + 1)); got != ResultRetried {
		t.Errorf("a snooze while the memory is full of recent snoozes: %s, want %s (bounded memory)", got, ResultRetried)
	}
	clock = clock.Add(snoozeForgotten)
	task := snooze(maxTrackedSnoozes + 2)
	if got := committed(task); got != ResultSnoozed {
		t.Errorf("a snooze once the uncommitted ones are old: %s, want %s", got, ResultSnoozed)
	}
	if n := len(m.snoozed); n != 0 {
		t.Errorf("%d snoozes remembered, want none: the old ones forgotten, the last one committed", n)
	}
	for i := range 10 {
		task := snooze(int64(100000 + i))
		if got := committed(task); got != ResultSnoozed {
			t.Fatalf("snooze %d after the sweep: %s, want %s", i, got, ResultSnoozed)
		}
	}
}

// TestSnoozeCommittedAsAFailure: a snooze whose commit the processor replaced by a
// failure (its follow-up refused: "decisions could not be committed") is READY again
// without the lease given back: counted RETRIED, not SNOOZED as it was.
func TestSnoozeCommittedAsAFailure(t *testing.T) {
	t.Parallel()
	m := newMetrics()
	task := repository.Task{Topic: "t", Sequence: 1, Attempt: 1}
	m.rememberSnoozes("t", []repository.Task{task}, func(repository.Task) bool { return true })
	task.State = repository.Ready
	task.Errors = []string{"decisions could not be committed: unknown topic"}
	if got := m.result("t", task); got != ResultRetried {
		t.Errorf("a snooze committed as a failure: %s, want %s", got, ResultRetried)
	}
}

// TestLabelsOfOtherEncodings: a topic or schedule name that is not UTF-8 (a LATIN1
// database read byte for byte) made WithLabelValues panic on the goroutine of the
// listener (a manager's, the completer's: the process), and a scrape fail. Each byte
// that is not UTF-8 is written \xNN.
func TestLabelsOfOtherEncodings(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"café": "café", "caf\xe9": `caf\xe9`, "\xff\xfeok": `\xff\xfeok`} {
		if got := label(in); got != want {
			t.Errorf("label(%q) = %q, want %q", in, got, want)
		}
	}
	reg := prometheus.NewRegistry()
	m := New(reg)
	l := m.Listener()
	topic := "caf\xe9"
	task := repository.Task{Topic: topic, Sequence: 1, Attempt: 1, State: repository.Succeeded}
	l.OnDispatch(topic, []repository.Task{task}, time.Millisecond)
	l.OnEmpty(topic, time.Millisecond)
	l.OnCallback(topic, []repository.Task{task}, map[int64]repository.Decision{1: repository.Succeed("")}, time.Millisecond)
	l.OnComplete(topic, []repository.Task{task}, time.Millisecond)
	l.OnError(topic, nil)
	m.OnExpire([]repository.Expiry{{Topic: topic, Expired: 1}})
	m.OnFire([]repository.Fire{{Schedule: "sched\xe9"}})
	m.ForgetSchedule("sched\xe9")
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

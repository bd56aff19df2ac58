package processor

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/repository"
)

// TestALateTopicReadIsIgnored: two reads of a topic's state in flight at once (the
// heartbeat's and a notification's) may answer in either order; the state a manager
// keeps is the one of the read begun last, not of the one that answered last. Kept the
// other way, a limit raised from 3 to 5 went back to 3 in the manager's eyes, and a
// manager holding 3 tasks waited for them to end before polling again.
func TestALateTopicReadIsIgnored(t *testing.T) {
	m := &TaskManager{wake: make(chan struct{}, 1)}
	first := m.readingTopic()
	second := m.readingTopic()
	m.setTopic(second, repository.Topic{Name: "t", Active: true, TopicSettings: repository.TopicSettings{Concurrency: 5}})
	m.setTopic(first, repository.Topic{Name: "t", Active: true, TopicSettings: repository.TopicSettings{Concurrency: 3}})
	if c := m.concurrency.Load(); c != 5 {
		t.Errorf("concurrency %d after the later read (5) and then the earlier one (3) answered, want 5", c)
	}
	third := m.readingTopic()
	m.setTopic(third, repository.Topic{Name: "t", Active: true, TopicSettings: repository.TopicSettings{Concurrency: 7}})
	if c := m.concurrency.Load(); c != 7 {
		t.Errorf("concurrency %d after a read begun later, want 7", c)
	}
}

// TestSplitOnlyOnALimiterOfItsOwn: the tasks one poll leases under a concurrency limit
// are cut into a batch per worker only when the manager alone runs with its Limiter:
// the batches after the first wait for a slot of their own, which a manager sharing a
// PriorityLimiter (of higher priority, always with work) took and kept, the tasks
// ACTIVE with no handler meanwhile.
func TestSplitOnlyOnALimiterOfItsOwn(t *testing.T) {
	tasks := make([]repository.Task, 4)
	for i := range tasks {
		tasks[i].Sequence = int64(i + 1)
	}
	shared := NewPriorityLimiter(2)
	for _, c := range []struct {
		name    string
		limiter Limiter
		others  int // other managers running with it
		want    int
	}{
		{"Own", Bound(2), 0, 2},
		{"Unbounded", Unbounded(), 0, 2},
		{"Shared", shared.Limiter(1), 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := &TaskManager{cfg: ManagerConfig{Limiter: c.limiter}, workers: 2}
			m.limited.Store(true)
			m.concurrency.Store(4)
			detach := c.limiter.(soleLimiter).attach()
			defer detach()
			for range c.others {
				defer shared.Limiter(0).(soleLimiter).attach()()
			}
			if got := len(m.split(tasks)); got != c.want {
				t.Errorf("split into %d batches, want %d", got, c.want)
			}
		})
	}
}

// TestSplitOverTheWorkers: a limited topic's lease is split into one batch per worker
// (no more than tasks), in poll order, their sizes differing by one at most: every
// worker has a task while any waits. Before, batches of the limit's share of each
// worker (limit 5, four workers: 2, 2 and 1) left a worker idle with two tasks queued
// behind others.
func TestSplitOverTheWorkers(t *testing.T) {
	for _, c := range []struct {
		limit, workers, tasks int
		want                  []int
	}{
		{5, 4, 5, []int{1, 1, 1, 2}},
		{9, 8, 9, []int{1, 1, 1, 1, 1, 1, 1, 2}},
		{6, 4, 6, []int{1, 2, 1, 2}},
		{8, 4, 3, []int{1, 1, 1}}, // fewer tasks than workers: one each
		{3, 4, 3, []int{1, 1, 1}},
		{64, 4, 64, []int{16, 16, 16, 16}},
	} {
		tasks := make([]repository.Task, c.tasks)
		for i := range tasks {
			tasks[i].Sequence = int64(i + 1)
		}
		m := &TaskManager{cfg: ManagerConfig{Limiter: Bound(c.workers)}, workers: c.workers}
		m.limited.Store(true)
		m.concurrency.Store(int32(c.limit))
		detach := m.cfg.Limiter.(soleLimiter).attach()
		parts := m.split(tasks)
		detach()
		var sizes []int
		var seqs []int64
		for _, p := range parts {
			sizes = append(sizes, len(p))
			for _, t := range p {
				seqs = append(seqs, t.Sequence)
			}
		}
		if !slices.Equal(sizes, c.want) || !slices.IsSorted(seqs) || len(seqs) != c.tasks {
			t.Errorf("limit %d, %d workers, %d tasks: batches of %v (sequences %v), want %v in poll order",
				c.limit, c.workers, c.tasks, sizes, seqs, c.want)
		}
	}
}

// TestNotifiedDue: a delayed notification's work is due its delay after its arrival,
// unless the due time it carries is sooner by more than dueSlack (a push in a long
// transaction), then at that time; a payload without one (an earlier release's) counts
// its delay.
func TestNotifiedDue(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		delay time.Duration
		due   time.Time
		want  time.Time
	}{
		{"NoDueTime", 3 * time.Second, time.Time{}, now.Add(3 * time.Second)},
		// the commit and the delivery took a few milliseconds, or the clocks differ by as
		// much: the delay from the arrival, never sooner
		{"DueAsTheDelaySays", 3 * time.Second, now.Add(3*time.Second - 5*time.Millisecond), now.Add(3 * time.Second)},
		{"DueLaterThanTheDelay", 3 * time.Second, now.Add(4 * time.Second), now.Add(3 * time.Second)},
		// committed 2 s after the push: due 2 s sooner than the delay says
		{"LongTransaction", 3 * time.Second, now.Add(time.Second), now.Add(time.Second)},
		// committed after the task fell due: at once
		{"DueBeforeTheArrival", 3 * time.Second, now.Add(-time.Second), now.Add(-time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := repository.Notification{Event: repository.EventWork, Delay: tc.delay, Due: tc.due}
			if got := notifiedDue(now, n); !got.Equal(tc.want) {
				t.Errorf("notifiedDue(delay %v, due %v) = %v, want %v", tc.delay, tc.due, got, tc.want)
			}
		})
	}
}

// TestActivationsAskForOneReadAtATime: ACTIVATION notifications in a burst (a script
// pausing and resuming topics) ask for one read of the topic's state, which the
// manager's reader (rereadTopic, tracked by Run) makes; each started a read of its own
// on a goroutine nothing waited for.
func TestActivationsAskForOneReadAtATime(t *testing.T) {
	m := &TaskManager{reread: make(chan struct{}, 1), floor: newFloor(repository.FIFO, repository.None)}
	for range 100 {
		m.notify(repository.Notification{Event: repository.EventActivation})
	}
	if n := len(m.reread); n != 1 {
		t.Errorf("%d reads asked for after 100 ACTIVATION notifications, want 1", n)
	}
}

// TestMalformedNotificationsWarnOnceAMinute: notifications the notifier cannot read (a
// newer release's event during a rolling upgrade) are warned of once, then at most once
// a minute with how many were ignored; each was a warning, at the push rate.
func TestMalformedNotificationsWarnOnceAMinute(t *testing.T) {
	var out strings.Builder
	n := newNotifier(nil, slog.New(slog.NewTextHandler(&out, nil)))
	now := time.Now()
	for i := range 100 {
		n.ignored("LATER abc", errors.New("unknown event"), now.Add(time.Duration(i)*time.Millisecond))
	}
	n.ignored("LATER abc", errors.New("unknown event"), now.Add(malformedWarning))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "ignored_since_last_warning=1") || !strings.Contains(lines[1], "ignored_since_last_warning=100") {
		t.Errorf("101 malformed notifications over a minute logged:\n%s\nwant 2 warnings, the second counting 100", out.String())
	}
}

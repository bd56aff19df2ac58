package processor

import (
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/pgtask/pgtask/repository"
)

func TestFloor(t *testing.T) {
	pos := func(priority int16, sequence int64) repository.Position {
		return repository.Position{Priority: priority, Sequence: sequence}
	}
	tasks := func(p repository.Position) []repository.Task {
		return []repository.Task{{Priority: p.Priority, Sequence: p.Sequence}, {Priority: p.Priority, Sequence: p.Sequence + 1}}
	}
	f := newFloor(repository.FIFO, repository.None)
	step := func(want repository.Position) repository.Position {
		t.Helper()
		if got := f.next(); got != want {
			t.Fatalf("next = %+v, want %+v", got, want)
		}
		return want
	}
	look := func(want bool, wait time.Duration) {
		t.Helper()
		if _, now, w := f.look(); now != want || w != wait {
			t.Fatalf("look = %v, %v; want %v, %v", now, w, want, wait)
		}
	}

	look(false, checkEvery) // no position yet: nothing to look before
	from := step(pos(0, 0)) // the first poll is from the head
	f.polled(from, time.Millisecond, tasks(pos(0, 10)))
	from = step(pos(0, 10)) // then from where it found work
	f.polled(from, 0, tasks(pos(0, 12)))
	f.notified(pos(0, 30)) // a push after the position changes nothing
	step(pos(0, 12))
	f.notified(pos(-1, 40)) // a more urgent one lowers the next poll's position
	f.notified(pos(0, 5))
	from = step(pos(-1, 40))
	from = step(pos(0, 12)) // once
	f.notified(pos(0, 7))
	from = step(pos(0, 7))
	f.polled(from, 0, tasks(pos(0, 7)))
	step(pos(0, 7))
	look(true, checkEvery) // busy: look for work before the position every checkEvery

	// a poll from where a notification said that finds nothing on a limited topic (its
	// slots held by other processes): the next starts there again, not past it, while
	// the head is slow to read
	f.polled(pos(0, 0), 20*time.Millisecond, tasks(pos(0, 7))) // the head slow
	f.notified(pos(-1, 90))
	from = step(pos(-1, 90))
	f.polled(from, 0, nil)
	f.heldBack(from)
	from = step(pos(-1, 90))
	f.polled(from, 0, tasks(pos(0, 7)))
	step(pos(0, 7))
	// a signal before it comes first
	f.polled(pos(0, 7), 0, nil)
	f.heldBack(pos(-1, 95))
	f.notified(pos(-2, 1))
	step(pos(-2, 1))
	step(pos(0, 7))
	// a poll from the head held back is not repeated
	f.polled(pos(0, 0), 20*time.Millisecond, nil)
	f.heldBack(pos(0, 0))
	step(pos(0, 7))
	// the head, when cheap, stays the idle manager's safety net: it covers the position
	f.polled(pos(0, 0), time.Millisecond, tasks(pos(0, 7)))
	f.notified(pos(-1, 90))
	from = step(pos(-1, 90))
	f.polled(from, 0, nil)
	f.heldBack(from)
	step(pos(0, 0))
	f.polled(pos(0, 0), time.Millisecond, tasks(pos(0, 7)))
	step(pos(0, 7))

	// a notification that does not say where, or a resume: the head
	f.notified(repository.Position{})
	step(pos(0, 0))
	f.restart()
	step(pos(0, 0))
	step(pos(0, 7))

	// after a poll that found nothing, woken by anything but a signal of where work is
	// (the pause interval): the head, while reading from there is cheap
	f.polled(pos(0, 7), 0, nil)
	look(false, checkEvery) // idle, the head cheap: the polls from the head do it
	from = step(pos(0, 0))
	f.polled(from, time.Millisecond, nil)
	step(pos(0, 0))
	// by a push: where it pushed, even after a poll from a position
	f.polled(from, time.Millisecond, nil)
	f.notified(pos(0, 50))
	from = step(pos(0, 50))
	f.polled(from, 0, nil)
	f.notified(pos(0, 70))
	from = step(pos(0, 70))
	f.polled(from, 0, tasks(pos(0, 70)))
	step(pos(0, 70))

	// Reading from the head turns slow (a long-held snapshot): looks are spaced to take
	// at most 1/checkShare of the time, and an idle manager's safety-net poll stays at
	// its position while the looks go on.
	f.polled(pos(0, 0), time.Second, tasks(pos(0, 80)))
	look(true, checkShare*time.Second)
	from = step(pos(0, 80))
	f.polled(from, 0, nil)
	look(true, checkShare*time.Second)
	step(pos(0, 80))
	// a look that finds work before the position sends the next poll there, once
	if f.looked(2*time.Second, pos(0, 90)) {
		t.Error("a look finding work after the position lowered it")
	}
	look(true, checkShare*2*time.Second)
	if !f.looked(time.Second, pos(0, 3)) {
		t.Error("a look finding work before the position did not lower it")
	}
	step(pos(0, 3))
	// cheap again: looks every checkEvery, and none while idle
	f.looked(time.Millisecond, repository.Position{})
	look(true, checkEvery)
	f.polled(pos(0, 80), 0, nil)
	look(false, checkEvery)

	// LIFO and conditions always poll from the head, and never look
	for _, g := range []*floor{newFloor(repository.LIFO, repository.None), newFloor(repository.FIFO, repository.SingularByIdentifier)} {
		g.polled(repository.Position{}, 0, tasks(pos(0, 10)))
		g.notified(pos(0, 20))
		if got := g.next(); !got.IsZero() {
			t.Errorf("a floor that is not FIFO without condition gave %+v", got)
		}
		if _, now, _ := g.look(); now {
			t.Error("a floor that is not FIFO without condition looks")
		}
	}
}

// TestPolledHoldsBackOnALimitedTopic: a poll that finds nothing on a limited topic,
// the poll loop's or a flush's that leased (completer.commitLeasing: a lowered limit, the
// slots held by other processes), starts the next where it started; the flush's spent
// the position a notification gave, and the next polls started past the task it was
// sent to. On a topic without a limit, found empty is found empty.
func TestPolledHoldsBackOnALimitedTopic(t *testing.T) {
	for _, limited := range []bool{true, false} {
		m := &TaskManager{floor: newFloor(repository.FIFO, repository.None)}
		m.limited.Store(limited)
		at := repository.Position{Priority: 0, Sequence: 100}
		m.polled(m.floor.next(), 20*time.Millisecond, []repository.Task{{Sequence: at.Sequence}}) // reading from the head is not cheap
		urgent := repository.Position{Priority: -1, Sequence: 40}
		m.floor.notified(urgent)
		from := m.floor.next()
		if from != urgent {
			t.Fatalf("next = %+v, want the notified %+v", from, urgent)
		}
		m.polled(from, 0, nil)
		want := at
		if limited {
			want = urgent
		}
		if got := m.floor.next(); got != want {
			t.Errorf("limited %v: the poll after one from %+v that found nothing starts at %+v, want %+v", limited, urgent, got, want)
		}
	}
}

// TestWakeAtKeepsOneEntryPerTask: the same due time of the same task, found again by
// each empty poll's probe, is kept once; it filled the list of a thousand with copies.
// Once the manager stops, its timer is disarmed.
func TestWakeAtKeepsOneEntryPerTask(t *testing.T) {
	t.Parallel()
	m := &TaskManager{}
	at := time.Now().Add(time.Hour)
	seven := repository.Position{Priority: 1, Sequence: 7}
	for i := range 3 { // as the probes find it: now plus the delay left
		m.wakeAt(at.Add(time.Duration(i)*time.Microsecond), seven)
	}
	m.wakeAt(at, repository.Position{Priority: 1, Sequence: 8})
	m.wakeAt(at.Add(-time.Minute), seven) // an earlier time moves it
	m.dueMu.Lock()
	due := slices.Clone(m.due)
	m.dueMu.Unlock()
	if len(due) != 2 || due[0].from != seven || !due[0].at.Equal(at.Add(-time.Minute)) {
		t.Errorf("due times %+v, want one per task, task 7's moved to the earlier time", due)
	}
	m.stopDue()
	if m.dueTimer.Stop() {
		t.Error("the due timer was still armed after stopDue")
	}
	m.wakeAt(at, repository.Position{Priority: 1, Sequence: 9}) // after the stop
	if m.dueTimer.Stop() || len(m.due) != 0 {
		t.Error("a stopped manager took a due time")
	}
}

// TestRetryEndsAtAReconnectionDuringTheAttempt: the notifier's reconnection while the
// failed operation ran (a poll hung on a dead connection while the notifier reached the
// new primary) ends the wait after the failure at once; the channel was taken after the
// failure, and only a later reconnection ended it, the backoff (up to 2 s) waited out.
func TestRetryEndsAtAReconnectionDuringTheAttempt(t *testing.T) {
	m := &TaskManager{p: &Processor{faults: newFaults(slog.New(slog.DiscardHandler), time.Minute, time.Minute)}}
	n := newNotifier(nil, nil)
	connected := n.Connected() // taken before the operation
	n.connMu.Lock()            // the notifier reconnects meanwhile (as listen does)
	close(n.connected)
	n.connected = make(chan struct{})
	n.connMu.Unlock()
	m.p.notifier = n
	done := make(chan bool, 1)
	go func() {
		done <- m.retry(t.Context(), "poll", "poll", errors.New("connection reset"), newBackoff(time.Hour, time.Hour), connected)
	}()
	select {
	case reconnected := <-done:
		if !reconnected {
			t.Error("retry did not report the reconnection")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("retry waited on, past a reconnection during the operation")
	}
}

package processor

import (
	"sync"
	"time"

	"github.com/pgtask/pgtask/repository"
)

// floor is where a manager's next poll starts (repository.PollFrom). While a topic is
// busy, every task before the position where the previous poll found work was leased,
// is delayed, or is a row version that left READY; a poll from the head would read them
// all again, and while a long-held snapshot keeps those versions, their number grows
// without bound (docs/processor.md, "A long-held snapshot"). So a manager polls from the
// position of the first task it leased last time, lowered to the position of whatever
// work it hears of before it: a push, completion, expiry, junction or revival notifies
// the position of the first task it made READY (repository.Notification.From), and a
// timer for a task that falls due carries that task's position (the manager's wakeAt).
//
// A poll reads from the head of the topic only when the manager cannot know where work
// lies: its first poll, after a notification without a position (one of an older
// version, or the notifier's reconnection, when notifications may have been missed),
// after a resume of the topic, and as an idle manager's safety-net poll (at the pause
// interval) while reading from the head is cheap. Work made READY before the position
// without any notification (a row changed by hand, a notification lost while the manager
// was busy) is looked for off the poll loop (the manager's watchFloor): every
// checkEvery, and for at most 1/checkShare of the time when a read from the head is
// slow, so that a long-held snapshot never stalls polling. Only FIFO polls without a
// condition take a position: under a condition, the tasks a poll held back wait before
// it.
type floor struct {
	enabled bool // FIFO without a condition; fixed at creation

	mu      sync.Mutex
	at      repository.Position // the first task the last poll leased; zero: none yet
	lowered repository.Position // the earliest position signalled since the last poll began
	held    repository.Position // where the last poll began, when it found nothing under a limit (heldBack)
	empty   bool                // the last poll found nothing
	reset   bool                // the next poll starts from the head
	took    time.Duration       // how long the last read from the head took (a poll or a check)
}

const (
	// checkEvery is how often a manager polling from a position looks for work before it
	// (watchFloor).
	checkEvery = time.Second
	// checkShare bounds the time those looks take: one that took d is followed by the
	// next no sooner than checkShare × d later.
	checkShare = 20
	// cheapHead is how long a read from the head of the topic may take and still count
	// as cheap: an idle manager's safety-net poll then reads from the head (and no look
	// runs beside it); otherwise it polls from its position and the look runs.
	cheapHead = 10 * time.Millisecond
)

func newFloor(order repository.Order, condition repository.Condition) *floor {
	return &floor{enabled: order == repository.FIFO && condition == repository.None}
}

// next returns where the poll about to run starts; the zero Position is the head.
func (f *floor) next() repository.Position {
	f.mu.Lock()
	defer f.mu.Unlock()
	lowered, held := f.lowered, f.held
	f.lowered, f.held = repository.Position{}, repository.Position{}
	if !f.enabled {
		return repository.Position{}
	}
	switch {
	case f.reset || f.at.IsZero():
		f.reset, f.empty = false, false
		return repository.Position{}
	case f.empty:
		// Found nothing last time. Woken by work that said where it is: look there;
		// otherwise this is the safety net of an idle manager: from the head while that
		// is cheap, else from where a limit held the last poll back.
		f.empty = false
		if !lowered.IsZero() {
			return earliest(lowered, held)
		}
		if f.took < cheapHead {
			return repository.Position{}
		}
		if !held.IsZero() && held.Compare(f.at) < 0 {
			return held
		}
	default:
		if p := earliest(lowered, held); !p.IsZero() && p.Compare(f.at) < 0 {
			return p
		}
	}
	return f.at
}

// earliest is the earlier of two positions, a zero one (none) aside.
func earliest(a, b repository.Position) repository.Position {
	if a.IsZero() || !b.IsZero() && b.Compare(a) < 0 {
		return b
	}
	return a
}

// polled records a successful poll that started at from, took took and leased tasks
// (in poll order).
func (f *floor) polled(from repository.Position, took time.Duration, tasks []repository.Task) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if from.IsZero() {
		f.took = took
	}
	f.empty = len(tasks) == 0
	if len(tasks) > 0 {
		f.at = repository.PositionOf(tasks[0])
	}
}

// heldBack records that the poll from from found nothing on a limited topic: its
// limit (the slots held by other processes, the rate) may have held back the work it
// was sent to, so the next poll starts there again, unless a signal or the head (an
// idle manager's safety net, while cheap) comes before it. Taken as found empty, the
// position a notification gave was spent, and the next polls started past a task of a
// more urgent priority: only the looks (watchFloor) went back for it, and none runs
// while the processor is quiet. A poll from the head is not repeated so: the head is
// where polls go back to anyway, and each repeated would read it whole.
func (f *floor) heldBack(from repository.Position) {
	if from.IsZero() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = earliest(f.held, from)
}

// notified lowers the next poll's position to where signalled work is, or sends it to
// the head when the signal does not say (a zero position).
func (f *floor) notified(at repository.Position) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if at.IsZero() {
		f.reset = true
	} else if f.lowered.IsZero() || at.Compare(f.lowered) < 0 {
		f.lowered = at
	}
}

// restart sends the next poll to the head.
func (f *floor) restart() {
	f.mu.Lock()
	f.reset = true
	f.mu.Unlock()
}

// look says whether work before the position should be looked for now (watchFloor): the
// manager polls from a position, and is busy or finds reading from the head slow; it
// returns that position and how long to wait before the next look.
func (f *floor) look() (at repository.Position, now bool, wait time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	wait = max(checkEvery, checkShare*f.took)
	now = f.enabled && !f.at.IsZero() && !(f.empty && f.took < cheapHead)
	return f.at, now, wait
}

// looked records a look from the head that took took and found the first due READY task
// at first (zero: none), and lowers the next poll's position to it when it lies before
// the position polls start from.
func (f *floor) looked(took time.Duration, first repository.Position) (lowered bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.took = took
	if first.IsZero() || f.at.IsZero() || first.Compare(f.at) >= 0 {
		return false
	}
	if f.lowered.IsZero() || first.Compare(f.lowered) < 0 {
		f.lowered = first
	}
	return true
}

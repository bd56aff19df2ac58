package repository

import (
	"errors"
	"sync"
	"time"
)

// A schedule whose fire was refused (its topic's queue full, a spec declared in SQL
// that does not parse, its push refused: RefusedFire) keeps its next fire time, the
// oldest due: without a pause it came first in every round, and a few hundred of them,
// on topics whose consumers are down, took each round's tries and time from every
// schedule that could fire. So a Repository passes over, for a while, the schedules
// whose fire was refused in its calls (and the other schedules of a topic whose queue
// cap refused one): 1 s after the first refusal, doubling up to a minute, forgotten at
// a fire that succeeds; a schedule the cap refused, a second longer than its topic. A
// failure of the database is no refusal: it is retried at the next call, and reported
// there (the processor's health says so).
const (
	scheduleRetryFirst = time.Second
	scheduleRetryCap   = time.Minute
)

// fireRetries holds the schedules and topics a Repository passes over for now.
type fireRetries struct {
	mu     sync.Mutex
	names  waits
	topics waits
}

// waits are the keys passed over until their time, with the wait that led there.
type waits map[string]retryAfter

// retryAfter is when a schedule or topic is tried again, and the wait that led there;
// full, of a schedule, the topic whose queue cap refused it last.
type retryAfter struct {
	at   time.Time
	wait time.Duration
	full string
}

// waiting returns the keys to pass over at now, and forgets those whose wait ended
// longer than scheduleRetryCap ago (a schedule removed, or fixed and fired by another
// process).
func (w waits) waiting(now time.Time) []string {
	var out []string
	for k, r := range w {
		switch {
		case now.Before(r.at):
			out = append(out, k)
		case now.Sub(r.at) > scheduleRetryCap:
			delete(w, k)
		}
	}
	return out
}

// refused passes k over from now: scheduleRetryFirst after its first refusal, twice
// the last wait after the next ones, up to scheduleRetryCap.
func (w waits) refused(now time.Time, k, full string) {
	wait := scheduleRetryFirst
	if r, ok := w[k]; ok {
		wait = min(2*r.wait, scheduleRetryCap)
	}
	w[k] = retryAfter{at: now.Add(wait), wait: wait, full: full}
}

// waiting returns the schedules and topics to pass over at now.
func (f *fireRetries) waiting(now time.Time) (names, topics []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.names.waiting(now), f.topics.waiting(now)
}

// failed records a refused fire of schedule name (and, when its topic's queue cap
// refused it, of topic).
func (f *fireRetries) failed(now time.Time, name, topic string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.names == nil {
		f.names, f.topics = waits{}, waits{}
	}
	f.names.refused(now, name, topic)
	if topic != "" {
		f.topics.refused(now, topic, "")
		// Every schedule of the topic its cap refused waits a moment past the topic:
		// when the topic's wait ends, its other schedules come first. Due the longest,
		// a refused one came first again, was refused again, and the topic's others (a
		// push that replaces as many READY tasks as it adds, which the cap admits)
		// were never tried while any was.
		t := f.topics[topic]
		for k, r := range f.names {
			if r.full == topic && !r.at.After(t.at) {
				r.at = t.at.Add(scheduleRetryFirst)
				f.names[k] = r
			}
		}
	}
}

// fired forgets the refusals of schedule name and of its topic.
func (f *fireRetries) fired(name, topic string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.names, name)
	delete(f.topics, topic)
}

// RefusedFire reports whether an error of FireSchedules is a refusal of a schedule (its
// topic's queue full or gone, a spec or setting that does not hold), not a failure of
// the database: the schedule's problem, which FireSchedules passes over for a while.
func RefusedFire(err error) bool {
	return err != nil && SQLState(err) == "" &&
		(errors.Is(err, ErrQueueFull) || errors.Is(err, ErrInvalid) || errors.Is(err, ErrUnknownTopic))
}

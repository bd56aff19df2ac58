package repository

import (
	"sync"
	"time"
)

// A schedule whose fire failed (its topic's queue full, a spec declared in SQL that
// does not parse, a push refused) keeps its next fire time, the oldest due: without a
// pause it came first in every round, and a few hundred of them, on topics whose
// consumers are down, took each round's tries and time from every schedule that could
// fire. So a Repository passes over, for a while, the schedules whose fire failed in
// its calls (and the other schedules of a topic whose queue cap refused one): 1 s after
// the first failure, doubling up to a minute, forgotten at a fire that succeeds.
const (
	scheduleRetryFirst = time.Second
	scheduleRetryCap   = time.Minute
)

// fireRetries holds the schedules and topics a Repository passes over for now.
type fireRetries struct {
	mu     sync.Mutex
	names  map[string]retryAfter
	topics map[string]retryAfter
}

// retryAfter is when a schedule or topic is tried again, and the wait that led there.
type retryAfter struct {
	at   time.Time
	wait time.Duration
}

// waiting returns the schedules and topics to pass over at now.
func (f *fireRetries) waiting(now time.Time) (names, topics []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	collect := func(m map[string]retryAfter) []string {
		var out []string
		for k, r := range m {
			if now.Before(r.at) {
				out = append(out, k)
			}
		}
		return out
	}
	return collect(f.names), collect(f.topics)
}

// failed records a failed fire of schedule name (and, when its topic's queue cap
// refused it, of topic).
func (f *fireRetries) failed(now time.Time, name, topic string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	next := func(m map[string]retryAfter, k string) map[string]retryAfter {
		if m == nil {
			m = map[string]retryAfter{}
		}
		wait := scheduleRetryFirst
		if r, ok := m[k]; ok {
			wait = min(2*r.wait, scheduleRetryCap)
		}
		m[k] = retryAfter{at: now.Add(wait), wait: wait}
		return m
	}
	f.names = next(f.names, name)
	if topic != "" {
		f.topics = next(f.topics, topic)
	}
}

// fired forgets the failures of schedule name and of its topic.
func (f *fireRetries) fired(name, topic string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.names, name)
	delete(f.topics, topic)
}

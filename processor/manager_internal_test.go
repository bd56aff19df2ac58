package processor

import (
	"testing"

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

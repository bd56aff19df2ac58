package processor

import (
	"time"

	"github.com/pgtask/pgtask/repository"
)

// Listener observes a manager (design §7): every field is optional and called
// synchronously from the manager's goroutines, so it must be quick. Metrics and logs
// hang off it.
type Listener struct {
	// OnStart: the manager started polling its topic.
	OnStart func(topic string)
	// OnDispatch: a poll leased tasks that are now handed to the handler.
	OnDispatch func(topic string, tasks []repository.Task, poll time.Duration)
	// OnCallback: the handler reported decisions for a batch after handling it for the
	// given time.
	OnCallback func(topic string, tasks []repository.Task, decisions map[int64]repository.Decision, handling time.Duration)
	// OnComplete: decisions were committed; tasks are the rows as stored.
	OnComplete func(topic string, tasks []repository.Task, flush time.Duration)
	// OnError: a recoverable error (database, handler misbehaviour); the manager goes on.
	OnError func(topic string, err error)
	// OnEmpty: a poll found nothing.
	OnEmpty func(topic string, poll time.Duration)
	// OnFatal: the manager stopped because of err.
	OnFatal func(topic string, err error)
}

// Listeners combines listeners: each event goes to all of them in order.
func Listeners(ls ...Listener) Listener {
	return Listener{
		OnStart: func(topic string) {
			for _, l := range ls {
				l.start(topic)
			}
		},
		OnDispatch: func(topic string, tasks []repository.Task, poll time.Duration) {
			for _, l := range ls {
				l.dispatch(topic, tasks, poll)
			}
		},
		OnCallback: func(topic string, tasks []repository.Task, d map[int64]repository.Decision, handling time.Duration) {
			for _, l := range ls {
				l.callback(topic, tasks, d, handling)
			}
		},
		OnComplete: func(topic string, tasks []repository.Task, flush time.Duration) {
			for _, l := range ls {
				l.complete(topic, tasks, flush)
			}
		},
		OnError: func(topic string, err error) {
			for _, l := range ls {
				l.error(topic, err)
			}
		},
		OnEmpty: func(topic string, poll time.Duration) {
			for _, l := range ls {
				l.empty(topic, poll)
			}
		},
		OnFatal: func(topic string, err error) {
			for _, l := range ls {
				l.fatal(topic, err)
			}
		},
	}
}

func (l Listener) start(topic string) {
	if l.OnStart != nil {
		l.OnStart(topic)
	}
}

func (l Listener) dispatch(topic string, tasks []repository.Task, poll time.Duration) {
	if l.OnDispatch != nil {
		l.OnDispatch(topic, tasks, poll)
	}
}

func (l Listener) callback(topic string, tasks []repository.Task, d map[int64]repository.Decision, handling time.Duration) {
	if l.OnCallback != nil {
		l.OnCallback(topic, tasks, d, handling)
	}
}

func (l Listener) complete(topic string, tasks []repository.Task, flush time.Duration) {
	if l.OnComplete != nil {
		l.OnComplete(topic, tasks, flush)
	}
}

func (l Listener) error(topic string, err error) {
	if l.OnError != nil {
		l.OnError(topic, err)
	}
}

func (l Listener) empty(topic string, poll time.Duration) {
	if l.OnEmpty != nil {
		l.OnEmpty(topic, poll)
	}
}

func (l Listener) fatal(topic string, err error) {
	if l.OnFatal != nil {
		l.OnFatal(topic, err)
	}
}

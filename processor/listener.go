package processor

import (
	"time"

	"github.com/pgtask/pgtask/repository"
)

// Listener observes a manager: every field is optional and called synchronously, so it
// must be quick, from the goroutine where the event happens: the manager's for most,
// the handler's own for OnCallback (the goroutine that calls Batch.Decide, Complete or
// Fail, or a Buffer's worker), and for OnHandBack whichever hands the tasks back (the
// manager's, a Buffer's, or a TaskFunc's at a shutdown). Callbacks of one manager may
// run at once (a Buffer's workers reporting together, a flush committing meanwhile):
// they must be safe for concurrent use, and must not panic (a panic in OnCallback
// unwinds the handler that reported) nor end their goroutine (runtime.Goexit: in a
// test, use t.Error, not t.Fatal, which would end the manager's poll loop or its
// commits). Metrics and logs hang off it. Give one to a manager
// (ManagerConfig.Listener), or to every manager of a processor (Processor.Observe).
type Listener struct {
	// OnStart: the manager started polling its topic.
	OnStart func(topic string)
	// OnDispatch: a poll (or a flush) leased tasks that are now handed to the handler,
	// once a statement: in one batch, or, under a concurrency limit, in one batch for
	// each of a Buffer's workers (ManagerConfig.BatchSize).
	OnDispatch func(topic string, tasks []repository.Task, poll time.Duration)
	// OnCallback: the handler reported decisions for these tasks of a batch, the given
	// time after the batch was handed to it (by a Buffer: after a worker took it from
	// the queue). A batch whose tasks are decided one at a
	// time (Batch.Decide, TaskFunc) calls it for each report; for a task a TaskFunc (or
	// Typed) began alone, the time is since it began that task, not the batch. The manager's own
	// decisions (a handler relieved after HandlerTimeout or the shutdown deadline) come
	// here too; unstarted tasks handed back come to OnHandBack instead. It returns
	// before the decisions are queued for their commit, so before their OnComplete.
	OnCallback func(topic string, tasks []repository.Task, decisions map[int64]repository.Decision, handling time.Duration)
	// OnHandBack: leased tasks the handler never started are handed back, READY again
	// with no attempt used (at shutdown, a paused topic, a Buffer stopped, a relieved
	// handler's unstarted tasks). Their completion is committed like any
	// other and comes to OnComplete, READY, after OnHandBack has returned.
	OnHandBack func(topic string, tasks []repository.Task)
	// OnComplete: decisions were committed; tasks are the rows as stored.
	OnComplete func(topic string, tasks []repository.Task, flush time.Duration)
	// OnError: a recoverable error (database, handler misbehaviour); the manager goes on.
	OnError func(topic string, err error)
	// OnEmpty: a poll found nothing.
	OnEmpty func(topic string, poll time.Duration)
	// OnFatal: the manager stopped because of err.
	OnFatal func(topic string, err error)
	// OnExpire: the processor's expiry took back the leases of dead owners (the tasks of
	// every topic, not one manager's). Only the listeners given to Processor.Observe
	// receive it.
	OnExpire func(expired []repository.Expiry)
	// OnFire: the processor fired schedules (Config.OnFire); only the listeners given to
	// Processor.Observe receive it.
	OnFire func(fires []repository.Fire)
}

// Listeners combines listeners: each event goes to all of them in order. An event none
// of them observes stays nil, so it costs the manager nothing.
func Listeners(ls ...Listener) Listener {
	var out Listener
	has := func(f func(Listener) bool) bool {
		for _, l := range ls {
			if f(l) {
				return true
			}
		}
		return false
	}
	if has(func(l Listener) bool { return l.OnStart != nil }) {
		out.OnStart = func(topic string) {
			for _, l := range ls {
				l.start(topic)
			}
		}
	}
	if has(func(l Listener) bool { return l.OnDispatch != nil }) {
		out.OnDispatch = func(topic string, tasks []repository.Task, poll time.Duration) {
			for _, l := range ls {
				l.dispatch(topic, tasks, poll)
			}
		}
	}
	if has(func(l Listener) bool { return l.OnCallback != nil }) {
		out.OnCallback = func(topic string, tasks []repository.Task, d map[int64]repository.Decision, handling time.Duration) {
			for _, l := range ls {
				l.callback(topic, tasks, d, handling)
			}
		}
	}
	if has(func(l Listener) bool { return l.OnHandBack != nil }) {
		out.OnHandBack = func(topic string, tasks []repository.Task) {
			for _, l := range ls {
				l.handBack(topic, tasks)
			}
		}
	}
	if has(func(l Listener) bool { return l.OnComplete != nil }) {
		out.OnComplete = func(topic string, tasks []repository.Task, flush time.Duration) {
			for _, l := range ls {
				l.complete(topic, tasks, flush)
			}
		}
	}
	if has(func(l Listener) bool { return l.OnError != nil }) {
		out.OnError = func(topic string, err error) {
			for _, l := range ls {
				l.error(topic, err)
			}
		}
	}
	if has(func(l Listener) bool { return l.OnEmpty != nil }) {
		out.OnEmpty = func(topic string, poll time.Duration) {
			for _, l := range ls {
				l.empty(topic, poll)
			}
		}
	}
	if has(func(l Listener) bool { return l.OnFatal != nil }) {
		out.OnFatal = func(topic string, err error) {
			for _, l := range ls {
				l.fatal(topic, err)
			}
		}
	}
	if has(func(l Listener) bool { return l.OnExpire != nil }) {
		out.OnExpire = func(expired []repository.Expiry) {
			for _, l := range ls {
				if l.OnExpire != nil {
					l.OnExpire(expired)
				}
			}
		}
	}
	if has(func(l Listener) bool { return l.OnFire != nil }) {
		out.OnFire = func(fires []repository.Fire) {
			for _, l := range ls {
				if l.OnFire != nil {
					l.OnFire(fires)
				}
			}
		}
	}
	return out
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

func (l Listener) handBack(topic string, tasks []repository.Task) {
	if l.OnHandBack != nil {
		l.OnHandBack(topic, tasks)
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

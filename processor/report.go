package processor

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/pgtask/pgtask/repository"
)

// What a manager logs about its tasks, through the processor's Logger:
//
//   - DEBUG: each flush of decisions committed, each task snoozed or handed back;
//   - INFO: at the end of a graceful shutdown, how many unstarted tasks it handed back;
//     a task that ended FAILED because it was cancelled;
//   - WARN: a task that failed and goes back to READY for another attempt; a handler
//     relieved of tasks it did not decide in time (HandlerTimeout, shutdown deadline);
//   - ERROR: a task that failed with no attempt left (FAILED, the dead-letter set); a
//     handler that panicked or decided tasks outside its batch; decisions that could not
//     be committed.
//
// Task lines carry topic, sequence, identifier and attempt (the attempts used, counting
// this one); database errors are logged once per cause by faults. A happy run logs
// nothing at INFO.

// relieve takes the undecided tasks of b away from its handler (HandlerTimeout, the
// shutdown deadline): the started ones fail with err, the others are handed back.
func (m *TaskManager) relieve(b *Batch, err error) {
	failed, handedBack := b.abandon(err)
	if failed+handedBack == 0 {
		return
	}
	m.cfg.Listener.error(m.cfg.Topic, fmt.Errorf("batch of %d tasks: relieved the handler of %d undecided tasks (%d failed, %d handed back): %w",
		len(b.leased), failed+handedBack, failed, handedBack, err))
	m.p.logger.Warn("handler relieved of tasks it did not decide", slog.String("topic", m.cfg.Topic),
		slog.Int("failed", failed), slog.Int("handed_back", handedBack), slog.String("reason", err.Error()))
}

// noteReport tells the listener about decisions reported by a batch's handler, and logs
// what a report itself says (the decisions are logged once committed: logCommitted).
func (m *TaskManager) noteReport(b *Batch, completions []repository.Completion, kind reportKind, err error) {
	topic := m.cfg.Topic
	l, handedBack := m.cfg.Listener, kind == reportHandedBack
	if handedBack && l.OnHandBack != nil || !handedBack && l.OnCallback != nil {
		tasks := make([]repository.Task, len(completions))
		for i, c := range completions {
			tasks[i] = b.task(c)
		}
		if handedBack {
			l.handBack(topic, tasks)
		} else {
			decisions := make(map[int64]repository.Decision, len(completions))
			for _, c := range completions {
				decisions[c.Sequence] = c.Decision
			}
			l.callback(topic, tasks, decisions, b.handling(completions))
		}
	}
	switch kind {
	case reportForeign:
		m.cfg.Listener.error(topic, err)
		m.p.logger.Error("handler reported decisions for tasks outside its batch: failing the batch", slog.String("topic", topic),
			slog.Int("tasks", len(completions)), slog.Any("error", err))
	case reportHandedBack:
		select {
		case <-b.stopping:
			m.completer.handedBack.Add(int64(len(completions)))
		default:
		}
		if m.p.logger.Enabled(context.Background(), slog.LevelDebug) {
			for _, c := range completions {
				t := b.task(c)
				m.p.logger.Debug("handing back unstarted task", taskAttrs(topic, t, t.Attempt-t.Returned)...)
			}
		}
	}
}

// task returns the task of a completion as the handler got it (as polled, whatever the
// handler did to Tasks since).
func (b *Batch) task(c repository.Completion) repository.Task {
	if i, ok := b.index[c.Sequence]; ok {
		return b.leased[i]
	}
	return repository.Task{Topic: b.Topic, Sequence: c.Sequence, Attempt: c.Attempt}
}

// logCommitted logs a committed flush: its failures one by one, the rest at DEBUG.
func (m *TaskManager) logCommitted(reports []*report, tasks []repository.Task, took time.Duration) {
	logger, topic, ctx := m.p.logger, m.cfg.Topic, context.Background()
	debug := logger.Enabled(ctx, slog.LevelDebug)
	if debug {
		logger.Debug("decisions committed", slog.String("topic", topic), slog.Int("tasks", len(tasks)), slog.Duration("took", took))
	}
	var failed map[int64]repository.Decision
	for _, r := range reports {
		for _, c := range r.completions {
			switch {
			case c.Decision.Snooze:
				if debug {
					logger.Debug("task snoozed", slog.String("topic", topic), slog.Int64("sequence", c.Sequence),
						slog.Duration("delay", c.Decision.Delay))
				}
			case c.Decision.Result == repository.Failure:
				if failed == nil {
					failed = make(map[int64]repository.Decision)
				}
				failed[c.Sequence] = c.Decision
			}
		}
	}
	if failed == nil {
		return
	}
	for _, t := range tasks {
		d, ok := failed[t.Sequence]
		if !ok {
			continue
		}
		attrs := append(taskAttrs(topic, t, t.Attempt-t.Returned), slog.String("error", d.Message))
		switch {
		case t.State == repository.Ready:
			attrs = append(attrs, slog.Time("retry_at", t.NotBefore))
			logger.Warn("task failed, will retry", attrs...)
		case t.Cancelled:
			logger.Info("cancelled task ended FAILED", attrs...)
		case d.Final:
			logger.Error("task failed without retry (FAILED, the dead-letter set)", attrs...)
		default:
			logger.Error("task failed with no attempt left (FAILED, the dead-letter set)", attrs...)
		}
	}
}

// taskAttrs are the attributes of a task's log line.
func taskAttrs(topic string, t repository.Task, attempt int32) []any {
	return []any{slog.String("topic", topic), slog.Int64("sequence", t.Sequence),
		slog.String("identifier", t.Identifier), slog.Int("attempt", int(attempt))}
}

// logShutdown logs what the graceful shutdown handed back.
func (m *TaskManager) logShutdown() {
	if n := m.completer.handedBack.Load(); n > 0 {
		m.p.logger.Info("shutdown handed back unstarted tasks (READY, no attempt used)", slog.String("topic", m.cfg.Topic),
			slog.Int64("tasks", n))
	}
}

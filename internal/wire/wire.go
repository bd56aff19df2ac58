// Package wire defines the JSON shapes of tasks and topics shared by the REST API and the
// CLI's --json output.
package wire

import (
	"time"

	"github.com/pgtask/pgtask/repository"
)

// Task is a task as the API shows it: states by name, absent values as null.
type Task struct {
	Topic      string     `json:"topic"`
	Sequence   int64      `json:"sequence"`
	Identifier string     `json:"identifier"`
	State      string     `json:"state"`
	Descent    string     `json:"descent"`
	Owner      *string    `json:"owner"`
	Created    time.Time  `json:"created"`
	Completed  *time.Time `json:"completed"`
	Input      *string    `json:"input"`
	Output     *string    `json:"output"`
	Reference  *string    `json:"reference"`
	Priority   int16      `json:"priority"`
	NotBefore  *time.Time `json:"not_before"`
	Attempt    int32      `json:"attempt"`
	Returned   int32      `json:"returned"`
	Errors     []string   `json:"errors"`
	Cancelled  bool       `json:"cancelled"`
}

// FromTask converts a stored task; empty strings and zero times become null, and no
// errors become an empty list.
func FromTask(t repository.Task) Task {
	errs := t.Errors
	if errs == nil {
		errs = []string{}
	}
	return Task{
		Topic:      t.Topic,
		Sequence:   t.Sequence,
		Identifier: t.Identifier,
		State:      t.State.String(),
		Descent:    t.Descent.String(),
		Owner:      nullText(t.Owner),
		Created:    t.Created,
		Completed:  nullTime(t.Completed),
		Input:      nullText(t.Input),
		Output:     nullText(t.Output),
		Reference:  nullText(t.Reference),
		Priority:   t.Priority,
		NotBefore:  nullTime(t.NotBefore),
		Attempt:    t.Attempt,
		Returned:   t.Returned,
		Errors:     errs,
		Cancelled:  t.Cancelled,
	}
}

// FromTasks converts stored tasks with FromTask.
func FromTasks(tasks []repository.Task) []Task {
	out := make([]Task, len(tasks))
	for i, t := range tasks {
		out[i] = FromTask(t)
	}
	return out
}

func nullText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Topic is a topic with its settings (durations in milliseconds) and, where asked for,
// its stats.
type Topic struct {
	Name      string    `json:"name"`
	Created   time.Time `json:"created"`
	Active    bool      `json:"active"`
	Dedicated bool      `json:"dedicated"`
	Table     string    `json:"table"`
	Settings  Settings  `json:"settings"`
	Stats     *Stats    `json:"stats,omitempty"`
}

// Settings are a topic's settings.
type Settings struct {
	MaxAttempts     int32 `json:"max_attempts"`
	BackoffBaseMs   int64 `json:"backoff_base_ms"`
	BackoffCapMs    int64 `json:"backoff_cap_ms"`
	BackoffJitterMs int64 `json:"backoff_jitter_ms"`
	QueueCap        int64 `json:"queue_cap"`
	RetentionMs     int64 `json:"retention_ms"`
}

// Stats are a topic's task counts.
type Stats struct {
	Active        int64 `json:"active"`
	Ready         int64 `json:"ready"`
	Delayed       int64 `json:"delayed"`
	Expired       int64 `json:"expired"`
	Failed        int64 `json:"failed"`
	Suspended     int64 `json:"suspended"`
	OldestReadyMs int64 `json:"oldest_ready_ms"`
	RowsEstimate  int64 `json:"rows_estimate"`
}

// FromTopic converts a stored topic; stats, if not nil, are included (otherwise the
// "stats" field is left out).
func FromTopic(t repository.Topic, stats *repository.TopicStats) Topic {
	out := Topic{
		Name:      t.Name,
		Created:   t.Created,
		Active:    t.Active,
		Dedicated: t.Dedicated,
		Table:     t.Table,
		Settings: Settings{
			MaxAttempts:     t.MaxAttempts,
			BackoffBaseMs:   t.BackoffBase.Milliseconds(),
			BackoffCapMs:    t.BackoffCap.Milliseconds(),
			BackoffJitterMs: t.BackoffJitter.Milliseconds(),
			QueueCap:        t.QueueCap,
			RetentionMs:     t.Retention.Milliseconds(),
		},
	}
	if stats != nil {
		out.Stats = &Stats{
			Active:        stats.Active,
			Ready:         stats.Ready,
			Delayed:       stats.Delayed,
			Expired:       stats.Expired,
			Failed:        stats.Failed,
			Suspended:     stats.Suspended,
			OldestReadyMs: stats.OldestReady.Milliseconds(),
			RowsEstimate:  stats.RowsEstimate,
		}
	}
	return out
}

package rest

import (
	"time"

	"github.com/pgtask/pgtask/repository"
)

// taskJSON is a task as the API shows it: states by name, absent values as null.
type taskJSON struct {
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

func taskOut(t repository.Task) taskJSON {
	errs := t.Errors
	if errs == nil {
		errs = []string{}
	}
	return taskJSON{
		Topic:      t.Topic,
		Sequence:   t.Sequence,
		Identifier: t.Identifier,
		State:      t.State.String(),
		Descent:    t.Descent.String(),
		Owner:      text(t.Owner),
		Created:    t.Created,
		Completed:  moment(t.Completed),
		Input:      text(t.Input),
		Output:     text(t.Output),
		Reference:  text(t.Reference),
		Priority:   t.Priority,
		NotBefore:  moment(t.NotBefore),
		Attempt:    t.Attempt,
		Returned:   t.Returned,
		Errors:     errs,
		Cancelled:  t.Cancelled,
	}
}

func tasksOut(tasks []repository.Task) []taskJSON {
	out := make([]taskJSON, len(tasks))
	for i, t := range tasks {
		out[i] = taskOut(t)
	}
	return out
}

func text(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func moment(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// topicJSON is a topic with its settings and, in listings, its stats.
type topicJSON struct {
	Name     string       `json:"name"`
	Created  time.Time    `json:"created"`
	Active   bool         `json:"active"`
	Settings settingsJSON `json:"settings"`
	Stats    *statsJSON   `json:"stats,omitempty"`
}

type settingsJSON struct {
	MaxAttempts     int32 `json:"max_attempts"`
	BackoffBaseMs   int64 `json:"backoff_base_ms"`
	BackoffCapMs    int64 `json:"backoff_cap_ms"`
	BackoffJitterMs int64 `json:"backoff_jitter_ms"`
	QueueCap        int64 `json:"queue_cap"`
	RetentionMs     int64 `json:"retention_ms"`
}

type statsJSON struct {
	Active        int64 `json:"active"`
	Ready         int64 `json:"ready"`
	Delayed       int64 `json:"delayed"`
	Expired       int64 `json:"expired"`
	Failed        int64 `json:"failed"`
	Suspended     int64 `json:"suspended"`
	OldestReadyMs int64 `json:"oldest_ready_ms"`
	RowsEstimate  int64 `json:"rows_estimate"`
}

func topicOut(t repository.Topic) topicJSON {
	return topicJSON{
		Name:    t.Name,
		Created: t.Created,
		Active:  t.Active,
		Settings: settingsJSON{
			MaxAttempts:     t.MaxAttempts,
			BackoffBaseMs:   t.BackoffBase.Milliseconds(),
			BackoffCapMs:    t.BackoffCap.Milliseconds(),
			BackoffJitterMs: t.BackoffJitter.Milliseconds(),
			QueueCap:        t.QueueCap,
			RetentionMs:     t.Retention.Milliseconds(),
		},
	}
}

func statsOut(s repository.TopicStats) *statsJSON {
	return &statsJSON{
		Active: s.Active, Ready: s.Ready, Delayed: s.Delayed, Expired: s.Expired,
		Failed: s.Failed, Suspended: s.Suspended,
		OldestReadyMs: s.OldestReady.Milliseconds(), RowsEstimate: s.RowsEstimate,
	}
}

// errorJSON is the body of every error response.
type errorJSON struct {
	Error string `json:"error"`
}

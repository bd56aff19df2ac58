// Package wire defines the JSON shapes of tasks and topics shared by the REST API and the
// CLI's --json output, and the rule JSON text they read must follow (CheckText).
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
	// Key is the task's concurrency key; null when none.
	Key *string `json:"key"`
	// Waiting says what holds a READY task back (Repository.Waiting); absent otherwise,
	// and in listings.
	Waiting []string `json:"waiting,omitempty"`
	// Truncated names the fields a listing cut ("input", "output", "errors"); absent
	// when nothing was cut. The task's own URL serves it whole.
	Truncated []string `json:"truncated,omitempty"`
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
		Key:        nullText(t.ConcurrencyKey),
	}
}

// FromExcerpt converts a listed task, naming in Truncated the fields that were cut.
func FromExcerpt(e repository.Excerpt) Task {
	t := FromTask(e.Task)
	if e.InputCut() {
		t.Truncated = append(t.Truncated, "input")
	}
	if e.OutputCut() {
		t.Truncated = append(t.Truncated, "output")
	}
	if e.ErrorsCut {
		t.Truncated = append(t.Truncated, "errors")
	}
	return t
}

// WaitingTexts are the texts of what holds a READY task back (Repository.Waiting), for
// Task.Waiting.
func WaitingTexts(why []repository.WaitReason) []string {
	var out []string
	for _, w := range why {
		out = append(out, w.Text)
	}
	return out
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
	// RFC 3339, and so encoding/json, has years 0 to 9999 only: a later time (a
	// not-before SQL could store before migration 000034) is answered as the last
	// instant it can write, an earlier one (before 000059) as the first, rather than
	// failing the whole answer.
	if t.After(lastWritable) {
		t = lastWritable
	} else if t.Before(firstWritable) {
		t = firstWritable
	} else if y := t.Year(); y < 0 || y > 9999 {
		// within them in UTC, not in the server's zone (9999-12-31T23:59:59Z is in the
		// year 10000 east of UTC): written in UTC
		t = t.UTC()
	}
	return &t
}

// firstWritable and lastWritable are the earliest and the latest times RFC 3339 can write.
var (
	firstWritable = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)
	lastWritable  = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

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
	// Usage is present where a topic is read alone (GET /topics/{topic}).
	Usage *Usage `json:"usage,omitempty"`
}

// Settings are a topic's settings.
type Settings struct {
	MaxAttempts     int32 `json:"max_attempts"`
	BackoffBaseMs   int64 `json:"backoff_base_ms"`
	BackoffCapMs    int64 `json:"backoff_cap_ms"`
	BackoffJitterMs int64 `json:"backoff_jitter_ms"`
	QueueCap        int64 `json:"queue_cap"`
	RetentionMs     int64 `json:"retention_ms"`
	// The limits (repository.TopicSettings); null: none.
	Concurrency    *int32 `json:"concurrency"`
	KeyConcurrency *int32 `json:"key_concurrency"`
	Rate           *int32 `json:"rate"`
	RatePeriodMs   *int64 `json:"rate_period_ms"`
	RateBurst      *int32 `json:"rate_burst"`
	Fair           bool   `json:"fair"`
}

// Usage is how much of its limits a topic uses now (repository.LimitUsage).
type Usage struct {
	Active      int64   `json:"active"`
	KeysAtLimit int64   `json:"keys_at_limit"`
	KeysWaiting int64   `json:"keys_waiting"`
	Tokens      float64 `json:"tokens"`
}

// FromUsage converts a topic's limit usage.
func FromUsage(u repository.LimitUsage) *Usage {
	return &Usage{Active: u.Active, KeysAtLimit: u.KeysAtLimit, KeysWaiting: u.KeysWaiting, Tokens: u.Tokens}
}

// nonZero is nil for 0, else a pointer to v.
func nonZero[T int32 | int64](v T) *T {
	if v == 0 {
		return nil
	}
	return &v
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
	// Capped names the counts that stopped at repository.StatsCap (more tasks than that).
	Capped []string `json:"capped"`
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
			Concurrency:     nonZero(t.Concurrency),
			KeyConcurrency:  nonZero(t.KeyConcurrency),
			Rate:            nonZero(t.Rate),
			RateBurst:       nonZero(t.RateBurst),
			Fair:            t.Fair,
		},
	}
	if t.Rate > 0 {
		out.Settings.RatePeriodMs = nonZero(t.RatePeriod.Milliseconds())
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
			Capped:        stats.Capped.Names(),
		}
		if out.Stats.Capped == nil {
			out.Stats.Capped = []string{}
		}
	}
	return out
}

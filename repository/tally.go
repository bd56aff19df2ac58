package repository

import (
	"context"
	"time"

	"github.com/pgtask/pgtask/db"
)

// Tally is what one second saw happen to a topic's tasks (or to every topic's): how many
// were pushed, and how many of the decisions committed for leased tasks retried a task
// (a FAILURE with attempts left) or gave each result. Snoozes, expiries, cancels of
// tasks not leased and revives are not counted. The database keeps a tally per topic,
// second and writing session (migration 000017), so counting costs a statement one
// upsert whatever its number of tasks, and no two transactions wait for each other.
type Tally struct {
	// Second is the second's start by the database's clock (the transaction start of the
	// writes it counts).
	Second time.Time
	// Pushed counts the tasks inserted, whatever their state.
	Pushed int64
	// Retried counts the FAILURE decisions that sent a task back to READY for another
	// attempt.
	Retried int64
	// Failed counts the decisions that left a task FAILED (a cancelled task's
	// completion among them).
	Failed int64
	// Suspended counts the SUSPENSION decisions.
	Suspended int64
	// Filtered counts the FILTER decisions.
	Filtered int64
	// Succeeded counts the SUCCESS decisions.
	Succeeded int64
}

// TallyKept is how long the database keeps tallies: the longest window Tallies reads.
// Processors delete older ones (PruneTallies) with their retention pass.
const TallyKept = time.Hour

// Tallies returns the tallies of topic, or of every topic when topic is "", for each
// whole second of the window before the current one (by the database's clock), oldest
// first, with zeros for the seconds nothing happened: one row per second. It reads the
// tallies of the window only (of the topic only, when given), never the tasks. An
// unknown topic has only zeros.
func (r *Repository) Tallies(ctx context.Context, h Handle, topic string, window time.Duration) ([]Tally, error) {
	seconds := int32(window / time.Second)
	if window < time.Second || window > TallyKept {
		return nil, invalid("tally window %v is outside 1s..%v", window, TallyKept)
	}
	var (
		out []Tally
		err error
	)
	if topic == "" {
		var rows []db.TallyAllRow
		rows, err = r.q.TallyAll(ctx, h, seconds)
		for _, row := range rows {
			out = append(out, Tally(row))
		}
	} else {
		if err := validTopic(topic); err != nil {
			return nil, err
		}
		var rows []db.TallyTopicRow
		rows, err = r.q.TallyTopic(ctx, h, db.TallyTopicParams{Topic: topic, Seconds: seconds})
		for _, row := range rows {
			out = append(out, Tally(row))
		}
	}
	if err != nil {
		return nil, mapError("tallies", err)
	}
	return out, nil
}

// PruneTallies deletes the tallies older than TallyKept and returns how many rows.
func (r *Repository) PruneTallies(ctx context.Context, h Handle) (int64, error) {
	n, err := r.q.TallyPrune(ctx, h, int32(TallyKept/time.Second))
	if err != nil {
		return 0, mapError("prune tallies", err)
	}
	return n, nil
}

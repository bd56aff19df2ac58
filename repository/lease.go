package repository

import (
	"context"

	"github.com/pgtask/pgtask/db"
)

// Lease names one ACTIVE task.
type Lease struct {
	// Topic is the task's topic.
	Topic string
	// Sequence is the task's sequence.
	Sequence int64
}

// CancelledLeases lists the ACTIVE tasks leased by this owner that were cancelled, in
// the given topics, or in every topic when none is given (which reads every table of
// task). A processor polls it, for its own topics, as the fallback for CANCEL
// notifications it may have missed.
func (r *Repository) CancelledLeases(ctx context.Context, h Handle, topics ...string) ([]Lease, error) {
	if topics == nil {
		topics = []string{}
	}
	rows, err := r.q.TaskCancelledLeases(ctx, h, db.TaskCancelledLeasesParams{Owner: r.owner, Topics: topics})
	if err != nil {
		return nil, mapError("list cancelled leases", err)
	}
	out := make([]Lease, len(rows))
	for i, row := range rows {
		out[i] = Lease{Topic: row.Topic, Sequence: row.Sequence}
	}
	return out, nil
}

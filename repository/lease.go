package repository

import (
	"context"
)

// Lease names one ACTIVE task.
type Lease struct {
	Topic    string
	Sequence int64
}

// CancelledLeases lists the ACTIVE tasks leased by this owner that were cancelled. A
// processor polls it as the fallback for CANCEL notifications it may have missed.
func (r *Repository) CancelledLeases(ctx context.Context, h Handle) ([]Lease, error) {
	rows, err := r.q.TaskCancelledLeases(ctx, h, r.owner)
	if err != nil {
		return nil, mapError("list cancelled leases", err)
	}
	out := make([]Lease, len(rows))
	for i, row := range rows {
		out[i] = Lease{Topic: row.Topic, Sequence: row.Sequence}
	}
	return out, nil
}

package repository

import (
	"context"
	"time"

	"github.com/pgtask/pgtask/db"
)

// Register inserts this instance's owner row if absent and reports whether it was new.
func (r *Repository) Register(ctx context.Context, h Handle) (bool, error) {
	pid := int32(r.pid)
	created, err := r.q.OwnerRegister(ctx, h, db.OwnerRegisterParams{
		Owner: r.owner, Now: r.clock(), Host: ptr(r.host), Pid: ptr(pid),
	})
	if err != nil {
		return false, mapError("register owner "+r.owner, err)
	}
	return created, nil
}

// Deregister deletes this owner's row when it leases no task (no ACTIVE task names it),
// as a processor does when it stops cleanly; it reports whether the row went. An owner
// that still leases tasks keeps its row, so that they expire once it is silent.
func (r *Repository) Deregister(ctx context.Context, h Handle) (bool, error) {
	n, err := r.q.OwnerDeregister(ctx, h, r.owner)
	if err != nil {
		return false, mapError("deregister owner "+r.owner, err)
	}
	return n > 0, nil
}

// Heartbeat records that this owner is alive. It fails with ErrNotRegistered when the
// owner row is missing (never registered, or purged as dead).
func (r *Repository) Heartbeat(ctx context.Context, h Handle) error {
	n, err := r.q.OwnerHeartbeat(ctx, h, db.OwnerHeartbeatParams{Now: r.clock(), Owner: r.owner})
	if err != nil {
		return mapError("heartbeat owner "+r.owner, err)
	}
	if n == 0 {
		return &ownerError{owner: r.owner}
	}
	return nil
}

type ownerError struct{ owner string }

func (e *ownerError) Error() string {
	return "heartbeat owner " + e.owner + ": " + ErrNotRegistered.Error()
}
func (e *ownerError) Unwrap() error { return ErrNotRegistered }

// LiveOwners lists the other owners whose heartbeat is newer than now − timeout.
func (r *Repository) LiveOwners(ctx context.Context, h Handle, timeout time.Duration) ([]Owner, error) {
	if err := validTimeout("timeout", timeout); err != nil {
		return nil, err
	}
	rows, err := r.q.OwnerLive(ctx, h, db.OwnerLiveParams{Owner: r.owner, Now: r.clock(), TimeoutMs: durationMs(timeout)})
	if err != nil {
		return nil, mapError("list live owners", err)
	}
	owners := make([]Owner, len(rows))
	for i, row := range rows {
		owners[i] = Owner{Name: row.Owner, Heartbeat: row.Heartbeat, Started: row.Started, Host: str(row.Host)}
		if row.Pid != nil {
			owners[i].PID = int(*row.Pid)
		}
	}
	return owners, nil
}

// PurgeOwners deletes the OTHER owners whose heartbeat is older than now − timeout and
// that lease no ACTIVE task; it returns how many. It never deletes this repository's own
// owner, whatever the timeout (a process does not deregister itself this way: see
// Deregister).
func (r *Repository) PurgeOwners(ctx context.Context, h Handle, timeout time.Duration) (int64, error) {
	if err := validTimeout("timeout", timeout); err != nil {
		return 0, err
	}
	// Most calls find no dead owner: tell that from task_owner alone, before a statement
	// whose plan covers (and locks) every task table.
	dead, err := r.q.OwnerAnyDead(ctx, h, db.OwnerAnyDeadParams{Owner: r.owner, Now: r.clock(), TimeoutMs: durationMs(timeout)})
	if err != nil {
		return 0, mapError("purge owners", err)
	}
	if !dead {
		return 0, nil
	}
	n, err := r.q.OwnerPurge(ctx, h, db.OwnerPurgeParams{Owner: r.owner, Now: r.clock(), TimeoutMs: durationMs(timeout)})
	if err != nil {
		return 0, mapError("purge owners", err)
	}
	return n, nil
}

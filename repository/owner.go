package repository

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/db"
)

// RegisterOwner inserts this instance's owner row (task_owner) if absent and reports
// whether it was new. An owner leases tasks and proves it is alive with Heartbeat; a
// processor registers its own. Topics are created with CreateTopic.
//
// A row already there (false) may be an earlier process's of the same name (a program
// restarted under a fixed name, a pod's): its leases are not this process's, and a
// Heartbeat would keep them alive, never expired. A program that leases by itself
// rather than through a processor uses a name of its own at each start; or, as a
// processor's start does, waits until that row is silent past the expiry timeout
// (RegisteredOwner says for how long), then in one transaction takes it over with
// ClaimOwner, takes the leases back with Expire called on a Repository of another
// owner name (an owner's Expire passes over its own leases), and heart-beats.
func (r *Repository) RegisterOwner(ctx context.Context, h Handle) (bool, error) {
	// Learn here, once, whether the database is distributed (onCitus), rather than at
	// the first push or poll, which are one statement each. On a pool, in the
	// registration's transaction, after waiting for a distribution under way: one that
	// begins between the look and the registration would not see this owner, which it
	// refuses to distribute under, and the look's answer "plain" would be wrong once it
	// committed.
	if r.citus.Load() == citusUnknown && autocommit(h) {
		var created bool
		err := inTx(ctx, h, func(tx pgx.Tx) error {
			if err := waitForDistribution(ctx, tx); err != nil {
				return err
			}
			if _, err := r.readCitus(ctx, tx, true); err != nil {
				return err
			}
			var err error
			created, err = r.q.OwnerRegister(ctx, tx, r.registration())
			return err
		})
		if err != nil {
			return false, mapError("register owner "+r.owner, err)
		}
		return created, nil
	}
	if _, err := r.onCitus(ctx, h); err != nil {
		return false, mapError("register owner "+r.owner, err)
	}
	created, err := r.q.OwnerRegister(ctx, h, r.registration())
	if err != nil {
		return false, mapError("register owner "+r.owner, err)
	}
	return created, nil
}

// registration is the owner row RegisterOwner writes.
func (r *Repository) registration() db.OwnerRegisterParams {
	pid := int32(r.pid)
	return db.OwnerRegisterParams{Owner: r.owner, Now: r.clock(), Host: ptr(r.host), Pid: ptr(pid), ExpiryMs: r.declaredExpiry()}
}

// Register is the former name of RegisterOwner.
//
// Deprecated: use RegisterOwner (topics are created with CreateTopic).
func (r *Repository) Register(ctx context.Context, h Handle) (bool, error) {
	return r.RegisterOwner(ctx, h)
}

// DeregisterOwner deletes this owner's row when it leases no task (no ACTIVE task names
// it), as a processor does when it stops cleanly; it reports whether the row went. An
// owner that still leases tasks keeps its row, so that they expire once it is silent.
func (r *Repository) DeregisterOwner(ctx context.Context, h Handle) (bool, error) {
	n, err := either(ctx, r, h, func() (int64, error) { return r.deregisterCitus(ctx, h) },
		func() (int64, error) { return r.q.OwnerDeregister(ctx, h, r.owner) })
	if err != nil {
		return false, mapError("deregister owner "+r.owner, err)
	}
	return n > 0, nil
}

// Deregister is the former name of DeregisterOwner.
//
// Deprecated: use DeregisterOwner.
func (r *Repository) Deregister(ctx context.Context, h Handle) (bool, error) {
	return r.DeregisterOwner(ctx, h)
}

// Heartbeat records that this owner is alive. It fails with ErrNotRegistered when the
// owner row is missing (never registered, or purged as dead).
func (r *Repository) Heartbeat(ctx context.Context, h Handle) error {
	// (on Citus too: task_owner stays a table of the coordinator)
	n, err := r.q.OwnerHeartbeat(ctx, h, db.OwnerHeartbeatParams{Now: r.clock(), Owner: r.owner, ExpiryMs: r.declaredExpiry()})
	if err != nil {
		return mapError("heartbeat owner "+r.owner, err)
	}
	if n == 0 {
		return &ownerError{op: "heartbeat", owner: r.owner}
	}
	return nil
}

// HeartbeatRow is Heartbeat of the owner row as row has it (its Started, Host and PID:
// what RegisteredOwner read once this process had registered or claimed it), in one
// statement. It reports false, writing nothing, when the row is gone or no longer that
// one: another process started under the same name claimed it (ClaimOwner) while this
// one was silent. A processor heart-beats so: a read of the row and then a write let
// such a claim fall between them, and the process heart-beat the other's row and went
// on leasing under its name for another interval.
func (r *Repository) HeartbeatRow(ctx context.Context, h Handle, row Owner) (bool, error) {
	n, err := r.q.OwnerHeartbeatRow(ctx, h, db.OwnerHeartbeatRowParams{Now: r.clock(), ExpiryMs: r.declaredExpiry(),
		Owner: r.owner, Started: row.Started, Host: row.Host, Pid: int32(row.PID)})
	if err != nil {
		return false, mapError("heartbeat owner "+r.owner, err)
	}
	return n == 1, nil
}

// SetExpiryTimeout declares how long this owner may be silent before other owners take
// its leases back: RegisterOwner and each Heartbeat record it with the owner row, and an
// expiry (Expire, ExpireStale), PurgeOwners and LiveOwners then wait for the longer of
// their own timeout and this one before they count the owner dead. So processes whose
// heartbeats differ never take a live one's leases: a processor declares its
// ExpiryTimeout. Zero declares none (the others' timeouts decide, as for an owner
// registered before schema 32); a negative timeout is an error.
func (r *Repository) SetExpiryTimeout(timeout time.Duration) error {
	if err := validTimeout("expiry timeout", timeout); err != nil {
		return err
	}
	r.expiryMs.Store(expiryMs(timeout))
	return nil
}

// ExpiryTimeout returns the expiry timeout this owner declares (SetExpiryTimeout), 0
// when none, in whole milliseconds.
func (r *Repository) ExpiryTimeout() time.Duration {
	return time.Duration(r.expiryMs.Load()) * time.Millisecond
}

// expiryMs is timeout in whole milliseconds, rounded up (never declared shorter than it
// is), and at most what a Duration holds in milliseconds.
func expiryMs(timeout time.Duration) int64 {
	ms := int64(timeout / time.Millisecond)
	if timeout%time.Millisecond != 0 && ms < math.MaxInt64/int64(time.Millisecond) {
		ms++
	}
	return ms
}

// DeclaredExpiryTimeout is what SetExpiryTimeout(timeout) declares: timeout rounded up
// to whole milliseconds, which the owner row holds.
func DeclaredExpiryTimeout(timeout time.Duration) time.Duration {
	return time.Duration(expiryMs(timeout)) * time.Millisecond
}

// declaredExpiry is the owner row's expiry_ms: nil when none is declared.
func (r *Repository) declaredExpiry() *int64 {
	if ms := r.expiryMs.Load(); ms > 0 {
		return &ms
	}
	return nil
}

// ownerOf is an Owner from the columns of its row.
func ownerOf(name string, heartbeat, started time.Time, host *string, pid *int32, expiryMs *int64) Owner {
	o := Owner{Name: name, Heartbeat: heartbeat, Started: started, Host: str(host)}
	if pid != nil {
		o.PID = int(*pid)
	}
	if expiryMs != nil {
		o.ExpiryTimeout = time.Duration(*expiryMs) * time.Millisecond
	}
	return o
}

type ownerError struct{ op, owner string }

// Error says which owner is not registered.
func (e *ownerError) Error() string {
	return e.op + " owner " + e.owner + ": " + ErrNotRegistered.Error()
}

// Unwrap returns ErrNotRegistered.
func (e *ownerError) Unwrap() error { return ErrNotRegistered }

// RegisteredOwner reads this repository's owner row, and how long its heartbeat has
// been silent by the database clock; ErrNotRegistered when there is no row. A process
// whose RegisterOwner found the row there already learns from it whose the row is.
func (r *Repository) RegisteredOwner(ctx context.Context, h Handle) (Owner, time.Duration, error) {
	row, err := r.q.OwnerGet(ctx, h, db.OwnerGetParams{Now: r.clock(), Owner: r.owner})
	if errors.Is(err, pgx.ErrNoRows) {
		return Owner{}, 0, &ownerError{op: "read", owner: r.owner}
	}
	if err != nil {
		return Owner{}, 0, mapError("read owner "+r.owner, err)
	}
	return ownerOf(row.Owner, row.Heartbeat, row.Started, row.Host, row.Pid, row.ExpiryMs), time.Duration(row.SilentMs) * time.Millisecond, nil
}

// ClaimOwner takes this repository's owner row over from the process that wrote it,
// provided its heartbeat is still seen (as RegisteredOwner read it): the row then names
// this process's host and id, and its heartbeat is set far in the past, so that an
// expiry by another owner takes the earlier process's leases back. Run it in a
// transaction with that expiry and a Heartbeat, which makes the row live again before
// anyone else sees it dead (a processor's start does). It reports false, writing
// nothing, when the heartbeat moved or the row is gone: another process uses the name,
// or took it over first.
func (r *Repository) ClaimOwner(ctx context.Context, h Handle, seen time.Time) (bool, error) {
	pid := int32(r.pid)
	n, err := r.q.OwnerClaim(ctx, h, db.OwnerClaimParams{Now: r.clock(), Host: ptr(r.host), Pid: ptr(pid), Owner: r.owner, Seen: seen})
	if err != nil {
		return false, mapError("claim owner "+r.owner, err)
	}
	return n == 1, nil
}

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
		owners[i] = ownerOf(row.Owner, row.Heartbeat, row.Started, row.Host, row.Pid, row.ExpiryMs)
	}
	return owners, nil
}

// OwnerLive reports whether the named owner's heartbeat is newer than now − timeout (or
// its own declared expiry timeout, when longer), as LiveOwners lists them: one row read,
// where a page showing one task's owner read them all.
func (r *Repository) OwnerLive(ctx context.Context, h Handle, name string, timeout time.Duration) (bool, error) {
	if err := validTimeout("timeout", timeout); err != nil {
		return false, err
	}
	live, err := r.q.OwnerIsLive(ctx, h, db.OwnerIsLiveParams{Name: name, Now: r.clock(), TimeoutMs: durationMs(timeout)})
	if err != nil {
		return false, mapError("read owner "+name, err)
	}
	return live, nil
}

// CountLiveOwners returns how many owners, this repository's own included, heart-beat
// within timeout (as LiveOwners decides): the live processes, for a gauge.
func (r *Repository) CountLiveOwners(ctx context.Context, h Handle, timeout time.Duration) (int64, error) {
	if err := validTimeout("timeout", timeout); err != nil {
		return 0, err
	}
	n, err := r.q.OwnerCountLive(ctx, h, db.OwnerCountLiveParams{Now: r.clock(), TimeoutMs: durationMs(timeout)})
	if err != nil {
		return 0, mapError("count live owners", err)
	}
	return n, nil
}

// PurgeOwners deletes the OTHER owners whose heartbeat is older than now − timeout, and
// than twice the expiry timeout an owner declares (SetExpiryTimeout), and that lease no
// ACTIVE task; it returns how many. It never deletes this repository's own
// owner, whatever the timeout (a process does not deregister itself this way: see
// DeregisterOwner).
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
	n, err := either(ctx, r, h, func() (int64, error) { return r.purgeCitus(ctx, h, timeout) },
		func() (int64, error) {
			return r.q.OwnerPurge(ctx, h, db.OwnerPurgeParams{Owner: r.owner, Now: r.clock(), TimeoutMs: durationMs(timeout)})
		})
	if err != nil {
		return 0, mapError("purge owners", err)
	}
	return n, nil
}

// OwnerStatus is an owner as Owners reports it: whether it is alive and how many tasks
// it leases.
type OwnerStatus struct {
	Owner
	// Alive is true when the owner's heartbeat is newer than now − the timeout given.
	Alive bool
	// Leased counts the ACTIVE tasks the owner leases, in every topic.
	Leased int64
	// Topics names the topics of those tasks, sorted.
	Topics []string
}

// Owners lists up to size owners (1..TopicPageMax), live or dead, the most recent
// heartbeat first (this repository's own owner included, when registered), each with
// whether its heartbeat is newer than now − timeout and how many ACTIVE tasks it leases,
// in which topics.
func (r *Repository) Owners(ctx context.Context, h Handle, timeout time.Duration, size int) ([]OwnerStatus, error) {
	if err := validTimeout("timeout", timeout); err != nil {
		return nil, err
	}
	if size < 1 || size > TopicPageMax {
		return nil, fmt.Errorf("%w: owner list size %d is outside 1..%d", ErrInvalid, size, TopicPageMax)
	}
	arg := db.OwnerListParams{Now: r.clock(), TimeoutMs: durationMs(timeout), Size: int32(size)}
	rows, err := either(ctx, r, h, func() ([]db.OwnerListRow, error) { return r.ownersCitus(ctx, h, arg) },
		func() ([]db.OwnerListRow, error) { return r.q.OwnerList(ctx, h, arg) })
	if err != nil {
		return nil, mapError("list owners", err)
	}
	owners := make([]OwnerStatus, len(rows))
	for i, row := range rows {
		owners[i] = OwnerStatus{Owner: ownerOf(row.Owner, row.Heartbeat, row.Started, row.Host, row.Pid, row.ExpiryMs),
			Alive: row.Alive, Leased: row.Leased, Topics: row.Topics}
	}
	return owners, nil
}

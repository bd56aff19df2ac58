-- name: OwnerRegister :one
-- Inserts the owner row if absent; new is false when it existed already. expiry_ms is
-- how long the owner may be silent before others take its leases back (NULL: as long
-- as theirs).
WITH inserted AS (
    INSERT INTO task_owner (owner, heartbeat, host, pid, expiry_ms)
    VALUES (sqlc.arg(owner), COALESCE(sqlc.narg('now')::timestamptz, now()), sqlc.narg('host'), sqlc.narg('pid'),
            sqlc.narg('expiry_ms'))
    ON CONFLICT (owner) DO NOTHING
    RETURNING owner
)
SELECT EXISTS (SELECT 1 FROM inserted)::boolean AS new;

-- name: OwnerHeartbeat :execrows
UPDATE task_owner SET heartbeat = COALESCE(sqlc.narg('now')::timestamptz, now()), expiry_ms = sqlc.narg('expiry_ms')
WHERE owner = sqlc.arg(owner);

-- name: OwnerHeartbeatRow :execrows
-- OwnerHeartbeat of the row as this process registered or claimed it (its start time,
-- host and pid), in one statement: a row another process claimed since (OwnerClaim) is
-- left alone, where a read then a write let the claim fall between them.
UPDATE task_owner SET heartbeat = COALESCE(sqlc.narg('now')::timestamptz, now()), expiry_ms = sqlc.narg('expiry_ms')
WHERE owner = sqlc.arg(owner) AND started = sqlc.arg(started)::timestamptz
  AND COALESCE(host, '') = sqlc.arg(host)::text AND COALESCE(pid, 0) = sqlc.arg(pid)::int;

-- name: OwnerLive :many
-- Other owners whose heartbeat is newer than now - timeout, or - the owner's own expiry
-- timeout when longer (as in every test of an owner's silence below).
-- Its columns named: a release's binary scans what it knows, whatever a later migration
-- adds (SELECT * failed in the earlier release's processes after 000032).
SELECT owner, heartbeat, started, host, pid, expiry_ms FROM task_owner
WHERE owner <> sqlc.arg(owner)
  AND heartbeat > COALESCE(sqlc.narg('now')::timestamptz, now()) - GREATEST(sqlc.arg(timeout_ms)::bigint, expiry_ms) * interval '1 millisecond'
ORDER BY owner;

-- name: OwnerIsLive :one
-- Whether the named owner heart-beats within OwnerLive's terms (its primary key: one row).
SELECT EXISTS (
    SELECT 1 FROM task_owner
    WHERE owner = sqlc.arg(name)
      AND heartbeat > COALESCE(sqlc.narg('now')::timestamptz, now()) - GREATEST(sqlc.arg(timeout_ms)::bigint, expiry_ms) * interval '1 millisecond'
) AS live;

-- name: OwnerCountLive :one
-- How many owners, the caller's own included, heart-beat within OwnerLive's terms.
SELECT count(*) FROM task_owner
WHERE heartbeat > COALESCE(sqlc.narg('now')::timestamptz, now()) - GREATEST(sqlc.arg(timeout_ms)::bigint, expiry_ms) * interval '1 millisecond';

-- name: OwnerPurge :execrows
-- Deletes the OTHER owners that are dead and lease no task (silent for timeout, and for
-- twice the expiry timeout an owner declares, as a processor purges at twice its own):
-- never
-- owner itself, whatever its heartbeat. NOT EXISTS rather than NOT IN: a task without
-- owner (NULL) must not block the purge.
DELETE FROM task_owner o
WHERE o.owner <> sqlc.arg(owner)
  AND o.heartbeat <= COALESCE(sqlc.narg('now')::timestamptz, now()) - GREATEST(sqlc.arg(timeout_ms)::bigint, 2 * o.expiry_ms) * interval '1 millisecond'
  AND NOT EXISTS (SELECT 1 FROM task t WHERE t.state = 0 AND t.owner = o.owner);

-- name: OwnerDeregister :execrows
-- Deletes this owner's row unless it still leases a task: an owner that stopped cleanly
-- leaves nothing for the others to expire or purge.
DELETE FROM task_owner o
WHERE o.owner = sqlc.arg(owner)
  AND NOT EXISTS (SELECT 1 FROM task t WHERE t.state = 0 AND t.owner = o.owner);

-- name: OwnerAnyStale :one
-- Whether another owner's heartbeat is older than now - timeout: reads task_owner only, so
-- that the periodic expiry plans its statement over the task tables (locking each) only
-- when there is something to expire.
SELECT EXISTS (
    SELECT 1 FROM task_owner w
    WHERE w.owner <> sqlc.arg(owner)
      AND w.heartbeat < COALESCE(sqlc.narg('now')::timestamptz, now()) - GREATEST(sqlc.arg(timeout_ms)::bigint, w.expiry_ms) * interval '1 millisecond'
)::boolean AS stale;

-- name: OwnerAnyDead :one
-- Whether another owner's heartbeat is at or before now - timeout (what OwnerPurge
-- deletes, if it leases nothing); task_owner only, as OwnerAnyStale.
SELECT EXISTS (
    SELECT 1 FROM task_owner o
    WHERE o.owner <> sqlc.arg(owner)
      AND o.heartbeat <= COALESCE(sqlc.narg('now')::timestamptz, now()) - GREATEST(sqlc.arg(timeout_ms)::bigint, 2 * o.expiry_ms) * interval '1 millisecond'
)::boolean AS dead;

-- name: OwnerList :many
-- Every owner, live or dead, with how many ACTIVE tasks it leases and in which topics
-- and whether its heartbeat is newer than now - timeout. The ACTIVE tasks are read once
-- for the whole page (each table's entries of task_open, whose size follows the open
-- tasks only), grouped by owner: a look per owner would read them all once per owner.
WITH page AS (
    SELECT o.owner, o.heartbeat, o.started, o.host, o.pid, o.expiry_ms
    FROM task_owner o
    ORDER BY o.heartbeat DESC, o.owner
    LIMIT sqlc.arg(size)::int
), leases AS (
    SELECT t.owner, count(*)::bigint AS leased, array_agg(DISTINCT t.topic ORDER BY t.topic)::text[] AS topics
    FROM task t WHERE t.state = 0
    GROUP BY t.owner
)
SELECT p.owner, p.heartbeat, p.started, p.host, p.pid, p.expiry_ms,
       (p.heartbeat > COALESCE(sqlc.narg('now')::timestamptz, now()) - GREATEST(sqlc.arg(timeout_ms)::bigint, p.expiry_ms) * interval '1 millisecond')::boolean AS alive,
       COALESCE(l.leased, 0)::bigint AS leased, COALESCE(l.topics, '{}')::text[] AS topics
FROM page p
LEFT JOIN leases l ON l.owner = p.owner
ORDER BY p.heartbeat DESC, p.owner;

-- name: OwnerGet :one
-- This owner's row, and how long its heartbeat has been silent by the database clock.
SELECT o.owner, o.heartbeat, o.started, o.host, o.pid, o.expiry_ms,
       (extract(epoch FROM COALESCE(sqlc.narg('now')::timestamptz, now()) - o.heartbeat) * 1000)::bigint AS silent_ms
FROM task_owner o
WHERE o.owner = sqlc.arg(owner);

-- name: OwnerClaim :execrows
-- Takes this owner's row over from the process that wrote it, if its heartbeat is still
-- the one read (seen): records this process's host and pid and sets the heartbeat far in
-- the past, so that an expiry in the same transaction takes the earlier process's leases
-- back (a heartbeat then makes the row live again before the commit).
UPDATE task_owner
SET heartbeat = 'epoch', started = COALESCE(sqlc.narg('now')::timestamptz, now()),
    host = sqlc.narg('host'), pid = sqlc.narg('pid')
WHERE owner = sqlc.arg(owner) AND heartbeat = sqlc.arg(seen)::timestamptz;

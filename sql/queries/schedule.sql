-- name: ScheduleCreate :one
-- Inserts a schedule (migration 000016) to a registered topic. No row when the topic is
-- unknown (nothing is selected) or a schedule of that name exists (ON CONFLICT): the
-- caller tells which apart, and the caller's transaction survives either.
INSERT INTO task_schedule (name, topic, spec, time_zone, identifier, input, priority, insertion, catch_up, paused,
                           next_fire, created, updated)
SELECT sqlc.arg(name), tt.topic, sqlc.arg(spec), sqlc.arg(time_zone), sqlc.narg('identifier'), sqlc.narg('input'),
       sqlc.arg(priority), sqlc.arg(insertion), sqlc.arg(catch_up), sqlc.arg(paused), sqlc.arg(next_fire)::timestamptz,
       COALESCE(sqlc.narg('now')::timestamptz, now()), COALESCE(sqlc.narg('now')::timestamptz, now())
FROM task_topic tt
WHERE tt.topic = sqlc.arg(topic)
ON CONFLICT (name) DO NOTHING
RETURNING *;

-- name: ScheduleGet :one
SELECT * FROM task_schedule WHERE name = sqlc.arg(name);

-- name: ScheduleGetForUpdate :one
-- The schedule's row, locked until the end of the transaction: a change reads, modifies
-- and writes it back without losing a concurrent one (or a fire).
SELECT * FROM task_schedule WHERE name = sqlc.arg(name) FOR UPDATE;

-- name: ScheduleExisting :many
-- Which of the named schedules exist, by name.
SELECT name FROM task_schedule WHERE name = ANY(sqlc.arg(names)::text[]) ORDER BY name;

-- name: ScheduleList :many
SELECT * FROM task_schedule ORDER BY name;

-- name: ScheduleListOfTopic :many
-- A topic's schedules, by name (task_schedule_topic, migration 000055).
SELECT * FROM task_schedule WHERE topic = sqlc.arg(topic)::text ORDER BY name;

-- name: SchedulePage :many
-- Up to size schedules after the name `after` (keyset: '' starts at the first), by name,
-- whose name or topic contains `search` (case-insensitive; '' matches every schedule):
-- the REST API's and the dashboard's listings page through thousands of schedules.
SELECT * FROM task_schedule
WHERE name > sqlc.arg(after)::text
  AND (sqlc.arg(search)::text = '' OR strpos(lower(name), lower(sqlc.arg(search)::text)) > 0
       OR strpos(lower(topic), lower(sqlc.arg(search)::text)) > 0)
ORDER BY name
LIMIT sqlc.arg(size)::int;

-- name: ScheduleZoneProblem :one
-- What is wrong with a time zone ('' when nothing is), as task_schedule_check reads it
-- (migration 000041): asked before a write, whose refusal by the trigger would abort the
-- caller's transaction.
SELECT COALESCE(task_schedule_zone_problem(sqlc.arg(time_zone)::text), '')::text AS problem;

-- name: ScheduleUpdate :one
-- Writes a schedule's definition. The topic must be registered (the foreign key).
-- task_schedule_check (migration 000041) checks the spec and the zone when they change,
-- and marks the next fire time for recomputing (next_fire NULL, or fire_from set) when
-- the spec, a cron spec's zone or the pause changed: the caller then writes the one it
-- computed with ScheduleSetNextFire.
UPDATE task_schedule
SET topic      = sqlc.arg(topic),
    spec       = sqlc.arg(spec),
    time_zone  = sqlc.arg(time_zone),
    identifier = sqlc.narg('identifier'),
    input      = sqlc.narg('input'),
    priority   = sqlc.arg(priority),
    insertion  = sqlc.arg(insertion),
    catch_up   = sqlc.arg(catch_up),
    paused     = sqlc.arg(paused),
    updated    = COALESCE(sqlc.narg('now')::timestamptz, now())
WHERE name = sqlc.arg(name)
RETURNING *;

-- name: ScheduleSetNextFire :one
-- Writes a schedule's next fire time and fire_from as the caller computed them (its
-- next fire time, NULL; or, for a replay, those the schedule had): an UPDATE of these
-- alone, which task_schedule_check takes as it is.
UPDATE task_schedule
SET next_fire = sqlc.narg('next_fire')::timestamptz,
    fire_from = sqlc.narg('fire_from')::timestamptz
WHERE name = sqlc.arg(name)
RETURNING *;

-- name: ScheduleDelete :execrows
DELETE FROM task_schedule WHERE name = sqlc.arg(name);

-- name: ScheduleAnyDue :one
-- Whether any running schedule is due that the firer does not pass over for now (skip,
-- skip_topics: ScheduleDue's), without a lock or a transaction: an idle round of the
-- firers costs one read of task_schedule_due, and so does a round in which only
-- schedules refused a moment ago are due (it began two transactions that found nothing).
SELECT EXISTS (
    SELECT FROM task_schedule s
    WHERE NOT s.paused
      AND (s.next_fire IS NULL OR s.next_fire <= COALESCE(sqlc.narg('now')::timestamptz, now()))
      AND s.name <> ALL (sqlc.arg(skip)::text[])
      AND s.topic <> ALL (sqlc.arg(skip_topics)::text[])
)::boolean AS due;

-- name: ScheduleDue :one
-- The running schedule whose fire time is the oldest past (or not computed yet: NULL
-- first), locked for this transaction; schedules another firer holds are skipped, not
-- waited for (ScheduleDueWait waits), and so are those this firer could not fire in this
-- round (skip) and those of a topic whose queue cap refused one of them (skip_topics).
-- Returns the clock the fire goes by: the injected time, or the database's.
SELECT sqlc.embed(s), COALESCE(sqlc.narg('now')::timestamptz, now())::timestamptz AS now
FROM task_schedule s
WHERE NOT s.paused
  AND (s.next_fire IS NULL OR s.next_fire <= COALESCE(sqlc.narg('now')::timestamptz, now()))
  AND s.name <> ALL (sqlc.arg(skip)::text[])
  AND s.topic <> ALL (sqlc.arg(skip_topics)::text[])
ORDER BY s.next_fire NULLS FIRST
LIMIT 1
FOR UPDATE OF s SKIP LOCKED;

-- name: ScheduleDueNext :one
-- The name of the running schedule ScheduleDue would return, locked or not, read without
-- a lock: the one a firer then waits for (ScheduleLockDue), those another firer held in
-- its first pass being the only ones left.
SELECT s.name
FROM task_schedule s
WHERE NOT s.paused
  AND (s.next_fire IS NULL OR s.next_fire <= COALESCE(sqlc.narg('now')::timestamptz, now()))
  AND s.name <> ALL (sqlc.arg(skip)::text[])
  AND s.topic <> ALL (sqlc.arg(skip_topics)::text[])
ORDER BY s.next_fire NULLS FIRST
LIMIT 1;

-- name: ScheduleLockDue :one
-- One schedule by name, locked for this transaction, waiting for another holder (up to
-- the transaction's lock_timeout). Once that holder commits the row is read again: no
-- longer due (it fired, or was paused), no row; still due (the holder rolled back, or
-- died), it is returned, so a fire time is never lost to a firer that failed while the
-- others skipped it.
SELECT sqlc.embed(s), COALESCE(sqlc.narg('now')::timestamptz, now())::timestamptz AS now
FROM task_schedule s
WHERE s.name = sqlc.arg(name)
  AND NOT s.paused
  AND (s.next_fire IS NULL OR s.next_fire <= COALESCE(sqlc.narg('now')::timestamptz, now()))
FOR UPDATE OF s;

-- name: ScheduleAdvance :execrows
-- Records a fire and moves next_fire on — a compare-and-set: only when next_fire still
-- holds the value the firer read (NULL included). A second firer of the same fire time
-- waits here for the first to commit, then matches no row and rolls its push back, so
-- each fire time is pushed exactly once whatever the number of firers.
UPDATE task_schedule
SET next_fire     = sqlc.arg(next_fire)::timestamptz,
    last_fire     = COALESCE(sqlc.narg('last_fire')::timestamptz, last_fire),
    last_fired_at = COALESCE(sqlc.narg('fired_at')::timestamptz, last_fired_at),
    last_sequence = COALESCE(sqlc.narg('last_sequence')::bigint, last_sequence),
    fires         = fires + sqlc.arg(fired)::bigint,
    fire_from     = NULL -- the floor task_schedule_check set is passed
WHERE name = sqlc.arg(name)
  AND next_fire IS NOT DISTINCT FROM sqlc.narg('expected')::timestamptz;

-- name: LockTimeout :one
-- The lock_timeout in force, to put back after a wait bounded by SetLockTimeout.
SELECT current_setting('lock_timeout')::text AS lock_timeout;

-- name: SetLockTimeout :exec
-- Sets lock_timeout for the rest of the transaction.
SELECT set_config('lock_timeout', sqlc.arg(lock_timeout)::text, true);

-- name: SetIdleTimeout :exec
-- Sets idle_in_transaction_session_timeout for the rest of the transaction: the server
-- ends a session that holds a fire's transaction open, idle, for longer (a firer whose
-- host died), which frees the schedule's row lock for the other firers.
SELECT set_config('idle_in_transaction_session_timeout', sqlc.arg(idle_timeout)::text, true);

-- name: TaskReassign :many
-- Gives tasks in EXPIRED..SUCCEEDED the state of result (0 FAILURE ... 3 SUCCESS), all or
-- nothing: when any task is unknown or in another state, no row is changed or returned.
WITH target AS (
    SELECT t.topic, t.sequence FROM task t
    WHERE t.topic = sqlc.arg(topic) AND t.sequence = ANY(sqlc.arg(sequences)::bigint[]) AND t.state BETWEEN 2 AND 6
    FOR UPDATE OF t
)
UPDATE task t
SET state = sqlc.arg(result)::smallint + 3, descent = GREATEST(t.state, t.descent), completed = now(),
    -- the outcome is the one given now: a cancelled task reassigned (SUSPENDED, then
    -- released) is not failed "cancelled" whatever its next run decides
    cancelled = false
FROM target g
WHERE t.topic = sqlc.arg(topic) AND t.sequence = g.sequence
  AND (SELECT count(*) FROM target) = cardinality(sqlc.arg(sequences)::bigint[])
RETURNING t.*;

-- name: TaskReassignAll :execrows
-- Gives at most size tasks of from_state (EXPIRED..SUCCEEDED) in the sequence range the
-- state of result; rows locked by others are skipped.
WITH target AS (
    SELECT t.topic, t.sequence FROM task t
    WHERE hashtext(t.topic) = hashtext(sqlc.arg(topic)) AND t.topic = sqlc.arg(topic)
      AND t.state = sqlc.arg(from_state)::smallint
      AND t.sequence BETWEEN sqlc.arg(from_sequence)::bigint AND sqlc.arg(to_sequence)::bigint
    LIMIT sqlc.arg(size)::bigint
    FOR UPDATE OF t SKIP LOCKED
)
UPDATE task t
SET state = sqlc.arg(result)::smallint + 3, descent = GREATEST(t.state, t.descent), completed = now(),
    -- the outcome is the one given now: a cancelled task reassigned (SUSPENDED, then
    -- released) is not failed "cancelled" whatever its next run decides
    cancelled = false
FROM target g
WHERE t.topic = sqlc.arg(topic) AND t.sequence = g.sequence;

-- name: TaskRecreateMark :many
-- Marks tasks (by sequence) RECREATED so that fresh copies can be pushed; all or nothing
-- over EXPIRED..SUCCEEDED. Returns the old rows in sequence order.
WITH target AS (
    SELECT t.topic, t.sequence FROM task t
    WHERE t.topic = sqlc.arg(topic) AND t.sequence = ANY(sqlc.arg(sequences)::bigint[]) AND t.state BETWEEN 2 AND 6
    FOR UPDATE OF t
),
marked AS (
    UPDATE task t SET state = 7, descent = GREATEST(t.state, t.descent)
    FROM target g
    WHERE t.topic = sqlc.arg(topic) AND t.sequence = g.sequence
      AND (SELECT count(*) FROM target) = cardinality(sqlc.arg(sequences)::bigint[])
    RETURNING t.*
)
SELECT * FROM marked ORDER BY sequence;

-- name: TaskRecreateMarkState :many
-- Marks up to size tasks of state RECREATED, oldest first, within the sequence range,
-- skipping rows locked by others. Returns the old rows in sequence order.
WITH target AS (
    SELECT t.topic, t.sequence FROM task t
    WHERE hashtext(t.topic) = hashtext(sqlc.arg(topic)) AND t.topic = sqlc.arg(topic)
      AND t.state = sqlc.arg(state)::smallint
      AND t.sequence BETWEEN sqlc.arg(from_sequence)::bigint AND sqlc.arg(to_sequence)::bigint
    ORDER BY t.sequence
    LIMIT sqlc.arg(size)
    FOR UPDATE OF t SKIP LOCKED
),
marked AS (
    UPDATE task t SET state = 7, descent = GREATEST(t.state, t.descent)
    FROM target g
    WHERE t.topic = sqlc.arg(topic) AND t.sequence = g.sequence
    RETURNING t.*
)
SELECT * FROM marked ORDER BY sequence;

-- name: TaskReset :many
-- Flips tasks (by sequence) in EXPIRED..SUCCEEDED back to READY with a fresh attempt
-- budget (every lease so far returned; attempt itself never goes down, it fences
-- completions); all or nothing. Notifies the topic. The not-before is the reset's time:
-- a READY task waits from its push or its not-before, whichever is later
-- (task_topic_stats), not from its push a day ago. Refused whole, with nothing written,
-- when the tasks made READY would take the topic above its queue cap: it then returns
-- them as they are (none READY), which tells the caller the refusal. (On Citus,
-- task_citus_reset of sql/citus does the same.)
WITH target AS (
    SELECT t.topic, t.sequence FROM task t
    WHERE t.topic = sqlc.arg(topic) AND t.sequence = ANY(sqlc.arg(sequences)::bigint[]) AND t.state BETWEEN 2 AND 6
    FOR UPDATE OF t
),
admitted AS (
    SELECT true AS ok FROM task_topic tt
    WHERE tt.topic = sqlc.arg(topic) AND task_queue_admits(tt.topic, tt.queue_cap, (SELECT count(*) FROM target))
),
reset AS (
    UPDATE task t
    SET state = 1, descent = GREATEST(t.state, t.descent), returned = t.attempt, not_before = now(),
        completed = NULL, owner = NULL, cancelled = false
    FROM target g
    WHERE t.topic = sqlc.arg(topic) AND t.sequence = g.sequence
      AND (SELECT count(*) FROM target) = cardinality(sqlc.arg(sequences)::bigint[])
      AND EXISTS (SELECT 1 FROM admitted)
    RETURNING t.*
),
notified AS (
    -- with the position of the first task reset in poll order (repository.Notification)
    SELECT pg_notify('task_notification', 'WORK ' || md5(sqlc.arg(topic)) || ' ' || f.priority || ' ' || f.sequence) AS sent
    FROM (SELECT r.priority, r.sequence FROM reset r ORDER BY r.priority, r.sequence LIMIT 1) f
)
SELECT r.* FROM reset r
-- notified runs only when referenced: a scalar subquery in WHERE always runs
WHERE (SELECT count(*) FROM notified) >= 0
UNION ALL
-- refused by the cap: the tasks as they are
SELECT t.* FROM task t
WHERE t.topic = sqlc.arg(topic) AND t.sequence IN (SELECT g.sequence FROM target g)
  AND (SELECT count(*) FROM target) = cardinality(sqlc.arg(sequences)::bigint[])
  AND NOT EXISTS (SELECT 1 FROM admitted)
ORDER BY sequence;

-- name: TaskResetState :many
-- Flips up to size tasks of state back to READY, oldest first within the sequence range,
-- skipping rows locked by others. Notifies the topic. Refused whole when the tasks made
-- READY would take the topic above its queue cap, as TaskReset: it then returns them as
-- they are (none READY).
WITH target AS (
    SELECT t.topic, t.sequence FROM task t
    WHERE hashtext(t.topic) = hashtext(sqlc.arg(topic)) AND t.topic = sqlc.arg(topic)
      AND t.state = sqlc.arg(state)::smallint
      AND t.sequence BETWEEN sqlc.arg(from_sequence)::bigint AND sqlc.arg(to_sequence)::bigint
    ORDER BY t.sequence
    LIMIT sqlc.arg(size)
    FOR UPDATE OF t SKIP LOCKED
),
admitted AS (
    -- the READY and ACTIVE tasks there, counted no further than the cap, plus those made
    -- READY: task_queue_admits (migration 000037) written out, since Citus routes this
    -- statement whole to the topic's node, where a function that reads task cannot run
    SELECT true AS ok FROM task_topic tt
    WHERE tt.topic = sqlc.arg(topic)
      AND (tt.queue_cap IS NULL OR NOT EXISTS (SELECT 1 FROM target)
           OR (SELECT count(*) FROM (SELECT 1 FROM task a
                                     WHERE a.state = 0 AND hashtext(a.topic) = hashtext(sqlc.arg(topic)) AND a.topic = sqlc.arg(topic)
                                     LIMIT tt.queue_cap + 1) a)
              + (SELECT count(*) FROM (SELECT 1 FROM task r
                                       WHERE hashtext(r.topic) = hashtext(sqlc.arg(topic)) AND r.topic = sqlc.arg(topic) AND r.state = 1
                                       LIMIT tt.queue_cap + 1) r)
              + (SELECT count(*) FROM target) <= tt.queue_cap)
),
reset AS (
    UPDATE task t
    SET state = 1, descent = GREATEST(t.state, t.descent), returned = t.attempt, not_before = now(),
        completed = NULL, owner = NULL, cancelled = false
    FROM target g
    WHERE t.topic = sqlc.arg(topic) AND t.sequence = g.sequence AND EXISTS (SELECT 1 FROM admitted)
    RETURNING t.*
),
notified AS (
    -- with the position of the first task reset in poll order (repository.Notification)
    -- not on Citus (notify false): see TaskJunction
    SELECT pg_notify('task_notification', 'WORK ' || md5(sqlc.arg(topic)) || ' ' || f.priority || ' ' || f.sequence) AS sent
    FROM (SELECT r.priority, r.sequence FROM reset r ORDER BY r.priority, r.sequence LIMIT 1) f
    WHERE sqlc.arg(notify)::boolean
)
SELECT r.* FROM reset r
-- notified runs only when referenced: a scalar subquery in WHERE always runs
WHERE (SELECT count(*) FROM notified) >= 0
UNION ALL
-- refused by the cap: the tasks as they are
SELECT t.* FROM task t
WHERE t.topic = sqlc.arg(topic) AND t.sequence IN (SELECT g.sequence FROM target g) AND NOT EXISTS (SELECT 1 FROM admitted)
ORDER BY sequence;

-- name: TaskHold :many
-- Locks the given tasks of a topic, for an operation run next in the same transaction
-- (Repository.Hold), and reads their states.
SELECT t.sequence, t.state
FROM task t
WHERE hashtext(t.topic) = hashtext(sqlc.arg(topic)::text) AND t.topic = sqlc.arg(topic)
  AND t.sequence = ANY(sqlc.arg(sequences)::bigint[])
ORDER BY t.sequence
FOR UPDATE;

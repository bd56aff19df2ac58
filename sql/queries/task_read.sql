-- name: TaskGet :one
SELECT * FROM task WHERE topic = sqlc.arg(topic) AND sequence = sqlc.arg(sequence);

-- name: TaskPageForward :many
-- Tasks after the exclusive cursor, in sequence order; NULL filters match everything.
SELECT * FROM task t
WHERE t.topic = sqlc.arg(topic) AND t.sequence > sqlc.arg(cursor)::bigint
  AND (sqlc.narg('state')::smallint IS NULL OR t.state = sqlc.narg('state'))
  AND (sqlc.narg('identifier')::text IS NULL OR t.identifier = sqlc.narg('identifier'))
  AND (sqlc.narg('reference')::text IS NULL OR t.reference = sqlc.narg('reference'))
ORDER BY t.sequence
LIMIT sqlc.arg(size);

-- name: TaskPageBackward :many
-- Tasks before the exclusive cursor, newest first; NULL filters match everything.
SELECT * FROM task t
WHERE t.topic = sqlc.arg(topic) AND t.sequence < sqlc.arg(cursor)::bigint
  AND (sqlc.narg('state')::smallint IS NULL OR t.state = sqlc.narg('state'))
  AND (sqlc.narg('identifier')::text IS NULL OR t.identifier = sqlc.narg('identifier'))
  AND (sqlc.narg('reference')::text IS NULL OR t.reference = sqlc.narg('reference'))
ORDER BY t.sequence DESC
LIMIT sqlc.arg(size);

-- name: TaskCountTotal :many
-- Per registered topic (all, or only topic) and state: how many tasks match and the
-- highest sequence among them. A topic without matches yields one row with state -1.
SELECT tt.topic, COALESCE(c.state, -1)::smallint AS state, COALESCE(c.count, 0)::bigint AS count, COALESCE(c.highest, 0)::bigint AS highest
FROM task_topic tt
LEFT JOIN LATERAL (
    SELECT t.state, count(*) AS count, max(t.sequence) AS highest
    FROM task t
    WHERE t.topic = tt.topic
      -- for one topic, its name as a value: a custom plan then reads the topic's table only
      AND (sqlc.narg('topic')::text IS NULL OR t.topic = sqlc.narg('topic'))
      AND t.sequence BETWEEN sqlc.arg(from_sequence)::bigint AND sqlc.arg(to_sequence)::bigint
      AND (sqlc.narg('state')::smallint IS NULL OR t.state = sqlc.narg('state'))
      AND (sqlc.narg('identifier')::text IS NULL OR t.identifier = sqlc.narg('identifier'))
      AND (sqlc.narg('reference')::text IS NULL OR t.reference = sqlc.narg('reference'))
    GROUP BY t.state
) c ON true
WHERE sqlc.narg('topic')::text IS NULL OR tt.topic = sqlc.narg('topic')
ORDER BY tt.topic, c.state;

-- name: TaskCountRecent :many
-- As TaskCountTotal, but only the latest task (highest sequence) of each identifier
-- counts; the state filter applies after choosing it.
SELECT tt.topic, COALESCE(c.state, -1)::smallint AS state, COALESCE(c.count, 0)::bigint AS count, COALESCE(c.highest, 0)::bigint AS highest
FROM task_topic tt
LEFT JOIN LATERAL (
    SELECT r.state, count(*) AS count, max(r.sequence) AS highest
    FROM (
        SELECT DISTINCT ON (t.identifier) t.state, t.sequence
        FROM task t
        WHERE t.topic = tt.topic
          AND (sqlc.narg('topic')::text IS NULL OR t.topic = sqlc.narg('topic'))
          AND t.sequence BETWEEN sqlc.arg(from_sequence)::bigint AND sqlc.arg(to_sequence)::bigint
          AND (sqlc.narg('identifier')::text IS NULL OR t.identifier = sqlc.narg('identifier'))
          AND (sqlc.narg('reference')::text IS NULL OR t.reference = sqlc.narg('reference'))
        ORDER BY t.identifier, t.sequence DESC
    ) r
    WHERE sqlc.narg('state')::smallint IS NULL OR r.state = sqlc.narg('state')
    GROUP BY r.state
) c ON true
WHERE sqlc.narg('topic')::text IS NULL OR tt.topic = sqlc.narg('topic')
ORDER BY tt.topic, c.state;

-- name: TaskResults :many
-- Completed tasks per topic and result (state - 3) with completion time in [from, to].
SELECT t.topic, (t.state - 3)::smallint AS result, count(*)::bigint AS count
FROM task t
WHERE t.state BETWEEN 3 AND 6 AND t.completed BETWEEN sqlc.arg(from_time)::timestamptz AND sqlc.arg(to_time)::timestamptz
GROUP BY t.topic, t.state
ORDER BY t.topic, t.state;

-- name: TaskResolveFollowing :one
-- The first sequence created at or after the time; MaxInt64 when none.
SELECT COALESCE(min(t.sequence), 9223372036854775807)::bigint AS sequence
FROM task t WHERE t.created >= sqlc.arg(at)::timestamptz;

-- name: TaskResolvePreceding :one
-- The last sequence created at or before the time; 0 when none.
SELECT COALESCE(max(t.sequence), 0)::bigint AS sequence
FROM task t WHERE t.created <= sqlc.arg(at)::timestamptz;

-- name: TaskPurge :execrows
-- Deletes finished tasks in the sequence range: of state when given (FAILED..REDUNDANT),
-- else every state from FAILED to REDUNDANT. ACTIVE, READY and EXPIRED rows never go.
DELETE FROM task t
WHERE hashtext(t.topic) = hashtext(sqlc.arg(topic)) AND t.topic = sqlc.arg(topic)
  AND t.sequence BETWEEN sqlc.arg(from_sequence)::bigint AND sqlc.arg(to_sequence)::bigint
  AND t.state >= 3
  AND (sqlc.narg('state')::smallint IS NULL OR t.state = sqlc.narg('state'));

-- name: TaskPurgeRetention :execrows
-- Deletes up to size finished tasks whose completion is older than their topic's
-- retention; topics without retention keep everything. Each topic with a retention
-- reads its own finished tasks (task_identifier), not its table's.
DELETE FROM task t
USING (
    SELECT f.topic, f.sequence
    FROM task_topic tt
    CROSS JOIN LATERAL (
        SELECT f.topic, f.sequence FROM task f
        WHERE hashtext(f.topic) = hashtext(tt.topic) AND f.topic = tt.topic AND f.state >= 3
          AND COALESCE(f.completed, f.created) < now() - tt.retention_ms * interval '1 millisecond'
        LIMIT sqlc.arg(size)
    ) f
    WHERE tt.retention_ms IS NOT NULL
    LIMIT sqlc.arg(size)
) old
WHERE t.topic = old.topic AND t.sequence = old.sequence;

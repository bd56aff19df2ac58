-- name: TaskGet :one
SELECT * FROM task WHERE topic = sqlc.arg(topic) AND sequence = sqlc.arg(sequence);

-- name: TaskGetMany :many
-- The tasks of a topic with the given sequences (primary key lookups), by sequence;
-- unknown sequences are left out.
SELECT * FROM task WHERE topic = sqlc.arg(topic) AND sequence = ANY(sqlc.arg(sequences)::bigint[])
ORDER BY sequence;

-- name: TaskPageForward :many
-- Tasks after the exclusive cursor, in sequence order; NULL filters match everything.
SELECT * FROM task t
WHERE t.topic = sqlc.arg(topic) AND t.sequence > sqlc.arg(cursor)::bigint AND t.sequence > sqlc.arg(floor)::bigint AND t.sequence < sqlc.arg(ceiling)::bigint
  AND (sqlc.narg('state')::smallint IS NULL OR t.state = sqlc.narg('state'))
  AND (sqlc.narg('identifier')::text IS NULL OR t.identifier = sqlc.narg('identifier'))
  AND (sqlc.narg('reference')::text IS NULL OR t.reference = sqlc.narg('reference'))
ORDER BY t.sequence
LIMIT sqlc.arg(size);

-- name: TaskPageBackward :many
-- Tasks before the exclusive cursor, newest first; NULL filters match everything.
SELECT * FROM task t
WHERE t.topic = sqlc.arg(topic) AND t.sequence < sqlc.arg(cursor)::bigint AND t.sequence > sqlc.arg(floor)::bigint AND t.sequence < sqlc.arg(ceiling)::bigint
  AND (sqlc.narg('state')::smallint IS NULL OR t.state = sqlc.narg('state'))
  AND (sqlc.narg('identifier')::text IS NULL OR t.identifier = sqlc.narg('identifier'))
  AND (sqlc.narg('reference')::text IS NULL OR t.reference = sqlc.narg('reference'))
ORDER BY t.sequence DESC
LIMIT sqlc.arg(size);

-- name: TaskExcerptForward :many
-- TaskPageForward for a listing, with the long texts cut so that a page's size does not
-- grow with them: input and output to their first @length characters (substr reads
-- only that prefix of a compressed or out-of-line value), errors to the last
-- @error_count, each cut likewise. input_bytes and output_bytes are the whole lengths
-- (octet_length reads no value); errors_cut says whether the errors were cut.
SELECT t.topic, t.sequence, t.identifier, t.state, t.descent, t.owner, t.created, t.completed,
       COALESCE(substr(t.input, 1, sqlc.arg(length)::integer), '')::text AS input,
       COALESCE(octet_length(t.input), 0)::bigint AS input_bytes,
       COALESCE(substr(t.output, 1, sqlc.arg(length)::integer), '')::text AS output,
       COALESCE(octet_length(t.output), 0)::bigint AS output_bytes,
       t.reference, t.priority, t.not_before, t.attempt, t.returned,
       ARRAY(SELECT substr(e.text, 1, sqlc.arg(length)::integer)
             FROM unnest(t.errors) WITH ORDINALITY AS e(text, n)
             WHERE e.n > cardinality(t.errors) - sqlc.arg(error_count)::integer
             ORDER BY e.n)::text[] AS errors,
       (COALESCE(cardinality(t.errors), 0) > sqlc.arg(error_count)::integer
        OR EXISTS (SELECT FROM unnest(t.errors) AS e(text) WHERE char_length(e.text) > sqlc.arg(length)::integer))::boolean AS errors_cut,
       t.cancelled, t.concurrency_key
FROM task t
WHERE t.topic = sqlc.arg(topic) AND t.sequence > sqlc.arg(cursor)::bigint AND t.sequence > sqlc.arg(floor)::bigint AND t.sequence < sqlc.arg(ceiling)::bigint
  AND (sqlc.narg('state')::smallint IS NULL OR t.state = sqlc.narg('state'))
  AND (sqlc.narg('identifier')::text IS NULL OR t.identifier = sqlc.narg('identifier'))
  AND (sqlc.narg('reference')::text IS NULL OR t.reference = sqlc.narg('reference'))
ORDER BY t.sequence
LIMIT sqlc.arg(size);

-- name: TaskExcerptBackward :many
-- TaskExcerptForward before the exclusive cursor, newest first.
SELECT t.topic, t.sequence, t.identifier, t.state, t.descent, t.owner, t.created, t.completed,
       COALESCE(substr(t.input, 1, sqlc.arg(length)::integer), '')::text AS input,
       COALESCE(octet_length(t.input), 0)::bigint AS input_bytes,
       COALESCE(substr(t.output, 1, sqlc.arg(length)::integer), '')::text AS output,
       COALESCE(octet_length(t.output), 0)::bigint AS output_bytes,
       t.reference, t.priority, t.not_before, t.attempt, t.returned,
       ARRAY(SELECT substr(e.text, 1, sqlc.arg(length)::integer)
             FROM unnest(t.errors) WITH ORDINALITY AS e(text, n)
             WHERE e.n > cardinality(t.errors) - sqlc.arg(error_count)::integer
             ORDER BY e.n)::text[] AS errors,
       (COALESCE(cardinality(t.errors), 0) > sqlc.arg(error_count)::integer
        OR EXISTS (SELECT FROM unnest(t.errors) AS e(text) WHERE char_length(e.text) > sqlc.arg(length)::integer))::boolean AS errors_cut,
       t.cancelled, t.concurrency_key
FROM task t
WHERE t.topic = sqlc.arg(topic) AND t.sequence < sqlc.arg(cursor)::bigint AND t.sequence > sqlc.arg(floor)::bigint AND t.sequence < sqlc.arg(ceiling)::bigint
  AND (sqlc.narg('state')::smallint IS NULL OR t.state = sqlc.narg('state'))
  AND (sqlc.narg('identifier')::text IS NULL OR t.identifier = sqlc.narg('identifier'))
  AND (sqlc.narg('reference')::text IS NULL OR t.reference = sqlc.narg('reference'))
ORDER BY t.sequence DESC
LIMIT sqlc.arg(size);

-- name: TaskTopicSequences :many
-- The sequences of at most @size of the topic's tasks, in no order: read through the
-- indexes keyed by the topic's hash that hold every task between them, each once (READY
-- in task_ready, ACTIVE and EXPIRED in task_open, FAILED to REDUNDANT in
-- task_retention), so that the cost follows the topic's tasks, never its table's
-- others, and stops at @size whatever the topic's size. Fewer than @size are all the
-- topic's tasks: a page of a topic with few tasks among many of other topics sorts
-- them instead of walking the table's primary key (Repository.Excerpts). No bound on
-- the sequence: none of these indexes is ordered by it, so a bound would be a filter
-- read on every entry of the topic (a large topic's last page read them all), and a
-- generic plan ANDed it with a range of the primary key, the walk through every
-- other topic's tasks this avoids.
SELECT s.sequence FROM (
    SELECT r.sequence FROM task r
    WHERE r.state = 1 AND hashtext(r.topic) = hashtext(sqlc.arg(topic)) AND r.topic = sqlc.arg(topic)
    UNION ALL
    SELECT o.sequence FROM task o
    WHERE o.state IN (0, 2) AND hashtext(o.topic) = hashtext(sqlc.arg(topic)) AND o.topic = sqlc.arg(topic)
    UNION ALL
    SELECT f.sequence FROM task f
    WHERE f.state >= 3 AND hashtext(f.topic) = hashtext(sqlc.arg(topic)) AND f.topic = sqlc.arg(topic)
    LIMIT sqlc.arg(size)
) s;

-- name: TaskPageAt :many
-- The first @size of the tasks of the topic with these sequences (all columns) that are
-- in @state when it is not NULL, in sequence order, or newest first with @newest.
SELECT * FROM task t
WHERE t.topic = sqlc.arg(topic) AND t.sequence = ANY(sqlc.arg(sequences)::bigint[])
  AND (sqlc.narg('state')::smallint IS NULL OR t.state = sqlc.narg('state'))
ORDER BY CASE WHEN sqlc.arg(newest)::boolean THEN -t.sequence ELSE t.sequence END
LIMIT sqlc.arg(size);

-- name: TaskExcerptAt :many
-- TaskPageAt with the columns of TaskExcerptForward.
SELECT t.topic, t.sequence, t.identifier, t.state, t.descent, t.owner, t.created, t.completed,
       COALESCE(substr(t.input, 1, sqlc.arg(length)::integer), '')::text AS input,
       COALESCE(octet_length(t.input), 0)::bigint AS input_bytes,
       COALESCE(substr(t.output, 1, sqlc.arg(length)::integer), '')::text AS output,
       COALESCE(octet_length(t.output), 0)::bigint AS output_bytes,
       t.reference, t.priority, t.not_before, t.attempt, t.returned,
       ARRAY(SELECT substr(e.text, 1, sqlc.arg(length)::integer)
             FROM unnest(t.errors) WITH ORDINALITY AS e(text, n)
             WHERE e.n > cardinality(t.errors) - sqlc.arg(error_count)::integer
             ORDER BY e.n)::text[] AS errors,
       (COALESCE(cardinality(t.errors), 0) > sqlc.arg(error_count)::integer
        OR EXISTS (SELECT FROM unnest(t.errors) AS e(text) WHERE char_length(e.text) > sqlc.arg(length)::integer))::boolean AS errors_cut,
       t.cancelled, t.concurrency_key
FROM task t
WHERE t.topic = sqlc.arg(topic) AND t.sequence = ANY(sqlc.arg(sequences)::bigint[])
  AND (sqlc.narg('state')::smallint IS NULL OR t.state = sqlc.narg('state'))
ORDER BY CASE WHEN sqlc.arg(newest)::boolean THEN -t.sequence ELSE t.sequence END
LIMIT sqlc.arg(size);

-- name: TaskCountTotal :many
-- Per registered topic (all, or only topic) and state: how many tasks match and the
-- highest sequence among them. A topic without matches yields one row with state -1.
-- A topic sharing its table is read through its own indexes, never the others' tasks
-- (a filter on the table read the whole shared table, once per topic of it); a
-- dedicated topic's own table is read filtered. A filter by reference has its own
-- statement (TaskCountTotalByReference).
SELECT tt.topic, COALESCE(c.state, -1)::smallint AS state, COALESCE(c.count, 0)::bigint AS count, COALESCE(c.highest, 0)::bigint AS highest
FROM task_topic tt
LEFT JOIN LATERAL (
    SELECT t.state, count(*) AS count, max(t.sequence) AS highest
    FROM (
            -- a dedicated topic's table holds its tasks alone: the table, filtered
            SELECT a.state, a.sequence, a.identifier, a.reference FROM task a
            WHERE tt.dedicated
              AND hashtext(a.topic) = hashtext(tt.topic) AND a.topic = tt.topic
              -- for one topic, its name as a value: a custom plan then reads the topic's table only
              AND (sqlc.narg('topic')::text IS NULL OR a.topic = sqlc.narg('topic'))
            UNION ALL
            -- a shared table: the topic's tasks through the indexes keyed by its hash, each
            -- task once (as TaskTopicSequences), with the filters each index can serve
            -- inside. OFFSET 0 keeps the range of sequences out: pushed in, it made the
            -- planner AND in another index's range, which holds every topic's tasks.
            SELECT s.state, s.sequence, s.identifier, s.reference FROM (
                SELECT r.state, r.sequence, r.identifier, r.reference FROM task r
                WHERE NOT tt.dedicated
                  AND r.state = 1 AND hashtext(r.topic) = hashtext(tt.topic) AND r.topic = tt.topic
                  AND (sqlc.narg('topic')::text IS NULL OR r.topic = sqlc.narg('topic'))
                  AND (sqlc.narg('state')::smallint IS NULL OR r.state = sqlc.narg('state'))
                  AND (sqlc.narg('identifier')::text IS NULL OR r.identifier = sqlc.narg('identifier'))
                UNION ALL
                SELECT o.state, o.sequence, o.identifier, o.reference FROM task o
                WHERE NOT tt.dedicated
                  AND o.state IN (0, 2) AND hashtext(o.topic) = hashtext(tt.topic) AND o.topic = tt.topic
                  AND (sqlc.narg('topic')::text IS NULL OR o.topic = sqlc.narg('topic'))
                  AND (sqlc.narg('state')::smallint IS NULL OR o.state = sqlc.narg('state'))
                  AND (sqlc.narg('identifier')::text IS NULL OR o.identifier = sqlc.narg('identifier'))
                UNION ALL
                SELECT f.state, f.sequence, f.identifier, f.reference FROM task f
                WHERE NOT tt.dedicated
                  AND f.state >= 3 AND hashtext(f.topic) = hashtext(tt.topic) AND f.topic = tt.topic
                  AND (sqlc.narg('topic')::text IS NULL OR f.topic = sqlc.narg('topic'))
                  AND (sqlc.narg('state')::smallint IS NULL OR f.state = sqlc.narg('state'))
                  AND (sqlc.narg('identifier')::text IS NULL OR f.identifier = sqlc.narg('identifier'))
                OFFSET 0
            ) s
    ) t
    WHERE t.sequence BETWEEN sqlc.arg(from_sequence)::bigint AND sqlc.arg(to_sequence)::bigint
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
    SELECT l.state, count(*) AS count, max(l.sequence) AS highest
    FROM (
        SELECT DISTINCT ON (t.identifier) t.state, t.sequence
        FROM (
            -- a dedicated topic's table holds its tasks alone: the table, filtered
            SELECT a.state, a.sequence, a.identifier, a.reference FROM task a
            WHERE tt.dedicated
              AND hashtext(a.topic) = hashtext(tt.topic) AND a.topic = tt.topic
              -- for one topic, its name as a value: a custom plan then reads the topic's table only
              AND (sqlc.narg('topic')::text IS NULL OR a.topic = sqlc.narg('topic'))
            UNION ALL
            -- a shared table: the topic's tasks through the indexes keyed by its hash, each
            -- task once (as TaskTopicSequences), with the filters each index can serve
            -- inside. OFFSET 0 keeps the range of sequences out: pushed in, it made the
            -- planner AND in another index's range, which holds every topic's tasks.
            SELECT s.state, s.sequence, s.identifier, s.reference FROM (
                SELECT r.state, r.sequence, r.identifier, r.reference FROM task r
                WHERE NOT tt.dedicated
                  AND r.state = 1 AND hashtext(r.topic) = hashtext(tt.topic) AND r.topic = tt.topic
                  AND (sqlc.narg('topic')::text IS NULL OR r.topic = sqlc.narg('topic'))
                  AND (sqlc.narg('identifier')::text IS NULL OR r.identifier = sqlc.narg('identifier'))
                UNION ALL
                SELECT o.state, o.sequence, o.identifier, o.reference FROM task o
                WHERE NOT tt.dedicated
                  AND o.state IN (0, 2) AND hashtext(o.topic) = hashtext(tt.topic) AND o.topic = tt.topic
                  AND (sqlc.narg('topic')::text IS NULL OR o.topic = sqlc.narg('topic'))
                  AND (sqlc.narg('identifier')::text IS NULL OR o.identifier = sqlc.narg('identifier'))
                UNION ALL
                SELECT f.state, f.sequence, f.identifier, f.reference FROM task f
                WHERE NOT tt.dedicated
                  AND f.state >= 3 AND hashtext(f.topic) = hashtext(tt.topic) AND f.topic = tt.topic
                  AND (sqlc.narg('topic')::text IS NULL OR f.topic = sqlc.narg('topic'))
                  AND (sqlc.narg('identifier')::text IS NULL OR f.identifier = sqlc.narg('identifier'))
                OFFSET 0
            ) s
        ) t
        WHERE t.sequence BETWEEN sqlc.arg(from_sequence)::bigint AND sqlc.arg(to_sequence)::bigint
          AND (sqlc.narg('identifier')::text IS NULL OR t.identifier = sqlc.narg('identifier'))
          AND (sqlc.narg('reference')::text IS NULL OR t.reference = sqlc.narg('reference'))
        ORDER BY t.identifier, t.sequence DESC
    ) l
    WHERE sqlc.narg('state')::smallint IS NULL OR l.state = sqlc.narg('state')
    GROUP BY l.state
) c ON true
WHERE sqlc.narg('topic')::text IS NULL OR tt.topic = sqlc.narg('topic')
ORDER BY tt.topic, c.state;

-- name: TaskCountTotalByReference :many
-- TaskCountTotal for a filter by reference: the table filtered, which the planner
-- reads through the index of references.
SELECT tt.topic, COALESCE(c.state, -1)::smallint AS state, COALESCE(c.count, 0)::bigint AS count, COALESCE(c.highest, 0)::bigint AS highest
FROM task_topic tt
LEFT JOIN LATERAL (
    SELECT t.state, count(*) AS count, max(t.sequence) AS highest
    FROM task t
    WHERE t.topic = tt.topic
      -- the topic's range of the indexes keyed by its hash, not every topic's of its table
      AND hashtext(t.topic) = hashtext(tt.topic)
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

-- name: TaskCountRecentByReference :many
-- TaskCountRecent for a filter by reference, as TaskCountTotalByReference.
SELECT tt.topic, COALESCE(c.state, -1)::smallint AS state, COALESCE(c.count, 0)::bigint AS count, COALESCE(c.highest, 0)::bigint AS highest
FROM task_topic tt
LEFT JOIN LATERAL (
    SELECT r.state, count(*) AS count, max(r.sequence) AS highest
    FROM (
        SELECT DISTINCT ON (t.identifier) t.state, t.sequence
        FROM task t
        WHERE t.topic = tt.topic
          -- the topic's range of the index of references, not every topic's of its table
          AND hashtext(t.topic) = hashtext(tt.topic)
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
-- Completed tasks per topic and result (state - 3) with completion time in [from, to]:
-- each topic's through task_retention (migration 000030), which orders its finished
-- tasks by completion, so that the statement reads the tasks of the window, not every
-- finished task.
SELECT tt.topic, (t.state - 3)::smallint AS result, count(*)::bigint AS count
FROM task_topic tt
JOIN task t ON hashtext(t.topic) = hashtext(tt.topic) AND t.topic = tt.topic
WHERE t.state >= 3 AND t.state <= 6
  AND COALESCE(t.completed, t.created) BETWEEN sqlc.arg(from_time)::timestamptz AND sqlc.arg(to_time)::timestamptz
  AND t.completed BETWEEN sqlc.arg(from_time)::timestamptz AND sqlc.arg(to_time)::timestamptz
GROUP BY tt.topic, t.state
ORDER BY tt.topic, t.state;

-- name: TaskResolveFollowing :one
-- The first sequence created at or after the time; MaxInt64 when none: a binary search
-- over the sequences (task_sequence_at, migration 000018), not a read of the tasks.
SELECT COALESCE(task_sequence_at(sqlc.arg(at)::timestamptz, false), 9223372036854775807)::bigint AS sequence;

-- name: TaskResolvePreceding :one
-- The last sequence created at or before the time; 0 when none: the task before the
-- first created after it (task_sequence_at), or the last task when none was.
-- (The bound is a scalar subquery, computed once, not once per table of task.)
SELECT COALESCE((SELECT t.sequence FROM task t
                 WHERE t.sequence < (SELECT COALESCE(task_sequence_at(sqlc.arg(at)::timestamptz, true),
                                                     9223372036854775807))
                 ORDER BY t.sequence DESC LIMIT 1), 0)::bigint AS sequence;

-- name: TaskPurge :execrows
-- Deletes finished tasks in the sequence range: of state when given (FAILED..REDUNDANT),
-- else every state from FAILED to REDUNDANT. ACTIVE, READY and EXPIRED rows never go.
-- One statement, whatever the number: what Purge runs inside the caller's transaction.
DELETE FROM task t
WHERE hashtext(t.topic) = hashtext(sqlc.arg(topic)) AND t.topic = sqlc.arg(topic)
  AND t.sequence BETWEEN sqlc.arg(from_sequence)::bigint AND sqlc.arg(to_sequence)::bigint
  AND t.state >= 3
  AND (sqlc.narg('state')::smallint IS NULL OR t.state = sqlc.narg('state'));

-- name: TaskPurgeSome :execrows
-- TaskPurge's tasks, at most size of them, in whatever order the plan reads them: what
-- Purge runs on a pool, statement after statement, until one deletes fewer than size.
-- Rows another transaction has locked (a revive, another purge) are passed over rather
-- than waited for; the rows counted against size are those locked here, their state
-- checked again once locked, all of them deleted. The tasks are chosen once, into an
-- array (a subquery joined to the DELETE would run again for each row deleted, each run
-- passing over the rows the statement has already deleted and taking the next ones).
DELETE FROM task t
WHERE t.topic = sqlc.arg(topic)
  AND t.sequence = ANY (ARRAY(
      SELECT f.sequence FROM task f
      WHERE hashtext(f.topic) = hashtext(sqlc.arg(topic)) AND f.topic = sqlc.arg(topic)
        AND f.sequence BETWEEN sqlc.arg(from_sequence)::bigint AND sqlc.arg(to_sequence)::bigint
        AND f.state >= 3
        AND (sqlc.narg('state')::smallint IS NULL OR f.state = sqlc.narg('state'))
      LIMIT sqlc.arg(size)::bigint
      FOR UPDATE OF f SKIP LOCKED));

-- name: TaskPurgeRetentionAfter :one
-- Deletes up to size finished tasks whose completion is older than their topic's
-- retention; topics without retention keep everything. Each topic with a retention
-- reads its own finished tasks older than its cutoff (task_retention, migration
-- 000030), not all of them. The topics are served in turn: those named after @after
-- first, in name order, then from the first; it returns how many tasks it deleted and
-- the topic to start after next (the last one it deleted from, in that order; empty
-- when none). Without the turn, a topic whose old tasks outnumbered a pass's batches
-- was served first at every pass, and the topics after it not until it was cleared.
-- The candidates are locked as they are found, SKIP LOCKED: a task a revival (a reset,
-- a reassign, a junction's release) or another pass holds is passed over, and a row
-- changed since the snapshot is checked again by its new version; the DELETE states
-- the state and the cutoff again all the same.
WITH old AS (
    SELECT f.topic, f.sequence, f.cutoff
    FROM (SELECT tt.topic, tt.retention_ms FROM task_topic tt
          WHERE tt.retention_ms IS NOT NULL
          ORDER BY tt.topic <= sqlc.arg(after)::text, tt.topic) tt
    CROSS JOIN LATERAL (
        SELECT f.topic, f.sequence, now() - tt.retention_ms * interval '1 millisecond' AS cutoff FROM task f
        WHERE hashtext(f.topic) = hashtext(tt.topic) AND f.topic = tt.topic AND f.state >= 3
          AND COALESCE(f.completed, f.created) < now() - tt.retention_ms * interval '1 millisecond'
        LIMIT sqlc.arg(size)
        -- passes over a task another transaction holds (a revival, another processor's
        -- pass taking the topics in its own turn): passes waiting for each other's rows
        -- in opposite orders deadlocked
        FOR UPDATE SKIP LOCKED
    ) f
    LIMIT sqlc.arg(size)
),
deleted AS (
    DELETE FROM task t
    USING old
    WHERE t.topic = old.topic AND t.sequence = old.sequence
      AND t.state >= 3 AND COALESCE(t.completed, t.created) < old.cutoff
    RETURNING t.topic
)
SELECT count(*)::bigint AS deleted,
       -- the last in the batch's order: of those up to @after once it came round to them
       COALESCE(max(d.topic) FILTER (WHERE d.topic <= sqlc.arg(after)::text), max(d.topic), '')::text AS last
FROM deleted d;

-- name: TaskPurgeRetentionDistributed :one
-- TaskPurgeRetentionAfter as a distributed database runs it (Citus runs no FOR UPDATE
-- in a statement over many shards, nor keeps the order of the topics): the candidates
-- are not locked, so that a task a revival holds is waited for and checked again by the
-- DELETE's own WHERE, and two passes may wait for each other (one fails, deadlocked,
-- and the next pass takes its tasks).
WITH old AS (
    SELECT f.topic, f.sequence, f.cutoff
    FROM (SELECT tt.topic, tt.retention_ms FROM task_topic tt
          WHERE tt.retention_ms IS NOT NULL
          ORDER BY tt.topic <= '', tt.topic) tt
    CROSS JOIN LATERAL (
        SELECT f.topic, f.sequence, now() - tt.retention_ms * interval '1 millisecond' AS cutoff FROM task f
        WHERE hashtext(f.topic) = hashtext(tt.topic) AND f.topic = tt.topic AND f.state >= 3
          AND COALESCE(f.completed, f.created) < now() - tt.retention_ms * interval '1 millisecond'
        LIMIT sqlc.arg(size)
    ) f
    LIMIT sqlc.arg(size)
),
deleted AS (
    DELETE FROM task t
    USING old
    WHERE t.topic = old.topic AND t.sequence = old.sequence
      AND t.state >= 3 AND COALESCE(t.completed, t.created) < old.cutoff
    RETURNING t.topic
)
SELECT count(*)::bigint AS deleted,
       -- the last in the batch's order: of those up to @after once it came round to them
       COALESCE(max(d.topic) FILTER (WHERE d.topic <= ''), max(d.topic), '')::text AS last
FROM deleted d;

-- name: TaskWaiting :one
-- What may hold a READY task back (Repository.Waiting): its topic's activation and
-- limits, the topic's ACTIVE tasks (counted up to 100 000), those of the task's
-- concurrency key, and the due READY tasks polled before it (by priority and sequence,
-- through task_ready: among the first 20 000 READY tasks before it, ahead_read of them
-- read, so that delayed tasks ahead, which each cost a read of the table to tell from
-- due ones, do not make it read a backlog of millions). No row for an unknown task. Every
-- table, the subqueries' and the join's, names the topic by the argument, not another
-- table's column, so that a planner (Citus's too) can tell they read one topic: on Citus
-- a join on task_topic's column was refused ("complex joins", 0A000). A task with a concurrency key ('' included: a keyed
-- topic's push stores it for none, and it takes its turn as a key does) in a topic
-- polled by key (fair, or a per-key limit: its keys take turns, priorities still first)
-- has ahead of it the due READY tasks of a higher priority and those of its key before
-- it, not every task before it (keyed; task_ready_key reads its key's).
SELECT t.state, t.not_before, t.concurrency_key, tt.active AS topic_active,
    tt.concurrency, tt.key_concurrency, tt.rate, tt.rate_period_ms, tt.rate_burst,
    k.keyed,
    (SELECT count(*) FROM (SELECT 1 FROM task a
                           WHERE a.state = 0 AND hashtext(a.topic) = hashtext(sqlc.arg(topic)) AND a.topic = sqlc.arg(topic)
                           LIMIT 100000) x)::bigint AS active,
    (SELECT count(*) FROM task a
     WHERE a.state = 0 AND hashtext(a.topic) = hashtext(sqlc.arg(topic)) AND a.topic = sqlc.arg(topic)
       AND a.concurrency_key = t.concurrency_key)::bigint AS key_active,
    ah.ahead::bigint AS ahead, ah.ahead_read::bigint AS ahead_read,
    coalesce((SELECT least(tt.rate_burst::double precision,
                  l.tokens + greatest(extract(epoch FROM clock_timestamp() - l.counted), 0) * 1000 * tt.rate / tt.rate_period_ms)
     FROM task_topic_limit l WHERE l.topic = sqlc.arg(topic) AND tt.rate IS NOT NULL), -1)::double precision AS tokens
FROM task t JOIN task_topic tt ON tt.topic = t.topic AND tt.topic = sqlc.arg(topic)
CROSS JOIN LATERAL (SELECT (t.concurrency_key IS NOT NULL AND (tt.fair OR tt.key_concurrency IS NOT NULL))::boolean AS keyed) k
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE y.due) AS ahead, count(*) AS ahead_read
    FROM ((SELECT a.not_before IS NULL OR a.not_before <= now() AS due FROM task a
           WHERE a.state = 1 AND hashtext(a.topic) = hashtext(sqlc.arg(topic)) AND a.topic = sqlc.arg(topic)
             AND (a.priority, a.sequence) < (t.priority, t.sequence)
             AND NOT k.keyed
           ORDER BY a.priority, a.sequence
           LIMIT 20000)
          UNION ALL
          (SELECT a.not_before IS NULL OR a.not_before <= now() FROM task a
           WHERE a.state = 1 AND hashtext(a.topic) = hashtext(sqlc.arg(topic)) AND a.topic = sqlc.arg(topic)
             AND a.priority < t.priority
             AND k.keyed
           ORDER BY a.priority, a.sequence
           LIMIT 20000)
          UNION ALL
          (SELECT a.not_before IS NULL OR a.not_before <= now() FROM task a
           WHERE a.state = 1 AND hashtext(a.topic) = hashtext(sqlc.arg(topic)) AND a.topic = sqlc.arg(topic)
             AND a.priority = t.priority AND a.concurrency_key = t.concurrency_key AND a.sequence < t.sequence
             AND k.keyed
           ORDER BY a.sequence
           LIMIT 20000)
          LIMIT 20000) y
) ah
WHERE t.topic = sqlc.arg(topic) AND t.sequence = sqlc.arg(sequence);

-- name: TaskLatest :many
-- The latest @size tasks of the topic before the exclusive cursor @before, newest first,
-- that match the filters (state, identifier, reference; NULL matches everything), with
-- the columns of TaskExcerptForward, their sequences read through the index that fits
-- the filter @path picks (Repository.Latest): 1, ACTIVE, through task_open; 5, EXPIRED,
-- FAILED or SUSPENDED, through task_attention (000052); 2, READY, through task_ready; 3, an identifier, in four parts
-- (ACTIVE through task_open, READY through task_ready_identifier, EXPIRED to RECREATED
-- through task_identifier, REDUNDANT through task_identifier_redundant); 4, a reference,
-- through task_reference. Each part is gated by its path (a one-time filter: the others
-- never run), and its literal states let the planner prove a partial index's predicate
-- even in a generic plan; so the cost follows the tasks that match, never the topic's
-- others (a page filtered this way walks the topic's sequences instead).
WITH RECURSIVE
-- path 2 reads READY one priority at a time (task_ready holds them by priority, then
-- sequence): the priorities of the READY tasks, one index descent each, then each
-- one's first tasks in the page's order, then the first of all those. The cost follows
-- the priorities and the page, not the READY backlog, which a read in sequence order
-- through task_ready read whole and sorted at every page (TestIdentifierLookupsUseIndexes).
prio AS (
    (SELECT r.priority FROM task r
     WHERE sqlc.arg(path)::smallint = 2 AND r.state = 1 AND hashtext(r.topic) = hashtext(sqlc.arg(topic)) AND r.topic = sqlc.arg(topic)
     ORDER BY r.priority LIMIT 1)
    UNION ALL
    SELECT (SELECT r.priority FROM task r
            WHERE r.state = 1 AND hashtext(r.topic) = hashtext(sqlc.arg(topic)) AND r.topic = sqlc.arg(topic) AND r.priority > p.priority
            ORDER BY r.priority LIMIT 1)
    FROM prio p WHERE p.priority IS NOT NULL
),
latest AS (
    (SELECT o.sequence FROM task o
     WHERE sqlc.arg(path)::smallint = 1 AND o.state = 0 AND o.state = sqlc.narg('state')
       AND hashtext(o.topic) = hashtext(sqlc.arg(topic)) AND o.topic = sqlc.arg(topic)
       AND o.sequence < sqlc.arg(before)::bigint
       AND (sqlc.narg('identifier')::text IS NULL OR o.identifier = sqlc.narg('identifier'))
       AND (sqlc.narg('reference')::text IS NULL OR o.reference = sqlc.narg('reference'))
     ORDER BY o.sequence DESC LIMIT sqlc.arg(size))
    UNION ALL
    (SELECT x.sequence FROM task x
     WHERE sqlc.arg(path)::smallint = 5 AND x.state BETWEEN 2 AND 4 AND x.state = sqlc.narg('state')
       AND hashtext(x.topic) = hashtext(sqlc.arg(topic)) AND x.topic = sqlc.arg(topic)
       AND x.sequence < sqlc.arg(before)::bigint
       AND (sqlc.narg('identifier')::text IS NULL OR x.identifier = sqlc.narg('identifier'))
       AND (sqlc.narg('reference')::text IS NULL OR x.reference = sqlc.narg('reference'))
     ORDER BY x.sequence DESC LIMIT sqlc.arg(size))
    UNION ALL
    (SELECT q.sequence FROM (
        SELECT f.sequence FROM prio p
        CROSS JOIN LATERAL (
            SELECT r.sequence FROM task r
            WHERE r.state = 1 AND hashtext(r.topic) = hashtext(sqlc.arg(topic)) AND r.topic = sqlc.arg(topic) AND r.priority = p.priority
              AND r.sequence < sqlc.arg(before)::bigint
              AND (sqlc.narg('identifier')::text IS NULL OR r.identifier = sqlc.narg('identifier'))
              AND (sqlc.narg('reference')::text IS NULL OR r.reference = sqlc.narg('reference'))
            ORDER BY r.sequence DESC LIMIT sqlc.arg(size)) f
        WHERE p.priority IS NOT NULL
     ) q
     ORDER BY q.sequence DESC LIMIT sqlc.arg(size))
    UNION ALL
    (SELECT a.sequence FROM task a
     WHERE sqlc.arg(path)::smallint = 3 AND a.state = 0 AND hashtext(a.topic) = hashtext(sqlc.arg(topic)) AND a.topic = sqlc.arg(topic)
       AND a.identifier = sqlc.narg('identifier')
       AND a.sequence < sqlc.arg(before)::bigint
       AND (sqlc.narg('state')::smallint IS NULL OR a.state = sqlc.narg('state'))
       AND (sqlc.narg('reference')::text IS NULL OR a.reference = sqlc.narg('reference'))
     ORDER BY a.sequence DESC LIMIT sqlc.arg(size))
    UNION ALL
    (SELECT i.sequence FROM task i
     WHERE sqlc.arg(path)::smallint = 3 AND i.state = 1 AND i.topic = sqlc.arg(topic) AND i.identifier = sqlc.narg('identifier')
       AND (i.topic || E'\n' || i.identifier) = (sqlc.arg(topic) || E'\n' || sqlc.narg('identifier'))
       AND i.sequence < sqlc.arg(before)::bigint
       AND (sqlc.narg('state')::smallint IS NULL OR i.state = sqlc.narg('state'))
       AND (sqlc.narg('reference')::text IS NULL OR i.reference = sqlc.narg('reference'))
     ORDER BY i.sequence DESC LIMIT sqlc.arg(size))
    UNION ALL
    (SELECT s.sequence FROM task s
     WHERE sqlc.arg(path)::smallint = 3 AND s.state BETWEEN 2 AND 7 AND hashtext(s.topic) = hashtext(sqlc.arg(topic)) AND s.topic = sqlc.arg(topic)
       AND s.identifier = sqlc.narg('identifier')
       AND s.sequence < sqlc.arg(before)::bigint
       AND (sqlc.narg('state')::smallint IS NULL OR s.state = sqlc.narg('state'))
       AND (sqlc.narg('reference')::text IS NULL OR s.reference = sqlc.narg('reference'))
     ORDER BY s.sequence DESC LIMIT sqlc.arg(size))
    UNION ALL
    (SELECT e.sequence FROM task e
     WHERE sqlc.arg(path)::smallint = 3 AND e.state = 8 AND e.topic = sqlc.arg(topic) AND e.identifier = sqlc.narg('identifier')
       AND hashtext(e.topic || E'\n' || e.identifier) = hashtext(sqlc.arg(topic) || E'\n' || sqlc.narg('identifier'))
       AND e.sequence < sqlc.arg(before)::bigint
       AND (sqlc.narg('state')::smallint IS NULL OR e.state = sqlc.narg('state'))
       AND (sqlc.narg('reference')::text IS NULL OR e.reference = sqlc.narg('reference'))
     ORDER BY e.sequence DESC LIMIT sqlc.arg(size))
    UNION ALL
    (SELECT f.sequence FROM task f
     WHERE sqlc.arg(path)::smallint = 4 AND hashtext(f.topic) = hashtext(sqlc.arg(topic)) AND f.topic = sqlc.arg(topic) AND f.reference = sqlc.narg('reference')
       AND f.sequence < sqlc.arg(before)::bigint
       AND (sqlc.narg('state')::smallint IS NULL OR f.state = sqlc.narg('state'))
       AND (sqlc.narg('identifier')::text IS NULL OR f.identifier = sqlc.narg('identifier'))
     ORDER BY f.sequence DESC LIMIT sqlc.arg(size))
)
SELECT t.topic, t.sequence, t.identifier, t.state, t.descent, t.owner, t.created, t.completed,
       COALESCE(substr(t.input, 1, sqlc.arg(length)::integer), '')::text AS input,
       COALESCE(octet_length(t.input), 0)::bigint AS input_bytes,
       COALESCE(substr(t.output, 1, sqlc.arg(length)::integer), '')::text AS output,
       COALESCE(octet_length(t.output), 0)::bigint AS output_bytes,
       t.reference, t.priority, t.not_before, t.attempt, t.returned,
       ARRAY(SELECT substr(e.text, 1, sqlc.arg(length)::integer)
             FROM unnest(t.errors) WITH ORDINALITY AS e(text, n)
             WHERE e.n > cardinality(t.errors) - sqlc.arg(error_count)::integer
             ORDER BY e.n)::text[] AS errors,
       (COALESCE(cardinality(t.errors), 0) > sqlc.arg(error_count)::integer
        OR EXISTS (SELECT FROM unnest(t.errors) AS e(text) WHERE char_length(e.text) > sqlc.arg(length)::integer))::boolean AS errors_cut,
       t.cancelled, t.concurrency_key
FROM latest l
JOIN task t ON t.sequence = l.sequence AND t.topic = sqlc.arg(topic)
ORDER BY t.sequence DESC
LIMIT sqlc.arg(size);

-- name: TaskEarliest :many
-- TaskLatest the other way: the first @size tasks of the topic after the exclusive
-- cursor @after, oldest first, through the same paths and indexes.
WITH RECURSIVE
-- path 2 reads READY one priority at a time (task_ready holds them by priority, then
-- sequence): the priorities of the READY tasks, one index descent each, then each
-- one's first tasks in the page's order, then the first of all those. The cost follows
-- the priorities and the page, not the READY backlog, which a read in sequence order
-- through task_ready read whole and sorted at every page (TestIdentifierLookupsUseIndexes).
prio AS (
    (SELECT r.priority FROM task r
     WHERE sqlc.arg(path)::smallint = 2 AND r.state = 1 AND hashtext(r.topic) = hashtext(sqlc.arg(topic)) AND r.topic = sqlc.arg(topic)
     ORDER BY r.priority LIMIT 1)
    UNION ALL
    SELECT (SELECT r.priority FROM task r
            WHERE r.state = 1 AND hashtext(r.topic) = hashtext(sqlc.arg(topic)) AND r.topic = sqlc.arg(topic) AND r.priority > p.priority
            ORDER BY r.priority LIMIT 1)
    FROM prio p WHERE p.priority IS NOT NULL
),
earliest AS (
    (SELECT o.sequence FROM task o
     WHERE sqlc.arg(path)::smallint = 1 AND o.state = 0 AND o.state = sqlc.narg('state')
       AND hashtext(o.topic) = hashtext(sqlc.arg(topic)) AND o.topic = sqlc.arg(topic)
       AND o.sequence > sqlc.arg(after)::bigint
       AND (sqlc.narg('identifier')::text IS NULL OR o.identifier = sqlc.narg('identifier'))
       AND (sqlc.narg('reference')::text IS NULL OR o.reference = sqlc.narg('reference'))
     ORDER BY o.sequence LIMIT sqlc.arg(size))
    UNION ALL
    (SELECT x.sequence FROM task x
     WHERE sqlc.arg(path)::smallint = 5 AND x.state BETWEEN 2 AND 4 AND x.state = sqlc.narg('state')
       AND hashtext(x.topic) = hashtext(sqlc.arg(topic)) AND x.topic = sqlc.arg(topic)
       AND x.sequence > sqlc.arg(after)::bigint
       AND (sqlc.narg('identifier')::text IS NULL OR x.identifier = sqlc.narg('identifier'))
       AND (sqlc.narg('reference')::text IS NULL OR x.reference = sqlc.narg('reference'))
     ORDER BY x.sequence LIMIT sqlc.arg(size))
    UNION ALL
    (SELECT q.sequence FROM (
        SELECT f.sequence FROM prio p
        CROSS JOIN LATERAL (
            SELECT r.sequence FROM task r
            WHERE r.state = 1 AND hashtext(r.topic) = hashtext(sqlc.arg(topic)) AND r.topic = sqlc.arg(topic) AND r.priority = p.priority
              AND r.sequence > sqlc.arg(after)::bigint
              AND (sqlc.narg('identifier')::text IS NULL OR r.identifier = sqlc.narg('identifier'))
              AND (sqlc.narg('reference')::text IS NULL OR r.reference = sqlc.narg('reference'))
            ORDER BY r.sequence LIMIT sqlc.arg(size)) f
        WHERE p.priority IS NOT NULL
     ) q
     ORDER BY q.sequence LIMIT sqlc.arg(size))
    UNION ALL
    (SELECT a.sequence FROM task a
     WHERE sqlc.arg(path)::smallint = 3 AND a.state = 0 AND hashtext(a.topic) = hashtext(sqlc.arg(topic)) AND a.topic = sqlc.arg(topic)
       AND a.identifier = sqlc.narg('identifier')
       AND a.sequence > sqlc.arg(after)::bigint
       AND (sqlc.narg('state')::smallint IS NULL OR a.state = sqlc.narg('state'))
       AND (sqlc.narg('reference')::text IS NULL OR a.reference = sqlc.narg('reference'))
     ORDER BY a.sequence LIMIT sqlc.arg(size))
    UNION ALL
    (SELECT i.sequence FROM task i
     WHERE sqlc.arg(path)::smallint = 3 AND i.state = 1 AND i.topic = sqlc.arg(topic) AND i.identifier = sqlc.narg('identifier')
       AND (i.topic || E'\n' || i.identifier) = (sqlc.arg(topic) || E'\n' || sqlc.narg('identifier'))
       AND i.sequence > sqlc.arg(after)::bigint
       AND (sqlc.narg('state')::smallint IS NULL OR i.state = sqlc.narg('state'))
       AND (sqlc.narg('reference')::text IS NULL OR i.reference = sqlc.narg('reference'))
     ORDER BY i.sequence LIMIT sqlc.arg(size))
    UNION ALL
    (SELECT s.sequence FROM task s
     WHERE sqlc.arg(path)::smallint = 3 AND s.state BETWEEN 2 AND 7 AND hashtext(s.topic) = hashtext(sqlc.arg(topic)) AND s.topic = sqlc.arg(topic)
       AND s.identifier = sqlc.narg('identifier')
       AND s.sequence > sqlc.arg(after)::bigint
       AND (sqlc.narg('state')::smallint IS NULL OR s.state = sqlc.narg('state'))
       AND (sqlc.narg('reference')::text IS NULL OR s.reference = sqlc.narg('reference'))
     ORDER BY s.sequence LIMIT sqlc.arg(size))
    UNION ALL
    (SELECT e.sequence FROM task e
     WHERE sqlc.arg(path)::smallint = 3 AND e.state = 8 AND e.topic = sqlc.arg(topic) AND e.identifier = sqlc.narg('identifier')
       AND hashtext(e.topic || E'\n' || e.identifier) = hashtext(sqlc.arg(topic) || E'\n' || sqlc.narg('identifier'))
       AND e.sequence > sqlc.arg(after)::bigint
       AND (sqlc.narg('state')::smallint IS NULL OR e.state = sqlc.narg('state'))
       AND (sqlc.narg('reference')::text IS NULL OR e.reference = sqlc.narg('reference'))
     ORDER BY e.sequence LIMIT sqlc.arg(size))
    UNION ALL
    (SELECT f.sequence FROM task f
     WHERE sqlc.arg(path)::smallint = 4 AND hashtext(f.topic) = hashtext(sqlc.arg(topic)) AND f.topic = sqlc.arg(topic) AND f.reference = sqlc.narg('reference')
       AND f.sequence > sqlc.arg(after)::bigint
       AND (sqlc.narg('state')::smallint IS NULL OR f.state = sqlc.narg('state'))
       AND (sqlc.narg('identifier')::text IS NULL OR f.identifier = sqlc.narg('identifier'))
     ORDER BY f.sequence LIMIT sqlc.arg(size))
)
SELECT t.topic, t.sequence, t.identifier, t.state, t.descent, t.owner, t.created, t.completed,
       COALESCE(substr(t.input, 1, sqlc.arg(length)::integer), '')::text AS input,
       COALESCE(octet_length(t.input), 0)::bigint AS input_bytes,
       COALESCE(substr(t.output, 1, sqlc.arg(length)::integer), '')::text AS output,
       COALESCE(octet_length(t.output), 0)::bigint AS output_bytes,
       t.reference, t.priority, t.not_before, t.attempt, t.returned,
       ARRAY(SELECT substr(e.text, 1, sqlc.arg(length)::integer)
             FROM unnest(t.errors) WITH ORDINALITY AS e(text, n)
             WHERE e.n > cardinality(t.errors) - sqlc.arg(error_count)::integer
             ORDER BY e.n)::text[] AS errors,
       (COALESCE(cardinality(t.errors), 0) > sqlc.arg(error_count)::integer
        OR EXISTS (SELECT FROM unnest(t.errors) AS e(text) WHERE char_length(e.text) > sqlc.arg(length)::integer))::boolean AS errors_cut,
       t.cancelled, t.concurrency_key
FROM earliest l
JOIN task t ON t.sequence = l.sequence AND t.topic = sqlc.arg(topic)
ORDER BY t.sequence
LIMIT sqlc.arg(size);

-- name: TaskLastSequence :one
-- The highest sequence taken so far, by any topic (its task may be uncommitted, or gone).
SELECT COALESCE(pg_sequence_last_value('task_sequence'), 0)::bigint AS sequence;

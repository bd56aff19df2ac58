-- name: TopicCreate :one
-- Registers the topic (a row of task_topic; migration 000009); false if it already existed.
SELECT task_topic_create(sqlc.arg(topic)::text)::boolean AS created;

-- name: TopicDestroy :one
-- Deletes the topic's settings and tasks (drops its table when dedicated); false for an
-- unknown topic (no error raised).
SELECT task_topic_destroy(sqlc.arg(topic)::text)::boolean AS destroyed;

-- name: TopicTruncate :one
-- Deletes every task of the topic (TRUNCATE of its table when dedicated); -1 for an
-- unknown topic.
SELECT COALESCE(task_topic_truncate(sqlc.arg(topic)::text), -1)::bigint AS purged;

-- name: TopicList :many
SELECT * FROM task_topic ORDER BY topic;

-- name: TopicGet :one
SELECT * FROM task_topic WHERE topic = sqlc.arg(topic);

-- name: TopicGetForUpdate :one
-- The topic's row, locked until the end of the transaction: a partial update of its
-- settings (Repository.UpdateSettings) reads, changes and writes them back without
-- losing a concurrent one. FOR NO KEY UPDATE, what the UPDATE takes: FOR UPDATE
-- waited for every open transaction that had pushed to the topic (a push holds its row
-- FOR KEY SHARE), and held off the topic's pushes while it waited.
SELECT * FROM task_topic WHERE topic = sqlc.arg(topic) FOR NO KEY UPDATE;

-- name: TopicUpdate :one
-- Writes a topic's settings and notifies it ('ACTIVATION <md5(topic)>', then 'WORK
-- <md5(topic)>'), so that its processors re-read the settings and poll now under the new
-- limits (a raised concurrency limit lets them take more at once).
WITH updated AS (
    UPDATE task_topic
    SET max_attempts      = sqlc.arg(max_attempts),
        backoff_base_ms   = sqlc.arg(backoff_base_ms),
        backoff_cap_ms    = sqlc.arg(backoff_cap_ms),
        backoff_jitter_ms = sqlc.arg(backoff_jitter_ms),
        queue_cap         = sqlc.narg('queue_cap'),
        retention_ms      = sqlc.narg('retention_ms'),
        concurrency       = sqlc.narg('concurrency'),
        key_concurrency   = sqlc.narg('key_concurrency'),
        rate              = sqlc.narg('rate'),
        rate_period_ms    = sqlc.narg('rate_period_ms'),
        rate_burst        = sqlc.narg('rate_burst'),
        fair              = sqlc.arg(fair)
    WHERE topic = sqlc.arg(topic)
    RETURNING *
),
notified AS (
    -- not on Citus (notify false): see TaskJunction
    SELECT pg_notify('task_notification', 'ACTIVATION ' || md5(u.topic)) AS activation,
           pg_notify('task_notification', 'WORK ' || md5(u.topic)) AS work
    FROM updated u
    WHERE sqlc.arg(notify)::boolean
)
SELECT u.* FROM updated u
-- notified runs only when referenced: a scalar subquery in WHERE always runs
WHERE (SELECT count(*) FROM notified) >= 0;

-- name: TopicSetActive :one
-- Pause (false) or resume (true) a topic; every process listening is told at commit.
WITH changed AS (
    UPDATE task_topic SET active = sqlc.arg(active) WHERE topic = sqlc.arg(topic) RETURNING topic, active
)
SELECT c.topic, c.active
FROM changed c
-- the notification is part of the WHERE clause so that the planner cannot drop it (a
-- scalar subquery in WHERE always runs); not on Citus (notify false): see TaskJunction
WHERE (SELECT count(*) FROM (SELECT pg_notify('task_notification', 'ACTIVATION ' || md5(c.topic))
                             WHERE sqlc.arg(notify)::boolean) n) >= 0;

-- name: TopicStats :one
-- Counts the open tasks only, each state up to 100 001 (task_topic_counts, migration
-- 000039: more than 100 000), through their own index ranges, so the cost grows neither
-- with the finished rows nor beyond the cap; all rows are estimated from the planner's
-- statistics (task_topic_rows, migration 000009).
-- (The casts tell sqlc the types of the function's columns, which it does not read.)
SELECT c.active::bigint AS active, c.ready::bigint AS ready, c.delayed::bigint AS delayed,
       c.expired::bigint AS expired, c.failed::bigint AS failed, c.suspended::bigint AS suspended,
       c.oldest_ready_age_ms::bigint AS oldest_ready_age_ms,
       COALESCE(task_topic_rows(sqlc.arg(topic)), 0)::bigint AS rows_estimate
FROM task_topic_counts(sqlc.arg(topic)::text)
     AS c(active, ready, delayed, expired, failed, suspended, oldest_ready_age_ms);

-- name: TopicAnalyze :one
-- Refreshes the statistics of the table holding the topic; returns that table's estimated
-- rows, -1 for
-- an unknown topic.
SELECT task_topic_analyze(sqlc.arg(topic)::text)::bigint AS rows;

-- name: TopicPartition :one
-- The name of the table holding the topic's tasks, and whether the current user may VACUUM it
-- (owns it, or is a member of its owner's role); no row for an unknown topic.
SELECT tt.partition, pg_has_role(c.relowner, 'MEMBER')::boolean AS owned
FROM task_topic tt JOIN pg_catalog.pg_class c ON c.oid = to_regclass(tt.partition)
WHERE tt.topic = sqlc.arg(topic);

-- name: TopicDedicate :one
-- Gives the topic a table of its own (task_topic_dedicate, migration 000009); false when
-- it has one already.
SELECT task_topic_dedicate(sqlc.arg(topic)::text)::boolean AS dedicated;

-- name: TopicDeleteTasks :one
-- Deletes up to size tasks of a shared topic, each state group through its own index;
-- returns how many (a batch of Repository.Destroy and PurgeAll).
SELECT task_topic_delete_rows(sqlc.arg(topic)::text, sqlc.arg(size)::bigint)::bigint AS deleted;

-- name: TopicActivation :many
-- Whether each of the named topics is active (not paused); unknown topics are left out.
SELECT tt.topic, tt.active FROM task_topic tt WHERE tt.topic = ANY(sqlc.arg(topics)::text[]);

-- name: TopicStatsAll :many
-- TopicStats of every registered topic (or of those named, when topics is not empty), in
-- one statement (task_topic_stats, migration 000009), with the topics' rows.
-- (The casts tell sqlc the types of the function's columns, which it does not read.)
SELECT sqlc.embed(tt), s.active::bigint AS active, s.ready::bigint AS ready, s.delayed::bigint AS delayed,
       s.expired::bigint AS expired, s.failed::bigint AS failed, s.suspended::bigint AS suspended,
       s.oldest_ready_age_ms::bigint AS oldest_ready_age_ms, COALESCE(s.rows_estimate, 0)::bigint AS rows_estimate
FROM task_topic tt
JOIN task_topic_stats(sqlc.arg(topics)::text[])
     AS s(topic, active, ready, delayed, expired, failed, suspended, oldest_ready_age_ms, rows_estimate)
  ON s.topic::text = tt.topic
ORDER BY tt.topic;


-- name: TopicLimitUsage :many
-- How much of its limits each named topic uses now (migration 000015): its ACTIVE tasks,
-- the keys at their per-key limit, the keys with READY tasks (counted through
-- task_ready_key one key at a time, up to 10 000) and the tokens left in its rate
-- limit's bucket, refilled to now (the burst before its first poll, when the bucket is
-- full; 0 without a rate limit). No row for an unknown topic. One statement for every
-- topic a metrics scrape reads: each topic's subqueries run in turn, and each names the
-- topic by hashtext, so that run-time pruning reads the topic's bucket alone (the keys
-- waiting are walked for all the topics at once, up to 10 000 steps each). The keys at
-- their limit are read only for a topic with a per-key limit. Run without JIT for many
-- topics: the estimated cost grows with their number past jit_above_cost, and compiling
-- the plan takes ten times as long as running it (Repository.LimitUsageAll).
WITH RECURSIVE tt AS (
    SELECT tt.*, n.ord FROM (SELECT n.topic, min(n.ord) AS ord
                             FROM unnest(sqlc.arg(topics)::text[]) WITH ORDINALITY AS n(topic, ord)
                             GROUP BY n.topic) n
    JOIN task_topic tt ON tt.topic = n.topic
), k AS (
    SELECT tt.topic, f.priority, f.concurrency_key, 1 AS n FROM tt CROSS JOIN LATERAL (
        SELECT t.priority, t.concurrency_key FROM task t
        WHERE hashtext(t.topic) = hashtext(tt.topic) AND t.topic = tt.topic AND t.state = 1
          AND t.concurrency_key IS NOT NULL
        ORDER BY t.priority, t.concurrency_key LIMIT 1) f
    UNION ALL
    SELECT k.topic, f.priority, f.concurrency_key, k.n + 1 FROM k CROSS JOIN LATERAL (
        SELECT t.priority, t.concurrency_key FROM task t
        WHERE hashtext(t.topic) = hashtext(k.topic) AND t.topic = k.topic AND t.state = 1
          AND t.concurrency_key IS NOT NULL AND (t.priority, t.concurrency_key) > (k.priority, k.concurrency_key)
        ORDER BY t.priority, t.concurrency_key LIMIT 1) f
    WHERE k.n < 10000
), w AS (
    SELECT k.topic, count(DISTINCT k.concurrency_key) AS keys FROM k GROUP BY k.topic
)
SELECT tt.topic,
    (SELECT count(*) FROM task t
     WHERE t.state = 0 AND hashtext(t.topic) = hashtext(tt.topic) AND t.topic = tt.topic)::bigint AS active,
    (CASE WHEN tt.key_concurrency IS NULL THEN 0
          ELSE (SELECT count(*) FROM (SELECT 1 FROM task t
                                      WHERE t.state = 0 AND hashtext(t.topic) = hashtext(tt.topic) AND t.topic = tt.topic
                                        AND t.concurrency_key IS NOT NULL AND t.concurrency_key <> ''
                                      GROUP BY t.concurrency_key
                                      HAVING count(*) >= tt.key_concurrency) k) END)::bigint AS keys_at_limit,
    coalesce(w.keys, 0)::bigint AS keys_ready,
    coalesce((SELECT least(tt.rate_burst::double precision,
                  l.tokens + greatest(extract(epoch FROM clock_timestamp() - l.counted), 0) * 1000 * tt.rate / tt.rate_period_ms)
     FROM task_topic_limit l WHERE l.topic = tt.topic AND tt.rate IS NOT NULL),
             tt.rate_burst, 0)::double precision AS tokens
FROM tt LEFT JOIN w ON w.topic = tt.topic
ORDER BY tt.ord;

-- name: TopicGetMany :many
-- The named topics, by name; unknown ones are left out.
SELECT * FROM task_topic tt WHERE tt.topic = ANY(sqlc.arg(topics)::text[]) ORDER BY tt.topic;

-- name: TopicPage :many
-- Up to size topics after the name `after` (keyset: '' starts at the first), by name,
-- whose name contains `search` (case-insensitive; '' matches every topic). Reads
-- task_topic only (its primary key gives the order), never the task tables: the
-- dashboard's overview pages through thousands of topics with it.
SELECT * FROM task_topic
WHERE topic > sqlc.arg(after)::text
  AND (sqlc.arg(search)::text = '' OR strpos(lower(topic), lower(sqlc.arg(search)::text)) > 0)
ORDER BY topic
LIMIT sqlc.arg(size)::int;

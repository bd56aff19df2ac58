-- name: TallyTopic :many
-- A topic's tallies (migration 000017) per second, oldest first, over the given number
-- of whole seconds before the current one (by the database's clock), zeros where nothing
-- was written: its rows of task_tally in that window only, through the primary key.
SELECT s.second::timestamptz AS second,
       COALESCE(a.pushed, 0)::bigint AS pushed, COALESCE(a.retried, 0)::bigint AS retried,
       COALESCE(a.failed, 0)::bigint AS failed, COALESCE(a.suspended, 0)::bigint AS suspended,
       COALESCE(a.filtered, 0)::bigint AS filtered, COALESCE(a.succeeded, 0)::bigint AS succeeded
FROM generate_series(date_trunc('second', now()) - sqlc.arg(seconds)::integer * interval '1 second',
                     date_trunc('second', now()) - interval '1 second', interval '1 second') AS s(second)
LEFT JOIN (
    SELECT y.second, sum(y.pushed) AS pushed, sum(y.retried) AS retried, sum(y.failed) AS failed,
           sum(y.suspended) AS suspended, sum(y.filtered) AS filtered, sum(y.succeeded) AS succeeded
    FROM task_tally y
    WHERE y.topic = sqlc.arg(topic)
      AND y.second >= date_trunc('second', now()) - sqlc.arg(seconds)::integer * interval '1 second'
      AND y.second < date_trunc('second', now())
    GROUP BY y.second
) a ON a.second = s.second
ORDER BY s.second;

-- name: TallyAll :many
-- TallyTopic summed over every topic: the rows of task_tally in the window, through
-- task_tally_second.
SELECT s.second::timestamptz AS second,
       COALESCE(a.pushed, 0)::bigint AS pushed, COALESCE(a.retried, 0)::bigint AS retried,
       COALESCE(a.failed, 0)::bigint AS failed, COALESCE(a.suspended, 0)::bigint AS suspended,
       COALESCE(a.filtered, 0)::bigint AS filtered, COALESCE(a.succeeded, 0)::bigint AS succeeded
FROM generate_series(date_trunc('second', now()) - sqlc.arg(seconds)::integer * interval '1 second',
                     date_trunc('second', now()) - interval '1 second', interval '1 second') AS s(second)
LEFT JOIN (
    SELECT y.second, sum(y.pushed) AS pushed, sum(y.retried) AS retried, sum(y.failed) AS failed,
           sum(y.suspended) AS suspended, sum(y.filtered) AS filtered, sum(y.succeeded) AS succeeded
    FROM task_tally y
    WHERE y.second >= date_trunc('second', now()) - sqlc.arg(seconds)::integer * interval '1 second'
      AND y.second < date_trunc('second', now())
    GROUP BY y.second
) a ON a.second = s.second
ORDER BY s.second;

-- name: TallyPrune :execrows
-- Deletes the tallies older than the given number of seconds.
DELETE FROM task_tally y WHERE y.second < now() - sqlc.arg(seconds)::integer * interval '1 second';

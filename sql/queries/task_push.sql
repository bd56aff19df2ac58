-- name: TaskPush :many
-- Pushes a whole batch in one statement. insertion: 0 APPEND, 1 REPLACE,
-- 2 SUPERSEDE, 3 DELETE. Writes nothing and returns no row when the topic is unknown or
-- the push would take the topic above its queue cap, counted net of the READY tasks it
-- ends; the caller tells the two apart.
-- TaskPushAppend (below) is the same for APPEND alone, and what repository.Push runs for it.
WITH topic AS (
    -- KEY SHARE keeps a concurrent destroy of the topic out until the caller commits.
    -- keyed: the topic is polled by key (migration 000015), where a task without a key has
    -- the key ''
    SELECT tt.topic, tt.queue_cap, tt.fair OR tt.key_concurrency IS NOT NULL AS keyed
    FROM task_topic tt WHERE tt.topic = sqlc.arg(topic) FOR KEY SHARE
),
element AS (
    -- Parallel unnest in the select list runs the arrays in lockstep; generate_series
    -- numbers the elements.
    SELECT generate_series(1, cardinality(sqlc.arg(identifiers)::text[])) AS ord,
           unnest(sqlc.arg(identifiers)::text[]) AS identifier, unnest(sqlc.arg(inputs)::text[]) AS input,
           unnest(sqlc.arg(refs)::text[]) AS reference, unnest(sqlc.arg(suspended)::boolean[]) AS suspended,
           unnest(sqlc.arg(priorities)::smallint[]) AS priority,
           unnest(sqlc.arg(not_befores_us)::bigint[]) AS not_before_us,
           unnest(sqlc.arg(delays_ms)::bigint[]) AS delay_ms,
           unnest(sqlc.arg(keys)::text[]) AS concurrency_key
),
creation AS (
    SELECT c.ord, c.identifier, NULLIF(c.input, '') AS input, NULLIF(c.reference, '') AS reference,
           c.suspended, c.priority,
           coalesce(NULLIF(c.concurrency_key, ''), CASE WHEN (SELECT tp.keyed FROM topic tp) THEN '' END) AS concurrency_key,
           -- whole seconds, then microseconds: a float of seconds (us / 1e6) is coarser
           -- than a microsecond past the year 2255, and put 9999-12-31T23:59:59.999999Z
           -- in the year 10000
           CASE WHEN c.not_before_us <> 0 THEN to_timestamp(c.not_before_us / 1000000) + c.not_before_us % 1000000 * interval '1 microsecond'
                WHEN c.delay_ms > 0 THEN now() + c.delay_ms * interval '1 millisecond'
           END AS not_before,
           c.last
    FROM (
        -- APPEND inserts every occurrence live: it skips sorting the batch by identifier.
        SELECT e.ord, e.identifier, e.input, e.reference, e.suspended, e.priority, e.not_before_us,
               e.delay_ms, e.concurrency_key, true AS last
        FROM element e WHERE sqlc.arg(insertion)::smallint = 0
        UNION ALL
        -- Otherwise only the last occurrence of an identifier in the batch stays live
        -- (REPLACE, SUPERSEDE) or is inserted at all (DELETE).
        SELECT e.ord, e.identifier, e.input, e.reference, e.suspended, e.priority, e.not_before_us,
               e.delay_ms, e.concurrency_key, e.ord = max(e.ord) OVER (PARTITION BY e.identifier) AS last
        FROM element e WHERE sqlc.arg(insertion)::smallint <> 0
    ) c
),
live AS (
    -- the tasks this push inserts READY (the others REDUNDANT or SUSPENDED)
    SELECT count(*) AS n FROM creation c WHERE NOT c.suspended AND c.last
),
fits AS (
    -- the unfinished tasks there plus the live ones we add fit under the cap
    -- (task_queue_admits, migration 000007: as a function call, not planned here)
    SELECT topic.queue_cap IS NULL OR task_queue_admits(sqlc.arg(topic), topic.queue_cap, (SELECT l.n FROM live l)) AS ok
    FROM topic
),
replaceable AS (
    -- REPLACE, SUPERSEDE and DELETE end the older READY tasks of their identifiers, so
    -- that the cap counts them net of those (older_ready, as it reads them, unlocked):
    -- read only when the push does not fit as it is
    SELECT count(*) AS n FROM task t
    WHERE sqlc.arg(insertion)::smallint <> 0
      AND (t.topic || E'\n' || t.identifier) = ANY (ARRAY(SELECT sqlc.arg(topic) || E'\n' || i
                                                         FROM unnest(sqlc.arg(identifiers)::text[]) i))
      AND t.topic = sqlc.arg(topic) AND t.state = 1
      AND t.identifier = ANY(sqlc.arg(identifiers)::text[])
),
admitted AS (
    -- it fits, or fits net of the READY tasks it ends; a refused push locks nothing
    SELECT true AS ok FROM fits f
    WHERE f.ok OR task_queue_admits(sqlc.arg(topic), (SELECT tp.queue_cap FROM topic tp),
                                    (SELECT l.n FROM live l) - (SELECT r.n FROM replaceable r))
),
older_ready AS (
    -- Older tasks of the same identifiers that this insertion mode touches, in parts
    -- that each match one index (migrations 000009 and 000031): READY ones through
    -- task_ready_identifier (keyed by topic and identifier), EXPIRED to SUCCEEDED
    -- (RECREATED too for DELETE) through task_identifier, REDUNDANT (DELETE only) through
    -- task_identifier_redundant, so that a REPLACE never reads an identifier's REDUNDANT
    -- versions. ACTIVE tasks are never touched; rows locked by a concurrent transaction
    -- are skipped. The insertion test depends on no row, so an APPEND reads nothing.
    SELECT t.topic, t.sequence FROM task t
    WHERE sqlc.arg(insertion)::smallint <> 0 AND EXISTS (SELECT 1 FROM admitted)
      -- = ANY(array) rather than IN (SELECT ...): an index probe per identifier whatever
      -- the statistics of a young table say
      AND (t.topic || E'\n' || t.identifier) = ANY (ARRAY(SELECT sqlc.arg(topic) || E'\n' || i
                                                         FROM unnest(sqlc.arg(identifiers)::text[]) i))
      AND t.topic = sqlc.arg(topic) AND t.state = 1
      AND t.identifier = ANY(sqlc.arg(identifiers)::text[])
    FOR UPDATE SKIP LOCKED
),
confirmed AS (
    -- admitted net of the READY tasks it locked: one a concurrent transaction holds is
    -- skipped, and stays live (then nothing is written, but those locks stay until the
    -- caller's transaction ends)
    SELECT true AS ok FROM fits f
    WHERE f.ok OR task_queue_admits(sqlc.arg(topic), (SELECT tp.queue_cap FROM topic tp),
                                    (SELECT l.n FROM live l) - (SELECT count(*) FROM older_ready))
),
older_settled AS (
    -- REPLACE also ends settled tasks up to SUCCEEDED; DELETE removes every one.
    SELECT t.topic, t.sequence FROM task t
    WHERE sqlc.arg(insertion)::smallint IN (1, 3) AND EXISTS (SELECT 1 FROM confirmed)
      AND hashtext(t.topic) = hashtext(sqlc.arg(topic)) AND t.topic = sqlc.arg(topic) AND t.state BETWEEN 2 AND 7
      AND t.identifier = ANY(sqlc.arg(identifiers)::text[])
      AND (sqlc.arg(insertion)::smallint = 3 OR t.state <= 6)
    FOR UPDATE SKIP LOCKED
),
older_redundant AS (
    SELECT t.topic, t.sequence FROM task t
    WHERE sqlc.arg(insertion)::smallint = 3 AND EXISTS (SELECT 1 FROM confirmed)
      AND hashtext(t.topic || E'\n' || t.identifier) = ANY (ARRAY(SELECT hashtext(sqlc.arg(topic) || E'\n' || i)
                                                                   FROM unnest(sqlc.arg(identifiers)::text[]) i))
      AND t.topic = sqlc.arg(topic) AND t.state = 8
      AND t.identifier = ANY(sqlc.arg(identifiers)::text[])
    FOR UPDATE SKIP LOCKED
),
older AS (
    SELECT r.topic, r.sequence FROM older_ready r WHERE EXISTS (SELECT 1 FROM confirmed)
    UNION ALL
    SELECT s.topic, s.sequence FROM older_settled s
    UNION ALL
    SELECT e.topic, e.sequence FROM older_redundant e
),
-- The topic as a value (not only o's) lets the planner prune the target to the topic's
-- table; the insertion test goes in the subquery, since a WHERE that folds to false
-- leaves every table of task as a target (and locks them all).
made_redundant AS (
    UPDATE task t SET state = 8, descent = GREATEST(t.state, t.descent)
    FROM (SELECT * FROM older WHERE sqlc.arg(insertion) IN (1, 2)) o
    WHERE t.topic = sqlc.arg(topic) AND t.sequence = o.sequence
    RETURNING t.sequence
),
deleted AS (
    DELETE FROM task t USING (SELECT * FROM older WHERE sqlc.arg(insertion) = 3) o
    WHERE t.topic = sqlc.arg(topic) AND t.sequence = o.sequence
    RETURNING t.sequence
),
inserted AS (
    INSERT INTO task (topic, sequence, identifier, state, descent, input, reference, priority, not_before,
                      concurrency_key)
    -- nextval over rows already in input order: sequences follow the input
    SELECT sqlc.arg(topic), nextval('task_sequence'), c.identifier,
           CASE WHEN sqlc.arg(insertion) IN (1, 2) AND NOT c.last THEN 8
                WHEN c.suspended THEN 4
                ELSE 1 END,
           1, -- descent: a fresh task was READY before whatever it is
           c.input, c.reference, c.priority, c.not_before, c.concurrency_key
    FROM (SELECT * FROM creation c
          WHERE EXISTS (SELECT 1 FROM confirmed) AND (sqlc.arg(insertion) <> 3 OR c.last)
          ORDER BY c.ord) c
    RETURNING sequence, identifier, state, descent, created, not_before, priority
),
notified AS (
    -- with the position of the first READY task in poll order, where a processor's next
    -- poll must start from to see them all, and, when none is due yet, in how many
    -- milliseconds the earliest is and when (repository.Notification)
    SELECT pg_notify('task_notification', 'WORK ' || md5(sqlc.arg(topic)) || ' ' || f.priority || ' ' || f.sequence
                     || CASE WHEN f.due > clock_timestamp()
                             THEN ' ' || ceil(extract(epoch FROM f.due - clock_timestamp()) * 1000)::bigint || ' ' || ceil(extract(epoch FROM f.due) * 1000)::bigint
                             ELSE '' END) AS sent
    FROM (SELECT i.priority, i.sequence, min(coalesce(i.not_before, '-infinity')) OVER () AS due
          FROM inserted i WHERE i.state = 1
          ORDER BY i.priority, i.sequence LIMIT 1) f
)
-- Only what the database decided: the caller has the rest (repository.Push fills it in).
SELECT i.sequence, i.identifier, i.state, i.descent, i.created, i.not_before
FROM inserted i
-- notified runs only when referenced: a scalar subquery in WHERE always runs
WHERE (SELECT count(*) FROM notified) >= 0
ORDER BY i.sequence;

-- name: TaskPushAppend :many
-- TaskPush for APPEND, which touches no older task: every element is inserted, live
-- unless suspended. Unlike TaskPush, it reads no partition: an INSERT routes each row to
-- its partition as it executes, so a generic plan fits every topic and locks only the
-- parent table, and the server keeps one after the first executions of the prepared
-- statement instead of planning each one (about a quarter of a push's server time for
-- batches of 100; TestPushAppendGenericPlan). The parameters of TaskPush but insertion,
-- and the same result (TestPushAppendStatement compares the two).
WITH topic AS (
    -- KEY SHARE keeps a concurrent destroy of the topic out until the caller commits.
    -- keyed: the topic is polled by key (migration 000015), where a task without a key has
    -- the key ''
    SELECT tt.topic, tt.queue_cap, tt.fair OR tt.key_concurrency IS NOT NULL AS keyed
    FROM task_topic tt WHERE tt.topic = sqlc.arg(topic) FOR KEY SHARE
),
element AS (
    -- One function scan of the arrays in lockstep, numbered by ORDINALITY. A generic plan
    -- estimates it at 10 rows, so that plan does not look dearer than the custom ones (each
    -- charged its planning) and the server settles on it; generate_series(1,
    -- cardinality(...)) beside unnests in the select list (as in TaskPush) is estimated
    -- at 1 000 rows there, which kept every execution custom-planned.
    SELECT e.ord, e.identifier, e.input, e.reference, e.suspended, e.priority, e.not_before_us, e.delay_ms,
           e.concurrency_key
    FROM ROWS FROM (unnest(sqlc.arg(identifiers)::text[]), unnest(sqlc.arg(inputs)::text[]),
                    unnest(sqlc.arg(refs)::text[]), unnest(sqlc.arg(suspended)::boolean[]),
                    unnest(sqlc.arg(priorities)::smallint[]), unnest(sqlc.arg(not_befores_us)::bigint[]),
                    unnest(sqlc.arg(delays_ms)::bigint[]), unnest(sqlc.arg(keys)::text[]))
         WITH ORDINALITY AS e(identifier, input, reference, suspended, priority, not_before_us, delay_ms,
                              concurrency_key, ord)
),
admitted AS (
    SELECT true AS ok FROM topic
    WHERE topic.queue_cap IS NULL
       OR task_queue_admits(sqlc.arg(topic), topic.queue_cap,
                            (SELECT count(*) FROM element e WHERE NOT e.suspended))
),
inserted AS (
    INSERT INTO task (topic, sequence, identifier, state, descent, input, reference, priority, not_before,
                      concurrency_key)
    -- nextval over rows already in input order: sequences follow the input
    SELECT sqlc.arg(topic), nextval('task_sequence'), e.identifier,
           CASE WHEN e.suspended THEN 4 ELSE 1 END, 1, -- descent READY, as TaskPush
           NULLIF(e.input, ''), NULLIF(e.reference, ''), e.priority,
           -- exact to the microsecond, as TaskPush
           CASE WHEN e.not_before_us <> 0 THEN to_timestamp(e.not_before_us / 1000000) + e.not_before_us % 1000000 * interval '1 microsecond'
                WHEN e.delay_ms > 0 THEN now() + e.delay_ms * interval '1 millisecond'
           END,
           coalesce(NULLIF(e.concurrency_key, ''), CASE WHEN (SELECT tp.keyed FROM topic tp) THEN '' END)
    FROM (SELECT * FROM element e WHERE EXISTS (SELECT 1 FROM admitted) ORDER BY e.ord) e
    RETURNING sequence, identifier, state, descent, created, not_before, priority
),
notified AS (
    -- with the position of the first READY task in poll order, where a processor's next
    -- poll must start from to see them all, and, when none is due yet, in how many
    -- milliseconds the earliest is and when (repository.Notification)
    SELECT pg_notify('task_notification', 'WORK ' || md5(sqlc.arg(topic)) || ' ' || f.priority || ' ' || f.sequence
                     || CASE WHEN f.due > clock_timestamp()
                             THEN ' ' || ceil(extract(epoch FROM f.due - clock_timestamp()) * 1000)::bigint || ' ' || ceil(extract(epoch FROM f.due) * 1000)::bigint
                             ELSE '' END) AS sent
    FROM (SELECT i.priority, i.sequence, min(coalesce(i.not_before, '-infinity')) OVER () AS due
          FROM inserted i WHERE i.state = 1
          ORDER BY i.priority, i.sequence LIMIT 1) f
)
SELECT i.sequence, i.identifier, i.state, i.descent, i.created, i.not_before
FROM inserted i
-- notified runs only when referenced: a scalar subquery in WHERE always runs
WHERE (SELECT count(*) FROM notified) >= 0
ORDER BY i.sequence;

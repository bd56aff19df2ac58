-- name: TaskPoll :many
-- Leases up to size READY tasks in poll order: the function
-- task_poll_candidates (migration 000003) picks and locks them with FOR UPDATE SKIP
-- LOCKED, and this statement marks them ACTIVE under owner with the attempt counted.
-- condition: 0 NONE, 1 SINGULAR_BY_IDENTIFIER, 2 ..._SUSPEND_ON_FAILURE,
-- 3 ..._SUSPEND_UNTIL_SUCCESS. A FIFO poll without a condition starts at the position
-- (from_priority, from_sequence) when given (migration 000012). Rows are found by their
-- address (a TID scan, the one plan that stays right when pgx caches a generic plan made
-- on a near-empty table); the topic equality prunes the UPDATE to the table holding the
-- topic.
UPDATE task t SET state = 0, owner = sqlc.arg(owner)::text, attempt = t.attempt + 1
WHERE t.topic = sqlc.arg(topic)
  AND t.ctid = ANY (ARRAY(SELECT task_poll_candidates(sqlc.arg(topic)::text, sqlc.arg(lifo)::boolean,
                                                      sqlc.arg(condition)::smallint, sqlc.arg(size)::integer,
                                                      sqlc.narg(from_priority)::smallint,
                                                      sqlc.narg(from_sequence)::bigint)))
-- keyed: the topic is polled key by key (migration 000015), and its tasks come in turns of
-- their keys (repository.Poll); limited: the topic has limits, and its next polls go
-- through TaskPollLimited
RETURNING t.*, (SELECT tt.fair OR tt.key_concurrency IS NOT NULL FROM task_topic tt WHERE tt.topic = sqlc.arg(topic))::boolean AS keyed,
          (SELECT tt.concurrency IS NOT NULL OR tt.key_concurrency IS NOT NULL OR tt.rate IS NOT NULL OR tt.fair
           FROM task_topic tt WHERE tt.topic = sqlc.arg(topic))::boolean AS limited;

-- name: TaskPollLimited :many
-- TaskPoll for a limited topic (task_poll, migration 000054): the tasks are chosen under
-- the topic's lock in one statement and leased in the next, whose snapshot sees every
-- task the choice took, one pushed while the choice waited for its turn included (a
-- single statement's UPDATE, on its snapshot of before the wait, left such a task READY,
-- charged a rate token or a key's turn).
SELECT p.topic, p.sequence, p.identifier, p.state, p.descent, p.owner, p.created, p.completed, p.input,
       p.output, p.reference, p.priority, p.not_before, p.attempt, p.returned, p.errors, p.cancelled,
       p.concurrency_key,
       (SELECT tt.fair OR tt.key_concurrency IS NOT NULL FROM task_topic tt WHERE tt.topic = sqlc.arg(topic))::boolean AS keyed,
       (SELECT tt.concurrency IS NOT NULL OR tt.key_concurrency IS NOT NULL OR tt.rate IS NOT NULL OR tt.fair
        FROM task_topic tt WHERE tt.topic = sqlc.arg(topic))::boolean AS limited
FROM task_poll(sqlc.arg(topic)::text, sqlc.arg(owner)::text, sqlc.arg(lifo)::boolean, sqlc.arg(condition)::smallint,
               sqlc.arg(size)::integer, sqlc.narg(from_priority)::smallint, sqlc.narg(from_sequence)::bigint) p;

-- name: TaskComplete :many
-- Completes a batch of leased tasks in one statement, all or nothing: task_complete
-- (migration 000011) holds the statement and describes it; it plans it without nested
-- loops, which the estimates of a table shared by many topics can make ruinous.
-- results: 0 FAILURE (without retry when its delay is negative, 000050), 1 SUSPENSION, 2 FILTER,
-- 3 SUCCESS, 4 SNOOZE, 5 FAILURE without retry
-- (migration 000049). When a decision does
-- not qualify, it raises PT005 and nothing changes; when none does, no row comes back.
-- With lean, topic and identifier come back empty and owner, input and reference NULL:
-- the caller fills them in from the leased tasks (Repository.Complete).
SELECT (CASE WHEN sqlc.arg(lean)::boolean THEN '' ELSE c.topic END)::text AS topic, c.sequence,
       (CASE WHEN sqlc.arg(lean)::boolean THEN '' ELSE c.identifier END)::text AS identifier,
       c.state, c.descent, CASE WHEN NOT sqlc.arg(lean)::boolean THEN c.owner END AS owner,
       c.created, c.completed, CASE WHEN NOT sqlc.arg(lean)::boolean THEN c.input END AS input,
       c.output, CASE WHEN NOT sqlc.arg(lean)::boolean THEN c.reference END AS reference,
       c.priority, c.not_before, c.attempt, c.returned, c.errors, c.cancelled
FROM task_complete(sqlc.arg(topic)::text, sqlc.arg(owner)::text, sqlc.arg(sequences)::bigint[],
                   sqlc.arg(attempts)::integer[], sqlc.arg(results)::smallint[], sqlc.arg(outputs)::text[],
                   sqlc.arg(delays_ms)::bigint[]) c;

-- name: TaskCompletePoll :many
-- TaskComplete, then, when every decision qualified, TaskPoll from the position, in one
-- statement (task_complete_poll, migration 000022): what a limited topic's processor
-- runs when its poll loop waits for the capacity these decisions free. Completed rows
-- come first and are never ACTIVE (state 0); the leased rows are. Completed rows are
-- lean as in TaskComplete; leased rows are whole.
SELECT (CASE WHEN sqlc.arg(lean)::boolean AND c.state <> 0 THEN '' ELSE c.topic END)::text AS topic, c.sequence,
       (CASE WHEN sqlc.arg(lean)::boolean AND c.state <> 0 THEN '' ELSE c.identifier END)::text AS identifier,
       c.state, c.descent, CASE WHEN NOT sqlc.arg(lean)::boolean OR c.state = 0 THEN c.owner END AS owner,
       c.created, c.completed, CASE WHEN NOT sqlc.arg(lean)::boolean OR c.state = 0 THEN c.input END AS input,
       c.output, CASE WHEN NOT sqlc.arg(lean)::boolean OR c.state = 0 THEN c.reference END AS reference,
       c.priority, c.not_before, c.attempt, c.returned, c.errors, c.cancelled, c.concurrency_key,
       (SELECT tt.fair OR tt.key_concurrency IS NOT NULL FROM task_topic tt WHERE tt.topic = sqlc.arg(topic))::boolean AS keyed
FROM task_complete_poll(sqlc.arg(topic)::text, sqlc.arg(owner)::text, sqlc.arg(sequences)::bigint[],
                        sqlc.arg(attempts)::integer[], sqlc.arg(results)::smallint[], sqlc.arg(outputs)::text[],
                        sqlc.arg(delays_ms)::bigint[], sqlc.arg(lifo)::boolean, sqlc.arg(condition)::smallint,
                        sqlc.arg(size)::integer, sqlc.narg(from_priority)::smallint,
                        sqlc.narg(from_sequence)::bigint) c;

-- name: TaskLeases :many
-- The current lease state of tasks, to explain why a completion was refused.
SELECT t.sequence, t.state, t.owner, t.attempt
FROM task t
WHERE t.topic = sqlc.arg(topic) AND t.sequence = ANY(sqlc.arg(sequences)::bigint[]);

-- name: TaskLeased :many
-- The ACTIVE tasks of a topic leased by owner, in sequence order: what a processor
-- compares with the tasks it knows it holds after a statement whose reply it lost (a
-- poll that committed leases it never received). It reads the topic's ACTIVE entries of
-- task_open; it runs only after such a fault.
SELECT t.* FROM task t
WHERE t.topic = sqlc.arg(topic) AND hashtext(t.topic) = hashtext(sqlc.arg(topic))
  AND t.state = 0 AND t.owner = sqlc.arg(owner)::text
ORDER BY t.sequence;

-- name: TaskExpire :many
-- ACTIVE tasks of OTHER owners whose heartbeat is older than now - timeout, or - the
-- owner's own expiry timeout when longer (or whose owner row is gone) become EXPIRED, or READY after backoff when the topic's retry policy
-- grants another attempt; a cancelled one ends FAILED. Reports the count per topic and
-- notifies topics that received READY work. Without orphans, nothing is read beyond
-- task_owner unless a registered owner is stale: the tasks of owners whose row is gone
-- are then left for a call with orphans.
--
-- The stale leases are read first, as the statement's snapshot has them, and locked
-- after, each only as long as it is the same lease (owner and attempt: a lease counts
-- an attempt). A row changed since the snapshot is checked again as it is now, but
-- task_owner is still read as of the snapshot: a task leased again meanwhile by an
-- owner registered meanwhile looked orphaned, and its live lease was taken back.
WITH candidate AS MATERIALIZED (
    SELECT t.topic, t.sequence, t.owner, t.attempt FROM task t
    WHERE t.state = 0 AND t.owner <> sqlc.arg(owner)::text
      -- depends on no row of t: evaluated once, before the scan, which it can skip
      AND (sqlc.arg(orphans)::boolean
           OR EXISTS (SELECT 1 FROM task_owner w
                      WHERE w.owner <> sqlc.arg(owner)::text
                        AND w.heartbeat < COALESCE(sqlc.narg('now')::timestamptz, now())
                                          - GREATEST(sqlc.arg(timeout_ms)::bigint, w.expiry_ms) * interval '1 millisecond'))
      AND NOT EXISTS (
            SELECT 1 FROM task_owner w
            WHERE w.owner = t.owner
              AND w.heartbeat >= COALESCE(sqlc.narg('now')::timestamptz, now())
                                 - GREATEST(sqlc.arg(timeout_ms)::bigint, w.expiry_ms) * interval '1 millisecond')
),
stale AS (
    SELECT t.topic, t.sequence FROM candidate c JOIN task t ON t.topic = c.topic AND t.sequence = c.sequence
    WHERE t.state = 0 AND t.owner = c.owner AND t.attempt = c.attempt
    FOR UPDATE OF t SKIP LOCKED
),
expired AS (
    UPDATE task t
    SET state      = CASE WHEN t.cancelled THEN 3
                          WHEN t.attempt - t.returned < p.max_attempts THEN 1
                          ELSE 2 END,
        not_before = CASE WHEN NOT t.cancelled AND t.attempt - t.returned < p.max_attempts
                          THEN now() + (least(p.backoff_cap_ms::double precision,
                                              p.backoff_base_ms * power(2::double precision, least(t.attempt - t.returned - 1, 60)))
                                        + random() * p.backoff_jitter_ms) * interval '1 millisecond'
                          ELSE t.not_before END,
        completed  = CASE WHEN t.cancelled THEN now() ELSE t.completed END,
        output     = CASE WHEN t.cancelled THEN 'cancelled'
                          ELSE 'expired: owner ' || t.owner || ' stopped heart-beating' END,
        errors     = array_append(t.errors, CASE WHEN t.cancelled THEN 'cancelled'
                          ELSE 'expired: owner ' || t.owner || ' stopped heart-beating' END)
    FROM stale s, task_topic p
    WHERE t.topic = s.topic AND t.sequence = s.sequence AND p.topic = t.topic
    RETURNING t.topic, t.state, t.priority, t.sequence, t.not_before,
              p.concurrency IS NOT NULL OR p.key_concurrency IS NOT NULL AS capped
),
notified AS (
    -- per topic, as a completion does: the first task made READY in poll order and, when
    -- none is due yet, in how many milliseconds the earliest is and when (repository.Notification);
    -- a topic with a concurrency limit is told even when no task became READY, and
    -- without a delay when those made READY are not due yet, since its processors
    -- waiting at the limit may poll again ('WORK <md5(topic)>'), not only when the
    -- retried tasks fall due
    SELECT pg_notify('task_notification', 'WORK ' || md5(r.topic)
                     || CASE WHEN r.ready AND NOT (r.capped AND r.due > clock_timestamp())
                             THEN ' ' || r.priority || ' ' || r.sequence
                                               || CASE WHEN r.due > clock_timestamp()
                                                       THEN ' ' || ceil(extract(epoch FROM r.due - clock_timestamp()) * 1000)::bigint || ' ' || ceil(extract(epoch FROM r.due) * 1000)::bigint
                                                       ELSE '' END
                             ELSE '' END) AS sent
    FROM (SELECT DISTINCT ON (e.topic) e.topic, e.state = 1 AS ready, e.priority, e.sequence, e.capped,
                 min(CASE WHEN e.state = 1 THEN coalesce(e.not_before, '-infinity') END) OVER (PARTITION BY e.topic) AS due
          FROM expired e
          ORDER BY e.topic, e.state <> 1, e.priority, e.sequence) r
    WHERE r.ready OR r.capped
)
SELECT e.topic, count(*)::bigint AS expired, count(*) FILTER (WHERE e.state = 1)::bigint AS retried
FROM expired e
-- notified runs only when referenced: a scalar subquery in WHERE always runs
WHERE (SELECT count(*) FROM notified) >= 0
GROUP BY e.topic
ORDER BY e.topic;

-- name: TaskNextDue :one
-- In how many milliseconds (0 or less: it is due) the earliest READY task of the topic
-- that fell due or falls due after seen_ms ago does, and where it stands in poll order
-- (no row when there is none): one probe of task_delayed (migration 000013), which a
-- processor makes after a poll found nothing, to arm a timer for that moment. seen_ms is
-- how long ago its last poll from the head of the topic began: tasks due before it were
-- there for it to lease, and one it could not (held by a condition) must not look due to
-- every probe. The delay is computed by the database's clock, so the processor's own
-- clock need not agree with it. task_next_due (migration 000019) holds the statement, so
-- that no statistics make it read task_ready instead.
SELECT n.in_ms::bigint AS in_ms, n.priority::smallint AS priority, n.sequence::bigint AS sequence
FROM task_next_due(sqlc.arg(topic)::text, sqlc.arg(seen_ms)::bigint) n;

-- name: TaskFirstReady :one
-- Where the first READY task of the topic that is due stands in FIFO poll order (no row
-- when there is none), without locking it: what a processor polling from a position
-- checks now and then, off its poll loop, for work before that position that no
-- notification told of. It reads task_ready from the head of the topic, over the entries
-- a long-held snapshot keeps.
SELECT t.priority, t.sequence
FROM task t
WHERE hashtext(t.topic) = hashtext(sqlc.arg(topic)) AND t.topic = sqlc.arg(topic) AND t.state = 1
  AND (t.not_before IS NULL OR t.not_before <= now())
ORDER BY t.priority, t.sequence
LIMIT 1;

-- name: TaskCancel :many
-- Cancels READY, SUSPENDED and EXPIRED tasks (they become REDUNDANT with output saying
-- who cancelled) and flags ACTIVE ones (their processor is told with CANCEL <md5(topic)>
-- <sequence>; they end FAILED "cancelled"). All or nothing: when any task is in another
-- state or unknown, nothing changes and no row is returned.
WITH target AS (
    SELECT t.topic, t.sequence FROM task t
    WHERE t.topic = sqlc.arg(topic) AND t.sequence = ANY(sqlc.arg(sequences)::bigint[])
      AND t.state IN (0, 1, 2, 4)
    FOR UPDATE OF t
),
cancelled AS (
    UPDATE task t
    SET state     = CASE WHEN t.state = 0 THEN 0 ELSE 8 END,
        descent   = CASE WHEN t.state = 0 THEN t.descent ELSE GREATEST(t.state, t.descent) END,
        cancelled = true,
        output    = CASE WHEN t.state = 0 THEN t.output ELSE 'cancelled by ' || sqlc.arg(by)::text END,
        completed = CASE WHEN t.state = 0 THEN t.completed ELSE now() END
    FROM target g
    WHERE t.topic = sqlc.arg(topic) AND t.sequence = g.sequence
      AND (SELECT count(*) FROM target) = cardinality(sqlc.arg(sequences)::bigint[])
    RETURNING t.*
),
notified AS (
    SELECT pg_notify('task_notification', 'CANCEL ' || md5(sqlc.arg(topic)) || ' ' || c.sequence) AS sent
    FROM cancelled c WHERE c.state = 0
)
SELECT c.*
FROM cancelled c
-- notified runs only when referenced: a scalar subquery in WHERE always runs
WHERE (SELECT count(*) FROM notified) >= 0
ORDER BY c.sequence;

-- name: TaskJunctionLock :one
-- Takes the transaction's advisory locks of junctions' identifiers (parallel arrays of
-- topic and identifier) before TaskJunction reads their states: a junction run by
-- another transaction that suspended one of the group's tasks, and not committed yet,
-- is waited for, and its suspension seen by TaskJunction's snapshot, taken after (under
-- READ COMMITTED, which it returns for the caller to check: under REPEATABLE READ the
-- snapshot is the transaction's, taken before). Without it, two completions each
-- suspending one task of a group and declaring the junction each saw the other's task
-- not yet SUSPENDED, and the group was never released. An identifier's lock is one of
-- 64 of its topic (the topic's hash, its low 6 bits those of the identifier's), so that
-- a group of 20 000 identifiers takes 64 locks, not 20 000 (which filled the server's
-- lock table: "out of shared memory"), taken in the order of their keys, so that two
-- transactions locking overlapping sets never wait on each other in turn (a commit of
-- several junctions locks them all at once: Repository.LockJunctions). The class
-- 1885828202 ('pgtj') is the junctions' own.
SELECT current_setting('transaction_isolation')::text AS isolation,
       count(pg_advisory_xact_lock(1885828202, k.key))::bigint AS locks
FROM (SELECT DISTINCT (hashtext(i.topic) & ~63) | (hashtext(i.topic || E'\n' || i.identifier) & 63) AS key
      FROM (SELECT unnest(sqlc.arg(topics)::text[]) AS topic, unnest(sqlc.arg(identifiers)::text[]) AS identifier) i
      ORDER BY 1) k;

-- name: TaskJunction :many
-- Releases the SUSPENDED tasks of every group whose identifiers all have a qualifying
-- task in this topic: SUSPENDED (eternal false) or any state but REDUNDANT (eternal
-- true), counting distinct identifiers. Groups come as parallel arrays (group number,
-- identifier). Returns the released tasks' identifiers (refused 0). Releases nothing
-- when the tasks it would make READY would take the topic above its queue cap: it then
-- returns one row, an empty identifier with the number of those tasks (refused).
WITH member AS (
    SELECT DISTINCT m.grp, m.identifier
    FROM (SELECT unnest(sqlc.arg(groups)::integer[]) AS grp, unnest(sqlc.arg(identifiers)::text[]) AS identifier) m
),
qualified AS (
    SELECT m.grp, m.identifier,
           CASE WHEN sqlc.arg(eternal)::boolean
                -- one part per index (migration 000009): ACTIVE through task_open, READY
                -- through task_ready_identifier, EXPIRED to RECREATED through task_identifier
                THEN EXISTS (SELECT 1 FROM task t WHERE t.state = 0 AND hashtext(t.topic) = hashtext(sqlc.arg(topic))
                                                    AND t.topic = sqlc.arg(topic) AND t.identifier = m.identifier)
                  OR EXISTS (SELECT 1 FROM task t WHERE (t.topic || E'\n' || t.identifier) = (sqlc.arg(topic) || E'\n' || m.identifier)
                                                    AND t.state = 1 AND t.topic = sqlc.arg(topic) AND t.identifier = m.identifier)
                  OR EXISTS (SELECT 1 FROM task t WHERE hashtext(t.topic) = hashtext(sqlc.arg(topic)) AND t.topic = sqlc.arg(topic)
                                                    AND t.state BETWEEN 2 AND 7 AND t.identifier = m.identifier)
                ELSE EXISTS (SELECT 1 FROM task t WHERE t.state = 4 AND hashtext(t.topic) = hashtext(sqlc.arg(topic))
                                                    AND t.topic = sqlc.arg(topic) AND t.identifier = m.identifier)
           END AS present
    FROM member m
),
complete_group AS (
    SELECT q.grp FROM qualified q GROUP BY q.grp HAVING bool_and(q.present)
),
releasable AS (
    -- the tasks the release makes READY, read without a lock: the release can only find
    -- fewer (those a concurrent transaction changed meanwhile)
    SELECT count(*) AS n FROM task t
    WHERE t.state = 4 AND hashtext(t.topic) = hashtext(sqlc.arg(topic)) AND t.topic = sqlc.arg(topic)
      AND t.identifier IN (SELECT q.identifier FROM qualified q JOIN complete_group g ON g.grp = q.grp)
),
admitted AS (
    -- the READY and ACTIVE tasks there, counted no further than the cap, plus those made
    -- READY: task_queue_admits (migration 000037) written out, since Citus routes this
    -- statement whole to the topic's node, where a function that reads task cannot run
    SELECT true AS ok FROM task_topic tt
    WHERE tt.topic = sqlc.arg(topic)
      AND (tt.queue_cap IS NULL OR (SELECT r.n FROM releasable r) = 0
           OR (SELECT count(*) FROM (SELECT 1 FROM task a
                                     WHERE a.state = 0 AND hashtext(a.topic) = hashtext(sqlc.arg(topic)) AND a.topic = sqlc.arg(topic)
                                     LIMIT tt.queue_cap + 1) a)
              + (SELECT count(*) FROM (SELECT 1 FROM task r
                                       WHERE hashtext(r.topic) = hashtext(sqlc.arg(topic)) AND r.topic = sqlc.arg(topic) AND r.state = 1
                                       LIMIT tt.queue_cap + 1) r)
              + (SELECT r.n FROM releasable r) <= tt.queue_cap)
),
released AS (
    -- READY from now, for the wait task_topic_stats counts (a later not-before stays);
    -- no longer completed (a SUSPENSION decision set the time) nor cancelled (a cancelled
    -- task reassigned SUSPENDED), as a reset
    -- The lease that ended in the SUSPENSION is handed back (returned), as a snooze's
    -- is: a suspension is no failure, and the task's retries are left whole (a task
    -- pushed SUSPENDED has no lease to hand back).
    UPDATE task t SET state = 1, not_before = GREATEST(t.not_before, now()), completed = NULL, cancelled = false,
                      returned = LEAST(t.attempt, t.returned + 1)
    FROM (SELECT DISTINCT q.identifier FROM qualified q JOIN complete_group g ON g.grp = q.grp) r
    WHERE t.state = 4 AND hashtext(t.topic) = hashtext(sqlc.arg(topic)) AND t.topic = sqlc.arg(topic)
      AND t.identifier = r.identifier AND EXISTS (SELECT 1 FROM admitted)
    RETURNING t.identifier, t.priority, t.sequence
),
notified AS (
    -- with the position of the first task released in poll order (repository.Notification)
    -- not on Citus (notify false), where the statement runs on the topic's worker: a
    -- NOTIFY there reaches no listener, and fails the PREPARE of a transaction that
    -- writes on another node too; the repository notifies on the coordinator instead
    SELECT pg_notify('task_notification', 'WORK ' || md5(sqlc.arg(topic)) || ' ' || f.priority || ' ' || f.sequence) AS sent
    FROM (SELECT r.priority, r.sequence FROM released r ORDER BY r.priority, r.sequence LIMIT 1) f
    WHERE sqlc.arg(notify)::boolean
)
SELECT x.identifier, x.refused FROM (
    SELECT DISTINCT r.identifier, 0::bigint AS refused FROM released r
    -- notified runs only when referenced: a scalar subquery in WHERE always runs
    WHERE (SELECT count(*) FROM notified) >= 0
    UNION ALL
    -- refused by the cap
    SELECT ''::text, r.n FROM releasable r WHERE r.n > 0 AND NOT EXISTS (SELECT 1 FROM admitted)
    UNION ALL
    -- an empty identifier (no task has one) for a topic nobody registered, which
    -- released nothing: said by this statement rather than a second one on the commit
    -- path of follow-ups
    SELECT ''::text, 0 WHERE NOT EXISTS (SELECT FROM task_topic tt WHERE tt.topic = sqlc.arg(topic))
) x
ORDER BY x.identifier;

-- name: TaskRateWait :one
-- How many milliseconds until the rate limit of the topic lets one more task start, when
-- it holds back due READY work now (no row otherwise: no rate limit, a token left, or
-- nothing due): what a processor whose poll came back empty waits before polling again.
-- The bucket refills at rate per rate_period_ms up to rate_burst (task_poll_limited,
-- migration 000015).
SELECT ceil((1 - b.tokens) * tt.rate_period_ms / tt.rate)::bigint AS in_ms
FROM task_topic tt
JOIN task_topic_limit l ON l.topic = tt.topic
CROSS JOIN LATERAL (
    SELECT least(tt.rate_burst::double precision,
                 l.tokens + greatest(extract(epoch FROM clock_timestamp() - l.counted), 0) * 1000 * tt.rate / tt.rate_period_ms)
           AS tokens) b
WHERE tt.topic = sqlc.arg(topic) AND tt.rate IS NOT NULL AND b.tokens < 1
  AND EXISTS (SELECT 1 FROM task t
              WHERE hashtext(t.topic) = hashtext(sqlc.arg(topic)) AND t.topic = sqlc.arg(topic) AND t.state = 1
                AND (t.not_before IS NULL OR t.not_before <= now()));

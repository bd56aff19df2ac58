-- 000040: a topic's stats (task_topic_counts, task_topic_stats) stay bounded in the two
-- cases migration 000039 did not bound, and the exact first pass is written once.
--
-- The oldest wait of a topic past 10 000 open tasks was looked for among the first 100
-- *pollable* tasks of each priority: the index (task_ready) does not hold not_before, so
-- a priority headed by many tasks not yet due (retries backing off during an outage) was
-- read whole (500 000 delayed and 1 due: 90–100 ms, like counting them all), and each
-- distinct priority cost a descent and up to 100 rows (30 000 priorities: 265 ms). Now:
-- - each priority's first entries in sequence order are taken whatever their
--   not_before, and the pollable ones among them kept (a delayed task that fell due is
--   found by the second branch, the ones that fell due first);
-- - at most 1 000 priorities are visited, the 500 polled first and the 500 polled last
--   (where tasks starve), and they share 10 000 entries, never fewer than 10 each: a
--   topic of one priority sees past 10 000 tasks backing off at its head, one of 1 000
--   past 10.
-- So the oldest wait reads at most about 11 100 index entries; a call about 10 001 for
-- the first pass, 100 001 for each capped count (six at most) and those.
--
-- task_topic_open_pass(topic) is the first pass (at most 10 001 open tasks, exact when
-- that is all), a plain SQL function the planner inlines: task_topic_stats and
-- task_topic_counts both read it. task_topic_capped_counts(topic) is the rest, which
-- task_topic_stats calls for the topics past 10 000 only, instead of task_topic_counts,
-- which ran the first pass again.
CREATE FUNCTION task_topic_open_pass(p_topic text)
RETURNS TABLE (active bigint, ready bigint, delayed bigint, expired bigint, failed bigint, suspended bigint,
               oldest_ready_age_ms bigint, seen bigint)
LANGUAGE sql STABLE AS $$
    SELECT count(*) FILTER (WHERE t.state = 0), count(*) FILTER (WHERE t.state = 1),
           count(*) FILTER (WHERE t.state = 1 AND t.not_before > now()),
           count(*) FILTER (WHERE t.state = 2), count(*) FILTER (WHERE t.state = 3),
           count(*) FILTER (WHERE t.state = 4),
           COALESCE((EXTRACT(EPOCH FROM now() - min(GREATEST(t.created, t.not_before))
                        FILTER (WHERE t.state = 1 AND (t.not_before IS NULL OR t.not_before <= now()))) * 1000)::bigint,
                    0)::bigint,
           count(*)
    FROM (SELECT r.state, r.not_before, r.created FROM task r
          WHERE hashtext(r.topic) = hashtext(p_topic) AND r.topic = p_topic AND r.state = 1
          UNION ALL
          SELECT o.state, o.not_before, o.created FROM task o
          WHERE o.state = ANY ('{0,2,3,4}') AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
          LIMIT 10001) t
$$;

COMMENT ON FUNCTION task_topic_open_pass(text) IS
    'A topic''s first 10001 open tasks counted by state, and the oldest pollable READY wait among them (seen: how many were read).';

CREATE FUNCTION task_topic_capped_counts(p_topic text)
RETURNS TABLE (active bigint, ready bigint, delayed bigint, expired bigint, failed bigint, suspended bigint,
               oldest_ready_age_ms bigint)
LANGUAGE plpgsql STABLE
SET jit = off
SET enable_bitmapscan = off
SET enable_sort = off
AS $$
BEGIN
    -- Planned at each call with the topic known (EXECUTE), so that it locks and reads
    -- the topic's own table only.
    RETURN QUERY EXECUTE $q$
    SELECT (SELECT count(*) FROM (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext($1)
                                  AND o.topic = $1 LIMIT 100001) x),
           (SELECT count(*) FROM (SELECT 1 FROM task r WHERE hashtext(r.topic) = hashtext($1) AND r.topic = $1
                                  AND r.state = 1 LIMIT 100001) x),
           (SELECT count(*) FROM (SELECT 1 FROM task d WHERE hashtext(d.topic) = hashtext($1) AND d.topic = $1
                                  AND d.state = 1 AND d.not_before > now() LIMIT 100001) x),
           (SELECT count(*) FROM (SELECT 1 FROM task o WHERE o.state = ANY ('{2,-1}') AND hashtext(o.topic) = hashtext($1)
                                  AND o.topic = $1 LIMIT 100001) x),
           (SELECT count(*) FROM (SELECT 1 FROM task o WHERE o.state = ANY ('{3,-1}') AND hashtext(o.topic) = hashtext($1)
                                  AND o.topic = $1 LIMIT 100001) x),
           (SELECT count(*) FROM (SELECT 1 FROM task o WHERE o.state = ANY ('{4,-1}') AND hashtext(o.topic) = hashtext($1)
                                  AND o.topic = $1 LIMIT 100001) x),
           COALESCE((EXTRACT(EPOCH FROM now() - LEAST(
               (WITH RECURSIVE first_levels(priority, n) AS (
                    (SELECT r.priority, 1 FROM task r WHERE hashtext(r.topic) = hashtext($1) AND r.topic = $1
                       AND r.state = 1
                     ORDER BY r.priority LIMIT 1)
                    UNION ALL
                    SELECT (SELECT r.priority FROM task r WHERE hashtext(r.topic) = hashtext($1) AND r.topic = $1
                              AND r.state = 1 AND r.priority > l.priority
                            ORDER BY r.priority LIMIT 1), l.n + 1
                    FROM first_levels l WHERE l.priority IS NOT NULL AND l.n < 500),
                last_levels(priority, n) AS (
                    (SELECT r.priority, 1 FROM task r WHERE hashtext(r.topic) = hashtext($1) AND r.topic = $1
                       AND r.state = 1
                     ORDER BY r.priority DESC LIMIT 1)
                    UNION ALL
                    SELECT (SELECT r.priority FROM task r WHERE hashtext(r.topic) = hashtext($1) AND r.topic = $1
                              AND r.state = 1 AND r.priority < l.priority
                            ORDER BY r.priority DESC LIMIT 1), l.n + 1
                    FROM last_levels l WHERE l.priority IS NOT NULL AND l.n < 500),
                levels AS MATERIALIZED (
                    SELECT priority FROM first_levels WHERE priority IS NOT NULL
                    UNION
                    SELECT priority FROM last_levels WHERE priority IS NOT NULL)
                SELECT min(GREATEST(h.created, h.not_before)) FROM levels l
                CROSS JOIN LATERAL (SELECT r.created, r.not_before FROM task r
                                    WHERE hashtext(r.topic) = hashtext($1) AND r.topic = $1 AND r.state = 1
                                      AND r.priority = l.priority
                                    ORDER BY r.sequence
                                    LIMIT (SELECT GREATEST(10, 10000 / count(*)) FROM levels)) h
                WHERE h.not_before IS NULL OR h.not_before <= now()),
               (SELECT min(GREATEST(d.created, d.not_before))
                FROM (SELECT d.created, d.not_before FROM task d
                      WHERE hashtext(d.topic) = hashtext($1) AND d.topic = $1 AND d.state = 1
                        AND d.not_before IS NOT NULL AND d.not_before <= now()
                      ORDER BY d.not_before LIMIT 100) d))) * 1000)::bigint, 0)::bigint
    $q$ USING p_topic;
END
$$;

COMMENT ON FUNCTION task_topic_capped_counts(text) IS
    'A topic''s open tasks by state, each count stopping at 100001, and the oldest pollable READY wait among the heads of its priorities (task_topic_counts past 10000 open tasks).';

CREATE OR REPLACE FUNCTION task_topic_counts(p_topic text)
RETURNS TABLE (active bigint, ready bigint, delayed bigint, expired bigint, failed bigint, suspended bigint,
               oldest_ready_age_ms bigint)
LANGUAGE plpgsql STABLE
SET jit = off
SET enable_bitmapscan = off
SET enable_sort = off
AS $$
DECLARE
    v_seen bigint;
BEGIN
    -- EXECUTE: planned with the topic known, so that it locks the topic's table only;
    -- the topic as a literal, not a parameter: Citus plans no parameterized call of an
    -- SQL function that reads a distributed table.
    EXECUTE format('SELECT * FROM task_topic_open_pass(%L)', p_topic)
    INTO active, ready, delayed, expired, failed, suspended, oldest_ready_age_ms, v_seen;
    IF v_seen <= 10000 THEN
        RETURN NEXT;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM task_topic_capped_counts(p_topic);
END
$$;

CREATE OR REPLACE FUNCTION task_topic_stats(p_topics text[])
RETURNS TABLE (topic text, active bigint, ready bigint, delayed bigint, expired bigint, failed bigint,
               suspended bigint, oldest_ready_age_ms bigint, rows_estimate bigint)
LANGUAGE sql STABLE
SET jit = off
AS $$
    WITH shares AS MATERIALIZED (SELECT * FROM task_table_shares(ARRAY(SELECT DISTINCT partition FROM task_topic)))
    SELECT tt.topic, s.active, s.ready, s.delayed, s.expired, s.failed, s.suspended, s.oldest_ready_age_ms,
           round(CASE WHEN tt.dedicated THEN sh.row_count
                      ELSE sh.row_count * COALESCE(sh.shares[array_position(sh.topics, tt.topic)], sh.other_share, 0)
                 END)::bigint
    FROM task_topic tt
    LEFT JOIN shares sh ON sh.table_name = tt.partition
    -- the first pass, inlined (a call per topic would cost as much again with thousands
    -- of small topics)
    CROSS JOIN LATERAL task_topic_open_pass(tt.topic) a
    -- the rest for the topics of more than 10 000 open tasks only: OFFSET 0 keeps the
    -- condition inside, a one-time filter, so the others do not call it
    LEFT JOIN LATERAL (SELECT * FROM task_topic_capped_counts(tt.topic) WHERE a.seen > 10000 OFFSET 0) c ON true
    CROSS JOIN LATERAL (SELECT COALESCE(c.active, a.active) AS active, COALESCE(c.ready, a.ready) AS ready,
                               COALESCE(c.delayed, a.delayed) AS delayed, COALESCE(c.expired, a.expired) AS expired,
                               COALESCE(c.failed, a.failed) AS failed, COALESCE(c.suspended, a.suspended) AS suspended,
                               COALESCE(c.oldest_ready_age_ms, a.oldest_ready_age_ms) AS oldest_ready_age_ms) s
    WHERE cardinality(p_topics) = 0 OR tt.topic = ANY (p_topics)
$$;

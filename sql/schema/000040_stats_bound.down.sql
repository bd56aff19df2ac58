-- 000040 reverted: task_topic_counts and task_topic_stats as 000039 left them, and no
-- task_topic_open_pass or task_topic_capped_counts.
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
    -- Both statements run through EXECUTE, planned at each call with the topic known,
    -- so that they lock and read the topic's own table only (a kept plan would lock
    -- every table of task: thousands with dedicated topics).
    -- At most 10 001 open tasks in one pass, as before 000039: exact when that is all.
    EXECUTE $q$
    SELECT count(*) FILTER (WHERE t.state = 0), count(*) FILTER (WHERE t.state = 1),
           count(*) FILTER (WHERE t.state = 1 AND t.not_before > now()),
           count(*) FILTER (WHERE t.state = 2), count(*) FILTER (WHERE t.state = 3),
           count(*) FILTER (WHERE t.state = 4),
           COALESCE((EXTRACT(EPOCH FROM now() - min(GREATEST(t.created, t.not_before))
                        FILTER (WHERE t.state = 1 AND (t.not_before IS NULL OR t.not_before <= now()))) * 1000)::bigint, 0),
           count(*)
    FROM (SELECT r.state, r.not_before, r.created FROM task r
          WHERE hashtext(r.topic) = hashtext($1) AND r.topic = $1 AND r.state = 1
          UNION ALL
          SELECT o.state, o.not_before, o.created FROM task o
          WHERE o.state = ANY ('{0,2,3,4}') AND hashtext(o.topic) = hashtext($1) AND o.topic = $1
          LIMIT 10001) t
    $q$ INTO active, ready, delayed, expired, failed, suspended, oldest_ready_age_ms, v_seen USING p_topic;
    IF v_seen <= 10000 THEN
        RETURN NEXT;
        RETURN;
    END IF;
    -- More: each state on its own, up to 100 001, and the oldest wait among the heads.
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
               (WITH RECURSIVE level(priority) AS (
                    (SELECT r.priority FROM task r WHERE hashtext(r.topic) = hashtext($1) AND r.topic = $1
                       AND r.state = 1
                     ORDER BY r.priority LIMIT 1)
                    UNION ALL
                    SELECT (SELECT r.priority FROM task r WHERE hashtext(r.topic) = hashtext($1) AND r.topic = $1
                              AND r.state = 1 AND r.priority > l.priority
                            ORDER BY r.priority LIMIT 1)
                    FROM level l WHERE l.priority IS NOT NULL)
                SELECT min(h.since) FROM level l
                CROSS JOIN LATERAL (SELECT GREATEST(r.created, r.not_before) AS since FROM task r
                                    WHERE hashtext(r.topic) = hashtext($1) AND r.topic = $1 AND r.state = 1
                                      AND r.priority = l.priority AND (r.not_before IS NULL OR r.not_before <= now())
                                    ORDER BY r.sequence LIMIT 100) h),
               (SELECT min(GREATEST(d.created, d.not_before))
                FROM (SELECT d.created, d.not_before FROM task d
                      WHERE hashtext(d.topic) = hashtext($1) AND d.topic = $1 AND d.state = 1
                        AND d.not_before IS NOT NULL AND d.not_before <= now()
                      ORDER BY d.not_before LIMIT 100) d))) * 1000)::bigint, 0)::bigint
    $q$ USING p_topic;
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
    -- the first pass of task_topic_counts inline: a call of it per topic would cost as
    -- much again with thousands of small topics
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE t.state = 0)                          AS active,
               count(*) FILTER (WHERE t.state = 1)                          AS ready,
               count(*) FILTER (WHERE t.state = 1 AND t.not_before > now()) AS delayed,
               count(*) FILTER (WHERE t.state = 2)                          AS expired,
               count(*) FILTER (WHERE t.state = 3)                          AS failed,
               count(*) FILTER (WHERE t.state = 4)                          AS suspended,
               COALESCE((EXTRACT(EPOCH FROM now() - min(GREATEST(t.created, t.not_before))
                            FILTER (WHERE t.state = 1 AND (t.not_before IS NULL OR t.not_before <= now()))) * 1000)::bigint,
                        0)::bigint AS oldest_ready_age_ms,
               count(*) AS seen
        FROM (SELECT r.state, r.not_before, r.created FROM task r
              WHERE hashtext(r.topic) = hashtext(tt.topic) AND r.topic = tt.topic AND r.state = 1
              UNION ALL
              SELECT o.state, o.not_before, o.created FROM task o
              WHERE o.state = ANY ('{0,2,3,4}') AND hashtext(o.topic) = hashtext(tt.topic) AND o.topic = tt.topic
              LIMIT 10001) t
    ) a
    -- task_topic_counts for the topics of more than 10 000 open tasks only: OFFSET 0
    -- keeps the condition inside, a one-time filter, so the others do not call it (pulled
    -- up into the join, it was called for every topic and then thrown away: 10 000
    -- topics took 4.0 s where the counts of before took 1.3)
    LEFT JOIN LATERAL (SELECT * FROM task_topic_counts(tt.topic) WHERE a.seen > 10000 OFFSET 0) c ON true
    CROSS JOIN LATERAL (SELECT COALESCE(c.active, a.active) AS active, COALESCE(c.ready, a.ready) AS ready,
                               COALESCE(c.delayed, a.delayed) AS delayed, COALESCE(c.expired, a.expired) AS expired,
                               COALESCE(c.failed, a.failed) AS failed, COALESCE(c.suspended, a.suspended) AS suspended,
                               COALESCE(c.oldest_ready_age_ms, a.oldest_ready_age_ms) AS oldest_ready_age_ms) s
    WHERE cardinality(p_topics) = 0 OR tt.topic = ANY (p_topics)
$$;

DROP FUNCTION task_topic_capped_counts(text);
DROP FUNCTION task_topic_open_pass(text);

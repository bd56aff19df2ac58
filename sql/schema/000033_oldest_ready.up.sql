-- 000033: a READY task waits from when it became pollable: its push, or its not-before
-- time when that is later. task_topic_stats (and TopicStats, and task_citus_stats on
-- Citus) counted from the not-before time alone, so a task pushed with a not-before in
-- the past (2020, say) was reported waiting for years (pgtask_queue_oldest_ready_seconds,
-- oldest_ready_ms) as soon as it was pushed. A retried task's not-before, after its push,
-- counts as before.
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
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE t.state = 0)                          AS active,
               count(*) FILTER (WHERE t.state = 1)                          AS ready,
               count(*) FILTER (WHERE t.state = 1 AND t.not_before > now()) AS delayed,
               count(*) FILTER (WHERE t.state = 2)                          AS expired,
               count(*) FILTER (WHERE t.state = 3)                          AS failed,
               count(*) FILTER (WHERE t.state = 4)                          AS suspended,
               COALESCE((EXTRACT(EPOCH FROM now() - min(GREATEST(t.created, t.not_before))
                            FILTER (WHERE t.state = 1 AND (t.not_before IS NULL OR t.not_before <= now()))) * 1000)::bigint,
                        0)::bigint AS oldest_ready_age_ms
        FROM (SELECT r.state, r.not_before, r.created FROM task r
              WHERE hashtext(r.topic) = hashtext(tt.topic) AND r.topic = tt.topic AND r.state = 1
              UNION ALL
              SELECT o.state, o.not_before, o.created FROM task o
              WHERE o.state = ANY ('{0,2,3,4}') AND hashtext(o.topic) = hashtext(tt.topic) AND o.topic = tt.topic) t
    ) s
    WHERE cardinality(p_topics) = 0 OR tt.topic = ANY (p_topics)
$$;

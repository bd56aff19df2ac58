-- 000039 reverted: task_topic_stats as 000033 left it, and no task_topic_counts.
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

DROP FUNCTION task_topic_counts(text);

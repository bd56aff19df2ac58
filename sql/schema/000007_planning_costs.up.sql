-- 000007: less work for the planner and for the statistics a processor refreshes
-- (issue 5).
--
-- TaskPush is planned at every execution: its topic is a parameter and the table is
-- partitioned by topic, so only a custom plan prunes to the topic's partition. Planning
-- it cost about 0.5 ms, a fifth of pushing 200 tasks, and most of that went to the two
-- counts of the cap test, which read task twice. As a function call the push statement
-- no longer plans those counts; topics without a cap skip them altogether, and for the
-- others plpgsql plans them when the function runs.
--
-- task_queue_admits tells whether a topic with queue cap p_cap can take p_live more READY
-- or ACTIVE tasks: the ones already there are counted no further than the cap, ACTIVE
-- ones through task_open, READY ones through task_ready.
CREATE FUNCTION task_queue_admits(p_topic text, p_cap bigint, p_live bigint) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_active bigint;
    v_ready  bigint;
BEGIN
    IF p_cap IS NULL THEN
        RETURN true;
    END IF;
    SELECT count(*) INTO v_active
    FROM (SELECT 1 FROM task t WHERE t.topic = p_topic AND t.state = 0 LIMIT p_cap + 1) a;
    SELECT count(*) INTO v_ready
    FROM (SELECT 1 FROM task t WHERE t.topic = p_topic AND t.state = 1 LIMIT p_cap + 1) r;
    RETURN v_active + v_ready + p_live <= p_cap;
END
$$;

-- A processor refreshes a young topic's statistics as it grows (task_topic_analyze).
-- At the default statistics target ANALYZE samples 30 000 rows: 180 ms on a partition
-- of a million rows, several times a minute while a topic doubles under load. The plans
-- of pgtask's statements need only the row count and the shape of a few small columns
-- (state, priority, not_before): a sample of 3 000 rows gives both, in 15 ms. The
-- target applies to this function's ANALYZE only; autovacuum's keeps the server's. A
-- later migration that replaces task_topic_analyze must repeat the setting.
ALTER FUNCTION task_topic_analyze(text) SET default_statistics_target = 10;

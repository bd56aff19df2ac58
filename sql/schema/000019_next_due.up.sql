-- 000019: the due-time probe reads task_delayed, whatever the statistics say.
--
-- After a poll finds nothing, a processor asks when the topic's next delayed task falls
-- due (Repository.NextDue): the first READY task by not_before, which task_delayed
-- (hashtext(topic), not_before) WHERE state = 1 AND not_before IS NOT NULL gives in one
-- probe. With statistics taken while the topic had no READY task, the planner chose
-- task_ready instead (its estimate: one row, then sort it) and read every READY entry of
-- the topic, dead ones included: under a snapshot held for minutes at 20 000 tasks/s,
-- 430 ms per probe, taken in the poll loop after every empty poll. Here the probe runs
-- with sorting disabled, which leaves task_delayed, already in not_before order, as the
-- only plan that is not penalized.
-- plpgsql, not SQL: a SQL function's statement is planned without the topic's value, and
-- would lock every table of task before pruning them (TestHotStatementsLockBoundedRelations).
CREATE FUNCTION task_next_due(p_topic text, p_seen_ms bigint)
RETURNS TABLE (in_ms bigint, priority smallint, sequence bigint)
LANGUAGE plpgsql VOLATILE
SET enable_sort = off
AS $$
BEGIN
    RETURN QUERY
    SELECT ceil(extract(epoch FROM t.not_before - clock_timestamp()) * 1000)::bigint, t.priority, t.sequence
    FROM task t
    WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic
      AND t.state = 1 AND t.not_before IS NOT NULL
      AND t.not_before > now() - p_seen_ms * interval '1 millisecond'
    ORDER BY t.not_before
    LIMIT 1;
END
$$;

-- 000012: a poll may start from a position (priority, sequence) of the topic's READY
-- tasks instead of its head.
--
-- A transaction that holds a snapshot (a forgotten REPEATABLE READ session, a long
-- report, a replica's hot_standby_feedback) keeps every row version that went out of
-- READY after it began: their entries in task_ready can neither be removed nor marked
-- dead, and a poll from the head of the topic reads each of them, and its row, before it
-- reaches a task it can lease. A processor that remembers where its last poll found work
-- starts its next poll there: the index scan begins at that position and reads nothing
-- before it. Only FIFO polls without a condition take a position; the others, and a poll
-- given none (NULL), are the four-argument function of 000009.
CREATE FUNCTION task_poll_candidates(p_topic text, p_lifo boolean, p_condition smallint, p_size integer,
                                     p_from_priority smallint, p_from_sequence bigint)
RETURNS SETOF tid
LANGUAGE plpgsql VOLATILE
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
BEGIN
    IF p_from_sequence IS NULL OR p_lifo OR p_condition <> 0 THEN
        RETURN QUERY SELECT c FROM task_poll_candidates(p_topic, p_lifo, p_condition, p_size) c;
        RETURN;
    END IF;
    -- the row comparison positions the scan of task_ready (hashtext(topic), priority,
    -- sequence) at the position itself
    RETURN QUERY
        SELECT t.ctid FROM task t
        WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
          AND (t.priority, t.sequence) >= (p_from_priority, p_from_sequence)
          AND (t.not_before IS NULL OR t.not_before <= now())
        ORDER BY t.priority, t.sequence
        LIMIT p_size
        FOR UPDATE OF t SKIP LOCKED;
END
$$;

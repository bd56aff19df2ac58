-- 000061 reverted: task_poll_candidates as 000021 made it (with 000027's settings): a
-- conditional poll takes no turn.

CREATE OR REPLACE FUNCTION task_poll_candidates(p_topic text, p_lifo boolean, p_condition smallint, p_size integer,
                                                p_from_priority smallint, p_from_sequence bigint)
RETURNS SETOF tid
LANGUAGE plpgsql VOLATILE
SET enable_sort = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
    v_concurrency integer;
    v_key_limit   integer;
    v_rate        integer;
    v_period_ms   bigint;
    v_burst       integer;
    v_fair        boolean;
BEGIN
    SELECT tt.concurrency, tt.key_concurrency, tt.rate, tt.rate_period_ms, tt.rate_burst, tt.fair
    INTO v_concurrency, v_key_limit, v_rate, v_period_ms, v_burst, v_fair
    FROM task_topic tt WHERE tt.topic = p_topic;
    IF v_concurrency IS NOT NULL OR v_key_limit IS NOT NULL OR v_rate IS NOT NULL OR v_fair THEN
        RETURN QUERY SELECT c FROM task_poll_limited(p_topic, p_lifo, p_condition, p_size, v_concurrency, v_key_limit,
                                                     v_rate, v_period_ms, v_burst, v_fair, p_from_priority,
                                                     p_from_sequence) c;
        RETURN;
    END IF;
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

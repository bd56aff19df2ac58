-- 000054 reverted: task_complete_poll as 000026 made it (the lease in the statement that
-- chooses), and no task_poll.

CREATE OR REPLACE FUNCTION task_complete_poll(p_topic text, p_owner text, p_sequences bigint[], p_attempts integer[],
                                              p_results smallint[], p_outputs text[], p_delays_ms bigint[],
                                              p_lifo boolean, p_condition smallint, p_size integer,
                                              p_from_priority smallint, p_from_sequence bigint)
RETURNS SETOF task
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_done        integer;
    v_concurrency integer;
    v_alone       boolean; -- limited by concurrency alone
    v_chosen      tid[];
BEGIN
    RETURN QUERY SELECT * FROM task_complete(p_topic, p_owner, p_sequences, p_attempts, p_results, p_outputs,
                                             p_delays_ms);
    GET DIAGNOSTICS v_done = ROW_COUNT;
    IF v_done < cardinality(p_sequences) OR p_size < 1 THEN
        RETURN;
    END IF;
    SELECT tt.concurrency, tt.key_concurrency IS NULL AND tt.rate IS NULL AND NOT tt.fair
    INTO v_concurrency, v_alone
    FROM task_topic tt WHERE tt.topic = p_topic;
    IF v_concurrency IS NOT NULL AND v_alone AND NOT p_lifo AND p_condition = 0 THEN
        SELECT h.p_chosen, h.p_rest INTO v_chosen, p_size
        FROM task_hand_over(p_topic, v_done, v_concurrency, p_size, p_from_priority, p_from_sequence) h;
        IF cardinality(v_chosen) > 0 THEN
            RETURN QUERY
                WITH leased AS (
                    UPDATE task t SET state = 0, owner = p_owner, attempt = t.attempt + 1
                    WHERE t.topic = p_topic AND t.ctid = ANY (v_chosen)
                    RETURNING t.*
                )
                SELECT * FROM leased;
        END IF;
        IF p_size < 1 THEN
            RETURN;
        END IF;
    END IF;
    -- as TaskPoll: rows found by their address, the UPDATE pruned by the topic
    RETURN QUERY
        WITH leased AS (
            UPDATE task t SET state = 0, owner = p_owner, attempt = t.attempt + 1
            WHERE t.topic = p_topic
              AND t.ctid = ANY (ARRAY(SELECT task_poll_candidates(p_topic, p_lifo, p_condition, p_size,
                                                                  p_from_priority, p_from_sequence)))
            RETURNING t.*
        )
        SELECT * FROM leased;
END
$$;

DROP FUNCTION task_poll(text, text, boolean, smallint, integer, smallint, bigint);

-- Reverts 000026: task_complete_poll as 000022 made it, without task_hand_over.

CREATE OR REPLACE FUNCTION task_complete_poll(p_topic text, p_owner text, p_sequences bigint[], p_attempts integer[],
                                   p_results smallint[], p_outputs text[], p_delays_ms bigint[],
                                   p_lifo boolean, p_condition smallint, p_size integer,
                                   p_from_priority smallint, p_from_sequence bigint)
RETURNS SETOF task
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_done integer;
BEGIN
    RETURN QUERY SELECT * FROM task_complete(p_topic, p_owner, p_sequences, p_attempts, p_results, p_outputs,
                                             p_delays_ms);
    GET DIAGNOSTICS v_done = ROW_COUNT;
    IF v_done < cardinality(p_sequences) OR p_size < 1 THEN
        RETURN;
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


DROP FUNCTION task_hand_over(text, integer, integer, integer, smallint, bigint);

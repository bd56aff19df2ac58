-- 000022: a limited topic's processor completes a batch and leases the next in ONE
-- statement (issue 20).
--
-- Under a concurrency limit a task holds its slot from the commit that leases it to the
-- commit that completes it, so a limited topic with fast handlers runs a chain: complete
-- a batch, lease the next with the slots it freed, hand it to the handlers, again. Since
-- f7171f1 the completion and the lease share a transaction, but as five round trips
-- (BEGIN, the completion in a savepoint, the poll, COMMIT), each a wait of the
-- processor's and of the server's, with nothing else for either to do meanwhile.
-- task_complete_poll makes them one statement: task_complete (000011, 000017) as it is,
-- then, when every decision qualified, the poll of task_poll_candidates (000021) from
-- the position, which sees the tasks just completed as no longer ACTIVE (each statement
-- of a PL/pgSQL function sees the effects of the ones before it). Completed rows come
-- first and are never ACTIVE; leased rows are: a caller tells them apart by state. When
-- a decision does not qualify, task_complete raises PT005 as before and nothing changes;
-- when none does (or the topic is unknown), nothing is leased either.
CREATE FUNCTION task_complete_poll(p_topic text, p_owner text, p_sequences bigint[], p_attempts integer[],
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


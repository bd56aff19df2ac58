-- 000054: a limited topic's poll leases what it chose after waiting for its turn.
--
-- A limited topic's poll chooses its tasks under the topic's advisory lock
-- (task_poll_limited), inside the statement that leases them (TaskPoll's UPDATE, the
-- last statement of task_complete_poll). That statement's snapshot is taken before the
-- function runs, so a poll that waited for the lock chose, with snapshots of after the
-- wait, tasks its UPDATE could not see: one pushed, or made READY again, during the
-- wait was charged (a rate token, a key's turn), locked and left READY. A rate limit
-- under contention delivered less than its rate.
--
-- task_poll chooses the tasks in one statement and leases them in the next, whose
-- snapshot is taken once the choice holds the lock and its rows: every task chosen is
-- seen, as on Citus (task_citus_poll). The repository polls a limited topic through it
-- (TaskPollLimited); an unlimited topic's poll stays the one statement it was (TaskPoll).
-- task_complete_poll, as 000026 made it, leases through task_poll when it polls.
-- Rows are kept as they are.

CREATE FUNCTION task_poll(p_topic text, p_owner text, p_lifo boolean, p_condition smallint, p_size integer,
                          p_from_priority smallint, p_from_sequence bigint)
RETURNS SETOF task
LANGUAGE plpgsql VOLATILE
SET jit = off
AS $$
DECLARE
    v_tids tid[];
BEGIN
    -- the choice (under the topic's lock when the topic is limited) locks its rows:
    -- their addresses hold until this transaction ends
    v_tids := ARRAY(SELECT task_poll_candidates(p_topic, p_lifo, p_condition, p_size, p_from_priority, p_from_sequence));
    IF cardinality(v_tids) = 0 THEN
        RETURN;
    END IF;
    -- a statement of its own: its snapshot sees every row the choice took
    RETURN QUERY
        WITH leased AS (
            UPDATE task t SET state = 0, owner = p_owner, attempt = t.attempt + 1
            WHERE t.topic = p_topic AND t.ctid = ANY (v_tids)
            RETURNING t.*
        )
        SELECT * FROM leased;
END
$$;

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
    -- the choice and the lease in statements of their own (000054)
    RETURN QUERY SELECT * FROM task_poll(p_topic, p_owner, p_lifo, p_condition, p_size, p_from_priority,
                                         p_from_sequence);
END
$$;

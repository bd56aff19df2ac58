-- 000061: under SINGULAR_BY_IDENTIFIER and the conditions built on it, a poll leasing a
-- task of an identifier, not committed yet, keeps every other poll from leasing another
-- task of that identifier. Their snapshots saw the task READY, not ACTIVE (its lease not
-- committed), and a READY task holds back only those after it in poll order: under LIFO
-- the newer task of the identifier, pushed meanwhile, went to a second poll while the
-- first one's lease was in flight; under FIFO an older one did (its push committed after
-- the newer's, or revived by a reset or a junction); both then ran at once, against
-- design.md §4.3's "at most one task per identifier in flight".
--
-- A conditional poll of a topic now takes its turn under the topic's transaction-scoped
-- advisory lock, the one a limited topic's polls take (000015), and chooses its tasks
-- after it, in statements that see every lease committed before: a lease in flight holds
-- the lock until it commits. The conditional polls of one topic run one at a time (an
-- unconditional poll, or another topic's, waits for nothing); a poll in a transaction of
-- the caller's holds the turn until that transaction ends, and one under REPEATABLE READ
-- chooses by its transaction's snapshot. task_poll_candidates (the six-argument form
-- every unlimited poll goes through, 000021, with 000027's settings) is restated whole.
-- A limited topic's polls take the lock already (task_poll_limited).

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
    IF p_condition <> 0 THEN
        -- the topic's turn (the lock of a limited topic's polls, 000015), then the choice
        -- in statements of their own, which see every lease committed before the turn
        PERFORM pg_advisory_xact_lock(1885828451, hashtext(p_topic));
        RETURN QUERY SELECT c FROM task_poll_candidates(p_topic, p_lifo, p_condition, p_size) c;
        RETURN;
    END IF;
    IF p_from_sequence IS NULL OR p_lifo THEN
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

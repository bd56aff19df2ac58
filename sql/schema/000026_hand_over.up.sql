-- 000026: a limited topic's processor hands the slots its completions free over to the
-- next tasks without the topic's lock (issue 20).
--
-- task_complete_poll (000022) completes a batch and then leases the next through
-- task_poll_candidates and task_poll_limited: the topic's advisory lock, held to the
-- commit, a count of its ACTIVE tasks, the limit's settings read twice, five statements
-- in two more functions. A completion that leases no more tasks than it completed, in
-- the same transaction, cannot raise the topic's ACTIVE count, whatever runs beside it:
-- the tasks it leases take the slots its own decisions free at the same commit, and
-- every lease that could raise the count still takes the lock (a poll, or a hand-over
-- with room to spare, below). So for a topic limited by concurrency alone (no per-key
-- limit, no rate, not fair), polled FIFO without a condition, task_complete_poll now
-- counts the ACTIVE tasks left after its completions, without the lock, and leases
--   min(tasks completed, size, limit - ACTIVE left)
-- READY tasks from the position, as an unlimited poll reads them (000012): task_hand_over
-- counts and picks them, task_complete_poll leases them by their address. The count only
-- lowers that number: a limit lowered since the batch was leased holds from this
-- statement on. When the limit leaves more room than that (it was raised, or other
-- processes' tasks finished), the rest is leased as before, under the lock, which counts
-- the tasks just handed over. Other topics, LIFO polls and polls under a condition take
-- the path of 000022 unchanged.
--
-- A processor's chain at the limit (complete the batch, lease the next, hand it to the
-- handlers, again) so pays one lock-free statement and its commit per batch, and the
-- hand-overs of several processes sharing a limit no longer take the lock in turn, each
-- holding it to its commit (what one chain gains: BENCHMARKS.md, "Limits", little). The
-- settings are read without the lock, as a poll reads them before it takes it: a
-- completion that read them just before a per-key limit, a rate or fairness was set
-- hands its slots over once more as before the change (a key may then pass its limit
-- until those tasks finish). task_hand_over, like task_poll_candidates, keeps its
-- statements off sorts and bitmap scans (a generic plan made on a near-empty table would
-- read every READY task, or every ACTIVE one for the count), and sets jit off: a plan
-- costed with a disabled node would otherwise be compiled at each call.

CREATE FUNCTION task_hand_over(p_topic text, p_freed integer, p_concurrency integer, p_size integer,
                               p_from_priority smallint, p_from_sequence bigint,
                               OUT p_chosen tid[], OUT p_rest integer)
LANGUAGE plpgsql VOLATILE
SET enable_sort = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
    v_room integer;
    v_take integer;
BEGIN
    -- the ACTIVE tasks left: the caller's completions are seen, others' uncommitted
    -- leases are not (those take the lock, and count these at their turn)
    SELECT p_concurrency - count(*) INTO v_room
    FROM (SELECT 1 FROM task t WHERE t.state = 0 AND hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic
          LIMIT p_concurrency) a;
    v_take := greatest(least(p_freed, p_size, v_room), 0);
    -- as a FIFO poll from the position (000012), from the head without one
    p_chosen := ARRAY(SELECT t.ctid FROM task t
                      WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                        AND (t.priority, t.sequence) >= (coalesce(p_from_priority, (-32768)::smallint),
                                                         coalesce(p_from_sequence, (-9223372036854775807 - 1)::bigint))
                        AND (t.not_before IS NULL OR t.not_before <= now())
                      ORDER BY t.priority, t.sequence
                      LIMIT v_take
                      FOR UPDATE OF t SKIP LOCKED);
    -- room beyond the slots freed is the lock's to give
    p_rest := CASE WHEN v_room > v_take AND p_size > v_take THEN p_size - v_take ELSE 0 END;
END
$$;

COMMENT ON FUNCTION task_hand_over(text, integer, integer, integer, smallint, bigint) IS
    'Picks and locks, without the topic''s lock, up to p_freed READY tasks of a topic limited to p_concurrency, in FIFO order from the position, for a caller whose completions in the same transaction freed p_freed slots; p_rest is how many more the caller may lease under the lock (task_complete_poll, migration 000026).';

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

-- 000009: a FIFO poll of condition NONE can start its scan where the previous one leased
-- (issue 5).
--
-- A poll reads task_ready from its head, the lowest priority and sequence first. The
-- entries of the tasks leased before stay there, dead, until VACUUM removes them: no
-- insert reaches those pages (pushes add entries at the other end), so nothing else
-- reclaims them, and every poll steps over all of them before it reaches a READY task.
-- Under a sustained load that is hundreds of thousands of entries per poll between two
-- VACUUMs. Given a start (p_from_priority, p_from_sequence), which a processor takes from
-- the first task of its previous batch, the poll reads, in this order and up to p_size
-- in all:
--   1. READY tasks of a lower priority value than the start's, from the head (more urgent
--      work pushed meanwhile: in a topic that uses one priority this finds no entry at
--      all);
--   2. READY tasks from the start on, in poll order;
--   3. only when those were fewer than p_size: the rest of the start's priority below
--      the start, from the head.
-- A task that became READY below the start at the start's priority (a retry or snooze
-- falling due, an expiry, a revival, a junction release, a push committed after younger
-- ones) is therefore leased once the backlog after the start runs short, or by the next
-- poll from the head, which processors make at least once a second
-- (processor.ManagerConfig.RescanInterval). Without a start, and for LIFO and the
-- SINGULAR conditions, the poll is what it was: the 4-argument function, renamed
-- task_poll_candidates_from_head.

ALTER FUNCTION task_poll_candidates(text, boolean, smallint, integer) RENAME TO task_poll_candidates_from_head;

CREATE FUNCTION task_poll_candidates(p_topic text, p_lifo boolean, p_condition smallint, p_size integer,
                                     p_from_priority smallint, p_from_sequence bigint)
RETURNS SETOF tid
LANGUAGE plpgsql VOLATILE
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_left integer := p_size;
    v_got  integer;
BEGIN
    IF p_from_priority IS NULL OR p_from_sequence IS NULL OR p_lifo OR p_condition <> 0 OR p_size <= 0 THEN
        RETURN QUERY SELECT task_poll_candidates_from_head(p_topic, p_lifo, p_condition, p_size);
        RETURN;
    END IF;
    RETURN QUERY
        SELECT t.ctid FROM task t
        WHERE t.topic = p_topic AND t.state = 1 AND t.priority < p_from_priority
          AND (t.not_before IS NULL OR t.not_before <= now())
        ORDER BY t.priority, t.sequence
        LIMIT v_left
        FOR UPDATE OF t SKIP LOCKED;
    GET DIAGNOSTICS v_got = ROW_COUNT;
    v_left := v_left - v_got;
    IF v_left > 0 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE t.topic = p_topic AND t.state = 1 AND (t.priority, t.sequence) >= (p_from_priority, p_from_sequence)
              AND (t.not_before IS NULL OR t.not_before <= now())
            ORDER BY t.priority, t.sequence
            LIMIT v_left
            FOR UPDATE OF t SKIP LOCKED;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
    END IF;
    IF v_left > 0 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE t.topic = p_topic AND t.state = 1 AND t.priority = p_from_priority AND t.sequence < p_from_sequence
              AND (t.not_before IS NULL OR t.not_before <= now())
            ORDER BY t.priority, t.sequence
            LIMIT v_left
            FOR UPDATE OF t SKIP LOCKED;
    END IF;
END
$$;

-- task_poll_candidates selects the READY tasks a poll leases (design section 4.3), locks
-- them (FOR UPDATE SKIP LOCKED) and returns their row addresses (ctid), by which TaskPoll
-- then marks them ACTIVE: a TID scan, whatever plan a cached prepared statement holds.
--
-- Why a function: a queue's READY set changes faster than planner statistics (a young
-- topic has none at all), and without them PostgreSQL may read and sort the whole
-- backlog on every poll instead of walking the ready index in order. The SET clauses
-- make the ordered index scan the only plan, whatever the statistics say. Each order and
-- condition is its own static statement, so each gets its own cached plan and no
-- condition pays for the exclusions of another.
CREATE FUNCTION task_poll_candidates(p_topic text, p_lifo boolean, p_condition smallint, p_size integer)
RETURNS SETOF tid
LANGUAGE plpgsql VOLATILE
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
BEGIN
    IF NOT p_lifo AND p_condition = 0 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
            ORDER BY t.priority, t.sequence
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSIF NOT p_lifo AND p_condition = 1 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state IN (0, 1)
                              AND o.identifier = t.identifier AND o.sequence < t.sequence)
            ORDER BY t.priority, t.sequence
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSIF NOT p_lifo AND p_condition = 2 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state IN (0, 1)
                              AND o.identifier = t.identifier AND o.sequence < t.sequence)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state IN (2, 3)
                              AND o.identifier = t.identifier)
            ORDER BY t.priority, t.sequence
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSIF NOT p_lifo AND p_condition = 3 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state IN (0, 1)
                              AND o.identifier = t.identifier AND o.sequence < t.sequence)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state IN (2, 3)
                              AND o.identifier = t.identifier)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state = 4
                              AND o.identifier = t.identifier)
            ORDER BY t.priority, t.sequence
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSIF p_lifo AND p_condition = 0 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
            ORDER BY t.priority, t.sequence DESC
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSIF p_lifo AND p_condition = 1 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state IN (0, 1)
                              AND o.identifier = t.identifier AND o.sequence > t.sequence)
            ORDER BY t.priority, t.sequence DESC
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSIF p_lifo AND p_condition = 2 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state IN (0, 1)
                              AND o.identifier = t.identifier AND o.sequence > t.sequence)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state IN (2, 3)
                              AND o.identifier = t.identifier)
            ORDER BY t.priority, t.sequence DESC
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSIF p_lifo AND p_condition = 3 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state IN (0, 1)
                              AND o.identifier = t.identifier AND o.sequence > t.sequence)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state IN (2, 3)
                              AND o.identifier = t.identifier)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state = 4
                              AND o.identifier = t.identifier)
            ORDER BY t.priority, t.sequence DESC
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSE
        RAISE EXCEPTION 'unknown poll condition %', p_condition USING ERRCODE = '22023';
    END IF;
END
$$;

-- task_topic_analyze refreshes the planner statistics of a topic's partition and returns
-- its estimated row count (-1 for an unknown topic). Processors call it as a topic's
-- table grows: ANALYZE also invalidates cached plans made while the table was nearly
-- empty, which pgx's prepared statements would otherwise keep for good (autovacuum does
-- the same, when it is on and gets round to a young partition).
CREATE FUNCTION task_topic_analyze(p_topic text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_partition text;
    v_rows      bigint;
BEGIN
    SELECT partition INTO v_partition FROM task_topic WHERE topic = p_topic;
    IF NOT FOUND THEN
        RETURN -1;
    END IF;
    EXECUTE format('ANALYZE %I', v_partition);
    SELECT GREATEST(reltuples, 0)::bigint INTO v_rows FROM pg_catalog.pg_class WHERE oid = to_regclass(v_partition);
    RETURN v_rows;
END
$$;

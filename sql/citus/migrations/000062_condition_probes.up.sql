-- 000062 on a distributed database: the plain migration as it is. task_poll_candidates
-- is distributed (pgtask citus enable), so Citus passes its CREATE OR REPLACE on to
-- every node.

CREATE OR REPLACE FUNCTION task_poll_candidates(p_topic text, p_lifo boolean, p_condition smallint, p_size integer)
 RETURNS SETOF tid
 LANGUAGE plpgsql
 SET enable_sort TO 'off'
 SET enable_bitmapscan TO 'off'
 SET jit TO 'off'
AS $function$
DECLARE
    v_priority smallint;
    v_left     integer := p_size;
    v_got      integer;
BEGIN
    IF p_condition NOT BETWEEN 0 AND 3 THEN
        RAISE EXCEPTION 'unknown poll condition %', p_condition USING ERRCODE = '22023';
    END IF;
    IF NOT p_lifo AND p_condition = 0 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
            ORDER BY t.priority, t.sequence
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSIF NOT p_lifo AND p_condition = 1 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                              AND o.identifier = t.identifier OFFSET 0)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || t.identifier) AND o.state = 1
                              AND o.topic = p_topic AND o.identifier = t.identifier AND o.sequence < t.sequence)
            ORDER BY t.priority, t.sequence
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSIF NOT p_lifo AND p_condition = 2 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                              AND o.identifier = t.identifier OFFSET 0)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || t.identifier) AND o.state = 1
                              AND o.topic = p_topic AND o.identifier = t.identifier AND o.sequence < t.sequence)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = ANY ('{2,3}') AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                              AND o.identifier = t.identifier OFFSET 0)
            ORDER BY t.priority, t.sequence
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSIF NOT p_lifo AND p_condition = 3 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                              AND o.identifier = t.identifier OFFSET 0)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || t.identifier) AND o.state = 1
                              AND o.topic = p_topic AND o.identifier = t.identifier AND o.sequence < t.sequence)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = ANY ('{2,3}') AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                              AND o.identifier = t.identifier OFFSET 0)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 4 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                              AND o.identifier = t.identifier OFFSET 0)
            ORDER BY t.priority, t.sequence
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    END IF;
    IF NOT p_lifo OR p_size <= 0 THEN
        RETURN;
    END IF;

    -- LIFO: one priority level at a time, lowest first, each read backwards (newest first)
    -- on task_ready: an equality on priority lets one index serve both orders.
    SELECT min(t.priority) INTO v_priority FROM task t
    WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1;
    WHILE v_priority IS NOT NULL AND v_left > 0 LOOP
        IF p_condition = 0 THEN
            RETURN QUERY
                SELECT t.ctid FROM task t
                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1 AND t.priority = v_priority
                  AND (t.not_before IS NULL OR t.not_before <= now())
                ORDER BY t.sequence DESC
                LIMIT v_left
                FOR UPDATE OF t SKIP LOCKED;
        ELSIF p_condition = 1 THEN
            RETURN QUERY
                SELECT t.ctid FROM task t
                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1 AND t.priority = v_priority
                  AND (t.not_before IS NULL OR t.not_before <= now())
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                  AND o.identifier = t.identifier OFFSET 0)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || t.identifier) AND o.state = 1
                                  AND o.topic = p_topic AND o.identifier = t.identifier AND o.sequence > t.sequence)
                ORDER BY t.sequence DESC
                LIMIT v_left
                FOR UPDATE OF t SKIP LOCKED;
        ELSIF p_condition = 2 THEN
            RETURN QUERY
                SELECT t.ctid FROM task t
                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1 AND t.priority = v_priority
                  AND (t.not_before IS NULL OR t.not_before <= now())
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                  AND o.identifier = t.identifier OFFSET 0)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || t.identifier) AND o.state = 1
                                  AND o.topic = p_topic AND o.identifier = t.identifier AND o.sequence > t.sequence)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = ANY ('{2,3}') AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                  AND o.identifier = t.identifier OFFSET 0)
                ORDER BY t.sequence DESC
                LIMIT v_left
                FOR UPDATE OF t SKIP LOCKED;
        ELSIF p_condition = 3 THEN
            RETURN QUERY
                SELECT t.ctid FROM task t
                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1 AND t.priority = v_priority
                  AND (t.not_before IS NULL OR t.not_before <= now())
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                  AND o.identifier = t.identifier OFFSET 0)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || t.identifier) AND o.state = 1
                                  AND o.topic = p_topic AND o.identifier = t.identifier AND o.sequence > t.sequence)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = ANY ('{2,3}') AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                  AND o.identifier = t.identifier OFFSET 0)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 4 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                  AND o.identifier = t.identifier OFFSET 0)
                ORDER BY t.sequence DESC
                LIMIT v_left
                FOR UPDATE OF t SKIP LOCKED;
        END IF;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
        SELECT min(t.priority) INTO v_priority FROM task t
        WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1 AND t.priority > v_priority;
    END LOOP;
END
$function$;

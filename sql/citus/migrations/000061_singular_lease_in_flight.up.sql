-- 000061 on a distributed database: the plain migration as it is. task_poll_candidates
-- is distributed (pgtask citus enable), so Citus passes its CREATE OR REPLACE on to every
-- node; task_poll_singular, which it calls on the node of the topic's shard (where every
-- poll of the topic runs, task_citus_poll, and so takes the identifiers' locks), is put
-- on every node as pgtask citus enable puts the other functions. Both statements may run
-- again on a database at this version (CREATE OR REPLACE; distributing a distributed
-- function again changes nothing), as the newest form must.

CREATE OR REPLACE FUNCTION task_poll_singular(p_topic text, p_tids tid[])
RETURNS SETOF tid
LANGUAGE plpgsql VOLATILE
SET jit = off
AS $$
DECLARE
    v_locked tid[];
BEGIN
    -- 1885828205: the class of these locks (the junctions' is 1885828202); the key is the
    -- topic and identifier's hash (two identifiers that share it only take turns)
    v_locked := ARRAY(
        SELECT c.ctid FROM (SELECT t.ctid, t.identifier FROM task t
                            WHERE t.topic = p_topic AND t.ctid = ANY (p_tids) OFFSET 0) c
        WHERE pg_try_advisory_xact_lock(1885828205, hashtext(p_topic || E'\n' || c.identifier)));
    IF cardinality(v_locked) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT t.ctid FROM task t
        WHERE t.topic = p_topic AND t.ctid = ANY (v_locked)
          -- OFFSET 0: a probe of each one's identifier (migration 000062 says why)
          AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                          AND o.identifier = t.identifier OFFSET 0);
END
$$;

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
        RETURN QUERY SELECT c FROM task_poll_singular(p_topic, ARRAY(SELECT task_poll_candidates(p_topic, p_lifo, p_condition, p_size))) c;
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

-- on every node (a plain database, where repository's tests apply the forms too, has no
-- Citus to ask)
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM create_distributed_function('task_poll_singular(text,tid[])'::regprocedure);
    END IF;
END
$$;

-- 000054 reverted: task_poll_limited as 000028 made it.

CREATE OR REPLACE FUNCTION task_poll_limited(p_topic text, p_lifo boolean, p_condition smallint, p_size integer,
                                  p_concurrency integer, p_key_limit integer, p_rate integer, p_period_ms bigint,
                                  p_burst integer, p_fair boolean, p_from_priority smallint, p_from_sequence bigint)
RETURNS SETOF tid
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_budget  integer := p_size;
    v_active  integer;
    v_tokens  double precision;
    v_counted timestamptz;
    v_now     timestamptz;
    v_last    text;
    v_seqs    bigint[];
    v_chosen  tid[] := '{}';
BEGIN
    PERFORM pg_advisory_xact_lock(1885828451, hashtext(p_topic));
    -- the settings as they are now that this poll has its turn (the caller read them
    -- before it waited for the lock): a limit lowered meanwhile holds for this poll
    SELECT tt.concurrency, tt.key_concurrency, tt.rate, tt.rate_period_ms, tt.rate_burst, coalesce(tt.fair, false)
    INTO p_concurrency, p_key_limit, p_rate, p_period_ms, p_burst, p_fair
    FROM task_topic tt WHERE tt.topic = p_topic;
    IF p_concurrency IS NOT NULL THEN
        SELECT count(*) INTO v_active
        FROM (SELECT 1 FROM task t WHERE t.state = 0 AND hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic
              LIMIT p_concurrency) a;
        v_budget := least(v_budget, p_concurrency - v_active);
    END IF;
    IF p_rate IS NOT NULL OR p_fair OR p_key_limit IS NOT NULL THEN
        SELECT l.tokens, l.counted, l.last_key INTO v_tokens, v_counted, v_last
        FROM task_topic_limit l WHERE l.topic = p_topic;
    END IF;
    IF p_rate IS NOT NULL THEN
        v_now := clock_timestamp();
        IF v_tokens IS NULL OR v_counted IS NULL THEN
            v_tokens := p_burst; -- a bucket never used is full
        ELSE
            v_tokens := least(p_burst::double precision,
                              v_tokens + greatest(extract(epoch FROM v_now - v_counted), 0) * 1000 * p_rate / p_period_ms);
        END IF;
        v_counted := v_now;
        v_budget := least(v_budget, floor(v_tokens)::integer);
    END IF;
    IF v_budget > 0 THEN
        IF p_fair OR p_key_limit IS NOT NULL THEN
            SELECT k.p_last_key, k.p_sequences INTO v_last, v_seqs
            FROM task_poll_keyed(p_topic, p_lifo, p_condition, v_budget, p_key_limit, v_last) k;
            -- under the advisory lock no other poll takes them; a cancel or a REPLACE
            -- push may have changed one since
            v_chosen := ARRAY(SELECT t.ctid FROM task t
                              WHERE t.topic = p_topic AND t.sequence = ANY (v_seqs) AND t.state = 1
                              FOR UPDATE OF t SKIP LOCKED);
        ELSIF p_from_sequence IS NOT NULL AND NOT p_lifo AND p_condition = 0 THEN
            -- from the position, as an unlimited poll (000012)
            v_chosen := ARRAY(SELECT t.ctid FROM task t
                              WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                                AND (t.priority, t.sequence) >= (p_from_priority, p_from_sequence)
                                AND (t.not_before IS NULL OR t.not_before <= now())
                              ORDER BY t.priority, t.sequence
                              LIMIT v_budget
                              FOR UPDATE OF t SKIP LOCKED);
        ELSE
            v_chosen := ARRAY(SELECT c FROM task_poll_candidates(p_topic, p_lifo, p_condition, v_budget) c);
        END IF;
    END IF;
    IF p_rate IS NOT NULL OR p_fair OR p_key_limit IS NOT NULL THEN
        -- without a rate the bucket is emptied of meaning (NULL: full when a rate comes
        -- back), not run into debt by the tasks started meanwhile
        INSERT INTO task_topic_limit AS l (topic, tokens, counted, last_key)
        VALUES (p_topic, CASE WHEN p_rate IS NOT NULL THEN v_tokens - cardinality(v_chosen) END,
                CASE WHEN p_rate IS NOT NULL THEN v_counted END, v_last)
        ON CONFLICT (topic) DO UPDATE SET tokens = EXCLUDED.tokens, counted = EXCLUDED.counted, last_key = EXCLUDED.last_key;
    END IF;
    RETURN QUERY SELECT unnest(v_chosen);
END
$$;

-- Reverts 000028: task_poll_limited as 000021 made it and task_topic_set_limits as 000015
-- made it. The buckets emptied stay empty (a bucket never used is full).

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
        INSERT INTO task_topic_limit AS l (topic, tokens, counted, last_key)
        VALUES (p_topic, v_tokens - cardinality(v_chosen), v_counted, v_last)
        ON CONFLICT (topic) DO UPDATE SET tokens = EXCLUDED.tokens, counted = EXCLUDED.counted, last_key = EXCLUDED.last_key;
    END IF;
    RETURN QUERY SELECT unnest(v_chosen);
END
$$;

CREATE OR REPLACE FUNCTION task_topic_set_limits(topic text, concurrency integer DEFAULT NULL, key_concurrency integer DEFAULT NULL,
                                      rate integer DEFAULT NULL, rate_period interval DEFAULT NULL,
                                      rate_burst integer DEFAULT NULL, fair boolean DEFAULT false)
RETURNS task_topic
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_period_ms bigint;
    v_row       task_topic;
BEGIN
    IF task_topic_set_limits.concurrency < 1 THEN
        RAISE EXCEPTION 'concurrency % is below 1 (NULL is no limit)', task_topic_set_limits.concurrency
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_topic_set_limits.key_concurrency < 1 THEN
        RAISE EXCEPTION 'key_concurrency % is below 1 (NULL is no limit)', task_topic_set_limits.key_concurrency
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_topic_set_limits.rate < 1 THEN
        RAISE EXCEPTION 'rate % is below 1 (NULL is no limit)', task_topic_set_limits.rate
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_topic_set_limits.rate IS NULL AND (task_topic_set_limits.rate_period IS NOT NULL OR task_topic_set_limits.rate_burst IS NOT NULL) THEN
        RAISE EXCEPTION 'rate_period and rate_burst need a rate'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_topic_set_limits.rate IS NOT NULL THEN
        v_period_ms := floor(extract(epoch FROM task_topic_set_limits.rate_period) * 1000);
        IF v_period_ms IS NULL OR v_period_ms < 1 THEN
            RAISE EXCEPTION 'rate % needs a rate_period of at least 1 millisecond, got %', task_topic_set_limits.rate,
                coalesce(task_topic_set_limits.rate_period::text, 'NULL')
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF task_topic_set_limits.rate_burst < 1 THEN
            RAISE EXCEPTION 'rate_burst % is below 1', task_topic_set_limits.rate_burst
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    UPDATE task_topic tt
    SET concurrency = task_topic_set_limits.concurrency, key_concurrency = task_topic_set_limits.key_concurrency,
        rate = task_topic_set_limits.rate, rate_period_ms = v_period_ms,
        rate_burst = CASE WHEN task_topic_set_limits.rate IS NOT NULL
                          THEN coalesce(task_topic_set_limits.rate_burst, task_topic_set_limits.rate) END,
        fair = coalesce(task_topic_set_limits.fair, false)
    WHERE tt.topic = task_topic_set_limits.topic
    RETURNING tt.* INTO v_row;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown topic %', quote_nullable(task_topic_set_limits.topic)
            USING ERRCODE = 'PT001', HINT = 'Register the topic first, e.g. SELECT task_topic_create(''my-topic'').';
    END IF;
    RETURN v_row;
END
$$;

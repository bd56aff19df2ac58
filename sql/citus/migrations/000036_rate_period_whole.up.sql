-- 000036 on a distributed database: the plain migration's task_topic_set_limits (the
-- function runs on the coordinator, as 000034's form has it).

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
        -- a part of a millisecond was stored rounded down (1.5 ms as 1 ms), where Go
        -- and REST refuse it
        IF extract(epoch FROM task_topic_set_limits.rate_period) * 1000 <> v_period_ms THEN
            RAISE EXCEPTION 'rate_period % is not a whole number of milliseconds', task_topic_set_limits.rate_period
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF v_period_ms IS NULL OR v_period_ms < 1 THEN
            RAISE EXCEPTION 'rate % needs a rate_period of at least 1 millisecond, got %', task_topic_set_limits.rate,
                coalesce(task_topic_set_limits.rate_period::text, 'NULL')
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- the longest period Go holds: a time.Duration, the bound REST puts on
        -- rate_period_ms (a longer one was read back wrapped round, negative)
        IF v_period_ms > 9223372036854 THEN
            RAISE EXCEPTION 'rate_period % (% ms) is longer than 9223372036854 ms (about 292 years), the longest allowed',
                task_topic_set_limits.rate_period, v_period_ms
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
    -- at commit: the processors re-read the topic and poll under the new limits
    PERFORM pg_notify('task_notification', 'ACTIVATION ' || md5(v_row.topic));
    PERFORM pg_notify('task_notification', 'WORK ' || md5(v_row.topic));
    RETURN v_row;
END
$$;

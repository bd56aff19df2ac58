-- 000034 on a distributed database: the plain migration's task_topic_set_limits and
-- task_schedule (functions of the coordinator, where their tables are), and
-- task_push_batch as sql/citus/functions.sql now has it: its not-before is the
-- transaction's time plus the delay in milliseconds (task_citus_push), so it refuses a
-- delay that puts that after the year 9999.

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

CREATE OR REPLACE FUNCTION task_schedule(
    name       text,
    topic      text,
    spec       text,
    time_zone  text    DEFAULT 'UTC',
    identifier text    DEFAULT NULL,
    input      text    DEFAULT NULL,
    priority   integer DEFAULT 0,
    insertion  text    DEFAULT 'supersede',
    catch_up   integer DEFAULT 0,
    paused     boolean DEFAULT false
) RETURNS text
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_mode    smallint;
    v_problem text;
BEGIN
    IF task_schedule.name IS NULL OR length(task_schedule.name) NOT BETWEEN 1 AND 250 THEN
        RAISE EXCEPTION 'schedule name is %, want 1 to 250 characters',
            CASE WHEN task_schedule.name IS NULL THEN 'NULL' ELSE length(task_schedule.name) || ' characters long' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT FROM task_topic tt WHERE tt.topic = task_schedule.topic) THEN
        RAISE EXCEPTION 'schedule %: unknown topic %', quote_literal(task_schedule.name), quote_nullable(task_schedule.topic)
            USING ERRCODE = 'PT001';
    END IF;
    v_problem := task_schedule_spec_problem(task_schedule.spec);
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION 'schedule %: %', quote_literal(task_schedule.name), v_problem USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_schedule.time_zone IS NULL OR task_schedule.time_zone = 'Local'
       OR NOT EXISTS (SELECT FROM pg_timezone_names z WHERE z.name = task_schedule.time_zone) THEN
        RAISE EXCEPTION 'schedule %: unknown time zone %', quote_literal(task_schedule.name), quote_nullable(task_schedule.time_zone)
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Use an IANA name such as UTC or Europe/Paris.';
    END IF;
    IF task_schedule.identifier IS NOT NULL AND length(task_schedule.identifier) NOT BETWEEN 1 AND 500 THEN
        RAISE EXCEPTION 'schedule %: identifier is % characters long, want 1 to 500', quote_literal(task_schedule.name),
            length(task_schedule.identifier) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- each task's identifier is the template with every {time} replaced by the fire time
    -- (RFC 3339 in UTC, 20 characters: 2026-03-29T01:00:00Z), as ScheduleSettings.Validate
    -- checks it
    IF length(replace(task_schedule.identifier, '{time}', '2000-01-01T00:00:00Z')) > 500 THEN
        RAISE EXCEPTION 'schedule %: identifier is % characters long once {time} is replaced by the fire time (20 characters), at most 500 allowed',
            quote_literal(task_schedule.name), length(replace(task_schedule.identifier, '{time}', '2000-01-01T00:00:00Z'))
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_schedule.priority IS NULL OR task_schedule.priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'schedule %: priority % is out of range -32768..32767', quote_literal(task_schedule.name),
            coalesce(task_schedule.priority::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_mode := array_position(ARRAY['APPEND', 'REPLACE', 'SUPERSEDE', 'DELETE'], upper(task_schedule.insertion)) - 1;
    IF v_mode IS NULL THEN
        RAISE EXCEPTION 'schedule %: unknown insertion %', quote_literal(task_schedule.name), quote_nullable(task_schedule.insertion)
            USING ERRCODE = 'PT002', HINT = 'Use append, replace, supersede or delete (any case).';
    END IF;
    IF task_schedule.catch_up IS NULL OR task_schedule.catch_up NOT BETWEEN 0 AND 10000 THEN
        RAISE EXCEPTION 'schedule %: catch_up % is out of range 0..10000', quote_literal(task_schedule.name),
            coalesce(task_schedule.catch_up::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_schedule.paused IS NULL THEN
        RAISE EXCEPTION 'schedule %: paused is NULL, want true or false', quote_literal(task_schedule.name)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO task_schedule (name, topic, spec, time_zone, identifier, input, priority, insertion, catch_up, paused)
    VALUES (task_schedule.name, task_schedule.topic, btrim(task_schedule.spec), task_schedule.time_zone,
            task_schedule.identifier, task_schedule.input, task_schedule.priority, v_mode, task_schedule.catch_up,
            task_schedule.paused)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'schedule % exists', quote_literal(task_schedule.name)
            USING ERRCODE = 'PT016', HINT = 'Change it with `pgtask schedule set` or UPDATE task_schedule.';
    END IF;
    RETURN task_schedule.name;
END $$;

CREATE OR REPLACE FUNCTION task_push_batch(
    topic       text,
    identifiers text[],
    inputs      text[]   DEFAULT NULL,
    insertion   text     DEFAULT 'append',
    delay       interval DEFAULT NULL,
    priority    integer  DEFAULT 0,
    reference   text     DEFAULT NULL,
    suspended   boolean  DEFAULT false,
    concurrency_key text DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
-- Parameters share their names with task's columns (that is what makes named-argument calls
-- read well): inside SQL, bare names are columns and parameters are qualified with the
-- function name.
#variable_conflict use_column
DECLARE
    -- 0 APPEND, 1 REPLACE, 2 SUPERSEDE, 3 DELETE, as in sql/queries/task_push.sql
    v_mode       smallint;
    v_count      integer := coalesce(cardinality(task_push_batch.identifiers), 0);
    v_not_before timestamptz;
    v_cap        bigint;
    v_keyed      boolean;
    v_live       bigint;
    v_bad        record;
    v_sequences  bigint[];
    v_pushed     bigint[];
    v_notice     text;
    v_delay_ms   numeric;
BEGIN
    v_mode := array_position(ARRAY['APPEND', 'REPLACE', 'SUPERSEDE', 'DELETE'],
                             upper(task_push_batch.insertion)) - 1;
    IF v_mode IS NULL THEN
        RAISE EXCEPTION 'unknown insertion %', quote_nullable(task_push_batch.insertion)
            USING ERRCODE = 'PT002', HINT = 'Use append, replace, supersede or delete (any case).';
    END IF;
    IF task_push_batch.delay < interval '0' THEN
        RAISE EXCEPTION 'delay % is negative', quote_literal(task_push_batch.delay)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The not-before is refused after the year 9999, as the Go push refuses one
    -- (Creation.Validate): the latest RFC 3339, and so the REST API, can write. Here it is
    -- the transaction's time plus the delay in milliseconds, counted without overflow;
    -- task_citus_push adds them to its node's transaction time, which may start a moment
    -- later (a not-before within that moment of the end of 9999 may pass it).
    v_delay_ms := ceil(extract(epoch FROM task_push_batch.delay) * 1000);
    IF v_delay_ms > 0 AND extract(epoch FROM now()) + v_delay_ms / 1000
                          > extract(epoch FROM timestamptz '9999-12-31 23:59:59.999999+00') THEN
        RAISE EXCEPTION 'delay % puts the not-before after the year 9999', quote_literal(task_push_batch.delay)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_push_batch.priority IS NULL OR task_push_batch.priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'priority % is out of range -32768..32767', coalesce(task_push_batch.priority::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF length(task_push_batch.reference) > 500 THEN
        RAISE EXCEPTION 'reference % is % characters long, at most 500 allowed',
            quote_literal(left(task_push_batch.reference, 40) || '…'), length(task_push_batch.reference)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF length(task_push_batch.concurrency_key) > 250 THEN
        RAISE EXCEPTION 'concurrency key % is % characters long, at most 250 allowed',
            quote_literal(left(task_push_batch.concurrency_key, 40) || '…'), length(task_push_batch.concurrency_key)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_push_batch.suspended IS NULL THEN
        RAISE EXCEPTION 'suspended is NULL, want true or false' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF array_ndims(task_push_batch.identifiers) > 1 OR array_ndims(task_push_batch.inputs) > 1 THEN
        RAISE EXCEPTION 'identifiers and inputs must be one-dimensional arrays'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_push_batch.inputs IS NOT NULL AND cardinality(task_push_batch.inputs) <> v_count THEN
        RAISE EXCEPTION 'identifiers has % elements but inputs has %', v_count, cardinality(task_push_batch.inputs)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass one input per identifier, or inputs => NULL for none.';
    END IF;
    -- An empty batch does nothing at all (design §4: no error, no row, no sequence taken).
    IF v_count = 0 THEN
        RETURN;
    END IF;
    -- The first bad identifier, named by its value and position (1-based, in input order).
    SELECT c.identifier, c.ord INTO v_bad
    FROM unnest(task_push_batch.identifiers) WITH ORDINALITY AS c(identifier, ord)
    WHERE c.identifier IS NULL OR length(c.identifier) NOT BETWEEN 1 AND 500
    ORDER BY c.ord
    LIMIT 1;
    IF FOUND THEN
        IF v_bad.identifier IS NULL THEN
            RAISE EXCEPTION 'identifier NULL at position % is invalid: want 1 to 500 characters', v_bad.ord
                USING ERRCODE = 'PT003';
        ELSIF v_bad.identifier = '' THEN
            RAISE EXCEPTION 'identifier '''' at position % is empty: want 1 to 500 characters', v_bad.ord
                USING ERRCODE = 'PT003';
        END IF;
        RAISE EXCEPTION 'identifier % at position % is % characters long, at most 500 allowed',
            quote_literal(left(v_bad.identifier, 40) || '…'), v_bad.ord, length(v_bad.identifier)
            USING ERRCODE = 'PT003';
    END IF;

    -- KEY SHARE keeps a concurrent destroy of the topic out until the caller commits.
    SELECT tt.queue_cap, tt.fair OR tt.key_concurrency IS NOT NULL INTO v_cap, v_keyed
    FROM task_topic tt WHERE tt.topic = task_push_batch.topic FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown topic %', quote_nullable(task_push_batch.topic)
            USING ERRCODE = 'PT001', HINT = 'Register the topic first, e.g. SELECT task_topic_create(''my-topic'').';
    END IF;
    IF v_cap IS NOT NULL THEN
        -- As the Go push: the READY or ACTIVE tasks already there (counted no further than the
        -- cap) plus the live tasks this push adds — all of them with APPEND, one per distinct
        -- identifier otherwise (earlier occurrences are inserted REDUNDANT or not at all).
        v_live := CASE WHEN task_push_batch.suspended THEN 0
                       WHEN v_mode = 0 THEN v_count
                       ELSE (SELECT count(DISTINCT i) FROM unnest(task_push_batch.identifiers) i) END;
        IF NOT task_queue_admits(task_push_batch.topic, v_cap, v_live) THEN
            RAISE EXCEPTION 'topic % is at its queue cap of % READY or ACTIVE tasks: push of % refused, nothing written',
                quote_literal(task_push_batch.topic), v_cap, v_live
                USING ERRCODE = 'PT004';
        END IF;
    END IF;

    -- On the coordinator: the sequences, then the push on the topic's node
    -- (task_citus_push, which checks the topic and the cap again under its own lock), then
    -- the notification, here, where processors listen.
    v_sequences := ARRAY(SELECT nextval('task_sequence') FROM generate_series(1, v_count));
    SELECT array_agg(p.sequence ORDER BY p.sequence), min(p.notification) INTO v_pushed, v_notice
    FROM task_citus_push(task_push_batch.topic, v_mode, v_sequences, task_push_batch.identifiers,
                         coalesce(task_push_batch.inputs, array_fill(''::text, ARRAY[v_count])),
                         array_fill(coalesce(task_push_batch.reference, ''), ARRAY[v_count]),
                         array_fill(task_push_batch.suspended, ARRAY[v_count]),
                         array_fill(task_push_batch.priority::smallint, ARRAY[v_count]),
                         array_fill(0::bigint, ARRAY[v_count]),
                         array_fill(coalesce(ceil(extract(epoch FROM task_push_batch.delay) * 1000)::bigint, 0), ARRAY[v_count]),
                         array_fill(coalesce(task_push_batch.concurrency_key, ''), ARRAY[v_count])) p;
    IF v_notice IS NOT NULL THEN
        PERFORM pg_notify('task_notification', v_notice);
    END IF;
    RETURN QUERY SELECT unnest(v_pushed);
END
$$;

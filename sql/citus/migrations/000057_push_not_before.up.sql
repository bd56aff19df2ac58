-- 000057 on a distributed database: task_push_batch as sql/citus/functions.sql now has it
-- (its not_before passed to task_citus_push as the Go push's is), task_push as the plain
-- migration makes it. Both are dropped and created, the parameter being new.

-- The functions' owner and privileges, kept across the DROP and CREATE below: an
-- installation that revoked EXECUTE from PUBLIC, or granted it to its roles, keeps that.
CREATE TEMP TABLE pgtask_push_kept AS
SELECT p.proname::text AS name, p.proowner::regrole::text AS owner, p.proacl
FROM pg_catalog.pg_proc p WHERE p.oid IN (to_regprocedure('task_push(text, text, text, text, interval, integer, text, boolean, text)'), to_regprocedure('task_push_batch(text, text[], text[], text, interval, integer, text, boolean, text)'));

DROP FUNCTION IF EXISTS task_push(text, text, text, text, interval, integer, text, boolean, text);
DROP FUNCTION IF EXISTS task_push_batch(text, text[], text[], text, interval, integer, text, boolean, text);
-- (a database whose forms are applied again from an earlier version has them already)
DROP FUNCTION IF EXISTS task_push(text, text, text, text, interval, integer, text, boolean, text, timestamptz);
DROP FUNCTION IF EXISTS task_push_batch(text, text[], text[], text, interval, integer, text, boolean, text, timestamptz);

CREATE FUNCTION task_push_batch(
    topic       text,
    identifiers text[],
    inputs      text[]   DEFAULT NULL,
    insertion   text     DEFAULT 'append',
    delay       interval DEFAULT NULL,
    priority    integer  DEFAULT 0,
    reference   text     DEFAULT NULL,
    suspended   boolean  DEFAULT false,
    concurrency_key text DEFAULT NULL,
    not_before  timestamptz DEFAULT NULL
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
    v_at_us      bigint := 0; -- not_before, in microseconds since the epoch (0: none)
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
    -- The not-before is now() + delay, as on a plain database: a month is a calendar
    -- month and a day a calendar day in the session's time zone (migration 000047;
    -- before, extract(epoch) counted 30 days and 24 hours). It is refused after the year
    -- 9999, as the Go push refuses one (Creation.Validate): the latest RFC 3339, and so
    -- the REST API, can write. A delay whose fields are each under 1000 years adds
    -- without overflow; a longer one is added in a block that catches the overflow.
    -- task_citus_push adds the milliseconds from now() to it to its node's transaction
    -- time, which may start a moment later (a not-before within that moment of the end
    -- of 9999 may pass it).
    v_delay_ms := 0;
    IF task_push_batch.delay > interval '0' THEN
        IF abs(extract(year FROM task_push_batch.delay)) < 1000 AND abs(extract(day FROM task_push_batch.delay)) < 365000
           AND abs(extract(hour FROM task_push_batch.delay)) < 8760000 THEN
            v_not_before := now() + task_push_batch.delay;
        ELSE
            BEGIN
                v_not_before := now() + task_push_batch.delay;
            EXCEPTION WHEN datetime_field_overflow THEN
                RAISE EXCEPTION 'delay % puts the not-before out of range', quote_literal(task_push_batch.delay)
                    USING ERRCODE = 'invalid_parameter_value';
            END;
        END IF;
        IF v_not_before > timestamptz '9999-12-31 23:59:59.999999+00' THEN
            RAISE EXCEPTION 'delay % puts the not-before after the year 9999', quote_literal(task_push_batch.delay)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_delay_ms := ceil(extract(epoch FROM v_not_before - now()) * 1000);
    END IF;
    -- A not-before time given is the tasks' as it is (one already past: due at once), as
    -- the Go push takes Creation.NotBefore (migration 000057), and goes to
    -- task_citus_push as the Go push's does; with a delay too, which of the two is meant
    -- is not known.
    IF task_push_batch.not_before IS NOT NULL THEN
        IF task_push_batch.delay > interval '0' THEN
            RAISE EXCEPTION 'delay % and not_before % both given: give one', quote_literal(task_push_batch.delay),
                quote_literal(task_push_batch.not_before)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF task_push_batch.not_before > timestamptz '9999-12-31 23:59:59.999999+00' THEN
            RAISE EXCEPTION 'not_before % is after the year 9999', quote_literal(task_push_batch.not_before)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF NOT isfinite(task_push_batch.not_before) THEN
            RAISE EXCEPTION 'not_before % is not a time', quote_literal(task_push_batch.not_before)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- 0 would say none: the epoch itself, long past, is due at once either way
        v_at_us := greatest((extract(epoch FROM task_push_batch.not_before) * 1000000)::bigint, 1);
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
    -- As the Go push: the READY or ACTIVE tasks already there (counted no further than the
    -- cap) plus the live tasks this push adds — all of them with APPEND, one per distinct
    -- identifier otherwise (earlier occurrences are inserted REDUNDANT or not at all). An
    -- APPEND beyond the cap is refused here, before it takes sequences; REPLACE,
    -- SUPERSEDE and DELETE count net of the older READY tasks they end, which
    -- task_citus_push counts on the topic's node (it inserts nothing when it refuses).
    v_live := CASE WHEN task_push_batch.suspended THEN 0
                   WHEN v_mode = 0 THEN v_count
                   ELSE (SELECT count(DISTINCT i) FROM unnest(task_push_batch.identifiers) i) END;
    IF v_cap IS NOT NULL AND v_mode = 0 AND NOT task_queue_admits(task_push_batch.topic, v_cap, v_live) THEN
        RAISE EXCEPTION 'topic % is at its queue cap of % READY or ACTIVE tasks: push of % refused, nothing written',
            quote_literal(task_push_batch.topic), v_cap, v_live
            USING ERRCODE = 'PT004';
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
                         array_fill(v_at_us, ARRAY[v_count]),
                         array_fill(v_delay_ms::bigint, ARRAY[v_count]),
                         array_fill(coalesce(task_push_batch.concurrency_key, ''), ARRAY[v_count])) p;
    IF v_pushed IS NULL THEN
        -- nothing inserted, by a topic known (read above): its cap refused the push
        RAISE EXCEPTION 'topic % is at its queue cap of % READY or ACTIVE tasks: push of % refused, nothing written',
            quote_literal(task_push_batch.topic), v_cap, v_live
            USING ERRCODE = 'PT004';
    END IF;
    IF v_notice IS NOT NULL THEN
        PERFORM pg_notify('task_notification', v_notice);
    END IF;
    RETURN QUERY SELECT unnest(v_pushed);
END
$$;

COMMENT ON FUNCTION task_push_batch(text, text[], text[], text, interval, integer, text, boolean, text, timestamptz) IS
'Pushes one task per identifier to a topic in one statement and returns their sequences in input order; see docs/sql.md.';

CREATE FUNCTION task_push(
    topic      text,
    identifier text,
    input      text     DEFAULT NULL,
    insertion  text     DEFAULT 'append',
    delay      interval DEFAULT NULL,
    priority   integer  DEFAULT 0,
    reference  text     DEFAULT NULL,
    suspended  boolean  DEFAULT false,
    concurrency_key text DEFAULT NULL,
    not_before  timestamptz DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_sequence bigint;
BEGIN
    -- One element always yields exactly one task, whatever the insertion.
    SELECT s INTO STRICT v_sequence
    FROM task_push_batch(task_push.topic, ARRAY[task_push.identifier], ARRAY[task_push.input],
                         task_push.insertion, task_push.delay, task_push.priority,
                         task_push.reference, task_push.suspended, task_push.concurrency_key,
                         task_push.not_before) AS s;
    RETURN v_sequence;
END
$$;

COMMENT ON FUNCTION task_push(text, text, text, text, interval, integer, text, boolean, text, timestamptz) IS
'Pushes one task to a topic and returns its sequence; see docs/sql.md.';

DO $$
DECLARE
    v_kept      record;
    v_grant     record;
    v_signature text;
BEGIN
    FOR v_kept IN SELECT * FROM pgtask_push_kept LOOP
        v_signature := CASE v_kept.name WHEN 'task_push' THEN 'task_push(text, text, text, text, interval, integer, text, boolean, text, timestamptz)'
                                        ELSE 'task_push_batch(text, text[], text[], text, interval, integer, text, boolean, text, timestamptz)' END;
        IF v_kept.owner IS DISTINCT FROM current_user::regrole::text THEN
            EXECUTE format('ALTER FUNCTION %s OWNER TO %s', v_signature, v_kept.owner);
        END IF;
        IF v_kept.proacl IS NOT NULL THEN
            EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', v_signature);
            FOR v_grant IN SELECT * FROM aclexplode(v_kept.proacl) LOOP
                EXECUTE format('GRANT %s ON FUNCTION %s TO %s%s', v_grant.privilege_type, v_signature,
                               CASE WHEN v_grant.grantee = 0 THEN 'PUBLIC' ELSE v_grant.grantee::regrole::text END,
                               CASE WHEN v_grant.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
            END LOOP;
        END IF;
    END LOOP;
END
$$;

DROP TABLE pgtask_push_kept;

-- 000059 on a distributed database: task_citus_push and task_push_batch as
-- sql/citus/functions.sql now has them. task_citus_push stores a not-before given in
-- microseconds exact, whole seconds and then the microseconds added in UTC (both
-- immutable), where a float of seconds put 9999-12-31 23:59:59.999999 in the year
-- 10000. task_push_batch refuses a not_before before the year 1, as the plain migration
-- does, and passes one before 1970 as given (it was stored as the epoch). Citus passes
-- the CREATE OR REPLACE of a distributed function on to every node; owners and
-- privileges stay. Rows are kept as they are.

-- task_citus_push pushes a batch (TaskPush of sql/queries/task_push.sql, whose
-- insertion matrix it follows: 0 APPEND, 1 REPLACE, 2 SUPERSEDE, 3 DELETE) with the
-- given sequences (one per creation; DELETE leaves those of the occurrences it does not
-- insert unused), counts it in task_tally (which plain pgtask's statement trigger does),
-- and returns the inserted rows, each with the payload of the notification to send
-- (repository.Notification; NULL when no task is READY). No row: the topic is unknown or
-- its queue cap refused the batch, counted net of the READY tasks it ends (migration
-- 000037).
CREATE OR REPLACE FUNCTION task_citus_push(
    p_topic text, p_insertion smallint, p_sequences bigint[], p_identifiers text[], p_inputs text[], p_refs text[],
    p_suspended boolean[], p_priorities smallint[], p_not_befores_us bigint[], p_delays_ms bigint[], p_keys text[])
RETURNS TABLE (sequence bigint, identifier text, state smallint, descent smallint, created timestamptz,
               not_before timestamptz, notification text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_cap    bigint;
    v_keyed  boolean;
    v_now    timestamptz := now();
    v_epoch  double precision := extract(epoch FROM now());
    v_after  timestamptz[];
    v_last   boolean[];
    v_older  bigint[];
    v_first  record;
    v_notice text;
    v_rows   task[];
    v_live   bigint;
    v_fits   boolean;
BEGIN
    -- KEY SHARE keeps a concurrent destroy of the topic out until the caller commits.
    SELECT tt.queue_cap, tt.fair OR tt.key_concurrency IS NOT NULL INTO v_cap, v_keyed
    FROM task_topic tt WHERE tt.topic = p_topic FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- APPEND inserts every occurrence live; otherwise only the last occurrence of an
    -- identifier in the batch stays live (REPLACE, SUPERSEDE) or is inserted at all (DELETE)
    v_last := ARRAY(SELECT p_insertion = 0 OR e.ord = max(e.ord) OVER (PARTITION BY e.identifier)
                    FROM unnest(p_identifiers) WITH ORDINALITY AS e(identifier, ord) ORDER BY e.ord);
    -- the tasks it inserts READY, and whether the topic takes them as they are
    v_live := (SELECT count(*) FROM unnest(p_suspended, v_last) AS e(suspended, last) WHERE NOT e.suspended AND e.last);
    v_fits := v_cap IS NULL OR task_queue_admits(p_topic, v_cap, v_live);
    -- REPLACE, SUPERSEDE and DELETE end the older READY tasks of their identifiers: the
    -- cap counts the push net of them (as TaskPush does), read here without a lock when
    -- it does not fit as it is, so that a refused push locks nothing
    IF NOT v_fits AND (p_insertion = 0 OR NOT task_queue_admits(p_topic, v_cap, v_live - (
           SELECT count(*) FROM task t
           WHERE (t.topic || E'\n' || t.identifier) = ANY (ARRAY(SELECT p_topic || E'\n' || i FROM unnest(p_identifiers) i))
             AND t.topic = p_topic AND t.state = 1 AND t.identifier = ANY (p_identifiers)))) THEN
        RETURN;
    END IF;
    -- a not-before given in microseconds: whole seconds, then the microseconds added in
    -- UTC (immutable), as TaskPush does; a float of seconds (us / 1e6) is coarser than a
    -- microsecond past the year 2255 and put 9999-12-31 23:59:59.999999 in the year 10000
    -- (migration 000059)
    v_after := ARRAY(SELECT CASE WHEN u.us <> 0 THEN timezone('UTC', timezone('UTC', to_timestamp(u.us / 1000000))
                                                                 + u.us % 1000000 * interval '1 microsecond')
                                 WHEN u.ms > 0 THEN to_timestamp(v_epoch + u.ms / 1e3) END
                     FROM unnest(p_not_befores_us, p_delays_ms) WITH ORDINALITY AS u(us, ms, ord) ORDER BY u.ord);
    IF p_insertion <> 0 THEN
        -- Older tasks of the same identifiers that the insertion mode touches: READY ones
        -- (through task_ready_identifier), for REPLACE and DELETE those from EXPIRED to
        -- SUCCEEDED, RECREATED too for DELETE (through task_identifier), and for DELETE
        -- the REDUNDANT ones (through task_identifier_redundant, migration 000031). ACTIVE
        -- tasks are never touched; rows locked by a concurrent transaction are skipped.
        v_older := ARRAY(
            SELECT t.sequence FROM task t
            WHERE (t.topic || E'\n' || t.identifier) = ANY (ARRAY(SELECT p_topic || E'\n' || i FROM unnest(p_identifiers) i))
              AND t.topic = p_topic AND t.state = 1 AND t.identifier = ANY (p_identifiers)
            FOR UPDATE SKIP LOCKED);
        -- admitted net of the READY tasks locked: one a concurrent transaction holds is
        -- skipped, and stays live (then nothing is written, but those locks stay until the
        -- caller's transaction ends)
        IF NOT v_fits AND NOT task_queue_admits(p_topic, v_cap, v_live - cardinality(v_older)) THEN
            RETURN;
        END IF;
        IF p_insertion IN (1, 3) THEN
            v_older := v_older || ARRAY(
                SELECT t.sequence FROM task t
                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state BETWEEN 2 AND 7
                  AND t.identifier = ANY (p_identifiers) AND (p_insertion = 3 OR t.state <= 6)
                FOR UPDATE SKIP LOCKED);
        END IF;
        IF p_insertion = 3 THEN
            v_older := v_older || ARRAY(
                SELECT t.sequence FROM task t
                WHERE hashtext(t.topic || E'\n' || t.identifier) = ANY (ARRAY(SELECT hashtext(p_topic || E'\n' || i)
                                                                              FROM unnest(p_identifiers) i))
                  AND t.topic = p_topic AND t.state = 8 AND t.identifier = ANY (p_identifiers)
                FOR UPDATE SKIP LOCKED);
        END IF;
        IF p_insertion IN (1, 2) THEN
            UPDATE task t SET state = 8, descent = GREATEST(t.state, t.descent)
            WHERE t.topic = p_topic AND t.sequence = ANY (v_older);
        ELSE
            DELETE FROM task t WHERE t.topic = p_topic AND t.sequence = ANY (v_older);
        END IF;
    END IF;
    -- the first READY task in poll order, and when the earliest READY one is due
    SELECT e.priority, e.seq, min(coalesce(e.after, '-infinity')) OVER () AS due INTO v_first
    FROM unnest(p_sequences, p_suspended, p_priorities, v_after, v_last) AS e(seq, suspended, priority, after, last)
    WHERE NOT e.suspended AND e.last ORDER BY e.priority, e.seq LIMIT 1;
    IF FOUND THEN
        v_notice := task_citus_work(p_topic, v_first.priority, v_first.seq, v_first.due);
    END IF;
    -- (a variable in the INSERT's RETURNING is lost when Citus plans it: the rows go
    -- through an array)
    WITH inserted AS (
        INSERT INTO task AS t (topic, sequence, identifier, state, descent, input, reference, priority, not_before,
                               concurrency_key, created)
        SELECT p_topic, e.seq, e.identifier,
               CASE WHEN NOT e.last THEN 8 WHEN e.suspended THEN 4 ELSE 1 END::smallint,
               1::smallint, -- descent: a fresh task was READY before whatever it is
               NULLIF(e.input, ''), NULLIF(e.reference, ''), e.priority, e.after,
               coalesce(NULLIF(e.concurrency_key, ''), CASE WHEN v_keyed THEN '' END), v_now
        FROM ROWS FROM (unnest(p_sequences), unnest(p_identifiers), unnest(p_inputs), unnest(p_refs), unnest(p_suspended),
                        unnest(p_priorities), unnest(v_after), unnest(p_keys), unnest(v_last))
             AS e(seq, identifier, input, reference, suspended, priority, after, concurrency_key, last)
        WHERE p_insertion <> 3 OR e.last
        RETURNING t.*
    )
    SELECT array_agg(i ORDER BY i.sequence) INTO v_rows FROM inserted i;
    INSERT INTO task_tally AS y (topic, second, writer, pushed)
    VALUES (p_topic, to_timestamp(floor(v_epoch)), task_tally_writer(), cardinality(v_rows))
    ON CONFLICT (topic, second, writer) DO UPDATE SET pushed = y.pushed + excluded.pushed;
    RETURN QUERY
    SELECT r.sequence, r.identifier, r.state, r.descent, r.created, r.not_before, v_notice FROM unnest(v_rows) r;
END
$$;

-- task_push_batch, the SQL API's push (migration 000015's, whose checks and errors it
-- keeps word for word; 000034's delay check, 000047's calendar delay: the milliseconds
-- task_citus_push adds are those from now() to now() + delay; 000037's cap counts a
-- replacing push net, on the topic's node; 000057's not_before): on Citus its
-- statement, which notifies from inside, cannot run; this one takes the Go push's path.
CREATE OR REPLACE FUNCTION task_push_batch(
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
        -- nor before the year 1 (000059), which no RFC 3339 time, and so no JSON answer
        -- of the task (the REST API, pgtask --json), can write
        IF task_push_batch.not_before < timestamptz '0001-01-01 00:00:00+00' THEN
            RAISE EXCEPTION 'not_before % is before the year 1', quote_literal(task_push_batch.not_before)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- as given, before 1970 too (000059; before, the epoch); 0 would say none: the
        -- epoch itself, long past, is due at once either way, a microsecond after
        v_at_us := (extract(epoch FROM task_push_batch.not_before) * 1000000)::bigint;
        IF v_at_us = 0 THEN
            v_at_us := 1;
        END IF;
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

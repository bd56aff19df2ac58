-- 000059 reverted: task_push_batch as 000057 made it (a not_before before the year 1
-- accepted), replaced in place.

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
    v_ended      bigint := 0; -- older READY tasks this push ends, when counted
    v_bad        record;
    v_sequences  bigint[]; -- the inserted tasks', in order
    v_first      bigint;   -- the first of them READY
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
    -- The not-before (now() + delay) is refused after the year 9999, as the Go push
    -- refuses one (Creation.Validate): the latest RFC 3339, and so the REST API, can
    -- write. A delay whose fields are each under 1000 years adds without overflow; a
    -- longer one is added in a block that catches the overflow (a subtransaction, on that
    -- path alone).
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
    END IF;
    -- A not-before time given is the tasks' as it is (one already past: due at once), as
    -- the Go push takes Creation.NotBefore; with a delay too, which of the two is meant
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
        v_not_before := task_push_batch.not_before;
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
        -- identifier otherwise (earlier occurrences are inserted REDUNDANT or not at all) —
        -- less the older READY tasks of its identifiers that REPLACE, SUPERSEDE and DELETE
        -- end. Those are counted only when the push does not fit without them, and locked
        -- as the statement below finds them, so that it ends every one counted (a
        -- refusal releases them with the rest).
        v_live := CASE WHEN task_push_batch.suspended THEN 0
                       WHEN v_mode = 0 THEN v_count
                       ELSE (SELECT count(DISTINCT i) FROM unnest(task_push_batch.identifiers) i) END;
        IF NOT task_queue_admits(task_push_batch.topic, v_cap, v_live) THEN
            IF v_mode <> 0 THEN
                SELECT count(*) INTO v_ended
                FROM (SELECT 1 FROM task t
                      WHERE (t.topic || E'\n' || t.identifier) = ANY (ARRAY(SELECT task_push_batch.topic || E'\n' || i
                                                                         FROM unnest(task_push_batch.identifiers) i))
                        AND t.topic = task_push_batch.topic AND t.state = 1
                        AND t.identifier = ANY (task_push_batch.identifiers)
                      FOR UPDATE SKIP LOCKED) r;
            END IF;
            IF NOT task_queue_admits(task_push_batch.topic, v_cap, v_live - v_ended) THEN
                RAISE EXCEPTION 'topic % is at its queue cap of % READY or ACTIVE tasks: push of % refused, nothing written',
                    quote_literal(task_push_batch.topic), v_cap, v_live
                    USING ERRCODE = 'PT004';
            END IF;
        END IF;
    END IF;

    IF v_mode = 0 THEN
        -- APPEND touches no older task: the insertion alone, a statement that reads no
        -- partition (an INSERT routes each row as it executes), so the plan kept after the
        -- first calls fits every topic, where the statement below is planned at every
        -- call (TaskPushAppend in sql/queries/task_push.sql does the same for the Go
        -- push). What it stores is the statement's below.
        WITH inserted AS (
            INSERT INTO task (topic, sequence, identifier, state, descent, input, reference, priority, not_before,
                              concurrency_key)
            SELECT task_push_batch.topic, nextval('task_sequence'), c.identifier,
                   CASE WHEN task_push_batch.suspended THEN 4 ELSE 1 END,
                   1, -- descent: a fresh task was READY before whatever it is (design section 3)
                   NULLIF(c.input, ''), NULLIF(task_push_batch.reference, ''), task_push_batch.priority, v_not_before,
                   coalesce(NULLIF(task_push_batch.concurrency_key, ''), CASE WHEN v_keyed THEN '' END)
            -- a NULL inputs array gives NULL inputs; nextval over rows in input order
            FROM ROWS FROM (unnest(task_push_batch.identifiers), unnest(task_push_batch.inputs))
                 WITH ORDINALITY AS c(identifier, input, ord)
            ORDER BY c.ord
            RETURNING sequence, state
        )
        SELECT array_agg(i.sequence ORDER BY i.sequence), min(i.sequence) FILTER (WHERE i.state = 1)
        INTO v_sequences, v_first
        FROM inserted i;
    ELSE
        -- REPLACE, SUPERSEDE, DELETE
        WITH creation AS (
            -- '' input is stored as NULL, as the Go push does.
            SELECT c.ord, c.identifier, NULLIF(c.input, '') AS input,
                   -- only the last occurrence of an identifier in the batch stays live (REPLACE,
                   -- SUPERSEDE) or is inserted at all (DELETE)
                   c.ord = max(c.ord) OVER (PARTITION BY c.identifier) AS last
            -- unnest of two arrays zips them; a NULL inputs array gives NULL inputs.
            FROM unnest(task_push_batch.identifiers, task_push_batch.inputs) WITH ORDINALITY AS c(identifier, input, ord)
        ),
        older_ready AS (
            -- Older tasks of the same identifiers that this insertion mode touches (the matrix of
            -- design §4.2), in parts that each match one index: READY ones through
            -- task_ready_identifier, EXPIRED to SUCCEEDED (RECREATED too for DELETE)
            -- through task_identifier, REDUNDANT (DELETE only) through
            -- task_identifier_redundant.
            -- ACTIVE tasks are never touched; rows locked by a concurrent transaction are
            -- skipped, not waited for. The mode tests depend on no row, so an APPEND reads nothing.
            SELECT t.topic, t.sequence FROM task t
            WHERE v_mode <> 0
              AND (t.topic || E'\n' || t.identifier) = ANY (ARRAY(SELECT task_push_batch.topic || E'\n' || i
                                                                 FROM unnest(task_push_batch.identifiers) i))
              AND t.topic = task_push_batch.topic AND t.state = 1
              AND t.identifier = ANY (task_push_batch.identifiers)
            FOR UPDATE SKIP LOCKED
        ),
        older_settled AS (
            -- REPLACE also ends settled tasks up to SUCCEEDED; DELETE removes every one,
            -- the REDUNDANT ones through task_identifier_redundant (000031).
            SELECT t.topic, t.sequence FROM task t
            WHERE v_mode IN (1, 3)
              AND hashtext(t.topic) = hashtext(task_push_batch.topic) AND t.topic = task_push_batch.topic
              AND t.state BETWEEN 2 AND 7 AND (v_mode = 3 OR t.state <= 6)
              AND t.identifier = ANY (task_push_batch.identifiers)
            FOR UPDATE SKIP LOCKED
        ),
        older_redundant AS (
            SELECT t.topic, t.sequence FROM task t
            WHERE v_mode = 3
              AND hashtext(t.topic || E'\n' || t.identifier) = ANY (ARRAY(SELECT hashtext(task_push_batch.topic || E'\n' || i)
                                                                           FROM unnest(task_push_batch.identifiers) i))
              AND t.topic = task_push_batch.topic AND t.state = 8
              AND t.identifier = ANY (task_push_batch.identifiers)
            FOR UPDATE SKIP LOCKED
        ),
        older AS (
            SELECT r.topic, r.sequence FROM older_ready r
            UNION ALL
            SELECT s.topic, s.sequence FROM older_settled s
            UNION ALL
            SELECT e.topic, e.sequence FROM older_redundant e
        ),
        -- The topic as a value (not only o's) lets the planner prune the target to the
        -- topic's table; the mode test goes in the subquery, since a WHERE that folds to false
        -- leaves every table of task as a target (and locks them all).
        made_redundant AS (
            UPDATE task t SET state = 8, descent = GREATEST(t.state, t.descent)
            FROM (SELECT * FROM older WHERE v_mode IN (1, 2)) o
            WHERE t.topic = task_push_batch.topic AND t.sequence = o.sequence
            RETURNING t.sequence
        ),
        deleted AS (
            DELETE FROM task t USING (SELECT * FROM older WHERE v_mode = 3) o
            WHERE t.topic = task_push_batch.topic AND t.sequence = o.sequence
            RETURNING t.sequence
        ),
        inserted AS (
            INSERT INTO task (topic, sequence, identifier, state, descent, input, reference, priority, not_before, concurrency_key)
            -- nextval over rows already in input order: sequences follow the input
            SELECT task_push_batch.topic, nextval('task_sequence'), c.identifier,
                   CASE WHEN v_mode IN (1, 2) AND NOT c.last THEN 8
                        WHEN task_push_batch.suspended THEN 4
                        ELSE 1 END,
                   1, -- descent: a fresh task was READY before whatever it is (design section 3)
                   c.input, NULLIF(task_push_batch.reference, ''), task_push_batch.priority, v_not_before,
                   -- in a topic polled by key, a task without one has the key '' (task_poll_keyed)
                   coalesce(NULLIF(task_push_batch.concurrency_key, ''), CASE WHEN v_keyed THEN '' END)
            FROM (SELECT * FROM creation c WHERE v_mode <> 3 OR c.last ORDER BY c.ord) c
            RETURNING sequence, state
        )
        SELECT array_agg(i.sequence ORDER BY i.sequence), min(i.sequence) FILTER (WHERE i.state = 1)
        INTO v_sequences, v_first
        FROM inserted i;
    END IF;

    -- With the position of the first READY task (every task of a call has the same
    -- priority and not-before time) and, when it is delayed, the milliseconds until it is
    -- due and the time it is (000053): a processor then polls from there, or arms a
    -- timer, instead of reading the topic from its head (repository.Notification).
    -- Delivered at commit, coalesced per transaction.
    IF v_first IS NOT NULL THEN
        PERFORM pg_notify('task_notification', 'WORK ' || md5(task_push_batch.topic) || ' '
                          || task_push_batch.priority || ' ' || v_first
                          || CASE WHEN v_not_before > clock_timestamp()
                                  THEN ' ' || ceil(extract(epoch FROM v_not_before - clock_timestamp()) * 1000)::bigint
                                       || ' ' || ceil(extract(epoch FROM v_not_before) * 1000)::bigint
                                  ELSE '' END);
    END IF;
    RETURN QUERY SELECT unnest(v_sequences);
END
$$;


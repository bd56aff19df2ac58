-- 000025: pushes and completions in one long transaction cost the same each, and a push
-- of APPEND from SQL is no longer planned at every call.
--
-- A tally row (000017) belongs to a topic, a second (the transaction's start, now()) and
-- a writer, the session's server process: every push statement and every completion
-- statement of one transaction upserted the same row. A row updated again and again by
-- one transaction is a chain of versions nothing may prune before it ends, which each
-- upsert walks from its start: a transaction of n statements cost n²/2 steps. Now
-- task_tally_writer numbers a transaction's tally upserts (a push statement counts one
-- per topic it inserts into, a completion statement one when it counts a decision) in
-- a setting local to the transaction, and moves to a new writer every 64: the writer is
-- the process id modulo 2^22 (Linux's limit for process ids, so that two sessions never
-- share a writer there) plus 2^22 for each 64 upserts before it, modulo 512. A
-- transaction of one statement writes the row it wrote before, a chain is at most 64
-- versions long until a transaction passes 32 768 upserts, and the charts, which sum the
-- writers of a second, see the same counts.
--
-- task_push_batch (000015) ran its whole statement, with the reads of older tasks that
-- REPLACE, SUPERSEDE and DELETE need, for an APPEND too: that statement names the
-- topic's partition, so it is planned at each call (about 0.4 ms, most of a push from
-- SQL). An APPEND now runs the insertion alone, as the Go push does (TaskPushAppend), a
-- statement the server plans once per session; either statement's rows are then
-- announced by one notification, sent after it (the same payload, at the same commit).
--
-- Together: 40 000 task_push calls in one transaction (a row trigger under a bulk
-- INSERT) 4.5 s instead of 33 s; 16 sessions each pushing one task per transaction 2 150-
-- 2 340 pushes/s instead of 1 280-1 360 (BENCHMARKS.md).

CREATE FUNCTION task_tally_writer() RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_setting text := current_setting('pgtask.tally_statements', true);
    v_n       integer := 0; -- the statements of the transaction before this one, modulo 32 768
BEGIN
    -- what this function wrote; anything else (a session's own SET, say) counts as none
    IF v_setting ~ '^[0-9]{1,5}$' THEN
        v_n := v_setting::integer % 32768;
    END IF;
    PERFORM set_config('pgtask.tally_statements', ((v_n + 1) % 32768)::text, true);
    RETURN pg_backend_pid() % 4194304 + v_n / 64 * 4194304;
END
$$;

CREATE OR REPLACE FUNCTION task_tally_pushed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO task_tally AS y (topic, second, writer, pushed)
    SELECT n.topic, date_trunc('second', now()), task_tally_writer(), count(*)
    FROM pushed n GROUP BY n.topic
    ON CONFLICT (topic, second, writer) DO UPDATE SET pushed = y.pushed + excluded.pushed;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION task_complete(p_topic text, p_owner text, p_sequences bigint[], p_attempts integer[],
                                         p_results smallint[], p_outputs text[], p_delays_ms bigint[])
RETURNS SETOF task
LANGUAGE plpgsql VOLATILE
SET enable_nestloop = off
AS $$
DECLARE
    v_max_attempts integer;
    v_base_ms      bigint;
    v_cap_ms       bigint;
    v_jitter_ms    bigint;
BEGIN
    SELECT p.max_attempts, p.backoff_base_ms, p.backoff_cap_ms, p.backoff_jitter_ms
    INTO v_max_attempts, v_base_ms, v_cap_ms, v_jitter_ms
    FROM task_topic p WHERE p.topic = p_topic;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH decision AS (
        SELECT d.sequence, d.attempt, d.result, NULLIF(d.output, '') AS output, d.delay_ms
        FROM unnest(p_sequences, p_attempts, p_results, p_outputs, p_delays_ms)
             AS d(sequence, attempt, result, output, delay_ms)
    ),
    done AS (
        UPDATE task t
        SET state      = CASE WHEN t.cancelled THEN 3
                              WHEN d.result = 4 THEN 1
                              -- a FAILURE with attempts left goes back to READY
                              WHEN d.result = 0 AND t.attempt - t.returned < v_max_attempts THEN 1
                              ELSE d.result + 3 END,
            descent    = GREATEST(t.state, t.descent),
            output     = CASE WHEN t.cancelled THEN 'cancelled'
                              WHEN d.result = 4 THEN t.output
                              ELSE d.output END,
            completed  = CASE WHEN t.cancelled THEN now()
                              WHEN d.result = 4 THEN NULL
                              WHEN d.result = 0 AND t.attempt - t.returned < v_max_attempts THEN NULL
                              ELSE now() END,
            not_before = CASE WHEN t.cancelled THEN t.not_before
                              WHEN d.result = 4 THEN now() + d.delay_ms * interval '1 millisecond'
                              WHEN d.result = 0 AND t.attempt - t.returned < v_max_attempts
                              -- backoff: min(cap, base*2^(attempt-1)) + random jitter
                              THEN now() + (least(v_cap_ms::double precision,
                                                  v_base_ms * power(2::double precision, least(t.attempt - t.returned - 1, 60)))
                                            + random() * v_jitter_ms) * interval '1 millisecond'
                              ELSE t.not_before END,
            -- a snooze hands the attempt back: it does not count against max_attempts
            returned   = CASE WHEN d.result = 4 AND NOT t.cancelled THEN t.returned + 1 ELSE t.returned END,
            errors     = CASE WHEN t.cancelled THEN array_append(t.errors, 'cancelled')
                              WHEN d.result = 0 THEN array_append(t.errors, COALESCE(d.output, 'failed'))
                              ELSE t.errors END
        FROM decision d
        WHERE t.topic = p_topic AND t.sequence = ANY (p_sequences)
          AND t.sequence = d.sequence
          -- IS TRUE keeps these tests out of index choices (they only filter)
          AND (t.state = 0 AND t.owner = p_owner AND t.attempt = d.attempt) IS TRUE
        RETURNING t.*
    ),
    tallied AS (
        -- the decisions of this statement, counted for the charts (task_tally); a
        -- statement whose decisions are all snoozes adds nothing
        INSERT INTO task_tally AS y (topic, second, writer, retried, failed, suspended, filtered, succeeded)
        SELECT p_topic, date_trunc('second', now()), task_tally_writer(),
               count(*) FILTER (WHERE r.state = 1 AND d.result = 0),
               count(*) FILTER (WHERE r.state = 3), count(*) FILTER (WHERE r.state = 4),
               count(*) FILTER (WHERE r.state = 5), count(*) FILTER (WHERE r.state = 6)
        FROM done r JOIN decision d ON d.sequence = r.sequence
        HAVING count(*) FILTER (WHERE r.state <> 1 OR d.result = 0) > 0
        ON CONFLICT (topic, second, writer) DO UPDATE
        SET retried = y.retried + excluded.retried, failed = y.failed + excluded.failed,
            suspended = y.suspended + excluded.suspended, filtered = y.filtered + excluded.filtered,
            succeeded = y.succeeded + excluded.succeeded
    ),
    notified AS (
        -- the first task made READY in poll order, and when the earliest of them is due
        SELECT pg_notify('task_notification', 'WORK ' || md5(p_topic) || ' ' || f.priority || ' ' || f.sequence
                         || CASE WHEN f.due > clock_timestamp()
                                 THEN ' ' || ceil(extract(epoch FROM f.due - clock_timestamp()) * 1000)::bigint
                                 ELSE '' END) AS sent
        FROM (SELECT r.priority, r.sequence, min(coalesce(r.not_before, '-infinity')) OVER () AS due
              FROM done r WHERE r.state = 1
              ORDER BY r.priority, r.sequence LIMIT 1) f
    )
    SELECT c.* FROM done c
    WHERE task_all_or_nothing((SELECT count(*) FROM done), cardinality(p_sequences))
      -- notified runs only when referenced: a scalar subquery in WHERE always runs
      AND (SELECT count(*) FROM notified) >= 0;
END
$$;

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

    IF task_push_batch.delay > interval '0' THEN
        v_not_before := now() + task_push_batch.delay;
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
            -- design §4.2), in two parts that each match one index: READY ones through
            -- task_ready_identifier, settled ones (EXPIRED and after) through task_identifier.
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
            -- REPLACE also ends settled tasks up to SUCCEEDED; DELETE removes every one.
            SELECT t.topic, t.sequence FROM task t
            WHERE v_mode IN (1, 3)
              AND hashtext(t.topic) = hashtext(task_push_batch.topic) AND t.topic = task_push_batch.topic AND t.state >= 2
              AND t.identifier = ANY (task_push_batch.identifiers)
              AND (v_mode = 3 OR t.state <= 6)
            FOR UPDATE SKIP LOCKED
        ),
        older AS (
            SELECT r.topic, r.sequence FROM older_ready r
            UNION ALL
            SELECT s.topic, s.sequence FROM older_settled s
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
    -- due: a processor then polls from there, or arms a timer, instead of reading the
    -- topic from its head (repository.Notification). Delivered at commit, coalesced per
    -- transaction.
    IF v_first IS NOT NULL THEN
        PERFORM pg_notify('task_notification', 'WORK ' || md5(task_push_batch.topic) || ' '
                          || task_push_batch.priority || ' ' || v_first
                          || CASE WHEN v_not_before > clock_timestamp()
                                  THEN ' ' || ceil(extract(epoch FROM v_not_before - clock_timestamp()) * 1000)::bigint
                                  ELSE '' END);
    END IF;
    RETURN QUERY SELECT unnest(v_sequences);
END
$$;

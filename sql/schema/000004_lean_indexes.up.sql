-- 000004: fewer and cheaper index writes per task (issue 5).
--
-- A task's row is written three times (push, poll, completion) and none of those updates
-- is HOT, because each changes state, which the partial indexes name. Every index a row
-- version enters is therefore paid up to three times per task. This migration writes
-- fewer index entries per task, and cheaper ones:
--
-- * Identifier lookups go through one index per group of states, and only the B-tree
--   that state scans also need is a B-tree: READY rows through task_ready_identifier, a
--   hash index (a push writes a hash entry instead of a B-tree entry on text, about a
--   quarter of the cost); ACTIVE, EXPIRED, FAILED and SUSPENDED rows through task_open,
--   which also serves expiry, cancel checks and statistics by state; the settled rows
--   (EXPIRED and after) through task_identifier, which now leaves out READY and ACTIVE
--   rows, so push and poll no longer write it. Every lookup by identifier is an
--   equality.
-- * task_ready_lifo is gone. LIFO polls walk task_ready_fifo (renamed task_ready)
--   backwards one priority level at a time, so one index serves both orders.
-- * The primary key leads with sequence: (topic, sequence) compared the topic's text,
--   under the database's collation, on every step of every descent, and made the
--   sequence an attribute at a variable offset.
-- * identifier and reference compare bytewise (COLLATE "C") in task_open and
--   task_reference: they are keys, not prose, and no query orders them for people to
--   read. Equality is the same under any deterministic collation.
--
-- It also adds task_all_or_nothing, with which TaskComplete refuses a batch after
-- updating it instead of locking every row first (one heap write and one index probe
-- fewer per completed task).
--
-- Queries that look an identifier up across these groups of states now do it in parts,
-- one per index: the older tasks of task_push_batch and the SINGULAR conditions of
-- task_poll_candidates (below), TaskPush, TaskJunction, the queue-cap counts and
-- TopicStats (sql/queries).

DROP INDEX task_ready_lifo;
ALTER INDEX task_ready_fifo RENAME TO task_ready;
DROP INDEX task_identifier;
DROP INDEX task_open;

ALTER TABLE task DROP CONSTRAINT task_pkey, ADD PRIMARY KEY (sequence, topic);

-- task_pretty depends on the columns whose collation changes.
DROP VIEW task_pretty;
ALTER TABLE task ALTER COLUMN identifier TYPE text COLLATE "C",
                 ALTER COLUMN reference TYPE text COLLATE "C";
CREATE VIEW task_pretty AS
SELECT t.topic, t.sequence, t.identifier,
       (ARRAY['ACTIVE', 'READY', 'EXPIRED', 'FAILED', 'SUSPENDED', 'FILTERED', 'SUCCEEDED',
              'RECREATED', 'REDUNDANT'])[t.state + 1] AS state,
       (ARRAY['ACTIVE', 'READY', 'EXPIRED', 'FAILED', 'SUSPENDED', 'FILTERED', 'SUCCEEDED',
              'RECREATED', 'REDUNDANT'])[t.descent + 1] AS descent,
       t.owner, t.attempt, t.returned, t.priority, t.not_before, t.created, t.completed, t.input, t.output,
       t.reference, t.errors, t.cancelled
FROM (SELECT * FROM task) t;

CREATE INDEX task_ready_identifier ON task USING hash (identifier) WHERE state = 1;
CREATE INDEX task_open ON task (state, identifier, sequence) WHERE state <= 4 AND state <> 1;
-- A B-tree, not a hash: settled rows accumulate (ten million is a normal history), and
-- identifiers usually grow (ids, times), so a B-tree writes them on a few hot pages at
-- its right end where a hash index writes each at a random page of a large index.
CREATE INDEX task_identifier ON task (identifier, sequence) WHERE state >= 2;

-- task_all_or_nothing raises PT005 when a batch statement changed fewer rows (p_done)
-- than it was given (p_want); raised from the statement's last step, it undoes the
-- statement's every change.
CREATE FUNCTION task_all_or_nothing(p_done bigint, p_want integer) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF p_done <> p_want THEN
        RAISE EXCEPTION 'only % of % tasks qualify, nothing changed', p_done, p_want USING ERRCODE = 'PT005';
    END IF;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION task_poll_candidates(p_topic text, p_lifo boolean, p_condition smallint, p_size integer)
RETURNS SETOF tid
LANGUAGE plpgsql VOLATILE
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
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
            WHERE t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
            ORDER BY t.priority, t.sequence
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSIF NOT p_lifo AND p_condition = 1 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state = 0
                              AND o.identifier = t.identifier AND o.sequence < t.sequence)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state = 1
                              AND o.identifier = t.identifier AND o.sequence < t.sequence)
            ORDER BY t.priority, t.sequence
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSIF NOT p_lifo AND p_condition = 2 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state = 0
                              AND o.identifier = t.identifier AND o.sequence < t.sequence)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state = 1
                              AND o.identifier = t.identifier AND o.sequence < t.sequence)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state IN (2, 3)
                              AND o.identifier = t.identifier)
            ORDER BY t.priority, t.sequence
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSIF NOT p_lifo AND p_condition = 3 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state = 0
                              AND o.identifier = t.identifier AND o.sequence < t.sequence)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state = 1
                              AND o.identifier = t.identifier AND o.sequence < t.sequence)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state IN (2, 3)
                              AND o.identifier = t.identifier)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state = 4
                              AND o.identifier = t.identifier)
            ORDER BY t.priority, t.sequence
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    END IF;
    IF NOT p_lifo OR p_size <= 0 THEN
        RETURN;
    END IF;

    -- LIFO: one priority level at a time, lowest first, each read backwards (newest first)
    -- on task_ready: an equality on priority lets one index serve both orders.
    SELECT min(t.priority) INTO v_priority FROM task t WHERE t.topic = p_topic AND t.state = 1;
    WHILE v_priority IS NOT NULL AND v_left > 0 LOOP
        IF p_condition = 0 THEN
            RETURN QUERY
                SELECT t.ctid FROM task t
                WHERE t.topic = p_topic AND t.state = 1 AND t.priority = v_priority
                  AND (t.not_before IS NULL OR t.not_before <= now())
                ORDER BY t.sequence DESC
                LIMIT v_left
                FOR UPDATE OF t SKIP LOCKED;
        ELSIF p_condition = 1 THEN
            RETURN QUERY
                SELECT t.ctid FROM task t
                WHERE t.topic = p_topic AND t.state = 1 AND t.priority = v_priority
                  AND (t.not_before IS NULL OR t.not_before <= now())
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state = 0
                                  AND o.identifier = t.identifier AND o.sequence > t.sequence)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state = 1
                                  AND o.identifier = t.identifier AND o.sequence > t.sequence)
                ORDER BY t.sequence DESC
                LIMIT v_left
                FOR UPDATE OF t SKIP LOCKED;
        ELSIF p_condition = 2 THEN
            RETURN QUERY
                SELECT t.ctid FROM task t
                WHERE t.topic = p_topic AND t.state = 1 AND t.priority = v_priority
                  AND (t.not_before IS NULL OR t.not_before <= now())
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state = 0
                                  AND o.identifier = t.identifier AND o.sequence > t.sequence)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state = 1
                                  AND o.identifier = t.identifier AND o.sequence > t.sequence)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state IN (2, 3)
                                  AND o.identifier = t.identifier)
                ORDER BY t.sequence DESC
                LIMIT v_left
                FOR UPDATE OF t SKIP LOCKED;
        ELSIF p_condition = 3 THEN
            RETURN QUERY
                SELECT t.ctid FROM task t
                WHERE t.topic = p_topic AND t.state = 1 AND t.priority = v_priority
                  AND (t.not_before IS NULL OR t.not_before <= now())
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state = 0
                                  AND o.identifier = t.identifier AND o.sequence > t.sequence)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state = 1
                                  AND o.identifier = t.identifier AND o.sequence > t.sequence)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state IN (2, 3)
                                  AND o.identifier = t.identifier)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.topic = p_topic AND o.state = 4
                                  AND o.identifier = t.identifier)
                ORDER BY t.sequence DESC
                LIMIT v_left
                FOR UPDATE OF t SKIP LOCKED;
        END IF;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
        SELECT min(t.priority) INTO v_priority FROM task t
        WHERE t.topic = p_topic AND t.state = 1 AND t.priority > v_priority;
    END LOOP;
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
    suspended   boolean  DEFAULT false
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
    v_live       bigint;
    v_unfinished bigint;
    v_bad        record;
    v_rows       bigint;
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
    SELECT tt.queue_cap INTO v_cap FROM task_topic tt WHERE tt.topic = task_push_batch.topic FOR KEY SHARE;
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
        SELECT (SELECT count(*) FROM (SELECT 1 FROM task t WHERE t.topic = task_push_batch.topic AND t.state = 0
                                      LIMIT v_cap + 1) a)
             + (SELECT count(*) FROM (SELECT 1 FROM task t WHERE t.topic = task_push_batch.topic AND t.state = 1
                                      LIMIT v_cap + 1) r)
        INTO v_unfinished;
        IF v_unfinished + v_live > v_cap THEN
            RAISE EXCEPTION 'topic % is at its queue cap of % READY or ACTIVE tasks: push of % refused, nothing written',
                quote_literal(task_push_batch.topic), v_cap, v_live
                USING ERRCODE = 'PT004';
        END IF;
    END IF;

    IF task_push_batch.delay > interval '0' THEN
        v_not_before := now() + task_push_batch.delay;
    END IF;

    RETURN QUERY
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
        -- task_open, settled ones (EXPIRED and after) through task_identifier. ACTIVE tasks
        -- are never touched; rows locked by a concurrent transaction are skipped, not
        -- waited for. The mode tests depend on no row, so an APPEND reads nothing.
        SELECT t.topic, t.sequence FROM task t
        WHERE v_mode <> 0
          AND t.topic = task_push_batch.topic AND t.state = 1
          AND t.identifier = ANY (task_push_batch.identifiers)
        FOR UPDATE SKIP LOCKED
    ),
    older_settled AS (
        -- REPLACE also ends settled tasks up to SUCCEEDED; DELETE removes every one.
        SELECT t.topic, t.sequence FROM task t
        WHERE v_mode IN (1, 3)
          AND t.topic = task_push_batch.topic AND t.state >= 2
          AND t.identifier = ANY (task_push_batch.identifiers)
          AND (v_mode = 3 OR t.state <= 6)
        FOR UPDATE SKIP LOCKED
    ),
    older AS (
        SELECT r.topic, r.sequence FROM older_ready r
        UNION ALL
        SELECT s.topic, s.sequence FROM older_settled s
    ),
    made_redundant AS (
        UPDATE task t SET state = 8, descent = GREATEST(t.state, t.descent)
        FROM older o
        WHERE v_mode IN (1, 2) AND t.topic = o.topic AND t.sequence = o.sequence
        RETURNING t.sequence
    ),
    deleted AS (
        DELETE FROM task t USING older o
        WHERE v_mode = 3 AND t.topic = o.topic AND t.sequence = o.sequence
        RETURNING t.sequence
    ),
    inserted AS (
        INSERT INTO task (topic, sequence, identifier, state, descent, input, reference, priority, not_before)
        -- nextval over rows already in input order: sequences follow the input
        SELECT task_push_batch.topic, nextval('task_sequence'), c.identifier,
               CASE WHEN v_mode IN (1, 2) AND NOT c.last THEN 8
                    WHEN task_push_batch.suspended THEN 4
                    ELSE 1 END,
               CASE WHEN task_push_batch.suspended THEN 4 ELSE 1 END,
               c.input, NULLIF(task_push_batch.reference, ''), task_push_batch.priority, v_not_before
        FROM (SELECT * FROM creation c WHERE v_mode <> 3 OR c.last ORDER BY c.ord) c
        RETURNING sequence
    )
    -- Data-modifying CTEs run to completion whether or not the outer query reads them.
    SELECT i.sequence FROM inserted i ORDER BY i.sequence;

    -- Every call inserts at least one task (the last occurrence of each identifier); it is
    -- READY unless the push is suspended. Delivered at commit, coalesced per transaction.
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    IF v_rows > 0 AND NOT task_push_batch.suspended THEN
        PERFORM pg_notify('task_notification', 'WORK ' || md5(task_push_batch.topic));
    END IF;
END
$$;

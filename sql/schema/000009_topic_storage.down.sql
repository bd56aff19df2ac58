-- Reverts 000009: one partition of task per topic again (000001–000008), every task kept.
-- Dedicated topics become ordinary partitions like every other topic. As the up
-- migration, it moves every row in one transaction and stops before changing anything
-- when the topics need more locks than the lock table holds.

DO $$
DECLARE
    v_topics   bigint;
    v_capacity bigint;
    v_need     bigint;
BEGIN
    SELECT count(*) INTO v_topics FROM task_topic;
    v_capacity := coalesce(nullif(current_setting('pgtask.lock_capacity', true), '')::bigint,
                           current_setting('max_locks_per_transaction')::bigint
                           * (current_setting('max_connections')::bigint
                              + current_setting('autovacuum_max_workers')::bigint + 1
                              + current_setting('max_worker_processes')::bigint
                              + current_setting('max_wal_senders')::bigint
                              + current_setting('max_prepared_transactions')::bigint));
    v_need := 20 * v_topics;
    IF v_need > v_capacity * 3 / 4 THEN
        RAISE EXCEPTION 'task_topic has % topics: giving each its own partition in one transaction takes about % locks, more than three quarters of the lock table (% locks)', v_topics, v_need, v_capacity
            USING ERRCODE = 'configuration_limit_exceeded',
                  HINT = format('Nothing was changed. Set max_locks_per_transaction to at least %s in postgresql.conf, restart PostgreSQL and migrate again.',
                                ceil(current_setting('max_locks_per_transaction')::numeric * 4 * v_need / (3 * v_capacity)));
    END IF;
END
$$;

LOCK TABLE task IN EXCLUSIVE MODE;

DROP VIEW task_pretty;
DROP FUNCTION task_topic_dedicate(text);
DROP FUNCTION task_topic_stats(text[]);
DROP FUNCTION task_topic_rows(text);
DROP FUNCTION task_table_shares(text[]);
ALTER TABLE task RENAME TO task_v9;
ALTER INDEX task_pkey RENAME TO task_v9_pkey;
ALTER INDEX task_ready RENAME TO task_v9_ready;
ALTER INDEX task_ready_identifier RENAME TO task_v9_ready_identifier;
ALTER INDEX task_open RENAME TO task_v9_open;
ALTER INDEX task_identifier RENAME TO task_v9_identifier;
ALTER INDEX task_reference RENAME TO task_v9_reference;
ALTER INDEX task_created RENAME TO task_v9_created;
ALTER INDEX task_cancelled RENAME TO task_v9_cancelled;

CREATE TABLE task (
    topic       text        NOT NULL,
    sequence    bigint      NOT NULL DEFAULT nextval('task_sequence'),
    identifier  text        COLLATE "C" NOT NULL CHECK (length(identifier) BETWEEN 1 AND 500),
    state       smallint    NOT NULL DEFAULT 1 CHECK (state BETWEEN 0 AND 8),
    descent     smallint    NOT NULL DEFAULT 1 CHECK (descent BETWEEN 1 AND 8),
    owner       text        NULL,
    created     timestamptz NOT NULL DEFAULT now(),
    completed   timestamptz NULL,
    input       text        NULL,
    output      text        NULL,
    reference   text        COLLATE "C" NULL CHECK (length(reference) <= 500),
    priority    smallint    NOT NULL DEFAULT 0,
    not_before  timestamptz NULL,
    attempt     integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    returned    integer     NOT NULL DEFAULT 0 CHECK (returned >= 0),
    errors      text[]      NULL,
    cancelled   boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (sequence, topic)
) PARTITION BY LIST (topic);
CREATE INDEX task_ready ON task (priority, sequence) WHERE state = 1;
CREATE INDEX task_ready_identifier ON task USING hash (identifier) WHERE state = 1;
CREATE INDEX task_open ON task (state, identifier, sequence) WHERE state <= 4 AND state <> 1;
CREATE INDEX task_identifier ON task (identifier, sequence) WHERE state >= 2;
CREATE INDEX task_reference ON task (reference, sequence) WHERE reference IS NOT NULL;
CREATE INDEX task_created ON task USING brin (created);
CREATE INDEX task_cancelled ON task (owner) WHERE state = 0 AND cancelled;

-- One partition per topic, as 000008's task_topic_create made them. Dedicated tables
-- already bear those names: they step aside first.
DO $$
DECLARE
    v_table text;
BEGIN
    FOR v_table IN SELECT partition FROM task_topic WHERE dedicated LOOP
        EXECUTE format('ALTER TABLE %I RENAME TO %I', v_table, 'task_v9_' || substring(v_table FROM 6));
    END LOOP;
END
$$;
ALTER TABLE task_topic DROP COLUMN dedicated;
UPDATE task_topic SET partition = 'task_' || md5(topic);
DO $$
DECLARE
    v_topic     text;
    v_partition text;
    v_key       regclass;
BEGIN
    FOR v_topic, v_partition IN SELECT topic, partition FROM task_topic ORDER BY topic LOOP
        EXECUTE format('CREATE TABLE %I (LIKE task INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', v_partition);
        EXECUTE format('ALTER TABLE %I ADD CHECK (topic = %L)', v_partition, v_topic);
        EXECUTE format('ALTER TABLE task ATTACH PARTITION %I FOR VALUES IN (%L)', v_partition, v_topic);
        SELECT x.indexrelid INTO v_key
        FROM pg_inherits i JOIN pg_index x ON x.indexrelid = i.inhrelid
        WHERE i.inhparent = 'task_pkey'::regclass AND x.indrelid = v_partition::regclass;
        EXECUTE format('ALTER INDEX %s SET (fillfactor = 50)', v_key);
    END LOOP;
END
$$;
ALTER TABLE task_topic ADD CONSTRAINT task_topic_partition_key UNIQUE (partition);

INSERT INTO task (topic, sequence, identifier, state, descent, owner, created, completed, input, output,
                  reference, priority, not_before, attempt, returned, errors, cancelled)
SELECT topic, sequence, identifier, state, descent, owner, created, completed, input, output,
       reference, priority, not_before, attempt, returned, errors, cancelled
FROM task_v9;
-- Drops the buckets, their shared tables and the dedicated ones.
DROP TABLE task_v9;
DROP FUNCTION task_topic_delete_rows(text, bigint);
DROP FUNCTION task_bucket(text);

CREATE VIEW task_pretty AS
SELECT t.topic, t.sequence, t.identifier,
       (ARRAY['ACTIVE', 'READY', 'EXPIRED', 'FAILED', 'SUSPENDED', 'FILTERED', 'SUCCEEDED',
              'RECREATED', 'REDUNDANT'])[t.state + 1] AS state,
       (ARRAY['ACTIVE', 'READY', 'EXPIRED', 'FAILED', 'SUSPENDED', 'FILTERED', 'SUCCEEDED',
              'RECREATED', 'REDUNDANT'])[t.descent + 1] AS descent,
       t.owner, t.attempt, t.returned, t.priority, t.not_before, t.created, t.completed, t.input, t.output,
       t.reference, t.errors, t.cancelled
FROM (SELECT * FROM task) t;

ANALYZE task;

-- The functions as 000008 left them (bodies of 000008, 000001, 000003, 000007, 000004).

CREATE OR REPLACE FUNCTION task_topic_create(p_topic text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_partition text := 'task_' || md5(p_topic);
    v_key       regclass;
BEGIN
    INSERT INTO task_topic (topic, partition) VALUES (p_topic, v_partition)
    ON CONFLICT (topic) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE task INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', v_partition);
    EXECUTE format('ALTER TABLE %I ADD CHECK (topic = %L)', v_partition, p_topic);
    EXECUTE format('ALTER TABLE task ATTACH PARTITION %I FOR VALUES IN (%L)', v_partition, p_topic);
    -- the primary key's leaves leave room for the versions of each key (migration 000006)
    SELECT x.indexrelid INTO v_key
    FROM pg_inherits i JOIN pg_index x ON x.indexrelid = i.inhrelid
    WHERE i.inhparent = 'task_pkey'::regclass AND x.indrelid = v_partition::regclass;
    EXECUTE format('ALTER INDEX %s SET (fillfactor = 50)', v_key);
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION task_topic_destroy(p_topic text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_partition text;
BEGIN
    DELETE FROM task_topic WHERE topic = p_topic RETURNING partition INTO v_partition;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    EXECUTE format('DROP TABLE %I', v_partition);
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION task_topic_truncate(p_topic text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_partition text;
    v_count     bigint;
BEGIN
    SELECT partition INTO v_partition FROM task_topic WHERE topic = p_topic FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', v_partition);
    EXECUTE format('SELECT count(*) FROM %I', v_partition) INTO v_count;
    EXECUTE format('TRUNCATE %I', v_partition);
    RETURN v_count;
END
$$;

CREATE OR REPLACE FUNCTION task_topic_analyze(p_topic text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_partition text;
    v_rows      bigint;
BEGIN
    SELECT partition INTO v_partition FROM task_topic WHERE topic = p_topic;
    IF NOT FOUND THEN
        RETURN -1;
    END IF;
    EXECUTE format('ANALYZE %I', v_partition);
    SELECT GREATEST(reltuples, 0)::bigint INTO v_rows FROM pg_catalog.pg_class WHERE oid = to_regclass(v_partition);
    RETURN v_rows;
END
$$;

CREATE OR REPLACE FUNCTION task_queue_admits(p_topic text, p_cap bigint, p_live bigint) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_active bigint;
    v_ready  bigint;
BEGIN
    IF p_cap IS NULL THEN
        RETURN true;
    END IF;
    SELECT count(*) INTO v_active
    FROM (SELECT 1 FROM task t WHERE t.topic = p_topic AND t.state = 0 LIMIT p_cap + 1) a;
    SELECT count(*) INTO v_ready
    FROM (SELECT 1 FROM task t WHERE t.topic = p_topic AND t.state = 1 LIMIT p_cap + 1) r;
    RETURN v_active + v_ready + p_live <= p_cap;
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

ALTER FUNCTION task_topic_analyze(text) SET default_statistics_target = 10;

-- 000009: storage whose cost does not grow with the number of topics (issue 14).
--
-- Until now every topic was a partition of task. A statement that names one topic still
-- paid for all of them: a cached generic plan locks every partition before it prunes,
-- and statements that name no topic (expiry, the cancelled-lease check, owner purges)
-- read every partition. With 1 000 idle topics a burn-down ran at a quarter of its speed;
-- past about 1 500 the lock table (max_locks_per_transaction) ran out and processing
-- stopped with SQLSTATE 53200.
--
-- The layout now has a fixed number of relations, chosen here:
--
--   task                       PARTITION BY HASH (topic), 16 buckets (see below)
--     task_p000 … task_p015    one bucket each, PARTITION BY LIST (topic)
--       task_p000_shared       DEFAULT: every topic of the bucket that is not dedicated
--       task_<md5(topic)>      a dedicated topic's own table (task_topic_dedicate)
--
-- A topic is a row of task_topic and nothing else, so registering and destroying one
-- takes no DDL. A statement that names a topic prunes to one table (its bucket's shared
-- table or its own); one that names none reads the 16 buckets' tables. An operator can
-- give a heavy topic a table of its own (dedicated), which keeps the per-topic VACUUM,
-- statistics, TRUNCATE and DROP of the old layout for the topics that need them.
--
-- The number of buckets is read from the setting pgtask.partitions when this migration
-- runs (e.g. PGOPTIONS='-c pgtask.partitions=32'), 16 when unset; it is fixed afterwards.
-- More buckets make each table, its VACUUM and its indexes smaller, and every statement
-- that names no topic, or runs a generic plan, touch more relations (BENCHMARKS.md).
--
-- Indexes. Tables now hold many topics, so every index that serves a per-topic lookup
-- leads with the topic (after state where a lookup by state alone must also use it). Not
-- with its text: a B-tree compares keys at every step of every descent, and with the
-- topic's text in the keys (and in a primary key leading with it) a burn-down ran 10 to
-- 15 % slower. The indexes hold hashtext(topic), four bytes compared as an integer, and
-- every query names the topic twice, `hashtext(t.topic) = hashtext($1) AND t.topic = $1`:
-- the first finds the index range, the second the rows (two topics of one table whose
-- hashes collide share a range, and the topic test tells them apart). The primary key
-- leads with sequence, which is unique by itself; it includes topic because the
-- partition key must be part of it. The READY rows' identifier index, a hash index,
-- hashes `topic || E'\n' || identifier`, so that the same identifier in many topics (a
-- job name every tenant has) does not pile up in one hash bucket.
--
-- Moving the tasks. Every row is copied into the new table in this one transaction, so
-- the migration is all or nothing: pushes, polls and completions wait until it commits
-- (readers see the old table until then). It takes about 5 s per million tasks on
-- these 2-core machines (BENCHMARKS.md). Reading and dropping the old partitions locks
-- about 20 relations per topic, all held until commit; with more topics than the lock
-- table holds (max_locks_per_transaction × backends), the migration stops before
-- changing anything and names the setting to raise for it.

DO $$
DECLARE
    v_partitions bigint;
    v_capacity   bigint;
    v_need       bigint;
BEGIN
    SELECT count(*) INTO v_partitions FROM pg_catalog.pg_inherits WHERE inhparent = 'task'::regclass;
    -- the shared lock table holds max_locks_per_transaction × (max_connections +
    -- autovacuum_max_workers + 1 + max_worker_processes + max_wal_senders +
    -- max_prepared_transactions) locks; this transaction may use no more than three
    -- quarters of it (other sessions hold locks too). pgtask.lock_capacity replaces the
    -- computed figure (the tests use it to reach the limit with a few topics). When the
    -- estimate is wrong, PostgreSQL's own "out of shared memory" ends the migration,
    -- which changes nothing either.
    v_capacity := coalesce(nullif(current_setting('pgtask.lock_capacity', true), '')::bigint,
                           current_setting('max_locks_per_transaction')::bigint
                           * (current_setting('max_connections')::bigint
                              + current_setting('autovacuum_max_workers')::bigint + 1
                              + current_setting('max_worker_processes')::bigint
                              + current_setting('max_wal_senders')::bigint
                              + current_setting('max_prepared_transactions')::bigint));
    -- about 20 relations a partition: measured with 200 topics, 4 018 locks
    v_need := 20 * v_partitions;
    IF v_need > v_capacity * 3 / 4 THEN
        RAISE EXCEPTION 'task has % topic partitions: moving them to the new storage in one transaction takes about % locks, more than three quarters of the lock table (% locks)', v_partitions, v_need, v_capacity
            USING ERRCODE = 'configuration_limit_exceeded',
                  HINT = format('Nothing was changed. Set max_locks_per_transaction to at least %s in postgresql.conf, restart PostgreSQL and migrate again; it can be lowered once the migration is done.',
                                ceil(current_setting('max_locks_per_transaction')::numeric * 4 * v_need / (3 * v_capacity)));
    END IF;
END
$$;

-- Writers wait from here to the commit; plain reads go on.
LOCK TABLE task IN EXCLUSIVE MODE;

DROP VIEW task_pretty;
ALTER TABLE task RENAME TO task_v8;
ALTER INDEX task_pkey RENAME TO task_v8_pkey;
ALTER INDEX task_ready RENAME TO task_v8_ready;
ALTER INDEX task_ready_identifier RENAME TO task_v8_ready_identifier;
ALTER INDEX task_open RENAME TO task_v8_open;
ALTER INDEX task_identifier RENAME TO task_v8_identifier;
ALTER INDEX task_reference RENAME TO task_v8_reference;
ALTER INDEX task_created RENAME TO task_v8_created;
ALTER INDEX task_cancelled RENAME TO task_v8_cancelled;

-- The columns are those of 000001, with the collations of 000004. The primary key and
-- the indexes are created after the rows are copied (building an index is faster than
-- inserting into it row by row).
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
    cancelled   boolean     NOT NULL DEFAULT false
) PARTITION BY HASH (topic);

DO $$
DECLARE
    v_buckets integer;
    v_bucket  text;
BEGIN
    BEGIN
        v_buckets := coalesce(nullif(current_setting('pgtask.partitions', true), ''), '16')::integer;
    EXCEPTION WHEN invalid_text_representation OR numeric_value_out_of_range THEN
        v_buckets := 0;
    END;
    IF v_buckets NOT BETWEEN 1 AND 256 THEN
        RAISE EXCEPTION 'pgtask.partitions is %, want a whole number from 1 to 256', quote_literal(current_setting('pgtask.partitions', true))
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR r IN 0 .. v_buckets - 1 LOOP
        v_bucket := 'task_p' || lpad(r::text, 3, '0');
        EXECUTE format('CREATE TABLE %I PARTITION OF task FOR VALUES WITH (MODULUS %s, REMAINDER %s) PARTITION BY LIST (topic)',
                       v_bucket, v_buckets, r);
        EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', v_bucket || '_shared', v_bucket);
        -- A sequence belongs to one topic. Told so, the planner estimates `topic = $1
        -- AND sequence = ANY($2)` (completions, cancels, revivals) at the number of
        -- sequences; without it, it multiplies in the topic's share of a table of many
        -- topics, estimates one row, and may pick a nested loop that reads the batch of
        -- decisions once per task (147 ms for a completion of 1 000, BENCHMARKS.md).
        EXECUTE format('CREATE STATISTICS %I (dependencies) ON sequence, topic FROM %I',
                       v_bucket || '_shared_sequence_topic', v_bucket || '_shared');
    END LOOP;
END
$$;

INSERT INTO task (topic, sequence, identifier, state, descent, owner, created, completed, input, output,
                  reference, priority, not_before, attempt, returned, errors, cancelled)
SELECT topic, sequence, identifier, state, descent, owner, created, completed, input, output,
       reference, priority, not_before, attempt, returned, errors, cancelled
FROM task_v8;

-- Dropping the old parent drops every topic's partition with it.
DROP TABLE task_v8;

ALTER TABLE task ADD PRIMARY KEY (sequence, topic);
-- Poll order within a topic; LIFO polls walk it backwards one priority at a time.
CREATE INDEX task_ready ON task (hashtext(topic), priority, sequence) WHERE state = 1;
-- READY tasks by identifier (insertion modes, SINGULAR conditions, junctions).
CREATE INDEX task_ready_identifier ON task USING hash ((topic || E'\n' || identifier)) WHERE state = 1;
-- ACTIVE, EXPIRED, FAILED, SUSPENDED tasks: by state alone (expiry, owners' leases) and
-- by state, topic and identifier (conditions, junctions, statistics).
CREATE INDEX task_open ON task (state, hashtext(topic), identifier, sequence) WHERE state <= 4 AND state <> 1;
-- Settled tasks (EXPIRED and after) by identifier: REPLACE, DELETE, ETERNAL junctions,
-- and a topic's finished history (purges, retention).
CREATE INDEX task_identifier ON task (hashtext(topic), identifier, sequence) WHERE state >= 2;
CREATE INDEX task_reference ON task (hashtext(topic), reference, sequence) WHERE reference IS NOT NULL;
-- resolve(time): created grows with sequence, so a BRIN index is tiny and enough.
CREATE INDEX task_created ON task USING brin (created);
CREATE INDEX task_cancelled ON task (owner) WHERE state = 0 AND cancelled;

-- The primary keys' leaves leave room for the later versions of each task (000006).
DO $$
DECLARE
    v_key regclass;
BEGIN
    FOR v_key IN
        SELECT x.indexrelid FROM pg_catalog.pg_index x
        WHERE x.indisprimary AND x.indrelid IN (SELECT relid FROM pg_partition_tree('task') WHERE isleaf)
    LOOP
        EXECUTE format('ALTER INDEX %s SET (fillfactor = 50)', v_key);
    END LOOP;
END
$$;

CREATE VIEW task_pretty AS
SELECT t.topic, t.sequence, t.identifier,
       (ARRAY['ACTIVE', 'READY', 'EXPIRED', 'FAILED', 'SUSPENDED', 'FILTERED', 'SUCCEEDED',
              'RECREATED', 'REDUNDANT'])[t.state + 1] AS state,
       (ARRAY['ACTIVE', 'READY', 'EXPIRED', 'FAILED', 'SUSPENDED', 'FILTERED', 'SUCCEEDED',
              'RECREATED', 'REDUNDANT'])[t.descent + 1] AS descent,
       t.owner, t.attempt, t.returned, t.priority, t.not_before, t.created, t.completed, t.input, t.output,
       t.reference, t.errors, t.cancelled
FROM (SELECT * FROM task) t;

-- task_bucket names the bucket (partition of task) that holds a topic's rows.
-- The buckets are named task_pNNN after their remainder (OFFSET 0 keeps the name's
-- cast from running on other relations' names).
CREATE FUNCTION task_bucket(p_topic text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT b.relname
    FROM (SELECT c.relname::text AS relname
          FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
          WHERE i.inhparent = 'task'::regclass
          OFFSET 0) b
    WHERE satisfies_hash_partition('task'::regclass,
                                   (SELECT count(*) FROM pg_catalog.pg_inherits n WHERE n.inhparent = 'task'::regclass)::integer,
                                   substring(b.relname FROM 7)::integer, p_topic)
$$;

-- task_topic.partition now names the table that holds the topic's rows: its bucket's
-- shared table, or its own when dedicated.
ALTER TABLE task_topic DROP CONSTRAINT task_topic_partition_key;
ALTER TABLE task_topic ADD COLUMN dedicated boolean NOT NULL DEFAULT false;
UPDATE task_topic SET partition = task_bucket(topic) || '_shared';

ANALYZE task;

-- task_topic_create registers a topic: one row, no DDL. Returns false if it existed.
CREATE OR REPLACE FUNCTION task_topic_create(p_topic text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF p_topic IS NULL OR length(p_topic) NOT BETWEEN 1 AND 250 THEN
        RAISE EXCEPTION 'topic % is invalid: want 1 to 250 characters', coalesce(quote_literal(left(p_topic, 40)), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO task_topic (topic, partition) VALUES (p_topic, task_bucket(p_topic) || '_shared')
    ON CONFLICT (topic) DO NOTHING;
    RETURN FOUND;
END
$$;

-- task_topic_delete_rows deletes the tasks of a shared topic, at most p_limit of them
-- (NULL: all), and returns how many. All of them: in one statement, so one snapshot: a
-- task that changes state meanwhile (a retry puts an ACTIVE task back to READY, a
-- junction or a reset makes one READY) is followed to its new version and deleted all
-- the same, where one statement per group of states could miss it between two of them.
-- The condition on state is true of every task; written as one part per index, it lets
-- the planner read the topic's entries of the three partial indexes that together hold
-- every state (a BitmapOr), so the cost follows the topic's own rows, not its table's.
-- A batch (p_limit) need not be complete (the last call, with NULL, is): it reads the
-- three indexes with scans that stop at the limit, where a bitmap would first collect
-- every task of the topic (a million tasks in batches of 10 000 took 7 s instead of 2).
CREATE FUNCTION task_topic_delete_rows(p_topic text, p_limit bigint) RETURNS bigint
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
    v_deleted bigint;
BEGIN
    IF p_limit IS NULL THEN
        DELETE FROM task t
        WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic
          AND (t.state = 1 OR t.state = ANY ('{0,2,3,4}') OR t.state >= 2);
    ELSE
        DELETE FROM task t USING (
            (SELECT r.sequence FROM task r
             WHERE hashtext(r.topic) = hashtext(p_topic) AND r.topic = p_topic AND r.state = 1 LIMIT p_limit)
            UNION ALL
            (SELECT o.sequence FROM task o
             WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic LIMIT p_limit)
            UNION ALL
            (SELECT s.sequence FROM task s
             WHERE hashtext(s.topic) = hashtext(p_topic) AND s.topic = p_topic AND s.state >= 2 LIMIT p_limit)
            LIMIT p_limit) d
        WHERE t.topic = p_topic AND t.sequence = d.sequence;
    END IF;
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$;

-- task_topic_destroy removes a topic, its settings and all its tasks: a dedicated
-- topic's table is dropped, a shared topic's rows deleted. Returns false for an unknown
-- topic without raising, so the caller's transaction survives. Dropping a dedicated
-- table takes a brief exclusive lock on its bucket; lock_timeout bounds how long the
-- other topics of the bucket can wait behind it (the call then fails with 55P03).
CREATE OR REPLACE FUNCTION task_topic_destroy(p_topic text) RETURNS boolean
LANGUAGE plpgsql
SET lock_timeout = '1s'
AS $$
DECLARE
    v_table     text;
    v_dedicated boolean;
BEGIN
    DELETE FROM task_topic WHERE topic = p_topic RETURNING partition, dedicated INTO v_table, v_dedicated;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_dedicated THEN
        EXECUTE format('DROP TABLE %I', v_table);
    ELSE
        PERFORM task_topic_delete_rows(p_topic, NULL);
    END IF;
    RETURN true;
END
$$;

-- task_topic_truncate deletes every task of a topic and returns how many there were;
-- NULL for an unknown topic. A dedicated topic's table is truncated (its own processors
-- wait, no other topic does); a shared topic's rows are deleted.
CREATE OR REPLACE FUNCTION task_topic_truncate(p_topic text) RETURNS bigint
LANGUAGE plpgsql
SET lock_timeout = '1s'
AS $$
DECLARE
    v_table     text;
    v_dedicated boolean;
    v_count     bigint;
BEGIN
    SELECT partition, dedicated INTO v_table, v_dedicated FROM task_topic WHERE topic = p_topic FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF NOT v_dedicated THEN
        RETURN task_topic_delete_rows(p_topic, NULL);
    END IF;
    EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', v_table);
    EXECUTE format('SELECT count(*) FROM %I', v_table) INTO v_count;
    EXECUTE format('TRUNCATE %I', v_table);
    RETURN v_count;
END
$$;

-- task_topic_dedicate gives a topic a table of its own, moving its tasks there; returns
-- false when it already has one. The table is attached to the topic's bucket, beside the
-- bucket's shared table, and PostgreSQL reads both once while attaching: the new table
-- to check its rows (no constraint can prove the bucket's hash of them), the shared one
-- to check that no row of the topic is left in it. The other topics of the bucket wait
-- for those reads and for the rest of the caller's transaction, so call it on its own;
-- lock_timeout bounds how long it waits for them. A topic that has tasks must be paused
-- with none ACTIVE, so that no completion races the move.
CREATE FUNCTION task_topic_dedicate(p_topic text) RETURNS boolean
LANGUAGE plpgsql
SET lock_timeout = '1s'
AS $$
DECLARE
    v_topic  task_topic%ROWTYPE;
    v_table  text := 'task_' || md5(p_topic);
    v_bucket text;
    v_active bigint;
    v_key    regclass;
BEGIN
    -- FOR UPDATE: pushes to the topic (FOR KEY SHARE) wait until the move commits.
    SELECT * INTO v_topic FROM task_topic WHERE topic = p_topic FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown topic %', quote_nullable(p_topic)
            USING ERRCODE = 'PT001', HINT = 'Register the topic first, e.g. SELECT task_topic_create(''my-topic'').';
    END IF;
    IF v_topic.dedicated THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM task t WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1)
       OR EXISTS (SELECT 1 FROM task t WHERE t.state = ANY ('{0,2,3,4}') AND hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic)
       OR EXISTS (SELECT 1 FROM task t WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state >= 2) THEN
        IF v_topic.active THEN
            RAISE EXCEPTION 'topic % has tasks and is not paused: pause it, wait until none of its tasks is ACTIVE, then dedicate it', quote_literal(p_topic)
                USING ERRCODE = 'object_in_use';
        END IF;
        SELECT count(*) INTO v_active FROM task t WHERE t.state = 0 AND hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic;
        IF v_active > 0 THEN
            RAISE EXCEPTION 'topic % has % ACTIVE tasks: wait until they finish (the topic is paused), then dedicate it', quote_literal(p_topic), v_active
                USING ERRCODE = 'object_in_use';
        END IF;
    END IF;
    v_bucket := task_bucket(p_topic);
    -- The indexes come with the table (LIKE … INCLUDING INDEXES), so that attaching it
    -- builds none while the bucket waits.
    EXECUTE format('CREATE TABLE %I (LIKE task INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES)', v_table);
    EXECUTE format('WITH moved AS (DELETE FROM task t WHERE t.topic = %L RETURNING t.*) INSERT INTO %I SELECT * FROM moved',
                   p_topic, v_table);
    -- A processor that had not seen the pause yet may have leased a task between the check
    -- above and the move: its completion would miss the moved row. Undo it all then.
    EXECUTE format('SELECT count(*) FROM %I WHERE state = 0', v_table) INTO v_active;
    IF v_active > 0 THEN
        RAISE EXCEPTION 'topic % had % tasks leased while it was being dedicated: nothing changed; wait until none of its tasks is ACTIVE, then dedicate it', quote_literal(p_topic), v_active
            USING ERRCODE = 'object_in_use';
    END IF;
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES IN (%L)', v_bucket, v_table, p_topic);
    SELECT x.indexrelid INTO v_key FROM pg_catalog.pg_index x WHERE x.indrelid = v_table::regclass AND x.indisprimary;
    EXECUTE format('ALTER INDEX %s SET (fillfactor = 50)', v_key);
    UPDATE task_topic SET dedicated = true, partition = v_table WHERE topic = p_topic;
    RETURN true;
END
$$;

-- task_topic_analyze refreshes the statistics of the table holding a topic and returns
-- that table's estimated row count (-1 for an unknown topic). default_statistics_target
-- 10 as 000007 set it.
CREATE OR REPLACE FUNCTION task_topic_analyze(p_topic text) RETURNS bigint
LANGUAGE plpgsql
SET default_statistics_target = 10
AS $$
DECLARE
    v_table text;
    v_rows  bigint;
BEGIN
    SELECT partition INTO v_table FROM task_topic WHERE topic = p_topic;
    IF NOT FOUND THEN
        RETURN -1;
    END IF;
    EXECUTE format('ANALYZE %I', v_table);
    SELECT GREATEST(reltuples, 0)::bigint INTO v_rows FROM pg_catalog.pg_class WHERE oid = to_regclass(v_table);
    RETURN v_rows;
END
$$;

-- task_table_shares describes, for each of the named tables that hold tasks, from its
-- statistics (as fresh as its last ANALYZE; no row is read, no table is locked), its row
-- count and how the planner shares it out among topics: the most common topics with
-- their frequencies, and the share each other topic gets (what those leave, split
-- evenly). Read once for many topics (task_topic_stats): the statistics view costs a
-- few milliseconds to read.
CREATE FUNCTION task_table_shares(p_tables text[])
RETURNS TABLE (table_name text, row_count double precision, topics text[], shares real[], other_share double precision)
LANGUAGE sql STABLE AS $$
    SELECT c.relname::text, GREATEST(c.reltuples, 0)::double precision,
           s.most_common_vals::text::text[], s.most_common_freqs,
           (1 - COALESCE((SELECT sum(x) FROM unnest(s.most_common_freqs) x), 0))
           / GREATEST(CASE WHEN s.n_distinct < 0 THEN -s.n_distinct * GREATEST(c.reltuples, 0) ELSE s.n_distinct END
                      - COALESCE(cardinality(s.most_common_freqs), 0), 1)
    FROM pg_catalog.pg_class c
    LEFT JOIN pg_catalog.pg_stats s
           ON s.schemaname = current_schema() AND s.tablename = c.relname AND s.attname = 'topic' AND NOT s.inherited
    WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY (p_tables)
$$;

-- task_topic_rows estimates how many tasks a topic holds from task_table_shares: its
-- table's row count when dedicated, otherwise the topic's share of its table. NULL for an
-- unknown topic.
CREATE FUNCTION task_topic_rows(p_topic text) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT round(CASE WHEN tt.dedicated THEN s.row_count
                      ELSE s.row_count * COALESCE(s.shares[array_position(s.topics, tt.topic)], s.other_share, 0) END)::bigint
    FROM task_topic tt JOIN LATERAL task_table_shares(ARRAY[tt.partition]) s ON true
    WHERE tt.topic = p_topic
$$;

-- task_topic_stats returns the statistics of TopicStats (sql/queries/topic.sql) for every
-- topic, or those named in p_topics when it is not empty, in one statement: each topic's
-- open tasks through its own index ranges (so the cost follows the open tasks and the
-- number of topics, never the finished history), the row estimates from one read of
-- task_table_shares. Without JIT: the estimate of ten thousand small index scans made
-- PostgreSQL spend a second compiling a statement that runs in a few hundred
-- milliseconds.
CREATE FUNCTION task_topic_stats(p_topics text[])
RETURNS TABLE (topic text, active bigint, ready bigint, delayed bigint, expired bigint, failed bigint,
               suspended bigint, oldest_ready_age_ms bigint, rows_estimate bigint)
LANGUAGE sql STABLE
SET jit = off
AS $$
    WITH shares AS MATERIALIZED (SELECT * FROM task_table_shares(ARRAY(SELECT DISTINCT partition FROM task_topic)))
    SELECT tt.topic, s.active, s.ready, s.delayed, s.expired, s.failed, s.suspended, s.oldest_ready_age_ms,
           round(CASE WHEN tt.dedicated THEN sh.row_count
                      ELSE sh.row_count * COALESCE(sh.shares[array_position(sh.topics, tt.topic)], sh.other_share, 0)
                 END)::bigint
    FROM task_topic tt
    LEFT JOIN shares sh ON sh.table_name = tt.partition
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE t.state = 0)                          AS active,
               count(*) FILTER (WHERE t.state = 1)                          AS ready,
               count(*) FILTER (WHERE t.state = 1 AND t.not_before > now()) AS delayed,
               count(*) FILTER (WHERE t.state = 2)                          AS expired,
               count(*) FILTER (WHERE t.state = 3)                          AS failed,
               count(*) FILTER (WHERE t.state = 4)                          AS suspended,
               COALESCE((EXTRACT(EPOCH FROM now() - min(COALESCE(t.not_before, t.created))
                            FILTER (WHERE t.state = 1 AND (t.not_before IS NULL OR t.not_before <= now()))) * 1000)::bigint,
                        0)::bigint AS oldest_ready_age_ms
        FROM (SELECT r.state, r.not_before, r.created FROM task r
              WHERE hashtext(r.topic) = hashtext(tt.topic) AND r.topic = tt.topic AND r.state = 1
              UNION ALL
              SELECT o.state, o.not_before, o.created FROM task o
              WHERE o.state = ANY ('{0,2,3,4}') AND hashtext(o.topic) = hashtext(tt.topic) AND o.topic = tt.topic) t
    ) s
    WHERE cardinality(p_topics) = 0 OR tt.topic = ANY (p_topics)
$$;

-- The cap test of 000007, on the new indexes.
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
    FROM (SELECT 1 FROM task t WHERE t.state = 0 AND hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic
          LIMIT p_cap + 1) a;
    SELECT count(*) INTO v_ready
    FROM (SELECT 1 FROM task t WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
          LIMIT p_cap + 1) r;
    RETURN v_active + v_ready + p_live <= p_cap;
END
$$;

-- The poll candidates of 000004, on the new indexes.
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
            WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
            ORDER BY t.priority, t.sequence
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSIF NOT p_lifo AND p_condition = 1 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                              AND o.identifier = t.identifier AND o.sequence < t.sequence)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || t.identifier) AND o.state = 1
                              AND o.topic = p_topic AND o.identifier = t.identifier AND o.sequence < t.sequence)
            ORDER BY t.priority, t.sequence
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSIF NOT p_lifo AND p_condition = 2 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                              AND o.identifier = t.identifier AND o.sequence < t.sequence)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || t.identifier) AND o.state = 1
                              AND o.topic = p_topic AND o.identifier = t.identifier AND o.sequence < t.sequence)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = ANY ('{2,3}') AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                              AND o.identifier = t.identifier)
            ORDER BY t.priority, t.sequence
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSIF NOT p_lifo AND p_condition = 3 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                              AND o.identifier = t.identifier AND o.sequence < t.sequence)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || t.identifier) AND o.state = 1
                              AND o.topic = p_topic AND o.identifier = t.identifier AND o.sequence < t.sequence)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = ANY ('{2,3}') AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                              AND o.identifier = t.identifier)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 4 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
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
    SELECT min(t.priority) INTO v_priority FROM task t
    WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1;
    WHILE v_priority IS NOT NULL AND v_left > 0 LOOP
        IF p_condition = 0 THEN
            RETURN QUERY
                SELECT t.ctid FROM task t
                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1 AND t.priority = v_priority
                  AND (t.not_before IS NULL OR t.not_before <= now())
                ORDER BY t.sequence DESC
                LIMIT v_left
                FOR UPDATE OF t SKIP LOCKED;
        ELSIF p_condition = 1 THEN
            RETURN QUERY
                SELECT t.ctid FROM task t
                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1 AND t.priority = v_priority
                  AND (t.not_before IS NULL OR t.not_before <= now())
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                  AND o.identifier = t.identifier AND o.sequence > t.sequence)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || t.identifier) AND o.state = 1
                                  AND o.topic = p_topic AND o.identifier = t.identifier AND o.sequence > t.sequence)
                ORDER BY t.sequence DESC
                LIMIT v_left
                FOR UPDATE OF t SKIP LOCKED;
        ELSIF p_condition = 2 THEN
            RETURN QUERY
                SELECT t.ctid FROM task t
                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1 AND t.priority = v_priority
                  AND (t.not_before IS NULL OR t.not_before <= now())
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                  AND o.identifier = t.identifier AND o.sequence > t.sequence)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || t.identifier) AND o.state = 1
                                  AND o.topic = p_topic AND o.identifier = t.identifier AND o.sequence > t.sequence)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = ANY ('{2,3}') AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                  AND o.identifier = t.identifier)
                ORDER BY t.sequence DESC
                LIMIT v_left
                FOR UPDATE OF t SKIP LOCKED;
        ELSIF p_condition = 3 THEN
            RETURN QUERY
                SELECT t.ctid FROM task t
                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1 AND t.priority = v_priority
                  AND (t.not_before IS NULL OR t.not_before <= now())
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                  AND o.identifier = t.identifier AND o.sequence > t.sequence)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || t.identifier) AND o.state = 1
                                  AND o.topic = p_topic AND o.identifier = t.identifier AND o.sequence > t.sequence)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = ANY ('{2,3}') AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                  AND o.identifier = t.identifier)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 4 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                  AND o.identifier = t.identifier)
                ORDER BY t.sequence DESC
                LIMIT v_left
                FOR UPDATE OF t SKIP LOCKED;
        END IF;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
        SELECT min(t.priority) INTO v_priority FROM task t
        WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1 AND t.priority > v_priority;
    END LOOP;
END
$$;

-- The SQL push of 000004, on the new indexes.
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
        IF NOT task_queue_admits(task_push_batch.topic, v_cap, v_live) THEN
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

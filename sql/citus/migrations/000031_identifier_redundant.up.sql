-- 000031 on a distributed database: the plain migration's two indexes (Citus passes
-- them on to every shard of task), and task_citus_push, the push Citus delegates, reading
-- the older tasks a REPLACE ends through task_identifier alone, as the plain push does.
-- IF EXISTS and IF NOT EXISTS, as the newest form must be: a database distributed at the
-- newest version has them already (internal/citustest applies the newest form again).
-- task_topic_dedicate and task_topic_delete_rows as the plain migration restates them
-- (a topic's destruction deletes its rows through the latter on Citus too).
-- task_push_batch is not run on a distributed database (functions.sql has its own, which
-- takes task_citus_push).

-- one connection per node for the whole transaction: Citus refuses a function's
-- change after DDL it ran on the shards in parallel
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

DROP INDEX IF EXISTS task_identifier;
CREATE INDEX IF NOT EXISTS task_identifier ON task (hashtext(topic), identifier, sequence) WHERE state BETWEEN 2 AND 7;
CREATE INDEX IF NOT EXISTS task_identifier_redundant ON task (hashtext(topic || E'\n' || identifier), sequence) WHERE state = 8;

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
    IF v_cap IS NOT NULL AND NOT task_queue_admits(p_topic, v_cap,
           (SELECT count(*) FROM unnest(p_suspended, v_last) AS e(suspended, last) WHERE NOT e.suspended AND e.last)) THEN
        RETURN;
    END IF;
    v_after := ARRAY(SELECT CASE WHEN u.us <> 0 THEN to_timestamp(u.us / 1e6)
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

CREATE OR REPLACE FUNCTION task_topic_dedicate(p_topic text) RETURNS boolean
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
       OR EXISTS (SELECT 1 FROM task t WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state BETWEEN 2 AND 7)
       OR EXISTS (SELECT 1 FROM task t WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state >= 8) THEN
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

CREATE OR REPLACE FUNCTION task_topic_delete_rows(p_topic text, p_limit bigint) RETURNS bigint
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_deleted bigint;
BEGIN
    IF p_limit IS NULL THEN
        DELETE FROM task t
        WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic
          AND (t.state = 1 OR t.state = ANY ('{0,2,3,4}') OR t.state BETWEEN 2 AND 7 OR t.state >= 8);
    ELSE
        DELETE FROM task t USING (
            (SELECT r.sequence FROM task r
             WHERE hashtext(r.topic) = hashtext(p_topic) AND r.topic = p_topic AND r.state = 1 LIMIT p_limit)
            UNION ALL
            (SELECT o.sequence FROM task o
             WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic LIMIT p_limit)
            UNION ALL
            (SELECT s.sequence FROM task s
             WHERE hashtext(s.topic) = hashtext(p_topic) AND s.topic = p_topic AND s.state BETWEEN 2 AND 7 LIMIT p_limit)
            UNION ALL
            (SELECT e.sequence FROM task e
             WHERE hashtext(e.topic) = hashtext(p_topic) AND e.topic = p_topic AND e.state >= 8 LIMIT p_limit)
            LIMIT p_limit) d
        WHERE t.topic = p_topic AND t.sequence = d.sequence;
    END IF;
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$;

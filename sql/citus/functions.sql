-- pgtask on Citus (repository.DistributeCitus): the hot paths as functions that Citus
-- delegates, whole, to the worker holding the topic's shard (create_distributed_function
-- with p_topic as the distribution argument, co-located with task, forced delegation),
-- so that every statement inside runs there, on the topic's rows.
--
-- They differ from the plain statements of sql/queries as Citus wants statements on
-- distributed tables to be (docs/citus-research.md): no pg_notify inside (a NOTIFY on a
-- worker reaches only that worker's listeners and forbids two-phase commit): each
-- function returns the notification's payload, which the caller sends on the
-- coordinator; no volatile function (random) in an UPDATE and no stable one (now(),
-- timestamptz + interval) inside CASE: times are computed from the transaction's epoch
-- with the immutable to_timestamp, jitter beforehand; sequences are taken on the
-- coordinator and passed in, so that they stay ordered within a topic; rows to update
-- are found by address only once the addresses are in a variable.

-- task_citus_work is the payload of a WORK notification (repository.Notification): the
-- topic, where its first READY task stands in poll order and, when the earliest of those
-- just made READY is not due yet, in how many milliseconds it is and when (000053).
CREATE FUNCTION task_citus_work(p_topic text, p_priority smallint, p_sequence bigint, p_due timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    RETURN 'WORK ' || md5(p_topic) || ' ' || p_priority || ' ' || p_sequence
           || CASE WHEN p_due > clock_timestamp()
                   THEN ' ' || ceil(extract(epoch FROM p_due - clock_timestamp()) * 1000)::bigint
                        || ' ' || ceil(extract(epoch FROM p_due) * 1000)::bigint
                   ELSE '' END;
END
$$;

-- task_citus_push pushes a batch (TaskPush of sql/queries/task_push.sql, whose
-- insertion matrix it follows: 0 APPEND, 1 REPLACE, 2 SUPERSEDE, 3 DELETE) with the
-- given sequences (one per creation; DELETE leaves those of the occurrences it does not
-- insert unused), counts it in task_tally (which plain pgtask's statement trigger does),
-- and returns the inserted rows, each with the payload of the notification to send
-- (repository.Notification; NULL when no task is READY). No row: the topic is unknown or
-- its queue cap refused the batch, counted net of the READY tasks it ends (migration
-- 000037).
CREATE FUNCTION task_citus_push(
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

-- task_citus_poll leases up to p_size READY tasks (TaskPoll of sql/queries/task_process.sql):
-- task_poll_candidates picks and locks them, as on plain PostgreSQL; keyed says the topic
-- is polled key by key.
CREATE FUNCTION task_citus_poll(p_topic text, p_owner text, p_lifo boolean, p_condition smallint, p_size integer,
                                p_from_priority smallint, p_from_sequence bigint)
RETURNS TABLE (topic text, sequence bigint, identifier text, state smallint, descent smallint, owner text,
               created timestamptz, completed timestamptz, input text, output text, reference text,
               priority smallint, not_before timestamptz, attempt integer, returned integer, errors text[],
               cancelled boolean, concurrency_key text, keyed boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_tids  tid[];
    v_keyed boolean;
BEGIN
    v_tids := ARRAY(SELECT task_poll_candidates(p_topic, p_lifo, p_condition, p_size, p_from_priority, p_from_sequence));
    IF cardinality(v_tids) = 0 THEN
        RETURN;
    END IF;
    SELECT tt.fair OR tt.key_concurrency IS NOT NULL INTO v_keyed FROM task_topic tt WHERE tt.topic = p_topic;
    RETURN QUERY
    UPDATE task t SET state = 0, owner = p_owner, attempt = t.attempt + 1
    WHERE t.topic = p_topic AND t.ctid = ANY (v_tids)
    RETURNING t.topic, t.sequence, t.identifier, t.state, t.descent, t.owner, t.created, t.completed, t.input,
              t.output, t.reference, t.priority, t.not_before, t.attempt, t.returned, t.errors, t.cancelled,
              t.concurrency_key, v_keyed;
END
$$;

-- task_citus_complete completes a batch of leased tasks, all or nothing (task_complete,
-- migration 000011, whose rules it follows), counts the decisions in task_tally and
-- returns the completed rows, each with the payload of the notification to send (NULL
-- when no task became READY).
CREATE FUNCTION task_citus_complete(p_topic text, p_owner text, p_sequences bigint[], p_attempts integer[],
                                    p_results smallint[], p_outputs text[], p_delays_ms bigint[])
RETURNS TABLE (topic text, sequence bigint, identifier text, state smallint, descent smallint, owner text,
               created timestamptz, completed timestamptz, input text, output text, reference text,
               priority smallint, not_before timestamptz, attempt integer, returned integer, errors text[],
               cancelled boolean, notification text)
LANGUAGE plpgsql SET enable_nestloop TO 'off' SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_max_attempts integer;
    v_base_ms      bigint;
    v_cap_ms       bigint;
    v_jitter_ms    bigint;
    v_now          timestamptz := now();
    v_epoch        double precision := extract(epoch FROM now());
    v_jitter       double precision[];
    v_done         task[];
    v_first        record;
    v_notice       text;
    v_tally        record;
BEGIN
    SELECT p.max_attempts, p.backoff_base_ms, p.backoff_cap_ms, p.backoff_jitter_ms
    INTO v_max_attempts, v_base_ms, v_cap_ms, v_jitter_ms
    FROM task_topic p WHERE p.topic = p_topic;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_jitter := ARRAY(SELECT random() * v_jitter_ms FROM generate_series(1, cardinality(p_sequences)));
    WITH done AS (
        UPDATE task t
        SET state      = CASE WHEN t.cancelled THEN 3
                              WHEN d.result = 4 THEN 1
                              WHEN d.result = 5 THEN 3
                              WHEN d.result = 0 AND t.attempt - t.returned < v_max_attempts THEN 1
                              ELSE d.result + 3 END,
            descent    = GREATEST(t.state, t.descent),
            output     = CASE WHEN t.cancelled THEN 'cancelled'
                              WHEN d.result = 4 THEN t.output
                              ELSE NULLIF(d.output, '') END,
            completed  = CASE WHEN t.cancelled THEN v_now
                              WHEN d.result = 4 THEN NULL
                              WHEN d.result = 0 AND t.attempt - t.returned < v_max_attempts THEN NULL
                              ELSE v_now END,
            not_before = CASE WHEN t.cancelled THEN t.not_before
                              WHEN d.result = 4 THEN to_timestamp(v_epoch + d.delay_ms / 1e3)
                              WHEN d.result = 0 AND t.attempt - t.returned < v_max_attempts
                              THEN to_timestamp(v_epoch + (least(v_cap_ms::double precision,
                                                                 v_base_ms * power(2::double precision, least(t.attempt - t.returned - 1, 60)))
                                                           + d.jitter) / 1e3)
                              ELSE t.not_before END,
            returned   = CASE WHEN d.result = 4 AND NOT t.cancelled THEN t.returned + 1 ELSE t.returned END,
            errors     = CASE WHEN t.cancelled THEN array_append(t.errors, 'cancelled')
                              WHEN d.result IN (0, 5) THEN array_append(t.errors, COALESCE(NULLIF(d.output, ''), 'failed'))
                              ELSE t.errors END
        -- a FAILURE with a negative delay is one without retry, as result 5 (000050)
        FROM (SELECT u.sequence, u.attempt,
                     CASE WHEN u.result = 0 AND u.delay_ms < 0 THEN 5::smallint ELSE u.result END AS result,
                     u.output, u.delay_ms, u.jitter
              FROM unnest(p_sequences, p_attempts, p_results, p_outputs, p_delays_ms, v_jitter)
                   AS u(sequence, attempt, result, output, delay_ms, jitter)) d
        WHERE t.topic = p_topic AND t.sequence = ANY (p_sequences)
          AND t.sequence = d.sequence
          AND (t.state = 0 AND t.owner = p_owner AND t.attempt = d.attempt) IS TRUE
        RETURNING t.*
    )
    SELECT coalesce(array_agg(done), '{}') INTO v_done FROM done;
    PERFORM task_all_or_nothing(cardinality(v_done)::bigint, cardinality(p_sequences));
    IF cardinality(v_done) = 0 THEN
        RETURN;
    END IF;
    SELECT count(*) FILTER (WHERE r.state = 1 AND d.result = 0) AS retried,
           count(*) FILTER (WHERE r.state = 3) AS failed, count(*) FILTER (WHERE r.state = 4) AS suspended,
           count(*) FILTER (WHERE r.state = 5) AS filtered, count(*) FILTER (WHERE r.state = 6) AS succeeded,
           count(*) FILTER (WHERE r.state <> 1 OR d.result = 0) AS counted
    INTO v_tally
    FROM unnest(v_done) r JOIN unnest(p_sequences, p_results) AS d(sequence, result) ON d.sequence = r.sequence;
    IF v_tally.counted > 0 THEN
        INSERT INTO task_tally AS y (topic, second, writer, retried, failed, suspended, filtered, succeeded)
        VALUES (p_topic, to_timestamp(floor(v_epoch)), task_tally_writer(), v_tally.retried, v_tally.failed,
                v_tally.suspended, v_tally.filtered, v_tally.succeeded)
        ON CONFLICT (topic, second, writer) DO UPDATE
        SET retried = y.retried + excluded.retried, failed = y.failed + excluded.failed,
            suspended = y.suspended + excluded.suspended, filtered = y.filtered + excluded.filtered,
            succeeded = y.succeeded + excluded.succeeded;
    END IF;
    SELECT r.priority, r.sequence, min(coalesce(r.not_before, '-infinity')) OVER () AS due INTO v_first
    FROM unnest(v_done) r WHERE r.state = 1 ORDER BY r.priority, r.sequence LIMIT 1;
    IF FOUND THEN
        v_notice := task_citus_work(p_topic, v_first.priority, v_first.sequence, v_first.due);
    END IF;
    RETURN QUERY
    SELECT r.topic, r.sequence, r.identifier, r.state, r.descent, r.owner, r.created, r.completed, r.input,
           r.output, r.reference, r.priority, r.not_before, r.attempt, r.returned, r.errors, r.cancelled, v_notice
    FROM unnest(v_done) r;
END
$$;

-- task_distributed marks a database distributed by repository.DistributeCitus: the
-- repository looks for it (to_regprocedure) to take the functions above.
CREATE FUNCTION task_distributed() RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true';

-- task_topic_create registers a topic (migration 000042's, without the bucket: on Citus
-- the shard is the topic's table).
CREATE OR REPLACE FUNCTION task_topic_create(p_topic text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF p_topic IS NULL OR length(p_topic) NOT BETWEEN 1 AND 250 THEN
        RAISE EXCEPTION 'topic % is invalid: want 1 to 250 characters', coalesce(quote_literal(left(p_topic, 40)), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_topic IN ('.', '..') THEN
        RAISE EXCEPTION 'topic % is a path segment of its own: choose another name', quote_literal(p_topic)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_topic ~ '[\x01-\x1f\x7f-\x9f]' THEN
        RAISE EXCEPTION 'topic % has a control character: choose a name without', quote_literal(p_topic)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO task_topic (topic, partition) VALUES (p_topic, 'task') ON CONFLICT (topic) DO NOTHING;
    RETURN FOUND;
END
$$;

-- task_citus_expire_owners takes back, in one topic, the leases of the owners p_owners
-- (TaskExpire of sql/queries/task_process.sql, per topic): the owners the caller found
-- stale in task_owner on the coordinator, or, when it takes orphans back, leasing
-- without a row there (a forced delegated function may read only its topic's tables).
-- The caller names the owners to take back rather than those to spare: an owner that
-- registers and leases after the caller read task_owner is in neither list, and keeps
-- its leases (migration 000045; task_citus_expire before it took the leases of every
-- owner not in a list of the live read beforehand). They become EXPIRED, or READY after
-- a backoff when the topic's retry policy grants another attempt, or FAILED when
-- cancelled. It returns how many were taken back and made READY, and the payload of the
-- notification to send (NULL: none).
CREATE FUNCTION task_citus_expire_owners(p_topic text, p_owners text[])
RETURNS TABLE (expired bigint, retried bigint, notification text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now     timestamptz := now();
    v_epoch   double precision;
    v_topic   record;
    v_stale   bigint[];
    v_jitter  double precision[];
    v_done    task[];
    v_first   record;
    v_notice  text;
BEGIN
    v_epoch := extract(epoch FROM v_now);
    SELECT p.max_attempts, p.backoff_base_ms, p.backoff_cap_ms, p.backoff_jitter_ms,
           p.concurrency IS NOT NULL OR p.key_concurrency IS NOT NULL AS capped
    INTO v_topic FROM task_topic p WHERE p.topic = p_topic;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_stale := ARRAY(
        SELECT t.sequence FROM task t
        WHERE t.topic = p_topic AND t.state = 0 AND t.owner = ANY (p_owners)
        FOR UPDATE OF t SKIP LOCKED);
    IF cardinality(v_stale) = 0 THEN
        RETURN;
    END IF;
    v_jitter := ARRAY(SELECT random() * v_topic.backoff_jitter_ms FROM generate_series(1, cardinality(v_stale)));
    WITH done AS (
        UPDATE task t
        SET state      = CASE WHEN t.cancelled THEN 3
                              WHEN t.attempt - t.returned < v_topic.max_attempts THEN 1
                              ELSE 2 END,
            not_before = CASE WHEN NOT t.cancelled AND t.attempt - t.returned < v_topic.max_attempts
                              THEN to_timestamp(v_epoch + (least(v_topic.backoff_cap_ms::double precision,
                                                                 v_topic.backoff_base_ms * power(2::double precision, least(t.attempt - t.returned - 1, 60)))
                                                           + s.jitter) / 1e3)
                              ELSE t.not_before END,
            completed  = CASE WHEN t.cancelled THEN v_now ELSE t.completed END,
            output     = CASE WHEN t.cancelled THEN 'cancelled'
                              ELSE 'expired: owner ' || t.owner || ' stopped heart-beating' END,
            errors     = array_append(t.errors, CASE WHEN t.cancelled THEN 'cancelled'
                              ELSE 'expired: owner ' || t.owner || ' stopped heart-beating' END)
        FROM unnest(v_stale, v_jitter) AS s(sequence, jitter)
        WHERE t.topic = p_topic AND t.sequence = s.sequence
        RETURNING t.*
    )
    SELECT coalesce(array_agg(done), '{}') INTO v_done FROM done;
    SELECT r.priority, r.sequence, min(coalesce(r.not_before, '-infinity')) OVER () AS due INTO v_first
    FROM unnest(v_done) r WHERE r.state = 1 ORDER BY r.priority, r.sequence LIMIT 1;
    IF FOUND AND NOT (v_topic.capped AND v_first.due > clock_timestamp()) THEN
        v_notice := task_citus_work(p_topic, v_first.priority, v_first.sequence, v_first.due);
    ELSIF v_topic.capped THEN
        -- processors waiting at a concurrency limit may poll again, not only when the
        -- retried tasks fall due (000051)
        v_notice := 'WORK ' || md5(p_topic);
    END IF;
    RETURN QUERY
    SELECT cardinality(v_done)::bigint, (SELECT count(*) FROM unnest(v_done) r WHERE r.state = 1), v_notice;
END
$$;

-- task_topic_open_pass (migration 000040), the first pass of task_topic_counts, in
-- plpgsql: Citus does not inline the plain migration's SQL function, and runs no SQL
-- function that reads a distributed table with a parameter.
CREATE OR REPLACE FUNCTION task_topic_open_pass(p_topic text)
RETURNS TABLE (active bigint, ready bigint, delayed bigint, expired bigint, failed bigint, suspended bigint,
               oldest_ready_age_ms bigint, seen bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY EXECUTE $q$
    SELECT count(*) FILTER (WHERE t.state = 0), count(*) FILTER (WHERE t.state = 1),
           count(*) FILTER (WHERE t.state = 1 AND t.not_before > now()),
           count(*) FILTER (WHERE t.state = 2), count(*) FILTER (WHERE t.state = 3),
           count(*) FILTER (WHERE t.state = 4),
           COALESCE((EXTRACT(EPOCH FROM now() - min(GREATEST(t.created, t.not_before))
                        FILTER (WHERE t.state = 1 AND (t.not_before IS NULL OR t.not_before <= now()))) * 1000)::bigint,
                    0)::bigint,
           count(*)
    FROM (SELECT r.state, r.not_before, r.created FROM task r
          WHERE hashtext(r.topic) = hashtext($1) AND r.topic = $1 AND r.state = 1
          UNION ALL
          SELECT o.state, o.not_before, o.created FROM task o
          WHERE o.state = ANY ('{0,2,3,4}') AND hashtext(o.topic) = hashtext($1) AND o.topic = $1
          LIMIT 10001) t
    $q$ USING p_topic;
END
$$;

-- task_citus_stats is TopicStats (sql/queries/topic.sql) on Citus: the counts of
-- task_topic_counts (migration 000039) on the topic's node, and the rows estimate from
-- the statistics of the shard holding the topic, the table of its tasks on this node.
CREATE FUNCTION task_citus_stats(p_topic text)
RETURNS TABLE (active bigint, ready bigint, delayed bigint, expired bigint, failed bigint, suspended bigint,
               oldest_ready_age_ms bigint, rows_estimate bigint)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    v_shard text := shard_name('task'::regclass, get_shard_id_for_distribution_column('task', p_topic));
    v_rows  bigint;
BEGIN
    SELECT round(s.row_count * COALESCE(s.shares[array_position(s.topics, p_topic)], s.other_share, 0))::bigint
    INTO v_rows FROM task_table_shares(ARRAY[v_shard]) s;
    RETURN QUERY
    SELECT c.active, c.ready, c.delayed, c.expired, c.failed, c.suspended, c.oldest_ready_age_ms, COALESCE(v_rows, 0)
    FROM task_topic_counts(p_topic) c;
END
$$;

-- task_citus_cancel is TaskCancel (sql/queries/task_process.sql): READY, SUSPENDED and
-- EXPIRED tasks become REDUNDANT, ACTIVE ones are flagged, all or nothing (no row when
-- any task is unknown or in another state). Each ACTIVE row comes with the payload of the
-- CANCEL notification to send to its processor.
CREATE FUNCTION task_citus_cancel(p_topic text, p_sequences bigint[], p_by text)
RETURNS TABLE (topic text, sequence bigint, identifier text, state smallint, descent smallint, owner text,
               created timestamptz, completed timestamptz, input text, output text, reference text,
               priority smallint, not_before timestamptz, attempt integer, returned integer, errors text[],
               cancelled boolean, concurrency_key text, notification text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now    timestamptz := now();
    v_target bigint[];
    v_rows   task[];
BEGIN
    v_target := ARRAY(SELECT t.sequence FROM task t
                      WHERE t.topic = p_topic AND t.sequence = ANY (p_sequences) AND t.state IN (0, 1, 2, 4)
                      FOR UPDATE OF t);
    IF cardinality(v_target) <> cardinality(p_sequences) THEN
        RETURN;
    END IF;
    WITH cancelled AS (
        UPDATE task t
        SET state     = CASE WHEN t.state = 0 THEN 0 ELSE 8 END,
            descent   = CASE WHEN t.state = 0 THEN t.descent ELSE GREATEST(t.state, t.descent) END,
            cancelled = true,
            output    = CASE WHEN t.state = 0 THEN t.output ELSE 'cancelled by ' || p_by END,
            completed = CASE WHEN t.state = 0 THEN t.completed ELSE v_now END
        WHERE t.topic = p_topic AND t.sequence = ANY (v_target)
        RETURNING t.*
    )
    SELECT array_agg(c ORDER BY c.sequence) INTO v_rows FROM cancelled c;
    RETURN QUERY
    SELECT r.*, CASE WHEN r.state = 0 THEN 'CANCEL ' || md5(p_topic) || ' ' || r.sequence END FROM unnest(v_rows) r;
END
$$;

-- task_citus_reset is TaskReset (sql/queries/task_revive.sql): tasks in EXPIRED..SUCCEEDED
-- back to READY with a fresh attempt budget, all or nothing, each row with the payload of
-- the notification to send. Refused whole when the tasks made READY would take the topic
-- above its queue cap (migration 000037): it then returns them as they are (none READY),
-- without a notification.
CREATE FUNCTION task_citus_reset(p_topic text, p_sequences bigint[])
RETURNS TABLE (topic text, sequence bigint, identifier text, state smallint, descent smallint, owner text,
               created timestamptz, completed timestamptz, input text, output text, reference text,
               priority smallint, not_before timestamptz, attempt integer, returned integer, errors text[],
               cancelled boolean, concurrency_key text, notification text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_target bigint[];
    v_rows   task[];
    v_first  record;
    v_notice text;
    v_cap    bigint;
BEGIN
    v_target := ARRAY(SELECT t.sequence FROM task t
                      WHERE t.topic = p_topic AND t.sequence = ANY (p_sequences) AND t.state BETWEEN 2 AND 6
                      FOR UPDATE OF t);
    IF cardinality(v_target) <> cardinality(p_sequences) THEN
        RETURN;
    END IF;
    SELECT tt.queue_cap INTO v_cap FROM task_topic tt WHERE tt.topic = p_topic;
    IF NOT task_queue_admits(p_topic, v_cap, cardinality(v_target)) THEN
        RETURN QUERY SELECT t.*, NULL::text FROM task t WHERE t.topic = p_topic AND t.sequence = ANY (v_target)
                     ORDER BY t.sequence;
        RETURN;
    END IF;
    WITH reset AS (
        UPDATE task t
        SET state = 1, descent = GREATEST(t.state, t.descent), returned = t.attempt, not_before = now(),
            completed = NULL, owner = NULL, cancelled = false
        WHERE t.topic = p_topic AND t.sequence = ANY (v_target)
        RETURNING t.*
    )
    SELECT array_agg(c ORDER BY c.sequence) INTO v_rows FROM reset c;
    SELECT r.priority, r.sequence INTO v_first FROM unnest(v_rows) r ORDER BY r.priority, r.sequence LIMIT 1;
    v_notice := task_citus_work(p_topic, v_first.priority, v_first.sequence, NULL);
    RETURN QUERY SELECT r.*, v_notice FROM unnest(v_rows) r;
END
$$;

-- task_topic_destroy removes a topic with its tasks (migration 000009's, run on the
-- coordinator) and its schedules, which on plain PostgreSQL go with the topic through
-- task_schedule's foreign key (a table of the coordinator cannot keep one to a
-- distributed table; task_schedule_topic_check stands for it).
CREATE OR REPLACE FUNCTION task_topic_destroy(p_topic text) RETURNS boolean
LANGUAGE plpgsql SET lock_timeout TO '1s' AS $$
BEGIN
    DELETE FROM task_topic WHERE topic = p_topic;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    DELETE FROM task_schedule WHERE topic = p_topic;
    PERFORM task_topic_delete_rows(p_topic, NULL);
    RETURN true;
END
$$;

-- task_topic_dedicate refuses on a distributed database (000056): a topic's tasks are in
-- its shard of task, not in a table of a bucket, and Citus gives a topic a shard of its
-- own (docs/citus.md). Repository.Dedicate refuses before it (ErrDistributed).
CREATE OR REPLACE FUNCTION task_topic_dedicate(p_topic text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'topic %: a distributed database gives a topic a shard of its own, not a table: SELECT isolate_tenant_to_new_shard(''task'', %, ''CASCADE'')',
        quote_literal(p_topic), quote_literal(p_topic)
        USING ERRCODE = 'feature_not_supported';
END
$$;

-- task_schedule_topic_check is, on a distributed database, what task_schedule's foreign
-- key to task_topic does on a plain one (a table of the coordinator cannot keep one to a
-- distributed table; migration 000046): a schedule written (INSERT, or an UPDATE of its
-- topic) must name a topic that exists, or 23503 (foreign_key_violation) is raised, by
-- hand as through Go; and the topic's row is locked as the key's check locks it (KEY
-- SHARE, until the end of the transaction), so that a task_topic_destroy running
-- meanwhile either waits for the schedule and deletes it, or deletes the topic first
-- and the schedule is refused, never leaving a schedule of a topic gone.
CREATE OR REPLACE FUNCTION task_schedule_topic_check() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.topic IS DISTINCT FROM OLD.topic THEN
        PERFORM FROM task_topic tt WHERE tt.topic = NEW.topic FOR KEY SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'schedule %: unknown topic %', quote_literal(NEW.name), quote_nullable(NEW.topic)
                USING ERRCODE = 'foreign_key_violation', COLUMN = 'topic';
        END IF;
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER task_schedule_topic_check BEFORE INSERT OR UPDATE OF topic ON task_schedule
    FOR EACH ROW EXECUTE FUNCTION task_schedule_topic_check();

-- task_citus_limit_usage is TopicLimitUsage (sql/queries/topic.sql) on the topic's node.
CREATE FUNCTION task_citus_limit_usage(p_topic text)
RETURNS TABLE (active bigint, keys_at_limit bigint, keys_ready bigint, tokens double precision)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    v_topic task_topic;
BEGIN
    SELECT * INTO v_topic FROM task_topic tt WHERE tt.topic = p_topic;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT
        (SELECT count(*) FROM task t
         WHERE t.state = 0 AND hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic)::bigint,
        (SELECT count(*) FROM (SELECT 1 FROM task t
                               WHERE t.state = 0 AND hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic
                                 AND t.concurrency_key IS NOT NULL AND t.concurrency_key <> ''
                               GROUP BY t.concurrency_key
                               HAVING count(*) >= v_topic.key_concurrency) k)::bigint,
        task_keys_ready(p_topic, 10000)::bigint,
        coalesce((SELECT least(v_topic.rate_burst::double precision,
                      l.tokens + greatest(extract(epoch FROM clock_timestamp() - l.counted), 0) * 1000 * v_topic.rate / v_topic.rate_period_ms)
                  FROM task_topic_limit l WHERE l.topic = p_topic AND v_topic.rate IS NOT NULL),
                 v_topic.rate_burst, 0)::double precision;
END
$$;

-- Citus cannot plan an SQL function's statement with parameters on distributed tables:
-- task_keys_ready (the limit usage's count of keys waiting) is plpgsql here, with the
-- statement of migration 000015.
CREATE OR REPLACE FUNCTION task_keys_ready(p_topic text, p_max integer) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (
        WITH RECURSIVE k AS (
            (SELECT t.priority, t.concurrency_key FROM task t
             WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
               AND t.concurrency_key IS NOT NULL
             ORDER BY t.priority, t.concurrency_key LIMIT 1)
            UNION ALL
            SELECT n.priority, n.concurrency_key FROM k CROSS JOIN LATERAL (
                SELECT t.priority, t.concurrency_key FROM task t
                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                  AND t.concurrency_key IS NOT NULL AND (t.priority, t.concurrency_key) > (k.priority, k.concurrency_key)
                ORDER BY t.priority, t.concurrency_key LIMIT 1) n
        )
        SELECT count(DISTINCT k.concurrency_key) FROM (SELECT * FROM k LIMIT p_max) k);
END
$$;

-- task_poll_keyed picks the tasks of a poll by key: migration 000024's function, the
-- same text. Each turn takes its candidates one at a time, in poll order, and checks the
-- poll condition on each with a statement of its own, until one passes (one statement
-- more for each candidate the condition holds back, which the key's later turns in the
-- poll pass over): until 000024 the plain function called task_poll_condition inside
-- the statement that found each candidate, a nested call Citus refuses in a delegated
-- function, in either language.
CREATE OR REPLACE FUNCTION task_poll_keyed(p_topic text, p_lifo boolean, p_condition smallint, p_budget integer,
                                           p_key_limit integer, INOUT p_last_key text, OUT p_sequences bigint[])
LANGUAGE plpgsql VOLATILE
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
    v_counts     jsonb;    -- ACTIVE tasks by key, those taken added
    v_priority   smallint;
    v_key        text;     -- the key whose turn it is; NULL: tasks without a key
    v_from       text;     -- keys after this one are next in the round
    v_seq        bigint;
    v_identifier text;
    v_held       bigint;   -- the last task without a key this turn held back (the condition)
    v_passes     boolean;
    v_first      bigint;   -- the first READY task of the key found: sequence,
    v_first_id   text;     -- identifier
    v_first_due  boolean;  -- and whether it is due
    v_candidate  bigint;   -- the key's first task, when it is this turn's first candidate
    v_bound      bigint;   -- where the key's turn stands (after it; before it, LIFO)
    v_round      integer;  -- tasks taken in this round
    v_wrapped    boolean;
    v_keyless    boolean;  -- the tasks without a key may still give one in this priority
    v_start      text;     -- p_last_key as this priority began
    v_again      boolean;  -- the search for keys has started over from the first key
    v_turns      text[];   -- the turns met in this priority, in round order; NULL: no key
    v_after      bigint[]; -- by turn: where the key's turns stand, as v_bound; NULL: none left
    v_turn       integer;  -- v_key's turn in v_turns
    v_known      boolean;  -- v_turns holds the whole round: go round it, no search
    v_rounds     integer;  -- rounds taken at once
    v_taken      bigint[]; -- those tasks, in the order of their turns,
    v_by         integer[]; -- and their turns
    v_i          integer;
    v_gave       integer[]; -- by turn: the tasks the rounds taken at once took
    v_ahead      text[];   -- the keys after v_from, as far as the last search went
    v_ahead_firsts bigint[]; -- their first READY tasks: sequence,
    v_ahead_ids  text[];   -- identifier
    v_ahead_dues boolean[]; -- and whether it is due
    v_ahead_end  boolean;  -- the last search reached the last key
    v_next       integer;  -- the next of v_ahead
    v_room       integer;
BEGIN
    p_sequences := '{}';
    IF p_key_limit IS NOT NULL THEN
        SELECT coalesce(jsonb_object_agg(a.k, a.n), '{}') INTO v_counts
        FROM (SELECT t.concurrency_key AS k, count(*) AS n FROM task t
              WHERE t.state = 0 AND hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic
                AND t.concurrency_key IS NOT NULL
              GROUP BY t.concurrency_key) a;
    END IF;
    SELECT t.priority INTO v_priority FROM task t
    WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
      AND (t.not_before IS NULL OR t.not_before <= now())
    ORDER BY t.priority, t.sequence
    LIMIT 1;
    WHILE v_priority IS NOT NULL AND cardinality(p_sequences) < p_budget LOOP
        v_from := p_last_key;
        v_start := p_last_key;
        v_wrapped := p_last_key IS NULL;
        v_round := 0;
        v_keyless := true;
        v_again := false;
        v_known := false;
        v_turns := '{}';
        v_after := '{}';
        v_ahead := '{}';
        v_next := 1;
        v_ahead_end := false;
        LOOP
            IF v_known AND p_condition = 0 AND NOT v_keyless THEN
                -- going round the keys it knows, no condition to check, no task without a
                -- key left: the next rounds in one statement, each key's next tasks from
                -- where it stands (as many as rounds remain and its limit allows), taken
                -- in turn from the turn after v_turn; what it picks is what the turns
                -- one by one pick
                v_rounds := ceil((p_budget - cardinality(p_sequences))::numeric
                                 / greatest(1, cardinality(array_remove(v_after, NULL))))::integer;
                IF p_lifo THEN
                    SELECT array_agg(c.sequence ORDER BY c.n, k.pos), array_agg(k.turn ORDER BY c.n, k.pos)
                    INTO v_taken, v_by
                    FROM (SELECT u.key, u.after, u.turn::integer, (u.turn + cardinality(v_turns) - v_turn - 1) % cardinality(v_turns) AS pos,
                                 CASE WHEN p_key_limit IS NULL OR u.key = '' THEN v_rounds
                                      ELSE least(v_rounds, p_key_limit - coalesce((v_counts ->> u.key)::integer, 0)) END AS room
                          FROM unnest(v_turns, v_after) WITH ORDINALITY u(key, after, turn)
                          WHERE u.key IS NOT NULL AND u.after IS NOT NULL) k
                    CROSS JOIN LATERAL (
                        SELECT t.sequence, row_number() OVER (ORDER BY t.sequence DESC) AS n FROM task t
                        WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                          AND t.concurrency_key = k.key AND t.priority = v_priority AND t.sequence < k.after
                          AND (t.not_before IS NULL OR t.not_before <= now())
                        ORDER BY t.sequence DESC
                        LIMIT greatest(k.room, 0)) c;
                ELSE
                    SELECT array_agg(c.sequence ORDER BY c.n, k.pos), array_agg(k.turn ORDER BY c.n, k.pos)
                    INTO v_taken, v_by
                    FROM (SELECT u.key, u.after, u.turn::integer, (u.turn + cardinality(v_turns) - v_turn - 1) % cardinality(v_turns) AS pos,
                                 CASE WHEN p_key_limit IS NULL OR u.key = '' THEN v_rounds
                                      ELSE least(v_rounds, p_key_limit - coalesce((v_counts ->> u.key)::integer, 0)) END AS room
                          FROM unnest(v_turns, v_after) WITH ORDINALITY u(key, after, turn)
                          WHERE u.key IS NOT NULL AND u.after IS NOT NULL) k
                    CROSS JOIN LATERAL (
                        SELECT t.sequence, row_number() OVER (ORDER BY t.sequence) AS n FROM task t
                        WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                          AND t.concurrency_key = k.key AND t.priority = v_priority AND t.sequence > k.after
                          AND (t.not_before IS NULL OR t.not_before <= now())
                        ORDER BY t.sequence
                        LIMIT greatest(k.room, 0)) c;
                END IF;
                EXIT WHEN v_taken IS NULL; -- the keys give no more in this priority
                v_taken := v_taken[1:p_budget - cardinality(p_sequences)];
                v_by := v_by[1:cardinality(v_taken)];
                p_sequences := p_sequences || v_taken;
                -- where each key stands: the last of its tasks taken (each key's come in
                -- its order)
                v_gave := array_fill(0, ARRAY[cardinality(v_turns)]);
                FOR v_i IN 1 .. cardinality(v_taken) LOOP
                    v_after[v_by[v_i]] := v_taken[v_i];
                    v_gave[v_by[v_i]] := v_gave[v_by[v_i]] + 1;
                END LOOP;
                IF cardinality(p_sequences) < p_budget THEN
                    -- every round was taken whole: a key that gave fewer than v_rounds
                    -- has no more, or has reached its limit, for the rest of the poll
                    FOR v_i IN 1 .. cardinality(v_turns) LOOP
                        IF v_gave[v_i] < v_rounds THEN
                            v_after[v_i] := NULL;
                        END IF;
                    END LOOP;
                END IF;
                IF p_key_limit IS NOT NULL THEN
                    v_counts := v_counts || coalesce((SELECT jsonb_object_agg(v_turns[x.b], coalesce((v_counts ->> v_turns[x.b])::integer, 0) + x.n)
                                                      FROM (SELECT b, count(*) AS n FROM unnest(v_by) b GROUP BY b) x), '{}');
                END IF;
                v_turn := v_by[cardinality(v_by)];
                p_last_key := v_turns[v_turn];
                EXIT WHEN cardinality(p_sequences) >= p_budget;
                CONTINUE;
            END IF;
            IF v_known THEN
                v_turn := v_turn % cardinality(v_turns) + 1;
                v_key := v_turns[v_turn];
            ELSE
                -- the next key of this priority after v_from, with its first task; past
                -- the last, none (the turn of the tasks without a key). The keys ahead are
                -- searched for in batches (as many as the budget has room for), each by
                -- one statement that steps from key to key through the index.
                IF v_next > cardinality(v_ahead) AND NOT v_ahead_end THEN
                    v_room := greatest(1, p_budget - cardinality(p_sequences));
                    -- two statements, not one with "v_from IS NULL OR": a plan kept across
                    -- calls cannot start the index scan at v_from for that
                    IF v_from IS NULL THEN
                        WITH RECURSIVE k (key, sequence, identifier, due) AS (
                            (SELECT t.concurrency_key, t.sequence, t.identifier, (t.not_before IS NULL OR t.not_before <= now())
                             FROM task t
                             WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                               AND t.concurrency_key IS NOT NULL AND t.priority = v_priority
                             ORDER BY t.concurrency_key, t.sequence
                             LIMIT 1)
                            UNION ALL
                            SELECT n.* FROM k CROSS JOIN LATERAL (
                                SELECT t.concurrency_key, t.sequence, t.identifier, (t.not_before IS NULL OR t.not_before <= now())
                                FROM task t
                                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                                  AND t.concurrency_key IS NOT NULL AND t.priority = v_priority AND t.concurrency_key > k.key
                                ORDER BY t.concurrency_key, t.sequence
                                LIMIT 1) n
                        )
                        SELECT coalesce(array_agg(a.key ORDER BY a.key), '{}'), array_agg(a.sequence ORDER BY a.key),
                               array_agg(a.identifier ORDER BY a.key), array_agg(a.due ORDER BY a.key)
                        INTO v_ahead, v_ahead_firsts, v_ahead_ids, v_ahead_dues
                        FROM (SELECT * FROM k LIMIT v_room) a;
                    ELSE
                        WITH RECURSIVE k (key, sequence, identifier, due) AS (
                            (SELECT t.concurrency_key, t.sequence, t.identifier, (t.not_before IS NULL OR t.not_before <= now())
                             FROM task t
                             WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                               AND t.concurrency_key IS NOT NULL AND t.priority = v_priority
                               AND t.concurrency_key > v_from
                             ORDER BY t.concurrency_key, t.sequence
                             LIMIT 1)
                            UNION ALL
                            SELECT n.* FROM k CROSS JOIN LATERAL (
                                SELECT t.concurrency_key, t.sequence, t.identifier, (t.not_before IS NULL OR t.not_before <= now())
                                FROM task t
                                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                                  AND t.concurrency_key IS NOT NULL AND t.priority = v_priority AND t.concurrency_key > k.key
                                ORDER BY t.concurrency_key, t.sequence
                                LIMIT 1) n
                        )
                        SELECT coalesce(array_agg(a.key ORDER BY a.key), '{}'), array_agg(a.sequence ORDER BY a.key),
                               array_agg(a.identifier ORDER BY a.key), array_agg(a.due ORDER BY a.key)
                        INTO v_ahead, v_ahead_firsts, v_ahead_ids, v_ahead_dues
                        FROM (SELECT * FROM k LIMIT v_room) a;
                    END IF;
                    v_ahead_end := cardinality(v_ahead) < v_room;
                    v_next := 1;
                END IF;
                IF v_next <= cardinality(v_ahead) THEN
                    v_key := v_ahead[v_next];
                    v_first := v_ahead_firsts[v_next];
                    v_first_id := v_ahead_ids[v_next];
                    v_first_due := v_ahead_dues[v_next];
                    v_next := v_next + 1;
                ELSE
                    -- past the last key: the next search starts over
                    v_key := NULL;
                    v_first := NULL;
                    v_first_due := NULL;
                    v_ahead := '{}';
                    v_next := 1;
                    v_ahead_end := false;
                END IF;
                IF v_again AND (v_start IS NULL OR v_key IS NULL OR v_key > v_start) THEN
                    v_known := true;
                    v_turn := coalesce(array_position(v_turns, v_key), 1);
                    v_key := v_turns[v_turn];
                ELSE
                    v_turns := v_turns || v_key;
                    v_after := v_after || CASE WHEN v_key IS NULL THEN NULL WHEN p_lifo THEN 9223372036854775807 ELSE v_first - 1 END;
                    v_turn := cardinality(v_turns);
                END IF;
            END IF;
            v_held := NULL;
            v_bound := v_after[v_turn];
            -- a key met now, FIFO: its first task, which the search read, is the first
            -- candidate when it is due
            v_candidate := CASE WHEN NOT v_known AND NOT p_lifo AND v_first_due THEN v_first END;
            LOOP
                v_seq := NULL;
                IF v_key IS NULL THEN
                    -- once none is found in this priority, none comes until the next
                    -- poll: the tasks it reads stay READY meanwhile, those chosen excepted
                    IF v_keyless THEN
                        SELECT s.sequence, s.identifier INTO v_seq, v_identifier
                        FROM (SELECT t.sequence, t.identifier, t.concurrency_key FROM task t
                              WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                                AND t.priority = v_priority AND (t.not_before IS NULL OR t.not_before <= now())
                              ORDER BY t.sequence
                              LIMIT 200) s
                        WHERE s.concurrency_key IS NULL AND s.sequence <> ALL (p_sequences)
                          AND (v_held IS NULL OR CASE WHEN p_lifo THEN s.sequence < v_held ELSE s.sequence > v_held END)
                        ORDER BY CASE WHEN p_lifo THEN -s.sequence ELSE s.sequence END
                        LIMIT 1;
                    END IF;
                ELSIF v_bound IS NOT NULL
                      AND (p_key_limit IS NULL OR v_key = '' OR coalesce((v_counts ->> v_key)::integer, 0) < p_key_limit) THEN
                    -- from where the key's last turn stood: the tasks before are chosen,
                    -- not due or held back by the condition, and stay so in this poll
                    IF v_candidate IS NOT NULL AND v_candidate <> ALL (p_sequences) THEN
                        v_seq := v_candidate;
                        v_identifier := v_first_id;
                    ELSIF p_lifo THEN
                        SELECT t.sequence, t.identifier INTO v_seq, v_identifier FROM task t
                        WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                          AND t.concurrency_key = v_key AND t.priority = v_priority AND t.sequence < v_bound
                          AND (t.not_before IS NULL OR t.not_before <= now()) AND t.sequence <> ALL (p_sequences)
                        ORDER BY t.sequence DESC
                        LIMIT 1;
                    ELSE
                        SELECT t.sequence, t.identifier INTO v_seq, v_identifier FROM task t
                        WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                          AND t.concurrency_key = v_key AND t.priority = v_priority AND t.sequence > v_bound
                          AND (t.not_before IS NULL OR t.not_before <= now()) AND t.sequence <> ALL (p_sequences)
                        ORDER BY t.sequence
                        LIMIT 1;
                    END IF;
                    v_bound := v_seq;
                    v_candidate := NULL;
                END IF;
                EXIT WHEN v_seq IS NULL OR p_condition = 0;
                SELECT NOT EXISTS (SELECT 1 FROM task o
                                   WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                     AND o.identifier = v_identifier)
                       AND NOT EXISTS (SELECT 1 FROM task o
                                       WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || v_identifier)
                                         AND o.state = 1 AND o.topic = p_topic AND o.identifier = v_identifier
                                         AND CASE WHEN p_lifo THEN o.sequence > v_seq ELSE o.sequence < v_seq END)
                       AND (p_condition < 2 OR NOT EXISTS (SELECT 1 FROM task o
                                                           WHERE o.state = ANY ('{2,3}') AND hashtext(o.topic) = hashtext(p_topic)
                                                             AND o.topic = p_topic AND o.identifier = v_identifier))
                       AND (p_condition < 3 OR NOT EXISTS (SELECT 1 FROM task o
                                                           WHERE o.state = 4 AND hashtext(o.topic) = hashtext(p_topic)
                                                             AND o.topic = p_topic AND o.identifier = v_identifier))
                INTO v_passes;
                EXIT WHEN v_passes;
                v_held := v_seq;
            END LOOP;
            IF v_key IS NULL THEN
                IF v_seq IS NULL THEN
                    v_keyless := false;
                END IF;
            ELSE
                -- NULL: the key gives no more in this poll (its count only grows)
                v_after[v_turn] := v_seq;
            END IF;
            IF v_seq IS NOT NULL THEN
                p_sequences := p_sequences || v_seq;
                p_last_key := v_key;
                v_round := v_round + 1;
                IF v_key IS NOT NULL AND p_key_limit IS NOT NULL THEN
                    v_counts := jsonb_set(v_counts, ARRAY[v_key], to_jsonb(coalesce((v_counts ->> v_key)::integer, 0) + 1));
                END IF;
                EXIT WHEN cardinality(p_sequences) >= p_budget;
            END IF;
            IF v_key IS NULL THEN
                EXIT WHEN v_wrapped AND v_round = 0;
                IF v_wrapped THEN
                    v_round := 0;
                END IF;
                v_wrapped := true;
                v_from := NULL;
                v_again := true;
            ELSE
                v_from := v_key;
            END IF;
        END LOOP;
        EXIT WHEN cardinality(p_sequences) >= p_budget;
        SELECT t.priority INTO v_priority FROM task t
        WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
          AND (t.not_before IS NULL OR t.not_before <= now()) AND t.priority > v_priority
        ORDER BY t.priority, t.sequence
        LIMIT 1;
        IF NOT FOUND THEN
            v_priority := NULL;
        END IF;
        p_last_key := NULL;
    END LOOP;
END
$$;

-- task_citus_analyze is task_topic_analyze (migrations 000009, 000020) on the topic's
-- node: it analyzes the shard holding the topic, and returns its estimated rows (-1 for
-- an unknown topic).
CREATE FUNCTION task_citus_analyze(p_topic text) RETURNS bigint
LANGUAGE plpgsql SET default_statistics_target TO '10' AS $$
DECLARE
    v_table text := shard_name('task'::regclass, get_shard_id_for_distribution_column('task', p_topic));
    v_rows  bigint;
BEGIN
    PERFORM 1 FROM task_topic WHERE topic = p_topic;
    IF NOT FOUND THEN
        RETURN -1;
    END IF;
    EXECUTE format('ANALYZE (SKIP_LOCKED) %s', v_table);
    SELECT GREATEST(reltuples, 0)::bigint INTO v_rows FROM pg_catalog.pg_class WHERE oid = to_regclass(v_table);
    RETURN v_rows;
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

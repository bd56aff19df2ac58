-- 000025 on a distributed database: the tallies of task_citus_push and
-- task_citus_complete move to a new writer every 64 upserts of a transaction, as the
-- plain migration's do (task_tally_writer, the same function). Citus passes the new
-- function and the new bodies of the two distributed ones on to every node.
--
-- The other functions the plain migration changes are not run on a distributed
-- database: task_tally_pushed (the statement trigger that counts pushes, which
-- DistributeCitus does not recreate), task_complete (task_citus_complete completes on
-- Citus) and task_push_batch (sql/citus/functions.sql has its own, which takes the Go
-- push's path); they stay as they were.

CREATE OR REPLACE FUNCTION task_tally_writer() RETURNS integer
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
        -- (through task_ready_identifier), and for REPLACE and DELETE settled ones
        -- (through task_identifier), up to SUCCEEDED for REPLACE. ACTIVE tasks are never
        -- touched; rows locked by a concurrent transaction are skipped.
        v_older := ARRAY(
            SELECT t.sequence FROM task t
            WHERE (t.topic || E'\n' || t.identifier) = ANY (ARRAY(SELECT p_topic || E'\n' || i FROM unnest(p_identifiers) i))
              AND t.topic = p_topic AND t.state = 1 AND t.identifier = ANY (p_identifiers)
            FOR UPDATE SKIP LOCKED);
        IF p_insertion IN (1, 3) THEN
            v_older := v_older || ARRAY(
                SELECT t.sequence FROM task t
                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state >= 2
                  AND t.identifier = ANY (p_identifiers) AND (p_insertion = 3 OR t.state <= 6)
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

CREATE OR REPLACE FUNCTION task_citus_complete(p_topic text, p_owner text, p_sequences bigint[], p_attempts integer[],
                                    p_results smallint[], p_outputs text[], p_delays_ms bigint[])
RETURNS TABLE (topic text, sequence bigint, identifier text, state smallint, descent smallint, owner text,
               created timestamptz, completed timestamptz, input text, output text, reference text,
               priority smallint, not_before timestamptz, attempt integer, returned integer, errors text[],
               cancelled boolean, notification text)
LANGUAGE plpgsql SET enable_nestloop TO 'off' AS $$
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
                              WHEN d.result = 0 THEN array_append(t.errors, COALESCE(NULLIF(d.output, ''), 'failed'))
                              ELSE t.errors END
        FROM unnest(p_sequences, p_attempts, p_results, p_outputs, p_delays_ms, v_jitter)
             AS d(sequence, attempt, result, output, delay_ms, jitter)
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

-- 000053 on a distributed database: task_citus_work, the payload of the delegated
-- functions' WORK notifications (the Go push, task_push_batch, the completion, the
-- expiry), adds the due time as the plain migration's statements do, as
-- sql/citus/functions.sql now has it (Citus passes the new body of the distributed
-- function on to every node); task_complete is the plain migration's. task_push_batch
-- keeps its Citus form, which notifies task_citus_work's payload.

CREATE OR REPLACE FUNCTION task_citus_work(p_topic text, p_priority smallint, p_sequence bigint, p_due timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    RETURN 'WORK ' || md5(p_topic) || ' ' || p_priority || ' ' || p_sequence
           || CASE WHEN p_due > clock_timestamp()
                   THEN ' ' || ceil(extract(epoch FROM p_due - clock_timestamp()) * 1000)::bigint
                        || ' ' || ceil(extract(epoch FROM p_due) * 1000)::bigint
                   ELSE '' END;
END
$$;

CREATE OR REPLACE FUNCTION task_complete(p_topic text, p_owner text, p_sequences bigint[], p_attempts integer[],
                                         p_results smallint[], p_outputs text[], p_delays_ms bigint[])
RETURNS SETOF task
LANGUAGE plpgsql VOLATILE
SET enable_nestloop = off
SET jit = off
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
        -- a FAILURE with a negative delay is one without retry, as result 5 (000050)
        SELECT d.sequence, d.attempt,
               CASE WHEN d.result = 0 AND d.delay_ms < 0 THEN 5::smallint ELSE d.result END AS result,
               NULLIF(d.output, '') AS output, d.delay_ms
        FROM unnest(p_sequences, p_attempts, p_results, p_outputs, p_delays_ms)
             AS d(sequence, attempt, result, output, delay_ms)
    ),
    done AS (
        UPDATE task t
        SET state      = CASE WHEN t.cancelled THEN 3
                              WHEN d.result = 4 THEN 1
                              -- a FAILURE without retry (5) is FAILED whatever attempts are left
                              WHEN d.result = 5 THEN 3
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
                              WHEN d.result IN (0, 5) THEN array_append(t.errors, COALESCE(d.output, 'failed'))
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
        -- the first task made READY in poll order, and when the earliest of them is due (in
        -- milliseconds from now, then as a time: 000053)
        SELECT pg_notify('task_notification', 'WORK ' || md5(p_topic) || ' ' || f.priority || ' ' || f.sequence
                         || CASE WHEN f.due > clock_timestamp()
                                 THEN ' ' || ceil(extract(epoch FROM f.due - clock_timestamp()) * 1000)::bigint
                                      || ' ' || ceil(extract(epoch FROM f.due) * 1000)::bigint
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

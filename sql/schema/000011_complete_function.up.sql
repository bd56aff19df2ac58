-- 000011: the completion of a batch in a function that plans it without nested loops.
--
-- TaskComplete joined the batch's decisions (unnest of its arrays) to the leased rows in
-- one UPDATE. Its plan depends on how many rows the planner expects the topic to hold
-- in its table, and since migration 000009 most topics share their table with others:
-- statistics taken while a topic held none of the table's rows (a new topic, or a burst
-- into a quiet one) put its share at nothing. The planner then expects the batch's 1 000
-- leased rows to be one, and joins by a nested loop that reads the decisions again for
-- each of them: 150 to 250 ms per batch of 1 000 instead of 5 to 10, until the table's
-- statistics are refreshed (the processor does so after its first 1 000 tasks, or
-- autovacuum). A table holding one topic's rows never had that estimate.
--
-- A nested loop is never the right join here (the batch and the rows it completes are of
-- the same size), and only a planner setting can rule it out for a statement, so the
-- statement moved into task_complete, which runs with enable_nestloop off; the topic's
-- retry policy is read into variables first, so that the statement joins nothing else.
-- TaskComplete (sql/queries/task_process.sql) calls it.

-- task_complete completes a batch of leased tasks in one statement, all or nothing
-- (design section 4.4, section 5.1), and returns the updated rows.
-- p_results: 0 FAILURE, 1 SUSPENSION, 2 FILTER, 3 SUCCESS, 4 SNOOZE (back to READY after
-- p_delays_ms without consuming an attempt; also how unstarted tasks are handed back).
-- The attempts used are attempt - returned: attempt itself never goes down, it fences
-- completions of stale leases.
-- Only rows ACTIVE, leased by p_owner in the decision's attempt qualify; when any
-- decision does not, task_all_or_nothing (migration 000004) raises PT005 after the
-- update, which undoes the whole statement; when none qualifies (or the topic is
-- unknown), nothing is updated and no row is returned (the check filters the updated
-- rows, so it does not run). The rows are not locked beforehand: the UPDATE locks each
-- as it writes it and re-checks a row changed meanwhile, and its SET list reads that
-- current version, so a cancel that committed meanwhile is honoured.
CREATE FUNCTION task_complete(p_topic text, p_owner text, p_sequences bigint[], p_attempts integer[],
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
                              -- a FAILURE with attempts left goes back to READY (design section 5.1)
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
    )
    SELECT c.* FROM done c
    WHERE task_all_or_nothing((SELECT count(*) FROM done), cardinality(p_sequences));
END
$$;

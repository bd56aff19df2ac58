-- 000020: a processor's ANALYZE no longer waits for, nor cancels, a VACUUM of the table.
--
-- Processors refresh the statistics of the table that holds their topic as it grows
-- (Repository.Analyze). ANALYZE takes the table's SHARE UPDATE EXCLUSIVE lock, which a
-- running VACUUM holds: it waited behind the processor's own VACUUM, and it made
-- autovacuum cancel itself ("canceling autovacuum task") one deadlock_timeout later, so
-- that on a large, busy table autovacuum could be cancelled pass after pass. With
-- SKIP_LOCKED the ANALYZE is skipped when the lock is taken (PostgreSQL logs a WARNING)
-- and the row estimate of the last statistics is returned; the processor analyzes again
-- at its next interval.
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
    EXECUTE format('ANALYZE (SKIP_LOCKED) %I', v_table);
    SELECT GREATEST(reltuples, 0)::bigint INTO v_rows FROM pg_catalog.pg_class WHERE oid = to_regclass(v_table);
    RETURN v_rows;
END
$$;

-- The function as 000009 made it: ANALYZE waits for the table's lock.
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

-- 000035 on a distributed database: task_citus_reset (TaskReset on Citus) as
-- sql/citus/functions.sql now has it, the reset's time as the task's not-before; the
-- plain migration changes nothing (its reset and junction are statements of the Go
-- API, sql/queries). Citus passes the CREATE OR REPLACE of a distributed function on to
-- every node.

CREATE OR REPLACE FUNCTION task_citus_reset(p_topic text, p_sequences bigint[])
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
BEGIN
    v_target := ARRAY(SELECT t.sequence FROM task t
                      WHERE t.topic = p_topic AND t.sequence = ANY (p_sequences) AND t.state BETWEEN 2 AND 6
                      FOR UPDATE OF t);
    IF cardinality(v_target) <> cardinality(p_sequences) THEN
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

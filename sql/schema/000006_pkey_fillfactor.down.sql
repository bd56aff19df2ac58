-- Reverts 000006: task_topic_create as 000001 made it, the partitions' keys at the
-- default fillfactor.

CREATE OR REPLACE FUNCTION task_topic_create(p_topic text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_partition text := 'task_' || md5(p_topic);
BEGIN
    INSERT INTO task_topic (topic, partition) VALUES (p_topic, v_partition)
    ON CONFLICT (topic) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- fillfactor leaves room on each page for the new row versions of poll and complete.
    EXECUTE format('CREATE TABLE %I (LIKE task INCLUDING DEFAULTS INCLUDING CONSTRAINTS) '
                   'WITH (fillfactor = 80)', v_partition);
    EXECUTE format('ALTER TABLE %I ADD CHECK (topic = %L)', v_partition, p_topic);
    EXECUTE format('ALTER TABLE task ATTACH PARTITION %I FOR VALUES IN (%L)', v_partition, p_topic);
    RETURN true;
END
$$;

DO $$
DECLARE
    v_key regclass;
BEGIN
    FOR v_key IN SELECT i.inhrelid FROM pg_inherits i WHERE i.inhparent = 'task_pkey'::regclass LOOP
        EXECUTE format('ALTER INDEX %s RESET (fillfactor)', v_key);
    END LOOP;
END
$$;

-- Reverts 000008: task_topic_create as 000006 made it, the partitions at fillfactor 80.

CREATE OR REPLACE FUNCTION task_topic_create(p_topic text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_partition text := 'task_' || md5(p_topic);
    v_key       regclass;
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
    -- and so does the primary key's, for the versions of each key (migration 000006)
    SELECT x.indexrelid INTO v_key
    FROM pg_inherits i JOIN pg_index x ON x.indexrelid = i.inhrelid
    WHERE i.inhparent = 'task_pkey'::regclass AND x.indrelid = v_partition::regclass;
    EXECUTE format('ALTER INDEX %s SET (fillfactor = 50)', v_key);
    RETURN true;
END
$$;

DO $$
DECLARE
    v_partition regclass;
BEGIN
    FOR v_partition IN SELECT i.inhrelid FROM pg_inherits i WHERE i.inhparent = 'task'::regclass LOOP
        EXECUTE format('ALTER TABLE %s SET (fillfactor = 80)', v_partition);
    END LOOP;
END
$$;

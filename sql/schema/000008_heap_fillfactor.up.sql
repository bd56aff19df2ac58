-- 000008: a topic's table fills its pages (issue 5).
--
-- Partitions were created at fillfactor 80, leaving a fifth of each page pushed into
-- free for the poll's and the completion's row versions. No update of a task is HOT, so
-- those versions need no particular page, and only about one in five found room on the
-- page of the version it replaced: the rest of the reserve stayed empty. Under a
-- sustained load, where the table soon outgrows the shared buffers (128 MB by default),
-- every empty byte is one more to evict, write and read back: at the default fillfactor
-- (100) a 60-s sustained run processed 1–9 % more tasks per second in each of four
-- interleaved pairs, and burn-downs were unchanged (BENCHMARKS.md).
--
-- The existing partitions are reset too; that applies to the pages they fill from now
-- on, without rewriting any.

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
    EXECUTE format('CREATE TABLE %I (LIKE task INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', v_partition);
    EXECUTE format('ALTER TABLE %I ADD CHECK (topic = %L)', v_partition, p_topic);
    EXECUTE format('ALTER TABLE task ATTACH PARTITION %I FOR VALUES IN (%L)', v_partition, p_topic);
    -- the primary key's leaves leave room for the versions of each key (migration 000006)
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
        EXECUTE format('ALTER TABLE %s RESET (fillfactor)', v_partition);
    END LOOP;
END
$$;

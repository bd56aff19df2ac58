-- 000006: the primary key's leaf pages leave room for a task's later row versions.
--
-- A task's row is written three times (push, poll, completion) and none of those updates
-- is HOT, so each new version also enters the primary key, next to the earlier ones:
-- the key (sequence, topic) does not change. Pushed in sequence order, the leaves were
-- filled to 90 %, so the poll's and the completion's versions split nearly every leaf
-- (a 200 000-task partition's key went from 772 to 1 540 pages while its tasks were
-- processed) or made PostgreSQL clear dead versions from it first. Filled to 50 %, the
-- second version fits and the third takes the place of the first once that one is dead:
-- the same partition's key has 1 386 pages after the push, 1 387 once every task
-- finished, and a burn-down processes 2–9 % more tasks per second (BENCHMARKS.md).
--
-- A partitioned index takes no storage parameters after it is created, and rebuilding
-- the key would lock every topic while it is rebuilt; so each partition's own key gets
-- the setting: the existing ones here (it applies to the pages they split from now on),
-- new ones in task_topic_create.

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
    v_key regclass;
BEGIN
    FOR v_key IN SELECT i.inhrelid FROM pg_inherits i WHERE i.inhparent = 'task_pkey'::regclass LOOP
        EXECUTE format('ALTER INDEX %s SET (fillfactor = 50)', v_key);
    END LOOP;
END
$$;

-- 000042 on a distributed database: task_topic_create of sql/citus/functions.sql (no
-- bucket: the shard is the topic's table), refusing the names "." and ".." and names
-- with a control character as the plain migration does.
CREATE OR REPLACE FUNCTION task_topic_create(p_topic text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF p_topic IS NULL OR length(p_topic) NOT BETWEEN 1 AND 250 THEN
        RAISE EXCEPTION 'topic % is invalid: want 1 to 250 characters', coalesce(quote_literal(left(p_topic, 40)), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_topic IN ('.', '..') THEN
        RAISE EXCEPTION 'topic % is a path segment of its own: choose another name', quote_literal(p_topic)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_topic ~ '[\x01-\x1f\x7f-\x9f]' THEN
        RAISE EXCEPTION 'topic % has a control character: choose a name without', quote_literal(p_topic)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO task_topic (topic, partition) VALUES (p_topic, 'task') ON CONFLICT (topic) DO NOTHING;
    RETURN FOUND;
END
$$;

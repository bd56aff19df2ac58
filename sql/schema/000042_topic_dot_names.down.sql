CREATE OR REPLACE FUNCTION task_topic_create(p_topic text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF p_topic IS NULL OR length(p_topic) NOT BETWEEN 1 AND 250 THEN
        RAISE EXCEPTION 'topic % is invalid: want 1 to 250 characters', coalesce(quote_literal(left(p_topic, 40)), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO task_topic (topic, partition) VALUES (p_topic, task_bucket(p_topic) || '_shared')
    ON CONFLICT (topic) DO NOTHING;
    RETURN FOUND;
END
$$;

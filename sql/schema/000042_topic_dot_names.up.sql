-- task_topic_create refuses the names "." and "..": a URL's path segment of either is
-- resolved away by HTTP clients and servers, so the REST API and the dashboard could
-- never address such a topic (/topics/./tasks is /topics/tasks). It refuses names with
-- a control character (U+0001-U+001F, U+007F-U+009F) too: a tab, a newline or a
-- terminal's escape would reach logs, metrics' labels and terminals as it is. A topic of
-- such a name created before this migration stays, with its tasks.
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
    INSERT INTO task_topic (topic, partition) VALUES (p_topic, task_bucket(p_topic) || '_shared')
    ON CONFLICT (topic) DO NOTHING;
    RETURN FOUND;
END
$$;

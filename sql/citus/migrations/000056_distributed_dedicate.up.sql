-- 000056 on a distributed database: task_topic_dedicate refuses, as sql/citus/functions.sql
-- now has it; the plain migration changes nothing.

CREATE OR REPLACE FUNCTION task_topic_dedicate(p_topic text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'topic %: a distributed database gives a topic a shard of its own, not a table: SELECT isolate_tenant_to_new_shard(''task'', %, ''CASCADE'')',
        quote_literal(p_topic), quote_literal(p_topic)
        USING ERRCODE = 'feature_not_supported';
END
$$;

ALTER FUNCTION task_topic_analyze(text) RESET default_statistics_target;
DROP FUNCTION task_queue_admits(text, bigint, bigint);

DROP FUNCTION IF EXISTS task_topic_analyze(text);
DROP FUNCTION IF EXISTS task_poll_candidates(text, boolean, smallint, integer);

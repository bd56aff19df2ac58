-- 000012 down: polls start from the head of their topic.
DROP FUNCTION task_poll_candidates(text, boolean, smallint, integer, smallint, bigint);

-- 000009 down: polls read task_ready from its head again.
DROP FUNCTION task_poll_candidates(text, boolean, smallint, integer, smallint, bigint);
ALTER FUNCTION task_poll_candidates_from_head(text, boolean, smallint, integer) RENAME TO task_poll_candidates;

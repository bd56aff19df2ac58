-- 000035: a task a revive resets, or a junction releases, is READY from then: its
-- not-before becomes the time of the reset or release (a later one stays), so that
-- task_topic_stats (TopicStats.OldestReady, pgtask_queue_oldest_ready_seconds) counts
-- its wait from then rather than from its push, a day before, say. The reset and the
-- junction are statements of the Go API (sql/queries), so that on a plain database this
-- migration changes nothing; on a distributed one its form restates task_citus_reset
-- (sql/citus/migrations). Rows are kept as they are.
SELECT 1;

-- 000047: on a distributed database, task_push_batch counts its delay by the calendar,
-- as the plain function does (sql/citus/migrations). On a plain database this migration
-- changes nothing.
SELECT 1;

-- 000051: on a distributed database, task_citus_expire_owners wakes the processors
-- waiting at a topic's concurrency limit when the tasks it takes back are retried later
-- (sql/citus/migrations), as the plain TaskExpire statement (a query of the repository,
-- not a function of the schema) now does. On a plain database this migration changes
-- nothing.
SELECT 1;

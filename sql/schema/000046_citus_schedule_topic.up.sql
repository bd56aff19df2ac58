-- 000046: on a distributed database, a trigger stands for task_schedule's foreign key to
-- task_topic (sql/citus/migrations). On a plain database the foreign key does it: this
-- migration changes nothing.
SELECT 1;

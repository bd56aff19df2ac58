DROP FUNCTION IF EXISTS task_topic_truncate(text);
DROP FUNCTION IF EXISTS task_topic_destroy(text);
DROP FUNCTION IF EXISTS task_topic_create(text);
DROP VIEW IF EXISTS task_pretty;
-- Dropping the partitioned table drops every topic's partition with it.
DROP TABLE IF EXISTS task;
DROP SEQUENCE IF EXISTS task_sequence;
DROP TABLE IF EXISTS task_owner;
DROP TABLE IF EXISTS task_topic;

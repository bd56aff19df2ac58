-- 000055 reverted: no index of task_schedule by topic.
DROP INDEX task_schedule_topic;

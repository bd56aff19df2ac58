-- 000055: a topic's schedules are found by their topic, not by reading every schedule.
--
-- task_schedule's foreign key to task_topic (ON DELETE CASCADE) had no index on topic:
-- each topic destroyed read every schedule of the database to find its own, and so did
-- `pgtask topic destroy`, which names the schedules that go with the topic. The table is
-- small beside task, and the index is built in the migration's transaction.
CREATE INDEX task_schedule_topic ON task_schedule (topic);

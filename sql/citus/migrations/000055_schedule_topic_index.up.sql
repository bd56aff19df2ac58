-- 000055 on a distributed database: the plain migration (an index of task_schedule, a
-- table of the coordinator), with IF NOT EXISTS, as the newest form must be: a database
-- distributed at the newest version has it already.

CREATE INDEX IF NOT EXISTS task_schedule_topic ON task_schedule (topic);

-- 000030 on a distributed database: the plain migration, which Citus passes on to every
-- shard of task. IF NOT EXISTS, as the newest form must be: a database distributed at
-- the newest version has it already (internal/citustest applies the newest form again).

CREATE INDEX IF NOT EXISTS task_retention ON task (hashtext(topic), COALESCE(completed, created)) WHERE state >= 3;

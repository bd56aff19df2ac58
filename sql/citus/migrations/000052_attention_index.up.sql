-- 000052 on a distributed database: the plain migration, which Citus passes on to every
-- shard of task. IF NOT EXISTS, as the newest form must be: a database distributed at
-- the newest version has it already (internal/citustest applies the newest form again).

CREATE INDEX IF NOT EXISTS task_attention ON task (hashtext(topic), state, sequence) WHERE state BETWEEN 2 AND 4;

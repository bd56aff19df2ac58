-- 000030 on a distributed database: the plain migration as it is. Citus passes a
-- CREATE INDEX on the distributed table task on to every shard.

CREATE INDEX task_retention ON task (hashtext(topic), COALESCE(completed, created)) WHERE state >= 3;

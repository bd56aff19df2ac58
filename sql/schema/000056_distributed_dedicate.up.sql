-- 000056: on a distributed database, task_topic_dedicate refuses, naming Citus's way to
-- give a topic a shard of its own (sql/citus/migrations); there it failed with "null
-- values cannot be formatted as an SQL identifier" (a distributed topic has no table of
-- its bucket to move). Go's Repository.Dedicate refused already (ErrDistributed). The
-- plain database dedicates as before: this migration changes nothing.
SELECT 1;

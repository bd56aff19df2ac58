-- 000011 down: TaskComplete of earlier versions holds its statement itself.
DROP FUNCTION task_complete(text, text, bigint[], integer[], smallint[], text[], bigint[]);

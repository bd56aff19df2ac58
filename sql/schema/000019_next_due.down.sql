DROP FUNCTION task_next_due(text, bigint);

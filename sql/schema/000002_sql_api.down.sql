-- Drops the SQL API of 000002. task_push calls task_push_batch, so it goes first.
DROP FUNCTION IF EXISTS task_push(text, text, text, text, interval, integer, text, boolean);
DROP FUNCTION IF EXISTS task_push_batch(text, text[], text[], text, interval, integer, text, boolean);

-- Reverts 000027: the functions keep their planner settings, without jit = off.

ALTER FUNCTION task_complete(text, text, bigint[], integer[], smallint[], text[], bigint[]) RESET jit;
ALTER FUNCTION task_next_due(text, bigint) RESET jit;
ALTER FUNCTION task_poll_candidates(text, boolean, smallint, integer) RESET jit;
ALTER FUNCTION task_poll_candidates(text, boolean, smallint, integer, smallint, bigint) RESET jit;
ALTER FUNCTION task_poll_keyed(text, boolean, smallint, integer, integer, text) RESET jit;
ALTER FUNCTION task_topic_delete_rows(text, bigint) RESET jit;

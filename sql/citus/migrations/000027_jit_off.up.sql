-- 000027 on a distributed database: the plain migration's jit = off, and the same for
-- task_citus_complete, which turns nested loops off as task_complete does (the reason:
-- sql/schema/000027_jit_off.up.sql). Every task_ function is distributed (pgtask citus
-- enable), so Citus passes each ALTER FUNCTION on to every node; sql/citus/functions.sql
-- now creates task_citus_complete and task_poll_keyed with the setting.

ALTER FUNCTION task_complete(text, text, bigint[], integer[], smallint[], text[], bigint[]) SET jit = off;
ALTER FUNCTION task_citus_complete(text, text, bigint[], integer[], smallint[], text[], bigint[]) SET jit = off;
ALTER FUNCTION task_next_due(text, bigint) SET jit = off;
ALTER FUNCTION task_poll_candidates(text, boolean, smallint, integer) SET jit = off;
ALTER FUNCTION task_poll_candidates(text, boolean, smallint, integer, smallint, bigint) SET jit = off;
ALTER FUNCTION task_poll_keyed(text, boolean, smallint, integer, integer, text) SET jit = off;
ALTER FUNCTION task_topic_delete_rows(text, bigint) SET jit = off;

-- 000027: the functions that turn planner methods off also turn JIT off.
--
-- task_complete, task_next_due, task_poll_candidates, task_poll_keyed and
-- task_topic_delete_rows set enable_nestloop, enable_sort, enable_bitmapscan or
-- enable_seqscan off, so that a plan made while a topic was small does not read it
-- whole once it is large. A disabled method is not forbidden, only costed at 10^10: a
-- plan that has no other way (a statement, a partition or a set of statistics the
-- planner finds no index for) keeps the node at that cost, far above jit_above_cost,
-- and each execution then compiles the statement (inlined and optimized: about half a
-- second, the cost task_hand_over showed while it was built, 000026). No plan of these
-- functions keeps such a node on this schema today; JIT off removes the cliff for the
-- plans they may come to choose. task_hand_over and task_topic_stats already set it.

ALTER FUNCTION task_complete(text, text, bigint[], integer[], smallint[], text[], bigint[]) SET jit = off;
ALTER FUNCTION task_next_due(text, bigint) SET jit = off;
ALTER FUNCTION task_poll_candidates(text, boolean, smallint, integer) SET jit = off;
ALTER FUNCTION task_poll_candidates(text, boolean, smallint, integer, smallint, bigint) SET jit = off;
ALTER FUNCTION task_poll_keyed(text, boolean, smallint, integer, integer, text) SET jit = off;
ALTER FUNCTION task_topic_delete_rows(text, bigint) SET jit = off;

DROP FUNCTION task_complete_poll(text, text, bigint[], integer[], smallint[], text[], bigint[], boolean, smallint,
                                 integer, smallint, bigint);

-- 000060: a schedule's created and updated default to the time of the statement that
-- writes the row (statement_timestamp()) rather than the start of its transaction
-- (now()). A schedule declared by task_schedule(), or inserted by hand, inside a
-- transaction open for an hour had been created an hour back: its first fire time is
-- computed from created, so it fired as soon as the transaction committed, and with a
-- catch_up it pushed the fire times of the hour it did not exist. The Go API gives
-- both times itself and is unchanged. task_schedule is a table of the coordinator on a
-- distributed database too. Rows are kept as they are.

ALTER TABLE task_schedule
    ALTER COLUMN created SET DEFAULT statement_timestamp(),
    ALTER COLUMN updated SET DEFAULT statement_timestamp();

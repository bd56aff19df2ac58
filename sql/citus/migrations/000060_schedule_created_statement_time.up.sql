-- 000060 on a distributed database: the plain migration as it is (defaults of
-- task_schedule, a table of the coordinator).

ALTER TABLE task_schedule
    ALTER COLUMN created SET DEFAULT statement_timestamp(),
    ALTER COLUMN updated SET DEFAULT statement_timestamp();

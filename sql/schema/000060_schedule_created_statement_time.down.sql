-- 000060 reverted: created and updated default to now() again, the transaction's start.
-- Rows are kept as they are.

ALTER TABLE task_schedule
    ALTER COLUMN created SET DEFAULT now(),
    ALTER COLUMN updated SET DEFAULT now();

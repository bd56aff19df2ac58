-- Reverts 000005.
DROP INDEX task_cancelled;

ALTER TABLE task_owner DROP COLUMN expiry_ms;

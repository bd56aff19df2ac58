-- Topics created from now on get one attempt again; those created meanwhile keep 25.
ALTER TABLE task_topic ALTER COLUMN max_attempts SET DEFAULT 1;

DROP FUNCTION task_sequence_at(timestamptz, boolean);

-- Schedules go, with their state; the tasks they pushed stay.
DROP FUNCTION task_schedule(text, text, text, text, text, text, integer, text, integer, boolean);
DROP FUNCTION task_schedule_spec_problem(text);
DROP FUNCTION task_schedule_interval_problem(text);
DROP TABLE task_schedule;

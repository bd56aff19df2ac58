DROP INDEX task_retention;

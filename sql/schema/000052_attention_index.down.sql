DROP INDEX task_attention;

-- 000041 reverted: no trigger on task_schedule, no fire_from. A schedule whose next_fire
-- the trigger had cleared (NULL) is computed from its created time again, as before
-- 000041; its next_fire is set to its fire_from first so that it is not replayed from
-- there.

DROP TRIGGER task_schedule_check ON task_schedule;
DROP FUNCTION task_schedule_check();
DROP FUNCTION task_schedule_zone_problem(text);
UPDATE task_schedule SET next_fire = fire_from WHERE next_fire IS NULL AND fire_from IS NOT NULL;
ALTER TABLE task_schedule DROP COLUMN fire_from;

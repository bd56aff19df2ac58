-- 000041 reverted: no trigger on task_schedule, no fire_from. A schedule the trigger
-- marked (fire_from set: its next_fire cleared, or left before fire_from by a resume)
-- gets fire_from as its next_fire first, so that the firers before 000041 neither
-- compute it from its created time nor replay the times skipped while it was paused.

DROP TRIGGER task_schedule_check ON task_schedule;
DROP FUNCTION task_schedule_check();
DROP FUNCTION task_schedule_zone_problem(text);
UPDATE task_schedule SET next_fire = fire_from
WHERE fire_from IS NOT NULL AND (next_fire IS NULL OR next_fire <= fire_from);
ALTER TABLE task_schedule DROP COLUMN fire_from;

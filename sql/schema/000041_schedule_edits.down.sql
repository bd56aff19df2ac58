-- 000041 reverted: no trigger on task_schedule, no fire_from. A schedule the trigger
-- marked (fire_from set: its next_fire cleared, or left before fire_from by a resume)
-- gets a next_fire after fire_from first, so that the firers before 000041 neither
-- compute it from its created time nor replay the times skipped while it was paused: a
-- cron schedule fire_from itself (the firers before 000041 skip a start that is not a
-- time of the spec), an @every schedule the first point of its grid (its next_fire, or
-- its created time, plus whole periods) after fire_from, where fire_from itself would
-- be pushed at once and the period counted from it.

DROP TRIGGER task_schedule_check ON task_schedule;
DROP FUNCTION task_schedule_check();
DROP FUNCTION task_schedule_zone_problem(text);
DO $$
DECLARE
    s      record;
    period interval;
    anchor timestamptz;
BEGIN
    FOR s IN SELECT name, spec, created, next_fire, fire_from FROM task_schedule
             WHERE fire_from IS NOT NULL AND (next_fire IS NULL OR next_fire <= fire_from) FOR UPDATE
    LOOP
        period := NULL;
        IF lower(s.spec) ~ '^\s*@every\s' THEN
            BEGIN
                -- a Go duration (1h30m, 90s, 500ms) reads as an interval
                period := substring(s.spec FROM '(?i)@every\s+(\S+)')::interval;
            EXCEPTION WHEN others THEN
                period := NULL;
            END;
        END IF;
        IF period IS NULL OR period <= interval '0' THEN
            UPDATE task_schedule SET next_fire = s.fire_from WHERE name = s.name;
        ELSE
            anchor := coalesce(s.next_fire, s.created);
            UPDATE task_schedule
            SET next_fire = anchor + (floor(extract(epoch FROM s.fire_from - anchor) / extract(epoch FROM period)) + 1) * period
            WHERE name = s.name;
        END IF;
    END LOOP;
END $$;
ALTER TABLE task_schedule DROP COLUMN fire_from;

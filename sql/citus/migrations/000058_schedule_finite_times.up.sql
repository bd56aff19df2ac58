-- 000058 on a distributed database: the plain migration (checks of task_schedule, a
-- table of the coordinator), once: as the newest form must be, since a database
-- distributed at the newest version has the checks already.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conrelid = 'task_schedule'::regclass AND conname = 'task_schedule_next_fire_finite') THEN
        UPDATE task_schedule
        SET paused = paused OR next_fire IS NOT DISTINCT FROM 'infinity' OR fire_from IS NOT DISTINCT FROM 'infinity',
            next_fire = CASE WHEN isfinite(next_fire) THEN next_fire END,
            fire_from = CASE WHEN isfinite(fire_from) THEN fire_from END,
            last_fire = CASE WHEN isfinite(last_fire) THEN last_fire END,
            last_fired_at = CASE WHEN isfinite(last_fired_at) THEN last_fired_at END,
            created = CASE WHEN isfinite(created) THEN created ELSE now() END,
            updated = CASE WHEN isfinite(updated) THEN updated ELSE now() END
        WHERE NOT isfinite(next_fire) OR NOT isfinite(fire_from) OR NOT isfinite(last_fire)
           OR NOT isfinite(last_fired_at) OR NOT isfinite(created) OR NOT isfinite(updated);
        ALTER TABLE task_schedule
            ADD CONSTRAINT task_schedule_next_fire_finite CHECK (isfinite(next_fire)),
            ADD CONSTRAINT task_schedule_fire_from_finite CHECK (isfinite(fire_from)),
            ADD CONSTRAINT task_schedule_last_fire_finite CHECK (isfinite(last_fire)),
            ADD CONSTRAINT task_schedule_last_fired_at_finite CHECK (isfinite(last_fired_at)),
            ADD CONSTRAINT task_schedule_created_finite CHECK (isfinite(created)),
            ADD CONSTRAINT task_schedule_updated_finite CHECK (isfinite(updated));
    END IF;
END $$;

-- 000058 on a distributed database: the plain migration (checks of task_schedule, a
-- table of the coordinator), once: as the newest form must be, since a database
-- distributed at the newest version has the checks already.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conrelid = 'task_schedule'::regclass AND conname = 'task_schedule_next_fire_finite') THEN
        UPDATE task_schedule
        SET next_fire = CASE WHEN isfinite(next_fire) THEN next_fire END,
            fire_from = CASE WHEN isfinite(fire_from) THEN fire_from ELSE statement_timestamp() END,
            last_fire = CASE WHEN isfinite(last_fire) THEN last_fire END
        WHERE NOT isfinite(next_fire) OR NOT isfinite(fire_from) OR NOT isfinite(last_fire);
        ALTER TABLE task_schedule
            ADD CONSTRAINT task_schedule_next_fire_finite CHECK (isfinite(next_fire)),
            ADD CONSTRAINT task_schedule_fire_from_finite CHECK (isfinite(fire_from)),
            ADD CONSTRAINT task_schedule_last_fire_finite CHECK (isfinite(last_fire));
    END IF;
END $$;

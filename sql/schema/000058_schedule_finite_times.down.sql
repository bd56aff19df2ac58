-- 000058 reverted: a schedule's times take infinity again (the rows repaired stay so).

ALTER TABLE task_schedule
    DROP CONSTRAINT task_schedule_next_fire_finite,
    DROP CONSTRAINT task_schedule_fire_from_finite,
    DROP CONSTRAINT task_schedule_last_fire_finite,
    DROP CONSTRAINT task_schedule_last_fired_at_finite,
    DROP CONSTRAINT task_schedule_created_finite,
    DROP CONSTRAINT task_schedule_updated_finite;

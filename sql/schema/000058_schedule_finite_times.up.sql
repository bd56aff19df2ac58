-- 000058: a schedule's times are finite. Written by hand as 'infinity' or '-infinity'
-- (docs/sql.md takes a next_fire "as it is"), a row stopped every schedule: a
-- '-infinity' next_fire sorts first among the due ones, its read failed (Go's time.Time
-- holds no infinity), and the processors' rounds ended there, in every process; the
-- listings (pgtask schedule list, REST, the dashboard) failed on the page that held it,
-- whichever of its times (next_fire, fire_from, last_fire, last_fired_at, created,
-- updated) was infinite. A check per column now refuses it (23514, naming the column's
-- check), however the row is written.
--
-- A row that holds one already is repaired so that the checks can be added, keeping
-- what it meant: a schedule parked with next_fire (or fire_from) 'infinity' was never
-- due, and is paused; a '-infinity' next_fire is due now (NULL: the next processor
-- computes it from now), a '-infinity' fire_from skips nothing (NULL); an infinite
-- last_fire or last_fired_at is none (NULL); an infinite created or updated is now.

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

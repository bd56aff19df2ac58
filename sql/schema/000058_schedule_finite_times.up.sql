-- 000058: a schedule's next_fire, fire_from and last_fire are finite times. Written by
-- hand as 'infinity' or '-infinity' (docs/sql.md takes a next_fire "as it is"), a row
-- stopped every schedule: '-infinity' sorts first among the due ones, its read failed
-- (Go's time.Time holds no infinity), and the processors' rounds ended there, in every
-- process; the listings (pgtask schedule list, REST, the dashboard) failed on the page
-- that held it. A check per column now refuses it (23514, naming the column's check),
-- however the row is written.
--
-- A row that holds one already is repaired so that the checks can be added: next_fire
-- NULL (the next processor computes it from fire_from, from now when that is not
-- finite either), fire_from now, last_fire NULL (the schedule then has no latest fire
-- time to stop at: the next one is computed from now, by the trigger).

UPDATE task_schedule
SET next_fire = CASE WHEN isfinite(next_fire) THEN next_fire END,
    fire_from = CASE WHEN isfinite(fire_from) THEN fire_from ELSE statement_timestamp() END,
    last_fire = CASE WHEN isfinite(last_fire) THEN last_fire END
WHERE NOT isfinite(next_fire) OR NOT isfinite(fire_from) OR NOT isfinite(last_fire);

ALTER TABLE task_schedule
    ADD CONSTRAINT task_schedule_next_fire_finite CHECK (isfinite(next_fire)),
    ADD CONSTRAINT task_schedule_fire_from_finite CHECK (isfinite(fire_from)),
    ADD CONSTRAINT task_schedule_last_fire_finite CHECK (isfinite(last_fire));

-- 000041: a schedule changed by hand (UPDATE task_schedule, as docs/sql.md and the PT016
-- hint suggest) is as safe as one changed through Go, the CLI or REST.
--
-- Before, only task_schedule() and Go checked what they wrote, and only Go recomputed
-- next_fire: an UPDATE of the spec fired nothing new until the old next_fire, an
-- unpause replayed every fire time skipped while paused, next_fire = NULL replayed from
-- the schedule's creation, and a bad spec or time zone was stored (the schedule then
-- never fired, its fires refused at every round). A trigger now does it for every
-- writer, whichever way the row is written, so the SQL interface needs no function of
-- its own and no writer can get around it.
--
-- Why a trigger that marks rather than one that computes, or a task_schedule_set()
-- function: cron specs are read by the Go library every processor uses (migration
-- 000016); PostgreSQL cannot compute their fire times alike. So the trigger validates
-- what it can (the spec's shape and values, the zone against pg_timezone_names, the
-- name) and records from when the fire times go on, fire_from; the first processor
-- that sees the schedule (within a heartbeat) computes next_fire from it, and a Go
-- caller does it in the same transaction. A function plus a trigger refusing direct
-- edits would still need the same marker (it cannot compute cron either), and would
-- break every UPDATE users already run (pause: SET paused = true).
--
-- The trigger (BEFORE INSERT OR UPDATE, per row):
--   * refuses, with SQLSTATE 22023, a schedule name '.' or '..' (the REST API's
--     /schedules/{name} would resolve it to another resource), a spec
--     task_schedule_spec_problem refuses, and a time zone task_schedule_zone_problem
--     refuses; each only when written (INSERT, or an UPDATE that changes it), so rows
--     stored before keep working;
--   * on an UPDATE that changes the spec, or the time zone of a cron spec (an @every
--     spec counts real time: its zone changes nothing), sets next_fire to NULL and
--     fire_from to now (or to last_fire when later): the first fire time is the first
--     of the new spec after it;
--   * on an UPDATE that resumes (paused true to false), keeps next_fire and sets
--     fire_from: the fire times up to then, skipped while paused, are not pushed; an
--     @every schedule keeps its phase (its next fire time is the next point of its grid
--     after fire_from). To replay them, clear fire_from in a second statement
--     (UPDATE task_schedule SET fire_from = NULL WHERE name = …);
--   * on an UPDATE that sets next_fire to NULL, sets fire_from the same way: the next
--     fire time is recomputed from now, not from the schedule's creation;
--   * on an UPDATE of a setting that leaves `updated` alone, sets it to now().
--
-- fire_from is read only by the processors (Repository.FireSchedules): fire times at
-- or before it are not pushed; NULL (every row stored before) changes nothing, and a
-- NULL next_fire is computed from created as before. A fire clears it.

ALTER TABLE task_schedule ADD COLUMN fire_from timestamptz NULL;

COMMENT ON COLUMN task_schedule.fire_from IS
    'Fire times at or before this are not pushed: set by task_schedule_check when the spec, a cron spec''s zone or the pause changes, or next_fire is set NULL; cleared by the next fire. NULL next_fire and NULL fire_from: the first fire time after created.';

-- task_schedule_zone_problem says what is wrong with a schedule's time zone, or NULL
-- when nothing is: a zone must be one the database lists (pg_timezone_names, compared
-- exactly: europe/paris is not Europe/Paris, whatever a case-insensitive file system
-- lets Go load), and not one of the names the server lists from its host's files that
-- processors would not read alike (localtime, posixrules, posix/…; migration 000038).
-- The Go API asks it before writing (a refusal by the trigger would abort the caller's
-- transaction). pg_timezone_names reads every zone (25 to 60 ms a call): UTC is known,
-- and the zone found good last in this transaction is remembered (a custom setting,
-- local to the transaction), so that copying a thousand rows of one zone, or a check
-- followed by the trigger's, reads it once.
CREATE FUNCTION task_schedule_zone_problem(p_zone text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF p_zone = 'UTC' OR p_zone = current_setting('pgtask.schedule_zone_checked', true) THEN
        RETURN NULL;
    END IF;
    IF p_zone IS NULL OR p_zone = 'Local' OR NOT EXISTS (SELECT FROM pg_timezone_names z WHERE z.name = p_zone) THEN
        RETURN format('unknown time zone %s (want an IANA name such as UTC or Europe/Paris)', quote_nullable(p_zone));
    END IF;
    IF p_zone IN ('localtime', 'posixrules') OR p_zone LIKE 'posix/%' THEN
        RETURN format('time zone %s is not an IANA zone name that every processor reads alike%s', quote_literal(p_zone),
                      CASE WHEN p_zone LIKE 'posix/%' THEN format(': give %s', quote_literal(substr(p_zone, 7))) ELSE '' END);
    END IF;
    PERFORM set_config('pgtask.schedule_zone_checked', p_zone, true);
    RETURN NULL;
END $$;

-- task_schedule_check is the trigger this migration's header describes.
CREATE FUNCTION task_schedule_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_problem text;
BEGIN
    IF TG_OP = 'INSERT' OR NEW.name IS DISTINCT FROM OLD.name THEN
        IF NEW.name IN ('.', '..') THEN
            RAISE EXCEPTION 'schedule name % is not allowed (the REST API''s /schedules/% would name another resource)',
                quote_literal(NEW.name), NEW.name USING ERRCODE = 'invalid_parameter_value', COLUMN = 'name';
        END IF;
    END IF;
    IF TG_OP = 'INSERT' OR NEW.spec IS DISTINCT FROM OLD.spec THEN
        -- stored trimmed, as task_schedule() and Go store it: ' 0 9 * * *' written over
        -- '0 9 * * *' changes nothing, and Go never takes a stored spec for a new one
        NEW.spec := btrim(NEW.spec, E' \t\n\x0B\f\r');
    END IF;
    IF TG_OP = 'INSERT' OR NEW.spec IS DISTINCT FROM OLD.spec THEN
        v_problem := task_schedule_spec_problem(NEW.spec);
        IF v_problem IS NOT NULL THEN
            RAISE EXCEPTION 'schedule %: %', quote_literal(NEW.name), v_problem
                USING ERRCODE = 'invalid_parameter_value', COLUMN = 'spec';
        END IF;
    END IF;
    IF TG_OP = 'INSERT' OR NEW.time_zone IS DISTINCT FROM OLD.time_zone THEN
        v_problem := task_schedule_zone_problem(NEW.time_zone);
        IF v_problem IS NOT NULL THEN
            RAISE EXCEPTION 'schedule %: time_zone: %', quote_literal(NEW.name), v_problem
                USING ERRCODE = 'invalid_parameter_value', COLUMN = 'time_zone';
        END IF;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        IF NEW.spec IS DISTINCT FROM OLD.spec
           OR (NEW.time_zone IS DISTINCT FROM OLD.time_zone AND lower(NEW.spec) !~ '^[ \t\n\v\f\r]*@every[ \t]') THEN
            -- a new spec, or the zone a cron spec is read in: the fire times restart
            -- from this statement (not the transaction's start: an edit committed late
            -- would replay the times since; and never before a fire already pushed),
            -- from the next_fire the writer gave with it if it gave one (a process of
            -- the release before 000041 computes it, and its processors compute a
            -- cleared one from the schedule's creation)
            IF NEW.next_fire IS NOT DISTINCT FROM OLD.next_fire THEN
                NEW.next_fire := NULL;
            END IF;
            NEW.fire_from := greatest(statement_timestamp(), NEW.last_fire);
        ELSIF OLD.paused AND NOT NEW.paused THEN
            -- resumed: the fire times skipped while paused are not replayed
            NEW.fire_from := greatest(statement_timestamp(), NEW.last_fire);
        ELSIF NEW.next_fire IS NULL AND OLD.next_fire IS NOT NULL THEN
            -- next_fire cleared by hand: recomputed from now, not from created
            NEW.fire_from := greatest(statement_timestamp(), NEW.last_fire);
        END IF;
        IF NEW.updated IS NOT DISTINCT FROM OLD.updated
           AND (NEW.topic, NEW.spec, NEW.time_zone, NEW.identifier, NEW.input, NEW.priority, NEW.insertion, NEW.catch_up, NEW.paused)
               IS DISTINCT FROM
               (OLD.topic, OLD.spec, OLD.time_zone, OLD.identifier, OLD.input, OLD.priority, OLD.insertion, OLD.catch_up, OLD.paused) THEN
            NEW.updated := now();
        END IF;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER task_schedule_check BEFORE INSERT OR UPDATE ON task_schedule
    FOR EACH ROW EXECUTE FUNCTION task_schedule_check();

-- 000048: a new schedule's name, or a name changed, with a control character (U+0001-
-- U+001F, U+007F-U+009F: a tab, a newline, a terminal's escape) is refused, as a topic's
-- is since 000042: the name reaches the schedule metrics' labels, the fire logs and the
-- references of its tasks (schedule:<name>) as it is. task_schedule_check refuses it
-- (22023, the column named name) however the row is written; Go refuses it before.
-- A schedule of such a name stored before stays, and keeps working.

CREATE OR REPLACE FUNCTION task_schedule_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_problem text;
    v_fired   text;
BEGIN
    IF TG_OP = 'INSERT' OR NEW.name IS DISTINCT FROM OLD.name THEN
        IF NEW.name IN ('.', '..') THEN
            RAISE EXCEPTION 'schedule name % is not allowed (the REST API''s /schedules/% would name another resource)',
                quote_literal(NEW.name), NEW.name USING ERRCODE = 'invalid_parameter_value', COLUMN = 'name';
        END IF;
        IF NEW.name ~ '[\x01-\x1f\x7f-\x9f]' THEN
            -- the character named, not written: the message reaches terminals and logs
            RAISE EXCEPTION 'schedule name has a control character (U+%): choose a name without',
                upper(lpad(to_hex(ascii(substring(NEW.name from '[\x01-\x1f\x7f-\x9f]'))), 4, '0'))
                USING ERRCODE = 'invalid_parameter_value', COLUMN = 'name';
        END IF;
    END IF;
    IF TG_OP = 'INSERT' OR NEW.identifier IS DISTINCT FROM OLD.identifier
       OR (NEW.identifier IS NULL AND NEW.name IS DISTINCT FROM OLD.name) THEN
        -- each fire's task is identified by the identifier, or the name when there is
        -- none, with every {time} replaced by the fire time (RFC 3339 in UTC, 20
        -- characters), as Go's fire writes it: longer than a task's identifier may be,
        -- the schedule would never fire
        v_fired := replace(coalesce(NEW.identifier, NEW.name), '{time}', '2000-01-01T00:00:00Z');
        IF length(v_fired) > 500 THEN
            RAISE EXCEPTION 'schedule %: % is % characters long once {time} is replaced by the fire time (20 characters), at most 500 allowed',
                quote_literal(NEW.name), CASE WHEN NEW.identifier IS NULL THEN 'the name, the identifier of its tasks,' ELSE 'identifier' END,
                length(v_fired) USING ERRCODE = 'invalid_parameter_value', COLUMN = 'identifier';
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

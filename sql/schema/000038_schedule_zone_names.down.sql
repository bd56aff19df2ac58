-- 000038 reverted: task_schedule as 000034 left it.

CREATE OR REPLACE FUNCTION task_schedule(
    name       text,
    topic      text,
    spec       text,
    time_zone  text    DEFAULT 'UTC',
    identifier text    DEFAULT NULL,
    input      text    DEFAULT NULL,
    priority   integer DEFAULT 0,
    insertion  text    DEFAULT 'supersede',
    catch_up   integer DEFAULT 0,
    paused     boolean DEFAULT false
) RETURNS text
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_mode    smallint;
    v_problem text;
BEGIN
    IF task_schedule.name IS NULL OR length(task_schedule.name) NOT BETWEEN 1 AND 250 THEN
        RAISE EXCEPTION 'schedule name is %, want 1 to 250 characters',
            CASE WHEN task_schedule.name IS NULL THEN 'NULL' ELSE length(task_schedule.name) || ' characters long' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT FROM task_topic tt WHERE tt.topic = task_schedule.topic) THEN
        RAISE EXCEPTION 'schedule %: unknown topic %', quote_literal(task_schedule.name), quote_nullable(task_schedule.topic)
            USING ERRCODE = 'PT001';
    END IF;
    v_problem := task_schedule_spec_problem(task_schedule.spec);
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION 'schedule %: %', quote_literal(task_schedule.name), v_problem USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_schedule.time_zone IS NULL OR task_schedule.time_zone = 'Local'
       OR NOT EXISTS (SELECT FROM pg_timezone_names z WHERE z.name = task_schedule.time_zone) THEN
        RAISE EXCEPTION 'schedule %: unknown time zone %', quote_literal(task_schedule.name), quote_nullable(task_schedule.time_zone)
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Use an IANA name such as UTC or Europe/Paris.';
    END IF;
    IF task_schedule.identifier IS NOT NULL AND length(task_schedule.identifier) NOT BETWEEN 1 AND 500 THEN
        RAISE EXCEPTION 'schedule %: identifier is % characters long, want 1 to 500', quote_literal(task_schedule.name),
            length(task_schedule.identifier) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- each task's identifier is the template with every {time} replaced by the fire time
    -- (RFC 3339 in UTC, 20 characters: 2026-03-29T01:00:00Z), as ScheduleSettings.Validate
    -- checks it
    IF length(replace(task_schedule.identifier, '{time}', '2000-01-01T00:00:00Z')) > 500 THEN
        RAISE EXCEPTION 'schedule %: identifier is % characters long once {time} is replaced by the fire time (20 characters), at most 500 allowed',
            quote_literal(task_schedule.name), length(replace(task_schedule.identifier, '{time}', '2000-01-01T00:00:00Z'))
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_schedule.priority IS NULL OR task_schedule.priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'schedule %: priority % is out of range -32768..32767', quote_literal(task_schedule.name),
            coalesce(task_schedule.priority::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_mode := array_position(ARRAY['APPEND', 'REPLACE', 'SUPERSEDE', 'DELETE'], upper(task_schedule.insertion)) - 1;
    IF v_mode IS NULL THEN
        RAISE EXCEPTION 'schedule %: unknown insertion %', quote_literal(task_schedule.name), quote_nullable(task_schedule.insertion)
            USING ERRCODE = 'PT002', HINT = 'Use append, replace, supersede or delete (any case).';
    END IF;
    IF task_schedule.catch_up IS NULL OR task_schedule.catch_up NOT BETWEEN 0 AND 10000 THEN
        RAISE EXCEPTION 'schedule %: catch_up % is out of range 0..10000', quote_literal(task_schedule.name),
            coalesce(task_schedule.catch_up::text, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_schedule.paused IS NULL THEN
        RAISE EXCEPTION 'schedule %: paused is NULL, want true or false', quote_literal(task_schedule.name)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO task_schedule (name, topic, spec, time_zone, identifier, input, priority, insertion, catch_up, paused)
    VALUES (task_schedule.name, task_schedule.topic, btrim(task_schedule.spec), task_schedule.time_zone,
            task_schedule.identifier, task_schedule.input, task_schedule.priority, v_mode, task_schedule.catch_up,
            task_schedule.paused)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'schedule % exists', quote_literal(task_schedule.name)
            USING ERRCODE = 'PT016', HINT = 'Change it with `pgtask schedule set` or UPDATE task_schedule.';
    END IF;
    RETURN task_schedule.name;
END $$;

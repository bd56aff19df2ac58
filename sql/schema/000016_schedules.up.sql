-- 000016: schedules — periodic and cron tasks stored in the database.
--
-- A schedule pushes a task to a topic at each of its fire times: a cron expression (5
-- fields, or 6 with seconds first; @hourly, @daily, … and `@every 90s`) read in an IANA
-- time zone. It needs a table of its own (design §2 allows one where a feature needs
-- state of its own): a schedule is neither a topic setting (a topic can have many
-- schedules, and a schedule outlives none of them: ON DELETE CASCADE) nor a task (it is
-- what makes tasks). Keeping schedules here rather than in each process's code means
-- every process and deployment sees the same ones, and they can be listed, changed and
-- paused at run time.
--
-- Exactly once without a leader: whoever fires a schedule (every processor, on its
-- heartbeat) advances next_fire with a compare-and-set (UPDATE … WHERE next_fire = the
-- value it read) in the same transaction as the push. Two firers of the same fire time
-- cannot both commit: the second's UPDATE waits for the first and then matches no row,
-- so its push is rolled back. A firer that dies mid-way leaves nothing behind.
--
-- next_fire NULL means "not computed yet": a schedule declared from SQL
-- (task_schedule) gets its first fire time from the first processor that sees it, the
-- first fire time of its spec after its created time (cron is parsed in Go, by the
-- library every processor uses; SQL checks the shape and the values of the spec).
CREATE TABLE task_schedule (
    name          text        PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 250),
    topic         text        NOT NULL REFERENCES task_topic (topic) ON DELETE CASCADE,
    spec          text        NOT NULL CHECK (length(spec) BETWEEN 1 AND 250),
    time_zone     text        NOT NULL DEFAULT 'UTC' CHECK (length(time_zone) BETWEEN 1 AND 100),
    -- identifier of each pushed task; NULL is the schedule's name. {time} in it is
    -- replaced by the fire time (RFC 3339, UTC).
    identifier    text        NULL CHECK (length(identifier) BETWEEN 1 AND 500),
    input         text        NULL,
    priority      smallint    NOT NULL DEFAULT 0,
    -- 0 APPEND, 1 REPLACE, 2 SUPERSEDE (default: a backlog never piles up), 3 DELETE
    insertion     smallint    NOT NULL DEFAULT 2 CHECK (insertion BETWEEN 0 AND 3),
    -- missed fire times pushed when the schedule is found late: 0 only the latest one,
    -- n > 0 up to the n latest
    catch_up      integer     NOT NULL DEFAULT 0 CHECK (catch_up BETWEEN 0 AND 10000),
    paused        boolean     NOT NULL DEFAULT false,
    next_fire     timestamptz NULL,
    -- the latest fire time pushed, when (by the firer's clock) and as which task
    last_fire     timestamptz NULL,
    last_fired_at timestamptz NULL,
    last_sequence bigint      NULL,
    -- fire times pushed since the schedule was created
    fires         bigint      NOT NULL DEFAULT 0,
    created       timestamptz NOT NULL DEFAULT now(),
    updated       timestamptz NOT NULL DEFAULT now()
);

-- The firers' question, "which schedules are due?", reads only the running ones.
CREATE INDEX task_schedule_due ON task_schedule (next_fire NULLS FIRST) WHERE NOT paused;

-- task_schedule_interval_problem says what is wrong with the interval of `@every
-- interval` (a Go duration such as 90s or 1h30m: whole seconds, at least one), or NULL
-- when nothing is.
CREATE FUNCTION task_schedule_interval_problem(p_interval text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_part    text[];
    v_seconds numeric := 0;
BEGIN
    IF p_interval ~ '^\s*-' THEN
        RETURN format('interval %s is negative', p_interval);
    END IF;
    IF p_interval !~ '^\+?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$' THEN
        RETURN format('interval %s is not a duration such as 90s or 1h30m', quote_literal(p_interval));
    END IF;
    FOR v_part IN SELECT regexp_matches(p_interval, '([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)', 'g') LOOP
        v_seconds := v_seconds + v_part[1]::numeric * CASE v_part[2]
            WHEN 'h' THEN 3600 WHEN 'm' THEN 60 WHEN 's' THEN 1 WHEN 'ms' THEN 0.001
            WHEN 'ns' THEN 0.000000001 ELSE 0.000001 END;
    END LOOP;
    IF v_seconds < 1 THEN
        RETURN format('interval %s is shorter than 1s', p_interval);
    END IF;
    IF v_seconds <> trunc(v_seconds) THEN
        RETURN format('interval %s is not a whole number of seconds', p_interval);
    END IF;
    RETURN NULL;
END $$;

-- task_schedule_spec_problem says what is wrong with a cron spec, by the rules of
-- github.com/robfig/cron/v3 as pgtask configures it (Repository.CreateSchedule), or NULL
-- when nothing is.
CREATE FUNCTION task_schedule_spec_problem(p_spec text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_spec   text := lower(btrim(coalesce(p_spec, '')));
    v_fields text[];
    v_kinds  text[] := ARRAY['second', 'minute', 'hour', 'day of month', 'month', 'day of week'];
    v_lo     integer[] := ARRAY[0, 0, 0, 1, 1, 0];
    v_hi     integer[] := ARRAY[59, 59, 23, 31, 12, 6];
    v_months text[] := ARRAY['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];
    v_days   text[] := ARRAY['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];
    v_first  integer;
    v_kind   integer;
    v_part   text;
    v_m      text[];
    v_value  text;
    v_bound  integer[];
    v_n      integer;
BEGIN
    IF v_spec = '' THEN
        RETURN 'spec is empty';
    END IF;
    IF v_spec ~ '^(cron_)?tz=' THEN
        RETURN format('spec %s names a time zone: give it as the time zone instead', quote_literal(p_spec));
    END IF;
    IF v_spec ~ '^@' THEN
        IF v_spec IN ('@yearly', '@annually', '@monthly', '@weekly', '@daily', '@midnight', '@hourly') THEN
            RETURN NULL;
        END IF;
        IF v_spec ~ '^@every\s' THEN
            RETURN task_schedule_interval_problem(btrim(substr(btrim(p_spec), 7)));
        END IF;
        RETURN format('spec %s: unknown descriptor', quote_literal(p_spec));
    END IF;
    v_fields := regexp_split_to_array(v_spec, '\s+');
    IF cardinality(v_fields) NOT IN (5, 6) THEN
        RETURN format('spec %s has %s fields, want 5 (minute hour day-of-month month day-of-week) or 6 (seconds first)',
                      quote_literal(p_spec), cardinality(v_fields));
    END IF;
    v_first := 7 - cardinality(v_fields);
    FOR i IN 1 .. cardinality(v_fields) LOOP
        v_kind := v_first + i - 1;
        FOREACH v_part IN ARRAY string_to_array(v_fields[i], ',') LOOP
            -- * or ?, or a value or a range, then an optional step
            v_m := regexp_match(v_part, '^(?:([*?])|([0-9a-z]+)(?:-([0-9a-z]+))?)(?:/([0-9]+))?$');
            IF v_m IS NULL THEN
                RETURN format('spec %s: %s field %s is not a value, a range or a step', quote_literal(p_spec), v_kinds[v_kind], quote_literal(v_part));
            END IF;
            v_bound := ARRAY[]::integer[];
            FOREACH v_value IN ARRAY ARRAY[v_m[2], v_m[3]] LOOP
                CONTINUE WHEN v_value IS NULL;
                IF v_value ~ '^[0-9]+$' THEN
                    v_n := CASE WHEN length(v_value) > 9 THEN 1000000000 ELSE v_value::integer END;
                ELSIF v_kind = 5 AND v_value = ANY (v_months) THEN
                    v_n := array_position(v_months, v_value);
                ELSIF v_kind = 6 AND v_value = ANY (v_days) THEN
                    v_n := array_position(v_days, v_value) - 1;
                ELSE
                    RETURN format('spec %s: %s field: %s is not a number%s', quote_literal(p_spec), v_kinds[v_kind], quote_literal(v_value),
                                  CASE v_kind WHEN 5 THEN ' or a month name' WHEN 6 THEN ' or a day name' ELSE '' END);
                END IF;
                IF v_n NOT BETWEEN v_lo[v_kind] AND v_hi[v_kind] THEN
                    RETURN format('spec %s: %s %s is out of range %s-%s', quote_literal(p_spec), v_kinds[v_kind], v_value, v_lo[v_kind], v_hi[v_kind]);
                END IF;
                v_bound := v_bound || v_n;
            END LOOP;
            IF cardinality(v_bound) = 2 AND v_bound[1] > v_bound[2] THEN
                RETURN format('spec %s: %s range %s starts after it ends', quote_literal(p_spec), v_kinds[v_kind], v_part);
            END IF;
            IF v_m[4] IS NOT NULL AND (length(v_m[4]) > 9 OR v_m[4]::integer = 0) THEN
                RETURN format('spec %s: %s step %s is not a positive number', quote_literal(p_spec), v_kinds[v_kind], v_m[4]);
            END IF;
        END LOOP;
    END LOOP;
    RETURN NULL;
END $$;

-- task_schedule declares a schedule from SQL (a migration, psql): the same checks as
-- Repository.CreateSchedule, raised before anything is written —
--   PT001 unknown topic, PT002 unknown insertion, PT016 a schedule of that name exists,
--   22023 (invalid_parameter_value) any other bad argument (spec, time zone, …).
-- Its first fire time is computed by the first processor that sees it (next_fire NULL).
-- Returns the name.
CREATE FUNCTION task_schedule(
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

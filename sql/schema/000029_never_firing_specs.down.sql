-- 000029 down: task_schedule_spec_problem and task_schedule_interval_problem as 000016
-- made them (a spec that never fires passes).

CREATE OR REPLACE FUNCTION task_schedule_spec_problem(p_spec text) RETURNS text
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

CREATE OR REPLACE FUNCTION task_schedule_interval_problem(p_interval text) RETURNS text
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

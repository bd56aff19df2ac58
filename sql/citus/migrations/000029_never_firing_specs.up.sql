-- 000029 on a distributed database: the plain migration as it is.
-- task_schedule_spec_problem and task_schedule_interval_problem are task_ functions,
-- distributed by pgtask citus enable, so Citus passes each CREATE OR REPLACE on to every
-- node; task_schedule calls them on the coordinator, where task_schedule lives.

CREATE OR REPLACE FUNCTION task_schedule_interval_problem(p_interval text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_part  text[];
    v_nanos numeric := 0;
BEGIN
    IF p_interval ~ '^\s*-' THEN
        RETURN format('interval %s is negative', p_interval);
    END IF;
    IF p_interval !~ '^\+?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$' THEN
        RETURN format('interval %s is not a duration such as 90s or 1h30m', quote_literal(p_interval));
    END IF;
    FOR v_part IN SELECT regexp_matches(p_interval, '([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)', 'g') LOOP
        v_nanos := v_nanos + trunc(v_part[1]::numeric * CASE v_part[2]
            WHEN 'h' THEN 3600000000000 WHEN 'm' THEN 60000000000 WHEN 's' THEN 1000000000 WHEN 'ms' THEN 1000000
            WHEN 'ns' THEN 1 ELSE 1000 END);
    END LOOP;
    IF v_nanos > 9223372036854775807 THEN
        RETURN format('interval %s is too long (at most 2562047h)', p_interval);
    END IF;
    IF v_nanos < 1000000000 THEN
        RETURN format('interval %s is shorter than 1s', p_interval);
    END IF;
    IF v_nanos % 1000000000 <> 0 THEN
        RETURN format('interval %s is not a whole number of seconds', p_interval);
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION task_schedule_spec_problem(p_spec text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    -- trimmed of ASCII white space, as parseSchedule trims it (btrim trims spaces only)
    v_trimmed text := regexp_replace(coalesce(p_spec, ''), '^[ \t\n\v\f\r]+|[ \t\n\v\f\r]+$', '', 'g');
    v_spec   text := lower(v_trimmed);
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
    v_step   integer;
    v_from   integer;
    v_to     integer;
    v_length integer[] := ARRAY[31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    v_day    integer := 32;     -- the smallest day of month the spec names
    v_longest integer := 0;     -- the longest of its months, in days (February: 29)
    v_any_day boolean := false; -- day of month * or ?, without a step
    v_any_dow boolean := false; -- day of week * or ?, without a step
    v_named  boolean[] := ARRAY[false, false, false, false, false, false]; -- a value in each field
BEGIN
    IF v_spec = '' THEN
        RETURN 'spec is empty';
    END IF;
    IF length(p_spec) > 250 THEN
        RETURN format('spec is %s characters long, at most 250 allowed', length(p_spec));
    END IF;
    IF p_spec ~ '[^\x01-\x7fµμ]' THEN
        RETURN format('spec %s: character %s is not allowed (a spec is written in ASCII)', quote_literal(p_spec),
                      substring(p_spec FROM '[^\x01-\x7fµμ]'));
    END IF;
    IF v_spec ~ '^(cron_)?tz=' THEN
        RETURN format('spec %s names a time zone: give it as the time zone instead', quote_literal(p_spec));
    END IF;
    IF v_spec ~ '^@' THEN
        IF v_spec IN ('@yearly', '@annually', '@monthly', '@weekly', '@daily', '@midnight', '@hourly') THEN
            RETURN NULL;
        END IF;
        IF v_spec ~ '^@every[ \t]' THEN
            RETURN task_schedule_interval_problem(regexp_replace(substr(v_trimmed, 7), '^[ \t\n\v\f\r]+', ''));
        END IF;
        RETURN format('spec %s: unknown descriptor', quote_literal(p_spec));
    END IF;
    v_fields := regexp_split_to_array(v_spec, '[ \t\n\v\f\r]+');
    IF cardinality(v_fields) NOT IN (5, 6) THEN
        RETURN format('spec %s has %s fields, want 5 (minute hour day-of-month month day-of-week) or 6 (seconds first)',
                      quote_literal(p_spec), cardinality(v_fields));
    END IF;
    v_first := 7 - cardinality(v_fields);
    v_named[1] := v_first = 2; -- without seconds, at second 0
    FOR i IN 1 .. cardinality(v_fields) LOOP
        v_kind := v_first + i - 1;
        FOREACH v_part IN ARRAY string_to_array(v_fields[i], ',') LOOP
            CONTINUE WHEN v_part = ''; -- the library passes over empty parts of a list
            -- * or ?, or a value or a range, then an optional step
            v_m := regexp_match(v_part, '^(?:([*?])|([0-9a-z]+)(?:-([0-9a-z]+))?)(?:/([0-9]+))?$');
            IF v_m IS NULL THEN
                RETURN format('spec %s: %s field %s is not a value, a range or a step', quote_literal(p_spec), v_kinds[v_kind], quote_literal(v_part));
            END IF;
            v_bound := ARRAY[]::integer[];
            FOREACH v_value IN ARRAY ARRAY[v_m[2], v_m[3]] LOOP
                CONTINUE WHEN v_value IS NULL;
                IF v_value ~ '^[0-9]+$' THEN
                    v_n := CASE WHEN length(ltrim(v_value, '0')) > 9 THEN 1000000000 ELSE v_value::integer END;
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
            IF v_m[4] IS NOT NULL AND (length(ltrim(v_m[4], '0')) > 9 OR ltrim(v_m[4], '0') = '') THEN
                RETURN format('spec %s: %s step %s is not a positive number', quote_literal(p_spec), v_kinds[v_kind], v_m[4]);
            END IF;
            -- the part's values, as the library reads them: * is the whole field, N/step
            -- is N to the field's end; * with a step above 1 no longer counts as *
            v_step := coalesce(v_m[4]::integer, 1);
            v_from := CASE WHEN v_m[1] IS NOT NULL THEN v_lo[v_kind] ELSE v_bound[1] END;
            v_to := CASE WHEN v_m[1] IS NOT NULL OR (v_m[4] IS NOT NULL AND v_m[3] IS NULL) THEN v_hi[v_kind]
                         ELSE v_bound[cardinality(v_bound)] END;
            v_named[v_kind] := true;
            IF v_kind = 4 THEN
                v_day := least(v_day, v_from);
                v_any_day := v_any_day OR (v_m[1] IS NOT NULL AND v_step = 1);
            ELSIF v_kind = 5 THEN
                v_longest := greatest(v_longest, (SELECT max(v_length[m]) FROM generate_series(v_from, v_to, v_step) m));
            ELSIF v_kind = 6 THEN
                v_any_dow := v_any_dow OR (v_m[1] IS NOT NULL AND v_step = 1);
            END IF;
        END LOOP;
    END LOOP;
    -- A field of empty parts (",") names nothing, and nothing matches it. The library
    -- matches a day by its day of month and its day of week together when either field
    -- is * (or ?), by either otherwise; its search gives up after five years (a February
    -- 29 is always within them). So a spec never fires when its day of month, with any
    -- day of the week, is a day none of its months has.
    FOR k IN 1 .. 6 LOOP
        CONTINUE WHEN v_named[k] OR k IN (4, 6);
        RETURN format('spec %s never fires: its %s field names no value', quote_literal(p_spec), v_kinds[k]);
    END LOOP;
    IF (v_any_day OR v_any_dow) AND NOT (v_any_day AND v_any_dow) THEN
        IF v_any_day AND NOT v_named[6] OR v_any_dow AND NOT v_named[4] THEN
            RETURN format('spec %s never fires: its %s field names no value', quote_literal(p_spec),
                          v_kinds[CASE WHEN v_any_day THEN 6 ELSE 4 END]);
        END IF;
        IF v_any_dow AND v_day > v_longest THEN
            RETURN format('spec %s never fires: none of its months has a day %s', quote_literal(p_spec), v_day);
        END IF;
    ELSIF NOT (v_any_day AND v_any_dow) AND NOT v_named[6] AND (NOT v_named[4] OR v_day > v_longest) THEN
        RETURN format('spec %s never fires: %s', quote_literal(p_spec),
                      CASE WHEN v_named[4] THEN format('none of its months has a day %s', v_day)
                           ELSE 'its day of month and day of week fields name no value' END);
    END IF;
    RETURN NULL;
END $$;

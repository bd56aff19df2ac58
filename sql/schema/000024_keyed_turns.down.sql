-- 000024 down: task_poll_keyed as 000023 made it, and the function it calls, as 000015
-- made it.

-- task_poll_condition says whether a READY task (its identifier and sequence) passes a
-- poll condition (0 NONE, 1 SINGULAR_BY_IDENTIFIER, 2 ..._SUSPEND_ON_FAILURE, 3
-- ..._SUSPEND_UNTIL_SUCCESS): the same tests as task_poll_candidates (migration 000009),
-- for the polls of a limited topic, which pick one task at a time. Older means a lower
-- sequence (FIFO) or a higher one (LIFO).
CREATE FUNCTION task_poll_condition(p_topic text, p_condition smallint, p_lifo boolean, p_identifier text, p_sequence bigint)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT p_condition = 0 OR (
        NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                    AND o.identifier = p_identifier
                    AND CASE WHEN p_lifo THEN o.sequence > p_sequence ELSE o.sequence < p_sequence END)
        AND NOT EXISTS (SELECT 1 FROM task o WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || p_identifier) AND o.state = 1
                        AND o.topic = p_topic AND o.identifier = p_identifier
                        AND CASE WHEN p_lifo THEN o.sequence > p_sequence ELSE o.sequence < p_sequence END)
        AND (p_condition < 2 OR NOT EXISTS (SELECT 1 FROM task o WHERE o.state = ANY ('{2,3}') AND hashtext(o.topic) = hashtext(p_topic)
                                            AND o.topic = p_topic AND o.identifier = p_identifier))
        AND (p_condition < 3 OR NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 4 AND hashtext(o.topic) = hashtext(p_topic)
                                            AND o.topic = p_topic AND o.identifier = p_identifier)))
$$;

CREATE OR REPLACE FUNCTION task_poll_keyed(p_topic text, p_lifo boolean, p_condition smallint, p_budget integer,
                                p_key_limit integer, INOUT p_last_key text, OUT p_sequences bigint[])
LANGUAGE plpgsql VOLATILE
SET enable_bitmapscan = off
AS $$
DECLARE
    v_counts   jsonb;      -- ACTIVE tasks by key, those taken added
    v_priority smallint;
    v_key      text;       -- the key whose turn it is; NULL: tasks without a key
    v_from     text;       -- keys after this one are next in the round
    v_seq      bigint;
    v_round    integer;    -- tasks taken in this round
    v_wrapped  boolean;
    v_keyless  boolean;    -- the tasks without a key may still give one in this priority
BEGIN
    p_sequences := '{}';
    IF p_key_limit IS NOT NULL THEN
        SELECT coalesce(jsonb_object_agg(a.k, a.n), '{}') INTO v_counts
        FROM (SELECT t.concurrency_key AS k, count(*) AS n FROM task t
              WHERE t.state = 0 AND hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic
                AND t.concurrency_key IS NOT NULL
              GROUP BY t.concurrency_key) a;
    END IF;
    -- the lowest priority with a due task
    SELECT t.priority INTO v_priority FROM task t
    WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
      AND (t.not_before IS NULL OR t.not_before <= now())
    ORDER BY t.priority, t.sequence
    LIMIT 1;
    WHILE v_priority IS NOT NULL AND cardinality(p_sequences) < p_budget LOOP
        v_from := p_last_key;
        v_wrapped := p_last_key IS NULL;
        v_round := 0;
        v_keyless := true;
        LOOP
            -- the next key of this priority after v_from; past the last, tasks without a
            -- key, then a new round from the first key
            -- two statements, not one with "v_from IS NULL OR": a plan kept across calls
            -- cannot start the index scan at v_from for that, and read the keys before it
            IF v_from IS NULL THEN
                SELECT t.concurrency_key INTO v_key FROM task t
                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                  AND t.concurrency_key IS NOT NULL AND t.priority = v_priority
                ORDER BY t.concurrency_key
                LIMIT 1;
            ELSE
                SELECT t.concurrency_key INTO v_key FROM task t
                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                  AND t.concurrency_key IS NOT NULL AND t.priority = v_priority
                  AND t.concurrency_key > v_from
                ORDER BY t.concurrency_key
                LIMIT 1;
            END IF;
            IF NOT FOUND THEN
                v_key := NULL;
            END IF;
            v_seq := NULL;
            IF v_key IS NULL THEN
                -- once none is found in this priority, none comes until the next poll:
                -- the tasks it reads stay READY meanwhile, the ones chosen excepted
                IF v_keyless THEN
                    SELECT s.sequence INTO v_seq
                    FROM (SELECT t.sequence, t.identifier, t.concurrency_key FROM task t
                          WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                            AND t.priority = v_priority AND (t.not_before IS NULL OR t.not_before <= now())
                          ORDER BY t.sequence
                          LIMIT 200) s
                    WHERE s.concurrency_key IS NULL AND s.sequence <> ALL (p_sequences)
                      AND (p_condition = 0 OR task_poll_condition(p_topic, p_condition, p_lifo, s.identifier, s.sequence))
                    ORDER BY CASE WHEN p_lifo THEN -s.sequence ELSE s.sequence END
                    LIMIT 1;
                    v_keyless := v_seq IS NOT NULL;
                END IF;
            ELSIF p_key_limit IS NULL OR v_key = '' OR coalesce((v_counts ->> v_key)::integer, 0) < p_key_limit THEN
                IF p_lifo THEN
                    SELECT t.sequence INTO v_seq FROM task t
                    WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                      AND t.concurrency_key = v_key AND t.priority = v_priority
                      AND (t.not_before IS NULL OR t.not_before <= now()) AND t.sequence <> ALL (p_sequences)
                      AND (p_condition = 0 OR task_poll_condition(p_topic, p_condition, p_lifo, t.identifier, t.sequence))
                    ORDER BY t.sequence DESC
                    LIMIT 1;
                ELSE
                    SELECT t.sequence INTO v_seq FROM task t
                    WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                      AND t.concurrency_key = v_key AND t.priority = v_priority
                      AND (t.not_before IS NULL OR t.not_before <= now()) AND t.sequence <> ALL (p_sequences)
                      AND (p_condition = 0 OR task_poll_condition(p_topic, p_condition, p_lifo, t.identifier, t.sequence))
                    ORDER BY t.sequence
                    LIMIT 1;
                END IF;
            END IF;
            IF v_seq IS NOT NULL THEN
                p_sequences := p_sequences || v_seq;
                p_last_key := v_key;
                v_round := v_round + 1;
                IF v_key IS NOT NULL AND p_key_limit IS NOT NULL THEN
                    v_counts := jsonb_set(v_counts, ARRAY[v_key], to_jsonb(coalesce((v_counts ->> v_key)::integer, 0) + 1));
                END IF;
                EXIT WHEN cardinality(p_sequences) >= p_budget;
            END IF;
            IF v_key IS NULL THEN
                -- the end of a round
                EXIT WHEN v_wrapped AND v_round = 0; -- a whole round gave nothing
                IF v_wrapped THEN
                    v_round := 0;
                END IF;
                v_wrapped := true;
                v_from := NULL;
            ELSE
                v_from := v_key;
            END IF;
        END LOOP;
        EXIT WHEN cardinality(p_sequences) >= p_budget;
        -- this priority gives no more: the next one with a due task, from its first key
        SELECT t.priority INTO v_priority FROM task t
        WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
          AND (t.not_before IS NULL OR t.not_before <= now()) AND t.priority > v_priority
        ORDER BY t.priority, t.sequence
        LIMIT 1;
        IF NOT FOUND THEN
            v_priority := NULL;
        END IF;
        p_last_key := NULL;
    END LOOP;
END
$$;

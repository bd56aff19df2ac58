-- 000043: under SINGULAR_BY_IDENTIFIER and the conditions built on it, a READY task is
-- held back while ANY task of its identifier is ACTIVE, not only an older one (a newer
-- one under LIFO). design.md §4.3's prose promises "at most one task per identifier in
-- flight", and the docs repeat it; its table's "older (FIFO) / newer (LIFO)" kept
-- that promise only while tasks are leased in their order. They are not always:
--   - LIFO: foo pushed and leased, foo pushed again: the new foo was leased while the
--     first ran (the ACTIVE one is older, and LIFO looked at newer ones only);
--   - FIFO: an older foo revived (reset, a junction's release) while a newer foo runs,
--     or two pushes of foo committed out of their sequences' order.
-- The READY tasks keep their direction (an older READY task goes first under FIFO, a
-- newer one under LIFO). The ACTIVE probe reads the same index entries as before
-- (task_open: state, topic, identifier), without the bound on the sequence.
-- task_poll_candidates (the plain poll) and task_poll_keyed (a fair or key-limited
-- topic's poll) are restated whole, with the settings migration 000027 gave them.

CREATE OR REPLACE FUNCTION task_poll_candidates(p_topic text, p_lifo boolean, p_condition smallint, p_size integer)
 RETURNS SETOF tid
 LANGUAGE plpgsql
 SET enable_sort TO 'off'
 SET enable_bitmapscan TO 'off'
 SET jit TO 'off'
AS $function$
DECLARE
    v_priority smallint;
    v_left     integer := p_size;
    v_got      integer;
BEGIN
    IF p_condition NOT BETWEEN 0 AND 3 THEN
        RAISE EXCEPTION 'unknown poll condition %', p_condition USING ERRCODE = '22023';
    END IF;
    IF NOT p_lifo AND p_condition = 0 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
            ORDER BY t.priority, t.sequence
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSIF NOT p_lifo AND p_condition = 1 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                              AND o.identifier = t.identifier)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || t.identifier) AND o.state = 1
                              AND o.topic = p_topic AND o.identifier = t.identifier AND o.sequence < t.sequence)
            ORDER BY t.priority, t.sequence
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSIF NOT p_lifo AND p_condition = 2 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                              AND o.identifier = t.identifier)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || t.identifier) AND o.state = 1
                              AND o.topic = p_topic AND o.identifier = t.identifier AND o.sequence < t.sequence)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = ANY ('{2,3}') AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                              AND o.identifier = t.identifier)
            ORDER BY t.priority, t.sequence
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    ELSIF NOT p_lifo AND p_condition = 3 THEN
        RETURN QUERY
            SELECT t.ctid FROM task t
            WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
              AND (t.not_before IS NULL OR t.not_before <= now())
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                              AND o.identifier = t.identifier)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || t.identifier) AND o.state = 1
                              AND o.topic = p_topic AND o.identifier = t.identifier AND o.sequence < t.sequence)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = ANY ('{2,3}') AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                              AND o.identifier = t.identifier)
              AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 4 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                              AND o.identifier = t.identifier)
            ORDER BY t.priority, t.sequence
            LIMIT p_size
            FOR UPDATE OF t SKIP LOCKED;
    END IF;
    IF NOT p_lifo OR p_size <= 0 THEN
        RETURN;
    END IF;

    -- LIFO: one priority level at a time, lowest first, each read backwards (newest first)
    -- on task_ready: an equality on priority lets one index serve both orders.
    SELECT min(t.priority) INTO v_priority FROM task t
    WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1;
    WHILE v_priority IS NOT NULL AND v_left > 0 LOOP
        IF p_condition = 0 THEN
            RETURN QUERY
                SELECT t.ctid FROM task t
                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1 AND t.priority = v_priority
                  AND (t.not_before IS NULL OR t.not_before <= now())
                ORDER BY t.sequence DESC
                LIMIT v_left
                FOR UPDATE OF t SKIP LOCKED;
        ELSIF p_condition = 1 THEN
            RETURN QUERY
                SELECT t.ctid FROM task t
                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1 AND t.priority = v_priority
                  AND (t.not_before IS NULL OR t.not_before <= now())
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                  AND o.identifier = t.identifier)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || t.identifier) AND o.state = 1
                                  AND o.topic = p_topic AND o.identifier = t.identifier AND o.sequence > t.sequence)
                ORDER BY t.sequence DESC
                LIMIT v_left
                FOR UPDATE OF t SKIP LOCKED;
        ELSIF p_condition = 2 THEN
            RETURN QUERY
                SELECT t.ctid FROM task t
                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1 AND t.priority = v_priority
                  AND (t.not_before IS NULL OR t.not_before <= now())
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                  AND o.identifier = t.identifier)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || t.identifier) AND o.state = 1
                                  AND o.topic = p_topic AND o.identifier = t.identifier AND o.sequence > t.sequence)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = ANY ('{2,3}') AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                  AND o.identifier = t.identifier)
                ORDER BY t.sequence DESC
                LIMIT v_left
                FOR UPDATE OF t SKIP LOCKED;
        ELSIF p_condition = 3 THEN
            RETURN QUERY
                SELECT t.ctid FROM task t
                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1 AND t.priority = v_priority
                  AND (t.not_before IS NULL OR t.not_before <= now())
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                  AND o.identifier = t.identifier)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || t.identifier) AND o.state = 1
                                  AND o.topic = p_topic AND o.identifier = t.identifier AND o.sequence > t.sequence)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = ANY ('{2,3}') AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                  AND o.identifier = t.identifier)
                  AND NOT EXISTS (SELECT 1 FROM task o WHERE o.state = 4 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                  AND o.identifier = t.identifier)
                ORDER BY t.sequence DESC
                LIMIT v_left
                FOR UPDATE OF t SKIP LOCKED;
        END IF;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
        SELECT min(t.priority) INTO v_priority FROM task t
        WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1 AND t.priority > v_priority;
    END LOOP;
END
$function$;

CREATE OR REPLACE FUNCTION task_poll_keyed(p_topic text, p_lifo boolean, p_condition smallint, p_budget integer, p_key_limit integer, INOUT p_last_key text, OUT p_sequences bigint[])
 RETURNS record
 LANGUAGE plpgsql
 SET enable_bitmapscan TO 'off'
 SET jit TO 'off'
AS $function$
DECLARE
    v_counts     jsonb;    -- ACTIVE tasks by key, those taken added
    v_priority   smallint;
    v_key        text;     -- the key whose turn it is; NULL: tasks without a key
    v_from       text;     -- keys after this one are next in the round
    v_seq        bigint;
    v_identifier text;
    v_held       bigint;   -- the last task without a key this turn held back (the condition)
    v_passes     boolean;
    v_first      bigint;   -- the first READY task of the key found: sequence,
    v_first_id   text;     -- identifier
    v_first_due  boolean;  -- and whether it is due
    v_candidate  bigint;   -- the key's first task, when it is this turn's first candidate
    v_bound      bigint;   -- where the key's turn stands (after it; before it, LIFO)
    v_round      integer;  -- tasks taken in this round
    v_wrapped    boolean;
    v_keyless    boolean;  -- the tasks without a key may still give one in this priority
    v_start      text;     -- p_last_key as this priority began
    v_again      boolean;  -- the search for keys has started over from the first key
    v_turns      text[];   -- the turns met in this priority, in round order; NULL: no key
    v_after      bigint[]; -- by turn: where the key's turns stand, as v_bound; NULL: none left
    v_turn       integer;  -- v_key's turn in v_turns
    v_known      boolean;  -- v_turns holds the whole round: go round it, no search
    v_rounds     integer;  -- rounds taken at once
    v_taken      bigint[]; -- those tasks, in the order of their turns,
    v_by         integer[]; -- and their turns
    v_i          integer;
    v_gave       integer[]; -- by turn: the tasks the rounds taken at once took
    v_ahead      text[];   -- the keys after v_from, as far as the last search went
    v_ahead_firsts bigint[]; -- their first READY tasks: sequence,
    v_ahead_ids  text[];   -- identifier
    v_ahead_dues boolean[]; -- and whether it is due
    v_ahead_end  boolean;  -- the last search reached the last key
    v_next       integer;  -- the next of v_ahead
    v_room       integer;
BEGIN
    p_sequences := '{}';
    IF p_key_limit IS NOT NULL THEN
        SELECT coalesce(jsonb_object_agg(a.k, a.n), '{}') INTO v_counts
        FROM (SELECT t.concurrency_key AS k, count(*) AS n FROM task t
              WHERE t.state = 0 AND hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic
                AND t.concurrency_key IS NOT NULL
              GROUP BY t.concurrency_key) a;
    END IF;
    SELECT t.priority INTO v_priority FROM task t
    WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
      AND (t.not_before IS NULL OR t.not_before <= now())
    ORDER BY t.priority, t.sequence
    LIMIT 1;
    WHILE v_priority IS NOT NULL AND cardinality(p_sequences) < p_budget LOOP
        v_from := p_last_key;
        v_start := p_last_key;
        v_wrapped := p_last_key IS NULL;
        v_round := 0;
        v_keyless := true;
        v_again := false;
        v_known := false;
        v_turns := '{}';
        v_after := '{}';
        v_ahead := '{}';
        v_next := 1;
        v_ahead_end := false;
        LOOP
            IF v_known AND p_condition = 0 AND NOT v_keyless THEN
                -- going round the keys it knows, no condition to check, no task without a
                -- key left: the next rounds in one statement, each key's next tasks from
                -- where it stands (as many as rounds remain and its limit allows), taken
                -- in turn from the turn after v_turn; what it picks is what the turns
                -- one by one pick
                v_rounds := ceil((p_budget - cardinality(p_sequences))::numeric
                                 / greatest(1, cardinality(array_remove(v_after, NULL))))::integer;
                IF p_lifo THEN
                    SELECT array_agg(c.sequence ORDER BY c.n, k.pos), array_agg(k.turn ORDER BY c.n, k.pos)
                    INTO v_taken, v_by
                    FROM (SELECT u.key, u.after, u.turn::integer, (u.turn + cardinality(v_turns) - v_turn - 1) % cardinality(v_turns) AS pos,
                                 CASE WHEN p_key_limit IS NULL OR u.key = '' THEN v_rounds
                                      ELSE least(v_rounds, p_key_limit - coalesce((v_counts ->> u.key)::integer, 0)) END AS room
                          FROM unnest(v_turns, v_after) WITH ORDINALITY u(key, after, turn)
                          WHERE u.key IS NOT NULL AND u.after IS NOT NULL) k
                    CROSS JOIN LATERAL (
                        SELECT t.sequence, row_number() OVER (ORDER BY t.sequence DESC) AS n FROM task t
                        WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                          AND t.concurrency_key = k.key AND t.priority = v_priority AND t.sequence < k.after
                          AND (t.not_before IS NULL OR t.not_before <= now())
                        ORDER BY t.sequence DESC
                        LIMIT greatest(k.room, 0)) c;
                ELSE
                    SELECT array_agg(c.sequence ORDER BY c.n, k.pos), array_agg(k.turn ORDER BY c.n, k.pos)
                    INTO v_taken, v_by
                    FROM (SELECT u.key, u.after, u.turn::integer, (u.turn + cardinality(v_turns) - v_turn - 1) % cardinality(v_turns) AS pos,
                                 CASE WHEN p_key_limit IS NULL OR u.key = '' THEN v_rounds
                                      ELSE least(v_rounds, p_key_limit - coalesce((v_counts ->> u.key)::integer, 0)) END AS room
                          FROM unnest(v_turns, v_after) WITH ORDINALITY u(key, after, turn)
                          WHERE u.key IS NOT NULL AND u.after IS NOT NULL) k
                    CROSS JOIN LATERAL (
                        SELECT t.sequence, row_number() OVER (ORDER BY t.sequence) AS n FROM task t
                        WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                          AND t.concurrency_key = k.key AND t.priority = v_priority AND t.sequence > k.after
                          AND (t.not_before IS NULL OR t.not_before <= now())
                        ORDER BY t.sequence
                        LIMIT greatest(k.room, 0)) c;
                END IF;
                EXIT WHEN v_taken IS NULL; -- the keys give no more in this priority
                v_taken := v_taken[1:p_budget - cardinality(p_sequences)];
                v_by := v_by[1:cardinality(v_taken)];
                p_sequences := p_sequences || v_taken;
                -- where each key stands: the last of its tasks taken (each key's come in
                -- its order)
                v_gave := array_fill(0, ARRAY[cardinality(v_turns)]);
                FOR v_i IN 1 .. cardinality(v_taken) LOOP
                    v_after[v_by[v_i]] := v_taken[v_i];
                    v_gave[v_by[v_i]] := v_gave[v_by[v_i]] + 1;
                END LOOP;
                IF cardinality(p_sequences) < p_budget THEN
                    -- every round was taken whole: a key that gave fewer than v_rounds
                    -- has no more, or has reached its limit, for the rest of the poll
                    FOR v_i IN 1 .. cardinality(v_turns) LOOP
                        IF v_gave[v_i] < v_rounds THEN
                            v_after[v_i] := NULL;
                        END IF;
                    END LOOP;
                END IF;
                IF p_key_limit IS NOT NULL THEN
                    v_counts := v_counts || coalesce((SELECT jsonb_object_agg(v_turns[x.b], coalesce((v_counts ->> v_turns[x.b])::integer, 0) + x.n)
                                                      FROM (SELECT b, count(*) AS n FROM unnest(v_by) b GROUP BY b) x), '{}');
                END IF;
                v_turn := v_by[cardinality(v_by)];
                p_last_key := v_turns[v_turn];
                EXIT WHEN cardinality(p_sequences) >= p_budget;
                CONTINUE;
            END IF;
            IF v_known THEN
                v_turn := v_turn % cardinality(v_turns) + 1;
                v_key := v_turns[v_turn];
            ELSE
                -- the next key of this priority after v_from, with its first task; past
                -- the last, none (the turn of the tasks without a key). The keys ahead are
                -- searched for in batches (as many as the budget has room for), each by
                -- one statement that steps from key to key through the index.
                IF v_next > cardinality(v_ahead) AND NOT v_ahead_end THEN
                    v_room := greatest(1, p_budget - cardinality(p_sequences));
                    -- two statements, not one with "v_from IS NULL OR": a plan kept across
                    -- calls cannot start the index scan at v_from for that
                    IF v_from IS NULL THEN
                        WITH RECURSIVE k (key, sequence, identifier, due) AS (
                            (SELECT t.concurrency_key, t.sequence, t.identifier, (t.not_before IS NULL OR t.not_before <= now())
                             FROM task t
                             WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                               AND t.concurrency_key IS NOT NULL AND t.priority = v_priority
                             ORDER BY t.concurrency_key, t.sequence
                             LIMIT 1)
                            UNION ALL
                            SELECT n.* FROM k CROSS JOIN LATERAL (
                                SELECT t.concurrency_key, t.sequence, t.identifier, (t.not_before IS NULL OR t.not_before <= now())
                                FROM task t
                                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                                  AND t.concurrency_key IS NOT NULL AND t.priority = v_priority AND t.concurrency_key > k.key
                                ORDER BY t.concurrency_key, t.sequence
                                LIMIT 1) n
                        )
                        SELECT coalesce(array_agg(a.key ORDER BY a.key), '{}'), array_agg(a.sequence ORDER BY a.key),
                               array_agg(a.identifier ORDER BY a.key), array_agg(a.due ORDER BY a.key)
                        INTO v_ahead, v_ahead_firsts, v_ahead_ids, v_ahead_dues
                        FROM (SELECT * FROM k LIMIT v_room) a;
                    ELSE
                        WITH RECURSIVE k (key, sequence, identifier, due) AS (
                            (SELECT t.concurrency_key, t.sequence, t.identifier, (t.not_before IS NULL OR t.not_before <= now())
                             FROM task t
                             WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                               AND t.concurrency_key IS NOT NULL AND t.priority = v_priority
                               AND t.concurrency_key > v_from
                             ORDER BY t.concurrency_key, t.sequence
                             LIMIT 1)
                            UNION ALL
                            SELECT n.* FROM k CROSS JOIN LATERAL (
                                SELECT t.concurrency_key, t.sequence, t.identifier, (t.not_before IS NULL OR t.not_before <= now())
                                FROM task t
                                WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                                  AND t.concurrency_key IS NOT NULL AND t.priority = v_priority AND t.concurrency_key > k.key
                                ORDER BY t.concurrency_key, t.sequence
                                LIMIT 1) n
                        )
                        SELECT coalesce(array_agg(a.key ORDER BY a.key), '{}'), array_agg(a.sequence ORDER BY a.key),
                               array_agg(a.identifier ORDER BY a.key), array_agg(a.due ORDER BY a.key)
                        INTO v_ahead, v_ahead_firsts, v_ahead_ids, v_ahead_dues
                        FROM (SELECT * FROM k LIMIT v_room) a;
                    END IF;
                    v_ahead_end := cardinality(v_ahead) < v_room;
                    v_next := 1;
                END IF;
                IF v_next <= cardinality(v_ahead) THEN
                    v_key := v_ahead[v_next];
                    v_first := v_ahead_firsts[v_next];
                    v_first_id := v_ahead_ids[v_next];
                    v_first_due := v_ahead_dues[v_next];
                    v_next := v_next + 1;
                ELSE
                    -- past the last key: the next search starts over
                    v_key := NULL;
                    v_first := NULL;
                    v_first_due := NULL;
                    v_ahead := '{}';
                    v_next := 1;
                    v_ahead_end := false;
                END IF;
                IF v_again AND (v_start IS NULL OR v_key IS NULL OR v_key > v_start) THEN
                    v_known := true;
                    v_turn := coalesce(array_position(v_turns, v_key), 1);
                    v_key := v_turns[v_turn];
                ELSE
                    v_turns := v_turns || v_key;
                    v_after := v_after || CASE WHEN v_key IS NULL THEN NULL WHEN p_lifo THEN 9223372036854775807 ELSE v_first - 1 END;
                    v_turn := cardinality(v_turns);
                END IF;
            END IF;
            v_held := NULL;
            v_bound := v_after[v_turn];
            -- a key met now, FIFO: its first task, which the search read, is the first
            -- candidate when it is due
            v_candidate := CASE WHEN NOT v_known AND NOT p_lifo AND v_first_due THEN v_first END;
            LOOP
                v_seq := NULL;
                IF v_key IS NULL THEN
                    -- once none is found in this priority, none comes until the next
                    -- poll: the tasks it reads stay READY meanwhile, those chosen excepted
                    IF v_keyless THEN
                        SELECT s.sequence, s.identifier INTO v_seq, v_identifier
                        FROM (SELECT t.sequence, t.identifier, t.concurrency_key FROM task t
                              WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                                AND t.priority = v_priority AND (t.not_before IS NULL OR t.not_before <= now())
                              ORDER BY t.sequence
                              LIMIT 200) s
                        WHERE s.concurrency_key IS NULL AND s.sequence <> ALL (p_sequences)
                          AND (v_held IS NULL OR CASE WHEN p_lifo THEN s.sequence < v_held ELSE s.sequence > v_held END)
                        ORDER BY CASE WHEN p_lifo THEN -s.sequence ELSE s.sequence END
                        LIMIT 1;
                    END IF;
                ELSIF v_bound IS NOT NULL
                      AND (p_key_limit IS NULL OR v_key = '' OR coalesce((v_counts ->> v_key)::integer, 0) < p_key_limit) THEN
                    -- from where the key's last turn stood: the tasks before are chosen,
                    -- not due or held back by the condition, and stay so in this poll
                    IF v_candidate IS NOT NULL AND v_candidate <> ALL (p_sequences) THEN
                        v_seq := v_candidate;
                        v_identifier := v_first_id;
                    ELSIF p_lifo THEN
                        SELECT t.sequence, t.identifier INTO v_seq, v_identifier FROM task t
                        WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                          AND t.concurrency_key = v_key AND t.priority = v_priority AND t.sequence < v_bound
                          AND (t.not_before IS NULL OR t.not_before <= now()) AND t.sequence <> ALL (p_sequences)
                        ORDER BY t.sequence DESC
                        LIMIT 1;
                    ELSE
                        SELECT t.sequence, t.identifier INTO v_seq, v_identifier FROM task t
                        WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
                          AND t.concurrency_key = v_key AND t.priority = v_priority AND t.sequence > v_bound
                          AND (t.not_before IS NULL OR t.not_before <= now()) AND t.sequence <> ALL (p_sequences)
                        ORDER BY t.sequence
                        LIMIT 1;
                    END IF;
                    v_bound := v_seq;
                    v_candidate := NULL;
                END IF;
                EXIT WHEN v_seq IS NULL OR p_condition = 0;
                SELECT NOT EXISTS (SELECT 1 FROM task o
                                   WHERE o.state = 0 AND hashtext(o.topic) = hashtext(p_topic) AND o.topic = p_topic
                                     AND o.identifier = v_identifier)
                       AND NOT EXISTS (SELECT 1 FROM task o
                                       WHERE (o.topic || E'\n' || o.identifier) = (p_topic || E'\n' || v_identifier)
                                         AND o.state = 1 AND o.topic = p_topic AND o.identifier = v_identifier
                                         AND CASE WHEN p_lifo THEN o.sequence > v_seq ELSE o.sequence < v_seq END)
                       AND (p_condition < 2 OR NOT EXISTS (SELECT 1 FROM task o
                                                           WHERE o.state = ANY ('{2,3}') AND hashtext(o.topic) = hashtext(p_topic)
                                                             AND o.topic = p_topic AND o.identifier = v_identifier))
                       AND (p_condition < 3 OR NOT EXISTS (SELECT 1 FROM task o
                                                           WHERE o.state = 4 AND hashtext(o.topic) = hashtext(p_topic)
                                                             AND o.topic = p_topic AND o.identifier = v_identifier))
                INTO v_passes;
                EXIT WHEN v_passes;
                v_held := v_seq;
            END LOOP;
            IF v_key IS NULL THEN
                IF v_seq IS NULL THEN
                    v_keyless := false;
                END IF;
            ELSE
                -- NULL: the key gives no more in this poll (its count only grows)
                v_after[v_turn] := v_seq;
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
                EXIT WHEN v_wrapped AND v_round = 0;
                IF v_wrapped THEN
                    v_round := 0;
                END IF;
                v_wrapped := true;
                v_from := NULL;
                v_again := true;
            ELSE
                v_from := v_key;
            END IF;
        END LOOP;
        EXIT WHEN cardinality(p_sequences) >= p_budget;
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
$function$;

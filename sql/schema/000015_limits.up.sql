-- 000015: limits that hold across every process (issue 20), enforced by the database.
--
-- A topic may limit how many of its tasks are ACTIVE at once (concurrency), how many of
-- one concurrency key are (key_concurrency: a task carries an optional key given at
-- push, a tenant or an account), how many tasks start per period (rate, rate_period_ms,
-- with a burst of rate_burst), and may take tasks round-robin across keys (fair). NULL
-- (false) is unlimited, and a poll of a topic without limits runs as before, after one
-- read of its row of task_topic.
--
-- A poll of a limited topic first takes a transaction-scoped advisory lock on the topic
-- (pg_advisory_xact_lock, class 1885828451), so that the polls of every process are one
-- at a time for that topic: what a poll counts (ACTIVE tasks, tokens) stays true until it
-- commits what it leased. Leases of a dead owner count until they expire.
--
-- task_topic_limit is a table of its own because a rate-limited or fair poll writes it
-- at every poll (the tokens left and when they were counted, the last key served):
-- task_topic is read by every push, poll and completion, and a row written that often
-- is kept apart from it. A row exists only for a topic that was polled with a rate limit
-- or fairly; it goes with its topic.
--
-- Building the two indexes reads each task table once (writes wait meanwhile, reads go
-- on): they hold entries only for tasks with a concurrency key.
ALTER TABLE task ADD COLUMN concurrency_key text NULL;

-- ACTIVE tasks per key: what a per-key limit counts.
CREATE INDEX task_active_key ON task (hashtext(topic), concurrency_key) WHERE state = 0 AND concurrency_key IS NOT NULL;
-- READY tasks by priority and key: what a fair poll walks, one key after the other.
CREATE INDEX task_ready_key ON task (hashtext(topic), priority, concurrency_key, sequence)
    WHERE state = 1 AND concurrency_key IS NOT NULL;

ALTER TABLE task_topic
    ADD COLUMN concurrency     integer NULL CHECK (concurrency >= 1),
    ADD COLUMN key_concurrency integer NULL CHECK (key_concurrency >= 1),
    ADD COLUMN rate            integer NULL CHECK (rate >= 1),
    ADD COLUMN rate_period_ms  bigint  NULL CHECK (rate_period_ms >= 1),
    ADD COLUMN rate_burst      integer NULL CHECK (rate_burst >= 1),
    ADD COLUMN fair            boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT task_topic_rate_complete
        CHECK ((rate IS NULL) = (rate_period_ms IS NULL) AND (rate IS NULL) = (rate_burst IS NULL));

CREATE TABLE task_topic_limit (
    topic    text             PRIMARY KEY REFERENCES task_topic (topic) ON DELETE CASCADE,
    -- the rate limit's token bucket: tokens left when last counted, and when
    tokens   double precision NULL,
    counted  timestamptz      NULL,
    -- the concurrency key a fair poll served last ('' for tasks without a key)
    last_key text             NULL
);

-- task_keys_ready counts the concurrency keys with READY tasks in a topic, up to p_max,
-- one index descent per key (and priority) on task_ready_key: what pgtask topic show,
-- the REST topic and the metrics report as the keys waiting.
CREATE FUNCTION task_keys_ready(p_topic text, p_max integer)
RETURNS bigint
LANGUAGE sql STABLE
AS $$
    WITH RECURSIVE k AS (
        (SELECT t.priority, t.concurrency_key FROM task t
         WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
           AND t.concurrency_key IS NOT NULL
         ORDER BY t.priority, t.concurrency_key LIMIT 1)
        UNION ALL
        SELECT n.priority, n.concurrency_key FROM k CROSS JOIN LATERAL (
            SELECT t.priority, t.concurrency_key FROM task t
            WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
              AND t.concurrency_key IS NOT NULL AND (t.priority, t.concurrency_key) > (k.priority, k.concurrency_key)
            ORDER BY t.priority, t.concurrency_key LIMIT 1) n
    )
    SELECT count(DISTINCT k.concurrency_key) FROM (SELECT * FROM k LIMIT p_max) k
$$;

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

-- task_poll_keyed picks up to p_budget READY tasks of a topic polled key by key: a topic
-- with a per-key limit (p_key_limit) or fair scheduling. Within the lowest priority that
-- has due work, it takes one task per concurrency key in turn, in key order, starting
-- after p_last_key (the key it served last, kept in task_topic_limit), and then another
-- round, so that a key with a million tasks waiting and a key with ten take turns; a
-- key with p_key_limit tasks ACTIVE (counting those taken) is passed over. Tasks pushed
-- without a key to a topic polled by key have the key '' (no per-key limit), which comes
-- first in a round; those pushed before the topic was polled by key have none (NULL) and
-- take their turn at the end of each round, found among the first 200 due tasks of the
-- priority. Within a key, FIFO or LIFO by sequence, the poll condition honoured (the
-- function that checks it is called only under a condition: it is planned at each call,
-- a few milliseconds, which a poll without one must not pay per task). When a
-- priority has no task left to give, the next one is served. It returns the tasks'
-- sequences in the order taken and the key served last; the caller locks them. Each
-- task costs two or three index descents: a fair topic's poll of 100 tasks reads a few
-- hundred index entries, whatever the backlog of each key.
CREATE FUNCTION task_poll_keyed(p_topic text, p_lifo boolean, p_condition smallint, p_budget integer,
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
        LOOP
            -- the next key of this priority after v_from; past the last, tasks without a
            -- key, then a new round from the first key
            SELECT t.concurrency_key INTO v_key FROM task t
            WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
              AND t.concurrency_key IS NOT NULL AND t.priority = v_priority
              AND (v_from IS NULL OR t.concurrency_key > v_from)
            ORDER BY t.concurrency_key
            LIMIT 1;
            IF NOT FOUND THEN
                v_key := NULL;
            END IF;
            v_seq := NULL;
            IF v_key IS NULL THEN
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

-- task_poll_limited picks the tasks a poll of a limited topic leases, and returns them
-- locked: first, under a transaction-scoped advisory lock on the topic, so that polls
-- of the topic in every process take their turn, how many it may lease: p_size, at most
-- the topic's concurrency less its ACTIVE tasks, at most the whole tokens of its rate
-- limit's bucket (which refills at p_rate per p_period_ms up to p_burst, by the
-- database's clock); then which: by key (task_poll_keyed) when the topic has a per-key
-- limit or is fair, otherwise in poll order as any poll does. The tokens spent and the
-- key served last are written to task_topic_limit.
CREATE FUNCTION task_poll_limited(p_topic text, p_lifo boolean, p_condition smallint, p_size integer,
                                  p_concurrency integer, p_key_limit integer, p_rate integer, p_period_ms bigint,
                                  p_burst integer, p_fair boolean)
RETURNS SETOF tid
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_budget  integer := p_size;
    v_active  integer;
    v_tokens  double precision;
    v_counted timestamptz;
    v_now     timestamptz;
    v_last    text;
    v_seqs    bigint[];
    v_chosen  tid[] := '{}';
BEGIN
    PERFORM pg_advisory_xact_lock(1885828451, hashtext(p_topic));
    IF p_concurrency IS NOT NULL THEN
        SELECT count(*) INTO v_active
        FROM (SELECT 1 FROM task t WHERE t.state = 0 AND hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic
              LIMIT p_concurrency) a;
        v_budget := least(v_budget, p_concurrency - v_active);
    END IF;
    IF p_rate IS NOT NULL OR p_fair OR p_key_limit IS NOT NULL THEN
        SELECT l.tokens, l.counted, l.last_key INTO v_tokens, v_counted, v_last
        FROM task_topic_limit l WHERE l.topic = p_topic;
    END IF;
    IF p_rate IS NOT NULL THEN
        v_now := clock_timestamp();
        IF v_tokens IS NULL OR v_counted IS NULL THEN
            v_tokens := p_burst; -- a bucket never used is full
        ELSE
            v_tokens := least(p_burst::double precision,
                              v_tokens + greatest(extract(epoch FROM v_now - v_counted), 0) * 1000 * p_rate / p_period_ms);
        END IF;
        v_counted := v_now;
        v_budget := least(v_budget, floor(v_tokens)::integer);
    END IF;
    IF v_budget > 0 THEN
        IF p_fair OR p_key_limit IS NOT NULL THEN
            SELECT k.p_last_key, k.p_sequences INTO v_last, v_seqs
            FROM task_poll_keyed(p_topic, p_lifo, p_condition, v_budget, p_key_limit, v_last) k;
            -- under the advisory lock no other poll takes them; a cancel or a REPLACE
            -- push may have changed one since
            v_chosen := ARRAY(SELECT t.ctid FROM task t
                              WHERE t.topic = p_topic AND t.sequence = ANY (v_seqs) AND t.state = 1
                              FOR UPDATE OF t SKIP LOCKED);
        ELSE
            v_chosen := ARRAY(SELECT c FROM task_poll_candidates(p_topic, p_lifo, p_condition, v_budget) c);
        END IF;
    END IF;
    IF p_rate IS NOT NULL OR p_fair OR p_key_limit IS NOT NULL THEN
        INSERT INTO task_topic_limit AS l (topic, tokens, counted, last_key)
        VALUES (p_topic, v_tokens - cardinality(v_chosen), v_counted, v_last)
        ON CONFLICT (topic) DO UPDATE SET tokens = EXCLUDED.tokens, counted = EXCLUDED.counted, last_key = EXCLUDED.last_key;
    END IF;
    RETURN QUERY SELECT unnest(v_chosen);
END
$$;

-- task_poll_candidates of 000012, which every poll calls, with the limited topics sent
-- to task_poll_limited first: one read of the topic's row says which.
CREATE OR REPLACE FUNCTION task_poll_candidates(p_topic text, p_lifo boolean, p_condition smallint, p_size integer,
                                                p_from_priority smallint, p_from_sequence bigint)
RETURNS SETOF tid
LANGUAGE plpgsql VOLATILE
SET enable_sort = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_concurrency integer;
    v_key_limit   integer;
    v_rate        integer;
    v_period_ms   bigint;
    v_burst       integer;
    v_fair        boolean;
BEGIN
    SELECT tt.concurrency, tt.key_concurrency, tt.rate, tt.rate_period_ms, tt.rate_burst, tt.fair
    INTO v_concurrency, v_key_limit, v_rate, v_period_ms, v_burst, v_fair
    FROM task_topic tt WHERE tt.topic = p_topic;
    IF v_concurrency IS NOT NULL OR v_key_limit IS NOT NULL OR v_rate IS NOT NULL OR v_fair THEN
        RETURN QUERY SELECT c FROM task_poll_limited(p_topic, p_lifo, p_condition, p_size, v_concurrency, v_key_limit,
                                                     v_rate, v_period_ms, v_burst, v_fair) c;
        RETURN;
    END IF;
    IF p_from_sequence IS NULL OR p_lifo OR p_condition <> 0 THEN
        RETURN QUERY SELECT c FROM task_poll_candidates(p_topic, p_lifo, p_condition, p_size) c;
        RETURN;
    END IF;
    -- the row comparison positions the scan of task_ready (hashtext(topic), priority,
    -- sequence) at the position itself
    RETURN QUERY
        SELECT t.ctid FROM task t
        WHERE hashtext(t.topic) = hashtext(p_topic) AND t.topic = p_topic AND t.state = 1
          AND (t.priority, t.sequence) >= (p_from_priority, p_from_sequence)
          AND (t.not_before IS NULL OR t.not_before <= now())
        ORDER BY t.priority, t.sequence
        LIMIT p_size
        FOR UPDATE OF t SKIP LOCKED;
END
$$;

-- The SQL push takes a concurrency key (the same for every task of a call; '' is none),
-- as the last argument so that calls by position go on working. A new argument is a new
-- signature: the functions of 000013 (task_push_batch) and 000002 (task_push) are
-- replaced, not overloaded, so that a call naming none of the new arguments is not
-- ambiguous.
DROP FUNCTION task_push(text, text, text, text, interval, integer, text, boolean);
DROP FUNCTION task_push_batch(text, text[], text[], text, interval, integer, text, boolean);

CREATE FUNCTION task_push_batch(
    topic       text,
    identifiers text[],
    inputs      text[]   DEFAULT NULL,
    insertion   text     DEFAULT 'append',
    delay       interval DEFAULT NULL,
    priority    integer  DEFAULT 0,
    reference   text     DEFAULT NULL,
    suspended   boolean  DEFAULT false,
    concurrency_key text DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
-- Parameters share their names with task's columns (that is what makes named-argument calls
-- read well): inside SQL, bare names are columns and parameters are qualified with the
-- function name.
#variable_conflict use_column
DECLARE
    -- 0 APPEND, 1 REPLACE, 2 SUPERSEDE, 3 DELETE, as in sql/queries/task_push.sql
    v_mode       smallint;
    v_count      integer := coalesce(cardinality(task_push_batch.identifiers), 0);
    v_not_before timestamptz;
    v_cap        bigint;
    v_keyed      boolean;
    v_live       bigint;
    v_bad        record;
BEGIN
    v_mode := array_position(ARRAY['APPEND', 'REPLACE', 'SUPERSEDE', 'DELETE'],
                             upper(task_push_batch.insertion)) - 1;
    IF v_mode IS NULL THEN
        RAISE EXCEPTION 'unknown insertion %', quote_nullable(task_push_batch.insertion)
            USING ERRCODE = 'PT002', HINT = 'Use append, replace, supersede or delete (any case).';
    END IF;
    IF task_push_batch.delay < interval '0' THEN
        RAISE EXCEPTION 'delay % is negative', quote_literal(task_push_batch.delay)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_push_batch.priority IS NULL OR task_push_batch.priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'priority % is out of range -32768..32767', coalesce(task_push_batch.priority::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF length(task_push_batch.reference) > 500 THEN
        RAISE EXCEPTION 'reference % is % characters long, at most 500 allowed',
            quote_literal(left(task_push_batch.reference, 40) || '…'), length(task_push_batch.reference)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF length(task_push_batch.concurrency_key) > 250 THEN
        RAISE EXCEPTION 'concurrency key % is % characters long, at most 250 allowed',
            quote_literal(left(task_push_batch.concurrency_key, 40) || '…'), length(task_push_batch.concurrency_key)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_push_batch.suspended IS NULL THEN
        RAISE EXCEPTION 'suspended is NULL, want true or false' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF array_ndims(task_push_batch.identifiers) > 1 OR array_ndims(task_push_batch.inputs) > 1 THEN
        RAISE EXCEPTION 'identifiers and inputs must be one-dimensional arrays'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_push_batch.inputs IS NOT NULL AND cardinality(task_push_batch.inputs) <> v_count THEN
        RAISE EXCEPTION 'identifiers has % elements but inputs has %', v_count, cardinality(task_push_batch.inputs)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass one input per identifier, or inputs => NULL for none.';
    END IF;
    -- An empty batch does nothing at all (design §4: no error, no row, no sequence taken).
    IF v_count = 0 THEN
        RETURN;
    END IF;
    -- The first bad identifier, named by its value and position (1-based, in input order).
    SELECT c.identifier, c.ord INTO v_bad
    FROM unnest(task_push_batch.identifiers) WITH ORDINALITY AS c(identifier, ord)
    WHERE c.identifier IS NULL OR length(c.identifier) NOT BETWEEN 1 AND 500
    ORDER BY c.ord
    LIMIT 1;
    IF FOUND THEN
        IF v_bad.identifier IS NULL THEN
            RAISE EXCEPTION 'identifier NULL at position % is invalid: want 1 to 500 characters', v_bad.ord
                USING ERRCODE = 'PT003';
        ELSIF v_bad.identifier = '' THEN
            RAISE EXCEPTION 'identifier '''' at position % is empty: want 1 to 500 characters', v_bad.ord
                USING ERRCODE = 'PT003';
        END IF;
        RAISE EXCEPTION 'identifier % at position % is % characters long, at most 500 allowed',
            quote_literal(left(v_bad.identifier, 40) || '…'), v_bad.ord, length(v_bad.identifier)
            USING ERRCODE = 'PT003';
    END IF;

    -- KEY SHARE keeps a concurrent destroy of the topic out until the caller commits.
    SELECT tt.queue_cap, tt.fair OR tt.key_concurrency IS NOT NULL INTO v_cap, v_keyed
    FROM task_topic tt WHERE tt.topic = task_push_batch.topic FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown topic %', quote_nullable(task_push_batch.topic)
            USING ERRCODE = 'PT001', HINT = 'Register the topic first, e.g. SELECT task_topic_create(''my-topic'').';
    END IF;
    IF v_cap IS NOT NULL THEN
        -- As the Go push: the READY or ACTIVE tasks already there (counted no further than the
        -- cap) plus the live tasks this push adds — all of them with APPEND, one per distinct
        -- identifier otherwise (earlier occurrences are inserted REDUNDANT or not at all).
        v_live := CASE WHEN task_push_batch.suspended THEN 0
                       WHEN v_mode = 0 THEN v_count
                       ELSE (SELECT count(DISTINCT i) FROM unnest(task_push_batch.identifiers) i) END;
        IF NOT task_queue_admits(task_push_batch.topic, v_cap, v_live) THEN
            RAISE EXCEPTION 'topic % is at its queue cap of % READY or ACTIVE tasks: push of % refused, nothing written',
                quote_literal(task_push_batch.topic), v_cap, v_live
                USING ERRCODE = 'PT004';
        END IF;
    END IF;

    IF task_push_batch.delay > interval '0' THEN
        v_not_before := now() + task_push_batch.delay;
    END IF;

    RETURN QUERY
    WITH creation AS (
        -- '' input is stored as NULL, as the Go push does.
        SELECT c.ord, c.identifier, NULLIF(c.input, '') AS input,
               -- only the last occurrence of an identifier in the batch stays live (REPLACE,
               -- SUPERSEDE) or is inserted at all (DELETE)
               c.ord = max(c.ord) OVER (PARTITION BY c.identifier) AS last
        -- unnest of two arrays zips them; a NULL inputs array gives NULL inputs.
        FROM unnest(task_push_batch.identifiers, task_push_batch.inputs) WITH ORDINALITY AS c(identifier, input, ord)
    ),
    older_ready AS (
        -- Older tasks of the same identifiers that this insertion mode touches (the matrix of
        -- design §4.2), in two parts that each match one index: READY ones through
        -- task_ready_identifier, settled ones (EXPIRED and after) through task_identifier.
        -- ACTIVE tasks are never touched; rows locked by a concurrent transaction are
        -- skipped, not waited for. The mode tests depend on no row, so an APPEND reads nothing.
        SELECT t.topic, t.sequence FROM task t
        WHERE v_mode <> 0
          AND (t.topic || E'\n' || t.identifier) = ANY (ARRAY(SELECT task_push_batch.topic || E'\n' || i
                                                             FROM unnest(task_push_batch.identifiers) i))
          AND t.topic = task_push_batch.topic AND t.state = 1
          AND t.identifier = ANY (task_push_batch.identifiers)
        FOR UPDATE SKIP LOCKED
    ),
    older_settled AS (
        -- REPLACE also ends settled tasks up to SUCCEEDED; DELETE removes every one.
        SELECT t.topic, t.sequence FROM task t
        WHERE v_mode IN (1, 3)
          AND hashtext(t.topic) = hashtext(task_push_batch.topic) AND t.topic = task_push_batch.topic AND t.state >= 2
          AND t.identifier = ANY (task_push_batch.identifiers)
          AND (v_mode = 3 OR t.state <= 6)
        FOR UPDATE SKIP LOCKED
    ),
    older AS (
        SELECT r.topic, r.sequence FROM older_ready r
        UNION ALL
        SELECT s.topic, s.sequence FROM older_settled s
    ),
    -- The topic as a value (not only o's) lets the planner prune the target to the
    -- topic's table; the mode test goes in the subquery, since a WHERE that folds to false
    -- leaves every table of task as a target (and locks them all).
    made_redundant AS (
        UPDATE task t SET state = 8, descent = GREATEST(t.state, t.descent)
        FROM (SELECT * FROM older WHERE v_mode IN (1, 2)) o
        WHERE t.topic = task_push_batch.topic AND t.sequence = o.sequence
        RETURNING t.sequence
    ),
    deleted AS (
        DELETE FROM task t USING (SELECT * FROM older WHERE v_mode = 3) o
        WHERE t.topic = task_push_batch.topic AND t.sequence = o.sequence
        RETURNING t.sequence
    ),
    inserted AS (
        INSERT INTO task (topic, sequence, identifier, state, descent, input, reference, priority, not_before, concurrency_key)
        -- nextval over rows already in input order: sequences follow the input
        SELECT task_push_batch.topic, nextval('task_sequence'), c.identifier,
               CASE WHEN v_mode IN (1, 2) AND NOT c.last THEN 8
                    WHEN task_push_batch.suspended THEN 4
                    ELSE 1 END,
               1, -- descent: a fresh task was READY before whatever it is (design section 3)
               c.input, NULLIF(task_push_batch.reference, ''), task_push_batch.priority, v_not_before,
               -- in a topic polled by key, a task without one has the key '' (task_poll_keyed)
               coalesce(NULLIF(task_push_batch.concurrency_key, ''), CASE WHEN v_keyed THEN '' END)
        FROM (SELECT * FROM creation c WHERE v_mode <> 3 OR c.last ORDER BY c.ord) c
        RETURNING sequence, state
    ),
    notified AS (
        -- With the position of the first READY task (every task of a call has the same
        -- priority and not-before time) and, when it is delayed, the milliseconds until it
        -- is due: a processor then polls from there, or arms a timer, instead of reading
        -- the topic from its head (repository.Notification). Delivered at commit,
        -- coalesced per transaction.
        SELECT pg_notify('task_notification', 'WORK ' || md5(task_push_batch.topic) || ' '
                         || task_push_batch.priority || ' ' || f.first
                         || CASE WHEN v_not_before > clock_timestamp()
                                 THEN ' ' || ceil(extract(epoch FROM v_not_before - clock_timestamp()) * 1000)::bigint
                                 ELSE '' END) AS sent
        FROM (SELECT min(i.sequence) AS first FROM inserted i WHERE i.state = 1) f
        WHERE f.first IS NOT NULL
    )
    -- Data-modifying CTEs run to completion whether or not the outer query reads them;
    -- notified runs only when referenced: a scalar subquery in WHERE always runs.
    SELECT i.sequence FROM inserted i
    WHERE (SELECT count(*) FROM notified) >= 0
    ORDER BY i.sequence;
END
$$;

COMMENT ON FUNCTION task_push_batch(text, text[], text[], text, interval, integer, text, boolean, text) IS
'Pushes one task per identifier to a topic in one statement and returns their sequences in input order; see docs/sql.md.';

CREATE FUNCTION task_push(
    topic      text,
    identifier text,
    input      text     DEFAULT NULL,
    insertion  text     DEFAULT 'append',
    delay      interval DEFAULT NULL,
    priority   integer  DEFAULT 0,
    reference  text     DEFAULT NULL,
    suspended  boolean  DEFAULT false,
    concurrency_key text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_sequence bigint;
BEGIN
    -- One element always yields exactly one task, whatever the insertion.
    SELECT s INTO STRICT v_sequence
    FROM task_push_batch(task_push.topic, ARRAY[task_push.identifier], ARRAY[task_push.input],
                         task_push.insertion, task_push.delay, task_push.priority,
                         task_push.reference, task_push.suspended, task_push.concurrency_key) AS s;
    RETURN v_sequence;
END
$$;

COMMENT ON FUNCTION task_push(text, text, text, text, interval, integer, text, boolean, text) IS
'Pushes one task to a topic and returns its sequence; see docs/sql.md.';

-- task_topic_set_limits sets a topic's limits from SQL, all at once (NULL or false: none),
-- and returns its row; a bad value is refused with an error naming it, and nothing is
-- written. As TopicSettings in Go: rate tasks per rate_period, with bursts of rate_burst
-- (default: rate).
CREATE FUNCTION task_topic_set_limits(topic text, concurrency integer DEFAULT NULL, key_concurrency integer DEFAULT NULL,
                                      rate integer DEFAULT NULL, rate_period interval DEFAULT NULL,
                                      rate_burst integer DEFAULT NULL, fair boolean DEFAULT false)
RETURNS task_topic
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_period_ms bigint;
    v_row       task_topic;
BEGIN
    IF task_topic_set_limits.concurrency < 1 THEN
        RAISE EXCEPTION 'concurrency % is below 1 (NULL is no limit)', task_topic_set_limits.concurrency
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_topic_set_limits.key_concurrency < 1 THEN
        RAISE EXCEPTION 'key_concurrency % is below 1 (NULL is no limit)', task_topic_set_limits.key_concurrency
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_topic_set_limits.rate < 1 THEN
        RAISE EXCEPTION 'rate % is below 1 (NULL is no limit)', task_topic_set_limits.rate
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_topic_set_limits.rate IS NULL AND (task_topic_set_limits.rate_period IS NOT NULL OR task_topic_set_limits.rate_burst IS NOT NULL) THEN
        RAISE EXCEPTION 'rate_period and rate_burst need a rate'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF task_topic_set_limits.rate IS NOT NULL THEN
        v_period_ms := floor(extract(epoch FROM task_topic_set_limits.rate_period) * 1000);
        IF v_period_ms IS NULL OR v_period_ms < 1 THEN
            RAISE EXCEPTION 'rate % needs a rate_period of at least 1 millisecond, got %', task_topic_set_limits.rate,
                coalesce(task_topic_set_limits.rate_period::text, 'NULL')
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF task_topic_set_limits.rate_burst < 1 THEN
            RAISE EXCEPTION 'rate_burst % is below 1', task_topic_set_limits.rate_burst
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    UPDATE task_topic tt
    SET concurrency = task_topic_set_limits.concurrency, key_concurrency = task_topic_set_limits.key_concurrency,
        rate = task_topic_set_limits.rate, rate_period_ms = v_period_ms,
        rate_burst = CASE WHEN task_topic_set_limits.rate IS NOT NULL
                          THEN coalesce(task_topic_set_limits.rate_burst, task_topic_set_limits.rate) END,
        fair = coalesce(task_topic_set_limits.fair, false)
    WHERE tt.topic = task_topic_set_limits.topic
    RETURNING tt.* INTO v_row;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown topic %', quote_nullable(task_topic_set_limits.topic)
            USING ERRCODE = 'PT001', HINT = 'Register the topic first, e.g. SELECT task_topic_create(''my-topic'').';
    END IF;
    RETURN v_row;
END
$$;

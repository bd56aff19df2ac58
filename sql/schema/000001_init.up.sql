-- pgtask core schema: the three tables of the seed (task_topic, task_owner, task), the
-- task_pretty view, and the functions that run dynamic DDL for per-topic partitions.
-- Ordinals (design §3): 0 ACTIVE, 1 READY, 2 EXPIRED, 3 FAILED, 4 SUSPENDED, 5 FILTERED,
-- 6 SUCCEEDED, 7 RECREATED, 8 REDUNDANT.

-- One registered topic per row, and the per-topic settings every process must agree on.
CREATE TABLE task_topic (
    topic             text        PRIMARY KEY CHECK (length(topic) BETWEEN 1 AND 250),
    -- Name of the partition of task holding this topic's rows ('task_' || md5(topic)):
    -- a topic may be any text, a relation name may not.
    partition         text        NOT NULL UNIQUE,
    created           timestamptz NOT NULL DEFAULT now(),
    -- Retry policy (design §5.1). max_attempts = 1 means no automatic retry.
    max_attempts      integer     NOT NULL DEFAULT 1 CHECK (max_attempts >= 1),
    backoff_base_ms   bigint      NOT NULL DEFAULT 1000 CHECK (backoff_base_ms >= 0),
    backoff_cap_ms    bigint      NOT NULL DEFAULT 3600000 CHECK (backoff_cap_ms >= 0),
    backoff_jitter_ms bigint      NOT NULL DEFAULT 0 CHECK (backoff_jitter_ms >= 0),
    -- Most unfinished (READY or ACTIVE) tasks the topic may hold; NULL is unlimited.
    queue_cap         bigint      NULL CHECK (queue_cap > 0),
    -- How long finished tasks are kept before retention purges them; NULL keeps them.
    retention_ms      bigint      NULL CHECK (retention_ms > 0),
    -- Persisted activation (pause/resume): false stops every processor of the topic.
    active            boolean     NOT NULL DEFAULT true
);

-- One row per running repository instance (normally one per process).
CREATE TABLE task_owner (
    owner     text        PRIMARY KEY CHECK (length(owner) BETWEEN 1 AND 250),
    heartbeat timestamptz NOT NULL DEFAULT now(),
    started   timestamptz NOT NULL DEFAULT now(),
    host      text        NULL,
    pid       integer     NULL
);

-- ONE counter for all topics: a fresh database hands out 1, 2, 3, …  No CACHE, so that
-- sequences taken by concurrent sessions stay in the order they were taken.
CREATE SEQUENCE task_sequence AS bigint MINVALUE 1 START 1;

CREATE TABLE task (
    topic       text        NOT NULL,
    sequence    bigint      NOT NULL DEFAULT nextval('task_sequence'),
    identifier  text        NOT NULL CHECK (length(identifier) BETWEEN 1 AND 500),
    state       smallint    NOT NULL DEFAULT 1 CHECK (state BETWEEN 0 AND 8),
    descent     smallint    NOT NULL DEFAULT 1 CHECK (descent BETWEEN 1 AND 8),
    owner       text        NULL,
    created     timestamptz NOT NULL DEFAULT now(),
    completed   timestamptz NULL,
    input       text        NULL,
    output      text        NULL,
    reference   text        NULL CHECK (length(reference) <= 500),
    priority    smallint    NOT NULL DEFAULT 0,
    -- READY tasks are not polled before this time; NULL means at once.
    not_before  timestamptz NULL,
    -- Number of times the task was leased; completion is fenced by owner AND attempt, so it
    -- never goes down (a stale lease must never match a later one).
    attempt     integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    -- Leases that do not count against the retry budget: handed back by a snooze, or
    -- forgiven by a reset. The attempts used are attempt - returned.
    returned    integer     NOT NULL DEFAULT 0 CHECK (returned >= 0),
    -- Error text of every failed attempt, oldest first (output holds the last one).
    errors      text[]      NULL,
    -- Set when an ACTIVE task is cancelled: it ends FAILED "cancelled", never retried.
    cancelled   boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (topic, sequence)
) PARTITION BY LIST (topic);

-- Poll: a narrow partial index over READY rows in poll order, one per direction, so that
-- finished rows never slow down a poll.
CREATE INDEX task_ready_fifo ON task (priority, sequence) WHERE state = 1;
CREATE INDEX task_ready_lifo ON task (priority, sequence DESC) WHERE state = 1;
-- Conditions, SUPERSEDE, SINGULAR junctions, expiry (state = 0), queue cap and stats
-- look only at states 0..4: a small index leading with state serves all of them.
CREATE INDEX task_open ON task (state, identifier, sequence) WHERE state <= 4;
-- REPLACE, DELETE, ETERNAL junctions and paging by identifier look at every state.
CREATE INDEX task_identifier ON task (identifier, sequence);
CREATE INDEX task_reference ON task (reference, sequence) WHERE reference IS NOT NULL;
-- resolve(time): created grows with sequence, so a BRIN index is tiny and enough.
CREATE INDEX task_created ON task USING brin (created);

-- task_pretty shows states and descents by name, for people using psql. Selecting from a
-- subquery (which the planner flattens) makes the view read-only.
CREATE VIEW task_pretty AS
SELECT t.topic, t.sequence, t.identifier,
       (ARRAY['ACTIVE', 'READY', 'EXPIRED', 'FAILED', 'SUSPENDED', 'FILTERED', 'SUCCEEDED',
              'RECREATED', 'REDUNDANT'])[t.state + 1] AS state,
       (ARRAY['ACTIVE', 'READY', 'EXPIRED', 'FAILED', 'SUSPENDED', 'FILTERED', 'SUCCEEDED',
              'RECREATED', 'REDUNDANT'])[t.descent + 1] AS descent,
       t.owner, t.attempt, t.returned, t.priority, t.not_before, t.created, t.completed, t.input, t.output,
       t.reference, t.errors, t.cancelled
FROM (SELECT * FROM task) t;

-- task_topic_create registers a topic and creates its partition in the caller's
-- transaction. The partition is created standalone and then attached, because ATTACH only
-- takes a SHARE UPDATE EXCLUSIVE lock on task (CREATE TABLE … PARTITION OF would block
-- every push and poll of every topic until the caller commits). Returns false if the topic
-- already existed.
CREATE FUNCTION task_topic_create(p_topic text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_partition text := 'task_' || md5(p_topic);
BEGIN
    INSERT INTO task_topic (topic, partition) VALUES (p_topic, v_partition)
    ON CONFLICT (topic) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- fillfactor leaves room on each page for the new row versions of poll and complete.
    EXECUTE format('CREATE TABLE %I (LIKE task INCLUDING DEFAULTS INCLUDING CONSTRAINTS) '
                   'WITH (fillfactor = 80)', v_partition);
    EXECUTE format('ALTER TABLE %I ADD CHECK (topic = %L)', v_partition, p_topic);
    EXECUTE format('ALTER TABLE task ATTACH PARTITION %I FOR VALUES IN (%L)', v_partition, p_topic);
    RETURN true;
END
$$;

-- task_topic_destroy removes a topic, its settings and all its tasks (drops the partition).
-- Returns false for an unknown topic without raising, so the caller's transaction survives.
CREATE FUNCTION task_topic_destroy(p_topic text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_partition text;
BEGIN
    DELETE FROM task_topic WHERE topic = p_topic RETURNING partition INTO v_partition;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    EXECUTE format('DROP TABLE %I', v_partition);
    RETURN true;
END
$$;

-- task_topic_truncate deletes every task of a topic by truncating its partition and
-- returns how many there were; NULL for an unknown topic.
CREATE FUNCTION task_topic_truncate(p_topic text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_partition text;
    v_count     bigint;
BEGIN
    SELECT partition INTO v_partition FROM task_topic WHERE topic = p_topic FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', v_partition);
    EXECUTE format('SELECT count(*) FROM %I', v_partition) INTO v_count;
    EXECUTE format('TRUNCATE %I', v_partition);
    RETURN v_count;
END
$$;

SET client_min_messages = warning;
-- The raw-SQL baseline: a minimal jobs table with ONE index, the partial index over
-- pending rows in claim order. States: 0 pending, 1 running, 2 done.
DROP TABLE IF EXISTS jobs;
CREATE TABLE jobs (
    id       bigint      GENERATED ALWAYS AS IDENTITY,
    state    smallint    NOT NULL DEFAULT 0,
    payload  text        NOT NULL DEFAULT '',
    created  timestamptz NOT NULL DEFAULT now(),
    finished timestamptz NULL
);
CREATE INDEX jobs_pending ON jobs (id) WHERE state = 0;

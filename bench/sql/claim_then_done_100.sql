-- the two-transaction lifecycle a queue runs: claim up to 100 pending jobs (SKIP LOCKED),
-- marking them running, then mark them done by row address in a second statement.
-- Needs -M extended or -M prepared (:tids is passed as a parameter).
WITH claimed AS (
    SELECT ctid FROM jobs WHERE state = 0 ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED
), running AS (
    UPDATE jobs SET state = 1 WHERE ctid = ANY (ARRAY(SELECT ctid FROM claimed)) RETURNING ctid
)
SELECT COALESCE(array_agg(ctid), '{}')::text AS tids FROM running \gset
UPDATE jobs SET state = 2, finished = now() WHERE ctid = ANY (:tids::tid[]) AND state = 1;

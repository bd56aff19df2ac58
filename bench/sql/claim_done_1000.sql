-- claim up to 1000 pending jobs (SKIP LOCKED) and mark them done, in one statement
WITH claimed AS (
    SELECT ctid FROM jobs WHERE state = 0 ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED
)
UPDATE jobs SET state = 2, finished = now()
WHERE ctid = ANY (ARRAY(SELECT ctid FROM claimed));

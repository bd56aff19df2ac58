-- name: TaskCancelledLeases :many
-- ACTIVE tasks leased by this owner that were cancelled meanwhile: the fallback that lets
-- a processor notice a cancel whose CANCEL notification it missed. Given topics (a
-- processor's), only their tables are read: a custom plan prunes to them instead of
-- planning over, and locking, every table of task.
SELECT t.topic, t.sequence FROM task t
WHERE t.state = 0 AND t.owner = sqlc.arg(owner)::text AND t.cancelled
  AND (cardinality(sqlc.arg(topics)::text[]) = 0 OR t.topic = ANY(sqlc.arg(topics)::text[]));

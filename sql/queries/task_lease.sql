-- name: TaskCancelledLeases :many
-- ACTIVE tasks leased by this owner that were cancelled meanwhile: the fallback that lets
-- a processor notice a cancel whose CANCEL notification it missed.
SELECT t.topic, t.sequence FROM task t
WHERE t.state = 0 AND t.owner = sqlc.arg(owner)::text AND t.cancelled;

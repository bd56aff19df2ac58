-- 000032 on a distributed database: the plain migration. task_owner stays a plain table
-- of the coordinator. IF NOT EXISTS, as the newest form must be: a database distributed
-- at the newest version has the column already (internal/citustest applies the newest
-- form again).

ALTER TABLE task_owner ADD COLUMN IF NOT EXISTS expiry_ms bigint CHECK (expiry_ms > 0);

-- 000045: on a distributed database, expiry names the owners whose leases it takes back
-- rather than those it spares (task_citus_expire_owners replaces task_citus_expire,
-- sql/citus/migrations). The plain database expires in one statement (TaskExpire), which
-- reads task_owner and the leases in one snapshot: this migration changes nothing.
SELECT 1;

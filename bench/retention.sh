#!/usr/bin/env bash
# What the retention pass (TaskPurgeRetention, every processor's, once a minute) costs
# when it has nothing to delete, the usual case between two passes, before and after
# migration 000030 (task_retention), and how long that migration takes.
#
#   bench/retention.sh ADMIN_URL [TOPICS] [TASKS]
#
# ADMIN_URL names a database of the cluster to connect to for creating and dropping
# the database pgtask_bench_retention, which it migrates to version 29, fills with
# TOPICS topics (default 1 000) holding TASKS finished tasks in all (default 1 000 000),
# each topic with a retention of 31 days, then runs the pass's statement 3 times under
# EXPLAIN (ANALYZE, BUFFERS) as version 29 ran it (JIT as the server has it), migrates to
# 30 and runs it 3 times with JIT on (the index alone), then 3 times with JIT off, as
# the processor runs it, and 3 times the statement the processor runs now (a batch of
# 10 000, the topics in turn). PGTASK overrides the binary (default: built from this checkout).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
usage() { sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[[ $# -ge 1 && "$1" != -* ]] || usage
admin="$1" topics="${2:-1000}" tasks="${3:-1000000}"
[[ "$topics" =~ ^[1-9][0-9]*$ && "$tasks" =~ ^[1-9][0-9]*$ ]] || usage

# shellcheck source=bench/common.sh
source "$here/common.sh"

db=pgtask_bench_retention
psql -qAt "$admin" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
url="$(psql -qAt "$admin" -c "SELECT regexp_replace('$admin', '/[^/?]*(\?|$)', '/$db\1')")"
DATABASE_URL="$url" "$pgtask" migrate up --to 29 >/dev/null
psql -qAt "$url" >/dev/null <<SQL
SELECT count(task_topic_create('t' || g)) FROM generate_series(1, $topics) g;
SELECT count(task_push('t' || (1 + g % $topics), 'i' || g)) FROM generate_series(1, $tasks) g;
UPDATE task SET state = 6, completed = now();
UPDATE task_topic SET retention_ms = 31 * 86400000::bigint;
VACUUM ANALYZE task;
SQL

# the statement of sql/queries/task_read.sql (TaskPurgeRetention), size 1 000
pass="DELETE FROM task t USING (
    SELECT f.topic, f.sequence FROM task_topic tt CROSS JOIN LATERAL (
        SELECT f.topic, f.sequence FROM task f
        WHERE hashtext(f.topic) = hashtext(tt.topic) AND f.topic = tt.topic AND f.state >= 3
          AND COALESCE(f.completed, f.created) < now() - tt.retention_ms * interval '1 millisecond'
        LIMIT 1000) f
    WHERE tt.retention_ms IS NOT NULL LIMIT 1000) old
WHERE t.topic = old.topic AND t.sequence = old.sequence"
# the statement as the processor runs it now (TaskPurgeRetentionAfter, a batch of
# 10 000, the topics in turn by name from the first)
now="WITH old AS (
    SELECT f.topic, f.sequence, f.cutoff
    FROM (SELECT tt.topic, tt.retention_ms FROM task_topic tt
          WHERE tt.retention_ms IS NOT NULL
          ORDER BY tt.topic <= '', tt.topic) tt
    CROSS JOIN LATERAL (
        SELECT f.topic, f.sequence, now() - tt.retention_ms * interval '1 millisecond' AS cutoff FROM task f
        WHERE hashtext(f.topic) = hashtext(tt.topic) AND f.topic = tt.topic AND f.state >= 3
          AND COALESCE(f.completed, f.created) < now() - tt.retention_ms * interval '1 millisecond'
        LIMIT 10000
    ) f
    LIMIT 10000
),
deleted AS (
    DELETE FROM task t USING old
    WHERE t.topic = old.topic AND t.sequence = old.sequence
      AND t.state >= 3 AND COALESCE(t.completed, t.created) < old.cutoff
    RETURNING t.topic
)
SELECT count(*), COALESCE(max(d.topic) FILTER (WHERE d.topic <= ''), max(d.topic), '') FROM deleted d"
measure() {
	local i out
	for i in 1 2 3; do
		checkpoint "$url"
		# in a transaction rolled back: EXPLAIN ANALYZE runs the DELETE
		out="$(psql -qAt "$url" -c BEGIN -c "SET LOCAL jit = $2" -c "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${3:-$pass}" -c ROLLBACK)"
		python3 -c 'import json, sys
d = json.loads(sys.stdin.read())[0]
print("schema %s, jit %s: pass %s: %.1f ms, %d buffers" % (sys.argv[1], sys.argv[2], sys.argv[3], d["Execution Time"],
      d["Plan"]["Shared Hit Blocks"] + d["Plan"]["Shared Read Blocks"]))' "$1" "$2" "$i" <<<"$out"
	done
}
# as each schema's PurgeRetention runs it: with the server's JIT setting (on by default)
# before, with JIT off since 000030's change; and at 30 with JIT on, to tell the index's
# part from JIT's
measure 29 on
start=$(date +%s%N)
DATABASE_URL="$url" "$pgtask" migrate up >/dev/null
echo "migrations 000030 to the newest: $((($(date +%s%N) - start) / 1000000)) ms"
psql -qAt "$url" -c "ANALYZE task" >/dev/null
measure 30 on
measure 30 off
# the newest schema (the migration above went to it) and the statement as it is now
measure now off "$now"
psql -qAt "$admin" -c "DROP DATABASE $db" >/dev/null

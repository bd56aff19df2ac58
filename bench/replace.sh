#!/usr/bin/env bash
# What a REPLACE push costs once its identifier has many REDUNDANT versions (an identifier
# pushed with REPLACE again and again, each push leaving one), before and after migration
# 000031 (task_identifier_redundant), and how long that migration takes.
#
#   bench/replace.sh ADMIN_URL [VERSIONS] [TASKS]
#
# ADMIN_URL names a database of the cluster to connect to for creating and dropping the
# database pgtask_bench_replace, which it migrates to version 30 and fills with TASKS
# finished tasks of other identifiers (default 1 000 000) and VERSIONS REDUNDANT versions
# of the identifier "hot" (default 200 000), all in topic t. Then it times 300 REPLACE
# pushes of "hot" from SQL (task_push, pgbench, one client), 300 of identifiers never
# pushed before (the floor), and 300 of "hot" from Go (pgtask push --insertion replace,
# reading identifiers from stdin, one task a statement), migrates to 31 (timed) and times
# the same again. PGTASK overrides the binary (default: built from
# this checkout).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
usage() { sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[[ $# -ge 1 && "$1" != -* ]] || usage
admin="$1" versions="${2:-200000}" tasks="${3:-1000000}"
[[ "$versions" =~ ^[1-9][0-9]*$ && "$tasks" =~ ^[1-9][0-9]*$ ]] || usage

# shellcheck source=bench/common.sh
source "$here/common.sh"

db=pgtask_bench_replace
psql -qAt "$admin" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
url="$(psql -qAt "$admin" -c "SELECT regexp_replace('$admin', '/[^/?]*(\?|$)', '/$db\1')")"
DATABASE_URL="$url" "$pgtask" migrate up --to 30 >/dev/null
psql -qAt "$url" >/dev/null <<SQL
SELECT task_topic_create('t');
SELECT count(*) FROM task_push_batch('t', ARRAY(SELECT 'i' || g FROM generate_series(1, $tasks) g));
UPDATE task SET state = 6, completed = now();
SELECT count(*) FROM task_push_batch('t', array_fill('hot'::text, ARRAY[$versions + 1]), insertion => 'replace');
VACUUM ANALYZE task;
SQL

script="$(mktemp)" fresh="$(mktemp)"
trap 'rm -f "$script" "$fresh"; [[ -n "${build:-}" ]] && rm -rf "$build"' EXIT
echo "SELECT task_push('t', 'hot', insertion => 'replace');" >"$script"
echo "SELECT task_push('t', 'fresh-' || gen_random_uuid(), insertion => 'replace');" >"$fresh"
latency() { pgbench -n -t 300 -c 1 -f "$1" "$url" 2>/dev/null | sed -n 's/^latency average = \([0-9.]*\) ms$/\1/p'; }

measure() {
	local version="$1" sql floor go start
	checkpoint "$url"
	sql="$(latency "$script")" floor="$(latency "$fresh")"
	start=$(date +%s%N)
	printf 'hot\n%.0s' {1..300} | DATABASE_URL="$url" "$pgtask" push --topic t --insertion replace --batch-size 1 >/dev/null
	go=$(( ($(date +%s%N) - start) / 300000 ))
	printf '{"schema":%d,"versions":%d,"sql_replace_ms":%s,"sql_replace_fresh_ms":%s,"go_replace_us":%d}\n' \
		"$version" "$versions" "$sql" "$floor" "$go"
}

measure 30
start=$(date +%s%N)
DATABASE_URL="$url" "$pgtask" migrate up --to 31 >/dev/null
printf '{"migration_31_ms":%d,"tasks":%d}\n' $(( ($(date +%s%N) - start) / 1000000 )) "$((tasks + versions + 1))"
measure 31
psql -qAt "$admin" -c "DROP DATABASE $db" >/dev/null

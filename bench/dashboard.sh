#!/usr/bin/env bash
# The dashboard at scale, for BENCHMARKS.md: 10 000 topics, one of them ("big") holding
# TASKS finished tasks (default 10 000 000: SUCCEEDED, one in 100 000 FILTERED, one in
# 10 000 FAILED, created 10 ms apart so that a time range means something), then the
# median time of LOADS loads (default 10) of each page through `pgtask serve`.
#
#   bench/dashboard.sh DATABASE_URL
#
# DATABASE_URL must be an empty database (the script migrates it; building the rows takes
# a few minutes). PGTASK overrides the binary (default: built from this checkout). Prints
# one line per page: its median, fastest and slowest load in milliseconds, and its path.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
usage() { sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[[ $# -eq 1 && "$1" != -* ]] || usage
url="$1"
tasks="${TASKS:-10000000}" loads="${LOADS:-10}"
for v in "$tasks" "$loads"; do
	[[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "dashboard: TASKS and LOADS must be positive whole numbers, got $v" >&2; exit 2; }
done

# shellcheck source=bench/common.sh
source "$here/common.sh"
sql() { psql -qAtX -v ON_ERROR_STOP=1 "$url" "$@"; }

DATABASE_URL="$url" "$pgtask" migrate up >/dev/null
if [[ "$(sql -c "SELECT count(*) FROM task_topic")" == 0 ]]; then
	echo "dashboard: 10 000 topics and $tasks tasks in topic big, a few minutes" >&2
	sql -c "SELECT task_topic_create('big')"
	sql -c "DO \$\$ BEGIN FOR i IN 1..9999 LOOP PERFORM task_topic_create(format('topic-%s', lpad(i::text, 5, '0'))); END LOOP; END \$\$"
	step=1000000
	for ((from = 1; from <= tasks; from += step)); do
		to=$((from + step - 1 < tasks ? from + step - 1 : tasks))
		sql -c "INSERT INTO task (topic, sequence, identifier, state, descent, created, completed, input, output, reference, attempt)
			SELECT 'big', nextval('task_sequence'), 'id-' || (g % 100000),
			       CASE WHEN g % 100000 = 0 THEN 5 WHEN g % 10000 = 0 THEN 3 ELSE 6 END, 1,
			       timestamptz '2026-01-01' + g * interval '10 milliseconds',
			       timestamptz '2026-01-01' + g * interval '10 milliseconds' + interval '1 second',
			       '{\"n\": ' || g || '}', 'done', CASE WHEN g % 1000 = 0 THEN 'ref-' || g END, 1
			FROM generate_series($from, $to) g ORDER BY g"
	done
	sql -c "SELECT task_push('big', 'ready-' || g) FROM generate_series(1, 10) g" >/dev/null
fi
checkpoint "$url"
sql -c "ANALYZE"

port=$((20000 + RANDOM % 20000))
DATABASE_URL="$url" "$pgtask" serve --addr "127.0.0.1:$port" --no-schedules >/dev/null 2>&1 &
serve=$!
trap 'kill $serve 2>/dev/null || true; wait 2>/dev/null || true; [[ -z "${build:-}" ]] || rm -rf "$build"' EXIT
for _ in $(seq 100); do
	curl -fs -o /dev/null "http://127.0.0.1:$port/healthz" && break
	sleep 0.1
done

last="$(sql -c "SELECT max(sequence) FROM task WHERE topic = 'big'")"
mid=$((last - tasks / 2))
page() {
	local path="$1" ms
	curl -fs -o /dev/null "http://127.0.0.1:$port$path" # warm
	ms="$(for _ in $(seq "$loads"); do
		curl -fs -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$port$path" | awk '{ printf "%.1f\n", $1 * 1000 }'
	done)"
	printf '%s ms (%s-%s) %s\n' "$(median <<<"$ms")" "$(sort -n <<<"$ms" | head -1)" "$(sort -n <<<"$ms" | tail -1)" "$path"
}
page "/"
page "/?after=topic-05000"
page "/?q=topic-0999"
page "/ui/topics/big"
page "/ui/topics/big?before=$mid"
page "/ui/topics/big/tasks/$mid"
page "/ui/topics/big?state=FAILED"
page "/ui/topics/big?state=FILTERED"
page "/ui/topics/big?state=SUCCEEDED"
page "/ui/topics/big?identifier=id-4242"
page "/ui/topics/big?reference=ref-5000000"
page "/ui/topics/big?from=2026-01-01T12:00&to=2026-01-01T12:30"
page "/ui/topics/big?from=2026-01-01T12:00&to=2026-01-01T12:30&state=FILTERED"
page "/ui/processes"
page "/ui/schedules"

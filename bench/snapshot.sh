#!/usr/bin/env bash
# A long-held snapshot under steady load, for BENCHMARKS.md: `pgtask bench --mode
# sustained` pushes RATE tasks/s for BEFORE + HOLD + AFTER seconds; BEFORE seconds in,
# another session opens a REPEATABLE READ transaction, reads one row (which takes its
# snapshot) and holds it for HOLD seconds, as a forgotten session or a long report does.
# While it lasts, no row version that leaves READY after it began can be removed.
#
#   bench/snapshot.sh DATABASE_URL
#
# DATABASE_URL must hold the pgtask schema. RATE (default 15000), BEFORE (60), HOLD
# (600) and AFTER (300) are read from the environment; BENCH_FLAGS are added to the
# bench's. PGTASK overrides the binary (default: built from this checkout). The run
# starts after a VACUUM and a CHECKPOINT.
#
# Prints, every minute, the size of the table holding the run's topic (heap and
# indexes) and its dead rows; then, for before, during and after the hold, the tasks
# processed (and pushed) per task offered at RATE and the worst push → completed p99 of
# a 10 s interval. The push → completed latency starts at a task's push, not at the
# moment RATE made it due: a pusher that falls behind shows in "pushed", not in it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
usage() { sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[[ $# -eq 1 && "$1" != -* ]] || usage
url="$1"
rate="${RATE:-15000}" before="${BEFORE:-60}" hold="${HOLD:-600}" after="${AFTER:-300}"
for v in "$rate" "$before" "$hold" "$after"; do
	[[ "$v" =~ ^[0-9]+$ ]] || { echo "snapshot: RATE, BEFORE, HOLD and AFTER must be whole numbers, got $v" >&2; exit 2; }
done
((rate > 0)) || { echo "snapshot: RATE must be above 0: the run is measured against it" >&2; exit 2; }

# shellcheck source=bench/common.sh
source "$here/common.sh"

sql() { psql -qAtX -v ON_ERROR_STOP=1 "$url" "$@"; }
out="$(mktemp)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -f "$out"
	[[ -z "${build:-}" ]] || rm -rf "$build"
}
trap cleanup EXIT

checkpoint "$url"
topic="snapshot-$RANDOM$RANDOM"
total=$((before + hold + after))
# shellcheck disable=SC2086 # BENCH_FLAGS is a list of flags
DATABASE_URL="$url" "$pgtask" bench --mode sustained --topic "$topic" --rate "$rate" --duration "${total}s" \
	--pushers 2 --push-batch 1000 --interval 10s --json ${BENCH_FLAGS:-} >"$out" 2>&1 &
pids+=($!)

# the table holding the topic: its heap, its indexes, its dead rows
sizes() {
	sql -c "SELECT round(pg_table_size(c.oid) / 1048576.0) || ' MB heap, ' ||
	               round(pg_indexes_size(c.oid) / 1048576.0) || ' MB indexes, ' ||
	               coalesce(s.n_dead_tup, 0) || ' dead rows'
	        FROM task_topic tt JOIN pg_class c ON c.oid = tt.partition::regclass
	        LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE tt.topic = '$topic'"
}
start=$SECONDS
held=""
for ((t = 60; t <= total; t += 60)); do
	while ((SECONDS - start < t)); do
		if [[ -z "$held" ]] && ((SECONDS - start >= before)); then
			sql -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM task_topic" \
				-c "SELECT pg_sleep($hold)" -c "COMMIT" >/dev/null &
			pids+=($!)
			held=yes
		fi
		sleep 1
	done
	phase=before
	((t > before)) && phase=held
	((t > before + hold)) && phase=after
	printf '%4ds (%s): %s\n' "$t" "$phase" "$(sizes)"
done
wait "${pids[0]}" || { cat "$out" >&2; exit 1; }

# the bench's progress lines: "  10.0s  pushed N (R/s)  processed N (R/s)  backlog N  completed p99 X ms"
# "of the offered rate": processed over RATE times the phase's seconds, not over what
# was pushed (a pusher that fell behind would hide a processing that fell behind too);
# pushed is shown beside it.
awk -v b="$before" -v h="$hold" -v rate="$rate" '
	/^ *[0-9.]+s  pushed/ {
		gsub(/\( +/, "(")
		t = $1 + 0
		phase = (t <= b) ? "before" : (t <= b + h + 10) ? "held" : "after"
		pushed[phase] += substr($4, 2) + 0; done[phase] += substr($7, 2) + 0; ticks[phase]++
		p = $NF == "ms" ? $(NF - 1) : 0
		if (p > worst[phase]) worst[phase] = p
		seen[phase] = 1
	}
	END {
		split("before held after", order, " ")
		for (i = 1; i <= 3; i++) {
			ph = order[i]
			if (!seen[ph]) continue
			printf "%-6s: processed %.3f of the offered rate (pushed %.3f), worst 10 s push → completed p99 %.0f ms\n",
				ph, done[ph] / (rate * ticks[ph]), pushed[ph] / (rate * ticks[ph]), worst[ph]
		}
	}' "$out"
tail -n 4 "$out" | grep -v '^{' || true

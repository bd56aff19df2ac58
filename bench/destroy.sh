#!/usr/bin/env bash
# How long other topics wait while a large topic is purged or destroyed, for
# BENCHMARKS.md. A probe topic runs `pgtask bench --mode latency` (one task at a time,
# open loop at 200/s, 40 s); 10 s in, a topic of TASKS finished tasks in the same bucket
# (the same shared table, or beside it when dedicated) is purged (pgtask purge --all) or
# destroyed (pgtask topic destroy). The probe's worst push→start latency is how long its
# statements waited.
#
#   bench/destroy.sh DATABASE_URL [TASKS]
#
# DATABASE_URL must hold the pgtask schema; TASKS defaults to 1000000. PGTASK overrides
# the binary (default: built from this checkout). Prints one line per case: the
# operation's time and the probe's latency p50, p99 and max, the first line a baseline
# with no operation.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
usage() { sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[[ $# -ge 1 && "$1" != -* ]] || usage
url="$1" tasks="${2:-1000000}"
[[ "$tasks" =~ ^[1-9][0-9]*$ ]] || usage

# shellcheck source=bench/common.sh
source "$here/common.sh"

sql() { psql -qAtX -v ON_ERROR_STOP=1 "$url" "$@"; }
probe="probe-$RANDOM$RANDOM"
# a topic name that hashes to the probe's bucket
big="$(sql -c "SELECT n FROM (SELECT 'big-' || g AS n FROM generate_series(1, 10000) g) c
               WHERE task_bucket(n) = task_bucket('$probe') LIMIT 1")"

# prepare STORAGE: register the big topic (shared or dedicated) and fill it
prepare() {
	DATABASE_URL="$url" "$pgtask" topic add "$big" $([[ $1 == dedicated ]] && echo --dedicated) >/dev/null
	sql -c "INSERT INTO task (topic, identifier, state, descent, completed, input, output)
	        SELECT '$big', 'i' || g, 6, 1, now(), '{\"n\": ' || g || '}', 'ok' FROM generate_series(1, $tasks) g" \
	    -c "VACUUM" -c "CHECKPOINT"
}

# probe [COMMAND...]: the probe's latency run, COMMAND run 10 s into it and timed
probe() {
	local out op="" start
	out="$(mktemp)"
	DATABASE_URL="$url" "$pgtask" bench --mode latency --topic "$probe" --rate 200 --duration 40s --tasks 8000 --json >"$out" 2>/dev/null &
	local bench=$!
	if (($# > 0)); then
		sleep 10
		start=$(date +%s.%N)
		DATABASE_URL="$url" "$@" >/dev/null
		op="$(echo "$(date +%s.%N) - $start" | bc)"
	fi
	wait "$bench"
	local r
	r="$(tail -n 1 "$out")"
	rm -f "$out"
	printf '%-42s %8s s   probe p50 %6s ms, p99 %7s ms, max %7s ms\n' "${label}" "${op:--}" \
		"$(field p50_ms "$r")" "$(field p99_ms "$r")" "$(field max_ms "$r")"
}

label="baseline (nothing else runs)" probe
for storage in shared dedicated; do
	prepare "$storage"
	label="$storage: purge --all of $tasks" probe "$pgtask" purge --topic "$big" --all
	sql -c "INSERT INTO task (topic, identifier, state) SELECT '$big', 'i' || g, 6 FROM generate_series(1, $tasks) g" \
	    -c "VACUUM" -c "CHECKPOINT"
	label="$storage: topic destroy of $tasks" probe "$pgtask" topic destroy "$big"
	sql -c "VACUUM" # the deleted rows, before the next case
done

#!/usr/bin/env bash
# The many-topics targets for BENCHMARKS.md: burn-downs and idle latency of one topic
# with no other topic registered and with IDLE idle topics, run alternately, each right
# after a VACUUM and a CHECKPOINT, then 8 processors on 8 topics beside the idle ones.
#
#   bench/topics.sh DATABASE_URL [PAIRS] [IDLE]
#
# DATABASE_URL must hold the pgtask schema (pgtask migrate up). PAIRS defaults to 3,
# IDLE to 10000. Each run is one `pgtask bench` (--idle-topics registers the idle
# topics one per transaction before the run and destroys them after). PGTASK overrides
# the binary (default: built from this checkout).
#
# It prints one line per pair (tasks/s counted from the start of the push, processed/s
# counted from the start of processing, and latency p50/p99, each without and with the
# idle topics, and the ratios), the medians, and the 8-processor run's line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
usage() { sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[[ $# -ge 1 && "$1" != -* ]] || usage
url="$1" pairs="${2:-3}" idle="${3:-10000}"
[[ "$pairs" =~ ^[1-9][0-9]*$ && "$idle" =~ ^[0-9]+$ ]] || usage

# shellcheck source=bench/common.sh
source "$here/common.sh"

# Each run starts after a VACUUM (the tasks of the previous run's topic, deleted when it
# was destroyed, are otherwise left to autovacuum, which then works during this run) and
# a CHECKPOINT.
run() {
	psql -qAt "$url" -c VACUUM >/dev/null
	checkpoint "$url"
	DATABASE_URL="$url" "$pgtask" bench --json "$@" | tail -n 1
}

tps0=() tps1=() proc0=() proc1=() p50a=() p50b=() p99a=() p99b=()
for i in $(seq "$pairs"); do
	# which of the two goes first alternates from pair to pair
	if ((i % 2)); then
		a="$(run --mode burndown --tasks 50000)"
		b="$(run --mode burndown --tasks 50000 --idle-topics "$idle")"
		la="$(run --mode latency --tasks 500)"
		lb="$(run --mode latency --tasks 500 --idle-topics "$idle")"
	else
		b="$(run --mode burndown --tasks 50000 --idle-topics "$idle")"
		a="$(run --mode burndown --tasks 50000)"
		lb="$(run --mode latency --tasks 500 --idle-topics "$idle")"
		la="$(run --mode latency --tasks 500)"
	fi
	tps0+=("$(field tasks_per_second "$a")") tps1+=("$(field tasks_per_second "$b")")
	proc0+=("$(field process_per_second "$a")") proc1+=("$(field process_per_second "$b")")
	p50a+=("$(field p50_ms "$la")") p50b+=("$(field p50_ms "$lb")")
	p99a+=("$(field p99_ms "$la")") p99b+=("$(field p99_ms "$lb")")
	awk -v i="$i" -v n="$idle" -v a="${tps0[-1]}" -v b="${tps1[-1]}" -v r="$(field idle_topics_register_seconds "$b")" \
		-v c="${proc0[-1]}" -v d="${proc1[-1]}" \
		-v p="${p50a[-1]}" -v q="${p50b[-1]}" -v x="${p99a[-1]}" -v y="${p99b[-1]}" 'BEGIN {
		printf "pair %d: burn-down %6.0f vs %6.0f tasks/s with %d idle topics (%.2f), processed %6.0f vs %6.0f/s (%.2f), registered in %.1fs; latency p50 %.2f vs %.2f ms, p99 %.2f vs %.2f ms\n",
			i, a, b, n, b / a, c, d, d / c, r, p, q, x, y }'
done
m() { printf '%s\n' "$@" | median; }
awk -v a="$(m "${tps0[@]}")" -v b="$(m "${tps1[@]}")" -v p="$(m "${p50a[@]}")" -v q="$(m "${p50b[@]}")" \
	-v c="$(m "${proc0[@]}")" -v d="$(m "${proc1[@]}")" \
	-v x="$(m "${p99a[@]}")" -v y="$(m "${p99b[@]}")" -v n="$idle" 'BEGIN {
	printf "medians: burn-down %.0f vs %.0f tasks/s with %d idle topics (%.2f), processed %.0f vs %.0f/s (%.2f); latency p50 %.2f vs %.2f ms (%+.0f %%), p99 %.2f vs %.2f ms (%+.0f %%)\n",
		a, b, n, b / a, c, d, d / c, p, q, 100 * (q - p) / p, x, y, 100 * (y - x) / x }'

e="$(run --mode burndown --tasks 200000 --topics 8 --processes 8 --idle-topics "$idle" --push-batch 1000 --pushers 2)"
awk -v t="$(field tasks_per_second "$e")" -v p="$(field processed "$e")" -v err="$(field errors "$e")" -v n="$idle" 'BEGIN {
	printf "8 processors on 8 topics beside %d idle topics: %d tasks processed, %.0f tasks/s, %d processor errors\n", n, p, t, err }'

#!/usr/bin/env bash
# The sustained target of issue 5, measured the way BENCHMARKS.md reports it: the raw
# lifecycle (bench/baseline.sh) right before each run sets the rate, then pgtask pushes
# at that fraction of it while its processor works, for a fixed duration.
#
#   bench/sustained.sh PGTASK_DATABASE_URL RAW_DATABASE_URL [RUNS] [-- BENCH_FLAGS...]
#
# PGTASK_DATABASE_URL must hold the pgtask schema (pgtask migrate up); RAW_DATABASE_URL
# is a scratch database (the baseline creates and drops its table "jobs" there). RUNS
# defaults to 3. FRACTION (default 0.70) is the share of the raw lifecycle pushed,
# DURATION (default 60s) the length of each run; BENCH_FLAGS are added to `pgtask bench
# --mode sustained --pushers 2 --push-batch 1000 --json`. PGTASK overrides the binary
# (default: built from this checkout). Each run starts right after a VACUUM and a
# CHECKPOINT (bench/common.sh), which
# needs a superuser (or the pg_checkpoint role). Each pusher sends 1 000 tasks as soon
# as that many are due (pgtask bench's --push-linger, 100ms by default, bounds the wait
# at low rates); `-- --push-linger 0` pushes whatever is due at once instead, as builds
# before a6d9b8b did.
#
# A run meets the target when it kept up with the push, processing at least 99 % of the
# rate (FRACTION of the raw lifecycle; the last second's pushes are still in flight when
# the run ends), and its backlog grew by less than 1 % of the rate per second over the
# second half of the run (pgtask bench's backlog_growth_per_second). It prints one line
# per run and, last, the medians and how many runs met it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
usage() { sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

[[ $# -ge 2 && "$1" != -* ]] || usage
pgtask_url="$1" raw_url="$2"
shift 2
runs=3
if [[ $# -gt 0 && "$1" != "--" ]]; then
	runs="$1"
	shift
fi
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "sustained: RUNS must be a positive number, got $runs" >&2; exit 2; }
if [[ $# -gt 0 ]]; then
	[[ "$1" == "--" ]] || usage
	shift
fi
fraction="${FRACTION:-0.70}"
duration="${DURATION:-60s}"
[[ "$fraction" =~ ^(0?\.[0-9]*[1-9][0-9]*|1(\.0*)?)$ ]] ||
	{ echo "sustained: FRACTION must be a number in (0, 1], got $fraction" >&2; exit 2; }

# shellcheck source=bench/common.sh
source "$here/common.sh"

raws=() processed=() ratios=() met=0
for i in $(seq "$runs"); do
	# the previous pgtask run's dead rows (its destroyed topic) vacuumed first: autovacuum
	# would clean them during the raw run, slowing that side alone
	checkpoint "$pgtask_url"
	raw="$(raw_baseline "$raw_url")"
	life="$(field lifecycle_rows_per_second "$raw")"
	[[ -n "$life" ]] || { echo "sustained: run $i: the baseline gave no figure: $raw" >&2; exit 1; }
	rate="$(awk -v l="$life" -v f="$fraction" 'BEGIN { printf "%.0f", l * f }')"
	checkpoint "$pgtask_url"
	out="$(DATABASE_URL="$pgtask_url" "$pgtask" bench --mode sustained --duration "$duration" --rate "$rate" \
		--pushers 2 --push-batch 1000 --json "$@" | tail -n 1)"
	done_ps="$(field tasks_per_second "$out")"   # processed per second
	growth="$(field backlog_growth_per_second "$out")"
	[[ -n "$done_ps" && -n "$growth" ]] || { echo "sustained: run $i gave no figures: $out" >&2; exit 1; }
	verdict="$(awk -v p="$done_ps" -v g="$growth" -v r="$rate" \
		'BEGIN { print (p >= 0.99 * r && g < 0.01 * r) ? "met" : "not met" }')"
	[[ "$verdict" == met ]] && met=$((met + 1))
	raws+=("$life") processed+=("$done_ps")
	ratios+=("$(awk -v p="$done_ps" -v l="$life" 'BEGIN { print 100 * p / l }')")
	awk -v i="$i" -v l="$life" -v r="$rate" -v p="$done_ps" -v g="$growth" -v v="$verdict" 'BEGIN {
		printf "run %d: raw lifecycle %6.0f, pushed at %6.0f/s: processed %6.0f/s (%5.1f %% of raw), backlog %+7.0f/s: %s\n",
			i, l, r, p, 100 * p / l, g, v }'
done
mr="$(printf '%s\n' "${raws[@]}" | median)"
mp="$(printf '%s\n' "${processed[@]}" | median)"
mq="$(printf '%s\n' "${ratios[@]}" | median)"
awk -v r="$mr" -v p="$mp" -v q="$mq" -v n="$runs" -v m="$met" 'BEGIN {
	printf "median of %d runs: raw lifecycle %.0f rows/s, processed %.0f/s (median ratio %.1f %%); target met in %d of %d\n",
		n, r, p, q, m, n }'

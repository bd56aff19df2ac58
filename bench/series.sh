#!/usr/bin/env bash
# A series of burn-down pairs for BENCHMARKS.md: the raw baseline (bench/baseline.sh) and
# pgtask's burn-down (pgtask bench), run alternately, each right after a VACUUM and a
# CHECKPOINT (bench/common.sh).
#
#   bench/series.sh PGTASK_DATABASE_URL RAW_DATABASE_URL [PAIRS] [-- BENCH_FLAGS...]
#
# PGTASK_DATABASE_URL must hold the pgtask schema (pgtask migrate up); RAW_DATABASE_URL
# is a scratch database (the baseline creates and drops its table "jobs" there). PAIRS
# defaults to 5; BENCH_FLAGS are added to `pgtask bench --tasks 200000 --pushers 2
# --json`. PGTASK overrides the binary (default: built from this checkout).
#
# Why the CHECKPOINT: a run writes about a gigabyte of WAL, so the checkpoint it
# triggers lands in whatever runs next, which then pays the full-page images of every
# page it touches first. Starting each run right after a checkpoint gives every run the
# same start. CHECKPOINT needs a superuser (or the pg_checkpoint role).
#
# It prints one line per pair (raw lifecycle, raw two-statement lifecycle, pgtask
# tasks/s, push/s, process/s, and the ratio) and, last, the medians and their ratio.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
usage() { sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

[[ $# -ge 2 && "$1" != -* ]] || usage
pgtask_url="$1" raw_url="$2"
shift 2
pairs=5
if [[ $# -gt 0 && "$1" != "--" ]]; then
	pairs="$1"
	shift
fi
[[ "$pairs" =~ ^[1-9][0-9]*$ ]] || { echo "series: PAIRS must be a positive number, got $pairs" >&2; exit 2; }
if [[ $# -gt 0 ]]; then
	[[ "$1" == "--" ]] || usage
	shift
fi

# shellcheck source=bench/common.sh
source "$here/common.sh"

raws=() ours=()
for i in $(seq "$pairs"); do
	# the previous pgtask run's dead rows (its destroyed topic) vacuumed first: autovacuum
	# would clean them during the raw run, slowing that side alone
	checkpoint "$pgtask_url"
	raw="$(raw_baseline "$raw_url")"
	checkpoint "$pgtask_url"
	out="$(DATABASE_URL="$pgtask_url" "$pgtask" bench --tasks 200000 --pushers 2 --json "$@" | tail -n 1)"
	life="$(field lifecycle_rows_per_second "$raw")"
	two="$(field two_step_lifecycle_rows_per_second "$raw")"
	tps="$(field tasks_per_second "$out")"
	push="$(field push_per_second "$out")"
	process="$(field process_per_second "$out")"
	[[ -n "$life" && -n "$tps" ]] || { echo "series: pair $i gave no figures: $raw / $out" >&2; exit 1; }
	raws+=("$life") ours+=("$tps")
	awk -v i="$i" -v l="$life" -v w="$two" -v t="$tps" -v p="$push" -v q="$process" 'BEGIN {
		printf "pair %d: raw lifecycle %6.0f (two statements %6.0f)   pgtask %6.0f tasks/s (push %6.0f, process %6.0f)   %5.1f %%\n",
			i, l, w, t, p, q, 100 * t / l }'
done
mr="$(printf '%s\n' "${raws[@]}" | median)"
mo="$(printf '%s\n' "${ours[@]}" | median)"
awk -v r="$mr" -v o="$mo" -v n="$pairs" 'BEGIN {
	printf "median of %d pairs: raw lifecycle %.0f rows/s, pgtask %.0f tasks/s: %.1f %% of raw\n", n, r, o, 100 * o / r }'

# Helpers shared by bench/series.sh and bench/sustained.sh; sourced, not run. They
# expect $here to be the bench directory.

# pgtask: the binary to benchmark, $PGTASK or a build of this checkout in a temporary
# directory removed when the script exits.
pgtask="${PGTASK:-}"
if [[ -z "$pgtask" ]]; then
	build="$(mktemp -d)"
	trap 'rm -rf "$build"' EXIT
	pgtask="$build/pgtask"
	(cd "$here/.." && go build -o "$pgtask" ./cmd/pgtask)
fi

# field NAME JSON: the number NAME in the one-line JSON object.
field() { sed -n "s/.*\"$1\":\(-\{0,1\}[0-9.]*\).*/\1/p" <<<"$2"; }
# median: the median of the numbers on standard input, one per line.
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# checkpoint URL: a VACUUM and a CHECKPOINT, so that the next run starts with no dead
# rows of an earlier one to clean (a destroyed topic's tasks are deleted from the table
# it shared with other topics, and autovacuum would clean them during the next run) and
# no dirty pages to flush.
checkpoint() { psql -qAt "$1" -c VACUUM -c CHECKPOINT >/dev/null; }
# raw_baseline URL: the last line (JSON) of a bench/baseline.sh run, after a CHECKPOINT.
# A run during which autovacuum processed the baseline's table measured another regime
# (its claims no longer step over the index entries of the rows already done, and run two
# to three times faster): it is noted on standard error and repeated, up to 4 runs in all;
# the fourth is kept whatever happened.
raw_baseline() {
	local out try
	for try in 1 2 3 4; do
		checkpoint "$1"
		out="$("$here/baseline.sh" "$1" | tail -n 1)"
		if [[ "$out" != *'"autovacuumed":true'* && "$out" != *'"two_step_autovacuumed":true'* ]] || ((try == 4)); then
			break
		fi
		echo "baseline: autovacuum processed jobs during run $try ($(field lifecycle_rows_per_second "$out") rows/s), repeating it" >&2
	done
	printf '%s\n' "$out"
}

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
# checkpoint URL: a CHECKPOINT, so that the next run starts with no dirty pages to flush.
checkpoint() { psql -qAt "$1" -c CHECKPOINT >/dev/null; }

#!/usr/bin/env bash
# The raw-SQL baseline of BENCHMARKS.md: the fastest a queue could move rows through this
# PostgreSQL, measured with pgbench on a minimal one-index jobs table (bench/sql).
#
#   bench/baseline.sh DATABASE_URL [ROWS] [CLIENTS]      (defaults 200000 rows, 2 clients)
#   bench/baseline.sh --micro DATABASE_URL [SECONDS]     (each single script for SECONDS, 2 clients)
#
# The lifecycle: create the table, bulk insert ROWS jobs (100 per statement, CLIENTS
# connections), then claim 1000 at a time with SKIP LOCKED and mark them done (CLIENTS
# connections) until none is left. It prints insert, claim+done and whole-lifecycle
# rows/s as human lines and, last, one JSON line. The lifecycle runs twice: claim and
# done in one statement (one update per row: the limit), then the two-transaction form a
# queue runs (claim marks running, a second statement marks done: two updates per row).
#
# It creates and drops the table "jobs" in DATABASE_URL: use a scratch database. PGBENCH
# overrides the pgbench binary (default: on PATH, else PostgreSQL 15's).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sql="$here/sql"
pgbench="${PGBENCH:-$(command -v pgbench || echo /usr/lib/postgresql/15/bin/pgbench)}"

usage() { sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

now() { date +%s.%N; }
rate() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.0f", n / s }'; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

# run_pgbench SCRIPT TRANSACTIONS_PER_CLIENT CLIENTS: runs quietly, fails loudly.
run_pgbench() {
	local out
	if ! out="$("$pgbench" -n -M prepared -c "$3" -j "$3" -t "$2" -f "$1" "$url" 2>&1)"; then
		printf '%s\n' "$out" >&2
		return 1
	fi
	if grep -q 'number of failed transactions: [1-9]' <<<"$out"; then
		printf '%s\n' "$out" >&2
		return 1
	fi
}

pending() { psql -qAt "$url" -c "SELECT count(*) FROM jobs WHERE state <> 2"; }

# lifecycle CLAIM_SCRIPT LABEL: prints the figures and sets ins_rate, claim_rate, life_rate.
lifecycle() {
	local claim="$1" label="$2" t0 t1 t2 per_client left
	psql -q "$url" -f "$sql/schema.sql" >/dev/null
	per_client=$(( rows / 100 / clients ))
	t0=$(now)
	run_pgbench "$sql/insert_100.sql" "$per_client" "$clients"
	t1=$(now)
	# one extra round per client: SKIP LOCKED can leave a claim short while the other
	# client holds rows, so the last claims may find fewer than 1000 (or none).
	run_pgbench "$claim" $(( rows / 1000 / clients + 1 )) "$clients"
	t2=$(now)
	left=$(pending)
	if [[ "$left" != 0 ]]; then
		echo "baseline: $left rows not done after the claim phase" >&2
		return 1
	fi
	# Autovacuum's launcher visits a database about once a minute; when a worker reaches
	# jobs during the claims, it removes the index entries of the rows already done, which
	# every claim otherwise steps over, and the claims run two to three times faster: another
	# regime, which sustained.sh and series.sh do not take as the baseline.
	autovacuumed=$(psql -qAt "$url" -c "SELECT coalesce((SELECT autovacuum_count FROM pg_stat_user_tables
		WHERE relid = 'jobs'::regclass), 0) + (SELECT count(*) FROM pg_stat_progress_vacuum WHERE relid = 'jobs'::regclass) > 0")
	[[ "$autovacuumed" == t ]] && autovacuumed=true || autovacuumed=false
	ins_rate=$(rate "$rows" "$(secs "$t0" "$t1")")
	claim_rate=$(rate "$rows" "$(secs "$t1" "$t2")")
	life_rate=$(rate "$rows" "$(secs "$t0" "$t2")")
	printf '%-34s insert %8s rows/s (%ss)   claim+done %8s rows/s (%ss)   lifecycle %8s rows/s\n' \
		"$label" "$ins_rate" "$(secs "$t0" "$t1")" "$claim_rate" "$(secs "$t1" "$t2")" "$life_rate"
	if [[ "$autovacuumed" == true ]]; then
		echo "  (autovacuum processed jobs during this lifecycle)"
	fi
}

micro() {
	local seconds="$1" f tps
	for f in insert_1 insert_100 claim_done_1 claim_done_100 claim_done_1000 claim_then_done_100 claim_then_done_1000; do
		psql -q "$url" -f "$sql/schema.sql" >/dev/null
		if [[ "$f" == claim* ]]; then
			# enough pending rows for the whole run
			psql -q "$url" -c "INSERT INTO jobs (payload) SELECT '' FROM generate_series(1, 3000000)" >/dev/null
		fi
		tps=$("$pgbench" -n -M prepared -c 2 -j 2 -T "$seconds" -f "$sql/$f.sql" "$url" 2>&1 |
			sed -n 's/^tps = \([0-9.]*\).*/\1/p')
		local per=${f##*_}
		printf '%-22s %10.0f statements/s  %10.0f rows/s\n' "$f" "$tps" "$(awk -v t="$tps" -v n="$per" 'BEGIN { print t * n }')"
	done
	psql -q "$url" -c "DROP TABLE jobs" >/dev/null
}

if [[ "${1:-}" == "--micro" ]]; then
	[[ $# -ge 2 ]] || usage
	url="$2"
	micro "${3:-5}"
	exit 0
fi
[[ $# -ge 1 && "$1" != -* ]] || usage
url="$1"
rows="${2:-200000}"
clients="${3:-2}"
(( rows % (1000 * clients) == 0 )) || { echo "baseline: ROWS must be a multiple of 1000 x CLIENTS" >&2; exit 2; }

lifecycle "$sql/claim_done_1000.sql" "claim+done in one statement:"
one_ins=$ins_rate one_claim=$claim_rate one_life=$life_rate one_av=$autovacuumed
lifecycle "$sql/claim_then_done_1000.sql" "claim, then done (2 statements):"
two_ins=$ins_rate two_claim=$claim_rate two_life=$life_rate two_av=$autovacuumed
psql -q "$url" -c "DROP TABLE jobs" >/dev/null
printf '{"rows":%d,"clients":%d,"insert_rows_per_second":%s,"claim_done_rows_per_second":%s,"lifecycle_rows_per_second":%s,"autovacuumed":%s,"two_step_insert_rows_per_second":%s,"two_step_claim_done_rows_per_second":%s,"two_step_lifecycle_rows_per_second":%s,"two_step_autovacuumed":%s}\n' \
	"$rows" "$clients" "$one_ins" "$one_claim" "$one_life" "$one_av" "$two_ins" "$two_claim" "$two_life" "$two_av"

#!/usr/bin/env bash
# Chaos: pgtask's processors killed with kill -9 and PostgreSQL restarted under them, and
# not a task lost, stranded or run twice at once.
#
#   bench/chaos.sh
#
# It builds pgtask and processor from this checkout, starts a throwaway PostgreSQL 15
# cluster on 127.0.0.1:$PORT (initdb as user postgres, trust auth, default settings, its
# data under /var/tmp), pushes TASKS tasks to topic "chaos" and starts PROCESSORS
# `processor --exec bench/faults/handler.sh` (each run of a task is logged in a file and
# holds a lock on the task, so that two runs of one task at once are caught). Every
# KILL_EVERY seconds it kills one processor, chosen at random, with kill -9 and starts a
# replacement at once; after each 1/(RESTARTS+1) of the runs it restarts PostgreSQL,
# alternately `pg_ctl restart -m fast` and `-m immediate` (a crash and its recovery). When
# every task is SUCCEEDED (or after DEADLINE seconds) it stops the processors with
# SIGTERM and counts:
#   lost: pushed and not SUCCEEDED, ACTIVE or READY (missing, FAILED, ...);
#   stranded: still ACTIVE or READY;
#   overlapping runs: runs that started while another run of the task was going on;
#   re-runs: runs beyond the first of a task (those killed with their processor);
#   successes without a run, and handler processes left once the processors are gone.
# It prints one line, e.g.
#   chaos: 100000 tasks, 4 processors, 41 kill -9, 2 PostgreSQL restarts (fast, immediate),
#   212 s: 0 lost, 0 stranded, 0 overlapping runs, 0 successes without a run, 318 re-runs
#   of 305 tasks; ERROR lines: none
# (on one line) and exits 1 when any of the counts before the re-runs is not 0. The
# processors' logs are kept on failure (the path is printed), everything is removed on
# success, and the cluster and every process are stopped on any exit, Ctrl-C included.
#
# Environment: TASKS (100000), PROCESSORS (4), KILL_EVERY (3 s), RESTARTS (2), PORT
# (5497), WORKERS (4, --workers of each processor), FAULTS_SLEEP (0.02 s, how long a run
# lasts), DEADLINE (1800 s), PGBIN (/usr/lib/postgresql/15/bin). It needs Go and the
# PostgreSQL 15 server binaries only, runs as root (PostgreSQL itself runs as postgres),
# and takes about 5 minutes with the defaults on a 2-core machine.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tasks="${TASKS:-100000}" processors="${PROCESSORS:-4}" kill_every="${KILL_EVERY:-3}"
restarts="${RESTARTS:-2}" port="${PORT:-5497}" workers="${WORKERS:-4}"
run_sleep="${FAULTS_SLEEP:-0.02}" deadline="${DEADLINE:-1800}"
pgbin="${PGBIN:-/usr/lib/postgresql/15/bin}"
for v in tasks processors kill_every workers deadline port; do
	[[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "chaos: ${v^^} must be a positive number, got ${!v}" >&2; exit 2; }
done
[[ "$restarts" =~ ^[0-9]+$ ]] || { echo "chaos: RESTARTS must be a number, got $restarts" >&2; exit 2; }
[[ "$run_sleep" =~ ^[0-9]*\.?[0-9]+$ ]] || { echo "chaos: FAULTS_SLEEP must be a number, got $run_sleep" >&2; exit 2; }
if (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
	echo "chaos: port $port is in use, set PORT" >&2
	exit 2
fi

work="$(mktemp -d /var/tmp/pgtask-chaos.XXXXXX)"
chmod 755 "$work"
pg="$work/pg" logs="$work/logs" faults="$work/faults" bin="$work/bin"
mkdir -p "$pg" "$logs" "$faults/locks" "$bin"
chown postgres: "$pg"
url="postgres://postgres@127.0.0.1:$port/chaos?sslmode=disable"
pids=() logs_of=() killed=() ok=0
say() { echo "chaos: $*" >&2; }
as_postgres() { (cd "$pg" && runuser -u postgres -- "$@"); }
sql() { "$pgbin/psql" -qAtX -v ON_ERROR_STOP=1 "$url" "$@"; }

cleanup() {
	local status=$?
	trap - EXIT INT TERM
	for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [[ -f "$pg/data/postmaster.pid" ]]; then
		as_postgres "$pgbin/pg_ctl" -D "$pg/data" -m immediate stop >/dev/null 2>&1 || true
	fi
	if ((ok)); then
		rm -rf "$work"
	else
		cp "$pg/server.log" "$logs/postgresql.log" 2>/dev/null || true
		rm -rf "$pg" "$bin" "$faults/locks"
		say "logs kept in $work"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "building pgtask and processor"
(cd "$here/.." && go build -o "$bin/pgtask" ./cmd/pgtask && go build -o "$bin/processor" ./cmd/processor)

say "starting PostgreSQL on 127.0.0.1:$port ($pg)"
as_postgres "$pgbin/initdb" -D "$pg/data" --auth=trust -U postgres -E UTF8 --locale=C >/dev/null
as_postgres "$pgbin/pg_ctl" -D "$pg/data" -l "$pg/server.log" -w -t 60 \
	-o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$pg" start >/dev/null
"$pgbin/psql" -qAtX "${url%/chaos*}/postgres" -c "CREATE DATABASE chaos"
DATABASE_URL="$url" "$bin/pgtask" migrate up >/dev/null
# Enough attempts that an expired lease (its processor killed) makes the task READY again
# at once rather than EXPIRED; a run that FAILS is counted apart (it should not happen).
DATABASE_URL="$url" "$bin/pgtask" topic add chaos --max-attempts 1000 --backoff-base 0s >/dev/null
pushed="$(sql -c "SELECT count(*) FROM task_push_batch('chaos',
	ARRAY(SELECT 'task-' || i FROM generate_series(1, $tasks) i))")"
[[ "$pushed" == "$tasks" ]] || { say "pushed $pushed tasks, not $tasks"; exit 1; }
say "pushed $tasks tasks"

# start SLOT: a processor in SLOT, logging to its own file.
started=0
start() {
	started=$((started + 1))
	FAULTS_DIR="$faults" FAULTS_SLEEP="$run_sleep" DATABASE_URL="$url" "$bin/processor" \
		--topic chaos --workers "$workers" --heartbeat 500ms --addr '' --log-format json \
		--exec "$here/faults/handler.sh" >"$logs/processor-$started.log" 2>&1 &
	pids[$1]=$! logs_of[$1]=$started
}
# left: the tasks ACTIVE or READY, empty while the server is down.
left() { sql -c "SELECT count(*) FROM task WHERE topic = 'chaos' AND state <= 1" 2>/dev/null || true; }
runs() { if [[ -f "$faults/runs" ]]; then wc -l <"$faults/runs"; else echo 0; fi; }

kills=0 restarted=0 modes=() exits=0 timed_out=0
begin=$SECONDS next_kill=$((SECONDS + kill_every))
for ((i = 0; i < processors; i++)); do start "$i"; done
say "started $processors processors, logs in $logs"
while :; do
	sleep 0.5
	[[ "$(left)" == 0 ]] && break
	if ((SECONDS - begin >= deadline)); then
		timed_out=1
		say "deadline: $(left) tasks left after $deadline s"
		break
	fi
	for ((i = 0; i < processors; i++)); do # a processor that stopped by itself
		if ! kill -0 "${pids[i]}" 2>/dev/null; then
			rc=0
			wait "${pids[i]}" || rc=$?
			exits=$((exits + 1))
			say "processor pid ${pids[i]} exited by itself with status $rc, starting another"
			start "$i"
		fi
	done
	if ((restarted < restarts)) && (($(runs) * (restarts + 1) >= (restarted + 1) * tasks)); then
		mode=fast
		((restarted % 2)) && mode=immediate
		t0=$(date +%s%N)
		as_postgres "$pgbin/pg_ctl" -D "$pg/data" -l "$pg/server.log" -m "$mode" -w -t 120 restart >/dev/null
		restarted=$((restarted + 1)) modes+=("$mode")
		say "PostgreSQL restarted (-m $mode, $((($(date +%s%N) - t0) / 1000000)) ms) after $(runs) runs"
	fi
	if ((SECONDS >= next_kill)); then
		i=$((RANDOM % processors))
		kill -9 "${pids[i]}" 2>/dev/null || true
		killed+=("$logs/processor-${logs_of[i]}.log")
		wait "${pids[i]}" 2>/dev/null || true
		kills=$((kills + 1)) next_kill=$((next_kill + kill_every))
		start "$i"
	fi
done
elapsed=$((SECONDS - begin))
say "stopping the processors after $elapsed s, $kills kills, $restarted restarts"

# A graceful stop: SIGTERM, up to a minute to finish (--shutdown-timeout is 30 s).
for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
for pid in "${pids[@]}"; do
	for ((t = 0; t < 600; t++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$pid" 2>/dev/null && { say "processor pid $pid still running a minute after SIGTERM"; kill -9 "$pid"; }
	rc=0
	wait "$pid" || rc=$?
	((rc == 0)) || { say "processor pid $pid exited with status $rc after SIGTERM"; exits=$((exits + 1)); }
done
pids=()
sleep 1
# Handler processes (guards, handler.sh, its sleep) left once the processors are gone: any
# process with this run's FAULTS_DIR in its environment.
orphans=0
for env in /proc/[0-9]*/environ; do
	if grep -qzx "FAULTS_DIR=$faults" "$env" 2>/dev/null; then
		orphans=$((orphans + 1))
		say "left running: $(tr '\0' ' ' <"${env%/environ}/cmdline" 2>/dev/null)"
	fi
done

touch "$faults/runs" "$faults/overlaps"
# The owners of the processors never killed: a lease of theirs taken back by an expiry
# was taken from a live process.
owner_of() { sed -n '1s/.*"owner":"\([^"]*\)".*/\1/p' "$1"; }
for log in "$logs"/processor-*.log; do
	[[ " ${killed[*]} " == *" $log "* ]] || owner_of "$log"
done >"$work/live-owners"
IFS="|" read -r lost stranded unrun extra reruns rerun_tasks failed expiries live_expiries < <(sql <<EOF
CREATE TEMP TABLE runs (sequence bigint, attempt integer, pid integer);
\copy runs FROM '$faults/runs' WITH (DELIMITER ' ')
CREATE TEMP TABLE live (owner text);
\copy live FROM '$work/live-owners'
WITH pushed AS (SELECT 'task-' || i AS identifier FROM generate_series(1, $tasks) i),
final AS (
    SELECT p.identifier, t.sequence, t.state
    FROM pushed p LEFT JOIN task_pretty t ON t.topic = 'chaos' AND t.identifier = p.identifier
), per_task AS (SELECT sequence, count(*) AS n FROM runs GROUP BY sequence),
errors AS (SELECT unnest(errors) AS error FROM task WHERE topic = 'chaos')
SELECT (SELECT count(*) FROM final WHERE state IS NULL OR state NOT IN ('SUCCEEDED', 'ACTIVE', 'READY')),
       (SELECT count(*) FROM final WHERE state IN ('ACTIVE', 'READY')),
       (SELECT count(*) FROM final f WHERE state = 'SUCCEEDED'
            AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.sequence = f.sequence)),
       (SELECT count(*) FROM task WHERE topic = 'chaos') - $tasks,
       (SELECT coalesce(sum(n - 1), 0) FROM per_task),
       (SELECT count(*) FROM per_task WHERE n > 1),
       (SELECT count(*) FROM errors WHERE error NOT LIKE 'expired: %'),
       (SELECT count(*) FROM errors WHERE error LIKE 'expired: %'),
       (SELECT count(*) FROM errors e JOIN live l ON e.error = 'expired: owner ' || l.owner || ' stopped heart-beating')
EOF
)
say "$expiries leases taken back by expiries, $live_expiries of them from processors never killed"
((failed == 0)) || say "failed runs: $(sql -c "SELECT DISTINCT left(e, 200) FROM task, unnest(errors) e
	WHERE topic = 'chaos' AND e NOT LIKE 'expired: %' LIMIT 5")"
overlaps="$(wc -l <"$faults/overlaps")"
# ERROR lines of every processor's log, counted by message.
errors="$(cat "$logs"/processor-*.log | sed -n 's/.*"level":"ERROR","msg":"\(\([^"\\]\|\\.\)*\)".*/\1/p' |
	sort | uniq -c | sort -rn | awk '{ n = $1; $1 = ""; printf "%s%s ×%d", (NR > 1 ? ", " : ""), substr($0, 2), n }')"
warnings="$(cat "$logs"/processor-*.log | sed -n 's/.*"level":"WARN","msg":"\(\([^"\\]\|\\.\)*\)".*/\1/p' |
	sort | uniq -c | sort -rn | awk '{ n = $1; $1 = ""; printf "%s%s ×%d", (NR > 1 ? ", " : ""), substr($0, 2), n }')"
[[ -n "$warnings" ]] && say "WARN lines: $warnings"

line="chaos: $tasks tasks, $processors processors, $kills kill -9, $restarted PostgreSQL restarts"
((restarted)) && line+=" ($(IFS=,; echo "${modes[*]}" | sed 's/,/, /g'))"
line+=", $elapsed s: $lost lost, $stranded stranded, $overlaps overlapping runs, $unrun successes without a run"
((extra)) && line+=", $extra tasks more than pushed"
((failed)) && line+=", $failed failed runs"
((orphans)) && line+=", $orphans handler processes outliving their processor"
((exits)) && line+=", $exits processor exits not by kill -9"
((timed_out)) && line+=", deadline reached"
line+=", $reruns re-runs of $rerun_tasks tasks; ERROR lines: ${errors:-none}"
echo "$line"
if ((lost || stranded || overlaps || unrun || extra || failed || orphans || timed_out)); then
	exit 1
fi
ok=1

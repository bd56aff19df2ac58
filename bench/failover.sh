#!/usr/bin/env bash
# Failover: pgtask's processors on a highly-available PostgreSQL (pg_auto_failover: a
# monitor and two data nodes, the secondary a synchronous standby, all on this machine)
# while `pg_autoctl perform failover` swaps primary and secondary under them, and not a
# task lost, stranded or run twice at once, nor a processor dead.
#
#   bench/failover.sh [--short]
#
# It installs the Debian packages postgresql-$PG_VERSION-auto-failover and
# pg-auto-failover-cli when missing (apt-get), builds pgtask and processor from this
# checkout, creates the formation on 127.0.0.1 ports MONITOR_PORT, NODE1_PORT and
# NODE2_PORT (trust auth, no SSL, data under /var/tmp), pushes TASKS tasks to topic
# "failover" and starts PROCESSORS `processor --exec bench/faults/handler.sh` (each run
# of a task is logged in a file and holds a lock on the task, so that two runs of one task
# at once are caught), all connected through the multi-host URL
#   postgres://postgres@127.0.0.1:NODE1_PORT,127.0.0.1:NODE2_PORT/pgtask?target_session_attrs=read-write
# After each 1/(FAILOVERS+1) of the runs it performs a failover and waits until the
# formation has a primary and a secondary again. A sampler notes every 50 ms whether a run
# started; the stall of a failover is the longest time without a new run from the start of
# `pg_autoctl perform failover` to STALL_WINDOW seconds later (or the next failover, or
# the last run). When every task is SUCCEEDED (or when nothing moved for STUCK seconds)
# it checks that every processor is still alive, stops them with SIGTERM and counts:
#   lost: pushed and missing, or in a state other than SUCCEEDED and ACTIVE at the end;
#   stranded: still ACTIVE at the end, or never run;
#   overlapping runs: runs that started while another run of the task was going on;
#   re-runs: runs beyond the first of a task (a lost reply may cause some).
# It prints one line, e.g.
#   failover: 60000 tasks, 3 processors, 2 failovers (stalls 1.8 s, 2.1 s), 95 s: 0 lost,
#   0 stranded, 0 overlapping runs, 12 re-runs, 3 of 3 processors alive; ERROR lines: none
# (on one line, the only one on standard output; progress goes to standard error) and
# exits 1 when lost, stranded or overlapping runs are not 0, a processor died, a failover
# failed or a stall exceeded STALL_LIMIT seconds beyond the time the formation had no
# primary accepting writes (pg_auto_failover's part, which on a loaded machine takes
# seconds: no processor can run a task then). Every pg_autoctl, PostgreSQL and
# processor it started is stopped on any exit, Ctrl-C included; its directory is removed
# on success (unless KEEP_LOGS is set), and on failure everything but the logs is (the
# path is printed).
#
# --short: 1 failover of 10 000 tasks (TASKS and FAILOVERS still override), as .ci/run
# does: about a minute on a quiet 2-core machine, formation included.
#
# Environment: TASKS (60000), FAILOVERS (2), PROCESSORS (3), WORKERS (4, --workers of
# each processor), FAULTS_SLEEP (none, how long a run lasts), STALL_LIMIT (3 s),
# STALL_WINDOW (30 s), STUCK (90 s), MONITOR_PORT (5601), NODE1_PORT (5602), NODE2_PORT
# (5603), PG_VERSION (15; its binaries in /usr/lib/postgresql/$PG_VERSION/bin). It needs
# Go, the PostgreSQL server binaries, bash 5 and, to install the packages, apt; it runs
# as root (PostgreSQL and pg_autoctl themselves run as user postgres). The full run takes
# 3 to 6 minutes on a 2-core machine, depending on what else runs.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

short=0
case "${1:-}" in
--short) short=1 ;;
"") ;;
*) usage ;;
esac
(($# <= 1)) || usage
if ((short)); then
	tasks="${TASKS:-10000}" failovers="${FAILOVERS:-1}"
else
	tasks="${TASKS:-60000}" failovers="${FAILOVERS:-2}"
fi
processors="${PROCESSORS:-3}" workers="${WORKERS:-4}" run_sleep="${FAULTS_SLEEP:-}"
stall_limit="${STALL_LIMIT:-3}" stall_window="${STALL_WINDOW:-30}" stuck="${STUCK:-90}"
monitor_port="${MONITOR_PORT:-5601}" port1="${NODE1_PORT:-5602}" port2="${NODE2_PORT:-5603}"
pg_version="${PG_VERSION:-15}"
pgbin="/usr/lib/postgresql/$pg_version/bin"

say() { echo "failover: $*" >&2; }
die() { say "$*"; exit 1; }
for v in tasks processors workers stall_window stuck monitor_port port1 port2 pg_version; do
	[[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { say "${v^^} must be a positive number, got ${!v}"; exit 2; }
done
[[ "$failovers" =~ ^[0-9]+$ ]] || { say "FAILOVERS must be a number, got $failovers"; exit 2; }
[[ -z "$run_sleep" || "$run_sleep" =~ ^[0-9]*\.?[0-9]+$ ]] || { say "FAULTS_SLEEP must be a number, got $run_sleep"; exit 2; }
[[ "$stall_limit" =~ ^[0-9]*\.?[0-9]+$ ]] || { say "STALL_LIMIT must be a number, got $stall_limit"; exit 2; }
((EUID == 0)) || { say "run it as root: PostgreSQL and pg_autoctl run as user postgres (runuser)"; exit 2; }
for port in "$monitor_port" "$port1" "$port2"; do
	if (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		say "port $port is in use: set MONITOR_PORT, NODE1_PORT and NODE2_PORT to free ones"
		exit 2
	fi
done

# The packages, installed only when missing, so that a machine that has them does no apt
# work; apt-get update only when the install fails without it.
packages=()
for p in "postgresql-$pg_version-auto-failover" pg-auto-failover-cli; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || packages+=("$p")
done
if ((${#packages[@]})); then
	say "installing ${packages[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q "${packages[@]}" >/dev/null 2>&1; then
		apt-get update -q >/dev/null 2>&1 || true
		apt-get install -y -q "${packages[@]}" >&2 || die "apt-get install ${packages[*]} failed"
	fi
fi
autoctl="$(PATH="$pgbin:$PATH" command -v pg_autoctl)" || die "no pg_autoctl after installing pg-auto-failover-cli"
[[ -x "$pgbin/postgres" ]] || die "no PostgreSQL $pg_version server in $pgbin (set PG_VERSION)"
id postgres >/dev/null 2>&1 || die "there is no user postgres"

work="$(mktemp -d /var/tmp/pgtask-failover.XXXXXX)"
chmod 755 "$work"
pg="$work/pg" logs="$work/logs" faults="$work/faults" bin="$work/bin"
mkdir -p "$pg" "$logs" "$faults/locks" "$bin"
touch "$faults/runs" "$faults/overlaps"
chown postgres: "$pg"
hosts="127.0.0.1:$port1,127.0.0.1:$port2"
# url DATABASE: the multi-host URL of DATABASE, which reaches whichever node is primary.
url() { echo "postgres://postgres@$hosts/$1?sslmode=disable&target_session_attrs=read-write"; }
url="$(url pgtask)"
monitor_url="postgres://autoctl_node@127.0.0.1:$monitor_port/pg_auto_failover?sslmode=disable"
nodes=(monitor node1 node2)
declare -A autoctl_pids=()
pids=() sampler="" prober="" ok=0

# as_postgres CMD...: CMD as user postgres in a clean environment that keeps pg_autoctl's
# configuration, state and pid files in $pg.
as_postgres() {
	(cd "$pg" && runuser -u postgres -- env -i PATH="$pgbin:/usr/local/bin:/usr/bin:/bin" HOME="$pg" \
		LANG=C.UTF-8 XDG_CONFIG_HOME="$pg/config" XDG_DATA_HOME="$pg/share" XDG_RUNTIME_DIR="$pg/run" "$@")
}
# sql ARGS...: psql on the primary, through the multi-host URL.
sql() { "$pgbin/psql" -qAtX -v ON_ERROR_STOP=1 "$url&connect_timeout=10" "$@"; }
# run NODE: pg_autoctl run for NODE, in the background, appending to its log.
run() {
	as_postgres "$autoctl" run --pgdata "$pg/$1" >>"$logs/$1.log" 2>&1 &
	autoctl_pids[$1]=$!
}
now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# stop_formation: pg_autoctl stop for every node (it stops PostgreSQL with it), then,
# for whatever still runs 30 s later, an immediate stop and SIGKILL.
stop_formation() {
	local node pid t
	for node in node1 node2 monitor; do
		[[ -n "${autoctl_pids[$node]:-}" ]] && as_postgres "$autoctl" stop --pgdata "$pg/$node" >/dev/null 2>&1 || true
	done
	for node in node1 node2 monitor; do
		pid="${autoctl_pids[$node]:-}"
		[[ -n "$pid" ]] || continue
		for ((t = 0; t < 300; t++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		if kill -0 "$pid" 2>/dev/null; then
			say "pg_autoctl of $node still running 30 s after pg_autoctl stop, stopping it at once"
			as_postgres "$autoctl" stop --pgdata "$pg/$node" --immediate >/dev/null 2>&1 || true
			sleep 2
			pkill -KILL -P "$pid" 2>/dev/null || true
			kill -KILL "$pid" 2>/dev/null || true
		fi
		wait "$pid" 2>/dev/null || true
	done
	for node in "${nodes[@]}"; do # a postmaster left behind by a killed pg_autoctl
		if [[ -f "$pg/$node/postmaster.pid" ]] && kill -0 "$(head -n 1 "$pg/$node/postmaster.pid")" 2>/dev/null; then
			as_postgres "$pgbin/pg_ctl" -D "$pg/$node" -m immediate -w stop >/dev/null 2>&1 ||
				kill -KILL "$(head -n 1 "$pg/$node/postmaster.pid")" 2>/dev/null || true
		fi
	done
	autoctl_pids=()
}

cleanup() {
	local status=$? node
	trap - EXIT INT TERM
	for pid in "${pids[@]}" $sampler $prober; do kill -9 "$pid" 2>/dev/null || true; done
	stop_formation
	wait 2>/dev/null || true
	if ((ok)) && [[ -z "${KEEP_LOGS:-}" ]]; then
		rm -rf "$work"
	else
		for node in "${nodes[@]}"; do
			mkdir -p "$logs/postgresql-$node"
			cp "$pg/$node"/log/* "$pg/$node/startup.log" "$logs/postgresql-$node/" 2>/dev/null || true
		done
		rm -rf "$pg" "$bin" "$faults/locks"
		say "logs kept in $work"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# state: the formation as "NAME:REPORTED/ASSIGNED ..." (empty when the monitor does not
# answer); steady: its primary's name when it has one primary and one secondary.
state() {
	as_postgres "$autoctl" show state --pgdata "$pg/monitor" --json 2>/dev/null | awk -F'"' '
		/"nodename"/ { name = $4 }
		/"current_group_state"/ { current = $4 }
		/"assigned_group_state"/ { printf "%s%s:%s/%s", sep, name, current, $4; sep = " " }' || true
}
steady() {
	local s
	s="$(state)"
	[[ "$s" =~ ^([a-z0-9]+):primary/primary\ [a-z0-9]+:secondary/secondary$ ||
		"$s" =~ ^[a-z0-9]+:secondary/secondary\ ([a-z0-9]+):primary/primary$ ]] || return 1
	echo "${BASH_REMATCH[1]}"
}
# wait_steady TIMEOUT WHAT: waits for a primary and a secondary, prints the primary.
wait_steady() {
	local t
	for ((t = 0; t < $1 * 5; t++)); do
		steady && return
		sleep 0.2
	done
	die "the formation has no primary and secondary $1 s after $2: $(state || true) (logs: $logs)"
}

say "building pgtask and processor"
(cd "$here/.." && go build -o "$bin/pgtask" ./cmd/pgtask && go build -o "$bin/processor" ./cmd/processor)

say "creating the formation in $pg: monitor on port $monitor_port, nodes on $port1 and $port2"
ssl=(--auth trust --no-ssl --hostname 127.0.0.1 --pgctl "$pgbin/pg_ctl")
as_postgres "$autoctl" create monitor --pgdata "$pg/monitor" --pgport "$monitor_port" "${ssl[@]}" \
	>>"$logs/monitor.log" 2>&1 || die "pg_autoctl create monitor failed, see $logs/monitor.log"
run monitor
for ((t = 0; ; t++)); do
	"$pgbin/pg_isready" -q -d "$monitor_url" && break
	((t < 600)) || die "the monitor does not answer 60 s after pg_autoctl run, see $logs/monitor.log"
	sleep 0.1
done
for i in 1 2; do
	port="port$i"
	as_postgres "$autoctl" create postgres --pgdata "$pg/node$i" --pgport "${!port}" --listen 127.0.0.1 \
		--name "node$i" --monitor "$monitor_url" "${ssl[@]}" >>"$logs/node$i.log" 2>&1 ||
		die "pg_autoctl create postgres (node$i) failed, see $logs/node$i.log"
	run "node$i"
	# The first node becomes a primary on its own ("single") before the second joins.
	for ((t = 0; i == 1; t++)); do
		[[ "$(state)" == node1:single/single ]] && break
		((t < 900)) || die "node1 is not single 180 s after pg_autoctl run: $(state) (logs: $logs)"
		sleep 0.2
	done
done
primary="$(wait_steady 180 "creating the nodes")"
say "formation ready: $(state)"

"$pgbin/psql" -qAtX -v ON_ERROR_STOP=1 "$(url postgres)" -c "CREATE DATABASE pgtask" ||
	die "CREATE DATABASE pgtask failed on the primary"
# The standby must have it too before the processors connect: a client of the
# multi-host URL that reaches the standby first while it does not stops at its error.
for port in "$port1" "$port2"; do
	for ((t = 0; ; t++)); do
		"$pgbin/psql" -qAtX "postgres://postgres@127.0.0.1:$port/pgtask?sslmode=disable" -c "SELECT" >/dev/null 2>&1 && break
		((t < 300)) || die "database pgtask not reachable on port $port 30 s after it was created"
		sleep 0.1
	done
done
DATABASE_URL="$url" "$bin/pgtask" migrate up >/dev/null
DATABASE_URL="$url" "$bin/pgtask" topic add failover >/dev/null
pushed="$(sql -c "SELECT count(*) FROM task_push_batch('failover',
	ARRAY(SELECT 'task-' || i FROM generate_series(1, $tasks) i))")"
[[ "$pushed" == "$tasks" ]] || die "pushed $pushed tasks, not $tasks"
say "pushed $tasks tasks; synchronous_standby_names on $primary: $(sql -c 'SHOW synchronous_standby_names')"

# sample: every 50 ms, the time and the size of the runs file when it changed.
sample() {
	local size last=-1
	while :; do
		size="$(stat -c %s "$faults/runs")"
		if [[ "$size" != "$last" ]]; then
			echo "$EPOCHREALTIME $size"
			last="$size"
		fi
		sleep 0.05
	done
}
sample >"$work/samples" 2>/dev/null &
sampler=$!

begin="$(now)"
for ((i = 1; i <= processors; i++)); do
	FAULTS_DIR="$faults" FAULTS_SLEEP="$run_sleep" DATABASE_URL="$url" "$bin/processor" \
		--topic failover --workers "$workers" --addr '' --log-format json \
		--exec "$here/faults/handler.sh" >"$logs/processor-$i.log" 2>&1 &
	pids+=($!)
done
say "started $processors processors, logs in $logs"

runs() { wc -l <"$faults/runs"; }
# left: the tasks still READY or ACTIVE, empty while no primary answers.
left() { sql -c "SELECT count(*) FROM task WHERE topic = 'failover' AND state IN (0, 1)" 2>/dev/null || true; }
# moved: whether runs or the tasks left changed since the last call (or STUCK s ago).
last_moved="" moved_at=$SECONDS
moved() {
	local m
	m="$(runs) $1"
	if [[ "$m" != "$last_moved" ]]; then
		last_moved="$m" moved_at=$SECONDS
	fi
	((SECONDS - moved_at < stuck))
}

# probe: every 100 ms, the time and whether a read-write session could be opened (1 or 0).
probe() {
	while :; do
		t="$EPOCHREALTIME"
		if "$pgbin/psql" -qAtX "$url&connect_timeout=2" -c "SELECT" >/dev/null 2>&1; then
			echo "$t 1"
		else
			echo "$t 0"
		fi
		sleep 0.1
	done
}

starts=() durations=() unavailable=() split=() failed=0 done_at="" stuck_at=""
k=1 tick=0 n=""
while :; do
	sleep 0.2
	if ((tick++ % 5 == 0)); then # once a second
		n="$(left)"
		if [[ "$n" == 0 ]]; then
			done_at="$(now)"
			break
		fi
		if ! moved "$n"; then
			stuck_at="$(now)"
			say "nothing moved for $stuck s: $(runs) runs, ${n:-unknown} tasks left (READY or ACTIVE)"
			break
		fi
	fi
	if ((k <= failovers)) && (($(runs) * (failovers + 1) >= k * tasks)); then
		from="$(steady)" || die "no steady formation before failover $k: $(state)"
		say "failover $k after $(runs) runs: pg_autoctl perform failover (primary $from)"
		# The monitor of pg_auto_failover 2.0 may refuse the command with "deadlock
		# detected" (hapostgres/pg_auto_failover#1004), having changed nothing: it is then
		# tried again, up to 3 times, and the stall counted from the last try.
		probe >"$work/probe-$k" 2>/dev/null &
		prober=$!
		# The old primary's keeper going to wait_primary (its secondary seen unhealthy, on
		# a loaded machine) is no step of a failover: it then disables synchronous
		# replication and takes writes while the secondary is promoted, until it is
		# demoted and those writes are lost (seen: 30 s of it, its tasks all done there,
		# then run again on the new primary). A stall then is not pgtask's.
		waits_before="$(grep -c 'to "wait_primary"' "$logs/$from.log" || true)"
		for ((try = 1; ; try++)); do
			starts[k - 1]="$(now)"
			rc=0
			out="$(as_postgres "$autoctl" perform failover --pgdata "$pg/monitor" --group 0 --wait 120 2>&1)" || rc=$?
			printf '%s\n' "$out" >>"$logs/failover-$k.log"
			((rc)) || break
			why="$(grep -m 1 -o 'Monitor ERROR: .*' <<<"$out" || echo "exit status $rc")"
			if ((try < 3)) && [[ "$(steady)" == "$from" ]]; then
				say "failover $k: pg_autoctl perform failover failed and changed nothing ($why), trying again"
				sleep 1
				continue
			fi
			say "failover $k: pg_autoctl perform failover failed ($why), see $logs/failover-$k.log"
			failed=$((failed + 1))
			break
		done
		took="$(since "${starts[-1]}")"
		to="$(wait_steady 180 "failover $k")"
		durations+=("$(since "${starts[-1]}")")
		split[k - 1]=0
		if (($(grep -c 'to "wait_primary"' "$logs/$from.log" || true) > waits_before)); then
			split[k - 1]=1
			say "failover $k: pg_auto_failover kept $from writable (wait_primary: its secondary seen unhealthy) while it promoted the other node; the writes made there meanwhile are lost, and the stall is not counted"
		fi
		kill "$prober" 2>/dev/null || true
		wait "$prober" 2>/dev/null || true
		prober=""
		# No primary: from the probe's first failure after the start to its next success.
		unavailable+=("$(awk -v s="${starts[-1]}" '$1 >= s && !$2 && !down { down = $1 }
			down && $2 { up = $1; exit } END { printf "%.1f", down ? (up ? up : $1) - down : 0 }' "$work/probe-$k")")
		say "failover $k: primary $from -> $to; the command took $took s, primary and secondary after" \
			"${durations[-1]} s; no primary accepting writes for ${unavailable[-1]} s"
		[[ "$to" != "$from" ]] || { say "failover $k: the primary is still $from"; failed=$((failed + 1)); }
		k=$((k + 1))
	fi
done
performed=$((k - 1))
elapsed="$(since "$begin")"

# Alive: running and not a zombie, checked before the processors are asked to stop.
living=()
for pid in "${pids[@]}"; do
	if [[ -r "/proc/$pid/stat" ]] && [[ "$(awk '{ print $3 }' "/proc/$pid/stat")" != Z ]]; then
		living+=("$pid")
	else
		rc=0
		wait "$pid" || rc=$?
		say "processor pid $pid died during the run (exit status $rc)"
	fi
done
alive=${#living[@]} pids=("${living[@]}")
say "stopping the processors after $elapsed s, $performed failovers"
for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
for pid in "${pids[@]}"; do
	for ((t = 0; t < 600; t++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$pid" 2>/dev/null && { say "processor pid $pid still running a minute after SIGTERM"; kill -9 "$pid"; }
	rc=0
	wait "$pid" || rc=$?
	((rc == 0)) || say "processor pid $pid exited with status $rc after SIGTERM"
done
pids=()
kill "$sampler" 2>/dev/null || true
wait "$sampler" 2>/dev/null || true
sampler=""

# The stall of failover k: the longest time without a new run between its start and the
# end of its window: STALL_WINDOW s later, the next failover, or the last run when every
# task ran (when not, the time the run was stopped).
end="${done_at:-${stuck_at:-$(now)}}"
if [[ -n "$done_at" ]]; then
	end="$(tail -n 1 "$work/samples" | cut -d ' ' -f 1)"
fi
stalls=()
for ((i = 0; i < performed; i++)); do
	until="$(awk -v s="${starts[i]}" -v w="$stall_window" -v n="${starts[i + 1]:-}" -v e="$end" \
		'BEGIN { u = s + w; if (n != "" && n < u) u = n; if (e < u) u = e; printf "%.6f", u }')"
	stalls+=("$(awk -v s="${starts[i]}" -v u="$until" '
		$1 > s && $1 <= u { if ($1 - prev > max) max = $1 - prev; prev = $1 }
		BEGIN { prev = s; max = 0 }
		END { if (u - prev > max) max = u - prev; printf "%.1f", max }' "$work/samples")")
done
# pgtask's own part of a stall: the time without a new run while a primary accepted
# writes (the rest is pg_auto_failover's: no processor can run a task without one)
own=()
over=0
for ((i = 0; i < ${#stalls[@]}; i++)); do
	if ((${split[i]:-0})); then
		own+=("n/a") # pg_auto_failover's writable old primary (above)
		continue
	fi
	own+=("$(awk -v s="${stalls[i]}" -v u="${unavailable[i]:-0}" 'BEGIN { d = s - u; if (d < 0) d = 0; printf "%.1f", d }')")
	awk -v s="${own[i]}" -v l="$stall_limit" 'BEGIN { exit !(s > l) }' && over=$((over + 1))
done

read -r lost stranded unrun active reruns rerun_tasks other < <(sql -F ' ' <<EOF
CREATE TEMP TABLE runs (sequence bigint, attempt integer, pid integer);
\copy runs FROM '$faults/runs' WITH (DELIMITER ' ')
WITH pushed AS (SELECT 'task-' || i AS identifier FROM generate_series(1, $tasks) i),
final AS (
    SELECT p.identifier, t.sequence, t.state
    FROM pushed p LEFT JOIN task_pretty t ON t.topic = 'failover' AND t.identifier = p.identifier
), per_task AS (SELECT sequence, count(*) AS n FROM runs GROUP BY sequence)
SELECT (SELECT count(*) FROM final WHERE state IS NULL OR state NOT IN ('SUCCEEDED', 'ACTIVE')),
       (SELECT count(*) FROM final f WHERE state = 'ACTIVE'
            OR NOT EXISTS (SELECT 1 FROM runs r WHERE r.sequence = f.sequence)),
       (SELECT count(*) FROM final f WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.sequence = f.sequence)),
       (SELECT count(*) FROM final WHERE state = 'ACTIVE'),
       (SELECT coalesce(sum(n - 1), 0) FROM per_task),
       (SELECT count(*) FROM per_task WHERE n > 1),
       (SELECT coalesce(string_agg(state || ' ' || n, ', ' ORDER BY state), '-')
            FROM (SELECT coalesce(state, 'missing') AS state, count(*) AS n FROM final
                  WHERE state IS DISTINCT FROM 'SUCCEEDED' GROUP BY 1) s)
EOF
) || die "the final count failed"
overlaps="$(wc -l <"$faults/overlaps")"
((lost || stranded)) && say "tasks not SUCCEEDED: $other; never run: $unrun; ACTIVE: $active"

# Lines of every processor's log at LEVEL, counted by message: "message ×N, ...".
by_message() {
	cat "$logs"/processor-*.log | sed -n 's/.*"level":"'"$1"'","msg":"\(\([^"\\]\|\\.\)*\)".*/\1/p' |
		sort | uniq -c | sort -rn | awk '{ n = $1; $1 = ""; printf "%s%s ×%d", (NR > 1 ? ", " : ""), substr($0, 2), n }'
}
errors="$(by_message ERROR)"
warnings="$(by_message WARN)"
[[ -n "$warnings" ]] && say "WARN lines: $warnings"

line="failover: $tasks tasks, $processors processors, $performed failover$( ((performed == 1)) || echo s)"
# list UNIT VALUE...: "VALUE UNIT, VALUE UNIT".
list() { local unit="$1"; shift; printf "%s $unit, " "$@" | sed 's/, $//'; }
((performed)) && line+=" (stalls $(list s "${stalls[@]}"); no primary for $(list s "${unavailable[@]}"); with a primary $(list s "${own[@]}"))"
((performed < failovers)) && line+=" of $failovers"
((failed)) && line+=", $failed failed"
line+=", $(printf '%.0f' "$elapsed") s: $lost lost, $stranded stranded, $overlaps overlapping runs"
line+=", $reruns re-runs, $alive of $processors processors alive"
[[ -n "$stuck_at" ]] && line+=", stopped after $stuck s without progress"
line+="; ERROR lines: ${errors:-none}"
echo "$line"
if ((lost || stranded || overlaps || alive < processors || failed || over || performed < failovers)) || [[ -n "$stuck_at" ]]; then
	((over)) && say "$over stalls over $stall_limit s while a primary accepted writes (load average $(cut -d ' ' -f 1-3 /proc/loadavg))"
	exit 1
fi
ok=1

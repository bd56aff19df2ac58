#!/bin/sh
# The --exec handler of bench/chaos.sh and bench/failover.sh: it records each run of a
# task and whether another run of the same task was going on at the time.
#
# $FAULTS_DIR/runs gets one line per run: "<sequence> <attempt> <pid>". Each run holds a
# lock on $FAULTS_DIR/locks/<sequence> while it lasts (the kernel releases it when the
# process dies, however it dies); a run that finds the lock taken appends its sequence to
# $FAULTS_DIR/overlaps. $FAULTS_SLEEP (seconds, default none) is how long a run takes.
set -eu
exec 9>>"$FAULTS_DIR/locks/$PGTASK_SEQUENCE"
flock -n 9 || echo "$PGTASK_SEQUENCE" >>"$FAULTS_DIR/overlaps"
echo "$PGTASK_SEQUENCE $PGTASK_ATTEMPT $$" >>"$FAULTS_DIR/runs"
if [ -n "${FAULTS_SLEEP:-}" ]; then
	sleep "$FAULTS_SLEEP"
fi

#!/usr/bin/env bash
# Stop the SLURM that .ci/slurm/up.sh started: cancel every job, then stop every slurmd, slurmctld,
# slurmdbd, MariaDB and munged through their pid files. Idempotent; exits non-zero if a daemon survives.
# Packages, configuration and the accounting database stay, so the next up.sh is quick.
set -uo pipefail

RUN=/run/slurm

alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# stop NAME PIDFILE: SIGTERM, wait up to 20 s, then SIGKILL; the pid comes from the daemon's own pid file.
stop() {
    local name=$1 pidfile=$2 pid
    alive "$pidfile" || return 0
    pid=$(cat "$pidfile")
    kill -TERM "$pid"
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || { echo "down.sh: stopped $name (pid $pid)"; return 0; }
        sleep 0.2
    done
    echo "down.sh: $name (pid $pid) ignored SIGTERM for 20s; sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null
    sleep 0.5
}

if alive "$RUN/slurmctld.pid" && command -v scancel >/dev/null; then
    scancel --full --signal=KILL --user=root --quiet 2>/dev/null
    scancel --user=root --quiet 2>/dev/null
    for ((i = 0; i < 100; i++)); do
        [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
        sleep 0.2
    done
fi

for pidfile in "$RUN"/slurmd*.pid; do stop "slurmd ($(basename "$pidfile" .pid))" "$pidfile"; done
stop slurmctld "$RUN/slurmctld.pid"
stop slurmdbd "$RUN/slurmdbd.pid"
stop mariadbd /run/mysqld/mysqld.pid
stop munged /run/munge/munged.pid

status=0
for pidfile in "$RUN"/slurmd*.pid "$RUN/slurmctld.pid" "$RUN/slurmdbd.pid" /run/mysqld/mysqld.pid \
    /run/munge/munged.pid; do
    if alive "$pidfile"; then
        echo "down.sh: error: process $(cat "$pidfile") from $pidfile is still running" >&2
        status=1
    fi
done
if steps=$(pgrep -x slurmstepd); then
    echo "down.sh: error: slurmstepd still running (pids: $(echo $steps)); a job step outlived its job" >&2
    status=1
fi
((status == 0)) && echo "down.sh: SLURM is down"
exit $status

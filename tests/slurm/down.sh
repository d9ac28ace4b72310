#!/usr/bin/env bash
# Stop the test cluster started by tests/slurm/up.sh: cancel its jobs first (a running job keeps its node's namespace
# alive), then stop each daemon by the PID in its pid file (never by name).
T=${CALORIMETER_SLURM_DIR:-/tmp/calorimeter-slurm}
stop() { local pid; pid=$(cat "$2" 2>/dev/null) || { echo "slurm-down: $1: no pid file"; return 0; }
  if kill -0 "$pid" 2>/dev/null; then kill "$pid"
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    if kill -0 "$pid" 2>/dev/null; then echo "slurm-down: $1 ($pid) still alive: SIGKILL"; kill -9 "$pid"; fi
    echo "slurm-down: $1 ($pid) stopped"
  else echo "slurm-down: $1: pid $pid not running"; fi; }
if [ -s "$T/run/slurmctld.pid" ] && kill -0 "$(cat "$T/run/slurmctld.pid")" 2>/dev/null; then
  env -u SLURM_CONF scancel --full --quiet --partition=debug 2>/dev/null || true
  for _ in $(seq 1 40); do [ -z "$(env -u SLURM_CONF squeue -h -p debug 2>/dev/null)" ] && break; sleep 0.25; done
fi
for f in "$T"/run/slurmd.pid "$T"/run/slurmd-*.pid; do [ -e "$f" ] && stop "$(basename "$f" .pid)" "$f"; done
stop slurmctld "$T/run/slurmctld.pid"
stop slurmdbd  "$T/run/slurmdbd.pid"
stop mariadbd  "$T/mysql/mysqld.pid"
stop munged    "$T/munge/munged.pid"

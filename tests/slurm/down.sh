#!/usr/bin/env bash
# Stop the test cluster started by tests/slurm/up.sh, each daemon by the PID in its pid file (never by name).
T=${CALORIMETER_SLURM_DIR:-/tmp/calorimeter-slurm}
stop() { local pid; pid=$(cat "$2" 2>/dev/null) || { echo "slurm-down: $1: no pid file"; return 0; }
  if kill -0 "$pid" 2>/dev/null; then kill "$pid"
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    if kill -0 "$pid" 2>/dev/null; then echo "slurm-down: $1 ($pid) still alive: SIGKILL"; kill -9 "$pid"; fi
    echo "slurm-down: $1 ($pid) stopped"
  else echo "slurm-down: $1: pid $pid not running"; fi; }
stop slurmd    "$T/run/slurmd.pid"
stop slurmctld "$T/run/slurmctld.pid"
stop slurmdbd  "$T/run/slurmdbd.pid"
stop mariadbd  "$T/mysql/mysqld.pid"
stop munged    "$T/munge/munged.pid"

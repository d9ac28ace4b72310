#!/usr/bin/env bash
# Several steps on one GPU node, over one or more runs of a time-limited job: the steps run in order until DEADLINE
# seconds after the run started; a step already finished in an earlier run on this node is skipped, and a cut sweep
# resumes where it stopped (its cells without a record run again; the state lives in /tmp, so it survives between
# runs as long as the node keeps its /tmp). Results go to the output folder $OUT.
#   bash bench/gpu/steps.sh DEADLINE_S STEP=SECONDS [STEP=SECONDS ...]
# Steps:
#   engine            bench/engine_speed.py (FSDP2 and the DeepSpeed variants side by side)                 -> $OUT/engine.tar.gz
#   placement         config/reference/h200x2-placement.yaml through bench/gpu/run_reference.sh   -> $OUT/placement.tar.gz
#   pcie              bench/gpu/pcie_calibration.py (NVML link counters against known transfers)   -> $OUT/pcie.tar.gz
#   <name>            config/reference/<name>.yaml through bench/gpu/run_reference.sh              -> $OUT/<name>.tar.gz
# Every step's result is one tarball in $OUT, rewritten every 20 s while it runs; its log lines are appended to
# $OUT/steps.log. Between steps, processes left on the GPUs by a cut step are stopped and Snakemake's lock removed.
# Unpack a sweep's tarball with bench/gpu/keep_reference.sh.
set -u
DEADLINE=$1; shift
T0=$(date +%s)
STATE=/tmp/steps
mkdir -p "$STATE"
LOG="$OUT/steps.log"
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG"; }
clean_gpus() {
  pkill -f "submitit.core._submit" 2>/dev/null; pkill -f "calorimeter.telemetry.sampler" 2>/dev/null
  for pid in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
  rm -rf .snakemake/locks
  sleep 2
}
pack_loop() {  # pack_loop DIR NAME: tar DIR into $OUT/NAME.tar.gz every 20 s (background); prints its pid
  # its output away from the caller's $(...), which would otherwise wait for the loop to end (it never does)
  ( while sleep 20; do tar czf "$OUT/$2.tar.tmp" -C "$1" . 2>/dev/null; mv "$OUT/$2.tar.tmp" "$OUT/$2.tar.gz"; done ) \
    > /dev/null 2>&1 &
  echo $!
}
pack() { tar czf "$OUT/$2.tar.tmp" -C "$1" . 2>/dev/null && mv "$OUT/$2.tar.tmp" "$OUT/$2.tar.gz"; }

source bench/gpu/setup_offline.sh >> "$LOG" 2>&1
export PYTHONUNBUFFERED=1
NGPU=$(nvidia-smi -L | wc -l)
say "steps on $NGPU GPU(s), deadline ${DEADLINE}s: $*"
nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee -a "$LOG"

for item in "$@"; do
  name=${item%%=*}; want=${item#*=}
  if [ -f "$STATE/$name.done" ]; then say "$name: done in an earlier run on this node"; continue; fi
  budget=$(( $(left) - 10 )); [ "$budget" -gt "$want" ] && budget=$want
  if [ "$budget" -lt 40 ]; then say "$name: not started (${budget}s left)"; continue; fi
  clean_gpus
  say "$name: start (budget ${budget}s)"
  case $name in
    engine)
      mkdir -p "$STATE/engine"; P=$(pack_loop "$STATE/engine" engine)
      # to a file, never a pipe that a leftover rank could hold open (bench/gpu/run_reference.sh says why)
      timeout --kill-after=10 "$budget" python3 bench/engine_speed.py --out "$STATE/engine" --work /tmp/engine_speed \
        --gpus "$NGPU" --budget-s "$((budget - 15))" > "$STATE/engine/run.log" 2>&1
      grep -vE "^\s*$" "$STATE/engine/run.log" | tail -25 | tee -a "$LOG"
      kill "$P" 2>/dev/null; pack "$STATE/engine" engine; touch "$STATE/engine.done" ;;
    pcie)
      mkdir -p "$STATE/pcie"
      timeout "$budget" env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT python3 -m torch.distributed.run \
        --nproc_per_node "$NGPU" bench/gpu/pcie_calibration.py --size-gib 2 --out "$STATE/pcie" \
        > "$STATE/pcie/pcie_calibration.log" 2>&1
      grep -E "^(idle|h2d|d2h|peer_copy|nccl_send|nccl_wait|allreduce|pp_middle) |via " \
        "$STATE/pcie/pcie_calibration.log" | head -30 | tee -a "$LOG"
      pack "$STATE/pcie" pcie; touch "$STATE/pcie.done" ;;
    *)
      config=config/reference/$name.yaml
      [ "$name" = placement ] && config=config/reference/h200x2-placement.yaml
      if [ ! -f "$config" ]; then say "$name: no $config"; continue; fi
      OUT="$STATE/logs-$name" bash -c 'mkdir -p "$OUT"; bash bench/gpu/run_reference.sh "$@"' _ "$config" "$name" \
        "$budget" > "$STATE/$name.stdout" 2>&1 &
      RUN=$!
      ( while sleep 20; do cp "$STATE/logs-$name/$name.tar.gz" "$OUT/$name.tar.gz" 2>/dev/null; done ) &
      P=$!
      wait $RUN; kill $P 2>/dev/null
      cp "$STATE/logs-$name/$name.tar.gz" "$OUT/$name.tar.gz" 2>/dev/null
      cp "$STATE/logs-$name/$name.snakemake.log" "$STATE/$name.stdout" "$OUT/" 2>/dev/null
      tail -30 "$STATE/logs-$name/$name.log" 2>/dev/null | tee -a "$LOG"
      # no tables here (records only): compare placement policies after unpacking (docs/placement.md)
      # done when every planned cell of the sweep has a record
      if python3 - "$config" "/tmp/res-$name" <<'EOF'
import sys
from pathlib import Path
from calorimeter.plan.plan import plan_file
plan = plan_file(sys.argv[1])
missing = [pc.cell.cell_id for pc in plan.runnable
           if not (Path(sys.argv[2]) / plan.sweep / "cells" / pc.cell.cell_id / "run.json").is_file()]
print(f"{len(plan.runnable) - len(missing)}/{len(plan.runnable)} cells recorded", *missing[:5])
sys.exit(1 if missing else 0)
EOF
      then touch "$STATE/$name.done"; fi 2>&1 | tee -a "$LOG" ;;
  esac
  say "$name: end"
done
clean_gpus
say "run ends ($(left)s of the deadline left)"

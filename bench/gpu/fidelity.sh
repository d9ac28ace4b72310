#!/usr/bin/env bash
# Measurement fidelity on a 2x H200 node, about 7 minutes on the node:
#   bash bench/gpu/fidelity.sh [SECONDS]        (default 420; results in $OUT as they come, see run_reference.sh)
# Each part is bounded by its share of SECONDS: a cut run still brings back every finished cell (300 s: the warm-up
# variant and about two of the three repetitions).
# 0. offline wheels (bench/gpu/setup_offline.sh, twice: ~10 s each);
# 1. the warm-up variant first, on the cold GPUs: Llama-3 8B ZeRO-3 with the fixed 2-step warm-up of the study's
#    artifact (config/reference/h200x2-fidelity-warmup.yaml, extending h200x2-fidelity.yaml): ~55 s for the cell
#    (~25 s start, 2 x 3.6 s warm-up, 5 x 3.6 s measured), ~20 s of tables and figures;
# 2. the same cell 3 times with the steady-state warm-up (config/reference/h200x2-fidelity.yaml): ~75-105 s each
#    (~25 s start, 20-60 s until both GPUs' temperature slope is under 1 C/min, >= 15 s measured), ~20 s of tables.
# Every cell samples NVML every 50 ms, including the accumulated throttle time per reason next to the bitmask.
# Brings back $OUT/fidelity-warmup.tar.gz and $OUT/fidelity.tar.gz (cell records, no raw streams) and their logs;
# unpack both with bench/gpu/keep_reference.sh into one results/reference/h200x2-fidelity-<date> folder, then
#   python bench/fidelity_report.py results/reference/h200x2-fidelity-<date>
# CPU dry run of the same shape (tiny model, gloo, no GPU): bash bench/gpu/fidelity.sh --cpu
set -u
if [ "${1:-}" = "--cpu" ]; then
  RES=${RES:-/tmp/res-fidelity-cpu}
  mkdir -p "$RES"
  for c in h200x2-fidelity-warmup h200x2-fidelity; do  # bench/gpu/cpu_variant.py: tiny model on CPU ranks
    "${PYTHON:-python3}" bench/gpu/cpu_variant.py "config/reference/$c.yaml" > "$RES/$c.yaml"
    "${PYTHON:-python3}" -m snakemake --cores 2 --configfile "$RES/$c.yaml" --config results_dir="$RES" 2>&1 \
      | grep -E "steps \(|rror|cells" | tail -3
  done
  exit 0
fi
TOTAL=${1:-420}
bash bench/gpu/run_reference.sh config/reference/h200x2-fidelity-warmup.yaml fidelity-warmup 85
bash bench/gpu/run_reference.sh config/reference/h200x2-fidelity.yaml fidelity $((TOTAL - 85 - 20))

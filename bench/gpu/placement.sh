#!/usr/bin/env bash
# Does thermal-aware placement pay? config/reference/h200x2-placement.yaml on a 2x H200 node (docs/placement.md):
# a thermal calibration of the host (bf16 matmuls on both GPUs, ~35 s), then Llama-3 8B at pp 2 under the placement
# policies default / balanced / thermal, repetitions interleaved in time.
#
#   bash bench/gpu/placement.sh [SECONDS]   # on a 2x H200 node: the sweep gets SECONDS (default 480; it needs about
#                                           # 450: setup ~20, calibration ~40, 9 cells of ~40, tables ~30); results go
#                                           # to $OUT every 20 s (placement.tar.gz, placement.log) and the comparison
#                                           # (placement-compare.txt) at the end. Repetitions are interleaved, so a
#                                           # shorter budget (e.g. 330) still returns whole repetitions (then 2).
#   bash bench/gpu/placement.sh --dry-run   # here, without GPUs: the same sweep on CPU ranks with a tiny model
#                                           # (thermal must fall back visibly: CPU ranks have no NVML); REPEATS=1
#                                           # for a shorter one
# Keep the results: bash bench/gpu/keep_reference.sh <files>/placement.tar.gz results/reference/h200x2-placement-<date>
set -u
CONFIG=config/reference/h200x2-placement.yaml
SWEEP=$(python3 -c "import yaml; print(yaml.safe_load(open('$CONFIG'))['sweep'])")
if [ "${1:-}" = "--dry-run" ]; then
  OUT=${OUT:-/tmp/placement-dry}
  mkdir -p "$OUT"
  export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
  PY=${PYTHON:-python3}
  # CPU ranks, tiny model (bench/gpu/cpu_variant.py); policies, repetitions and calibration as on the GPU node.
  # REPEATS=n shortens it (the GPU sweep has 3).
  $PY bench/gpu/cpu_variant.py "$CONFIG" > "$OUT/cpu.yaml"
  if [ -n "${REPEATS:-}" ]; then
    $PY -c "import sys, yaml; c = yaml.safe_load(open(sys.argv[1])); [b.update(repeats=int(sys.argv[2])) for b in c['grid'] if 'repeats' in b]; yaml.safe_dump(c, open(sys.argv[1], 'w'), sort_keys=False)" "$OUT/cpu.yaml" "$REPEATS"
  fi
  T0=$(date +%s)
  $PY -m calorimeter plan "$OUT/cpu.yaml" | cut -c1-110
  $PY -m snakemake --configfile "$OUT/cpu.yaml" --config results_dir="$OUT/res" -c1 2>&1 \
    | grep -E "steps \(|rror|Finished job|cells|thermal profile" | tail -30
  $PY -m calorimeter.analysis.placement "$OUT/res/$SWEEP-cpu" | tee "$OUT/placement-compare.txt"
  echo "=== dry run done in $(( $(date +%s) - T0 )) s; results in $OUT/res"
  exit 0
fi
: "${OUT:?set OUT to the folder the results go to}"
FULL=1 bash bench/gpu/run_reference.sh "$CONFIG" placement "${1:-480}"  # FULL: tables too, for the comparison
python3 -m calorimeter.analysis.placement "/tmp/res-placement/$SWEEP" 2>&1 | tee "$OUT/placement-compare.txt"
cp -r /tmp/res-placement/thermal-profiles "$OUT/" 2>/dev/null || true

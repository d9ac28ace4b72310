#!/usr/bin/env bash
# One repetition pass of a steady findings sweep (issue 22, docs/findings.md) on a lent GPU node: the cells of
# repetition PASS of CONFIG (a subset sweep written to /tmp, selecting `repeat: PASS`; its cells stay with CONFIG's
# sweep), run by bench/gpu/run_reference.sh for at most SECONDS, records tarred to $OUT/<sweep>-pass<PASS>.tar.gz.
#   bash bench/gpu/findings_pass.sh config/reference/h200x1-findings-steady.yaml 0 330    # nvidia-h200
#   bash bench/gpu/findings_pass.sh config/reference/h100x1-findings-steady.yaml 0 330    # nvidia-h100-x1
# Keep every pass with bench/gpu/keep_reference.sh into one results/reference/ folder, then build the tables of the
# whole sweep there (snakemake figures --configfile CONFIG --config results_dir=...).
set -e
CONFIG=$1 PASS=$2 SECONDS_LEFT=$3
BASE=$(python3 -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['sweep'])" "$CONFIG")
SUB=/tmp/$BASE-pass$PASS.yaml
printf 'subset_of: %s\nsweep: %s-pass%s\nwhere: {repeat: %s}\n' "$PWD/$CONFIG" "$BASE" "$PASS" "$PASS" > "$SUB"
set +e
bash bench/gpu/run_reference.sh "$SUB" "$BASE-pass$PASS" "$SECONDS_LEFT"

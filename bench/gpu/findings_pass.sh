#!/usr/bin/env bash
# One repetition pass of a steady findings sweep (docs/findings.md) on one GPU node: the cells of
# repetition PASS of CONFIG (a subset sweep written to /tmp, selecting `repeat: PASS`; its cells stay with CONFIG's
# sweep), run by bench/gpu/run_reference.sh for at most SECONDS, records tarred to $OUT/<sweep>-pass<PASS>.tar.gz.
#   bash bench/gpu/findings_pass.sh config/reference/h200x1-findings-steady.yaml 0 330    # 1x H200
#   bash bench/gpu/findings_pass.sh config/reference/h100x1-findings-steady.yaml 0 330    # 1x H100
# An optional fourth argument narrows the pass further (more `where` entries, e.g. "pp: 1": the cells without a
# pipeline); the pass's sweep name then says so (-pass0-pp1).
# Keep every pass with bench/gpu/keep_reference.sh into one results/reference/ folder, then build the tables of the
# whole sweep there (snakemake figures --configfile CONFIG --config results_dir=...).
# CONFIG may hold {gpu}, replaced by the node's GPU type (h100 or h200: a node asked for as one may have the other):
#   bash bench/gpu/findings_pass.sh 'config/reference/{gpu}x4-moe-calibration.yaml' 0 540
set -e
CONFIG=$1 PASS=$2 SECONDS_LEFT=$3 WHERE=${4:-}
case "$CONFIG" in *"{gpu}"*)
  CONFIG=${CONFIG//\{gpu\}/$(bash bench/gpu/gpu_type.sh)} ;;
esac
BASE=$(python3 -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['sweep'])" "$CONFIG")
NAME=$BASE-pass$PASS$([ -n "$WHERE" ] && echo "-$WHERE" | tr -dc 'A-Za-z0-9_-'; true)
SUB=/tmp/$NAME.yaml
printf 'subset_of: %s\nsweep: %s\nwhere: {repeat: %s%s}\n' "$PWD/$CONFIG" "$NAME" "$PASS" "${WHERE:+, $WHERE}" > "$SUB"
set +e
bash bench/gpu/run_reference.sh "$SUB" "$NAME" "$SECONDS_LEFT"

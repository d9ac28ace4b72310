#!/usr/bin/env bash
# Unpack a results tarball brought back by run_reference.sh into results/reference/DEST, keeping only the compact
# real measurements: plan.json, the sweep tables and each cell's record (run.json, steps/telemetry/kernels parquet,
# telemetry.json), and each record's source.patch (a modified tree's code) in results/reference/patches/ under its
# SHA-256, once per content (records/patches.py; `calorimeter provenance check` checks every record finds its patch).
# Figures, logs, attempts and per-cell tables are rebuilt from these by `snakemake figures`.
#   bash bench/gpu/keep_reference.sh <files copied back from the node's $OUT>/NAME.tar.gz results/reference/DEST
# (PATCH_STORE=FOLDER files the patches elsewhere)
set -euo pipefail
TAR=$1 DEST=$2
# the record files of a cell, plus what a calibration kind writes (e.g. collectives.parquet)
RECORD_FILES=$(PYTHONPATH=src python3 -c "from calorimeter.records.paths import RECORD_FILES
from calorimeter.plan.kinds import KINDS
print(*RECORD_FILES, *sorted({f for k in KINDS.values() for f in k.outputs}))")
TMP=$(mktemp -d)
PATCHES="" STORE=${PATCH_STORE:-results/reference/patches}
tar xzf "$TAR" -C "$TMP"
mkdir -p "$DEST"
for sweep in "$TMP"/*/; do
  name=$(basename "$sweep")
  if [ "$name" = thermal-profiles ]; then  # the hosts' thermal profiles (docs/placement.md): kept whole
    cp -r "$sweep" "$DEST/"
    continue
  fi
  mkdir -p "$DEST/$name"
  [ -f "$sweep/plan.json" ] && cp "$sweep/plan.json" "$DEST/$name/"  # absent from a train-only run: rebuilt from the config
  [ -d "$sweep/tables" ] && cp -r "$sweep/tables" "$DEST/$name/"
  for cell in "$sweep"/cells/*/; do
    id=$(basename "$cell")
    mkdir -p "$DEST/$name/cells/$id"
    for f in $RECORD_FILES; do
      [ -f "$cell/$f" ] && cp "$cell/$f" "$DEST/$name/cells/$id/"
    done
    [ -f "$cell/source.patch" ] && PATCHES="$PATCHES $cell/source.patch"
  done
done
if [ -n "$PATCHES" ]; then
  PYTHONPATH=src python3 -c "import sys; from pathlib import Path; from calorimeter.records.patches import store_patch
print('patches kept:', *sorted({store_patch(Path(p), Path(sys.argv[1])).name for p in sys.argv[2:]}))" "$STORE" $PATCHES
fi
rm -rf "$TMP"
du -sh "$DEST"
PYTHONPATH=src python3 -m calorimeter provenance check --quick --store "$STORE" "$DEST" | tail -1

#!/usr/bin/env bash
# Unpack a results tarball brought back by run_reference.sh into results/reference/DEST, keeping only the compact
# real measurements: plan.json, the sweep tables and each cell's record (run.json, steps/telemetry/kernels parquet,
# telemetry.json). Figures, logs, attempts and per-cell tables are rebuilt from these by `snakemake figures`.
#   bash bench/gpu/keep_reference.sh <files_at of the device reply>/NAME.tar.gz results/reference/DEST
set -euo pipefail
TAR=$1 DEST=$2
# the record files of a cell, plus what a calibration kind writes (e.g. collectives.parquet)
RECORD_FILES=$(PYTHONPATH=src python3 -c "from calorimeter.records.paths import RECORD_FILES
from calorimeter.plan.kinds import KINDS
print(*RECORD_FILES, *sorted({f for k in KINDS.values() for f in k.outputs}))")
TMP=$(mktemp -d)
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
  done
done
rm -rf "$TMP"
du -sh "$DEST"

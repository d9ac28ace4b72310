#!/usr/bin/env bash
# Run one config/reference/*.yaml sweep on a GPU node and bring compact results back (to the output folder $OUT) even
# if the run is cut at its time limit:
#   bash bench/gpu/run_reference.sh CONFIG NAME SECONDS [fsdp2|fsdp2-ckpt]
# Snakemake trains the cells only (target `records`; FULL=1 for tables and figures too; node sampler at 50 ms, one
# profiled step each) into /tmp/res-NAME, for at most SECONDS; every 20 s (and at the end) the cells' records
# (run.json, steps/telemetry/kernels parquet, source.patch; no raw streams or traces) are tarred to $OUT/NAME.tar.gz and the
# one-line-per-cell table to $OUT/NAME.log. With "fsdp2", plain FSDP2 on Llama-3 8B at sequence 8192,
# micro-batch 1, 8 steps runs afterwards (bench/fsdp2_llama_baseline.py) into $OUT/NAME-fsdp2.log;
# "fsdp2-ckpt" runs it with activation checkpointing (the counterpart of full recomputation).
CONFIG=$1 NAME=$2 SECONDS_LEFT=$3 FSDP2=${4:-}
source bench/gpu/setup_offline.sh
export PYTHONUNBUFFERED=1
RES=/tmp/res-$NAME
# source.patch (a modified tree's code: records/provenance.git_patch, measurements under results/ left out) travels
# back with its record: keep_reference.sh files it in results/reference/patches/ by its SHA-256.
snapshot() {
  python3 bench/gpu/print_cells.py "$RES" > "$OUT/$NAME.log.tmp" 2>&1 && mv "$OUT/$NAME.log.tmp" "$OUT/$NAME.log"
  tar czf "$OUT/$NAME.tar.tmp" --exclude='*.pdf' --exclude='*/staging/*' --exclude='*.arrows' --exclude='*.json.gz' \
    -C "$RES" . 2>/dev/null && mv "$OUT/$NAME.tar.tmp" "$OUT/$NAME.tar.gz"
}
mkdir -p "$RES"
( while sleep 20; do snapshot; done ) &
LOOP=$!
T0=$(date +%s)
python3 -m calorimeter plan "$CONFIG" | cut -c1-100
BUDGET=$SECONDS_LEFT
[ -n "$FSDP2" ] && BUDGET=$((SECONDS_LEFT - 110))
# Only the cells are trained here (target `records`, workflow/rules/train.smk): tables, figures and reports are
# rebuilt from the kept records on any machine (snakemake figures), so no second on the GPU node goes to drawing. FULL=1
# builds everything on the node too.
# Snakemake writes to a file, not a pipe: the cells' local job processes inherit its output, and a pipe held open by
# a cell still running at the time limit kept the whole run waiting until the node's job itself was cut. At the
# limit, the cells still running are stopped too (their GPUs are needed by the next step).
# (the target before --config, which would take it for one more name=value)
# A sweep stopped at its limit leaves Snakemake's lock (and its cell marked incomplete) in the checkout: on the same
# node the next run's sweep then refused to start ("Directory cannot be locked", 2026-11-27f).
python3 -m snakemake --unlock --configfile "$CONFIG" --config results_dir="$RES" > /dev/null 2>&1 || true
timeout --kill-after=10 "$BUDGET" python3 -m snakemake $([ -z "${FULL:-}" ] && echo records) --rerun-incomplete \
  --configfile "$CONFIG" --config results_dir="$RES" > "$RES.snakemake.log" 2>&1
# the checkout's path on the node becomes repository-relative in the kept log
sed "s|$PWD/||g; s|$PWD|.|g" "$RES.snakemake.log" > "$OUT/$NAME.snakemake.log" 2>/dev/null
pkill -f "submitit.core._submit" 2>/dev/null; pkill -f "calorimeter.telemetry.sampler" 2>/dev/null
grep -E "steps \(|rror|Finished job|cells" "$RES.snakemake.log" | tail -40
echo "=== sweep done at $(( $(date +%s) - T0 )) s"
if [ -n "$FSDP2" ]; then
  NGPU=$(nvidia-smi -L | wc -l)
  CKPT=""; [ "$FSDP2" = fsdp2-ckpt ] && CKPT=ckpt
  timeout 100 torchrun --nproc_per_node "$NGPU" bench/fsdp2_llama_baseline.py 8192 1 8 $CKPT 2>&1 \
    | grep -E "RESULT|Error" | tee "$OUT/$NAME-fsdp2.log"
fi
kill $LOOP 2>/dev/null
snapshot
cat "$OUT/$NAME.log"
echo "=== done at $(( $(date +%s) - T0 )) s"

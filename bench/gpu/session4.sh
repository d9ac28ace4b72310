#!/usr/bin/env bash
# One 8-GPU node: the parallelism sweep (config/sweeps/h200x8-parallelism.yaml) without its recompute variants, short
# runs (2 warmup + 4 measured + 1 profiled step), global batch 8 (one micro-batch per rank for ZeRO-3, as the FSDP2
# baseline), ZeRO-3 with overlap on; then plain FSDP2 on the same node in the same call.
source bench/gpu/setup_offline.sh
NGPU=$(nvidia-smi -L | wc -l)
export PYTHONUNBUFFERED=1
T0=$(date +%s); lap() { echo "=== $1 at $(( $(date +%s) - T0 )) s"; }
python3 - <<'PY'
import yaml
c = yaml.safe_load(open("config/sweeps/h200x8-parallelism.yaml"))
c["defaults"].update(warmup_steps=2, measured_steps=4, global_batch=8)
for b in c["grid"]:
    b["recompute"] = "none"
c["grid"][0]["parallel"] = [p for p in c["grid"][0]["parallel"] if p.get("zero_stage") != 3]
c["grid"].insert(0, {"model": "llama3-8b", "recompute": "none", "overlap": True, "zero_stage": 3})
yaml.safe_dump(c, open("/tmp/quick.yaml", "w"))
PY
python3 -m calorimeter plan /tmp/quick.yaml | cut -c1-110
lap "parallelism sweep"
timeout 430 python3 -m snakemake --configfile /tmp/quick.yaml --config results_dir=/tmp/res8 2>&1 | grep -E "steps|Error|error" | tail -5
lap "FSDP2 baseline"
timeout 100 torchrun --nproc_per_node $NGPU bench/fsdp2_llama_baseline.py 8192 1 8 2>&1 | grep -E "RESULT|Error" | tee $OUT/fsdp2.log
lap "collect"
python3 -m calorimeter aggregate /tmp/quick.yaml >/dev/null 2>&1 || true
python3 bench/gpu/print_cells.py /tmp/res8 2>&1 | tee $OUT/table.log
tar czf $OUT/results8.tar.gz --exclude='*.pdf' --exclude='*/staging/*' --exclude='*.arrows' -C /tmp/res8 .
lap "done"

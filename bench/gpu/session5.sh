#!/usr/bin/env bash
# 8-GPU node, second call: the Llama-3 8B layouts of config/sweeps/h200x8-parallelism.yaml with full recomputation
# (same short runs as session4.sh: 2 warmup + 4 measured + 1 profiled step, global batch 8, ZeRO-3 with overlap on).
source bench/gpu/setup_offline.sh
export PYTHONUNBUFFERED=1
python3 - <<'PY'
import yaml
c = yaml.safe_load(open("config/sweeps/h200x8-parallelism.yaml"))
c["defaults"].update(warmup_steps=2, measured_steps=4, global_batch=8)
c["grid"] = [c["grid"][0]]
c["grid"][0]["recompute"] = "full"
c["grid"][0]["parallel"] = [p for p in c["grid"][0]["parallel"] if p.get("zero_stage") != 3]
c["grid"].insert(0, {"model": "llama3-8b", "recompute": "full", "overlap": True, "zero_stage": 3})
yaml.safe_dump(c, open("/tmp/quick_rc.yaml", "w"))
PY
timeout 270 python3 -m snakemake --configfile /tmp/quick_rc.yaml --config results_dir=/tmp/res8 2>&1 | grep -E "steps \(|rror" | tail -3
python3 bench/gpu/print_cells.py /tmp/res8 2>&1 | tee $OUT/table_rc.log
tar czf $OUT/results8_rc.tar.gz --exclude='*.pdf' --exclude='*/staging/*' --exclude='*.arrows' -C /tmp/res8 .

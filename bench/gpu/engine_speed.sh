#!/usr/bin/env bash
# Engine speed on a 2x H200 node, one run of about 9.5 minutes (540 s + ~20 s of installs; the variants that no
# longer fit are skipped and say so: run them in a second run with bench/engine_speed.py --only):
#   bash bench/gpu/engine_speed.sh [BUDGET_S]
# plain FSDP2, the dense Llama-3 8B cells (ZeRO-3/-2/-1 dp2), TP2 + SP with overlap off / ring / symmetric memory
# and PP2, before (today's kernels, no TP overlap) and after, each variant in its own process, side by side
# (bench/engine_speed.py). Needs .whl/ with the offline wheels (bench/gpu/setup_offline.sh) and, for the Liger
# kernels, liger_kernel-*.whl in it (pure Python; without it the engine uses torch.compile and records so).
# Results in $OUT: engine_speed.jsonl (one line per variant, written as each finishes), summary.md (the before/after
# table and the speed targets), variants.tar.gz (per-rank records), variants.log, fsdp2.log: all five go to
# results/reference/h200x2-engine-speed-<date>/ with a README made from summary.md (the table printed last).
source bench/gpu/setup_offline.sh
export PYTHONUNBUFFERED=1
python3 -c "import liger_kernel.ops" 2>/dev/null && echo "liger_kernel: yes" || echo "liger_kernel: no (torch.compile)"
nvidia-smi --query-gpu=index,name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
python3 bench/engine_speed.py --out "$OUT" --work /tmp/engine_speed --gpus "$(nvidia-smi -L | wc -l)" \
  --budget-s "${1:-540}"
nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu --format=csv,noheader

#!/usr/bin/env bash
# The findings run on one GPU node (docs/findings.md): the findings sweep sized for this node, then the calibration of
# the NVML PCIe/NVLink byte counters against known transfers. Results in $OUT: NAME.tar.gz and NAME.log (the sweep's
# records, progressively), pcie_calibration.csv and pcie_calibration.log (with NCCL's transport lines).
#   bash bench/gpu/findings.sh config/reference/h200x2-findings.yaml h200x2-findings 500   # 2x H200, ~570 s
#   bash bench/gpu/findings.sh config/reference/h100x1-findings.yaml h100x1-findings 200   # 1x H100, ~270 s
#   bash bench/gpu/findings.sh config/reference/h200x8-findings.yaml h200x8-findings 520   # 8x H200, ~570 s
# SECONDS bounds the sweep (run_reference.sh); the calibration adds ~25 s. A cut sweep keeps its finished cells, and a
# second run on the same node runs only the missing ones.
CONFIG=$1 NAME=$2 SECONDS_LEFT=$3
bash bench/gpu/run_reference.sh "$CONFIG" "$NAME" "$SECONDS_LEFT"
export PYTHONPATH="$PWD/src:/tmp/site" PATH="/tmp/site/bin:$PATH"   # installed by run_reference.sh's set-up
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT
NGPU=$(nvidia-smi -L | wc -l)
timeout 120 python3 -m torch.distributed.run --nproc_per_node "$NGPU" bench/gpu/pcie_calibration.py --size-gib 2 \
  --out "$OUT" > "$OUT/pcie_calibration.log" 2>&1
grep -E "^(idle|h2d|d2h|peer_copy|nccl_send|nccl_wait|allreduce|pp_middle) |via " "$OUT/pcie_calibration.log" | head -60

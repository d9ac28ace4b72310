#!/usr/bin/env bash
# The 4-GPU layout-efficiency runs on one 4x H100 or 4x H200 node, one run per command of at most 10 minutes; every
# cell's records reach $OUT while the run goes (a run cut short keeps the cells done, in the config's order):
#   bash bench/gpu/layouts.sh GPU RUN [SECONDS]      GPU: h100 | h200 | auto (the node's); RUN: a ... h
# The sequence (about 25 minutes of the node for 1-3; 4 when time is left):
#   1. bash bench/gpu/layouts.sh h100 a 500   global batch 32: ZeRO-1 dp4, torchtitan (FSDP2 + compile), TP4+SP
#      with symmetric-memory TP overlap, PP4 balanced 1F1B, PP4 DualPipeV, PP4 uniform, TP4+SP without overlap
#      (~8 min of cells + ~40 s of wheel installs on a fresh machine): the layout targets (TP4+SP >= 0.85x, PP4
#      >= 0.80x of the best) and the engine against torchtitan at gb 32.
#   2. bash bench/gpu/layouts.sh h100 b 520   global batch 8: ZeRO-1 dp4, torchtitan, torchtitan TP4 async,
#      compiled FSDP2, TP4+SP overlap, PP4 DualPipeV (~8 min): the peer table at the batch of the first one.
#   3. bash bench/gpu/layouts.sh h100 c 540   global batch 32: ZeRO-1 dp4 again (run-to-run noise with run 1),
#      ZeRO-3 dp4 with prefetch, TP2-DP2+SP overlap, TP2-PP2+SP and PP2-DP2 with DualPipeV, torchtitan TP4 async
#      and PP4 ZBV (~9 min).
#   4. bash bench/gpu/layouts.sh h100 d 330   global batch 32: ZeRO-1 dp4, Megatron-core's trainer at dp4, PP4 with
#      interleaved 1F1B (2 chunks a rank) and TP4+SP (~5 min; its tensor-parallel path never ran on CPU ranks).
#   5. bash bench/gpu/layouts.sh h100 e 400   global batch 32: ZeRO-1 dp4, TP4+SP without overlap, with the
#      symmetric-memory and with the ring overlap, torchtitan TP4 async (~6 min): what TP4 reaches on the engine
#      and on the peer.
#   6. bash bench/gpu/layouts.sh auto f 420   global batch 32: ZeRO-1 dp4 at micro-batch 1 and 2, TP4+SP without overlap
#      at micro-batch 2 and 4, with symmetric-memory overlap at 4 (~7 min): whether fewer, larger TP4 kernels close
#      the host-launch gap run e measured.
#   7. bash bench/gpu/layouts.sh auto g 280   global batch 32: ZeRO-1 dp4 at micro-batch 2, TP4+SP with symmetric-memory
#      overlap at micro-batch 4 and 8 (~4 min): run f's best TP4 cell a second time (run-to-run spread) and larger.
#   8. bash bench/gpu/layouts.sh auto h 540   global batch 32: each layout's fastest measured form and torchtitan in
#      one run: ZeRO-1 dp4, torchtitan (FSDP2 + compile), TP4+SP symm_mem at micro-batch 4, PP4 DualPipeV 3/5/4/4,
#      ZeRO-1 at micro-batch 2 (~8 min): the targets of runs 1 and 6 from a single node and run.
# Each run is its own sweep (config/reference/<gpu>x4-layouts-<run>.yaml), with its own baseline: every ratio of its
# table is a same-run ratio. Needs .whl/ (or .whlxz/) with the offline wheels (bench/gpu/setup_offline.sh),
# liger-kernel among them, and the torchtitan peer's: what `pip install torchtitan==0.2.2 'datasets<4.8' torchdata`
# adds to the CPU environment (2026-11-27, Python 3.11 here; download them for the node with `pip download --no-deps
# --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d .whl NAME...`): torchtitan torchdata
# datasets dill==0.4.0 multiprocess==0.70.18 (datasets 4.7 wants dill < 0.4.1; torchtitan asks >= 0.4.1 but only
# datasets uses it) tomli xxhash fsspec huggingface_hub aiohttp aiohappyeyeballs aiosignal frozenlist multidict
# propcache yarl tensorboard tensorboard_data_server grpcio absl_py protobuf markdown werkzeug tomli (less what the
# node has: `python3 -m pip list` there). Results in $OUT:
# <gpu>x4-layouts-<run>.tar.gz (the cells' records, as run_reference.sh keeps them), .log (one line per cell),
# .snakemake.log, and <gpu>x4-layouts-<run>.txt: bench/layout_efficiency.py's table and verdicts of the run, remade
# on any machine from the records (`python bench/layout_efficiency.py <unpacked>/<gpu>x4-layouts-<run>`).
set -u
GPU=$1 RUN=$2 BUDGET=${3:-520}
# auto: the node's GPU type (a node asked for as one type may have the other)
[ "$GPU" = auto ] && GPU=$(bash bench/gpu/gpu_type.sh)
case "$GPU:$RUN" in h100:[a-h]|h200:[a-h]) ;; *) echo "usage: $0 h100|h200|auto a|b|c|d|e|f|g|h [SECONDS]" >&2; exit 2 ;; esac
NAME=${GPU}x4-layouts-$RUN
NGPU=$(nvidia-smi -L | wc -l)
[ "$NGPU" = 4 ] || { echo "$NAME needs 4 GPUs, this node has $NGPU" >&2; exit 2; }
nvidia-smi --query-gpu=name --format=csv,noheader | grep -qi "$GPU" || {
  echo "$NAME is for $GPU; this node has $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" >&2; exit 2; }
bash bench/gpu/run_reference.sh "config/reference/$NAME.yaml" "$NAME" "$BUDGET"
source bench/gpu/setup_offline.sh > /dev/null 2>&1
python3 bench/layout_efficiency.py "/tmp/res-$NAME/$NAME" > "$OUT/$NAME.txt" 2>&1
cat "$OUT/$NAME.txt"

#!/usr/bin/env bash
# Second GPU call: cells with per-cell telemetry (node sampler at 50 ms + one profiled step), run one at a time;
# Llama-3 8B DeepSpeed cells next to plain FSDP2; the telemetry overhead benchmark; all figures from real data.
source bench/gpu/setup_offline.sh
NGPU=$(nvidia-smi -L | wc -l)
export PYTHONUNBUFFERED=1
T0=$(date +%s); lap() { echo "=== $1 at $(( $(date +%s) - T0 )) s"; }
SHOW="import pandas as pd, sys; pd.set_option('display.width', 250); df = pd.read_parquet(sys.argv[1]); print(df[[c for c in ['cell_id','status','iteration_time_s','tokens_per_s_per_gpu','tflops_per_gpu','mfu','peak_memory_gb','loss_first','loss_last','energy_per_token_j','avg_power_w','peak_temp_c','reason'] if c in df]].to_string())"
lap "default sweep with telemetry"
python3 -m snakemake --config results_dir=/tmp/res 2>&1 | tail -3
python3 -c "$SHOW" /tmp/res/default/summary.parquet
lap "llama3-8b DeepSpeed cells (one at a time)"
timeout 400 python3 -m snakemake --configfile config/sweeps/gpu-llama8b.yaml --config results_dir=/tmp/res 2>&1 | tail -3
python3 -c "$SHOW" /tmp/res/gpu-llama8b/summary.parquet 2>&1 | tee $OUT/llama8b.log
lap "FSDP2 baseline, same node, same run"
timeout 200 torchrun --nproc_per_node $NGPU bench/fsdp2_llama_baseline.py 8192 1 9 2>&1 | grep -E "RESULT|Error" | tee $OUT/fsdp2.log
lap "reports"
for s in "" "--configfile config/sweeps/gpu-llama8b.yaml"; do python3 -m snakemake $s --config results_dir=/tmp/res --report /tmp/res/report-$(echo $s | tr -dc a-z0-9 | tail -c 12).html 2>&1 | tail -1; done
tar czf $OUT/results.tar.gz --exclude='*.pdf' --exclude='*/staging/*' --exclude='*.arrows' -C /tmp/res .
lap "done"

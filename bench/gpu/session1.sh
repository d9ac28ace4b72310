#!/usr/bin/env bash
# One lent GPU machine, one call: the default sweep (spine), the telemetry check, and Llama-3 8B DeepSpeed cells
# side by side with plain FSDP2. Everything lands in $OUT as a few files.
source bench/gpu/setup_offline.sh
NGPU=$(nvidia-smi -L | wc -l)
export PYTHONUNBUFFERED=1
T0=$(date +%s); lap() { echo "=== $1 at $(( $(date +%s) - T0 )) s"; }
lap "spine (default sweep, hardware auto)"
bash bench/gpu/spine.sh 2>&1 | tee $OUT/spine.log | tail -30
lap "telemetry check"
timeout 240 python3 bench/telemetry_gpu_check.py --out-dir /tmp/telem --load-s 4 2>&1 | tee $OUT/telemetry.log | tail -40
tar czf $OUT/telemetry_check.tar.gz -C /tmp/telem .
lap "llama3-8b DeepSpeed cells"
timeout 420 python3 -m snakemake --configfile config/sweeps/gpu-llama8b.yaml --config results_dir=/tmp/res8b 2>&1 | tail -8
python3 -c "
import pandas as pd; pd.set_option('display.width', 250)
df = pd.read_parquet('/tmp/res8b/gpu-llama8b/summary.parquet')
print(df[['cell_id','status','iteration_time_s','tokens_per_s_per_gpu','tflops_per_gpu','mfu','peak_memory_gb','loss_first','loss_last','reason']].to_string())
" 2>&1 | tee $OUT/llama8b.log
tar czf $OUT/llama8b_results.tar.gz --exclude='*.pdf' -C /tmp/res8b .
lap "FSDP2 baseline"
timeout 240 torchrun --nproc_per_node $NGPU bench/fsdp2_llama_baseline.py 8192 1 9 2>&1 | grep -E "RESULT|Error|error" | tee $OUT/fsdp2.log
lap "done"

#!/usr/bin/env bash
# The default sweep end to end on a GPU machine (hardware: auto), as `make run` does, with results under $OUT.
# Usage on the device: bash bench/gpu/spine.sh
source bench/gpu/setup_offline.sh
RES=/tmp/results
T0=$(date +%s)
python3 -m snakemake --config results_dir=$RES 2>&1 | tail -25
python3 -m snakemake --config results_dir=$RES --report $RES/default/report.html 2>&1 | tail -2
echo "spine wall time: $(( $(date +%s) - T0 )) s"
python3 -c "
import pandas as pd; pd.set_option('display.width', 250); pd.set_option('display.max_columns', 20)
df = pd.read_parquet('$RES/default/summary.parquet')
print(df[['cell_id','status','world_size','iteration_time_s','tokens_per_s_per_gpu','tflops_per_gpu','mfu','peak_memory_gb','loss_first','loss_last','devices']].to_string())
print(df[df.status!='ok'][['cell_id','reason']].to_string())
"
tar czf $OUT/spine_results.tar.gz --exclude='*.pdf' -C $RES .

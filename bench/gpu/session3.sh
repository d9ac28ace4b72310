#!/usr/bin/env bash
# Telemetry overhead on GPUs: the same Llama-3 8B cell with the sampler off, at 50 ms and at 10 ms, interleaved.
source bench/gpu/setup_offline.sh
export PYTHONUNBUFFERED=1
timeout 560 python3 bench/telemetry_overhead.py --out /tmp/overhead --seq 4096 --steps 15 --reps 2 2>&1 \
  | grep -v Warning | tail -14 | tee $OUT/overhead.log
tar czf $OUT/overhead.tar.gz --exclude='*/staging/*' --exclude='*.arrows' -C /tmp/overhead .

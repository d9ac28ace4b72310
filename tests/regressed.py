"""A copy of a committed sweep's tables as a real regression would have measured them: every cell slower by a factor.

Throughput and what is made of it (tokens and samples per second, TFLOP/s, MFU, efficiency) scale by ``speed``; the
step time and the energy of a step and of a token scale by ``1 / speed`` (the GPUs draw the same power for longer);
power and temperature stay. The machine (the per-GPU table's UUIDs) stays the same, so ``calorimeter compare`` judges
the copy as a second run on the reference's machines.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

#: runs-table columns proportional to the speed
FASTER = ("tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s", "tflops_per_gpu", "model_tflops_per_gpu",
          "mfu_full", "mfu_causal", "hfu", "efficiency")
#: runs-table columns proportional to the time a step takes
SLOWER = ("iteration_time_s", "energy_per_iteration_j", "energy_per_token_j")


def regressed_copy(sweep: Path, out: Path, speed: float) -> Path:
    """``out/<sweep name>`` with ``sweep``'s runs and per-GPU tables, every ok cell ``speed`` times as fast."""
    dest = out / sweep.name / "tables"
    dest.mkdir(parents=True)
    shutil.copy2(sweep / "tables" / "gpus.parquet", dest / "gpus.parquet")
    runs = pd.read_parquet(sweep / "tables" / "runs.parquet")
    for col in FASTER:
        if col in runs.columns:
            runs[col] = runs[col] * speed
    for col in SLOWER:
        if col in runs.columns:
            runs[col] = runs[col] / speed
    runs.to_parquet(dest / "runs.parquet")
    return dest.parent

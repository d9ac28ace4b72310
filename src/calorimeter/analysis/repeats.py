"""The ``configs`` table: one row per configuration, over its repetitions (cells that share a ``config_id``).

Each key metric gets ``<metric>_mean``, ``<metric>_ci95_low`` and ``<metric>_ci95_high`` (a Student-t interval over
the configuration's ``ok`` repetitions, NaN bounds with fewer than two) and ``<metric>_ci95_rel`` (the interval's
half width as a share of the mean: the run-to-run noise at a glance); ``n_repeats`` counts the ok repetitions,
``n_planned`` every repetition of the plan. A metric read by a quantized sensor (a peak temperature in whole degrees)
adds the quantization variance, so that repetitions reading the same integer do not claim a zero-width interval.
Parameters come from the configuration (every repetition has the same ones).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from calorimeter.findings.stats import mean_interval
from calorimeter.records.legacy import config_ids

#: metrics summarised over repetitions, with the resolution of the reading (0: continuous)
CONFIG_METRICS: dict[str, float] = {
    "iteration_time_s": 0.0,
    "samples_per_s": 0.0,
    "tokens_per_s": 0.0,
    "tokens_per_s_per_gpu": 0.0,
    "tflops_per_gpu": 0.0,
    "mfu_full": 0.0,
    "mfu_causal": 0.0,
    "energy_per_iteration_j": 0.0,
    "energy_per_token_j": 0.0,
    "efficiency": 0.0,
    "efficiency_norm": 0.0,
    "power_avg_w": 0.0,
    "power_total_avg_w": 0.0,
    "power_peak_w": 0.0,
    "temp_avg_c": 0.0,
    "temp_peak_c": 1.0,
    "sm_clock_avg_mhz": 0.0,
    "throttle_sw_power_cap_frac": 0.0,
    "warmup_s": 0.0,
}
#: columns copied from the configuration's first repetition
_KEEP = ("sweep", "model", "hardware", "nodes", "gpus_per_node", "world_size", "tp", "pp", "dp", "ep", "cp",
         "sequence_parallel", "zero_stage", "recompute", "recompute_layers", "overlap", "micro_batch", "global_batch",
         "grad_accum", "seq_len", "precision", "parallel_label", "optimization_label", "pp_split", "placement")


def configs_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration of a runs table (per sweep, when the table holds several), in the order of its first
    repetition (see the module docstring)."""
    if runs.empty or "cell_id" not in runs.columns:
        return pd.DataFrame({"config_id": pd.Series(dtype="object"), "n_repeats": pd.Series(dtype="int64")})
    df = runs.assign(config_id=config_ids(runs))
    keys = ["sweep", "config_id"] if "sweep" in df.columns else ["config_id"]
    rows = []
    for key, g in df.groupby(keys, sort=False, dropna=False):
        cid = key[-1] if isinstance(key, tuple) else key
        ok = g[g["status"] == "ok"] if "status" in g.columns else g
        first = g.iloc[0]
        row: dict = {"config_id": cid, **{k: first.get(k) for k in _KEEP if k in g.columns}}
        row["n_planned"] = len(g)
        row["n_repeats"] = len(ok)
        row["statuses"] = ",".join(sorted(set(g["status"].astype(str)))) if "status" in g.columns else ""
        row["repeat_cell_ids"] = ",".join(g["cell_id"].astype(str))
        if "data_quality" in g.columns:
            row["poor_quality_repeats"] = int((ok["data_quality"] == "poor").sum())
        for metric, resolution in CONFIG_METRICS.items():
            if metric not in g.columns:
                continue
            values = pd.to_numeric(ok[metric], errors="coerce").to_numpy(dtype=float)
            est = mean_interval(values, resolution=resolution, what="repetitions")
            row[f"{metric}_mean"] = est.value
            row[f"{metric}_ci95_low"], row[f"{metric}_ci95_high"] = est.low, est.high
            half = (est.high - est.low) / 2
            row[f"{metric}_ci95_rel"] = half / abs(est.value) if est.has_interval and est.value else math.nan
            row[f"{metric}_n"] = int(np.isfinite(values).sum())
        rows.append(row)
    return pd.DataFrame(rows)

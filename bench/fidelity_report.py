#!/usr/bin/env python
"""Measurement fidelity of a results folder: run-to-run noise, the steady-state warm-up's cost and effect, NVML's
accumulated vs sampled throttle time, and data quality. Reads the cell records only (through the pipeline's own
analysis path), so it works on results brought back from a GPU node before any table is built::

    PYTHONPATH=src python bench/fidelity_report.py results/reference/h200x2-fidelity-<date> [--json out.json]

For bench/gpu/fidelity.sh (config/reference/h200x2-fidelity*.yaml) it prints:

1. noise: per configuration with two or more ok repetitions, each key metric's mean, 95% t-interval and the
   interval's half width as % of the mean;
2. warm-up: per cell how it was warmed up (mode, steps, seconds, why it stopped, final temperature slope), the
   steady-state warm-up's cost against the fixed one, and what the fixed warm-up measured against the steady cells'
   interval; inside every steady cell, the steps right after the fixed warm-up's length against its measured steps;
3. throttle: per cell and GPU, the share of the measured window each reason was active from the sampled bitmask and
   from NVML's accumulated time, and their difference in percentage points;
4. data quality: the cells and GPUs whose samples had anything to report.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calorimeter.analysis.cell import cell_tables
from calorimeter.analysis.repeats import configs_table
from calorimeter.telemetry.reasons import ACCUMULATED_REASON_FIELDS

NOISE_METRICS = ("iteration_time_s", "tokens_per_s_per_gpu", "mfu_full", "energy_per_token_j", "power_avg_w",
                 "temp_avg_c", "temp_peak_c", "sm_clock_avg_mhz")


def load(folder: Path) -> dict[str, pd.DataFrame]:
    """runs, gpus and steps of every cell record under ``folder`` (``<sweep>/cells/<id>/run.json``)."""
    tables: dict[str, list[pd.DataFrame]] = {"runs": [], "gpus": [], "steps": []}
    for run in sorted(folder.glob("**/cells/*/run.json")):
        t = cell_tables(run.parent)
        for name in tables:
            df = getattr(t, name)
            if not df.empty and len(df.columns) > 1:
                tables[name].append(df.assign(sweep_folder=run.parent.parent.parent.name))
    return {k: pd.concat(v, ignore_index=True) if v else pd.DataFrame() for k, v in tables.items()}


def noise(runs: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    cfg = configs_table(runs)
    for r in cfg.to_dict("records"):
        if r["n_repeats"] < 2:
            continue
        for m in NOISE_METRICS:
            if f"{m}_mean" in r and math.isfinite(r[f"{m}_mean"]):
                out.append({"config_id": r["config_id"], "metric": m, "n": r[f"{m}_n"], "mean": r[f"{m}_mean"],
                            "ci95_low": r[f"{m}_ci95_low"], "ci95_high": r[f"{m}_ci95_high"],
                            "ci95_half_width_pct": 100 * r[f"{m}_ci95_rel"]})
    return out


def warmup(runs: pd.DataFrame, steps: pd.DataFrame) -> dict[str, Any]:
    ok = runs[runs["status"] == "ok"]
    cells = ok[["cell_id", "sweep", "warmup_mode", "warmup_steps_run", "warmup_s", "warmup_reason",
                "warmup_final_slope_c_per_min", "measured_steps", "iteration_time_s", "power_avg_w", "temp_avg_c",
                "temp_peak_c"]].to_dict("records")
    steady = ok[ok["warmup_mode"] == "steady"]
    fixed = ok[ok["warmup_mode"] == "fixed"]
    out: dict[str, Any] = {"cells": cells}
    if len(steady):
        out["steady_warmup_s_mean"] = float(steady["warmup_s"].mean())
        out["steady_warmup_steps_mean"] = float(steady["warmup_steps_run"].mean())
    if len(fixed) and len(steady):
        out["cost_s_over_fixed"] = float(steady["warmup_s"].mean() - fixed["warmup_s"].mean())
        versus = {}
        for m in ("iteration_time_s", "power_avg_w", "temp_avg_c", "sm_clock_avg_mhz", "energy_per_token_j"):
            s = pd.to_numeric(steady[m], errors="coerce")
            f = pd.to_numeric(fixed[m], errors="coerce")
            if s.notna().any() and f.notna().any():
                versus[m] = {"fixed": float(f.mean()), "steady_mean": float(s.mean()),
                             "fixed_minus_steady_pct": 100 * float(f.mean() / s.mean() - 1),
                             "steady_min": float(s.min()), "steady_max": float(s.max())}
        out["fixed_vs_steady"] = versus
    # inside each steady cell: the steps a fixed warm-up of the same least length would have measured
    insitu = []
    for r in steady.itertuples(index=False):
        st = steps[(steps["cell_id"] == r.cell_id)].copy()
        if st.empty:
            continue
        per_step = st.groupby("step").agg(phase=("phase", "first"), time_s=("time_s", "max"),
                                          power_w=("power_avg_w", "mean"), temp_c=("temp_avg_c", "mean"))
        warm = per_step[per_step["phase"] == "warmup"]
        meas = per_step[per_step["phase"] == "measured"]
        n_fixed = 2
        early = warm.iloc[n_fixed:n_fixed + len(meas)]
        if len(early) and len(meas):
            insitu.append({"cell_id": r.cell_id, "early_steps": len(early), "measured_steps": len(meas),
                           **{f"{k}_early_vs_measured_pct": 100 * float(early[k].mean() / meas[k].mean() - 1)
                              for k in ("time_s", "power_w", "temp_c") if meas[k].notna().any()}})
    out["early_window_inside_steady_cells"] = insitu
    return out


def throttle(gpus: pd.DataFrame) -> dict[str, Any]:
    rows = []
    for g in gpus.to_dict("records"):
        for reason in ACCUMULATED_REASON_FIELDS:
            s, a = g.get(f"throttle_{reason}_frac"), g.get(f"throttle_{reason}_counter_frac")
            if s is None or a is None or not (np.isfinite(s) or np.isfinite(a)):
                continue
            rows.append({"cell_id": g["cell_id"], "gpu_index": g["gpu_index"], "reason": reason, "sampled": s,
                         "accumulated": a, "accumulated_minus_sampled_pp": 100 * (a - s)})
    df = pd.DataFrame(rows)
    summary = {}
    if not df.empty:
        for reason, g in df.groupby("reason"):
            d = g["accumulated_minus_sampled_pp"].dropna()
            summary[reason] = {"n": int(len(d)), "mean_pp": float(d.mean()) if len(d) else math.nan,
                               "max_abs_pp": float(d.abs().max()) if len(d) else math.nan,
                               "sampled_mean": float(g["sampled"].mean()),
                               "accumulated_mean": float(g["accumulated"].mean())}
    return {"per_gpu": rows, "summary": summary}


def quality(runs: pd.DataFrame) -> list[dict[str, Any]]:
    cols = ["cell_id", "data_quality", "samples_expected", "samples_received", "gaps", "nvml_errors",
            "counter_resets", "data_notes"]
    bad = runs[(runs.get("data_quality", pd.Series("", index=runs.index)) == "poor")
               | runs.get("data_notes", pd.Series("", index=runs.index)).astype(str).str.contains("gpu")]
    return bad[[c for c in cols if c in bad.columns]].to_dict("records")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", type=Path)
    p.add_argument("--json", type=Path, help="also write everything as JSON here")
    a = p.parse_args(argv)
    t = load(a.folder)
    if t["runs"].empty:
        print(f"no cell records under {a.folder}", file=sys.stderr)
        return 2
    rep = {"noise": noise(t["runs"]), "warmup": warmup(t["runs"], t["steps"]), "throttle": throttle(t["gpus"]),
           "quality": quality(t["runs"])}
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 20)
    print("== run-to-run noise (95% t-interval over ok repetitions)")
    print(pd.DataFrame(rep["noise"]).to_string(index=False, float_format=lambda x: f"{x:.4g}")
          if rep["noise"] else "no configuration with two or more ok repetitions")
    w = rep["warmup"]
    print("\n== warm-up per cell")
    print(pd.DataFrame(w["cells"]).to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    for k in ("steady_warmup_s_mean", "steady_warmup_steps_mean", "cost_s_over_fixed"):
        if k in w:
            print(f"{k}: {w[k]:.1f}")
    if w.get("fixed_vs_steady"):
        print("fixed warm-up vs steady:", json.dumps(w["fixed_vs_steady"], indent=1))
    if w["early_window_inside_steady_cells"]:
        print(pd.DataFrame(w["early_window_inside_steady_cells"]).to_string(index=False,
                                                                            float_format=lambda x: f"{x:+.2f}"))
    print("\n== throttle: accumulated (NVML) vs sampled bitmask, share of the measured window")
    print(json.dumps(rep["throttle"]["summary"], indent=1) if rep["throttle"]["summary"] else "no accumulated times")
    print("\n== data quality")
    for q in rep["quality"]:
        print(q)
    if not rep["quality"]:
        print("every cell good, nothing to report")
    if a.json:
        a.json.write_text(json.dumps(rep, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

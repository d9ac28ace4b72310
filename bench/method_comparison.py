#!/usr/bin/env python
"""The study artifact's measurement method against calorimeter's, on the same records.

The MICRO'25 artifact (CharLLM-PPT) monitors **one iteration** per rank, sampled every 50 ms, and derives from the
samples alone: iteration time T = last - first sample time of rank 0; energy E = sum over GPUs of the trapezoid of
instant power over that rank's samples; efficiency = (global batch / T) / (E / 1e6) samples/(s*MJ).
calorimeter times every measured step with device synchronisation (iteration time = mean over the measured steps of
the slowest rank) and takes energy from NVML's energy counter over the whole measured phase, interpolated to the
window edges (docs/telemetry.md).

This script writes each sweep with ``calorimeter export --format charllm-ppt`` (each rank's last measured step:
the artifact's window) into a temporary folder, applies the artifact's formulas to the exported files, and compares
with calorimeter's own numbers for the same cells (``tables/runs.parquet``)::

    PYTHONPATH=src python bench/method_comparison.py results/reference/findings-2026-11-23/h200x2-findings \\
        results/reference/h200x8-2026-11-21/h200x8-parallelism

Printed: per cell T, E and efficiency both ways and the ratio artifact / calorimeter (efficiency with the cell's own
global batch, so the artifact's hard-coded 128 cancels); the median and range of the efficiency ratio; and, for
every pair of configurations that differ only in overlap or recomputation, whether the two methods order them the
same way.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from calorimeter.reproduce.charllm import export_charllm


def _series(path: Path) -> np.ndarray:
    if not path.is_file() or path.stat().st_size == 0:
        return np.empty((0, 2))
    return np.loadtxt(path, delimiter=",", ndmin=2)


def artifact_numbers(run_dir: Path, world: int, global_batch: int) -> dict[str, float]:
    """T, E and efficiency by the artifact's formulas from one exported run folder."""
    p0 = _series(run_dir / "gpu_power_0.csv")
    t = float(p0[-1, 0] - p0[0, 0]) if len(p0) >= 2 else float("nan")
    e = 0.0
    for r in range(world):
        p = _series(run_dir / f"gpu_power_{r}.csv")
        if len(p) >= 2:
            e += float(np.trapezoid(p[:, 1], p[:, 0]))
    eff = (global_batch / t) / (e / 1e6) if t > 0 and e > 0 else float("nan")
    return {"T_art_s": t, "E_art_j": e, "eff_art": eff, "samples": len(p0)}


def compare_sweep(sweep: Path) -> pd.DataFrame:
    """One row per exported cell: both methods' T, E, efficiency and their ratios."""
    runs = pd.read_parquet(sweep / "tables" / "runs.parquet").set_index("cell_id")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        exp = export_charllm(sweep, tmp)
        for cid, folders in exp.runs.items():
            r = runs.loc[cid]
            a = artifact_numbers(Path(tmp) / folders[0], int(r["world_size"]), int(r["global_batch"]))
            rows.append({"sweep": sweep.name, "cell": cid, "model": r["model"],
                         "label": exp.manifest["cells"][cid]["label"], "overlap": bool(r["overlap"]),
                         "recompute": r["recompute"], "micro_batch": int(r["micro_batch"]),
                         "T_cal_s": float(r["iteration_time_s"]), "E_cal_j": float(r["energy_per_iteration_j"]),
                         "eff_cal": float(r["efficiency"]), **a})
    df = pd.DataFrame(rows)
    df["T_ratio"] = df["T_art_s"] / df["T_cal_s"]
    df["E_ratio"] = df["E_art_j"] / df["E_cal_j"]
    df["eff_ratio"] = df["eff_art"] / df["eff_cal"]
    return df


def flips(df: pd.DataFrame) -> pd.DataFrame:
    """Pairs of cells differing only in overlap or only in recomputation: each method's change of efficiency."""
    out = []
    keys = ["sweep", "model", "label", "micro_batch"]
    for knob, other in (("overlap", "recompute"), ("recompute", "overlap")):
        for _, g in df.groupby([*keys, other]):
            if g[knob].nunique() < 2:
                continue
            g = g.sort_values(knob, key=lambda s: s.astype(str))
            a, b = g.iloc[0], g.iloc[-1]
            d_art, d_cal = b["eff_art"] / a["eff_art"] - 1, b["eff_cal"] / a["eff_cal"] - 1
            out.append({"pair": f"{a['model']} {a['label']} mb{a['micro_batch']}: {knob} {a[knob]} -> {b[knob]}",
                        "artifact": f"{100 * d_art:+.1f}%", "calorimeter": f"{100 * d_cal:+.1f}%",
                        "same_direction": bool(np.sign(d_art) == np.sign(d_cal))})
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="+", type=Path, help="sweep folders with cells/ and tables/")
    ap.add_argument("--json", type=Path, help="also write the per-cell rows as JSON")
    args = ap.parse_args(argv)
    df = pd.concat([compare_sweep(s) for s in args.sweeps], ignore_index=True)
    cols = ["sweep", "label", "overlap", "recompute", "micro_batch", "samples", "T_cal_s", "T_art_s", "T_ratio",
            "E_ratio", "eff_ratio"]
    with pd.option_context("display.width", 200, "display.max_rows", 200):
        print(df[cols].round(3).to_string(index=False))
        b = (df["eff_ratio"] - 1) * 100
        print(f"\nartifact efficiency / calorimeter efficiency over {len(df)} cells: median {b.median():+.0f}%, "
              f"range {b.min():+.0f}% .. {b.max():+.0f}%; T ratio {df['T_ratio'].min():.2f}-{df['T_ratio'].max():.2f}, "
              f"E ratio {df['E_ratio'].min():.2f}-{df['E_ratio'].max():.2f}")
        f = flips(df)
        if not f.empty:
            print(f"\npairs differing in one knob ({(~f['same_direction']).sum()} of {len(f)} in opposite directions):")
            print(f.to_string(index=False))
    if args.json:
        args.json.write_text(json.dumps(df.to_dict("records"), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

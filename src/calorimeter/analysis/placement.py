"""Compare placement policies per layout: throughput, energy per token, per-GPU temperature and clock spread.

A *layout* is everything that defines a cell except its placement and repetition: the cell id without the
``_pl-<policy>`` part and the ``_r<k>`` suffix. For each layout and policy the repetitions give a mean and a
95 % t-interval; the gain of a policy over ``default`` is the ratio of the means minus 1, with the comparison core's
Welch interval of that ratio (:func:`calorimeter.findings.stats.welch`: log scale, both means' uncertainty).
With a single repetition on either side the interval is NaN: a gain without an interval is not claimed.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from calorimeter.findings.stats import AGREES, DISAGREES, Claim, Effect, mean_interval, verdict, welch
from calorimeter.plan.cell import parse_cell_id
from calorimeter.records.run_record import RunRecord

#: the study's placement result, from a secondary source only (shared/notes/paper-findings.md, S3)
STUDY_CLAIM = ("study (secondary source): asymmetric stage placement +4% efficiency on Llama3-70B (PP 4, 21/19 "
               "split), -7% on GPT3-175B (PP 8, 13/11)")
#: metrics compared (runs-table columns) and whether higher is better
METRICS = {"tokens_per_s_per_gpu": True, "energy_per_token_j": False}
#: the smallest change a placement claim means (the findings catalogue's ``thermal_aware_placement`` tolerance)
GAIN_TOLERANCE = 0.01


def mean_ci(values: np.ndarray) -> tuple[float, float, float]:
    """(mean, 95 % t-interval low, high); NaN interval with fewer than two values."""
    e = mean_interval(values, what="repetitions")
    return e.value, e.low, e.high


def relative_gain(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float, float]:
    """(mean(a) / mean(b) - 1, 95 % Welch interval low, high, its degrees of freedom) of a policy ``a`` against the
    default ``b`` (the experimental unit: repetitions)."""
    r = welch(a, b, ratio=True)
    return r.value - 1.0, r.low - 1.0, r.high - 1.0, r.dof


def layout_id(cell_id: str) -> str:
    """The cell id without its placement part and repetition suffix (an id that names no cell as it is)."""
    try:
        cell = parse_cell_id(str(cell_id))
    except ValueError:
        return str(cell_id)
    return replace(cell, placement="default", repeat=0).cell_id


def placement_columns(record: RunRecord) -> dict[str, Any]:
    """Runs-table columns of a record's placement: policy, whether it applied, why, the effective split, moves."""
    cell = record.cell
    pl = record.placement
    split = pl.get("pp_split") or cell.get("pp_split")
    moved = any(pl.get("device_order") or {})
    pred = pl.get("predicted") or {}
    costs = pl.get("stage_costs") or {}
    return {"placement": cell.get("placement") or "default",
            "placement_applied": bool(pl.get("applied", True)),
            "placement_reason": str(pl.get("reason") or ""),
            "placement_split": "/".join(map(str, split)) if split else "",
            "placement_moved": moved,
            "placement_costs": str(costs.get("source") or ""),
            "placement_predicted_speedup": float(pred.get("predicted_speedup", math.nan))}


def gpu_spreads(gpus: pd.DataFrame) -> pd.DataFrame:
    """Per cell: max - min over its GPUs of the average temperature and SM clock, and the slowest GPU's clock."""
    cols = {"temp_avg_c", "sm_clock_avg_mhz"}
    if gpus is None or gpus.empty or not cols <= set(gpus.columns):
        return pd.DataFrame(columns=["cell_id", "temp_spread_c", "clock_spread_mhz", "clock_min_gpu_mhz"])
    g = gpus.groupby("cell_id")
    return pd.DataFrame({
        "temp_spread_c": g["temp_avg_c"].max() - g["temp_avg_c"].min(),
        "clock_spread_mhz": g["sm_clock_avg_mhz"].max() - g["sm_clock_avg_mhz"].min(),
        "clock_min_gpu_mhz": g["sm_clock_avg_mhz"].min(),
    }).reset_index()


def policy_comparison(runs: pd.DataFrame, gpus: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per layout and policy (layouts that have a non-default policy only).

    Columns: ``layout_id``, ``parallel_label``, ``model``, ``placement``, ``n`` (ok repetitions), ``n_applied``,
    per metric ``<m>_mean``, ``<m>_ci95_low``, ``<m>_ci95_high``, ``<m>_values`` (the repetitions), ``<m>_gain``,
    ``<m>_gain_ci95_low``, ``<m>_gain_ci95_high`` (relative to default), ``temp_spread_c_mean``,
    ``clock_spread_mhz_mean``, ``clock_min_gpu_mhz_mean`` (and their ``_values``), ``placement_split``,
    ``placement_moved``, ``predicted_speedup``.

    Cells whose policy fell back (``placement_applied`` false) are counted in ``n`` but not in ``n_applied``; they
    ran the default placement, so they are compared as what they ran: their rows are pooled with ``default``.
    """
    if runs is None or runs.empty or "placement" not in runs.columns:
        return pd.DataFrame()
    df = runs[runs["status"] == "ok"].copy()
    if df.empty:
        return pd.DataFrame()
    df["layout_id"] = df["cell_id"].map(layout_id)
    applied = df.get("placement_applied", pd.Series(True, index=df.index)).fillna(True).astype(bool)
    df["ran"] = np.where(applied, df["placement"].fillna("default"), "default")
    df = df.merge(gpu_spreads(gpus), on="cell_id", how="left") if gpus is not None else df
    rows = []
    for lid, g in df.groupby("layout_id", sort=True):
        if set(g["placement"].fillna("default")) == {"default"}:
            continue
        base = g[g["ran"] == "default"]
        for pol, p in g.groupby("ran", sort=False):
            row: dict[str, Any] = {"layout_id": lid, "parallel_label": p["parallel_label"].iloc[0],
                                   "model": p["model"].iloc[0], "placement": pol, "n": int(len(p)),
                                   "n_applied": int((p["placement"] == pol).sum()) if pol != "default" else 0}
            for m in METRICS:
                vals = pd.to_numeric(p.get(m), errors="coerce").to_numpy(dtype=float) if m in p else np.array([])
                row[f"{m}_mean"], row[f"{m}_ci95_low"], row[f"{m}_ci95_high"] = mean_ci(vals)
                row[f"{m}_values"] = [float(v) for v in vals if np.isfinite(v)]
                ref = pd.to_numeric(base.get(m), errors="coerce").to_numpy(dtype=float) if m in base \
                    else np.array([])
                gain = relative_gain(vals, ref) if pol != "default" else (0.0, math.nan, math.nan, 0.0)
                row[f"{m}_gain"], row[f"{m}_gain_ci95_low"], row[f"{m}_gain_ci95_high"], row[f"{m}_gain_dof"] = gain
            for c in ("temp_spread_c", "clock_spread_mhz", "clock_min_gpu_mhz"):
                row[f"{c}_mean"] = float(pd.to_numeric(p[c], errors="coerce").mean()) if c in p else math.nan
                row[f"{c}_values"] = [float(v) for v in pd.to_numeric(p[c], errors="coerce").dropna()] if c in p \
                    else []
            row["placement_split"] = ",".join(sorted(set(p.get("placement_split", pd.Series([""])).astype(str))))
            row["placement_moved"] = bool(p.get("placement_moved", pd.Series([False])).fillna(False).any())
            row["predicted_speedup"] = float(pd.to_numeric(p.get("placement_predicted_speedup"),
                                                           errors="coerce").mean()) \
                if "placement_predicted_speedup" in p else math.nan
            rows.append(row)
    order = {"default": 0, "balanced": 1, "thermal": 2}
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["_o"] = out["placement"].map(order).fillna(9)
    return out.sort_values(["layout_id", "_o"]).drop(columns="_o").reset_index(drop=True)


def claim_text(row: pd.Series, metric: str = "tokens_per_s_per_gpu") -> str:
    """A sentence for the note: the measured gain with its interval and the comparison core's verdict on "this
    policy gains at least :data:`GAIN_TOLERANCE` over default" (``calorimeter.findings.stats.verdict``: >= 2
    degrees of freedom, the whole interval beyond the tolerance), or why there is none."""
    g, lo, hi = row.get(f"{metric}_gain"), row.get(f"{metric}_gain_ci95_low"), row.get(f"{metric}_gain_ci95_high")
    name = f"{row['placement']} vs default, {row['model']} {row['parallel_label']}"
    if g is None or not np.isfinite(g):
        return f"{name}: not measured"
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return f"{name}: {g:+.1%} (one repetition: no interval, no claim)"
    # the change's sign says "more"; whether more is better is the metric's (METRICS: energy per token, lower)
    better = 1.0 if METRICS.get(metric, True) else -1.0
    dof = row.get(f"{metric}_gain_dof")
    effect = Effect(better * g, *sorted((better * lo, better * hi)), n=int(row["n"]), unit="repetitions",
                    dof=float(dof) if dof is not None else math.nan, method="Welch ratio")  # unknown: no verdict
    j = verdict(effect, Claim(sign=+1, null=0.0, tolerance=GAIN_TOLERANCE))
    if j.verdict == AGREES:
        said = f"gain beyond {GAIN_TOLERANCE:.0%}"
    elif j.verdict == DISAGREES:
        said = "loss" if effect.high < -GAIN_TOLERANCE else f"no gain of {GAIN_TOLERANCE:.0%} or more"
    else:
        said = f"cannot say: {j.why}"
    return f"{name}: {g:+.1%} [95% CI {lo:+.1%}, {hi:+.1%}] ({said}; n={row['n']})"


def main(argv: list[str] | None = None) -> int:
    """``python -m calorimeter.analysis.placement results/<sweep>``: the comparison table and one claim per policy."""
    import argparse
    from pathlib import Path

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("sweep_dir", type=Path, help="results/<sweep> (with tables/runs.parquet and gpus.parquet)")
    args = ap.parse_args(argv)
    runs = pd.read_parquet(args.sweep_dir / "tables" / "runs.parquet")
    gpus_path = args.sweep_dir / "tables" / "gpus.parquet"
    gpus = pd.read_parquet(gpus_path) if gpus_path.is_file() else None
    cmp = policy_comparison(runs, gpus)
    if cmp.empty:
        print("no layout with a placement other than default")
        return 0
    cols = ["placement", "n", "n_applied", "placement_split", "placement_moved", "tokens_per_s_per_gpu_mean",
            "tokens_per_s_per_gpu_gain", "tokens_per_s_per_gpu_gain_ci95_low", "tokens_per_s_per_gpu_gain_ci95_high",
            "energy_per_token_j_gain", "temp_spread_c_mean", "clock_spread_mhz_mean", "predicted_speedup"]
    for lid, g in cmp.groupby("layout_id", sort=False):
        print(lid)
        print(g[cols].to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        for _, row in g[g["placement"] != "default"].iterrows():
            print("  " + claim_text(row) + "; energy/token " + claim_text(row, "energy_per_token_j").split(": ", 1)[1])
    print(STUDY_CLAIM)
    fell = runs[(runs.get("placement_applied") == False) & (runs["status"] == "ok")]  # noqa: E712
    for _, r in fell.iterrows():
        print(f"fell back: {r['cell_id']}: {r['placement_reason']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

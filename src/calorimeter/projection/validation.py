"""Validation: calibrate on some measured sweeps, predict the cells of others, and report the error per cell.

A fold names its training sources and its held-out sources; nothing of the held-out cells enters the calibration.
Each held-out cell gets its measured and predicted iteration time, energy per token, average power, tokens/s/GPU and
MFU, the relative errors, and notes that say what the model had to extrapolate for it (a layout, degree or model
that no training cell has) or why the measurement itself is outside the model (host-bound cells).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calorimeter.plan.cell import Cell
from calorimeter.plan.work import workload
from calorimeter.projection.calibration import calibrate
from calorimeter.projection.measured import HOST_BOUND_BUSY_FRAC, MeasuredSet, load_measured
from calorimeter.projection.model import Projector
from calorimeter.records.atomic import write_atomic, write_parquet_atomic

#: metrics compared, measured column = predicted column
METRICS: tuple[str, ...] = ("iteration_time_s", "energy_per_token_j", "power_avg_w", "tokens_per_s_per_gpu", "mfu_full")
#: the issue's targets: median absolute error of these two, and the largest error allowed without explanation
TARGET_MEDIAN = {"iteration_time_s": 0.10, "energy_per_token_j": 0.10}
TARGET_MAX = 0.25
#: work counts whose calibration range is checked (per micro-batch; the optimizer per iteration): a held-out cell
#: beyond RANGE_FACTOR x the largest training value gets a note (its time there extrapolates the fitted rate)
RANGE_FEATURES: tuple[str, ...] = ("dense_flops", "act_elems", "head_elems", "z3_elems", "optim_elems", "moe_elems")
RANGE_FACTOR = 1.5


@dataclass(frozen=True)
class Fold:
    """Train on ``train`` sweep folders, predict the cells of ``test``."""

    name: str
    train: tuple[str, ...]
    test: tuple[str, ...]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Fold:
        """From the config's ``projection.validation`` entry."""
        return cls(str(d["name"]), tuple(str(p) for p in d["train"]), tuple(str(p) for p in d["test"]))


def coverage_notes(cell: Cell, train: list[Cell]) -> list[str]:
    """What about ``cell`` no training cell has: the model must extrapolate there."""
    notes = []
    if not train:
        return ["no training cell"]
    if cell.model not in {c.model for c in train}:
        notes.append(f"model {cell.model} never measured")
    moe_tp = [c for c in train if c.ep > 1 or "mixtral" in c.model]
    if "mixtral" in cell.model and cell.tp > 1 and not any(c.tp > 1 for c in moe_tp):
        notes.append("MoE with tp > 1 never measured (dispatch/router replicated over tp)")
    for name in ("tp", "pp", "ep", "world_size"):
        v = getattr(cell, name)
        top = max(getattr(c, name) for c in train)
        if v > top:
            notes.append(f"{name}={v} above the largest measured ({top})")
    if cell.recompute not in {c.recompute for c in train}:
        notes.append(f"recompute={cell.recompute} never measured")
    if cell.zero_stage == 3 and cell.tp > 1 and not any(c.zero_stage == 3 and c.tp > 1 for c in train):
        notes.append("tp x ZeRO-3 never measured")
    top: dict[str, float] = {}
    for c in train:
        for st in workload(c).stages:
            for f in RANGE_FEATURES:
                top[f] = max(top.get(f, 0.0), _range_value(st, f))
    mine = {f: max(_range_value(st, f) for st in workload(cell).stages) for f in RANGE_FEATURES}
    for f in RANGE_FEATURES:
        if mine[f] > RANGE_FACTOR * top.get(f, 0.0) and mine[f] > 0:
            unit = "per rank" if f == "optim_elems" else "per rank and micro-batch"
            notes.append(f"{f} {mine[f]:.3g} {unit} beyond the calibration range (max {top.get(f, 0.0):.3g})")
    return notes


def _range_value(st, feature: str) -> float:
    """A work count as its range is checked: per micro-batch (the shape of the work), the optimizer per iteration."""
    return st.features.get(feature, 0.0) if feature == "optim_elems" else st.per_micro_batch(feature)


def validate_fold(fold: Fold, hardware: str | None = None, measured: dict[str, MeasuredSet] | None = None
                  ) -> pd.DataFrame:
    """Error table of one fold: one row per held-out measured cell on ``hardware`` (default: every hardware the
    training sources calibrate)."""
    load = (lambda srcs: load_measured(list(srcs))) if measured is None else (
        lambda srcs: _merge([measured[s] for s in srcs]))
    train, test = load(fold.train), load(fold.test)
    hws = [hardware] if hardware else sorted(set(train.runs["hardware"]) & set(test.runs["hardware"]))
    frames = [_validate_hw(fold, hw, train, test) for hw in hws]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _validate_hw(fold: Fold, hardware: str, train: MeasuredSet, test: MeasuredSet) -> pd.DataFrame:
    try:
        cal = calibrate(train, hardware)
    except ValueError:
        return pd.DataFrame()
    proj = Projector(cal)
    train_cells = [train.cell(c) for c in cal.cells]
    rows = []
    for _, r in test.runs[test.runs.hardware == hardware].iterrows():
        cell = test.cell(r["cell_id"])
        p = proj.project(cell)
        row: dict[str, Any] = {"fold": fold.name, "cell_id": r["cell_id"], "model": cell.model,
                               "world_size": cell.world_size, "parallel_label": cell.parallel_label,
                               "recompute": cell.recompute, "zero_stage": cell.zero_stage,
                               "busy_frac": float(r.get("busy_frac", math.nan)), "calibration_cells": len(cal.cells)}
        for m in METRICS:
            meas, pred = float(r.get(m, math.nan)), float(p.get(m, math.nan))
            row[f"{m}_measured"] = meas
            row[f"{m}_predicted"] = pred
            row[f"{m}_rel_error"] = pred / meas - 1.0 if meas and meas == meas else math.nan
        notes = coverage_notes(cell, train_cells)
        busy = row["busy_frac"]
        if busy == busy and busy < HOST_BOUND_BUSY_FRAC:
            notes.insert(0, f"host-bound: GPU kernels busy {busy:.0%} of the measured iteration")
        row["notes"] = "; ".join(notes)
        rows.append(row)
    return pd.DataFrame(rows)


def _merge(sets: list[MeasuredSet]) -> MeasuredSet:
    return MeasuredSet(pd.concat([s.runs for s in sets], ignore_index=True),
                       pd.concat([s.kernels for s in sets], ignore_index=True),
                       pd.concat([s.gpus for s in sets], ignore_index=True),
                       {k: v for s in sets for k, v in s.dropped.items()})


def validate(folds: list[Fold], hardware: str | None = None) -> pd.DataFrame:
    """Error tables of every fold, concatenated (each source read once)."""
    sources = sorted({s for f in folds for s in (*f.train, *f.test)})
    measured = {s: load_measured([s]) for s in sources}
    frames = [validate_fold(f, hardware, measured) for f in folds]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def summarize(table: pd.DataFrame) -> dict[str, Any]:
    """Per fold and metric: cells, median and largest absolute relative error over all held-out cells and over the
    GPU-bound ones (the model's domain: host-bound cells are flagged, not modelled); cells above the 25% line and
    their notes; whether the issue's targets are met (medians of GPU-bound cells, every cell above 25% noted)."""
    out: dict[str, Any] = {}
    for fold, t in table.groupby("fold", sort=False):
        gpu_bound = t[~_host_bound(t)]
        f: dict[str, Any] = {"cells": len(t), "gpu_bound_cells": len(gpu_bound)}
        for m in METRICS:
            e, eg = t[f"{m}_rel_error"].abs().dropna(), gpu_bound[f"{m}_rel_error"].abs().dropna()
            f[m] = {"median_abs": float(e.median()) if len(e) else math.nan,
                    "max_abs": float(e.max()) if len(e) else math.nan,
                    "median_abs_gpu_bound": float(eg.median()) if len(eg) else math.nan,
                    "max_abs_gpu_bound": float(eg.max()) if len(eg) else math.nan}
        worst = t[(t["iteration_time_s_rel_error"].abs() > TARGET_MAX)
                  | (t["energy_per_token_j_rel_error"].abs() > TARGET_MAX)]
        f["over_25pct"] = [{"cell_id": r.cell_id, "iteration_time": float(r.iteration_time_s_rel_error),
                            "energy_per_token": float(r.energy_per_token_j_rel_error), "notes": r.notes}
                           for r in worst.itertuples()]
        # the targets hold on the cells the model claims (GPU-bound); host-bound cells are listed, never hidden
        f["targets_met"] = (all(f[m]["median_abs_gpu_bound"] <= v for m, v in TARGET_MEDIAN.items())
                            and all(bool(w["notes"]) for w in f["over_25pct"]))
        out[str(fold)] = f
    return out


def _host_bound(t: pd.DataFrame) -> pd.Series:
    return t["notes"].fillna("").str.startswith("host-bound")


def error_band(table: pd.DataFrame, quantile: float = 0.9) -> dict[str, float]:
    """Relative half-width of the projection's error band per metric: this quantile of the held-out absolute
    errors over all folds (cells flagged host-bound excluded: the model does not claim them)."""
    if table.empty:
        return {}
    t = table[~_host_bound(table)]
    band = {}
    for m in ("iteration_time_s", "energy_per_token_j", "power_avg_w"):
        e = t[f"{m}_rel_error"].abs().dropna()
        if len(e):
            band[m] = float(np.quantile(e, quantile))
    return band


def write_validation(table: pd.DataFrame, out: str | Path) -> None:
    """Parquet plus a CSV next to it."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_parquet_atomic(out, table)
    write_atomic(out.with_suffix(".csv"), lambda tmp: table.to_csv(tmp, index=False))

"""One GPU type's calibration: compute rates, collective curves and the power model, from measured cells.

Built from a :class:`~calorimeter.projection.measured.MeasuredSet` (the committed reference sweeps, or any results
folder) and, where present, the tables of ``collectives`` calibration cells. Saved as JSON so a projection of
thousands of cells reads it instead of refitting; it names every cell it was fitted on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from calorimeter.collectives.table import CURVE_COLUMNS, read_collective_points
from calorimeter.plan.hardware import get_profile
from calorimeter.plan.work import COLLECTIVES, workload
from calorimeter.projection.collectives import trace_points
from calorimeter.projection.compute import COMPUTE_CATEGORIES, ComputeRates, fit_compute
from calorimeter.projection.measured import MeasuredSet, load_measured
from calorimeter.projection.power import PowerModel, fit_power
from calorimeter.records.atomic import write_atomic
from calorimeter.records.paths import SweepPaths
from calorimeter.telemetry.kernels import COMM_CATEGORIES

#: the power limit assumed when no telemetry of a calibration cell records it
POWER_LIMIT_COLUMN = "power_limit_w"


@dataclass
class Calibration:
    """Everything fitted for one hardware profile.

    Attributes:
        hardware: profile name (``h200``).
        compute: per-category compute rates.
        curves: collective curve points (columns :data:`~calorimeter.collectives.table.CURVE_COLUMNS`).
        power: power model, or None when no cell had telemetry.
        cells: the cells fitted on.
        excluded: cell id -> why it was not used for fitting.
        error_band: metric -> relative half-width of the error band (from a validation), empty if none ran.
    """

    hardware: str
    compute: ComputeRates
    curves: pd.DataFrame
    power: PowerModel | None
    cells: list[str]
    excluded: dict[str, str] = field(default_factory=dict)
    error_band: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {"hardware": self.hardware, "compute": self.compute.to_dict(),
                "curves": self.curves[list(CURVE_COLUMNS)].to_dict(orient="records"),
                "power": self.power.to_dict() if self.power else None, "cells": self.cells,
                "excluded": self.excluded, "error_band": self.error_band}

    @classmethod
    def from_dict(cls, d: dict) -> Calibration:
        """Inverse of :meth:`to_dict`."""
        return cls(d["hardware"], ComputeRates.from_dict(d["compute"]),
                   pd.DataFrame(d["curves"], columns=list(CURVE_COLUMNS)),
                   PowerModel.from_dict(d["power"]) if d.get("power") else None, list(d["cells"]),
                   dict(d.get("excluded", {})), dict(d.get("error_band", {})))

    def save(self, path: str | Path) -> None:
        """Write as JSON."""
        text = json.dumps(self.to_dict(), indent=1, default=float) + "\n"
        write_atomic(Path(path), lambda tmp: tmp.write_text(text))

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """Read a saved calibration."""
        return cls.from_dict(json.loads(Path(path).read_text()))


def _power_limit_w(ms: MeasuredSet, cells: list[str]) -> float:
    """The power limit recorded by the calibration cells' telemetry (median), NaN if none recorded it."""
    limits = []
    for cid in cells:
        src = ms.runs.loc[ms.runs.cell_id == cid, "source"].iloc[0]
        path = SweepPaths(Path(src)).cell(cid).telemetry
        if path.is_file():
            try:
                t = pd.read_parquet(path, columns=[POWER_LIMIT_COLUMN])
            except (KeyError, ValueError, OSError):
                continue
            v = t[POWER_LIMIT_COLUMN].dropna()
            if len(v):
                limits.append(float(v.median()))
    return float(pd.Series(limits).median()) if limits else float("nan")


def measured_shares(k: pd.Series, iteration_s: float, pipeline: bool) -> dict[str, float]:
    """Activity shares of one traced rank: GEMM, other compute and communication kernel seconds over the iteration.

    In pipeline cells the send/recv and all-reduce kernels also spin while waiting for other stages; that wait is
    idle time for power, so those categories are left out of ``u_comm`` there.
    """
    other = sum(float(k.get(f"{c}_sum_s", 0.0)) for c in COMPUTE_CATEGORIES if c != "gemm_attention")
    comm = sum(float(k.get(f"{c}_sum_s", 0.0)) for c in COMM_CATEGORIES
               if not (pipeline and c in ("send_recv", "all_reduce")))
    return {"u_gemm": float(k.get("gemm_attention_sum_s", 0.0)) / iteration_s, "u_other": other / iteration_s,
            "u_comm": comm / iteration_s}


def calibrate(ms: MeasuredSet, hardware: str, collectives: pd.DataFrame | None = None) -> Calibration:
    """Fit one hardware profile's calibration on the usable cells of ``ms`` run on that hardware.

    Args:
        ms: measured cells (any hardware; only ``hardware``'s are used).
        hardware: profile name.
        collectives: points from ``collectives`` calibration cells (:data:`CURVE_COLUMNS`), if any.

    Raises:
        ValueError: no traced, GPU-bound cell of that hardware.
    """
    get_profile(hardware)
    on_hw = set(ms.runs.loc[ms.runs.hardware == hardware, "cell_id"])
    usable = [c for c in ms.calibration_cells() if c in on_hw]
    excluded = {c: "host-bound (GPU busy < 80% of the iteration) or not traced"
                for c in on_hw if c not in usable}
    if not usable:
        raise ValueError(f"no traced, GPU-bound measured cell on {hardware!r} to calibrate on")
    comp_rows, comm_rows, power_rows, host_rows = [], [], [], []
    gpus = ms.gpus
    for cid in usable:
        cell = ms.cell(cid)
        w = workload(cell)
        t_iter = float(ms.runs.loc[ms.runs.cell_id == cid, "iteration_time_s"].iloc[0])
        ranks = ms.kernels[ms.kernels.cell_id == cid]
        shares_by_stage = {}
        if cell.pp == 1 and len(ranks):
            host_rows.append((cid, w.stages[0], t_iter - float(ranks["busy_s"].max())))
        for _, k in ranks.iterrows():
            st = w.stages[int(k["stage"])]
            comp_rows.append((cid, st, {c: float(k.get(f"{c}_sum_s", 0.0)) for c in COMPUTE_CATEGORIES}))
            comm_rows.append((cid, st.comm, {c: float(k.get(f"{c}_sum_s", 0.0)) for c in COLLECTIVES},
                              {c: float(k.get(f"{c}_count", 0.0)) for c in COLLECTIVES}))
            shares_by_stage.setdefault(int(k["stage"]), measured_shares(k, t_iter, cell.pp > 1))
        for _, g in gpus[gpus.cell_id == cid].iterrows():
            stage = int(g["stage"]) if g.get("stage") == g.get("stage") else 0
            shares = shares_by_stage.get(stage) or shares_by_stage.get(0)
            if shares and g.get("power_avg_w", 0) > 0:
                power_rows.append((cid, shares, float(g["power_avg_w"])))
    curves = trace_points(comm_rows)[list(CURVE_COLUMNS)]
    if collectives is not None and not collectives.empty:
        curves = pd.concat([collectives[list(CURVE_COLUMNS)], curves], ignore_index=True)
    power = fit_power(power_rows, _power_limit_w(ms, usable)) if power_rows else None
    return Calibration(hardware, fit_compute(comp_rows, host_rows), curves, power, sorted(usable), excluded)


def calibrate_all(sources: list[str], collectives: list[str] | None = None,
                  error_band: dict[str, float] | None = None) -> dict[str, Calibration]:
    """A calibration for every hardware profile that has usable measured cells in ``sources``.

    Args:
        sources: sweep folders with aggregated tables.
        collectives: sweep folders holding ``collectives`` calibration cells.
        error_band: the validation's error band, stored with every calibration.

    Raises:
        ValueError: no hardware has a usable cell.
    """
    ms = load_measured(list(sources))
    points = collective_points(collectives or [])
    out = {}
    for hw in sorted(set(ms.runs["hardware"])):
        try:
            cal = calibrate(ms, hw, points[points.hardware == hw] if not points.empty else None)
        except ValueError:
            continue
        cal.error_band = dict(error_band or {})
        out[hw] = cal
    if not out:
        raise ValueError(f"no usable measured cell in {list(sources)}")
    return out


def collective_points(sources: list[str]) -> pd.DataFrame:
    """Curve points of every ``collectives`` cell under the given sweep folders (with a ``hardware`` column)."""
    frames = [read_collective_points(s) for s in sources]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*CURVE_COLUMNS, "hardware"])


def load_calibrations(path: str | Path) -> dict[str, Calibration]:
    """The calibrations written by the workflow (one per hardware profile)."""
    d = json.loads(Path(path).read_text())
    return {hw: Calibration.from_dict(c) for hw, c in d.items()}

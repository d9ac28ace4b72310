"""The prospective check: cells measured after the model was fixed, projected as a user would have projected them.

The leave-one-configuration-out validation (:mod:`~calorimeter.projection.validation`) scores a model on the cells
it was designed with; a rule chosen after seeing them (a band, an idle model) is not tested by it. Here the calibration
is what a user gets from the default sources without the new sweeps (``projection.calibration``'s default, with the
bands, coverage and cross-fingerprint errors of its own validation, as the workflow's ``projection_calibrate`` writes
them), and every new cell is projected as ``snakemake projection`` would for the engine that ran it
(``projection.engine`` = the cell's fingerprint: a calibration of another engine build is ``foreign``, its bands add
the measured cross-fingerprint error; its machine's host factor where the calibration knows it). A refused row's
numbers are still predicted here, to measure what a refusal withholds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from calorimeter.projection.bands import apply_validation
from calorimeter.projection.calibration import Calibration, calibrate_all, collective_points, machine_of
from calorimeter.projection.fingerprint import KEY_FIELDS, UNRECORDED
from calorimeter.projection.measured import MeasuredSet, load_measured
from calorimeter.projection.model import Projector
from calorimeter.projection.settings import ProjectionSettings
from calorimeter.projection.sweep import choose_calibration
from calorimeter.projection.validation import loco, newest_fingerprints

#: the metrics a new cell is checked on
CHECKED: tuple[str, ...] = ("tokens_per_s_per_gpu", "energy_per_token_j", "power_avg_w")


@dataclass
class Prospective:
    """The check's result.

    Attributes:
        table: one row per new cell: the calibration and relation it was projected with, machine and host factor,
            host-bound and extrapolated as projected, measured busy share, regime and band basis, refusal, machine
            class; per :data:`CHECKED` metric measured, predicted, relative error, band and whether within it.
        calibration: the calibration set (without the new sweeps): the measured cells it was fitted on.
        sources: the sweep folders it was fitted on.
        calibrations: the calibrations used, validated.
        stated_coverage: the coverage the bands state.
    """

    table: pd.DataFrame
    calibration: MeasuredSet
    sources: list[str]
    calibrations: dict[str, Calibration]
    stated_coverage: float


def _overlaps(source: str, new: list[Path]) -> bool:
    p = Path(source).resolve()
    return any(p.is_relative_to(n) or n.is_relative_to(p) for n in new)


def project_new(new: list[Path], settings: ProjectionSettings, root: Path) -> Prospective:
    """Calibrate on ``settings``' sources (relative to ``root``) without any that lies in or holds a ``new`` sweep,
    validate that calibration, and project every cell of the ``new`` sweeps with it."""
    new = [Path(p).resolve() for p in new]
    train = [p for p in (str(root / q) for q in settings.calibration) if not _overlaps(p, new)]
    ms = load_measured(train)
    curves = [str(root / p) for p in settings.collectives]
    cals = calibrate_all(train, curves, ms=ms)
    apply_validation(cals, loco(ms, newest_fingerprints(ms), collective_points(curves), coverage=settings.coverage),
                     settings.coverage)
    test = load_measured([str(p) for p in new])
    rows = []
    for _, r in test.runs.iterrows():
        cell = test.cell(r["cell_id"])
        # the engine that ran it: a calibration of another build is foreign (its bands add the cross error)
        engine = {k: str(r[k]) for k in KEY_FIELDS if isinstance(r.get(k), str) and r[k] != UNRECORDED}
        cal, relation = choose_calibration(cell.hardware, cals, engine)
        p = Projector(cal, relation=relation, refuse=False).project(cell, machine_of(r))
        row: dict[str, Any] = {
            "cell_id": r["cell_id"], "calibration": cal.key, "relation": relation, "machine": p["machine"],
            "host_factor": p["host_factor"], "host_bound": p["host_bound"], "extrapolated": p["extrapolated"],
            "extrapolated_parts": p["extrapolated_parts"], "busy_frac": r.get("busy_frac"), "regime": p["regime"],
            "band_basis": p["band_basis"], "refused": p["refused"], "machine_class": p["machine_class"]}
        for m in CHECKED:
            meas, pred, half = float(r[m]), float(p[m]), float(p[f"{m}_band"])
            err = pred / meas - 1.0
            row |= {f"{m}_measured": meas, f"{m}_predicted": pred, f"{m}_rel_error": err, f"{m}_band": half,
                    f"{m}_covered": bool(abs(err) <= half) if half == half else None}
        rows.append(row)
    stated = float(next(iter(cals.values())).coverage.get("stated", settings.coverage))
    return Prospective(pd.DataFrame(rows), ms, train, cals, stated)


__all__ = ["CHECKED", "Prospective", "project_new"]

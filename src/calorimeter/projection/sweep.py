"""Project every planned cell of a sweep (the ``projection`` workflow target).

Each cell is projected with the newest calibration of its GPU type whose engine fingerprint matches the engine
projected for (``projection.engine``; default: the newest engine recorded for that GPU type); without one, the
newest calibration of its GPU type (``foreign``: the row's ``assumed`` says so and its bands widen by the measured
cross-fingerprint error), else another GPU type's (``other-gpu``: a stated fallback).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from calorimeter.plan.cell import Cell
from calorimeter.plan.plan import Plan
from calorimeter.projection.calibration import Calibration
from calorimeter.projection.collectives import NetworkOverride
from calorimeter.projection.fingerprint import Fingerprint
from calorimeter.projection.model import Projector
from calorimeter.records.atomic import write_atomic, write_parquet_atomic


def _newest(cals: list[Calibration]) -> Calibration:
    """The newest calibration (recorded kernels first, then the newest record, then the most cells)."""
    return max(cals, key=lambda c: (Fingerprint.from_dict(c.fingerprint).kernels_recorded, c.recorded_at,
                                    len(c.cells)))


def choose_calibration(hardware: str, calibrations: dict[str, Calibration], engine: dict[str, str] | None = None
                       ) -> tuple[Calibration, str]:
    """The calibration a cell on ``hardware`` is projected with, and its relation (``match``, ``foreign``,
    ``other-gpu``).

    Args:
        engine: fingerprint fields the engine projected for must have (``{}``/None: the newest engine recorded
            for that GPU type, which then matches by definition).

    Raises:
        ValueError: no calibration at all.
    """
    if not calibrations:
        raise ValueError("no calibration to project with")
    own = [c for c in calibrations.values() if c.hardware == hardware]
    if not own:
        return _newest(list(calibrations.values())), "other-gpu"
    if not engine:
        return _newest(own), "match"
    fits = [c for c in own if all(c.fingerprint.get(k) == v for k, v in engine.items())]
    return (_newest(fits), "match") if fits else (_newest(own), "foreign")


def project_cells(cells: list[Cell], calibrations: dict[str, Calibration], network: NetworkOverride | None = None,
                  engine: dict[str, str] | None = None) -> pd.DataFrame:
    """One projected row per cell (:func:`choose_calibration` picks each cell's calibration).

    Raises:
        ValueError: no calibration at all.
    """
    target = ", ".join(f"{k} {v}" for k, v in (engine or {}).items())
    projectors: dict[str, Projector] = {}
    rows = []
    for c in cells:
        if c.hardware not in projectors:
            cal, relation = choose_calibration(c.hardware, calibrations, engine)
            projectors[c.hardware] = Projector(cal, network, relation, target)
        rows.append(projectors[c.hardware].project(c))
    return pd.DataFrame(rows)


def used_calibrations(df: pd.DataFrame, calibrations: dict[str, Calibration]) -> list[str]:
    """One line per calibration a projection used: GPU type, relation, fingerprint, records (for the log)."""
    lines = []
    if df.empty:
        return lines
    for (hw, key, rel), g in df.groupby(["hardware", "calibration", "calibration_relation"]):
        cal = calibrations[key]
        recs = ", ".join(f"{src} ({len(ids)} cells)" for src, ids in sorted(cal.records.items()))
        lines.append(f"{len(g)} {hw} cells: calibration {key} [{rel}] fingerprint "
                     f"{Fingerprint.from_dict(cal.fingerprint).describe()}; newest record {cal.recorded_at or '-'}; "
                     f"records: {recs}")
    return lines


def project_plan(plan: Plan, calibrations: dict[str, Calibration], network: NetworkOverride | None = None,
                 engine: dict[str, str] | None = None) -> pd.DataFrame:
    """Every planned cell of a plan (pruned cells are not projected: they cannot run as planned)."""
    return project_cells([pc.cell for pc in plan.runnable], calibrations, network, engine)


def write_projection(df: pd.DataFrame, out: str | Path) -> None:
    """Parquet plus a CSV next to it (list-valued columns as strings)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_parquet_atomic(out, df)
    write_atomic(out.with_suffix(".csv"), lambda tmp: df.to_csv(tmp, index=False))


__all__ = ["choose_calibration", "project_cells", "project_plan", "used_calibrations", "write_projection"]

"""Project every planned cell of a sweep (the ``projection`` workflow target and ``calorimeter project``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from calorimeter.plan.cell import Cell
from calorimeter.plan.plan import Plan
from calorimeter.projection.calibration import Calibration
from calorimeter.projection.model import Projector
from calorimeter.records.atomic import write_atomic, write_parquet_atomic

#: the default calibration sources: the committed H200 measurements (sweep folders with tables/)
DEFAULT_CALIBRATION: tuple[str, ...] = (
    "results/reference/h200x2-2026-11-21/gpu-llama8b",
    "results/reference/h200x2-moe-tp-check-2026-11-21/h200x2-moe-tp-check",
    "results/reference/h200x4-2026-11-21/h200x4-parallelism",
    "results/reference/h200x8-2026-11-21/h200x8-parallelism",
)

#: the default collective curves: the committed NCCL sweep (``kind: collectives``) on 2x H200; group sizes other
#: than 2 carry its bus bandwidth over (projection.collectives), and traced collectives fill sizes it does not cover
DEFAULT_COLLECTIVES: tuple[str, ...] = (
    "results/reference/h200x2-collectives-2026-11-23/h200x2-collectives",
)

#: the default validation: predict the 8-GPU H200 cells from the 2- and 4-GPU sets, and the reverse
DEFAULT_FOLDS: tuple[dict, ...] = (
    {"name": "8 GPUs from 2+4", "train": list(DEFAULT_CALIBRATION[:3]), "test": [DEFAULT_CALIBRATION[3]]},
    {"name": "2+4 GPUs from 8", "train": [DEFAULT_CALIBRATION[3]], "test": list(DEFAULT_CALIBRATION[:3])},
)


def project_cells(cells: list[Cell], calibrations: dict[str, Calibration], network: dict[str, Any] | None = None
                  ) -> pd.DataFrame:
    """One projected row per cell.

    A cell uses the calibration of its own hardware when there is one, else the first calibration (the row's
    ``assumed`` column says so).

    Raises:
        ValueError: no calibration at all.
    """
    if not calibrations:
        raise ValueError("no calibration to project with")
    projectors = {hw: Projector(cal, network) for hw, cal in calibrations.items()}
    fallback = next(iter(projectors.values()))
    return pd.DataFrame([projectors.get(c.hardware, fallback).project(c) for c in cells])


def project_plan(plan: Plan, calibrations: dict[str, Calibration], network: dict[str, Any] | None = None
                 ) -> pd.DataFrame:
    """Every planned cell of a plan (pruned cells are not projected: they cannot run as planned)."""
    return project_cells([pc.cell for pc in plan.runnable], calibrations, network)


def write_projection(df: pd.DataFrame, out: str | Path) -> None:
    """Parquet plus a CSV next to it (list-valued columns as strings)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_parquet_atomic(out, df)
    write_atomic(out.with_suffix(".csv"), lambda tmp: df.to_csv(tmp, index=False))

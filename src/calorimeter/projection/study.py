"""Every cell of a plan as a projected row, as the study's figures and the cost before running need them.

A planned cell the projection covers is its projected row (:meth:`calorimeter.projection.model.Projector.project`,
``status`` ``projected``); one it refuses is a row with ``status`` ``refused`` and the reason (``reason``); a cell
the plan pruned keeps ``status`` ``pruned`` with the plan's reasons. Nothing is dropped: a figure draws refused and
pruned cells as bands that say so.

Refused (:func:`refusal`): what the projection itself refuses (its row's ``refused`` column, where the model has
one); a cell of a GPU type without a calibration of its own (the model would borrow another GPU type's); and, while
the model has no ``refused`` column, a MoE cell whose calibration holds no MoE cell of its engine (its error on
expert layers was never measured: Mixtral cells on 4 GPUs were projected a fifth to twice too fast, outside their
bands, although the row's band looked like a dense cell's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from calorimeter.plan.cell import Cell
from calorimeter.plan.plan import Plan
from calorimeter.projection.calibration import Calibration, load_calibrations
from calorimeter.projection.collectives import NetworkOverride
from calorimeter.projection.coverage import uncovered
from calorimeter.projection.model import Projector
from calorimeter.projection.sweep import choose_calibration

#: the projected row's column with the projection's own refusal (empty: not refused), where the model writes one
REFUSED_COLUMN = "refused"
STATUS_PROJECTED, STATUS_REFUSED, STATUS_PRUNED = "projected", "refused", "pruned"


def refusal(row: dict[str, Any]) -> str:
    """Why a projected row is refused, "" when it is not (module docstring)."""
    own = row.get(REFUSED_COLUMN)
    if row.get("calibration_relation") == "other-gpu":
        return (f"no calibration of {row.get('hardware')} (the projection would borrow the "
                f"{row.get('calibration_hardware')} one)")
    if isinstance(own, str):  # the model decides
        return own
    if "experts=" in str(row.get("extrapolated_parts") or ""):
        return ("MoE: the calibration holds no MoE cell of this engine, so its error on expert routing and "
                "all-to-all was never measured")
    return ""


class StudyProjector:
    """Projects cells with the calibrations of one calibration.json, a projector per GPU type (as
    :func:`calorimeter.projection.sweep.project_cells` does), one cell at a time so that one cell the model cannot
    price refuses that cell alone."""

    def __init__(self, calibrations: dict[str, Calibration], network: NetworkOverride | None = None,
                 engine: dict | None = None, unusable: str = "") -> None:
        self.calibrations = calibrations
        self.network, self.engine = network or None, dict(engine or {}) or None
        self.unusable = unusable
        self._projectors: dict[str, Projector] = {}

    @classmethod
    def from_file(cls, path: str | Path, network: NetworkOverride | None = None, engine: dict | None = None,
                  strict: bool = True) -> StudyProjector:
        """From a calibration.json.

        Args:
            strict: raise for a file fitted for another projection model; False: every row is refused with the
                reason (the default target never fails on an outdated committed calibration).

        Raises:
            ValueError: it was fitted for another projection model (``strict``).
        """
        try:
            return cls(load_calibrations(path), network, engine)
        except ValueError as e:
            if strict:
                raise
            return cls({}, network, engine, unusable=f"no usable calibration: {e}")

    def row(self, cell: Cell) -> dict[str, Any]:
        """The cell's projected row with ``status`` and ``reason`` (module docstring)."""
        why = uncovered(cell) or self.unusable
        if not why:
            if cell.hardware not in self._projectors:
                cal, relation = choose_calibration(cell.hardware, self.calibrations, self.engine)
                target = ", ".join(f"{k} {v}" for k, v in (self.engine or {}).items())
                self._projectors[cell.hardware] = Projector(cal, self.network, relation, target)
            try:
                row = self._projectors[cell.hardware].project(cell)
            except (ValueError, KeyError, ZeroDivisionError) as e:
                why = f"the projection cannot price it ({type(e).__name__}: {e})"
            else:
                why = refusal(row)
                if not why:
                    return {**row, "status": STATUS_PROJECTED, "reason": ""}
        return {**cell.to_dict(), "source": "projected", "status": STATUS_REFUSED, "reason": why}


def plan_rows(plan: Plan, proj: StudyProjector) -> pd.DataFrame:
    """One row per cell of the plan, planned (projected or refused) and pruned alike, in plan order."""
    rows = []
    for pc in plan.cells:
        if pc.status != "planned":
            rows.append({**pc.cell.to_dict(), "source": "projected", "status": STATUS_PRUNED,
                         "reason": "; ".join(pc.reasons)})
        else:
            rows.append(proj.row(pc.cell))
    df = pd.DataFrame(rows)
    df.insert(0, "sweep_file", plan.config.get("_source", ""))
    return df


__all__ = ["REFUSED_COLUMN", "STATUS_PROJECTED", "STATUS_PRUNED", "STATUS_REFUSED", "StudyProjector", "plan_rows",
           "refusal"]

"""The sweep summary (= the ``runs`` table): one row per cell (run, pruned or not yet run).

``summarize`` computes it in one go from the cell folders (used by ``calorimeter aggregate``); the workflow builds
the same table incrementally from per-cell tables (see ``calorimeter.analysis.tables``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from calorimeter.analysis.damaged import readable_cell_tables
from calorimeter.analysis.tables import runs_table
from calorimeter.plan.plan import Plan
from calorimeter.records.paths import CellPaths


def summarize(plan: Plan, run_files: list[Path] | None = None, notes: list[str] | None = None) -> pd.DataFrame:
    """Summary of a sweep: every cell of the plan, in plan order, with telemetry columns where measured.

    Args:
        plan: the sweep's plan.
        run_files: run.json files to read (default: look in each planned cell's folder).
        notes: gets one line per damaged file left out (see :mod:`calorimeter.analysis.damaged`).
    """
    files = run_files if run_files is not None else [
        CellPaths.of(plan.results_dir, c.cell.sweep, c.cell.cell_id).run_json for c in plan.runnable]
    rows = []
    for f in files:
        f = Path(f)
        if f.is_file():
            tables, found = readable_cell_tables(f.parent)
            rows.append(tables.runs)
            if notes is not None:
                notes.extend(found)
    cell_runs = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
    return runs_table([pc.to_dict() for pc in plan.cells], cell_runs)

"""The sweep summary (= the ``runs`` table): one row per cell (run, pruned or not yet run).

``summarize`` computes it in one go from the cell folders (used by ``calorimeter aggregate``); the workflow builds
the same table incrementally from per-cell tables (see ``calorimeter.analysis.tables``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from calorimeter.analysis.cell import METRIC_KEYS, PARAM_KEYS, cell_tables, record_row
from calorimeter.analysis.tables import runs_table
from calorimeter.plan.plan import Plan
from calorimeter.records.record import RUN_JSON

__all__ = ["METRIC_KEYS", "PARAM_KEYS", "cell_dir", "record_row", "summarize", "write_summary"]


def cell_dir(results_dir: str | Path, sweep: str, cell_id: str) -> Path:
    """Folder of one cell's outputs."""
    return Path(results_dir) / sweep / "cells" / cell_id


def summarize(plan: Plan, run_files: list[Path] | None = None) -> pd.DataFrame:
    """Summary of a sweep: every cell of the plan, in plan order, with telemetry columns where measured.

    Args:
        plan: the sweep's plan.
        run_files: run.json files to read (default: look in each planned cell's folder).
    """
    files = run_files if run_files is not None else [
        cell_dir(plan.results_dir, c.cell.sweep, c.cell.cell_id) / RUN_JSON for c in plan.runnable]
    rows = []
    for f in files:
        f = Path(f)
        if f.is_file():
            rec = json.loads(f.read_text())
            rows.append(cell_tables(f.parent, rec).runs)
    cell_runs = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
    return runs_table([pc.to_dict() for pc in plan.cells], cell_runs)


def write_summary(df: pd.DataFrame, parquet_path: Path, csv_path: Path) -> None:
    """Write the table as Parquet and CSV (atomically)."""
    from calorimeter.analysis.tables import write_table

    write_table(df, parquet_path, csv_path)

"""Damaged cell records: aggregation skips what cannot be read, with a note naming the cell and the file.

A cell folder may hold a ``run.json`` that is not JSON, a ``steps.parquet`` that is not Parquet, or a telemetry table
missing a column (a disk filled up, a file copied by hand, an older writer). None of these may stop the tables and
figures of the healthy cells, and nothing on disk is changed:

* ``run.json`` unreadable: the cell's run row says ``status: corrupt`` with the file and the problem; its other
  tables are empty;
* any other file unreadable or unusable: that file is left out (as if it were missing), and the run row's
  ``data_notes`` say which file and why; the rest of the cell's tables are computed as usual.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from calorimeter.analysis.cell import METRIC_KEYS, TELEMETRY_KEYS, CellTables, cell_tables
from calorimeter.records.paths import KERNELS_PARQUET, RUN_JSON, STEPS_PARQUET, TELEMETRY_JSON, TELEMETRY_PARQUET
from calorimeter.records.run_record import RecordError, RunRecord, read_run_record

#: files of a cell folder that are left out one by one when the cell's tables cannot be computed with them
OPTIONAL_FILES = (TELEMETRY_PARQUET, KERNELS_PARQUET, TELEMETRY_JSON, STEPS_PARQUET)
CORRUPT = "corrupt"


def _problem_text(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".splitlines()[0] if str(e) else type(e).__name__
    return text if len(text) <= 200 else text[:180] + "..."


def parquet_problem(path: Path) -> str | None:
    """Why ``path`` is not a readable Parquet file (None when it is, or when it does not exist)."""
    if not path.is_file():
        return None
    try:
        with path.open("rb") as f:
            head = f.read(4)
            f.seek(max(path.stat().st_size - 4, 0))
            tail = f.read(4)
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if head != b"PAR1" or tail != b"PAR1":
        return "not a Parquet file"
    try:
        import pyarrow.parquet as pq

        pq.read_schema(path)
    except Exception as e:  # noqa: BLE001 - any reader error means the file is damaged
        return f"unreadable Parquet ({_problem_text(e)})"
    return None


def load_record(cell_dir: Path) -> tuple[RunRecord | None, str | None]:
    """(run.json, None) or (None, why it cannot be used)."""
    try:
        return read_run_record(Path(cell_dir) / RUN_JSON), None
    except RecordError as e:
        return None, str(e)


def corrupt_tables(cell_id: str, problem: str) -> CellTables:
    """The tables of a cell whose run.json cannot be used: one run row that says so, nothing else."""
    row: dict[str, Any] = {"cell_id": cell_id, "status": CORRUPT, "failure_class": CORRUPT, "reason": problem,
                           "data_notes": problem}
    row.update(dict.fromkeys(METRIC_KEYS, math.nan))
    row.update({k: math.nan for k in TELEMETRY_KEYS if k != "energy_source"})
    return CellTables(runs=pd.DataFrame([row]))


def readable_cell_tables(cell_dir: str | Path) -> tuple[CellTables, list[str]]:
    """A cell's tables from whatever of its folder can be read, and a note per file left out.

    Each note names the cell and the file (``<cell>/<file>: <problem>``); the run row's ``data_notes`` carry them.
    """
    cell_dir = Path(cell_dir)
    cid = cell_dir.name
    record, problem = load_record(cell_dir)
    if record is None:
        note = f"{cid}/{RUN_JSON}: {problem}; the cell is left out of the tables"
        return corrupt_tables(cid, f"{RUN_JSON}: {problem}"), [note]
    skip: dict[str, str] = {}
    for name in (STEPS_PARQUET, TELEMETRY_PARQUET, KERNELS_PARQUET):
        why = parquet_problem(cell_dir / name)
        if why:
            skip[name] = why
    error: BaseException | None = None
    for extra in (None, *OPTIONAL_FILES, "all"):
        if extra in skip:
            continue
        trial = dict(skip)
        if extra == "all":
            trial.update({f: "left out" for f in OPTIONAL_FILES if (cell_dir / f).is_file() and f not in skip})
        elif extra is not None:
            if not (cell_dir / extra).is_file():
                continue
            trial[extra] = f"unusable ({_problem_text(error)})" if error else "unusable"
        try:
            tables = cell_tables(cell_dir, record, skip=set(trial))
        except Exception as e:  # noqa: BLE001 - try again without the next file
            error = error or e
            continue
        notes = [f"{cid}/{f}: {why}; left out" for f, why in trial.items()]
        if notes:
            old = str(tables.runs.at[0, "data_notes"] or "")
            tables.runs.at[0, "data_notes"] = "; ".join([*(n.split("/", 1)[1] for n in notes), *([old] if old else [])])
        return tables, notes
    problem = _problem_text(error) if error else "unknown"
    note = f"{cid}: its tables cannot be computed ({problem}); the cell is left out of the tables"
    return corrupt_tables(cid, f"tables cannot be computed: {problem}"), [note]

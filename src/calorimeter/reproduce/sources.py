"""Where a comparison's numbers come from: a folder of records or tables, read as one runs table.

A folder can be a sweep (``<results>/<sweep>`` with ``tables/runs.parquet`` or ``cells/``), a results folder or a
committed set holding several sweeps (``results/reference/<set>``), or a ``tables`` folder. Sweeps without tables are
read from their cell records (the same per-cell tables ``snakemake`` builds, computed in memory: nothing is written
next to the records). Tables of any age get today's parameter columns (:func:`calorimeter.records.legacy.upgrade_runs`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from calorimeter.analysis.damaged import readable_cell_tables
from calorimeter.projection.fingerprint import Fingerprint
from calorimeter.records.legacy import upgrade_runs
from calorimeter.records.paths import RUN_JSON
from calorimeter.records.run_record import RecordError, read_run_record


@dataclass
class Source:
    """The runs of one side of a comparison.

    Attributes:
        folder: what was given.
        runs: one row per cell (all sweeps found), today's columns.
        engines: cell id -> what of the engine ran in it (:meth:`Fingerprint.ran` of its record, as sorted JSON: a
            key to compare and group by); absent where no record was found or it holds no engine.
        sweeps: the sweep folders read, and whether from tables or records.
        gpus: one row per (cell, GPU) with what tells the machine (:data:`MACHINE_COLUMNS`); empty where no per-GPU
            table or record was found.
    """

    folder: Path
    runs: pd.DataFrame
    engines: dict[str, str] = field(default_factory=dict)
    sweeps: list[str] = field(default_factory=list)
    gpus: pd.DataFrame = field(default_factory=pd.DataFrame)


#: the per-GPU columns that tell which machine a cell ran on (calorimeter.records.machines.machine_keys)
MACHINE_COLUMNS = ("cell_id", "node", "hostname", "uuid")


def _machine_columns(gpus: pd.DataFrame) -> pd.DataFrame:
    return gpus[[c for c in MACHINE_COLUMNS if c in gpus.columns]] if not gpus.empty else pd.DataFrame()


def sweep_folders(folder: Path) -> list[Path]:
    """The sweep folders under ``folder`` (itself, its children, or the parent of a ``tables`` folder)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder")
    if folder.name == "tables" and (folder / "runs.parquet").is_file():
        return [folder.parent]
    if (folder / "tables" / "runs.parquet").is_file() or (folder / "cells").is_dir():
        return [folder]
    found = sorted(p for p in folder.iterdir() if p.is_dir() and ((p / "tables" / "runs.parquet").is_file()
                                                                   or (p / "cells").is_dir()))
    if not found:
        raise FileNotFoundError(f"{folder}: no sweep here (a sweep folder has tables/runs.parquet or cells/)")
    return found


def fingerprint_difference(reference: str, reproduction: str) -> str:
    """What ran differently in two cells (two :data:`Source.engines` keys), e.g. ``attention flash vs cudnn``."""
    a, b = json.loads(reference or "{}"), json.loads(reproduction or "{}")
    return "; ".join(f"{k} {b.get(k)} vs {a.get(k)}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))


def tables_from_records(sweep: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The runs rows and the per-GPU machine columns of a sweep computed from its cell records alone (in memory;
    damaged files noted in data_notes)."""
    tables = [readable_cell_tables(c)[0] for c in sorted((sweep / "cells").iterdir()) if (c / RUN_JSON).is_file()]
    runs = [t.runs for t in tables if not t.runs.empty]
    gpus = [_machine_columns(t.gpus) for t in tables if not t.gpus.empty]
    return (pd.concat(runs, ignore_index=True) if runs else pd.DataFrame(),
            pd.concat(gpus, ignore_index=True) if gpus else pd.DataFrame())


def runs_from_records(sweep: Path) -> pd.DataFrame:
    """The runs rows of a sweep computed from its cell records alone (in memory; damaged files noted in data_notes)."""
    return tables_from_records(sweep)[0]


def load_source(folder: str | Path) -> Source:
    """Every sweep under ``folder`` as one runs table, with the engine fingerprint and the GPUs of each cell."""
    folder = Path(folder)
    frames, gpus, engines, read = [], [], {}, []
    for sweep in sweep_folders(folder):
        table = sweep / "tables" / "runs.parquet"
        if table.is_file():
            frames.append(pd.read_parquet(table))
            g = sweep / "tables" / "gpus.parquet"
            if g.is_file():
                gpus.append(_machine_columns(pd.read_parquet(g)))
            read.append(f"{sweep.name} (tables)")
        else:
            runs, g = tables_from_records(sweep)
            frames.append(runs)
            gpus.append(g)
            read.append(f"{sweep.name} (records)")
        for run_json in sorted(sweep.glob(f"cells/*/{RUN_JSON}")):
            try:
                fp = Fingerprint.of(read_run_record(run_json))
            except RecordError:
                continue
            if fp.ran():
                engines[run_json.parent.name] = json.dumps(fp.ran(), sort_keys=True)
    frames, gpus = [f for f in frames if not f.empty], [g for g in gpus if not g.empty]
    runs = upgrade_runs(pd.concat(frames, ignore_index=True)) if frames else pd.DataFrame()
    return Source(folder, runs, engines, read, pd.concat(gpus, ignore_index=True) if gpus else pd.DataFrame())

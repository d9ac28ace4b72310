"""The table of a ``collectives`` cell: one row per (collective, group size, message size), and the conventions of
its curves that the projection reads (:func:`bus_factor`, :data:`CURVE_COLUMNS`). The collectives themselves are
named once, in :data:`calorimeter.plan.work.COLLECTIVES`.

Columns: ``kind`` (all_reduce, all_gather, reduce_scatter, all_to_all, send_recv), ``group`` (ranks per group; every
disjoint group of that size runs at once, as tensor-parallel groups do in training), ``size_bytes`` (nccl-tests'
convention: the full buffer, i.e. the gathered output of all-gather, the input of reduce-scatter, each rank's send
buffer of all-to-all), ``time_s`` (the slowest rank's mean time per call over its timed batch),
``algbw_gbyte_s`` (size / time), ``busbw_gbyte_s`` (times nccl-tests' factor), ``iterations``, ``backend``,
``dtype``, ``nodes``, ``error`` (why a point is missing: e.g. not supported by the backend).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from calorimeter.plan.kinds import COLLECTIVES_PARQUET
from calorimeter.records.atomic import write_parquet_atomic
from calorimeter.records.paths import CellPaths
from calorimeter.records.run_record import RecordError, read_run_record

#: columns of a curve of measured points (seconds per call of one collective over one group and message size)
CURVE_COLUMNS = ("kind", "role", "group", "size_bytes", "time_s", "source")
TABLE_COLUMNS: tuple[str, ...] = ("kind", "group", "size_bytes", "time_s", "algbw_gbyte_s", "busbw_gbyte_s",
                                  "iterations", "backend", "dtype", "nodes", "error")


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor of a collective over ``n`` ranks."""
    if n <= 1:
        return 0.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def write_table(rows: list[dict], cell_dir: str | Path) -> Path:
    """Write the rows as ``collectives.parquet`` in the cell folder (atomically)."""
    out = Path(cell_dir) / COLLECTIVES_PARQUET
    write_parquet_atomic(out, pd.DataFrame(rows, columns=list(TABLE_COLUMNS)))
    return out


def read_collective_points(sweep_dir: str | Path) -> pd.DataFrame:
    """Curve points for the projection from every ``collectives`` cell of a sweep folder.

    Only cells whose record says ``ok`` count; points with an error or no time are dropped. Returns the columns of
    :data:`CURVE_COLUMNS` plus ``hardware`` and ``cell_id``.
    """
    frames = []
    for table in sorted(Path(sweep_dir).glob(f"cells/*/{COLLECTIVES_PARQUET}")):
        try:
            record = read_run_record(CellPaths(table.parent).run_json)
        except RecordError:
            continue
        if not record.ok:
            continue
        t = pd.read_parquet(table)
        t = t[t["time_s"].notna() & (t["time_s"] > 0) & t["error"].isna()]
        if t.empty:
            continue
        frames.append(pd.DataFrame({
            "kind": t["kind"], "role": "sync", "group": t["group"].astype(int), "size_bytes": t["size_bytes"],
            "time_s": t["time_s"], "source": "collectives", "hardware": record.cell["hardware"],
            "cell_id": record.cell_id or table.parent.name}))
    cols = [*CURVE_COLUMNS, "hardware", "cell_id"]
    return pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)

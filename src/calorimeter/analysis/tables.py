"""The sweep's aggregated store: each table concatenates the per-cell tables (``cells/<id>/cell_tables/``).

* ``runs``: one row per cell of the plan (ok, oom, failed from the record; pruned and not-run cells from the plan
  with their reasons), with ``efficiency_norm`` = efficiency / the best configuration's mean efficiency of the same
  model in the sweep (:func:`best_configuration_efficiency`, which the figures normalise by too);
* ``gpus``: one row per cell x GPU; ``steps``: per cell, rank and step; ``kernels``: per cell, traced rank and
  kernel category; ``timeseries``: downsampled per-GPU telemetry.

A new cell only adds its own per-cell files; the sweep tables only concatenate.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from calorimeter.analysis.cell import METRIC_KEYS, PARAM_KEYS, TELEMETRY_KEYS
from calorimeter.plan.cell import as_recorded
from calorimeter.records.atomic import write_atomic, write_parquet_atomic
from calorimeter.records.legacy import add_machines, config_ids, upgrade_plan_cell, upgrade_runs
from calorimeter.records.paths import TABLE_NAMES


def concat_cell_tables(paths: Iterable[str | Path], notes: list[str] | None = None) -> pd.DataFrame:
    """Concatenate per-cell Parquet files of one table (empty ones skipped), in the given order.

    A file that cannot be read is skipped; ``notes`` (when given) gets one line naming it.
    """
    frames = []
    for p in paths:
        try:
            df = pd.read_parquet(p)
        except Exception as e:  # noqa: BLE001 - a damaged per-cell table must not stop the sweep's table
            if notes is None:
                raise
            notes.append(f"{p}: unreadable ({type(e).__name__}); skipped")
            continue
        if not df.empty and len(df.columns) > 1:
            frames.append(df)
    if not frames:
        return pd.DataFrame({"cell_id": pd.Series(dtype="object")})
    return pd.concat(frames, ignore_index=True)


def plan_row(cell: dict[str, Any]) -> dict[str, Any]:
    """Row of a cell that has no record: its parameters and plan status (pruned / not_run) with reasons."""
    shown = as_recorded(cell)
    row = {k: shown.get(k) for k in PARAM_KEYS}
    row["config_id"] = row["config_id"] or row["cell_id"]
    row["repeat"] = int(row["repeat"] or 0)
    row["kind"] = row["kind"] or "train"
    row["pp_split"] = str(cell.get("pp_split") or "")
    row["placement"] = cell.get("placement") or "default"
    row["status"] = "pruned" if cell.get("status") == "pruned" else "not_run"
    row["reason"] = "; ".join(cell.get("reasons") or [])
    row.update(dict.fromkeys(METRIC_KEYS, float("nan")))
    row.update(dict.fromkeys(TELEMETRY_KEYS, float("nan")))
    row["energy_source"] = ""
    row["machine"] = ""
    row["data_quality"] = ""
    row["n_gpus"] = 0
    return row


def runs_table(plan_cells: list[dict[str, Any]], cell_runs: pd.DataFrame) -> pd.DataFrame:
    """Every cell of the plan in plan order: the cell's own run row where it has one, else its plan row.

    Args:
        plan_cells: ``plan.json``'s ``cells`` (parameters, status, reasons).
        cell_runs: concatenated per-cell ``runs`` rows.
    """
    have = {r["cell_id"]: r for r in cell_runs.to_dict("records")} if not cell_runs.empty else {}
    rows = [_with_plan_params(have[c["cell_id"]], c) if c["cell_id"] in have else plan_row(c) for c in plan_cells]
    df = pd.DataFrame(rows)
    return add_normalized_efficiency(df)


def _with_plan_params(row: dict[str, Any], cell: dict[str, Any]) -> dict[str, Any]:
    """A cell's own run row; parameters it lacks (a damaged record's row has none) come from the plan."""
    cell = as_recorded(cell)
    missing = {k: cell.get(k) for k in PARAM_KEYS if row.get(k) is None or (isinstance(row.get(k), float)
                                                                             and row.get(k) != row.get(k))}
    return {**row, **missing} if missing else row


def best_configuration_efficiency(df: pd.DataFrame) -> pd.Series:
    """Per row, the efficiency the study's "Norm. Efficiency" divides by: among the ok rows of ``df`` of the same
    model (and sweep), each configuration's mean efficiency over its repetitions (rows sharing a ``config_id``; a row
    that already stands for a configuration's mean is its own), the largest of those means; NaN where none is > 0.

    ``df`` is the set a best configuration may come from: every cell of the sweep for the runs table, the drawn
    configurations for a figure. The reference is a configuration's mean, never one repetition, so a configuration's
    repetitions scatter about their normalised mean and the best configuration's mean is 1."""
    eff = pd.to_numeric(df["efficiency"], errors="coerce") if "efficiency" in df.columns else \
        pd.Series(float("nan"), index=df.index)
    if "status" in df.columns:
        eff = eff.where(df["status"].eq("ok"))
    keys = [df[k] for k in ("sweep", "model") if k in df.columns]
    cfg = config_ids(df) if "cell_id" in df.columns else pd.Series(range(len(df)), index=df.index).astype(str)
    means = eff.groupby([*keys, cfg], dropna=False).transform("mean")
    best = means.groupby(keys, dropna=False).transform("max") if keys else pd.Series(means.max(), index=df.index)
    return best.where(best > 0)


def add_normalized_efficiency(df: pd.DataFrame) -> pd.DataFrame:
    """``efficiency_norm``: each cell's efficiency over :func:`best_configuration_efficiency` of the sweep = the
    study's "Norm. Efficiency" (1 for the mean of each model's best configuration)."""
    df = df.copy()
    if "efficiency" not in df.columns:
        df["efficiency"] = float("nan")
    df["efficiency_norm"] = pd.to_numeric(df["efficiency"], errors="coerce") / best_configuration_efficiency(df)
    return df


def load_plan_cells(plan_json: str | Path) -> list[dict[str, Any]]:
    """``cells`` of a plan.json (older estimate names upgraded)."""
    return [upgrade_plan_cell(c) for c in json.loads(Path(plan_json).read_text())["cells"]]


def read_tables(tables_dir: str | Path, names: Iterable[str] = TABLE_NAMES) -> dict[str, pd.DataFrame]:
    """The sweep's tables that exist (missing ones are empty frames); runs and configs tables of any age with
    today's parameter columns (:func:`calorimeter.records.legacy.upgrade_runs`)."""
    out = {}
    for n in names:
        p = Path(tables_dir) / f"{n}.parquet"
        out[n] = pd.read_parquet(p) if p.is_file() else pd.DataFrame()
        if n in ("runs", "configs"):
            out[n] = upgrade_runs(out[n])
    if "runs" in out:  # tables older than the machine column: from the GPUs' UUIDs
        out["runs"] = add_machines(out["runs"], out.get("gpus"))
    return out


def write_table(df: pd.DataFrame, path: str | Path, csv: str | Path | None = None) -> None:
    """Write a table as Parquet (and CSV) atomically."""
    write_parquet_atomic(Path(path), df)
    if csv is not None:
        write_atomic(Path(csv), lambda p: df.to_csv(p, index=False))

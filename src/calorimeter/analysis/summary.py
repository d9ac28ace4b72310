"""The sweep summary table: one row per cell (run, pruned or not yet run) with parameters, status and metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from calorimeter.plan.plan import Plan
from calorimeter.records.record import RUN_JSON

METRIC_KEYS = ("iteration_time_s", "iteration_time_std_s", "samples_per_s", "tokens_per_s", "tokens_per_s_per_gpu",
               "tflops_per_gpu", "model_tflops_per_gpu", "mfu", "hfu", "measured_steps")
PARAM_KEYS = ("cell_id", "sweep", "model", "hardware", "nodes", "gpus_per_node", "world_size", "tp", "pp", "dp",
              "ep", "cp", "sequence_parallel", "zero_stage", "recompute", "recompute_layers", "overlap",
              "micro_batch", "global_batch", "grad_accum", "seq_len", "precision", "parallel_label",
              "optimization_label")


def cell_dir(results_dir: str | Path, sweep: str, cell_id: str) -> Path:
    """Folder of one cell's outputs."""
    return Path(results_dir) / sweep / "cells" / cell_id


def record_row(record: dict[str, Any]) -> dict[str, Any]:
    """Flatten one run.json into a table row."""
    row = {k: record["cell"].get(k) for k in PARAM_KEYS}
    row["status"] = record["status"]
    row["reason"] = record.get("reason", "")
    m = record.get("metrics") or {}
    row.update({k: m.get(k, float("nan")) for k in METRIC_KEYS})
    row["mfu_unavailable_reason"] = m.get("mfu_unavailable_reason", "")
    peak = record.get("peak_memory_bytes")
    row["peak_memory_gb"] = peak / 1e9 if peak is not None else float("nan")
    losses = [x["loss"] for x in record.get("loss", [])]
    row["loss_first"] = losses[0] if losses else float("nan")
    row["loss_last"] = losses[-1] if losses else float("nan")
    prov = record.get("provenance", {})
    row["hosts"] = ",".join(prov.get("hosts", []))
    devices = {(r.get("device_info") or {}).get("name") or r.get("device") for r in prov.get("ranks", [])} - {None}
    row["devices"] = ",".join(sorted(devices))
    row["job_id"] = (prov.get("launcher") or {}).get("job_id")
    row["git_commit"] = (prov.get("git") or {}).get("commit")
    return row


def summarize(plan: Plan, run_files: list[Path] | None = None) -> pd.DataFrame:
    """Summary of a sweep: every cell of the plan, in plan order.

    Args:
        plan: the sweep's plan.
        run_files: run.json files to read (default: look in each planned cell's folder).
    """
    records = {}
    files = run_files if run_files is not None else [
        cell_dir(plan.results_dir, c.cell.sweep, c.cell.cell_id) / RUN_JSON for c in plan.runnable]
    for f in files:
        f = Path(f)
        if f.is_file():
            rec = json.loads(f.read_text())
            records[rec["cell_id"]] = rec
    rows = []
    for pc in plan.cells:
        rec = records.get(pc.cell.cell_id)
        if rec is not None:
            rows.append(record_row(rec))
            continue
        row = {k: pc.cell.to_dict().get(k) for k in PARAM_KEYS}
        row.update(status="pruned" if pc.status == "pruned" else "not_run", reason="; ".join(pc.reasons))
        row.update({k: float("nan") for k in METRIC_KEYS})
        rows.append(row)
    df = pd.DataFrame(rows)
    df["pp_split"] = [str(pc.cell.pp_split or "") for pc in plan.cells]
    return df


def write_summary(df: pd.DataFrame, parquet_path: Path, csv_path: Path) -> None:
    """Write the table as Parquet and CSV (atomically)."""
    from calorimeter.records.atomic import write_atomic

    write_atomic(Path(parquet_path), lambda p: df.to_parquet(p, index=False))
    write_atomic(Path(csv_path), lambda p: df.to_csv(p, index=False))

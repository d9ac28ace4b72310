"""Turn one attempt's rank results into the cell record (run.json + steps.parquet) and write it atomically."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pandas as pd

from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import PROFILES
from calorimeter.plan.models import get_model
from calorimeter.records.atomic import write_atomic, write_json_atomic
from calorimeter.records.metrics import step_times_s, throughput_metrics
from calorimeter.records.provenance import git_state, package_versions

SCHEMA_VERSION = 1
RUN_JSON = "run.json"
STEPS_PARQUET = "steps.parquet"
RANK_KEYS = ("rank", "local_rank", "node", "hostname", "backend", "device", "device_info", "pid")


class TransientCellError(RuntimeError):
    """The attempt ended without a deterministic result (killed, timed out, lost node): retry it."""


def classify(rank_results: list[dict[str, Any]], world_size: int, launcher_error: str | None) -> tuple[str, str]:
    """(status, reason) of an attempt: ``ok``, ``oom``, ``failed`` (deterministic) or ``transient``."""
    statuses = [r.get("status") for r in rank_results]
    if len(rank_results) == world_size and all(s == "ok" for s in statuses):
        return "ok", ""
    ooms = [r for r in rank_results if r.get("status") == "oom"]
    if ooms:
        return "oom", f"rank {ooms[0].get('rank')}: {ooms[0].get('error', 'out of memory')}"
    failed = sorted((r for r in rank_results if r.get("status") == "failed"), key=lambda r: r.get("t_end_s", 0))
    if failed:
        # The first rank to fail is the cause; its peers then fail on broken connections.
        return "failed", f"rank {failed[0].get('rank')}: {failed[0].get('error')}"
    missing = world_size - len(rank_results)
    return "transient", (f"{missing} of {world_size} ranks left no result"
                         + (f"; launcher: {launcher_error}" if launcher_error else ""))


def steps_frame(rank_results: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per (rank, step)."""
    rows = [{"rank": r["rank"], **s} for r in rank_results for s in r.get("steps", [])]
    cols = ["rank", "step", "phase", "loss", "time_s", "t_begin_s", "t_end_s"]
    df = pd.DataFrame(rows, columns=cols) if rows else pd.DataFrame({c: [] for c in cols})
    return df.astype({"rank": "int32", "step": "int32", "loss": "float64", "time_s": "float64"})


def build_record(cell: Cell, rank_results: list[dict[str, Any]], launch: dict[str, Any],
                 estimates: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run.json content of one attempt."""
    status, reason = classify(rank_results, cell.world_size, launch.get("launcher_error"))
    profile = PROFILES.get(cell.hardware)
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "cell_id": cell.cell_id,
        "status": status,
        "reason": reason,
        "cell": cell.to_dict(),
        "model": get_model(cell.model).to_dict(),
        "hardware": profile.to_dict() if profile else {"name": cell.hardware},
        "plan_estimates": estimates or {},
    }
    peaks = [r["peak_memory_bytes"] for r in rank_results if r.get("peak_memory_bytes") is not None]
    record["peak_memory_bytes"] = max(peaks) if peaks else None
    if status == "ok":
        rank_steps = [r.get("steps", []) for r in rank_results]
        record["metrics"] = throughput_metrics(cell, step_times_s(rank_steps),
                                               profile.peak_bf16_tflops if profile else None)
        r0 = min(rank_results, key=lambda r: r["rank"])
        record["loss"] = [{"step": s["step"], "phase": s["phase"], "loss": s["loss"]} for s in r0["steps"]]
    else:
        record["metrics"] = {}
    record["provenance"] = {
        "git": git_state(),
        "packages": package_versions(),
        "hosts": sorted({r.get("hostname") for r in rank_results if r.get("hostname")}),
        "ranks": [{k: r.get(k) for k in RANK_KEYS}
                  for r in rank_results],
        "launcher": launch,
    }
    return record


def write_cell_record(cell_dir: Path, record: dict[str, Any], steps: pd.DataFrame, attempt_dir: Path) -> Path:
    """Write steps.parquet, then run.json last (the cell's completion marker), each atomically.

    Both files are also kept in the attempt folder, so a later rerun that replaces the top-level files never
    loses this measurement.
    """
    write_atomic(attempt_dir / STEPS_PARQUET, lambda p: steps.to_parquet(p, index=False))
    write_json_atomic(attempt_dir / RUN_JSON, record)
    write_atomic(cell_dir / STEPS_PARQUET, lambda p: shutil.copyfile(attempt_dir / STEPS_PARQUET, p))
    write_json_atomic(cell_dir / RUN_JSON, record)
    return cell_dir / RUN_JSON

"""Run one planned cell end to end: launch its ranks, classify the outcome, write its record."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from calorimeter.launch.submit import launch_cell
from calorimeter.plan.cell import Cell
from calorimeter.records.record import TransientCellError, build_record, steps_frame, write_cell_record

log = logging.getLogger(__name__)


def run_cell(cell: Cell, launcher: dict[str, Any], cell_dir: Path, estimates: dict[str, Any] | None = None
             ) -> dict[str, Any]:
    """Launch a cell, wait, and write ``run.json`` (status ok, oom or failed).

    Raises:
        TransientCellError: no deterministic outcome (ranks killed, timed out, node lost): nothing is written
            at the top of the cell folder, the attempt folder keeps the evidence, and a rerun resubmits the cell.
    """
    cell_dir = Path(cell_dir)
    outcome = launch_cell(cell, launcher, cell_dir)
    launch = {"executor": outcome.executor, "job_id": outcome.job_id, "attempt": outcome.attempt_dir.name,
              "launcher_error": outcome.launcher_error, "wall_time_s": outcome.wall_time_s,
              "submitit_folder": str(outcome.attempt_dir / "submitit")}
    record = build_record(cell, outcome.rank_results, launch, estimates)
    if record["status"] == "transient":
        from calorimeter.records.atomic import write_json_atomic

        write_json_atomic(outcome.attempt_dir / "run.json", record)
        raise TransientCellError(f"cell {cell.cell_id}: {record['reason']} (evidence in {outcome.attempt_dir})")
    write_cell_record(cell_dir, record, steps_frame(outcome.rank_results), outcome.attempt_dir)
    m = record.get("metrics", {})
    log.info("cell %s: %s %s", cell.cell_id, record["status"],
             f"{m.get('iteration_time_s', float('nan')):.3f} s/iter, {m.get('tokens_per_s_per_gpu', 0):.0f} "
             "tokens/s/GPU" if m else record["reason"])
    return record

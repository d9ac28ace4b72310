"""Run one planned cell end to end: launch its ranks, classify the outcome, write its record."""

from __future__ import annotations

import logging
from typing import Any

from calorimeter.launch.submit import CellConfigError, LaunchOutcome, launch_cell
from calorimeter.placement.apply import placement_record
from calorimeter.plan.cell import TRAINING_KINDS, Cell
from calorimeter.plan.kinds import get_kind
from calorimeter.records.atomic import write_atomic, write_json_atomic
from calorimeter.records.paths import CellPaths, results_relative
from calorimeter.records.record import TransientCellError, build_record, steps_frame, write_cell_record
from calorimeter.telemetry.collect import collect_telemetry

log = logging.getLogger(__name__)

__all__ = ["CellConfigError", "TransientCellError", "run_cell"]


def _evidence(outcome: LaunchOutcome) -> dict[str, Any]:
    """What the launcher saw besides the ranks' own results: SLURM's state and exit code, requeues, log tails."""
    ev: dict[str, Any] = {"launcher_error": outcome.launcher_error, "reattached": outcome.reattached,
                          "requeues": outcome.requeues, "log_tail": outcome.log_tail,
                          "rank_status": {str(r.get("rank")): r.get("status") for r in outcome.rank_results},
                          "rank_restart": {str(r.get("rank")): r.get("restart") for r in outcome.rank_results}}
    if outcome.slurm is not None:
        ev["slurm"] = outcome.slurm
    return ev


def _record(cell: Cell, outcome: LaunchOutcome, estimates: dict[str, Any] | None) -> dict[str, Any]:
    launch = {"executor": outcome.executor, "job_id": outcome.job_id, "attempt": outcome.attempt.name,
              "launcher_error": outcome.launcher_error, "wall_time_s": outcome.wall_time_s,
              "reattached": outcome.reattached,
              "submitit_folder": results_relative(outcome.attempt.submitit, outcome.attempt.root.parents[1]),
              "requeues": len([e for e in outcome.requeues if e.get("requeued")])}
    record = build_record(cell, outcome.rank_results, launch, estimates, _evidence(outcome))
    placement = placement_record(outcome.rank_results)
    if placement is not None:
        record["placement"] = placement
    return record


def run_cell(cell: Cell, settings: dict[str, Any], paths: CellPaths, estimates: dict[str, Any] | None = None
             ) -> dict[str, Any]:
    """Launch a cell (or re-attach to its running job), wait, and write ``run.json`` (status ok, oom or failed).

    Args:
        cell: the cell.
        settings: the launcher settings (:func:`calorimeter.launch.settings.launcher_settings`).
        paths: the cell's folder.
        estimates: the plan's estimates of the cell, kept in the record.

    Raises:
        TransientCellError: no deterministic outcome (ranks killed, job cancelled or preempted too often, node
            lost, communication timeout): nothing is written at the top of the cell folder, the attempt's
            ``run.json`` keeps the class and the evidence, and a rerun (or ``--retries``) resubmits the cell.
        CellConfigError: the cell cannot be submitted as configured; nothing was submitted.
    """
    outcome = launch_cell(cell, settings, paths)
    record = _record(cell, outcome, estimates)
    if record["status"] == "transient" and outcome.ended_unwatched:
        # The job we re-attached to had already ended without a result while nobody watched: close that attempt
        # and run the cell again now rather than failing the rule for an outcome nobody waited for.
        write_json_atomic(outcome.attempt.run_json, record)
        log.warning("cell %s: re-attached attempt %s ended %s (%s); submitting a new attempt", cell.cell_id,
                    outcome.attempt.name, record["status"], record["reason"])
        outcome = launch_cell(cell, settings, paths)
        record = _record(cell, outcome, estimates)
    if record["status"] == "transient":
        write_json_atomic(outcome.attempt.run_json, record)
        raise TransientCellError(f"cell {cell.cell_id}: transient: {record['reason']} "
                                 f"(evidence in {outcome.attempt.run_json})")
    record["telemetry_files"] = _collect_telemetry(outcome, paths, record)
    if cell.kind not in TRAINING_KINDS:
        record["kind_files"] = _collect_kind_outputs(cell, outcome, paths)
    write_cell_record(paths, outcome.attempt, record, steps_frame(outcome.rank_results))
    m = record.get("metrics", {})
    log.info("cell %s: %s %s", cell.cell_id, record["status"],
             f"{m.get('iteration_time_s', float('nan')):.3f} s/iter, {m.get('tokens_per_s_per_gpu', 0):.0f} "
             "tokens/s/GPU" if m else f"({record['failure_class']}) {record['reason']}")
    return record


def _collect_telemetry(outcome: LaunchOutcome, paths: CellPaths, record: dict[str, Any]) -> list[str]:
    """Turn the attempt's sampler streams and traces into the cell's telemetry tables (before run.json).

    A failure here never loses the measurement: it is logged and noted in the record.
    """
    restart = max((int(r.get("restart") or 0) for r in outcome.rank_results), default=0)
    try:
        return collect_telemetry(outcome.attempt.run(restart), paths, outcome.rank_results)
    except Exception as e:  # noqa: BLE001
        log.exception("cell %s: telemetry could not be collected", record.get("cell_id"))
        record["telemetry_error"] = f"{type(e).__name__}: {e}"
        return []


def _collect_kind_outputs(cell: Cell, outcome: LaunchOutcome, paths: CellPaths) -> list[str]:
    """Copy the files a calibration kind's rank 0 wrote into its run folder (``CellKind.outputs``) into the cell
    folder, atomically and before run.json; the attempt keeps its own copies."""
    import shutil

    restart = max((int(r.get("restart") or 0) for r in outcome.rank_results), default=0)
    run_dir = outcome.attempt.run(restart).root
    copied = []
    for name in get_kind(cell.kind).outputs:
        src = run_dir / name
        if src.is_file():
            write_atomic(paths.root / name, lambda p, src=src: shutil.copyfile(src, p))
            copied.append(name)
    return copied

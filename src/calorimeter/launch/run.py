"""Run one planned cell end to end: launch its ranks, classify the outcome, write its record."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from pathlib import Path

from calorimeter.launch.output import describe_outputs, first_failed_first
from calorimeter.launch.space import DISK_FULL, FIXED_BYTES, DiskSpaceError, free_bytes, is_disk_full
from calorimeter.launch.submit import CellConfigError, LaunchOutcome, launch_cell
from calorimeter.launch.watch import heartbeat_death, peer_death, srun_death
from calorimeter.placement.apply import placement_record
from calorimeter.plan.cell import Cell
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.kinds import get_kind
from calorimeter.plan.settings import LauncherSettings
from calorimeter.records.atomic import read_json_object, write_atomic, write_json_atomic
from calorimeter.records.paths import AttemptPaths, CellPaths, record_files, results_relative
from calorimeter.records.provenance import PATCH_NAME
from calorimeter.records.rank import RankOutput
from calorimeter.records.record import TransientCellError, build_record, steps_frame, write_cell_record
from calorimeter.telemetry.collect import collect_telemetry

log = logging.getLogger(__name__)

__all__ = ["CellConfigError", "TransientCellError", "run_cell"]


def _evidence(outcome: LaunchOutcome, sweep_file: str | None = None) -> JsonObject:
    """What the launcher saw besides the ranks' own results: SLURM's state and exit code, requeues, every rank's
    output tail, the rank that died first, why the launcher ended the job."""
    ev: JsonObject = {"launcher_error": outcome.launcher_error, "reattached": outcome.reattached,
                          "requeues": outcome.requeues, "rank_output": [o.to_dict() for o in outcome.rank_output],
                          "rank_status": {str(r.rank): r.status for r in outcome.rank_results},
                          "rank_restart": {str(r.rank): r.restart for r in outcome.rank_results}}
    if outcome.slurm is not None:
        ev["slurm"] = outcome.slurm
    death = peer_death(outcome.attempt)
    if death is None and outcome.executor == "slurm":  # SLURM's own account of the rank that went first
        # srun's own stderr (in the batch step's log, rank 0's) first: the launcher's error holds a cut tail of it
        texts = [*("\n".join(o.stderr) for o in outcome.rank_output), outcome.launcher_error or ""]
        with_result = {r.rank for r in outcome.rank_results}
        death = heartbeat_death(outcome.attempt, with_result) or srun_death(texts, with_result)
    if death is not None:
        ev["peer_died"] = death.to_dict()
    with contextlib.suppress(OSError, ValueError):
        ev["launcher_cancelled"] = json.loads(outcome.attempt.launcher_cancelled.read_text())
        if sweep_file and ev["launcher_cancelled"].get("node_lost") is not None:
            ev["launcher_cancelled"]["rerun"] = f"calorimeter rerun {sweep_file} --failed"
    return ev


def _record(cell: Cell, outcome: LaunchOutcome, estimates: JsonObject | None,
            settings: LauncherSettings) -> JsonObject:
    launch = {"executor": outcome.executor, "job_id": outcome.job_id, "attempt": outcome.attempt.name,
              "launcher_error": outcome.launcher_error, "wall_time_s": outcome.wall_time_s,
              "reattached": outcome.reattached,
              "submitit_folder": results_relative(outcome.attempt.submitit, outcome.attempt.root.parents[1]),
              "requeues": len([e for e in outcome.requeues if e.get("requeued")])}
    record = build_record(cell, outcome.rank_results, launch, estimates,
                          _evidence(outcome, settings.sweep_file))
    record["evidence"]["rank_output"] = [o.to_dict() for o in first_failed_first(
        outcome.rank_output, record["reason"], outcome.rank_results)]
    placement = placement_record(outcome.rank_results)
    if placement is not None:
        record["placement"] = placement
    kind = get_kind(cell.kind)
    if kind.provenance:  # a command's: what it ran, its files' hashes, the packages it imported
        record[kind.name] = read_json_object(outcome.run.root / kind.provenance) or {
            "command": cell.command, "note": "rank 0 wrote no provenance (it ended before its command did)"}
    return record


def run_cell(cell: Cell, settings: LauncherSettings, paths: CellPaths, estimates: JsonObject | None = None
             ) -> JsonObject:
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
    record = _record(cell, outcome, estimates, settings)
    if record["status"] == "transient" and outcome.ended_unwatched:
        # The job we re-attached to had already ended without a result while nobody watched: close that attempt
        # and run the cell again now rather than failing the rule for an outcome nobody waited for.
        write_json_atomic(outcome.attempt.run_json, record)
        log.warning("cell %s: re-attached attempt %s ended %s (%s); submitting a new attempt", cell.cell_id,
                    outcome.attempt.name, record["status"], record["reason"])
        outcome = launch_cell(cell, settings, paths)
        record = _record(cell, outcome, estimates, settings)
    if record["status"] == "transient":
        _blame_full_disk(outcome, record)
        write_json_atomic(outcome.attempt.run_json, record)
        _log_outputs(cell, record)
        raise TransientCellError(f"cell {cell.cell_id}: transient: {record['reason']} "
                                 f"(evidence in {outcome.attempt.run_json})")
    _write_record(cell, outcome, paths, record)
    m = record.get("metrics", {})
    log.info("cell %s: %s %s", cell.cell_id, record["status"],
             f"{m.get('iteration_time_s', float('nan')):.3f} s/iter, {m.get('tokens_per_s_per_gpu', 0):.0f} "
             "tokens/s/GPU" if m else f"({record['failure_class']}) {record['reason']}")
    if record["status"] != "ok":
        _log_outputs(cell, record)
    return record


def _log_outputs(cell: Cell, record: JsonObject) -> None:
    """Every rank's last lines in the cell's log, the rank the reason names first."""
    outputs = [RankOutput.from_dict(o) for o in record.get("evidence", {}).get("rank_output") or []]
    if outputs:
        log.warning("cell %s: each rank's last lines:\n%s", cell.cell_id, "\n".join(describe_outputs(outputs, 5)))


def _write_record(cell: Cell, outcome: LaunchOutcome, paths: CellPaths, record: JsonObject) -> None:
    """Collect the telemetry and kind files and write the record (run.json last).

    On a full disk nothing partial stays: the files this call put at the top of the cell folder, and the source
    patch it put in the attempt folder, are removed; the attempt stays open (its rank results hold the finished
    measurement, so the next run completes the record without retraining), its ``record_error.json`` says why
    (``calorimeter status``: failed, class ``disk_full``), and :class:`DiskSpaceError` is raised. Nothing else in
    the results tree is touched.
    """
    t0 = time.time()
    before = {paths.root / n: _mtime(paths.root / n) for n in (*record_files(), PATCH_NAME)}
    before[outcome.attempt.root / PATCH_NAME] = _mtime(outcome.attempt.root / PATCH_NAME)
    attempt_closed = outcome.attempt.run_json.exists()
    try:
        record["telemetry_files"] = _collect_telemetry(outcome, paths, record)
        if not get_kind(cell.kind).trains_model:
            record["kind_files"] = _collect_kind_outputs(cell, outcome, paths)
        write_cell_record(paths, outcome.attempt, record, steps_frame(outcome.rank_results))
    except OSError as e:
        if not is_disk_full(e):
            raise
        for f, mtime in before.items():  # only what this call wrote (the source patch too: it can fill the disk)
            if f.is_file() and _mtime(f) != mtime and _mtime(f) >= t0 - 1:
                f.unlink(missing_ok=True)
        if not attempt_closed:
            outcome.attempt.run_json.unlink(missing_ok=True)
        reason = (f"disk full while the record was written ({e.strerror}: {e.filename or ''}; "
                  f"{free_bytes(paths.root) / 2**20:.1f} MiB free): the measurement is kept in attempt "
                  f"{outcome.attempt.name}; free space and run the cell again (calorimeter rerun --failed) to "
                  "complete its record without retraining")
        _note_record_error(outcome.attempt, DISK_FULL, reason)
        raise DiskSpaceError(f"cell {cell.cell_id}: {DISK_FULL}: {reason}") from e
    outcome.attempt.record_error.unlink(missing_ok=True)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _note_record_error(attempt: AttemptPaths, failure_class: str, reason: str) -> None:
    """Best effort: the disk may still be full (the files removed above usually made room for these bytes)."""
    try:
        write_json_atomic(attempt.record_error, {"failure_class": failure_class, "reason": reason,
                                                 "time_s": time.time()})
    except OSError:
        log.error("%s: %s", attempt.root, reason)


def _blame_full_disk(outcome: LaunchOutcome, record: JsonObject) -> None:
    """Ranks that left no result on a (nearly) full disk: say so (class ``disk_full``), not a dead launcher."""
    free = free_bytes(outcome.attempt.root)
    if len(outcome.rank_results) < int(record["cell"].get("world_size") or 0) and free < FIXED_BYTES:
        record["failure_class"] = DISK_FULL
        record["reason"] = f"disk full ({free / 2**20:.1f} MiB free): {record['reason']}"


def _collect_telemetry(outcome: LaunchOutcome, paths: CellPaths, record: JsonObject) -> list[str]:
    """Turn the attempt's sampler streams and traces into the cell's telemetry tables (before run.json).

    A failure here never loses the measurement: it is logged and noted in the record.
    """
    try:
        return collect_telemetry(outcome.run, paths, outcome.rank_results)
    except Exception as e:  # noqa: BLE001
        if is_disk_full(e):
            raise
        log.exception("cell %s: telemetry could not be collected", record.get("cell_id"))
        record["telemetry_error"] = f"{type(e).__name__}: {e}"
        return []


def _collect_kind_outputs(cell: Cell, outcome: LaunchOutcome, paths: CellPaths) -> list[str]:
    """Copy the files a calibration kind's rank 0 wrote into its run folder (``CellKind.outputs``) into the cell
    folder, atomically and before run.json; the attempt keeps its own copies."""
    import shutil

    run_dir = outcome.run.root
    copied = []
    for name in get_kind(cell.kind).outputs:
        src = run_dir / name
        if src.is_file():
            write_atomic(paths.root / name, lambda p, src=src: shutil.copyfile(src, p))
            copied.append(name)
    return copied

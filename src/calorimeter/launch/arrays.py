"""SLURM job arrays (``launcher.array: true``): cells of one shape go to the queue as one array.

When a cell is launched, every other planned cell of its sweep that would be submitted with the same sbatch
parameters (nodes, tasks, GPUs, time, partition, ...; the job name aside) and has neither a record nor an open
attempt is submitted with it, as one ``sbatch --array`` (submitit's ``executor.batch()``). Each cell still gets its
own attempt folder and ``job.json`` (job id ``<array>_<index>``), so the train rule of each of those cells finds its
job already in the queue and waits on it (:func:`calorimeter.launch.submit.open_attempt`: the same re-attachment as
after a restart of Snakemake). Cells that wait for others (a ``thermal`` placement after its host's calibration) are
never submitted ahead. The array's submitit folder (pickles, per-task logs) is ``<results>/<sweep>/arrays/<UTC>/``.

Opt-in: submitting ahead puts every remaining cell of the shape in the queue at once, which is what a long sweep
wants, but not what a run of a few chosen cells (``snakemake <one run.json>``) expects.
"""

from __future__ import annotations

import dataclasses
import fcntl
import logging
import socket
import time
from pathlib import Path

from calorimeter.launch.snapshot import with_snapshot
from calorimeter.launch.submit import (
    CellConfigError,
    _new_attempt,
    cell_key,
    executor_parameters,
    make_executor,
    open_attempt,
    resolve_executor,
)
from calorimeter.launch.task import CellTask
from calorimeter.plan.cell import Cell
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.placement import prerequisites
from calorimeter.plan.plan import make_plan
from calorimeter.plan.settings import LauncherSettings
from calorimeter.records.job import JobRecord
from calorimeter.records.paths import CellPaths

log = logging.getLogger(__name__)


def _shape(params: JsonObject) -> JsonObject:
    """The sbatch parameters that decide which cells can share an array (all but the job name)."""
    return {k: v for k, v in params.items() if k != "job_name"}


def array_mates(cell: Cell, cells: list[Cell], settings: LauncherSettings, results_dir: str | Path) -> list[Cell]:
    """``cell`` and the other cells that can go into its array: same sbatch parameters, no record, no open attempt,
    waiting for no other cell."""
    executor, mine = executor_parameters(cell, settings)
    if executor != "slurm":
        return [cell]
    out = [cell]
    for other in cells:
        if other.cell_id == cell.cell_id or prerequisites(other, cells):
            continue
        paths = CellPaths.of(results_dir, other.sweep, other.cell_id)
        if paths.run_json.exists() or open_attempt(other, paths) is not None:
            continue
        try:
            if _shape(executor_parameters(other, settings)[1]) == _shape(mine):
                out.append(other)
        except CellConfigError:
            continue
    return out


def submit_array(cell: Cell, cells: list[Cell], settings: LauncherSettings, results_dir: str | Path) -> int:
    """Submit ``cell`` with its array mates as one SLURM array (nothing when the cell already has an open attempt
    or the executor is not SLURM); returns the number of cells submitted.

    A lock on ``<results>/<sweep>/arrays/.lock`` keeps two train jobs that start together from submitting the same
    cells twice.
    """
    paths = CellPaths.of(results_dir, cell.sweep, cell.cell_id)
    root = paths.root.parents[1] / "arrays"
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if paths.run_json.exists() or open_attempt(cell, paths) is not None:
            return 0
        mates = array_mates(cell, cells, settings, results_dir)
        if len(mates) < 2:
            return 0  # one cell: launch_cell submits it as usual
        executor, params = executor_parameters(cell, settings)
        if settings.snapshot:
            params, code = with_snapshot(params, paths.root.parents[1])
            settings = dataclasses.replace(settings, code_snapshot=str(code))
        params = {**params, "job_name": f"{cell.sweep}-array"}
        folder = root / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        submitter = make_executor(executor, params, folder, settings.max_requeues)
        attempts = [_new_attempt(CellPaths.of(results_dir, c.sweep, c.cell_id)) for c in mates]
        t0 = time.time()
        with submitter.batch():
            jobs = [submitter.submit(CellTask(c, str(a.root), settings)) for c, a in zip(mates, attempts, strict=True)]
        for c, a, job in zip(mates, attempts, jobs, strict=True):
            JobRecord(str(job.job_id), executor, c.cell_id, cell_key(c), c.world_size, t0, socket.gethostname(),
                      str(folder), array=True, launcher=settings).write(a.job_json)
        log.info("cell %s: submitted with %d other cells of its shape as SLURM array %s", cell.cell_id,
                 len(mates) - 1, str(jobs[0].job_id).split("_")[0])
        return len(mates)


def submit_ahead(cell: Cell, settings: LauncherSettings, config: JsonObject) -> int:
    """The train rule's hook: with ``launcher.array`` on SLURM, submit the cell's array (:func:`submit_array`) over
    the sweep's runnable cells; 0 otherwise."""
    if not settings.array or resolve_executor(settings.executor) != "slurm":
        return 0
    plan = make_plan(dict(config))
    return submit_array(cell, [pc.cell for pc in plan.runnable], settings, plan.results_dir)

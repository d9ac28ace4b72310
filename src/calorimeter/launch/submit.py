"""Submit one cell through submitit (local processes by default, SLURM through the same code path) and wait."""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import submitit

from calorimeter.launch.task import CellTask
from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import PROFILES
from calorimeter.records.atomic import write_json_atomic

log = logging.getLogger(__name__)


@dataclass
class LaunchOutcome:
    """What came back from one attempt of a cell."""

    attempt_dir: Path
    job_id: str
    executor: str
    rank_results: list[dict[str, Any]] = field(default_factory=list)
    launcher_error: str | None = None
    wall_time_s: float = 0.0


def resolve_executor(name: str) -> str:
    """``auto`` -> ``slurm`` when ``srun`` is on PATH, else ``local``."""
    if name == "auto":
        return "slurm" if shutil.which("srun") else "local"
    return name


def make_executor(cell: Cell, launcher: dict[str, Any], folder: Path) -> submitit.Executor:
    """A submitit executor with one task per rank."""
    kind = resolve_executor(launcher.get("executor", "local"))
    accelerator = PROFILES[cell.hardware].accelerator if cell.hardware in PROFILES else "cuda"
    gpus = cell.gpus_per_node if accelerator in ("cuda", "rocm") else 0
    timeout_min = int(launcher.get("timeout_min", 60))
    cpus = int(launcher.get("cpus_per_task", 1))
    env_setup = [f"export OMP_NUM_THREADS={cpus}"]
    if accelerator == "cpu":
        env_setup.append("export DS_ACCELERATOR=cpu")
    if kind == "local":
        if cell.nodes != 1:
            raise ValueError(f"cell {cell.cell_id} needs {cell.nodes} nodes; the local executor runs one node "
                             "(use launcher.executor: slurm)")
        ex = submitit.LocalExecutor(folder=str(folder))
        ex.update_parameters(tasks_per_node=cell.gpus_per_node, gpus_per_node=gpus, timeout_min=timeout_min,
                             setup=env_setup)
        return ex
    if kind == "slurm":
        ex = submitit.AutoExecutor(folder=str(folder), cluster="slurm")
        params: dict[str, Any] = dict(nodes=cell.nodes, tasks_per_node=cell.gpus_per_node, cpus_per_task=cpus,
                                      timeout_min=timeout_min, name=cell.cell_id, slurm_setup=env_setup)
        if gpus:
            params["gpus_per_node"] = gpus
        slurm = launcher.get("slurm") or {}
        for key in ("partition", "account", "qos", "constraint", "mem_gb"):
            if slurm.get(key):
                params[f"slurm_{key}" if key != "mem_gb" else "mem_gb"] = slurm[key]
        ex.update_parameters(**params)
        return ex
    raise ValueError(f"launcher.executor: unknown executor {kind!r} (local, slurm, auto)")


def launch_cell(cell: Cell, launcher: dict[str, Any], cell_dir: Path) -> LaunchOutcome:
    """Run one attempt of a cell and collect every rank's result file.

    Each attempt has its own folder ``<cell_dir>/attempts/<UTC time>/`` holding submitit's logs and the ranks'
    results; attempts are never deleted, so a failed or superseded attempt stays inspectable.
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    attempt = cell_dir / "attempts" / stamp
    n = 1
    while attempt.exists():
        attempt = cell_dir / "attempts" / f"{stamp}-{n}"
        n += 1
    staging = attempt / "staging"
    staging.mkdir(parents=True)
    executor = make_executor(cell, launcher, attempt / "submitit")
    t0 = time.time()
    job = executor.submit(CellTask(cell.to_dict(), str(staging), launcher.get("master_port")))
    kind = resolve_executor(launcher.get("executor", "local"))
    write_json_atomic(attempt / "job.json", {"job_id": str(job.job_id), "executor": kind, "submitted_s": t0,
                                             "cell_id": cell.cell_id})
    log.info("cell %s: submitted job %s (%s, %d ranks)", cell.cell_id, job.job_id, kind, cell.world_size)
    error = None
    try:
        job.results()
    except Exception as e:  # noqa: BLE001 - the ranks' own files say what happened; this is the launcher's view
        error = f"{type(e).__name__}: {str(e).strip()[-2000:]}"
    results = []
    for f in sorted(staging.glob("rank-*.json"), key=lambda p: int(p.stem.split("-")[1])):
        with f.open() as fh:
            results.append(json.load(fh))
    return LaunchOutcome(attempt, str(job.job_id), kind, results, error, time.time() - t0)

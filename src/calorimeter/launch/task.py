"""The callable that runs on every rank of a cell: set up torch.distributed, train, write this rank's result."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import time
import traceback
from pathlib import Path
from typing import Any

import submitit
from submitit.core.utils import UncompletedJobError

from calorimeter.launch.distributed import init_distributed
from calorimeter.launch.faults import RankFaults
from calorimeter.launch.warning import not_requeued_taken, relay_warning
from calorimeter.launch.watch import announce, leave_if_a_peer_died
from calorimeter.placement.apply import JobPlacement
from calorimeter.plan.cell import Cell
from calorimeter.plan.definitions import register_definitions
from calorimeter.plan.hardware import accelerator_of, device_mismatch
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.kinds import get_kind
from calorimeter.plan.settings import LauncherSettings
from calorimeter.records.atomic import write_json_atomic
from calorimeter.records.paths import AttemptPaths, RunPaths
from calorimeter.records.provenance import device_info, host_cpu, host_dispatch
from calorimeter.records.rank import RankContext, RankReport, RankResult
from calorimeter.telemetry.cell import start_cell_sampler, stop_cell_sampler
from calorimeter.train.errors import CellOOMError


@dataclasses.dataclass
class CellTask(submitit.helpers.Checkpointable):
    """Run one cell on one rank; each rank writes its result (``rank-<r>.json``) into the attempt's staging folder.

    A rank that fails writes its error and exits the process at once, so that its peers' collectives fail fast
    instead of hanging until the communication timeout.

    Preemption and time limits (USR2: SLURM sends it ``signal_delay_s`` before the limit or on a preemption notice,
    and a peer that gets it relays it to rank 0, :mod:`calorimeter.launch.warning`; submitit's local controller sends
    it before the local limit): submitit calls :meth:`checkpoint` on rank 0, which logs the event in the attempt's
    ``requeues.jsonl``. A cell restarts from scratch when requeued (a measurement is short, and a restarted
    measurement must not mix two runs), so it keeps no progress across a requeue: a time limit (a local job's, or
    SLURM's, :func:`time_limit_reached`) would only be hit again, and is never requeued; rank 0 records ``timeout``
    (the record: failed, class ``timeout``, once). A preemption hands back this same task with ``requeues + 1``
    (every setting kept); submitit then requeues the job (same job id). Every rank result carries ``restart``
    (SLURM_RESTART_COUNT), so the collector keeps only the last run's results and sets the interrupted run's files
    aside. Past ``max_requeues``, :meth:`checkpoint` returns None and rank 0 records ``preempted``.

    Attributes:
        cell: the cell.
        attempt_dir: the attempt's folder.
        settings: the launcher settings (:func:`calorimeter.launch.settings.launcher_settings`, ``telemetry``
            included).
        requeues: how often this task was requeued by :meth:`checkpoint` so far.
    """

    cell: Cell
    attempt_dir: str
    settings: LauncherSettings
    requeues: int = 0

    def restart_count(self) -> int:
        """How often this job was restarted: SLURM's count (covers requeues by the scheduler), else our own."""
        return int(os.environ.get("SLURM_RESTART_COUNT", self.requeues))

    def __call__(self) -> JsonObject:
        """Entry point on each rank."""
        t0 = time.time()
        register_definitions(self.settings.definitions)  # the sweep's own models and hardware
        cell = self.cell
        attempt = AttemptPaths(Path(self.attempt_dir))
        attempt.staging.mkdir(parents=True, exist_ok=True)
        job = submitit.JobEnvironment()
        restart = self.restart_count()
        rank = job.global_rank
        report = RankReport(rank=rank, restart=restart, requeues=self.requeues, job_id=job.job_id, pid=os.getpid(),
                            t_start_s=t0)
        faults = RankFaults.of(cell.cell_id, rank, restart)  # test-only, inert without CALORIMETER_TEST_FAULTS
        _RUN_START_S[0] = t0
        faults.point("start")
        announce(attempt, rank, restart)  # first: the launcher watches this pid (calorimeter.launch.watch)
        leave_if_a_peer_died(attempt, rank, restart)  # it started after a peer's death was recorded: nothing to join
        relay_warning(attempt, rank, restart)  # SLURM's time-limit warning reaches rank 0 via any peer
        faults.point("rendezvous")
        try:
            if faults.tiny:  # no model, no process group (calorimeter.launch.faults)
                _run_tiny(cell, report, faults)
            else:
                self._run(cell, attempt.run(restart), job.node, report, faults)
        except CellOOMError as e:
            report.status, report.peak_memory_bytes, report.error = "oom", e.peak_memory_bytes, str(e)
        except UncompletedJobError:
            # Raised by submitit's USR2 handler on rank 0 when the job is not requeued (any more).
            not_requeued_taken()
            report.elapsed_s = elapsed = time.time() - t0
            if time_limit_reached(self.settings, elapsed):
                report.status, report.error = "timeout", (
                    f"time limit of {self.settings.timeout_min} min reached after {elapsed:.0f} s "
                    "(not requeued: the cell would restart from scratch and hit it again)")
            else:
                report.status, report.error = "preempted", (
                    f"preempted {self.requeues + 1} times (launcher.max_requeues {self.settings.max_requeues})")
        except Exception as e:  # noqa: BLE001 - every failure is recorded, then the rank exits
            report.status, report.error = "failed", f"{type(e).__name__}: {e}"
            report.traceback = traceback.format_exc()
        report.t_end_s = time.time()
        faults.point("result")
        write_json_atomic(attempt.rank_json(rank), report.to_dict())
        not_requeued_taken()  # recorded, whatever the outcome: a lost time-limit error is not raised again
        if not report.ok:
            # Peers may be blocked in a collective with this rank: leave now so that they fail fast.
            print(json.dumps({"rank": rank, "status": report.status, "error": report.error}), flush=True)
            os._exit(3)
        if not faults.tiny:
            _teardown()
        return {"rank": rank, "status": report.status, "restart": restart}

    def _run(self, cell: Cell, run: RunPaths, node: int, report: RankReport, faults: RankFaults) -> None:
        """Place the rank, join the process group, and run the cell's kind under the node sampler."""
        # Decided here, where the host is known, and applied before anything starts CUDA.
        placement = JobPlacement.start(cell, self.settings.placement, Path(self.attempt_dir).parents[1], node=node)
        info = init_distributed(accelerator_of(cell.hardware), self.settings.master_port)
        placement.agree()
        faults.arm()
        report.world_size, report.local_rank, report.node = info.world_size, info.local_rank, info.node
        report.hostname, report.backend = info.hostname, info.backend
        report.device_info = device_info(info.device)
        report.host_cpu = host_cpu() | host_dispatch(info.device)
        wrong_gpu = device_mismatch(cell.hardware, str(report.device_info.get("name", "")))
        if wrong_gpu:
            raise RuntimeError(wrong_gpu)
        report.placement = placement.record(report.device_info, info.local_rank)

        # Local rank 0 samples every GPU of its node for the whole attempt (stopped below, or killed with us).
        sampler = start_cell_sampler(run, info.node, info.local_rank, self.settings.telemetry)
        try:
            faults.inject()
            report.take(run_kind(RankContext(placement.cell, run, info, self.settings.telemetry)))
            report.status = "ok"
            _teardown(destroy=False)  # every rank done before the node's sampler stops
        except CellOOMError:
            stop_cell_sampler(sampler)  # an out-of-memory rank records it; any other failure exits at once
            raise
        stop_cell_sampler(sampler)

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission | None:
        """Called by submitit on rank 0 on a preemption or the time limit: requeue this task after a preemption
        (``requeues + 1``, every setting kept); None at the time limit, or past ``max_requeues``."""
        attempt = AttemptPaths(Path(self.attempt_dir))
        max_requeues = self.settings.max_requeues
        elapsed = time.time() - (_RUN_START_S[0] or time.time())
        time_limit = time_limit_reached(self.settings, elapsed)
        requeue = not time_limit and self.requeues < max_requeues
        event = {"time_s": time.time(), "job_id": submitit.JobEnvironment().job_id, "restart": self.restart_count(),
                 "requeues": self.requeues, "max_requeues": max_requeues, "requeued": requeue,
                 "why": "time limit" if time_limit else "preemption", "elapsed_s": elapsed,
                 "host": os.uname().nodename}
        try:
            with attempt.requeues.open("a") as f:
                f.write(json.dumps(event) + "\n")
        except OSError:
            pass
        if not requeue:
            return None
        return submitit.helpers.DelayedSubmission(self.requeued(), *args, **kwargs)

    def requeued(self) -> CellTask:
        """This task, requeued once more."""
        return dataclasses.replace(self, requeues=self.requeues + 1)


#: when this process's run of the task began (``time.time()``), for :meth:`CellTask.checkpoint`
_RUN_START_S: list[float | None] = [None]
#: a USR2 this close to the time limit (beyond ``signal_delay_s``: SLURM checks limits about every 30 s, a loaded
#: host delivers late) is the limit's warning, not a preemption
LIMIT_MARGIN_S = 90


def time_limit_reached(settings: LauncherSettings, elapsed_s: float) -> bool:
    """Whether a USR2 ``elapsed_s`` into a run is the time limit's warning (a local job's always is: nothing
    preempts it) rather than a preemption."""
    if os.environ.get("SUBMITIT_EXECUTOR") == "local":
        return True
    return elapsed_s + settings.signal_delay_s + LIMIT_MARGIN_S >= settings.timeout_min * 60


def run_kind(ctx: RankContext) -> RankResult:
    """The per-rank dispatch: run the cell's kind (its entry, imported by name) on this rank."""
    module, func = get_kind(ctx.cell.kind).entry.split(":")
    return getattr(importlib.import_module(module), func)(ctx)


def _run_tiny(cell: Cell, report: RankReport, faults: RankFaults) -> None:
    """A ``tiny`` test cell on this rank: the injected faults, timed no-op steps (a :class:`RankResult` like any
    kind's)."""
    report.world_size, report.local_rank, report.node = cell.world_size, report.rank, 0
    report.hostname, report.backend, report.host_cpu = os.uname().nodename, "none", host_cpu()
    faults.arm()
    faults.inject()
    report.take(RankResult(steps=faults.tiny_steps(cell.warmup_steps, cell.measured_steps), device="cpu"))
    report.status = "ok"


def _teardown(destroy: bool = True) -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        if destroy:
            dist.destroy_process_group()

"""The callable that runs on every rank of a cell: set up torch.distributed, train, write this rank's result."""

from __future__ import annotations

import json
import os
import time
import traceback
from pathlib import Path
from typing import Any

import submitit
from submitit.core.utils import UncompletedJobError

from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import accelerator_of
from calorimeter.records.atomic import write_json_atomic
from calorimeter.records.provenance import device_info

REQUEUE_LOG = "requeues.jsonl"


class CellTask(submitit.helpers.Checkpointable):
    """Run one cell on one rank; each rank writes ``rank-<r>.json`` into the attempt's staging folder.

    A rank that fails writes its error and exits the process at once, so that its peers' collectives fail fast
    instead of hanging until the communication timeout.

    Preemption and time limits (SLURM sends USR2 ``signal_delay_s`` before the limit): submitit calls
    :meth:`checkpoint` on rank 0, which logs the event in the attempt's ``requeues.jsonl`` and returns a copy of this
    task with ``requeues + 1``; submitit then requeues the job (same job id). The requeued job restarts the cell
    from scratch: a measurement is short, and a restarted measurement must not mix two runs. Every rank result
    carries ``restart`` (SLURM_RESTART_COUNT), so the collector keeps only the last run's results and sets the
    interrupted run's files aside. Past ``max_requeues``, :meth:`checkpoint` returns None: submitit stops
    requeuing and rank 0 records ``timeout`` (or ``preempted``).
    """

    def __init__(self, cell: dict[str, Any], staging_dir: str, master_port: int | None = None, *,
                 requeues: int = 0, max_requeues: int = 3, timeout_min: int = 60, signal_delay_s: int = 120,
                 telemetry: dict[str, Any] | None = None) -> None:
        self.cell = cell
        self.telemetry = telemetry or {}
        self.staging_dir = staging_dir
        self.master_port = master_port
        self.requeues = requeues
        self.max_requeues = max_requeues
        self.timeout_min = timeout_min
        self.signal_delay_s = signal_delay_s

    def restart_count(self) -> int:
        """How often this job was restarted: SLURM's count (covers requeues by the scheduler), else our own."""
        return int(os.environ.get("SLURM_RESTART_COUNT", self.requeues))

    def __call__(self) -> dict[str, Any]:
        """Entry point on each rank."""
        from calorimeter.launch.distributed import init_distributed
        from calorimeter.launch.faults import inject

        t0 = time.time()
        cell = Cell.from_dict(self.cell)
        accelerator = accelerator_of(cell.hardware)
        staging = Path(self.staging_dir)
        staging.mkdir(parents=True, exist_ok=True)
        restart = self.restart_count()
        out: dict[str, Any] = {"t_start_s": t0, "pid": os.getpid(), "restart": restart, "requeues": self.requeues,
                               "job_id": os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID")}
        rank = int(os.environ.get("SLURM_PROCID", os.environ.get("SUBMITIT_LOCAL_GLOBALID", "0")))
        try:
            info = init_distributed(accelerator, self.master_port)
            rank = info.rank
            out.update(rank=info.rank, world_size=info.world_size, local_rank=info.local_rank, node=info.node,
                       hostname=info.hostname, backend=info.backend, device_info=device_info(info.device))
            from calorimeter.telemetry.cell import start_cell_sampler, stop_cell_sampler
            from calorimeter.train.errors import CellOOMError
            from calorimeter.train.run import train_cell

            # Local rank 0 samples every GPU of its node for the whole attempt (stopped below, or killed with us).
            sampler = start_cell_sampler(staging / f"restart{restart}", info.node, info.local_rank, self.telemetry)
            try:
                inject(cell.cell_id, rank, restart)
                result = train_cell(cell, staging / f"restart{restart}",
                                    profile_steps=int(self.telemetry.get("profile_steps", 0)),
                                    profile_all_ranks=bool(self.telemetry.get("profile_all_ranks", False)))
                out.update(status="ok", **result)
                out["restart"] = restart  # train_cell's record must not hide which run this was
            except CellOOMError as e:
                out.update(status="oom", peak_memory_bytes=e.peak_memory_bytes, error=str(e))
            if out.get("status") == "ok":
                _teardown(destroy=False)  # every rank done before the node's sampler stops
            stop_cell_sampler(sampler)
        except UncompletedJobError as e:
            # Raised by submitit's USR2 handler on rank 0 when the job is not requeued any more.
            elapsed = time.time() - t0
            near_limit = elapsed + self.signal_delay_s + 90 >= self.timeout_min * 60
            out.update(status="timeout" if near_limit else "preempted", error=str(e).strip(),
                       elapsed_s=elapsed)
        except Exception as e:  # noqa: BLE001 - every failure is recorded, then the rank exits
            out.update(status="failed", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
        out["t_end_s"] = time.time()
        out.setdefault("rank", rank)
        write_json_atomic(staging / f"rank-{rank}.json", out)
        if out["status"] != "ok":
            # Peers may be blocked in a collective with this rank: leave now so that they fail fast.
            print(json.dumps({k: out.get(k) for k in ("rank", "status", "error")}), flush=True)
            os._exit(3)
        _teardown()
        return {"rank": rank, "status": out["status"], "restart": restart}

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission | None:
        """Called by submitit on rank 0 on preemption or time limit: requeue a fresh copy, or None past the bound."""
        attempt = Path(self.staging_dir).parent
        requeue = self.requeues < self.max_requeues
        event = {"time_s": time.time(), "job_id": os.environ.get("SLURM_JOB_ID"), "restart": self.restart_count(),
                 "requeues": self.requeues, "max_requeues": self.max_requeues, "requeued": requeue,
                 "host": os.uname().nodename}
        try:
            with (attempt / REQUEUE_LOG).open("a") as f:
                f.write(json.dumps(event) + "\n")
        except OSError:
            pass
        if not requeue:
            return None
        task = CellTask(self.cell, self.staging_dir, self.master_port, requeues=self.requeues + 1,
                        max_requeues=self.max_requeues, timeout_min=self.timeout_min,
                        signal_delay_s=self.signal_delay_s)
        return submitit.helpers.DelayedSubmission(task, *args, **kwargs)


def _teardown(destroy: bool = True) -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        if destroy:
            dist.destroy_process_group()

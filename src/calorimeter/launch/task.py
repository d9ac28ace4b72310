"""The callable that runs on every rank of a cell: set up torch.distributed, train, write this rank's result."""

from __future__ import annotations

import json
import os
import time
import traceback
from pathlib import Path
from typing import Any

import submitit

from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import get_profile
from calorimeter.records.atomic import write_json_atomic
from calorimeter.records.provenance import device_info


class CellTask(submitit.helpers.Checkpointable):
    """Run one cell on one rank; each rank writes ``rank-<r>.json`` into the attempt's staging folder.

    A rank that fails writes its error and exits the process at once, so that its peers' collectives fail fast
    instead of hanging until the communication timeout.
    """

    def __init__(self, cell: dict[str, Any], staging_dir: str, master_port: int | None = None) -> None:
        self.cell = cell
        self.staging_dir = staging_dir
        self.master_port = master_port

    def __call__(self) -> dict[str, Any]:
        """Entry point on each rank."""
        from calorimeter.launch.distributed import init_distributed

        cell = Cell.from_dict(self.cell)
        hw = get_profile(cell.hardware) if cell.hardware in _known() else None
        accelerator = hw.accelerator if hw else ("cuda" if cell.hardware.startswith("cuda") else "cpu")
        staging = Path(self.staging_dir)
        staging.mkdir(parents=True, exist_ok=True)
        out: dict[str, Any] = {"t_start_s": time.time(), "pid": os.getpid(),
                               "job_id": os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID")}
        rank = int(os.environ.get("SLURM_PROCID", os.environ.get("SUBMITIT_LOCAL_GLOBALID", "0")))
        try:
            info = init_distributed(accelerator, self.master_port)
            rank = info.rank
            out.update(rank=info.rank, world_size=info.world_size, local_rank=info.local_rank, node=info.node,
                       hostname=info.hostname, backend=info.backend, device_info=device_info(info.device))
            from calorimeter.train.errors import CellOOMError
            from calorimeter.train.run import train_cell

            try:
                result = train_cell(cell, staging)
                out.update(status="ok", **result)
            except CellOOMError as e:
                out.update(status="oom", peak_memory_bytes=e.peak_memory_bytes, error=str(e))
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
        return {"rank": rank, "status": out["status"]}


def _known() -> set[str]:
    from calorimeter.plan.hardware import PROFILES

    return set(PROFILES)


def _teardown() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()

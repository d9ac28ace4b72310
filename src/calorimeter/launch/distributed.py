"""Per-rank torch.distributed setup from the submitit job environment (or plain env:// variables)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class RankInfo:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node: int
    hostname: str
    backend: str
    device: str


def _in_submitit_job() -> bool:
    return any(k in os.environ for k in ("SUBMITIT_LOCAL_JOB_ID", "SUBMITIT_EXECUTOR")) or (
        "SLURM_JOB_ID" in os.environ and "SLURM_PROCID" in os.environ)


def export_env(master_port: int | None = None) -> None:
    """Set MASTER_ADDR/PORT, RANK, WORLD_SIZE, LOCAL_RANK from submitit, unless they are set already."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return
    if not _in_submitit_job():
        # A single process outside any launcher.
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port or _free_port()))
        return
    import submitit

    if master_port is not None:
        os.environ["MASTER_PORT"] = str(master_port)
    submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_distributed(accelerator: str, master_port: int | None = None, timeout_s: float = 600.0) -> RankInfo:
    """Initialise the default process group: NCCL on CUDA (one device per local rank), gloo on CPU."""
    import datetime

    export_env(master_port)
    if accelerator == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if accelerator in ("cuda", "rocm"):
        if not torch.cuda.is_available():
            raise RuntimeError(f"hardware profile needs GPUs ({accelerator}) but torch sees none "
                               f"(torch {torch.__version__}, "
                               f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')})")
        torch.cuda.set_device(local_rank)
        backend, device = "nccl", f"cuda:{local_rank}"
    else:
        backend, device = "gloo", "cpu"
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    return RankInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank,
                    local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
                    node=int(os.environ.get("SLURM_NODEID", os.environ.get("SUBMITIT_LOCAL_NODEID", "0"))),
                    hostname=socket.gethostname(), backend=backend, device=device)

"""The per-rank setup of every cell: torch.distributed from submitit's job environment (local or SLURM)."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import submitit


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


def init_distributed(accelerator: str, master_port: int | None = None, timeout_s: float = 600.0) -> RankInfo:
    """Join the job's process group: NCCL on CUDA (one device per local rank), gloo on CPU.

    Rank, node and local rank come from submitit's :class:`submitit.JobEnvironment` (the local executor's or
    SLURM's variables); submitit's ``TorchDistributedEnvironment`` exports them for torch's ``env://``
    rendezvous, with ``master_port`` when the sweep sets one (else a port derived from the job id).

    Raises:
        RuntimeError: outside a submitit job, or when the hardware profile needs GPUs that torch does not see.
    """
    job = submitit.JobEnvironment()
    if master_port is not None:
        os.environ["MASTER_PORT"] = str(master_port)
    env = submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
    if accelerator == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import torch
    import torch.distributed as dist

    if accelerator in ("cuda", "rocm"):
        if not torch.cuda.is_available():
            raise RuntimeError(f"hardware profile needs GPUs ({accelerator}) but torch sees none "
                               f"(torch {torch.__version__}, "
                               f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')})")
        torch.cuda.set_device(job.local_rank)
        backend, device = "nccl", f"cuda:{job.local_rank}"
    else:
        backend, device = "gloo", "cpu"
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    return RankInfo(rank=job.global_rank, world_size=job.num_tasks, local_rank=job.local_rank,
                    local_world_size=env.local_world_size, node=job.node, hostname=job.hostname, backend=backend,
                    device=device)

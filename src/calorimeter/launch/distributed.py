"""The per-rank setup of every cell: torch.distributed from submitit's job environment (local or SLURM)."""

from __future__ import annotations

import datetime
import os
import random

import submitit

from calorimeter.records.rank import RankInfo

#: the ports a job's rendezvous is drawn from when the sweep sets none: below Linux's ephemeral range (32768-60999 by
#: default), which submitit's own draw (20000-60000) overlaps, so that no outgoing connection of another process on
#: the host can hold the port (seen: rank 0 failed with EADDRINUSE and rank 1 waited its whole store timeout)
RENDEZVOUS_PORTS = (20000, 32767)


def job_master_port(job_id: str) -> int:
    """The rendezvous port of a job: drawn from :data:`RENDEZVOUS_PORTS` seeded by the job id, so that every rank of
    the job, on every node, draws the same one."""
    return random.Random(job_id).randint(*RENDEZVOUS_PORTS)


def init_distributed(accelerator: str, master_port: int | None = None, timeout_s: float = 600.0) -> RankInfo:
    """Join the job's process group: NCCL on CUDA (one device per local rank), gloo on CPU.

    Rank, node and local rank come from submitit's :class:`submitit.JobEnvironment` (the local executor's or
    SLURM's variables); submitit's ``TorchDistributedEnvironment`` exports them for torch's ``env://``
    rendezvous, with ``master_port`` when the sweep sets one, else ``MASTER_PORT`` when the environment has one, else
    :func:`job_master_port`.

    Raises:
        RuntimeError: outside a submitit job, or when the hardware profile needs GPUs that torch does not see.
    """
    job = submitit.JobEnvironment()
    if master_port is None and "MASTER_PORT" not in os.environ:
        master_port = job_master_port(str(job.job_id))
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
        # a failed or timed-out NCCL collective tears the process down (torch's watchdog) instead of hanging: the
        # rank exits, and the launcher's watch or srun --kill-on-bad-exit ends the cell (calorimeter.launch.watch)
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    else:
        backend, device = "gloo", "cpu"
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    return RankInfo(rank=job.global_rank, world_size=job.num_tasks, local_rank=job.local_rank,
                    local_world_size=env.local_world_size, node=job.node, hostname=job.hostname, backend=backend,
                    device=device)

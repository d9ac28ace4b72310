"""Run cells on several local CPU ranks (gloo) for tests: one subprocess per rank, like a real launcher.

The parent picks a free MASTER_PORT, starts ``world_size`` copies of this file in worker mode with
RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT, ``DS_ACCELERATOR=cpu`` and ``OMP_NUM_THREADS=1``; each worker
joins the gloo group once and calls ``train_cell`` for every cell in turn (so a test pays the torch/DeepSpeed import
once for several cells), each cell writing ``<out>/cell<i>/train-rank<r>.json`` and the ``step_callback`` calls it
saw as ``<out>/cell<i>/callbacks-rank<r>.json``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_cells(cells: list[Any], out_dir: Path, world_size: int | None = None,
              timeout_s: float = 300.0, profile_steps: int = 0,
              gradients: bool = False) -> list[list[dict[str, Any]]]:
    """Train ``cells`` one after another on ``world_size`` local ranks; return every rank's record per cell.

    Args:
        cells: ``Cell`` objects, all with the same world size.
        out_dir: working directory (per-cell records and per-rank logs go there).
        world_size: ranks (default: the cells' world size).
        timeout_s: wall-clock limit for the whole group.
        profile_steps: passed to ``train_cell`` (extra torch.profiler-traced steps).
        gradients: save each cell's first-step full gradients to ``<out>/cell<i>/grads.pt`` (rank 0).

    Raises:
        RuntimeError: with the tail of the failing rank's log, if a rank fails or the group times out.
    """
    world = world_size or cells[0].world_size
    if any(c.world_size != world for c in cells):
        raise ValueError("all cells must use the same world size")
    out_dir.mkdir(parents=True, exist_ok=True)
    job = out_dir / "job.json"
    job.write_text(json.dumps({"cells": [c.to_dict() for c in cells], "out": str(out_dir),
                               "profile_steps": profile_steps, "gradients": gradients}))
    base_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "DS_ACCELERATOR": "cpu",
        "OMP_NUM_THREADS": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": str(world),
    }
    procs: list[tuple[subprocess.Popen, Path]] = []
    for rank in range(world):
        log = out_dir / f"rank{rank}.log"
        env = {**base_env, "RANK": str(rank), "LOCAL_RANK": str(rank)}
        with log.open("w") as fh:
            proc = subprocess.Popen([sys.executable, __file__, "--worker", str(job)], env=env, stdout=fh,
                                    stderr=subprocess.STDOUT, cwd=out_dir)
        procs.append((proc, log))
    deadline = time.monotonic() + timeout_s
    failed: tuple[int, Path, str] | None = None
    for rank, (proc, log) in enumerate(procs):
        try:
            rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            if rc != 0 and failed is None:
                failed = (rank, log, f"exit status {rc}")
        except subprocess.TimeoutExpired:
            failed = failed or (rank, log, f"timed out after {timeout_s:.0f} s")
            break
    if failed is not None:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        rank, log, why = failed
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise RuntimeError(f"rank {rank} failed ({why}); last lines of {log}:\n{tail}")
    return [[json.loads((out_dir / f"cell{i}" / f"train-rank{r}.json").read_text()) for r in range(world)]
            for i in range(len(cells))]


def run_cell(cell: Any, out_dir: Path, timeout_s: float = 300.0) -> dict[str, Any]:
    """Train one cell on its world size of local ranks and return rank 0's record."""
    return run_cells([cell], out_dir, timeout_s=timeout_s)[0][0]


def _worker(job_path: Path) -> None:
    import torch.distributed as dist

    from calorimeter.plan.cell import Cell
    from calorimeter.train.loop import train_cell
    from calorimeter.train.run import init_distributed_from_env

    job = json.loads(job_path.read_text())
    init_distributed_from_env(timeout_s=120)
    for i, d in enumerate(job["cells"]):
        out = Path(job["out"]) / f"cell{i}"
        marks: list[list[Any]] = []

        def mark(*args: Any, _marks: list[list[Any]] = marks) -> None:
            _marks.append(list(args))

        train_cell(Cell.from_dict(d), out, step_callback=mark, profile_steps=job.get("profile_steps", 0),
                   gradients_out=out / "grads.pt" if job.get("gradients") else None)
        (out / f"callbacks-rank{dist.get_rank()}.json").write_text(json.dumps(marks))
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _worker(Path(sys.argv[2]))
    else:
        sys.exit("usage: dist_helpers.py --worker JOB.json")

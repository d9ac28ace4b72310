"""Per-rank entry point: join the process group from the launcher's environment and train one cell.

Usable as ``python -m calorimeter.train.run --cell cell.json --out DIR`` under ``torchrun``, ``srun`` (with
RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT exported) or any launcher that sets those variables. Rank 0 writes
``DIR/train.json`` with the record, or with ``{"status": "oom", ...}`` when a rank ran out of memory.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from calorimeter.plan.cell import Cell
from calorimeter.train.errors import CellOOMError
from calorimeter.train.loop import StepCallback, train_cell

EXIT_OOM = 3
_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def init_distributed_from_env(timeout_s: float = 600.0) -> torch.device:
    """Initialise ``torch.distributed`` from the launcher's environment, if not done yet; return this rank's device.

    CUDA: ``torch.cuda.set_device(LOCAL_RANK)`` then NCCL. CPU: gloo, and ``DS_ACCELERATOR=cpu`` for DeepSpeed.

    Raises:
        ValueError: if one of RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT is missing.
    """
    missing = [k for k in _ENV if k not in os.environ]
    if missing:
        raise ValueError(f"launcher environment incomplete: {', '.join(missing)} not set")
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        device, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        kwargs: dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(backend, rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]),
                                timeout=timedelta(seconds=timeout_s), **kwargs)
    return device


def run_rank(cell: Cell, out_dir: Path, step_callback: StepCallback | None = None) -> dict[str, Any]:
    """Join the process group, train the cell, and return this rank's record (``status`` ``ok`` or ``oom``).

    An out-of-memory error becomes ``{"status": "oom", "peak_memory_bytes": ...}`` instead of an exception; the
    other ranks will then typically fail or time out in their next collective.
    """
    init_distributed_from_env()
    try:
        record = train_cell(cell, out_dir, step_callback=step_callback)
    except CellOOMError as e:
        return {"status": "oom", "cell_id": cell.cell_id, "rank": dist.get_rank(),
                "peak_memory_bytes": e.peak_memory_bytes, "error": str(e)}
    return {"status": "ok", **record}


def main(argv: list[str] | None = None) -> int:
    """CLI: ``--cell`` (a JSON file of ``Cell.to_dict()``) and ``--out`` (a directory). Exit 3 on OOM."""
    parser = argparse.ArgumentParser(description="Train one calorimeter cell on this rank.")
    parser.add_argument("--cell", type=Path, required=True, help="JSON file with the cell (Cell.to_dict())")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    args = parser.parse_args(argv)
    cell = Cell.from_dict(json.loads(args.cell.read_text()))
    record = run_rank(cell, args.out)
    if record.get("rank") == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "train.json").write_text(json.dumps(record, indent=1) + "\n")
    if dist.is_initialized():
        dist.destroy_process_group()
    return EXIT_OOM if record["status"] == "oom" else 0


if __name__ == "__main__":
    sys.exit(main())

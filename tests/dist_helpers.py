"""Run cells on several local CPU ranks (gloo) for tests, through the product's own launch path.

The ranks are one submitit job of the local executor, with the submitit parameters the launcher gives a cell
(:func:`calorimeter.launch.submit.executor_parameters`), and every rank joins the group through
:func:`calorimeter.launch.distributed.init_distributed` (rank, node and local rank from submitit's job environment),
as a measured cell does. Each rank joins the gloo group once and calls ``train_cell`` for every cell in turn (so a
test pays the torch/DeepSpeed import once for several cells), each cell writing ``<out>/cell<i>/train-rank<r>.json``
and the ``step_callback`` calls it saw as ``<out>/cell<i>/callbacks-rank<r>.json``.
"""

from __future__ import annotations

import json
import math
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle

from calorimeter.launch.settings import launcher_settings
from calorimeter.launch.submit import executor_parameters, make_executor
from calorimeter.plan.config import validate_config

ROOT = Path(__file__).resolve().parents[1]
# The ranks load this module's callable by value: the tests folder is not on their path.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@dataclass
class _Ranks:
    """What every rank runs: join the group, train each cell, leave."""

    cells: list[dict[str, Any]]
    out: str
    profile_steps: int
    gradients: bool

    def __call__(self) -> None:
        try:
            self._run()
        except BaseException:  # a failed rank leaves at once, so that its peers fail fast (as CellTask does)
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(3)

    def _run(self) -> None:
        import torch
        import torch.distributed as dist

        from calorimeter.launch.distributed import init_distributed
        from calorimeter.plan.cell import Cell
        from calorimeter.train.loop import train_cell

        info = init_distributed("cpu", timeout_s=120)
        for i, d in enumerate(self.cells):
            out = Path(self.out) / f"cell{i}"
            out.mkdir(parents=True, exist_ok=True)
            marks: list[list[Any]] = []

            def mark(*args: Any, _marks: list[list[Any]] = marks) -> None:
                _marks.append(list(args))

            cell = Cell.from_dict(d)
            grads = out / "grads.pt" if self.gradients else None
            result = train_cell(cell, out, torch.device(info.device), step_callback=mark,
                                profile_steps=self.profile_steps, gradients_out=grads)
            record = {"cell_id": cell.cell_id, "rank": info.rank, "world_size": info.world_size, **result.to_dict()}
            (out / f"train-rank{info.rank}.json").write_text(json.dumps(record))
            (out / f"callbacks-rank{dist.get_rank()}.json").write_text(json.dumps(marks))
            dist.barrier()
        dist.destroy_process_group()


def run_cells(cells: list[Any], out_dir: Path, world_size: int | None = None,
              timeout_s: float = 300.0, profile_steps: int = 0,
              gradients: bool = False) -> list[list[dict[str, Any]]]:
    """Train ``cells`` one after another on ``world_size`` local ranks; return every rank's record per cell.

    Args:
        cells: ``Cell`` objects (CPU hardware), all with the same world size.
        out_dir: working directory (per-cell records and submitit's per-rank logs go there).
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
    settings = launcher_settings(validate_config({"launcher": {"timeout_min": max(1, math.ceil(timeout_s / 60))}}))
    kind, params = executor_parameters(cells[0], settings)
    src = str(ROOT / "src")
    params["setup"] = [*params["setup"], f"export PYTHONPATH={src}${{PYTHONPATH:+:$PYTHONPATH}}"]
    params["tasks_per_node"] = world
    executor = make_executor(kind, params, out_dir / "submitit", 0)
    job = executor.submit(_Ranks([c.to_dict() for c in cells], str(out_dir), profile_steps, gradients))
    try:
        job.results()
    except Exception as e:  # noqa: BLE001 - the ranks' logs say why
        raise RuntimeError(f"ranks failed: {type(e).__name__}: {str(e)[-4000:]}") from None
    return [[json.loads((out_dir / f"cell{i}" / f"train-rank{r}.json").read_text()) for r in range(world)]
            for i in range(len(cells))]

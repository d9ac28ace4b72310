"""Cell kinds: what a cell runs on its ranks. One registry, one per-rank entry point, the same launch path.

Every kind runs through the same launcher, per-rank setup (``torch.distributed``) and node sampler as training;
only the work in the middle differs. A kind names:

* ``entry``: ``module:function`` called on every rank with a :class:`calorimeter.records.rank.RankContext` (the
  cell, the run's folder, the rank's place and device, the telemetry settings) after the process group is up; it
  returns this rank's :class:`calorimeter.records.rank.RankResult` (steps, peak memory, a summary for the record),
  and rank 0 writes the kind's files into the run's folder. The launcher imports it by name
  (:func:`calorimeter.launch.task.run_kind`): this registry is plan-time code and imports no kind;
* ``outputs``: those files, copied into the cell folder next to ``run.json`` when the cell's record is written;
* ``checks``: plan-time reasons why a cell of this kind cannot run (an empty list when it can);
* ``uses_model``: whether the model and the parallel layout mean anything (only training).

Adding a kind (e.g. a thermal profile) = one entry here, its module, and its name in the config schema's ``kind``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from calorimeter.plan.cell import Cell


@dataclass(frozen=True)
class CellKind:
    """One kind of cell (see the module docstring)."""

    name: str
    entry: str
    outputs: tuple[str, ...]
    uses_model: bool
    description: str
    checks: Callable[[Cell], list[str]] | None = None


def _collectives_checks(cell: Cell) -> list[str]:
    return [] if cell.world_size >= 2 else [f"a collectives cell needs at least 2 ranks, has {cell.world_size}"]


#: the table a ``collectives`` cell writes (:mod:`calorimeter.collectives.table`)
COLLECTIVES_PARQUET = "collectives.parquet"

KINDS: dict[str, CellKind] = {
    k.name: k
    for k in [
        CellKind("train", "calorimeter.train.loop:run_train", (), True,
                 "train the model with the cell's layout: warm-up, measured and profiled steps"),
        CellKind("collectives", "calorimeter.collectives.run:run_collectives", (COLLECTIVES_PARQUET,), False,
                 "time all-reduce, all-gather, reduce-scatter, all-to-all and send/recv over message and group "
                 "sizes (projection calibration)", _collectives_checks),
        CellKind("thermal-calibration", "calorimeter.placement.calibrate:run_calibration", (), False,
                 "a standard load on every GPU of the node at once (bf16 matmuls), to profile the host's GPUs for "
                 "thermal-aware placement (docs/placement.md)"),
    ]
}


def get_kind(name: str) -> CellKind:
    """A kind by name, with a message listing the known ones."""
    try:
        return KINDS[name]
    except KeyError:
        raise KeyError(f"unknown cell kind {name!r}; known: {', '.join(KINDS)}") from None


def kind_reasons(cell: Cell) -> list[str]:
    """Plan-time reasons why a non-train cell cannot run (training cells have their own checks)."""
    try:
        kind = get_kind(cell.kind)
    except KeyError as e:
        return [str(e.args[0])]
    return kind.checks(cell) if kind.checks else []


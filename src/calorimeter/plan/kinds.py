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
from calorimeter.plan.models import get_model


@dataclass(frozen=True)
class CellKind:
    """One kind of cell (see the module docstring)."""

    name: str
    entry: str
    outputs: tuple[str, ...]
    uses_model: bool
    description: str
    checks: Callable[[Cell], list[str]] | None = None


def _command_checks(cell: Cell) -> list[str]:
    out = [] if cell.command else ["a command cell needs `command` (the shell command every rank runs)"]
    return out + ([] if cell.label else ["a command cell needs `label` (its short name in the cell id)"])


def _collectives_checks(cell: Cell) -> list[str]:
    return [] if cell.world_size >= 2 else [f"a collectives cell needs at least 2 ranks, has {cell.world_size}"]


def lora_reasons(cell: Cell) -> list[str]:
    """Plan-time reasons why a ``lora`` cell cannot run (empty when it can)."""
    out = []
    if cell.lora_rank < 1:
        out.append(f"lora_rank must be >= 1, is {cell.lora_rank}")
    if cell.tp != 1 or cell.pp != 1:
        out.append(f"a lora cell needs tp = 1 and pp = 1 (peft adapts plain linear layers), has tp {cell.tp} pp "
                   f"{cell.pp}")
    if cell.zero_stage >= 3:
        out.append("a lora cell needs ZeRO stage 0-2 (ZeRO-3 partitions the weights the adapters wrap)")
    try:
        if get_model(cell.model).is_moe:
            out.append(f"a lora cell needs a dense model, {cell.model} is a mixture of experts")
    except KeyError:
        pass  # the training checks name an unknown model
    return out


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
        CellKind("lora", "calorimeter.train.lora:run_lora", (), True,
                 "LoRA fine-tuning (peft adapters on the block projections, base model frozen) with the training "
                 "loop of `train`", lora_reasons),
        CellKind("thermal-calibration", "calorimeter.placement.calibrate:run_calibration", (), False,
                 "a standard load on every GPU of the node at once (bf16 matmuls), to profile the host's GPUs for "
                 "thermal-aware placement (docs/placement.md)"),
        CellKind("command", "calorimeter.command.run:run_command", (), False,
                 "run a training command of your own (torchtitan, Megatron-LM, NeMo, a script) on every rank under "
                 "the node sampler; its steps come from a JSON-lines step log or its console (docs/command.md)",
                 _command_checks),
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


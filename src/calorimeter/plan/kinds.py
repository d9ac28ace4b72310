"""Cell kinds: what a cell runs on its ranks. One registry: every behaviour that depends on a cell's kind is asked here.

Every kind runs through the same launcher, per-rank setup (``torch.distributed``) and node sampler as training;
only the work in the middle differs. A kind names:

* ``entry``: ``module:function`` called on every rank with a :class:`calorimeter.records.rank.RankContext` (the
  cell, the run's folder, the rank's place and device, the telemetry settings) after the process group is up; it
  returns this rank's :class:`calorimeter.records.rank.RankResult` (steps, peak memory, a summary for the record),
  and rank 0 writes the kind's files into the run's folder. The launcher imports it by name
  (:func:`calorimeter.launch.task.run_kind`): this registry is plan-time code and imports no kind;
* ``outputs``: those files, copied into the cell folder next to ``run.json`` when the cell's record is written;
* ``checks``: plan-time reasons why a cell of this kind cannot run (an empty list when it can);
* what the rest of the house asks of a kind (the flags of :class:`CellKind`): whether it trains the cell's model
  with its layout, how its id reads, what its record says, how its time is estimated, whether the placement
  policies apply and whether it profiles its hosts.

Adding a kind (e.g. a thermal profile) = one entry here, its module, and its name in the config schema's ``kind``
(tests/test_plan_kinds.py holds the schema's list to this registry's).

This module stands below :mod:`calorimeter.plan.cell` (a cell's id is shaped by its kind); the checks read a cell
through :class:`KindCell`, the parameters they need.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from calorimeter.plan.models import get_model

#: the kind of a cell that names none (and of records from before cell kinds)
DEFAULT_KIND = "train"
#: the table a ``collectives`` cell writes (:mod:`calorimeter.collectives.table`)
COLLECTIVES_PARQUET = "collectives.parquet"
#: where a ``command`` cell's rank 0 writes what its command ran, under its run folder (:mod:`calorimeter.command`)
COMMAND_PROVENANCE = "command/provenance.json"
#: what a ``command`` cell's own trainer decides, not calorimeter: the parallel layout, optimizer sharding, data, seed
#: and learning rate (and the values derived from them)
COMMAND_DECIDES = ("tp", "pp", "ep", "cp", "sequence_parallel", "zero_stage", "recompute", "recompute_layers",
                   "overlap", "pp_split", "lora_rank", "dataset", "seed", "lr", "dp", "grad_accum", "parallel_label",
                   "optimization_label")


class KindCell(Protocol):
    """The parameters of a :class:`calorimeter.plan.cell.Cell` the kinds' checks read."""

    @property
    def kind(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def tp(self) -> int: ...
    @property
    def pp(self) -> int: ...
    @property
    def zero_stage(self) -> int: ...
    @property
    def lora_rank(self) -> int: ...
    @property
    def command(self) -> str | None: ...
    @property
    def label(self) -> str | None: ...
    @property
    def world_size(self) -> int: ...


@dataclass(frozen=True)
class CellKind:
    """One kind of cell (see the module docstring).

    Attributes:
        name: the kind's name (the config's ``kind``).
        entry: ``module:function`` run on every rank.
        description: one line for the docs and ``calorimeter`` listings.
        outputs: files rank 0 writes into the run folder, copied next to ``run.json``.
        trains_model: it trains the cell's model with the cell's parallel layout: the training checks, memory and
            FLOP estimates, throughput metrics and the layout's id apply; a kind that does not has no model
            (``-``) unless ``declares_model``, and its record's metrics are rank 0's summary.
        declares_model: a model may be named (optional), for FLOPs and MFU of a run calorimeter does not train.
        adapters: LoRA adapters train on a frozen base (``lora_rank``): no base weight gradients or optimizer state
            in memory, FLOPs and work; the rank is part of the id.
        timed_by_flops: its run time follows from its FLOPs: the plan's time-limit bound at peak, the ETA from the
            FLOP rate the finished cells achieved (others: the median wall time of their kind's finished cells).
        placed: the placement policies decide its ranks' GPUs and stage split in the job; a dense one without
            pipeline stages also profiles its hosts (``placement.derive_profiles``).
        profiles_hosts: it is a standard load for the thermal profile of its hosts, always kept (docs/placement.md).
        id_form: how its id reads (:attr:`calorimeter.plan.cell.Cell.cell_id`): ``layout`` (model, machine,
            layout, optimizations, batch), ``label`` (``cmd-`` and its label, the declared shape, machine) or
            ``machine`` (kind and machine).
        id_tag: a part appended to a ``layout`` id, formatted with the cell's fields (``lora-r{lora_rank}``).
        decides: parameters its own command decides: recorded as None, never calorimeter's defaults.
        engine: the engine its record names instead of the cell's (None: the cell's).
        provenance: a JSON file rank 0 writes under the run folder, kept as the record's section of the kind's
            name (what a command ran).
        checks: plan-time reasons why a cell of this kind cannot run.
    """

    name: str
    entry: str
    description: str
    outputs: tuple[str, ...] = ()
    trains_model: bool = False
    declares_model: bool = False
    adapters: bool = False
    timed_by_flops: bool = False
    placed: bool = False
    profiles_hosts: bool = False
    id_form: str = "machine"
    id_tag: str = ""
    decides: tuple[str, ...] = ()
    engine: str | None = None
    provenance: str | None = None
    checks: Callable[[KindCell], list[str]] | None = None

    @property
    def full_training(self) -> bool:
        """It trains every weight of the cell's model (not adapters on a frozen base)."""
        return self.trains_model and not self.adapters

    def reasons(self, cell: KindCell) -> list[str]:
        """Plan-time reasons why ``cell`` cannot run as this kind (empty when it can)."""
        return self.checks(cell) if self.checks else []


def _command_checks(cell: KindCell) -> list[str]:
    out = [] if cell.command else ["a command cell needs `command` (the shell command every rank runs)"]
    return out + ([] if cell.label else ["a command cell needs `label` (its short name in the cell id)"])


def _collectives_checks(cell: KindCell) -> list[str]:
    return [] if cell.world_size >= 2 else [f"a collectives cell needs at least 2 ranks, has {cell.world_size}"]


def lora_reasons(cell: KindCell) -> list[str]:
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


KINDS: dict[str, CellKind] = {
    k.name: k
    for k in [
        CellKind("train", "calorimeter.train.loop:run_train",
                 "train the model with the cell's layout: warm-up, measured and profiled steps",
                 trains_model=True, timed_by_flops=True, placed=True, id_form="layout"),
        CellKind("collectives", "calorimeter.collectives.run:run_collectives",
                 "time all-reduce, all-gather, reduce-scatter, all-to-all and send/recv over message and group "
                 "sizes (projection calibration)", outputs=(COLLECTIVES_PARQUET,), checks=_collectives_checks),
        CellKind("lora", "calorimeter.train.lora:run_lora",
                 "LoRA fine-tuning (peft adapters on the block projections, base model frozen) with the training "
                 "loop of `train`", trains_model=True, adapters=True, id_form="layout", id_tag="lora-r{lora_rank}",
                 checks=lora_reasons),
        CellKind("thermal-calibration", "calorimeter.placement.calibrate:run_calibration",
                 "a standard load on every GPU of the node at once (bf16 matmuls), to profile the host's GPUs for "
                 "thermal-aware placement (docs/placement.md)", profiles_hosts=True),
        CellKind("command", "calorimeter.command.run:run_command",
                 "run a training command of your own (torchtitan, Megatron-LM, NeMo, a script) on every rank under "
                 "the node sampler; its steps come from a JSON-lines step log or its console (docs/command.md)",
                 declares_model=True, id_form="label", decides=COMMAND_DECIDES, engine="command",
                 provenance=COMMAND_PROVENANCE, checks=_command_checks),
    ]
}


def get_kind(name: str) -> CellKind:
    """A kind by name, with a message listing the known ones."""
    try:
        return KINDS[name]
    except KeyError:
        raise KeyError(f"unknown cell kind {name!r}; known: {', '.join(KINDS)}") from None


def kind_of(name: str | None) -> CellKind | None:
    """The kind a record or table row names (None or empty: :data:`DEFAULT_KIND`), or None for a kind this version
    does not know."""
    return KINDS.get(str(name or DEFAULT_KIND))


def kinds_where(**flags: bool) -> tuple[str, ...]:
    """Names of the kinds whose flags have these values: ``kinds_where(trains_model=True)`` (for table filters)."""
    return tuple(k.name for k in KINDS.values() if all(getattr(k, f) == v for f, v in flags.items()))


def kind_reasons(cell: KindCell) -> list[str]:
    """Plan-time reasons why a cell cannot run as its kind (its kind's checks; an unknown kind is one)."""
    try:
        kind = get_kind(cell.kind)
    except KeyError as e:
        return [str(e.args[0])]
    return kind.reasons(cell)

"""One grid cell: a fully resolved training configuration, and its stable readable id."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.kinds import DEFAULT_KIND, KINDS, CellKind, kind_of
from calorimeter.plan.vocabulary import ID_ONLY, OPTIONAL


@dataclass(frozen=True)
class Cell:
    """A fully resolved training configuration (one point of a sweep).

    Attributes:
        sweep: name of the sweep the cell belongs to (results go under ``results/<sweep>/``).
        model: catalogue name of the model.
        hardware: hardware profile name.
        nodes: nodes used.
        gpus_per_node: ranks per node (one rank per device; CPU ranks for ``cpu``).
        tp: tensor-parallel degree.
        pp: pipeline-parallel degree.
        ep: expert-parallel degree (carved out of dp).
        cp: context-parallel degree (1: not used).
        sequence_parallel: Megatron sequence parallelism (needs tp > 1).
        zero_stage: ZeRO stage 0-3 of the data-parallel optimizer; stage 3 is the FSDP counterpart.
        recompute: activation recomputation: ``none``, ``selective`` (attention core) or ``full``.
        recompute_layers: layers per stage fully recomputed (None: every layer of the stage).
        overlap: compute-communication overlap on/off (see docs/knobs.md for what it changes per engine).
        micro_batch: sequences per micro-batch per data-parallel rank.
        global_batch: sequences per optimizer step over all data-parallel ranks.
        seq_len: tokens per sequence.
        warmup: ``steady``: warm up until the GPU die temperature is steady (every GPU's slope over
            ``steady_window_s`` times the planned measured duration below the sensor's 1 °C, and at most
            ``steady_slope_c_per_min`` where set), at least ``warmup_steps`` steps and ``warmup_min_s`` seconds and
            at most ``warmup_max_steps`` steps and ``warmup_max_s`` seconds; ``fixed``: exactly ``warmup_steps``
            steps. Ranks without a GPU temperature (CPU) use ``fixed``, and the record says so
            (:mod:`calorimeter.train.steady`).
        warmup_steps: steps run before measuring (``fixed``), or the least (``steady``).
        warmup_max_steps: ``steady``: the most warm-up steps.
        warmup_max_s: ``steady``: the longest warm-up in seconds.
        warmup_min_s: ``steady``: the shortest warm-up in seconds (0: none), however steady the temperature reads.
        steady_window_s: ``steady``: the temperature slope is fitted over this many seconds.
        steady_slope_c_per_min: ``steady``: an extra cap (°C/min) every GPU's slope must also meet, or None (the
            drift rule alone).
        measured_steps: steps timed and recorded as measured (the least on GPUs, see ``measured_min_s``).
        measured_min_s: on GPUs, measure at least this long (steps from the slowest rank's last warm-up step).
        precision: ``bf16`` or ``fp32``.
        dataset: path prefix of a pre-tokenized dataset, or None for synthetic seeded tokens.
        seed: random seed for init and synthetic data.
        lr: peak learning rate.
        pp_split: explicit layers per pipeline stage, or None for a uniform split.
        engine: training engine (``deepspeed``).
        repeat: repetition number (0 for the first); every repetition is its own cell, record and folder, with
            ``_r<k>`` appended to the id for k > 0 (``config_id`` is the id without it).
        kind: what the cell runs (:data:`calorimeter.plan.kinds.KINDS`): ``train`` (default) or a calibration kind such
            as ``collectives``; a non-train cell ignores the model and the parallel layout.
        placement: placement policy (``default``, ``balanced``, ``thermal``; :mod:`calorimeter.plan.placement`):
            which GPU each rank uses and the layers per pipeline stage, decided in the job.
        lora_rank: kind ``lora``: rank of the LoRA adapters (:mod:`calorimeter.train.lora`); ignored otherwise.
        command: kind ``command``: the shell command every rank runs (:mod:`calorimeter.command`); None otherwise.
        label: kind ``command``: a short name of the command, part of the cell id (``fsdp2``, ``torchtitan``).
        log_format: kind ``command``: how its steps are read: ``jsonl`` (the step-log protocol), ``torchtitan`` or
            ``megatron`` (their console logs).
        pp_schedule: pipeline schedule with pp > 1: None (DeepSpeed's 1F1B) or ``dualpipev`` (DeepSpeed's
            DualPipeV: two stages a rank in a V, to fill the 1F1B bubble; needs ``grad_accum >= 2 pp``).
        bucket_elements: DeepSpeed's gradient reduce and all-gather bucket size in elements (None: the engine's
            default, ``calorimeter.train.engine.BUCKET_ELEMENTS``).
        prefetch_elements: ZeRO-3 parameter prefetch in elements (None: the engine's default, the bucket size with
            ``overlap`` on, 0 without).
        tp_comm_overlap: with ``overlap`` on, tp > 1 and sequence parallelism, how the tensor-parallel collectives are
            overlapped: None (the engine's choice, ``calorimeter.train.tp_overlap.tp_overlap_mode``), ``symm_mem``,
            ``ring``, or ``none`` (whole collectives, as with overlap off; the data-parallel overlap stays on).

    The ``command`` fields and the engine knobs ``pp_schedule``, ``bucket_elements``, ``prefetch_elements`` and
    ``tp_comm_overlap`` are
    left out of :meth:`to_dict` when unset, so cells that do not set them keep the parameters (and the rerun
    trigger) they had before the fields existed.
    """

    sweep: str
    model: str
    hardware: str
    nodes: int
    gpus_per_node: int
    tp: int = 1
    pp: int = 1
    ep: int = 1
    cp: int = 1
    sequence_parallel: bool = False
    zero_stage: int = 1
    recompute: str = "none"
    recompute_layers: int | None = None
    overlap: bool = False
    micro_batch: int = 1
    global_batch: int = 8
    seq_len: int = 128
    warmup: str = "steady"
    warmup_steps: int = 2
    warmup_max_steps: int = 100
    warmup_max_s: float = 180.0
    warmup_min_s: float = 0.0
    steady_window_s: float = 30.0
    steady_slope_c_per_min: float | None = None
    measured_steps: int = 5
    measured_min_s: float = 20.0
    precision: str = "fp32"
    dataset: str | None = None
    seed: int = 1234
    lr: float = 1e-3
    pp_split: tuple[int, ...] | None = None
    engine: str = "deepspeed"
    repeat: int = 0
    kind: str = DEFAULT_KIND
    placement: str = "default"
    lora_rank: int = 16
    command: str | None = None
    label: str | None = None
    log_format: str | None = None
    pp_schedule: str | None = None
    bucket_elements: int | None = None
    prefetch_elements: int | None = None
    tp_comm_overlap: str | None = None

    @property
    def world_size(self) -> int:
        """Total ranks."""
        return self.nodes * self.gpus_per_node

    @property
    def dp(self) -> int:
        """Data-parallel degree derived from the world size (0 if it does not divide)."""
        mp = self.tp * self.pp * self.cp
        return self.world_size // mp if self.world_size % mp == 0 else 0

    @property
    def batch_reason(self) -> str | None:
        """Why the batch does not split over the cell's data-parallel ranks (:func:`batch_reason`), or None."""
        return batch_reason(self.global_batch, self.micro_batch, self.dp)

    @property
    def grad_accum(self) -> int:
        """Micro-batches per rank per optimizer step (0 if the batch does not divide)."""
        per = self.micro_batch * max(self.dp, 1)
        return self.global_batch // per if self.global_batch % per == 0 else 0

    @property
    def adapter_rank(self) -> int | None:
        """The rank of the LoRA adapters of a kind that trains them on a frozen base (``lora``), else None."""
        kind = KINDS.get(self.kind)
        return self.lora_rank if kind is not None and kind.adapters else None

    @property
    def parallel_label(self) -> str:
        """Short label in the study's style: ``TP8-PP2``, ``EP8-TP2-PP2``, ``TP8-FSDP``, ``DP2-Z1``."""
        parts = []
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        parts.append(f"TP{self.tp}")
        if self.zero_stage == 3 and self.pp == 1:
            parts.append("FSDP")
        else:
            parts.append(f"PP{self.pp}")
        if self.dp > 1 and not (self.zero_stage == 3 and self.pp == 1):
            parts.append(f"DP{self.dp}")
        return "-".join(parts)

    @property
    def optimization_label(self) -> str:
        """``base``, ``cc`` (overlap), ``act`` (recompute) or ``cc+act``, as in the study's Fig. 8."""
        rc = self.recompute != "none"
        if self.overlap and rc:
            return "cc+act"
        return "cc" if self.overlap else ("act" if rc else "base")

    @property
    def cell_id(self) -> str:
        """Stable, readable, filesystem- and wildcard-safe id derived from the parameters that define a cell.

        Run lengths (warmup/measured steps), the learning rate and the seed are not part of the id: changing
        them reruns the same cell rather than creating a new one. A non-train cell is named by its kind and
        machine: ``collectives_h200-1x8``.
        """
        kind = KINDS.get(self.kind)
        form = kind.id_form if kind is not None else "machine"
        if form == "label":
            shape = (f"_{self.model}" if self.model != "-" else "") + (
                f"_mb{self.micro_batch}-gb{self.global_batch}-s{self.seq_len}")
            return (f"cmd-{self.label or 'command'}{shape}_{self.hardware}-{self.nodes}x{self.gpus_per_node}"
                    + (f"_{self.precision}" if self.precision != "bf16" else "") + (
                        f"_r{self.repeat}" if self.repeat else ""))
        if form != "layout":
            return f"{self.kind}_{self.hardware}-{self.nodes}x{self.gpus_per_node}" + (
                f"_r{self.repeat}" if self.repeat else "")
        par = f"tp{self.tp}-pp{self.pp}-dp{self.dp}"
        if self.ep > 1:
            par += f"-ep{self.ep}"
        if self.cp > 1:
            par += f"-cp{self.cp}"
        if self.sequence_parallel:
            par += "-sp"
        if self.pp_split:
            par += "-split" + ".".join(str(n) for n in self.pp_split)
        if self.pp_schedule:
            par += f"-{self.pp_schedule}"
        zero = f"z{self.zero_stage}"
        if self.bucket_elements is not None:
            zero += f"-bk{_elements(self.bucket_elements)}"
        if self.prefetch_elements is not None:
            zero += f"-pf{_elements(self.prefetch_elements)}"
        rc = self.recompute if self.recompute_layers is None else f"{self.recompute}{self.recompute_layers}"
        parts = [
            self.model,
            f"{self.hardware}-{self.nodes}x{self.gpus_per_node}",
            par,
            zero,
            f"rc-{rc}",
            ("ov-on" if self.overlap else "ov-off")
            + (f"-tp{TP_OVERLAP_ID[self.tp_comm_overlap]}" if self.tp_comm_overlap else ""),
            f"mb{self.micro_batch}-gb{self.global_batch}-s{self.seq_len}",
        ]
        if self.precision != "bf16":
            parts.append(self.precision)
        if self.dataset:
            parts.append("data-" + _slug(self.dataset))
        if self.placement != "default":
            parts.append(f"pl-{self.placement}")
        if kind is not None and kind.id_tag:
            parts.append(kind.id_tag.format(**vars(self)))
        return "_".join(parts) + (f"_r{self.repeat}" if self.repeat else "")

    @property
    def config_id(self) -> str:
        """The id of the configuration all repetitions share (the cell id without ``_r<k>``)."""
        return self.cell_id.removesuffix(f"_r{self.repeat}") if self.repeat else self.cell_id

    def to_dict(self) -> JsonObject:
        """Parameters plus derived values, for records and tables."""
        # fields are plain values: a shallow read gives what asdict() gives, without its deep copies (planning and
        # the workflow call this once per cell and figure)
        d = {f.name: getattr(self, f.name) for f in _FIELDS
             if f.name not in OPTIONAL or getattr(self, f.name) is not None}
        d["pp_split"] = list(self.pp_split) if self.pp_split else None
        d.update(cell_id=self.cell_id, config_id=self.config_id, world_size=self.world_size, dp=self.dp,
                 grad_accum=self.grad_accum, parallel_label=self.parallel_label,
                 optimization_label=self.optimization_label)
        return d

    def recorded(self) -> JsonObject:
        """The cell as its record and tables describe it: :meth:`to_dict` (the parameters, which decide when it
        reruns), for a ``command`` cell seen through :func:`as_recorded`."""
        return as_recorded(self.to_dict())

    @classmethod
    def from_dict(cls, d: JsonObject) -> Cell:
        """Inverse of :meth:`to_dict` (derived keys are ignored)."""
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if kw.get("pp_split") is not None:
            kw["pp_split"] = tuple(kw["pp_split"])
        return cls(**kw)


_FIELDS = fields(Cell)


def batch_reason(global_batch: int, micro_batch: int, dp: int) -> str | None:
    """The batch rule, for the plan, the engine and the data alike: a step's ``global_batch`` sequences split into
    whole micro-batches of ``micro_batch`` on each of the ``dp`` data-parallel ranks (None when they do, else why
    not)."""
    if dp >= 1 and global_batch % (micro_batch * dp) == 0:
        return None
    return f"global batch {global_batch} not divisible by micro batch x dp = {micro_batch}x{dp} = {micro_batch * dp}"


def _elements(n: int) -> str:
    """An element count in an id, exactly: ``5e8``, ``25e6``, ``0``, ``123456789``."""
    k = 0
    while n and n % 10 ** (k + 1) == 0:
        k += 1
    return f"{n // 10 ** k}e{k}" if k >= 3 else str(n)


def _count(text: str) -> int:
    """The inverse of :func:`_elements`."""
    base, _, exp = text.partition("e")
    return int(base) * 10 ** int(exp or 0)


#: the grammar of a cell id, one pattern per form of :attr:`Cell.cell_id` (a name holding ``_`` is split at the last
#: place that parses; the id reads back the same)
#: ``tp_comm_overlap`` -> its token in a cell id (``ov-on-tpsymm``; a cell id's parts never hold an underscore)
TP_OVERLAP_ID: dict[str, str] = {"symm_mem": "symm", "ring": "ring", "none": "none"}
_MACHINE = r"(?P<hardware>[A-Za-z0-9][A-Za-z0-9.-]*?)-(?P<nodes>\d+)x(?P<gpus_per_node>\d+)"
_PRECISION = r"(?:_(?P<precision>fp32|fp16))?"
_REPEAT = r"(?:_r(?P<repeat>\d+))?$"
_ID_FORMS = {
    "label": re.compile(r"^cmd-(?P<label>[A-Za-z0-9][A-Za-z0-9.-]*?)(?:_(?P<model>.+?))?"
                        rf"_mb(?P<micro_batch>\d+)-gb(?P<global_batch>\d+)-s(?P<seq_len>\d+)_{_MACHINE}{_PRECISION}"
                        + _REPEAT),
    "machine": re.compile(rf"^(?P<kind>[a-z][a-z-]*)_{_MACHINE}{_REPEAT}"),
    "layout": re.compile(
        rf"^(?P<model>.+?)_{_MACHINE}_tp(?P<tp>\d+)-pp(?P<pp>\d+)-dp\d+(?:-ep(?P<ep>\d+))?(?:-cp(?P<cp>\d+))?"
        r"(?P<sequence_parallel>-sp)?(?:-split(?P<pp_split>\d+(?:\.\d+)*))?(?:-(?P<pp_schedule>[a-z][a-z0-9]*))?"
        r"_z(?P<zero_stage>\d)(?:-bk(?P<bucket_elements>\d+(?:e\d+)?))?(?:-pf(?P<prefetch_elements>\d+(?:e\d+)?))?"
        r"_rc-(?P<recompute>[a-z]+?)(?P<recompute_layers>\d+)?_ov-(?P<overlap>on|off)(?:-tp(?P<tp_comm_overlap>ring|symm|none))?"
        rf"_mb(?P<micro_batch>\d+)-gb(?P<global_batch>\d+)-s(?P<seq_len>\d+){_PRECISION}"
        r"(?:_data-(?P<dataset>[A-Za-z0-9.-]+))?(?:_pl-(?P<placement>[a-z]+))?(?:_(?P<tag>[a-z]+-[a-z0-9]+))?"
        + _REPEAT),
}
#: how each field named in an id is read back
_READ = {"nodes": int, "gpus_per_node": int, "tp": int, "pp": int, "ep": int, "cp": int, "zero_stage": int,
         "recompute_layers": int, "micro_batch": int, "global_batch": int, "seq_len": int, "repeat": int,
         "sequence_parallel": bool, "overlap": lambda v: v == "on", "bucket_elements": _count,
         "prefetch_elements": _count, "pp_split": lambda v: tuple(int(n) for n in v.split(".")),
         "tp_comm_overlap": lambda v: {i: m for m, i in TP_OVERLAP_ID.items()}[v]}


def parse_cell_id(cell_id: str, sweep: str = "") -> Cell:
    """The cell an id names (the one parser of :attr:`Cell.cell_id`): the parameters the id holds, the others at
    their defaults (a dataset as its name in the id); its ``cell_id`` is ``cell_id``.

    Raises:
        ValueError: the id has none of the forms (or names a kind this version does not know).
    """
    for form, pattern in _ID_FORMS.items():
        m = pattern.match(cell_id)
        if m is None:
            continue
        values = {k: _READ.get(k, str)(v) for k, v in m.groupdict().items() if v is not None}
        tag = values.pop("tag", "")
        kinds = [k for k in KINDS.values() if k.id_form == form and (form == "machine" or _tag_of(k, tag) is not None)]
        if form == "machine":
            kinds = [k for k in kinds if k.name == values["kind"]]
        if len(kinds) != 1:
            break
        kind = kinds[0]
        if tag:
            values.update(_tag_of(kind, tag) or {})
        values = {"model": "-", "precision": "bf16", **values, "kind": kind.name}
        if form == "machine":
            values["precision"] = Cell.precision
        cell = Cell(sweep=sweep, **values)
        if cell.cell_id == cell_id:
            return cell
        break
    raise ValueError(f"{cell_id!r} is not a cell id")


def _tag_of(kind: CellKind, tag: str) -> dict[str, int] | None:
    """The fields a layout-form kind's id tag holds (``lora-r16``: lora_rank 16); {} for a kind without a tag and an
    id without one; None when they do not match."""
    if not kind.id_tag:
        return {} if not tag else None
    pattern = re.sub(r"\\{(\w+)\\}", r"(?P<\1>\\d+)", re.escape(kind.id_tag))
    m = re.fullmatch(pattern, tag)
    return {k: int(v) for k, v in m.groupdict().items()} if m else None


def as_recorded(d: JsonObject) -> JsonObject:
    """A cell's parameters (``Cell.to_dict()`` or a plan's row of them) as records and tables show them: a cell of a
    kind whose own command decides parts of it (``command``, :attr:`calorimeter.plan.kinds.CellKind.decides`) says
    what it is, its kind's ``engine``, and None for what its command decides, never the engine's defaults; any
    other cell as it is."""
    kind = kind_of(d.get("kind"))
    if kind is None or not (kind.decides or kind.engine):
        return d
    return {**d, **dict.fromkeys((k for k in kind.decides if k in d), None),
            **({"engine": kind.engine} if kind.engine else {})}


def _slug(path: str) -> str:
    base = path.rstrip("/").rsplit("/", 1)[-1]
    return "".join(c if c.isalnum() or c in "-." else "-" for c in base)[:40]


def id_knobs(config_id: str) -> dict[str, object]:
    """What a configuration's (or cell's) id names beyond the runs table's columns (:data:`ID_ONLY`: TP overlap
    mechanism, pipeline schedule, ZeRO buckets, LoRA rank, a peer's label, ...), each ``None`` where unset; an id of
    another version's grammar gives every one ``None`` (nothing known beyond the columns)."""
    try:
        cell = parse_cell_id(config_id)
    except ValueError:
        return dict.fromkeys(ID_ONLY)
    return {n: getattr(cell, n, None) for n in ID_ONLY}

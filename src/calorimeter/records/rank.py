"""The per-rank contract of every cell kind: what a rank is given (:class:`RankContext`) and what it gives back
(:class:`RankResult`).

The launcher (:mod:`calorimeter.launch.task`) builds the context once per rank, after the process group is up
(:class:`RankInfo` from :func:`calorimeter.launch.distributed.init_distributed`: rank, node and device come from
submitit's job environment, never worked out again by a kind), calls the kind's entry
(:data:`calorimeter.plan.kinds.KINDS`) with it, and writes the result into ``rank-<r>.json`` with the launcher's own
keys (status, timing, placement). The record (:func:`calorimeter.records.record.build_record`) reads those files.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from calorimeter.plan.cell import Cell
from calorimeter.plan.settings import TelemetrySettings
from calorimeter.records.paths import RunPaths


@dataclass(frozen=True)
class RankInfo:
    """Where this process sits in the job.

    Attributes:
        rank, world_size: global rank and number of ranks.
        local_rank, local_world_size: rank on its node and ranks on the node.
        node: node index in the job.
        hostname: the node's host name.
        backend: ``nccl`` or ``gloo``.
        device: this rank's device, as torch spells it (``cuda:<local_rank>`` or ``cpu``).
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node: int
    hostname: str
    backend: str
    device: str


@dataclass(frozen=True)
class RankContext:
    """What a cell kind's entry gets on every rank.

    Attributes:
        cell: the cell as it runs (the placement's effective split applied).
        run: the run's folder (rank 0 writes the kind's files into ``run.root``).
        rank: this rank's place in the job and its device.
        telemetry: the sweep's telemetry settings (``profile_steps``, ``profile_all_ranks``, ...).
    """

    cell: Cell
    run: RunPaths
    rank: RankInfo
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)


@dataclass
class RankResult:
    """What a rank of any kind gives back (``rank-<r>.json``; units in the names).

    Attributes:
        steps: one row per step: ``step``, ``phase`` (warmup, measured, profiled), ``loss``, ``grad_norm``,
            ``time_s``, ``t_begin_s``, ``t_end_s`` (a kind may add columns, e.g. ``tflops``).
        peak_memory_bytes: peak device memory of the rank (None where it cannot be measured).
        kind_metrics: a calibration kind's summary (rank 0's becomes the record's ``metrics``).
        stage, num_stages: pipeline stage of the rank and number of stages.
        dp_rank, dp_size, tp_rank: the rank in its data- and tensor-parallel groups.
        device: the accelerator's name (or the CPU model).
        precision: ``bf16`` or ``fp32`` (the kind's compute dtype).
        parameters_on_rank, parameters_model: parameters this rank holds, and the model's.
        traced: whether this rank wrote a kernel trace.
        engine: kernels and overlap mechanisms the training engine chose.
        warmup: how the warm-up and the measured length were decided (:mod:`calorimeter.train.steady`).
        calibration: the thermal-calibration load and this rank's matmul rates.
        command: kind ``command``: the command's exit code and wall time on this rank.
    """

    steps: list[dict[str, Any]] = field(default_factory=list)
    peak_memory_bytes: int | None = None
    kind_metrics: dict[str, Any] | None = None
    stage: int = 0
    num_stages: int = 1
    dp_rank: int | None = None
    dp_size: int | None = None
    tp_rank: int | None = None
    device: str | None = None
    precision: str | None = None
    parameters_on_rank: int = 0
    parameters_model: int = 0
    traced: bool = False
    engine: dict[str, Any] | None = None
    warmup: dict[str, Any] | None = None
    calibration: dict[str, Any] | None = None
    command: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able form written into ``rank-<r>.json`` (fields that say nothing are left out)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

"""The per-rank contract of every cell kind: what a rank is given (:class:`RankContext`), what it gives back
(:class:`RankResult`), and what the launcher reads back (:class:`RankReport`).

The launcher (:mod:`calorimeter.launch.task`) builds the context once per rank, after the process group is up
(:class:`RankInfo` from :func:`calorimeter.launch.distributed.init_distributed`: rank, node and device come from
submitit's job environment, never worked out again by a kind), calls the kind's entry
(:data:`calorimeter.plan.kinds.KINDS`) with it, and writes the result into ``rank-<r>.json`` with the launcher's own
keys (status, timing, placement): a :class:`RankReport`. The launcher reads those files back
(:func:`read_rank_reports`, the last run's: :func:`last_run`) and the record
(:func:`calorimeter.records.record.build_record`) is built from them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from calorimeter.plan.cell import Cell
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.settings import TelemetrySettings
from calorimeter.records.paths import AttemptPaths, RunPaths


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
        allocator: what the CUDA caching allocator did over the measured steps (the change of each counter of
            :data:`calorimeter.train.loop.ALLOCATOR_COUNTERS`: retries after a failed allocation, device
            allocations and frees, all-stream synchronisations); a step that waits on them shows as GPU idle.
        calibration: the thermal-calibration load and this rank's matmul rates.
        command: kind ``command``: the command's exit code and wall time on this rank.
    """

    steps: list[JsonObject] = field(default_factory=list)
    peak_memory_bytes: int | None = None
    kind_metrics: JsonObject | None = None
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
    engine: JsonObject | None = None
    warmup: JsonObject | None = None
    allocator: JsonObject | None = None
    calibration: JsonObject | None = None
    command: JsonObject | None = None

    def to_dict(self) -> JsonObject:
        """The JSON-able form written into ``rank-<r>.json`` (fields that say nothing are left out)."""
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class RankReport(RankResult):
    """What one rank reported for one run of its cell's job (``rank-<r>.json``): its kind's :class:`RankResult` and
    the launcher's own keys. Read back with :meth:`from_dict`, which ignores keys it does not know.

    Attributes:
        rank: global rank.
        status: ``ok``, ``oom``, ``failed``, ``timeout`` (the time limit's warning came) or ``preempted`` (more
            often than ``launcher.max_requeues``).
        restart: the run of the job it belongs to (how often the job was requeued before: SLURM_RESTART_COUNT).
        requeues: how often the task was requeued by the launcher's checkpoint.
        job_id: the job's id.
        pid: the rank's process id.
        t_start_s, t_end_s: when the rank's task began and wrote this report (Unix seconds).
        elapsed_s: seconds into the run when a time limit or preemption ended it.
        error: why it is not ok; traceback: where (a failed rank).
        world_size, local_rank, node, hostname, backend: the rank's place (absent where it never got one).
        device_info: its device (name, UUID, NVML index, ...); host_cpu: its host's CPU and dispatch latency.
        placement: its view of the placement decision (:meth:`calorimeter.placement.apply.JobPlacement.record`).
        stage, num_stages, traced: as in :class:`RankResult`, None for a rank that ended before its kind returned
            one (the record then says nothing of them, rather than the defaults of a result it never had).
    """

    stage: int | None = None  # type: ignore[assignment]
    num_stages: int | None = None  # type: ignore[assignment]
    traced: bool | None = None  # type: ignore[assignment]
    rank: int = 0
    status: str = ""
    restart: int = 0
    requeues: int = 0
    job_id: str | None = None
    pid: int | None = None
    t_start_s: float | None = None
    t_end_s: float | None = None
    elapsed_s: float | None = None
    error: str | None = None
    traceback: str | None = None
    world_size: int | None = None
    local_rank: int | None = None
    node: int | None = None
    hostname: str | None = None
    backend: str | None = None
    device_info: JsonObject | None = None
    host_cpu: JsonObject | None = None
    placement: JsonObject | None = None

    @property
    def ok(self) -> bool:
        """The rank finished its kind's work."""
        return self.status == "ok"

    def take(self, result: RankResult) -> None:
        """Take a kind's result into this report."""
        for f in fields(RankResult):
            setattr(self, f.name, getattr(result, f.name))

    @classmethod
    def from_dict(cls, d: JsonObject) -> RankReport:
        """From :meth:`to_dict`'s form (``rank-<r>.json``).

        Raises:
            ValueError: not a rank report (no ``rank``).
        """
        if not isinstance(d, dict) or d.get("rank") is None:
            raise ValueError("not a rank report (no 'rank')")
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names and v is not None}
        kw["rank"], kw["restart"] = int(d["rank"]), int(d.get("restart") or 0)
        kw["steps"] = list(d.get("steps") or [])
        return cls(**kw)


def read_rank_reports(attempt: AttemptPaths) -> list[tuple[Path, RankReport]]:
    """Every rank report in the attempt's staging folder, with its file (unreadable ones left out)."""
    found = []
    for f in attempt.rank_jsons():
        try:
            found.append((f, RankReport.from_dict(json.loads(f.read_text()))))
        except (OSError, ValueError, TypeError):
            continue
    return found


def last_restart(reports: list[RankReport]) -> int:
    """The run of the job the newest reports belong to (0 without any)."""
    return max((r.restart for r in reports), default=0)


def last_run(reports: list[RankReport]) -> list[RankReport]:
    """The reports of the job's last run (its highest restart), by rank: the attempt's results (a requeued run's
    are superseded)."""
    last = last_restart(reports)
    return sorted((r for r in reports if r.restart == last), key=lambda r: r.rank)


@dataclass(frozen=True)
class RankOutput:
    """The tail of what one rank printed (the record's ``evidence.rank_output``: :mod:`calorimeter.launch.output`).

    Attributes:
        rank: the rank.
        host: where it ran (None where nothing says).
        status: its report's status, ``no result`` without one.
        stdout, stderr: their last lines.
    """

    rank: int
    host: str | None = None
    status: str = "no result"
    stdout: tuple[str, ...] = ()
    stderr: tuple[str, ...] = ()

    def last_lines(self, n: int = 2) -> list[str]:
        """The last ``n`` lines of its stderr, or of its stdout where it wrote nothing to stderr."""
        return list(self.stderr or self.stdout)[-n:]

    def to_dict(self) -> JsonObject:
        """The JSON form."""
        return {"rank": self.rank, "host": self.host, "status": self.status, "stdout": list(self.stdout),
                "stderr": list(self.stderr)}

    @classmethod
    def from_dict(cls, d: JsonObject) -> RankOutput:
        """From :meth:`to_dict`'s form."""
        return cls(int(d.get("rank", -1)), d.get("host"), str(d.get("status") or "no result"),
                   tuple(d.get("stdout") or ()), tuple(d.get("stderr") or ()))


@dataclass(frozen=True)
class RankDeath:
    """A rank that died without a result, as the launcher found it (:mod:`calorimeter.launch.watch`): the first one is
    ``peer_died.json`` in the attempt folder and the record's ``evidence.peer_died``.

    Attributes:
        rank: the rank.
        host: its host (None where nothing says).
        pid: its process id (None where it was never seen, or SLURM gave the account).
        restart: the run of the job it belonged to (None where not known).
        source: how it was found: ``process`` (its process ended, or was never seen), ``heartbeat`` (its heartbeat
            stopped first, or fell behind), ``srun`` (SLURM's account), None (its announced process was gone).
        how: how it ended, in words.
        t_start_s: when it started; t_detected_s: when the launcher found it (Unix seconds).
        t_last_beat_s: its last heartbeat; others_lived_s: how much longer the other ranks' heartbeats went on.
        ranks_dead: every rank found dead in the same look.
    """

    rank: int
    host: str | None = None
    pid: int | None = None
    restart: int | None = None
    source: str | None = None
    how: str | None = None
    t_start_s: float | None = None
    t_detected_s: float | None = None
    t_last_beat_s: float | None = None
    others_lived_s: float | None = None
    ranks_dead: tuple[int, ...] = ()

    def describe(self) -> str:
        """One line naming the rank and host that went first."""
        others = [r for r in self.ranks_dead if r != self.rank]
        pid = f" (pid {self.pid})" if self.pid is not None else ""
        how = ""
        if self.how:
            how = f" ({self.how}" + (", said srun)" if self.source == "srun" else ")")
        if self.others_lived_s:
            how = f" (its heartbeat stopped {self.others_lived_s:.0f} s before any other rank's)"
        return (f"rank {self.rank} on host {self.host}{pid} died without a result{how}"
                + (f" (also gone: ranks {', '.join(map(str, others))})" if others else "")
                + "; the other ranks were stopped")

    def to_dict(self) -> JsonObject:
        """The JSON form (what is not known left out)."""
        out = {k: v for k, v in asdict(self).items() if v is not None and k != "ranks_dead"}
        return {**out, "ranks_dead": list(self.ranks_dead)} if self.ranks_dead else out

    @classmethod
    def from_dict(cls, d: JsonObject) -> RankDeath:
        """From :meth:`to_dict`'s form.

        Raises:
            ValueError: no ``rank``.
        """
        if not isinstance(d, dict) or d.get("rank") is None:
            raise ValueError("not a rank death (no 'rank')")
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names and v is not None}
        return cls(**{**kw, "rank": int(d["rank"]), "ranks_dead": tuple(int(r) for r in d.get("ranks_dead") or ())})

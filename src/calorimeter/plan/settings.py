"""The ``launcher``, ``telemetry`` and ``placement`` blocks of a sweep config, resolved: frozen, typed, parsed once.

One definition of every default: the schema (``src/calorimeter/plan/config.schema.yaml``). The dataclass defaults
below are read from it (:func:`schema_defaults`), :func:`calorimeter.plan.config.validate_config` fills the same
values into a config, and :meth:`LauncherSettings.from_config` reads the filled config; nothing downstream
restates a default (tests/test_plan_settings.py checks every key both ways).

The launcher's settings travel with every cell: into ``job.json`` (:meth:`LauncherSettings.to_dict`, read back by
:meth:`LauncherSettings.from_dict`, which tolerates the keys of older files) and, pickled, to every rank.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from calorimeter.plan.config import load_schema
from calorimeter.plan.json_types import JsonObject

#: the folder of the hosts' thermal profiles under ``results_dir`` (:mod:`calorimeter.placement.profile`)
PROFILES_DIR = "thermal-profiles"


def schema_defaults(*path: str) -> JsonObject:
    """The schema's defaults of the keys of one block: ``schema_defaults("launcher", "slurm")``."""
    node = load_schema()
    for key in path:
        node = node["properties"][key]
    return {k: v["default"] for k, v in node["properties"].items() if "default" in v}


def _known(cls: type, d: Mapping[str, Any]) -> JsonObject:
    """The keys of ``d`` that are fields of ``cls`` (older or newer files may carry others)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


_TELEMETRY = schema_defaults("telemetry")
_PLACEMENT = schema_defaults("placement")
_LAUNCHER = schema_defaults("launcher")
_SLURM = schema_defaults("launcher", "slurm")


@dataclass(frozen=True)
class TelemetrySettings:
    """The ``telemetry:`` block: the node sampler and the profiled steps (schema: ``telemetry``).

    Attributes:
        enabled: run the node sampler.
        period_ms: its sampling period in milliseconds.
        profile_steps: extra steps after the measured ones traced with torch.profiler.
        profile_all_ranks: trace every rank instead of one rank per pipeline stage.
    """

    enabled: bool = _TELEMETRY["enabled"]
    period_ms: float = _TELEMETRY["period_ms"]
    profile_steps: int = _TELEMETRY["profile_steps"]
    profile_all_ranks: bool = _TELEMETRY["profile_all_ranks"]

    @property
    def period_s(self) -> float:
        """The sampling period in seconds."""
        return float(self.period_ms) / 1000.0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> TelemetrySettings:
        """From the block (validated, or as ``job.json`` keeps it); absent keys take the defaults."""
        return cls(**_known(cls, d or {}))


@dataclass(frozen=True)
class PlacementSettings:
    """The ``placement:`` block, and where the hosts' thermal profiles are (schema: ``placement``).

    Attributes:
        profile_max_age_h: a host's thermal profile older than this (hours) is stale.
        stage_costs: ``auto`` (fitted to the same layout's default cell when it has a record) or ``flops``.
        derive_profiles: update a host's profile from each qualifying cell's telemetry.
        profiles_dir: the absolute folder of the thermal profiles (None: :data:`PROFILES_DIR` under the working
            directory, and no profile is derived).
    """

    profile_max_age_h: float = _PLACEMENT["profile_max_age_h"]
    stage_costs: str = _PLACEMENT["stage_costs"]
    derive_profiles: bool = _PLACEMENT["derive_profiles"]
    profiles_dir: str | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any], results_dir: str | Path | None = None) -> PlacementSettings:
        """From a validated sweep config: its ``placement`` block and the absolute profiles folder under
        ``results_dir`` (default the config's)."""
        root = Path(results_dir or config.get("results_dir") or schema_defaults()["results_dir"]).resolve()
        return cls(**_known(cls, config.get("placement") or {}), profiles_dir=str(root / PROFILES_DIR))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> PlacementSettings:
        """From :meth:`to_dict`'s form (absent keys take the defaults)."""
        return cls(**_known(cls, d or {}))


@dataclass(frozen=True)
class SlurmSettings:
    """``launcher.slurm``, with the Snakemake profile's resources applied (:mod:`calorimeter.launch.settings`).

    Attributes:
        partition, account, qos: ``--partition``, ``--account``, ``--qos`` (None: the site's default).
        constraint: ``--constraint`` (``auto``: the hardware profile's tag).
        mem_gb: ``--mem`` per node in GB of 10^9 bytes (None: the site's default).
        gpus_as_gres: request GPUs as ``--gres=gpu:<n>``.
        exclusive: ``--exclusive``.
        setup: shell lines run in the job before the ranks start.
        extra: further sbatch options, name to value.
        mem_mib: ``--mem`` in MiB from the executor plugin's ``mem``/``mem_mb``/``mem_mib`` resources (wins over
            ``mem_gb``); None where the profile sets none.
        gpu_type: the GPU type of the request (plugin resources ``gpu``, ``gres``, ``gpu_model``), or None.
        gpus: a GPU count the profile asked for (checked against the cell's), or None.
    """

    partition: str | None = _SLURM["partition"]
    account: str | None = _SLURM["account"]
    qos: str | None = _SLURM["qos"]
    constraint: str | None = _SLURM["constraint"]
    mem_gb: float | None = _SLURM["mem_gb"]
    gpus_as_gres: bool = _SLURM["gpus_as_gres"]
    exclusive: bool = _SLURM["exclusive"]
    setup: tuple[str, ...] = tuple(_SLURM["setup"])
    extra: dict[str, str | int | float | bool] = field(default_factory=lambda: dict(_SLURM["extra"]))
    mem_mib: float | None = None
    gpu_type: str | None = None
    gpus: int | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> SlurmSettings:
        """From the block (validated, or as ``job.json`` keeps it); absent keys take the defaults."""
        kw = _known(cls, d or {})
        if "setup" in kw:
            kw["setup"] = tuple(kw["setup"] or ())
        if "extra" in kw:
            kw["extra"] = dict(kw["extra"] or {})
        return cls(**kw)


@dataclass(frozen=True)
class LauncherSettings:
    """How a cell is launched: the ``launcher:`` block with the profile's resources applied, and what travels with it
    to every rank (schema: ``launcher``; the precedence: :mod:`calorimeter.launch.settings`).

    Attributes:
        executor: ``local``, ``slurm`` or ``auto``.
        timeout_min: wall-clock limit of one cell in minutes.
        cpus_per_task: CPU cores per rank (None: 1 locally, the node's cores over its ranks on SLURM).
        master_port: rendezvous port (None: derived from the job id).
        max_requeues: how often one attempt may be requeued after a preemption.
        signal_delay_s: SLURM sends USR2 this long before the time limit.
        poll_s: at most this long between two job-state checks.
        node_lost_wait_s: how long a job SLURM requeued after a node failure waits for a node.
        array: submit the cells of one shape as one SLURM array.
        snapshot: SLURM jobs import a copy of the package made at submission.
        slurm: the SLURM settings.
        telemetry: the sweep's telemetry block (it reaches every rank).
        placement: the sweep's placement settings.
        definitions: the models and hardware the sweep defines (:mod:`calorimeter.plan.definitions`), registered on
            every rank.
        sweep_file: the sweep file, for the commands a record tells its reader to run (None: unknown).
        code_snapshot: the folder of the code snapshot a SLURM job imports (set at submission), or None.
    """

    executor: str = _LAUNCHER["executor"]
    timeout_min: int = _LAUNCHER["timeout_min"]
    cpus_per_task: int | None = _LAUNCHER["cpus_per_task"]
    master_port: int | None = _LAUNCHER["master_port"]
    max_requeues: int = _LAUNCHER["max_requeues"]
    signal_delay_s: int = _LAUNCHER["signal_delay_s"]
    poll_s: int = _LAUNCHER["poll_s"]
    node_lost_wait_s: int = _LAUNCHER["node_lost_wait_s"]
    array: bool = _LAUNCHER["array"]
    snapshot: bool = _LAUNCHER["snapshot"]
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    placement: PlacementSettings = field(default_factory=PlacementSettings)
    definitions: JsonObject = field(default_factory=dict)
    sweep_file: str | None = None
    code_snapshot: str | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> LauncherSettings:
        """From a sweep config as :func:`calorimeter.plan.config.validate_config` returns it (every default filled
        in): its ``launcher``, ``telemetry`` and ``placement`` blocks, the definitions the plan found
        (``_definitions``) and the sweep file (``_source``)."""
        launcher = cls.from_dict({**config.get("launcher", {}), "telemetry": config.get("telemetry"),
                                  "definitions": config.get("_definitions") or {}, "sweep_file": config.get("_source")})
        return replace(launcher, placement=PlacementSettings.from_config(config))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LauncherSettings:
        """From :meth:`to_dict`'s form (``job.json``'s ``launcher``; absent keys take the defaults)."""
        kw = _known(cls, d)
        kw["slurm"] = SlurmSettings.from_dict(d.get("slurm"))
        kw["telemetry"] = TelemetrySettings.from_dict(d.get("telemetry"))
        kw["placement"] = PlacementSettings.from_dict(d.get("placement"))
        kw["definitions"] = dict(d.get("definitions") or {})
        return cls(**kw)

    def to_dict(self) -> JsonObject:
        """The JSON form (``job.json``'s ``launcher``)."""
        return asdict(self)


__all__ = ["PROFILES_DIR", "LauncherSettings", "PlacementSettings", "SlurmSettings", "TelemetrySettings",
           "schema_defaults"]

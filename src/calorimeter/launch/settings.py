"""The effective launcher settings of a cell: sweep config, then the profile's resources, then the hardware profile.

Built once per launch, from the validated sweep config (schema defaults already filled in by
:func:`calorimeter.plan.config.validate_config`). Precedence (later wins):

1. the schema defaults of ``launcher`` (``src/calorimeter/plan/config.schema.yaml``);
2. the sweep's ``launcher:`` block (study settings, e.g. ``timeout_min``, ``launcher.slurm.exclusive``);
3. the resources of rule ``train`` as set by a Snakemake profile (site settings: ``profiles/slurm/config.yaml``, or a
   site profile under it):

   ============================  ====================================================
   resource                      setting
   ============================  ====================================================
   ``launcher``                  ``launcher.executor`` (``local``, ``slurm``, ``auto``)
   ``runtime``                   ``launcher.timeout_min`` (SLURM ``--time``, minutes; or ``4h``, ``90m``)
   ``cpus_per_task``             ``launcher.cpus_per_task``
   ``slurm_partition``           ``--partition``
   ``slurm_account``             ``--account``
   ``slurm_qos``                 ``--qos``
   ``slurm_constraint``          ``--constraint`` (``auto``: the hardware profile's tag)
   ``slurm_mem_gb``              ``--mem`` in GB of 10^9 bytes (sent in MiB, rounded up)
   ``slurm_exclusive``           ``--exclusive`` (0/1)
   ``slurm_gpus_as_gres``        ``--gres=gpu:N`` instead of ``--gpus-per-node=N`` (0/1)
   ``max_requeues``              ``launcher.max_requeues``
   ``signal_delay_s``            ``launcher.signal_delay_s``
   ``poll_s``                    ``launcher.poll_s``
   ``node_lost_wait_s``          ``launcher.node_lost_wait_s``
   ============================  ====================================================

The Snakemake SLURM executor plugin's names are accepted too, with its units (docs/slurm.md): ``qos`` and
``constraint`` (as ``slurm_qos``, ``slurm_constraint``), ``mem`` (a size with its unit, ``64G``: Snakemake's
``mem_mb``, 10^6 bytes each), ``mem_mb`` (sent as the plugin sends it, ``--mem=<mem_mb>M``, which SLURM counts in
MiB), ``mem_mib`` (``--mem=<mem_mib>M``), ``mem_mb_per_cpu`` (``--mem-per-cpu``), ``slurm_extra`` (its sbatch
options: ``--exclusive`` and ``--name=value`` pairs, also in the plugin's documented quoted form
``"'--qos=long --mail-type=ALL'"``), ``gpu``/``gres``/``gpu_model``
(the GPU type; the count must be the cell's), ``cpus_per_gpu`` (= ``cpus_per_task``: one task per GPU) and
``clusters``/``cluster``/``slurm_cluster``. What the cell decides (``nodes``, ``tasks``, ``tasks_per_node``,
``mpi``, ``tasks_per_gpu``) and what calorimeter does its own way (``slurm_logfile``, ``slurm_job_submit``) is
refused with the reason, and an unknown name with the nearest known one: a misspelt resource is never silently
dropped. ``mem_mb``, ``disk_mb`` and the other resources Snakemake sets on every rule count only where the profile
or the command line sets them (``explicit``).

Resources never trigger reruns, so moving a sweep from one partition or site to another never re-measures finished
cells. The cell itself (nodes, GPUs per node) is never taken from here. The sweep's ``telemetry`` block (node
sampler, profiled steps) travels with the settings as ``telemetry``: it reaches every rank, but never changes what a
cell is.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from calorimeter.plan.config_errors import ConfigError, short, suggest
from calorimeter.plan.definitions import definitions_of, register_definitions
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.settings import LauncherSettings, SlurmSettings

#: profile resource -> key of ``launcher.slurm``
SLURM_RESOURCES = {
    "slurm_partition": "partition",
    "slurm_account": "account",
    "slurm_qos": "qos",
    "slurm_constraint": "constraint",
    "slurm_mem_gb": "mem_gb",
    "slurm_exclusive": "exclusive",
    "slurm_gpus_as_gres": "gpus_as_gres",
}
#: profile resource -> top-level key of ``launcher``
LAUNCHER_RESOURCES = {
    "launcher": "executor",
    "runtime": "timeout_min",
    "cpus_per_task": "cpus_per_task",
    "max_requeues": "max_requeues",
    "signal_delay_s": "signal_delay_s",
    "poll_s": "poll_s",
    "node_lost_wait_s": "node_lost_wait_s",
}
#: the SLURM executor plugin's names that mean one of calorimeter's
PLUGIN_ALIASES = {"qos": "slurm_qos", "constraint": "slurm_constraint", "cpus_per_gpu": "cpus_per_task"}
#: resources Snakemake sets on every rule (never an error; the memory ones become --mem when set explicitly)
SNAKEMAKE_RESOURCES = frozenset({"_cores", "_nodes", "tmpdir", "mem", "mem_mb", "mem_mib", "disk", "disk_mb",
                                 "disk_mib", "slurm_slots", "threads"})
#: resources the workflow sets on the train rule for its own messages (workflow/rules/train.smk), never a setting
WORKFLOW_RESOURCES = frozenset({"projected_wall"})
#: plugin resources calorimeter does not take, and why
REFUSED_RESOURCES = {
    "nodes": "the cell decides the nodes (`nodes:` in the sweep)",
    "tasks": "the cell decides the tasks (one per GPU: `gpus_per_node:` in the sweep)",
    "tasks_per_node": "the cell decides the tasks per node (one per GPU: `gpus_per_node:` in the sweep)",
    "tasks_per_gpu": "calorimeter runs one task per GPU",
    "mpi": "ranks rendezvous through torch.distributed, not MPI",
    "slurm_logfile": "each attempt logs to results/<sweep>/cells/<cell>/attempts/<UTC>/submitit/",
    "slurm_job_submit": "calorimeter submits through submitit",
}
#: the plugin's names of its cluster option
_CLUSTER_NAMES = ("clusters", "cluster", "slurm_cluster")
_BOOL = {"exclusive", "gpus_as_gres"}
_INT = {"timeout_min", "cpus_per_task", "max_requeues", "signal_delay_s", "poll_s", "node_lost_wait_s"}


def launcher_settings(config: JsonObject, resources: JsonObject | None = None,
                      explicit: set[str] | None = None) -> LauncherSettings:
    """The launcher settings of a validated sweep config, overridden by profile resources (module docstring).

    Args:
        config: the sweep config as :func:`calorimeter.plan.config.validate_config` returns it (every default
            filled in).
        resources: the train rule's resources (Snakemake profile), if any.
        explicit: the names the profile or command line set (:func:`explicit_train_resources`); None: all of
            ``resources``.

    Returns:
        :meth:`LauncherSettings.from_config` with the resources applied: ``config["launcher"]``, the sweep's
        ``telemetry`` block, its ``placement`` settings (with the absolute folder of the hosts' thermal profiles) and
        the models and hardware it defines (``definitions``).
    """
    # models and hardware the sweep defined (plan time): this process and every rank register them
    register_definitions(config.get("_definitions"))
    base = LauncherSettings.from_config({**config, "_definitions": config.get("_definitions") or definitions_of()})
    slurm = dataclasses.asdict(base.slurm)
    resources = _plugin_resources(dict(resources or {}), explicit, slurm)
    launcher: JsonObject = {}
    for res, key in LAUNCHER_RESOURCES.items():
        v = resources.get(res)
        if v is not None and str(v) != "":
            launcher[key] = _minutes(res, v) if res == "runtime" else _number(res, v, int) if key in _INT else str(v)
    for res, key in SLURM_RESOURCES.items():
        v = resources.get(res)
        if v is None or str(v) == "":
            continue
        if key in _BOOL:
            slurm[key] = str(v).lower() in ("1", "true", "yes", "on")
        elif key == "mem_gb":
            slurm[key] = _number(res, v, float)
        else:
            slurm[key] = None if str(v).lower() in ("none", "null") else str(v)
    return dataclasses.replace(base, **launcher, slurm=SlurmSettings.from_dict(slurm))


def _plugin_resources(resources: JsonObject, explicit: set[str] | None, slurm: JsonObject) -> JsonObject:
    """The resources in calorimeter's names: plugin names translated (into ``slurm``, the SLURM settings being
    built, where they have no calorimeter name), Snakemake's implicit ones dropped, refused and unknown names raised
    (module docstring)."""
    given = set(resources) if explicit is None else {k for k in resources if k in explicit or
                                                     k not in SNAKEMAKE_RESOURCES | WORKFLOW_RESOURCES}
    known = sorted({*LAUNCHER_RESOURCES, *SLURM_RESOURCES, *PLUGIN_ALIASES, "mem", "mem_mb", "mem_mib",
                    "mem_mb_per_cpu", "slurm_extra", "gpu", "gres", "gpu_model", *_CLUSTER_NAMES})
    where = "resource {} of rule train (profile or --set-resources)"
    kept: JsonObject = {}
    for name in sorted(given):
        value = resources[name]
        if value is None or str(value) == "":
            continue
        if name in LAUNCHER_RESOURCES or name in SLURM_RESOURCES:
            kept[name] = value
        elif name in PLUGIN_ALIASES:
            kept[PLUGIN_ALIASES[name]] = value
        elif name in ("mem", "mem_mb", "mem_mib"):
            # one of them, in this order (Snakemake gives all three for one): the plugin's --mem <mem_mb>, which
            # SLURM reads as MiB, so the same request as the plugin's
            if name == next(n for n in ("mem_mb", "mem", "mem_mib") if n in given):
                slurm["mem_mib"] = _megabytes(value) if name == "mem" else _number(name, value, float)
        elif name == "mem_mb_per_cpu":
            slurm["extra"]["mem-per-cpu"] = f"{int(_number(name, value, float))}M"
        elif name == "slurm_extra":
            _slurm_extra(str(value), slurm, where.format(name))
        elif name in ("gpu", "gres", "gpu_model"):
            _gpu_request(name, value, slurm, where.format(name))
        elif name in _CLUSTER_NAMES:
            slurm["extra"]["clusters"] = str(value)
        elif name in SNAKEMAKE_RESOURCES:
            continue
        elif name in REFUSED_RESOURCES:
            raise ConfigError(f"{where.format(name)}: not taken: {REFUSED_RESOURCES[name]}")
        else:
            raise ConfigError(f"{where.format(short(name))}: unknown{suggest(name, known) or ''}; known: "
                              f"{', '.join(known)} (docs/slurm.md)")
    if "mem-per-cpu" in slurm["extra"] and ("slurm_mem_gb" in kept or slurm.get("mem_gb") or slurm.get("mem_mib")):
        raise ConfigError("resources mem_mb and mem_mb_per_cpu of rule train: give one (sbatch refuses --mem with "
                          "--mem-per-cpu)")
    return kept


def _megabytes(value: Any) -> float:
    """The plugin's ``mem`` (``64G``, ``500MB``, a plain number of MB) in MB of 10^6 bytes, as Snakemake reads it
    into ``mem_mb`` (rounded up, by the same library)."""
    from humanfriendly import InvalidSize, parse_size

    text = str(value).strip().strip("'\"")
    if text.isdecimal():
        return float(text)
    try:
        return float(max(math.ceil(parse_size(text) / 1e6), 1))
    except InvalidSize:
        raise ConfigError(f"resource mem of rule train (profile or --set-resources): {short(value)} is not a size "
                          "(e.g. 64G, 500MB, 1.5TB)") from None


def _minutes(resource: str, value: Any) -> int:
    """``runtime`` in minutes: a number, or a time span as Snakemake reads it (``4h``, ``90m``, ``1d``)."""
    from humanfriendly import InvalidTimespan, parse_timespan

    text = str(value).strip().strip("'\"")
    if isinstance(value, (int, float)) or text.isdecimal():
        return _number(resource, value, int)
    try:
        return max(int(round(parse_timespan(text)) / 60), 1)
    except InvalidTimespan:
        raise ConfigError(f"resource {resource} of rule train (profile or --set-resources): {short(value)} is not "
                          "a time (minutes, or e.g. 4h, 90m)") from None


def _slurm_extra(text: str, slurm: JsonObject, where: str) -> None:
    """The plugin's ``slurm_extra`` (sbatch options as one string) into ``exclusive`` and ``extra``."""
    import shlex

    words = shlex.split(text)
    if len(words) == 1 and " " in words[0].strip():
        # the plugin's documented form "'--qos=long --mail-type=ALL'" read without Snakemake's evaluation, which
        # takes the quotes off: one quoted string of options
        words = shlex.split(words[0])
    i = 0
    while i < len(words):
        w = words[i]
        if not w.startswith("--"):
            raise ConfigError(f"{where}: {w!r}: give sbatch long options (--name=value or --flag), e.g. "
                              "'--exclusive --reservation=study'")
        name, eq, value = w[2:].partition("=")
        if not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
            value, i = words[i + 1], i + 1
        if name == "exclusive" and not value:
            slurm["exclusive"] = True
        else:
            slurm["extra"][name] = value if value else True
        i += 1


def _gpu_request(name: str, value: Any, slurm: JsonObject, where: str) -> None:
    """``gpu: N``, ``gres: gpu[:type]:N`` or ``gpu_model: type``: the GPU type for the request; a count is checked
    against the cell's GPUs per node when the cell is submitted."""
    text = str(value).strip()
    if name == "gpu_model":
        slurm["gpu_type"] = text
        return
    if name == "gres":
        parts = text.split(":")
        if parts[0] != "gpu" or not 2 <= len(parts) <= 3 or not parts[-1].isdigit():
            raise ConfigError(f"{where}: {text!r}: calorimeter requests GPUs only, as gpu:N or gpu:type:N")
        slurm["gpus_as_gres"] = True
        if len(parts) == 3:
            slurm["gpu_type"] = parts[1]
        text = parts[-1]
    if ":" in text:  # gpu: a100:8
        slurm["gpu_type"], text = text.split(":", 1)
    if not text.isdigit():
        raise ConfigError(f"{where}: {str(value)!r} is not a GPU count")
    slurm["gpus"] = int(text)


def explicit_train_resources(workflow: Any, rule: str = "train") -> set[str]:
    """Names of the resources of ``rule`` the profile or command line set (``--set-resources``,
    ``--default-resources``), not the ones Snakemake sets by itself (``mem_mb``, ``disk_mb``, ...)."""
    rs = workflow.resource_settings
    names = set((rs.overwrite_resources or {}).get(rule, {}))
    default = getattr(rs, "default_resources", None)
    names |= {a.split("=", 1)[0].strip() for a in (getattr(default, "args", None) or [])}
    return names - {"tmpdir"}


#: environment variable naming the train rule's explicitly set resources, for its script (a process of its own)
TRAIN_RESOURCES_ENV = "CALORIMETER_TRAIN_RESOURCES"


def export_train_resources(workflow: Any) -> None:
    """Name the train rule's explicitly set resources (:func:`explicit_train_resources`) in the environment that
    Snakemake's train script inherits (:func:`train_resources_from_env`)."""
    import os

    os.environ[TRAIN_RESOURCES_ENV] = ",".join(sorted(explicit_train_resources(workflow)))


def train_resources_from_env() -> set[str] | None:
    """What :func:`export_train_resources` left (None outside a workflow: every given resource counts)."""
    import os

    text = os.environ.get(TRAIN_RESOURCES_ENV)
    return None if text is None else set(filter(None, text.split(",")))


def _number(resource: str, value: Any, kind: type) -> Any:
    """A profile resource as a finite non-negative int or float, or a ConfigError naming it."""
    try:
        x = kind(value) if kind is float or isinstance(value, int) else int(str(value).strip())
    except (TypeError, ValueError):
        x = None
    if x is None or isinstance(value, bool) or not math.isfinite(x) or x < 0:
        raise ConfigError(f"resource {resource} of rule train (profile or --set-resources): {short(value)} is not "
                          f"a finite non-negative {'integer' if kind is int else 'number'}")
    return x

"""The effective launcher settings of a cell: sweep config, then the profile's resources, then the hardware profile.

Built once per launch, from the validated sweep config (schema defaults already filled in by
:func:`calorimeter.plan.config.validate_config`). Precedence (later wins):

1. the schema defaults of ``launcher`` (``src/calorimeter/plan/config.schema.yaml``);
2. the sweep's ``launcher:`` block (study settings, e.g. ``timeout_min``, ``launcher.slurm.exclusive``);
3. the resources of rule ``train`` as set by a Snakemake profile (site settings, ``slurm/config.yaml``):

   ============================  ====================================================
   resource                      setting
   ============================  ====================================================
   ``launcher``                  ``launcher.executor`` (``local``, ``slurm``, ``auto``)
   ``runtime``                   ``launcher.timeout_min`` (SLURM ``--time``, minutes)
   ``cpus_per_task``             ``launcher.cpus_per_task``
   ``slurm_partition``           ``--partition``
   ``slurm_account``             ``--account``
   ``slurm_qos``                 ``--qos``
   ``slurm_constraint``          ``--constraint`` (``auto``: the hardware profile's tag)
   ``slurm_mem_gb``              ``--mem`` in GB
   ``slurm_exclusive``           ``--exclusive`` (0/1)
   ``slurm_gpus_as_gres``        ``--gres=gpu:N`` instead of ``--gpus-per-node=N`` (0/1)
   ``max_requeues``              ``launcher.max_requeues``
   ``signal_delay_s``            ``launcher.signal_delay_s``
   ``poll_s``                    ``launcher.poll_s``
   ============================  ====================================================

Resources never trigger reruns, so moving a sweep from one partition or site to another never re-measures finished
cells. The cell itself (nodes, GPUs per node) is never taken from here. The sweep's ``telemetry`` block (node
sampler, profiled steps) travels with the settings as ``telemetry``: it reaches every rank, but never changes what a
cell is.
"""

from __future__ import annotations

import copy
from typing import Any

from calorimeter.placement.apply import placement_settings
from calorimeter.plan.config_errors import ConfigError, short

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
}
_BOOL = {"exclusive", "gpus_as_gres"}
_INT = {"timeout_min", "cpus_per_task", "max_requeues", "signal_delay_s", "poll_s"}


def launcher_settings(config: dict[str, Any], resources: dict[str, Any] | None = None) -> dict[str, Any]:
    """The launcher settings of a validated sweep config, overridden by profile resources (module docstring).

    Args:
        config: the sweep config as :func:`calorimeter.plan.config.validate_config` returns it (every default
            filled in).
        resources: the train rule's resources (Snakemake profile), if any.

    Returns:
        ``config["launcher"]`` with the resources applied, plus the sweep's ``telemetry`` block and its
        ``placement`` settings (with the absolute folder of the hosts' thermal profiles).
    """
    out = copy.deepcopy(config["launcher"])
    for res, key in LAUNCHER_RESOURCES.items():
        v = (resources or {}).get(res)
        if v is not None and str(v) != "":
            out[key] = _number(res, v, int) if key in _INT else str(v)
    for res, key in SLURM_RESOURCES.items():
        v = (resources or {}).get(res)
        if v is None or str(v) == "":
            continue
        if key in _BOOL:
            out["slurm"][key] = str(v).lower() in ("1", "true", "yes", "on")
        elif key == "mem_gb":
            out["slurm"][key] = _number(res, v, float)
        else:
            out["slurm"][key] = None if str(v).lower() in ("none", "null") else str(v)
    out["telemetry"] = copy.deepcopy(config["telemetry"])

    out["placement"] = placement_settings(config)
    return out


def _number(resource: str, value: Any, kind: type) -> Any:
    """A profile resource as a finite non-negative int or float, or a ConfigError naming it."""
    import math

    try:
        x = kind(value) if kind is float or isinstance(value, int) else int(str(value).strip())
    except (TypeError, ValueError):
        x = None
    if x is None or isinstance(value, bool) or not math.isfinite(x) or x < 0:
        raise ConfigError(f"resource {resource} of rule train (profile or --set-resources): {short(value)} is not "
                          f"a finite non-negative {'integer' if kind is int else 'number'}")
    return x

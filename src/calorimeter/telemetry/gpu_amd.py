"""AMD GPU reader through Zeus's AMD backend (amdsmi): only what Zeus offers. Untested on hardware."""

from __future__ import annotations

import contextlib
from typing import Any

from calorimeter.plan.json_types import JsonObject
from calorimeter.telemetry.gpu_common import GpuReader, MetricGroup, Unavailable
from calorimeter.telemetry.schema import GPU_METRIC_NAMES

_AMD_READ = ("power_instant_w", "power_driver_avg_w", "gpu_temp_c", "energy_millijoule", "power_limit_w")


def make_amd_reader(zgpu: Any) -> tuple[GpuReader, dict[str, str]]:
    """Build the reader of one AMD GPU.

    Args:
        zgpu: A ``zeus.device.gpu.amd.AMDGPU``.

    Returns:
        The reader and ``metric -> reason`` for the metrics this backend does not offer.
    """

    def energy() -> JsonObject:
        if not zgpu.supports_get_total_energy_consumption():
            why = "Zeus reports the amdsmi energy counter as inaccurate on this GPU"
            return {"energy_millijoule": Unavailable(why)}
        return {"energy_millijoule": int(zgpu.get_total_energy_consumption())}

    groups = [
        MetricGroup(("power_instant_w",), lambda: {"power_instant_w": zgpu.get_instant_power_usage() / 1000.0}),
        MetricGroup(("power_driver_avg_w",), lambda: {"power_driver_avg_w": zgpu.get_average_power_usage() / 1000.0}),
        # Zeus reads the hotspot (junction) temperature on AMD.
        MetricGroup(("gpu_temp_c",), lambda: {"gpu_temp_c": float(zgpu.get_gpu_temperature())}),
        MetricGroup(("energy_millijoule",), energy, slow=True),
        MetricGroup(("power_limit_w",), lambda: {"power_limit_w": zgpu.get_power_management_limit() / 1000.0}),
    ]
    info: JsonObject = {}
    with contextlib.suppress(Exception):  # informational only
        info["name"] = zgpu.get_name()
    unsupported = {n: "not offered by Zeus's AMD backend" for n in GPU_METRIC_NAMES if n not in _AMD_READ}
    return GpuReader(gpu_index=int(zgpu.gpu_index), backend="amd", groups=groups, info=info), unsupported

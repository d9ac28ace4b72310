"""NVIDIA GPU reader: Zeus for power, energy and temperature; NVML (pynvml) directly for the rest."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from calorimeter.plan.json_types import JsonObject
from calorimeter.telemetry.gpu_common import GpuReader, MetricGroup, Unavailable, describe_error
from calorimeter.telemetry.reasons import ACCUMULATED_REASON_FIELDS, accumulated_column

#: ``scopeId`` that asks NVML for the sum over all NVLink links (nvml.h: UINT_MAX = aggregate).
NVLINK_ALL_LINKS = 0xFFFFFFFF


def _field_value(pynvml: Any, fv: Any) -> float | int | Unavailable:
    """Decode one ``nvmlFieldValue_t`` according to its ``valueType``."""
    if fv.nvmlReturn != pynvml.NVML_SUCCESS:
        return Unavailable(describe_error(pynvml.NVMLError(fv.nvmlReturn)))
    vt = fv.valueType
    v = fv.value
    if vt == pynvml.NVML_VALUE_TYPE_DOUBLE:
        return float(v.dVal)
    if vt == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        return int(v.uiVal)
    if vt == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG:
        return int(v.ulVal)
    if vt == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
        return int(v.ullVal)
    if vt == pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return int(v.sllVal)
    if vt == pynvml.NVML_VALUE_TYPE_SIGNED_INT:
        return int(v.siVal)
    if vt == getattr(pynvml, "NVML_VALUE_TYPE_UNSIGNED_SHORT", 6):
        return int(v.usVal)
    return Unavailable(f"unknown NVML value type {vt}")


def _field_specs(pynvml: Any) -> list[tuple[str, Any, float]]:
    """``(column, field id or (field id, scope id), scale)`` of the batched field-value call."""
    return [
        (
            "memory_power_instant_w",
            (pynvml.NVML_FI_DEV_POWER_INSTANT, pynvml.NVML_POWER_SCOPE_MEMORY),
            1e-3,
        ),
        ("hbm_temp_c", pynvml.NVML_FI_DEV_MEMORY_TEMP, 1.0),
        ("pcie_tx_bytes", pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 1.0),
        ("pcie_rx_bytes", pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 1.0),
        ("nvlink_tx_kib", (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVLINK_ALL_LINKS), 1.0),
        ("nvlink_rx_kib", (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, NVLINK_ALL_LINKS), 1.0),
        *((accumulated_column(reason), field, 1.0) for reason, field in ACCUMULATED_REASON_FIELDS.items()),
    ]


def _scaled(v: float | int | Unavailable, scale: float) -> Any:
    if isinstance(v, Unavailable) or scale == 1.0:
        return v
    return v * scale


def make_nvidia_reader(zgpu: Any, pynvml: Any) -> GpuReader:
    """Build the reader of one NVIDIA GPU.

    Args:
        zgpu: A ``zeus.device.gpu.nvidia.NVIDIAGPU`` (has ``.handle`` and ``.gpu_index``).
        pynvml: The ``pynvml`` module (already initialised by Zeus).

    Returns:
        A :class:`GpuReader`; call :meth:`GpuReader.probe` before sampling.
    """
    h = zgpu.handle
    specs = _field_specs(pynvml)
    fast_specs = [s for s in specs if not s[0].startswith(("pcie_", "throttle_"))]
    pcie_specs = [s for s in specs if s[0].startswith("pcie_")]  # ~0.3 ms each on an H100
    # the driver's accumulated throttle time per reason (ns): a counter, interpolated at window edges, so it is read
    # with the other slow counters (every slow_period_s) rather than every sample
    throttle_specs = [s for s in specs if s[0].startswith("throttle_")]

    def field_reader(sel: list[tuple[str, Any, float]]) -> Callable[[], Mapping[str, Any]]:
        ids = [fid for _, fid, _ in sel]

        def read() -> Mapping[str, Any]:
            values = pynvml.nvmlDeviceGetFieldValues(h, ids)
            return {n: _scaled(_field_value(pynvml, fv), k) for (n, _, k), fv in zip(sel, values, strict=True)}

        return read

    def util() -> Mapping[str, Any]:
        u = pynvml.nvmlDeviceGetUtilizationRates(h)
        return {"gpu_util_pct": float(u.gpu), "mem_util_pct": float(u.memory)}

    reasons_fn = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)

    def reasons() -> Mapping[str, Any]:
        nonlocal reasons_fn
        if reasons_fn is not None:
            try:
                return {"clock_event_reasons": int(reasons_fn(h))}
            except pynvml.NVMLError_FunctionNotFound:
                reasons_fn = None  # driver < 535: fall back to the legacy name
        return {"clock_event_reasons": int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h))}

    def energy() -> Mapping[str, Any]:
        if not zgpu.supports_get_total_energy_consumption():
            return {"energy_millijoule": Unavailable("energy counter needs Volta or newer")}
        return {"energy_millijoule": int(zgpu.get_total_energy_consumption())}

    def memory_power_avg() -> Mapping[str, Any]:
        mw = zgpu.get_average_memory_power_usage()
        if mw == 0:  # Zeus: 0 means the GPU does not support it (e.g. A40)
            return {"memory_power_driver_avg_w": Unavailable("average memory power reads 0 (unsupported on this GPU)")}
        return {"memory_power_driver_avg_w": mw / 1000.0}

    groups = [
        MetricGroup(("power_instant_w",), lambda: {"power_instant_w": zgpu.get_instant_power_usage() / 1000.0}),
        MetricGroup(("power_driver_avg_w",),
                    lambda: {"power_driver_avg_w": zgpu.get_average_power_usage() / 1000.0}),
        MetricGroup(("memory_power_driver_avg_w",), memory_power_avg),
        MetricGroup(("gpu_temp_c",), lambda: {"gpu_temp_c": float(zgpu.get_gpu_temperature())}),
        # nvmlDeviceGetTotalEnergyConsumption took ~4 ms per call on an H100 (driver 580): slow group.
        MetricGroup(("energy_millijoule",), energy, slow=True),
        MetricGroup(tuple(name for name, _, _ in fast_specs), field_reader(fast_specs)),
        MetricGroup(tuple(name for name, _, _ in pcie_specs), field_reader(pcie_specs), slow=True),
        MetricGroup(tuple(name for name, _, _ in throttle_specs), field_reader(throttle_specs), slow=True),
        MetricGroup(
            ("sm_clock_mhz",), lambda: {"sm_clock_mhz": float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))}
        ),
        MetricGroup(
            ("mem_clock_mhz",),
            lambda: {"mem_clock_mhz": float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM))},
        ),
        MetricGroup(("gpu_util_pct", "mem_util_pct"), util),
        MetricGroup(("clock_event_reasons",), reasons),
        MetricGroup(("power_limit_w",), lambda: {"power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0}),
    ]
    return GpuReader(gpu_index=int(zgpu.gpu_index), backend="nvidia", groups=groups, info=_nvidia_info(h, pynvml))


def _nvidia_info(h: Any, pynvml: Any) -> JsonObject:
    """Static facts about one GPU; each missing one is left out."""
    calls = {
        "name": lambda: pynvml.nvmlDeviceGetName(h),
        "uuid": lambda: pynvml.nvmlDeviceGetUUID(h),
        "pci_bus_id": lambda: pynvml.nvmlDeviceGetPciInfo(h).busId,
        "max_sm_clock_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
        "max_mem_clock_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM),
        "power_limit_default_w": lambda: pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000.0,
        "temp_slowdown_c": lambda: pynvml.nvmlDeviceGetTemperatureThreshold(
            h, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        ),
        "temp_shutdown_c": lambda: pynvml.nvmlDeviceGetTemperatureThreshold(
            h, pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN
        ),
    }
    info: JsonObject = {}
    for key, fn in calls.items():
        try:
            v = fn()
            info[key] = v.decode() if isinstance(v, bytes) else v
        except Exception as exc:  # noqa: BLE001 - informational only
            info[f"{key}_error"] = describe_error(exc)
    return info

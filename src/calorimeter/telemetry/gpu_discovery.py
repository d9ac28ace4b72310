"""Find the node's GPUs through Zeus and build one reader per GPU (or record why there is none)."""

from __future__ import annotations

import logging

from calorimeter.plan.json_types import JsonObject
from calorimeter.telemetry.gpu_amd import make_amd_reader
from calorimeter.telemetry.gpu_common import GpuReader, describe_error, record_all_unavailable
from calorimeter.telemetry.gpu_nvidia import make_nvidia_reader
from calorimeter.telemetry.metadata import ALL_DEVICES, UnavailableRegistry

log = logging.getLogger(__name__)


def _nvml_reason() -> str | None:
    """The NVML init error text (e.g. 'NVML Shared Library Not Found'), or None if NVML initialises."""
    try:
        import pynvml
    except ImportError as exc:
        return f"pynvml not importable: {exc}"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return describe_error(exc)
    return None


def open_gpu_readers(registry: UnavailableRegistry) -> tuple[list[GpuReader], JsonObject]:
    """Discover the GPUs visible to Zeus, build and probe one reader each.

    The caller decides which GPUs are visible (the sampler clears ``CUDA_VISIBLE_DEVICES`` so
    that it sees the whole node). Without any GPU library every GPU metric is recorded as
    unavailable for device ``"all"`` with the library's own error text.

    Args:
        registry: Where unavailable metrics are recorded.

    Returns:
        The probed readers (possibly empty) and backend facts for the metadata.
    """
    info: JsonObject = {}
    try:
        import zeus
        from zeus.device.gpu import get_gpus

        info["zeus_version"] = getattr(zeus, "__version__", "unknown")
    except Exception as exc:  # noqa: BLE001 - zeus missing or broken: no GPU metrics
        reason = f"zeus not importable: {describe_error(exc)}"
        record_all_unavailable(registry, ALL_DEVICES, reason)
        info["gpu_backend"] = None
        info["gpu_error"] = reason
        return [], info
    try:
        gpus = get_gpus()
    except Exception as exc:  # noqa: BLE001 - ZeusGPUInitError and friends
        nvml = _nvml_reason()
        reason = describe_error(exc) if nvml is None else f"{nvml} ({describe_error(exc)})"
        record_all_unavailable(registry, ALL_DEVICES, reason)
        info["gpu_backend"] = None
        info["gpu_error"] = reason
        return [], info

    readers: list[GpuReader] = []
    backend = type(gpus).__name__
    info["gpu_backend"] = backend
    if backend.startswith("NVIDIA"):
        import pynvml

        try:
            info["driver_version"] = pynvml.nvmlSystemGetDriverVersion()
            info["nvml_version"] = pynvml.nvmlSystemGetNVMLVersion()
        except pynvml.NVMLError as exc:
            info["driver_version_error"] = describe_error(exc)
        for zgpu in gpus.gpus:
            reader = make_nvidia_reader(zgpu, pynvml)
            reader.probe(registry)
            readers.append(reader)
    else:
        for zgpu in gpus.gpus:
            reader, unsupported = make_amd_reader(zgpu)
            reader.probe(registry, unsupported)
            readers.append(reader)
    log.info("telemetry: %d GPU(s) through %s", len(readers), backend)
    return readers, info

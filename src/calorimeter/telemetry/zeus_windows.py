"""Thin wrapper around Zeus ``ZeusMonitor`` measurement windows (energy from the hardware counter)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from calorimeter.telemetry.gpu_common import describe_error


@dataclass(frozen=True)
class ZeusWindow:
    """Result of one Zeus window.

    Attributes:
        name: Window name.
        time_s: Duration measured by Zeus (or by this wrapper when Zeus is unavailable).
        gpu_energy_j: ``gpu index -> J`` (empty when Zeus has no GPU).
        cpu_energy_j: ``cpu index -> J`` from RAPL, or None.
        unavailable_reason: Why there is no energy (None when Zeus measured it).
    """

    name: str
    time_s: float
    gpu_energy_j: dict[int, float]
    cpu_energy_j: dict[int, float] | None
    unavailable_reason: str | None


@dataclass
class ZeusEnergyWindows:
    """Named begin/end windows measured by Zeus's ``ZeusMonitor``, degrading to time-only.

    Args:
        gpu_indices: GPUs to measure (Zeus indices, i.e. relative to ``CUDA_VISIBLE_DEVICES``);
            None = all visible.
        sync_execution_with: Passed to Zeus (``"torch"`` synchronises CUDA at window edges).
    """

    gpu_indices: list[int] | None = None
    sync_execution_with: str = "torch"
    monitor: Any = None
    reason: str | None = None
    _starts: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            from zeus.monitor import ZeusMonitor

            self.monitor = ZeusMonitor(gpu_indices=self.gpu_indices, sync_execution_with=self.sync_execution_with)
            if not self.monitor.gpu_indices:
                self.reason = "Zeus found no GPU (NVML/AMDSMI unavailable)"
        except Exception as exc:  # noqa: BLE001 - any failure: time-only windows
            self.monitor = None
            self.reason = f"ZeusMonitor unavailable: {describe_error(exc)}"

    def begin(self, name: str) -> None:
        """Open window ``name``."""
        self._starts[name] = time.monotonic()
        if self.monitor is not None:
            try:
                self.monitor.begin_window(name)
            except Exception as exc:  # noqa: BLE001 - e.g. CPU-only torch cannot sync
                self.reason = f"ZeusMonitor.begin_window failed: {describe_error(exc)}"
                self.monitor = None

    def end(self, name: str) -> ZeusWindow:
        """Close window ``name`` and return its measurement."""
        start = self._starts.pop(name)
        if self.monitor is not None:
            try:
                m = self.monitor.end_window(name)
                gpu = {int(k): float(v) for k, v in (m.gpu_energy or {}).items()}
                cpu = {int(k): float(v) for k, v in m.cpu_energy.items()} if m.cpu_energy else None
                return ZeusWindow(name, float(m.time), gpu, cpu, None if gpu else self.reason)
            except Exception as exc:  # noqa: BLE001
                self.reason = f"ZeusMonitor.end_window failed: {describe_error(exc)}"
        return ZeusWindow(name, time.monotonic() - start, {}, None, self.reason)

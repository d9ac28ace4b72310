"""Shared machinery of the GPU readers: metric groups probed once, read every sample, never invented."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from calorimeter.plan.json_types import JsonObject
from calorimeter.telemetry.metadata import UnavailableRegistry
from calorimeter.telemetry.schema import GPU_COUNTERS, GPU_METRIC_NAMES

#: counter columns (uint64 in the stream): a negative reading is an NVML error, stored as null
_COUNTER_NAMES = frozenset(c.name for c in GPU_COUNTERS)


@dataclass(frozen=True)
class Unavailable:
    """Marker value: this metric could not be read, for this reason."""

    reason: str


ReadFn = Callable[[], Mapping[str, Any]]

#: Consecutive runtime failures after which a group is no longer polled.
MAX_CONSECUTIVE_FAILURES = 20


@dataclass
class MetricGroup:
    """Metrics produced by one call (e.g. both utilizations come from one NVML call).

    Attributes:
        names: Columns this group fills.
        fn: Returns ``name -> value`` (``Unavailable`` or a missing key = not readable now).
        slow: Expensive call (e.g. the energy counter, ~4 ms on an H100): read only every
            ``slow_every``-th sample (see :meth:`GpuReader.read`).
        failures: Consecutive failed calls.
        disabled: True once the group is no longer polled.
        calls: Number of calls made.
        call_s: Total time spent in the calls.
    """

    names: tuple[str, ...]
    fn: ReadFn
    slow: bool = False
    failures: int = 0
    disabled: bool = False
    calls: int = 0
    call_s: float = 0.0


def describe_error(exc: BaseException) -> str:
    """Error text for the metadata: the message, or the class name when there is none."""
    text = str(exc).strip()
    return text or type(exc).__name__


@dataclass
class GpuReader:
    """Reads one GPU through a list of metric groups.

    Attributes:
        gpu_index: Physical index of the GPU on the node.
        backend: ``"nvidia"`` or ``"amd"``.
        groups: The metric groups, probed by :meth:`probe`.
        info: Static description (name, uuid, ...), stored in the metadata.
    """

    gpu_index: int
    backend: str
    groups: list[MetricGroup]
    info: JsonObject = field(default_factory=dict)

    @property
    def device(self) -> str:
        """Device label used in the metadata, e.g. ``gpu3``."""
        return f"gpu{self.gpu_index}"

    def probe(self, registry: UnavailableRegistry, unsupported: Mapping[str, str] | None = None) -> None:
        """Read every group once; groups that fail completely are disabled and recorded.

        Args:
            registry: Where unavailable metrics are recorded.
            unsupported: Metrics this backend does not offer at all, with the reason.
        """
        for name, reason in (unsupported or {}).items():
            registry.add(name, self.device, reason)
        for group in self.groups:
            values = self._call(group, registry)
            if values is None or all(isinstance(values.get(n), Unavailable) or n not in values for n in group.names):
                group.disabled = True

    def _call(self, group: MetricGroup, registry: UnavailableRegistry) -> Mapping[str, Any] | None:
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                values = group.fn()
        except Exception as exc:  # noqa: BLE001 - any library error means "not readable"
            group.calls += 1
            group.call_s += time.perf_counter() - t0
            group.failures += 1
            for name in group.names:
                registry.add(name, self.device, describe_error(exc))
            if group.failures >= MAX_CONSECUTIVE_FAILURES:
                group.disabled = True
            return None
        group.calls += 1
        group.call_s += time.perf_counter() - t0
        group.failures = 0
        for name in group.names:
            v = values.get(name, Unavailable("not returned by the backend"))
            if name in _COUNTER_NAMES and isinstance(v, int | float) and v < 0:  # cannot be stored as uint64
                v = Unavailable(f"negative reading {v} (NVML error)")
                values = {**values, name: v}
            if isinstance(v, Unavailable):
                registry.add(name, self.device, v.reason)
        return values

    def read(self, registry: UnavailableRegistry, read_slow: bool = True) -> JsonObject:
        """Read every enabled group.

        Args:
            registry: Where newly failing metrics are recorded.
            read_slow: Also read the groups marked ``slow`` in this sample.

        Returns:
            ``column -> value`` for the metrics read now; absent columns are null in the stream.
        """
        row: JsonObject = {}
        for group in self.groups:
            if group.disabled or (group.slow and not read_slow):
                continue
            values = self._call(group, registry)
            if values is None:
                continue
            for name in group.names:
                v = values.get(name)
                if v is not None and not isinstance(v, Unavailable):
                    row[name] = v
        return row

    def call_stats(self) -> dict[str, dict[str, float]]:
        """Per group: number of calls and mean call time in ms (for the metadata)."""
        return {
            "/".join(g.names): {"calls": g.calls, "mean_ms": 1e3 * g.call_s / g.calls if g.calls else float("nan")}
            for g in self.groups
        }


def record_all_unavailable(registry: UnavailableRegistry, device: str, reason: str) -> None:
    """Record every GPU metric as unavailable for ``device`` (e.g. ``"all"``)."""
    for name in GPU_METRIC_NAMES:
        registry.add(name, device, reason)

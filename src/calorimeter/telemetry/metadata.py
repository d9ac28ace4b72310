"""Sampler metadata JSON: what was sampled, with what, and which metrics are unavailable and why."""

from __future__ import annotations

from dataclasses import dataclass, field

#: Device label used when a metric is unavailable for every GPU (e.g. no GPU library at all).
ALL_DEVICES = "all"


@dataclass
class UnavailableRegistry:
    """Records, once per (metric, device), that a metric could not be read and why.

    Attributes:
        entries: ``(metric, device) -> reason``, in insertion order.
    """

    entries: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, metric: str, device: str, reason: str) -> bool:
        """Record a missing metric.

        Args:
            metric: Column or metric name (e.g. ``"hbm_temp_c"``).
            device: ``"gpu<i>"``, a host source, or :data:`ALL_DEVICES`.
            reason: Human-readable cause, e.g. the NVML error string.

        Returns:
            True when this (metric, device) was new.
        """
        key = (metric, device)
        if key in self.entries:
            return False
        self.entries[key] = reason
        return True

    def to_json(self) -> list[dict[str, str]]:
        """List of ``{"metric", "device", "reason"}`` dicts."""
        return [{"metric": m, "device": d, "reason": r} for (m, d), r in self.entries.items()]



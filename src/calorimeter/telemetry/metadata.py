"""Sampler metadata JSON: what was sampled, with what, and which metrics are unavailable and why."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

    def is_unavailable(self, metric: str, device: str) -> bool:
        """True if (metric, device) or (metric, all) was recorded."""
        return (metric, device) in self.entries or (metric, ALL_DEVICES) in self.entries

    def to_json(self) -> list[dict[str, str]]:
        """List of ``{"metric", "device", "reason"}`` dicts."""
        return [{"metric": m, "device": d, "reason": r} for (m, d), r in self.entries.items()]


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write JSON to a temporary file in the same directory, then rename it over ``path``.

    Args:
        path: Destination file.
        obj: JSON-serialisable object.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(obj, fh, indent=2, sort_keys=False, default=str)
            fh.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_metadata(path: str | Path) -> dict[str, Any]:
    """Load a sampler metadata JSON file."""
    return json.loads(Path(path).read_text())

"""The metrics a reproduction is checked on, their tolerance floors, and which figures draw each of them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Metric:
    """A compared metric.

    Attributes:
        column: the runs table's column.
        label: for the reader.
        unit: of the metric.
        relative: compare as a ratio (difference in percent; noise on the log scale) rather than a difference in the
            metric's unit.
        floor: the smallest difference that counts (a fraction when relative, else in ``unit``): a reproduction is
            never called reproduced for a difference beyond it.
    """

    column: str
    label: str
    unit: str
    relative: bool
    floor: float

    def fmt(self, x: float, sign: bool = True) -> str:
        """A difference or tolerance as the reader sees it: ``-3.4%`` or ``-2.1 °C``."""
        if not math.isfinite(x):
            return "n/a"
        s = f"{100 * x:+.1f}%" if self.relative else f"{x:+.1f} {self.unit}"
        return s if sign else s.lstrip("+-")


#: the compared metrics and their documented tolerance floors (docs/artifact.md "Tolerances")
METRICS: tuple[Metric, ...] = (
    Metric("tokens_per_s_per_gpu", "throughput", "tokens/s per GPU", True, 0.03),
    Metric("power_avg_w", "average power", "W", True, 0.03),
    Metric("energy_per_token_j", "energy per token", "J", True, 0.03),
    Metric("temp_avg_c", "average GPU temperature", "°C", False, 3.0),
    Metric("temp_peak_c", "peak GPU temperature", "°C", False, 3.0),
    Metric("power_peak_w", "peak power", "W", True, 0.15),
)
#: which metrics each figure draws; the cells each figure draws come from calorimeter.figures.selection
FIGURE_METRICS: dict[str, tuple[str, ...]] = {
    "throughput": ("tokens_per_s_per_gpu",),
    "fig04_parallelism": ("temp_avg_c", "temp_peak_c", "power_avg_w", "power_peak_w", "energy_per_token_j"),
    "fig08_optimization": ("temp_avg_c", "temp_peak_c", "power_avg_w", "power_peak_w", "energy_per_token_j"),
    "fig13_microbatch": ("temp_avg_c", "temp_peak_c", "power_avg_w", "power_peak_w", "energy_per_token_j"),
    "fig17_temperature": ("temp_avg_c", "temp_peak_c"),
    "scale_compare": ("tokens_per_s_per_gpu", "energy_per_token_j"),
}


def metrics_with_floors(floors: Mapping[str, float] | None = None) -> tuple[Metric, ...]:
    """:data:`METRICS` with some floors replaced (``{column: floor}``); an unknown column is an error."""
    floors = dict(floors or {})
    known = {m.column for m in METRICS}
    bad = sorted(set(floors) - known)
    if bad:
        raise KeyError(f"unknown metric {', '.join(bad)} for a tolerance floor; known: {', '.join(sorted(known))}")
    for k, v in floors.items():
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"tolerance floor of {k}: {v!r} is not a number > 0")
    return tuple(replace(m, floor=float(floors.get(m.column, m.floor))) for m in METRICS)

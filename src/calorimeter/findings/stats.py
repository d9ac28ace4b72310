"""Estimates with 95% intervals for the findings: a mean over units, a difference of two means (Welch), a slope
within groups (fixed effects), and the verdict rule.

Every interval is a Student-t interval. A quantity measured once has no interval (NaN bounds), never a made-up one.
Metrics read by a quantized sensor (integer degrees Celsius for peak temperatures) get the quantization variance
``resolution**2 / 12`` added to their sample variance, so that repeats that read the same integer do not give a
zero-width interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

AGREES, DISAGREES, CANNOT_SAY = "agrees", "disagrees", "cannot say"


@dataclass(frozen=True)
class Estimate:
    """A number with its 95% interval.

    Attributes:
        value: point estimate.
        low: lower bound of the 95% interval (NaN when there is none).
        high: upper bound (NaN when there is none).
        n: units the estimate averages (pairs, cells, points).
        method: how the interval was made, for the reader.
    """

    value: float
    low: float = math.nan
    high: float = math.nan
    n: int = 0
    method: str = ""

    @property
    def has_interval(self) -> bool:
        """Whether both bounds are finite."""
        return math.isfinite(self.low) and math.isfinite(self.high)

    def map(self, f) -> Estimate:  # noqa: ANN001 - a monotone increasing function of floats
        """The estimate through a monotone increasing function (e.g. ``exp`` of a log ratio)."""
        return Estimate(f(self.value), f(self.low) if math.isfinite(self.low) else math.nan,
                        f(self.high) if math.isfinite(self.high) else math.nan, self.n, self.method)


def _finite(values) -> np.ndarray:  # noqa: ANN001 - any sequence of numbers
    a = np.asarray(list(values), dtype=float)
    return a[np.isfinite(a)]


def _t(dof: float) -> float:
    return float(stats.t.ppf(0.975, dof))


def mean_interval(values, resolution: float = 0.0, what: str = "units") -> Estimate:  # noqa: ANN001
    """Mean of ``values`` with its t-interval (NaN bounds with fewer than two values)."""
    a = _finite(values)
    if a.size == 0:
        return Estimate(math.nan, method=f"no {what}")
    m = float(a.mean())
    if a.size < 2:
        return Estimate(m, n=1, method=f"one {what.rstrip('s')}: no interval")
    var = float(a.var(ddof=1)) + resolution**2 / 12
    half = _t(a.size - 1) * math.sqrt(var / a.size)
    return Estimate(m, m - half, m + half, int(a.size), f"t-interval over {a.size} {what}")


def welch_difference(a, b, resolution: float = 0.0) -> Estimate:  # noqa: ANN001
    """mean(a) - mean(b) with the Welch t-interval (NaN bounds unless both sides have two values or more)."""
    x, y = _finite(a), _finite(b)
    if x.size == 0 or y.size == 0:
        return Estimate(math.nan, method="a side has no value")
    d = float(x.mean() - y.mean())
    if x.size < 2 or y.size < 2:
        return Estimate(d, n=1, method=f"repeats {x.size} and {y.size}: no interval")
    vx = (float(x.var(ddof=1)) + resolution**2 / 12) / x.size
    vy = (float(y.var(ddof=1)) + resolution**2 / 12) / y.size
    se = math.sqrt(vx + vy)
    if se == 0.0:  # identical repeats on both sides (and no quantization given): a zero-width interval
        return Estimate(d, d, d, 1, f"repeats {x.size} and {y.size} without spread")
    dof = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    half = _t(dof) * se
    return Estimate(d, d - half, d + half, 1, f"Welch interval, repeats {x.size} and {y.size}")


def within_slope(groups: list[tuple[np.ndarray, np.ndarray]], resolution: float = 0.0) -> Estimate:
    """Slope of y on x with one intercept per group (x and y demeaned within each group), with its t-interval
    on ``N - G - 1`` degrees of freedom. Groups with fewer than two distinct x are ignored."""
    xs, ys, used = [], [], 0
    for x, y in groups:
        x, y = np.asarray(x, float), np.asarray(y, float)
        ok = np.isfinite(x) & np.isfinite(y)
        x, y = x[ok], y[ok]
        if np.unique(x).size < 2:
            continue
        xs.append(x - x.mean())
        ys.append(y - y.mean())
        used += 1
    if not used:
        return Estimate(math.nan, method="no group with two values of the knob")
    x, y = np.concatenate(xs), np.concatenate(ys)
    sxx = float((x * x).sum())
    b = float((x * y).sum() / sxx)
    dof = x.size - used - 1
    if dof < 1:
        return Estimate(b, n=int(x.size), method=f"{x.size} points in {used} group(s): no interval")
    ssr = float(((y - b * x) ** 2).sum()) + dof * resolution**2 / 12
    half = _t(dof) * math.sqrt(ssr / dof / sxx)
    return Estimate(b, b - half, b + half, int(x.size), f"slope within {used} group(s), {x.size} points, "
                    f"t-interval on {dof} dof")


def verdict(est: Estimate | None, sign: int, threshold: float = 0.0, tolerance: float = 0.0) -> tuple[str, str]:
    """(verdict, why) for a claim that ``value`` lies above (``sign`` +1) or below (-1) ``threshold``.

    * agrees: the whole 95% interval lies on the claimed side of the threshold;
    * disagrees: it lies on the other side, or entirely within ``threshold +- tolerance`` (no effect larger
      than what the claim could mean, e.g. the sensor resolution);
    * cannot say: no estimate, no interval, or an interval that straddles the threshold.
    """
    if est is None or not math.isfinite(est.value):
        return CANNOT_SAY, "nothing to compare"
    if not est.has_interval:
        return CANNOT_SAY, f"no 95% interval ({est.method})"
    a, b = (est.low - threshold) * sign, (est.high - threshold) * sign
    lo, hi = min(a, b), max(a, b)  # the interval on the claim's side of the threshold is positive
    if lo > 0:
        return AGREES, "95% interval on the claimed side"
    if hi < 0:
        return DISAGREES, "95% interval on the opposite side"
    if tolerance > 0 and abs(est.low - threshold) <= tolerance and abs(est.high - threshold) <= tolerance:
        return DISAGREES, f"95% interval within +-{tolerance:g} of {threshold:g}: no effect of that size"
    return CANNOT_SAY, "95% interval includes the threshold (more repeats or pairs would narrow it)"


def direction(est: Estimate | None, sign: int, threshold: float = 0.0) -> str:
    """Whether the point estimate alone lies on the claimed side (``agrees``/``disagrees``), ``""`` without one."""
    if est is None or not math.isfinite(est.value) or est.value == threshold:
        return ""
    return AGREES if (est.value - threshold) * sign > 0 else DISAGREES

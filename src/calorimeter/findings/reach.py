"""Which verdicts each finding can reach on the measured noise: the smallest effect each verdict needs.

A finding's interval is a Student-t interval over units (paired repetitions, slopes, repetitions of one
configuration, or machines), so its half width on the effect's scale is ``t(0.975, n - 1) * sd_unit / sqrt(n)``
for ``n`` units. ``sd_unit`` comes from the committed sets: the pooled standard deviation of the finding's metric
over repetitions of one configuration on one machine (cells meeting the finding's preconditions), times the
design's factor (:data:`DESIGNS`); for findings about machines, from the spread between machines. With it, the
verdict rule (:func:`calorimeter.findings.stats.verdict`) says which true effects give each verdict at a point
estimate equal to the effect: *agrees* needs the whole interval beyond the tolerance (and inside a stated size),
*disagrees* the whole interval short of it, *partly* the whole interval between the tolerance and the size.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from calorimeter.findings.stats import Claim

#: how a unit's value is made from repetitions of configurations, and the factor from a repetition's standard
#: deviation to a unit's: ``pair`` a difference of two configurations (sqrt 2, independent repetitions: paired
#: repetitions share a pass, so this is the conservative side), ``slope`` a slope per doubling over three levels one
#: doubling apart (1/2/4: sum of squares 2, so 1/sqrt 2), ``level`` one configuration's repetitions, ``machines``
#: the spread between machines (measured directly)
DESIGNS: dict[str, float] = {"pair": math.sqrt(2.0), "slope": 1.0 / math.sqrt(2.0), "level": 1.0, "machines": 1.0}


@dataclass(frozen=True)
class Scale:
    """The scale an effect's interval is symmetric on: ``to`` maps a value of the effect there, ``back`` returns."""

    name: str
    to: Callable[[float], float]
    back: Callable[[float], float]


SCALES: dict[str, Scale] = {
    "linear": Scale("linear", lambda x: x, lambda z: z),
    "log": Scale("log", math.log, math.exp),
    "logit": Scale("logit", lambda x: math.log(x / (1 - x)), lambda z: 1 / (1 + math.exp(-z))),
    # a ratio shown as a % change: (ratio - 1) x 100, its interval made on the log of the ratio
    "pct_log": Scale("pct_log", lambda x: math.log1p(x / 100.0), lambda z: math.expm1(z) * 100.0),
}


@dataclass(frozen=True)
class Noise:
    """A finding's noise per unit, and what it rests on.

    Attributes:
        sd_unit: standard deviation of one unit's value on the effect's scale (NaN: unknown).
        source: how it was measured, for the reader.
    """

    sd_unit: float
    source: str


def pooled_sd(values: pd.DataFrame, scale: str) -> tuple[float, int, int]:
    """Pooled standard deviation of ``value`` over repetitions within each ``group`` (on ``scale``), its degrees of
    freedom and the number of groups with two repetitions or more."""
    sc = SCALES["log" if scale == "pct_log" else scale]
    v = values.assign(z=[sc.to(x) if _in_domain(x, scale) else math.nan for x in values["value"]]).dropna(subset=["z"])
    ss, dof, k = 0.0, 0, 0
    for _, g in v.groupby("group"):
        if len(g) >= 2:
            ss += float(((g["z"] - g["z"].mean()) ** 2).sum())
            dof += len(g) - 1
            k += 1
    return (math.sqrt(ss / dof) if dof else math.nan), dof, k


def _in_domain(x: float, scale: str) -> bool:
    if not math.isfinite(x):
        return False
    if scale == "log":
        return x > 0
    if scale == "pct_log":
        return x > -100.0
    if scale == "logit":
        return 0 < x < 1
    return True


def half_width(sd_unit: float, n: int) -> float:
    """Half width of the 95% t-interval over ``n`` units of standard deviation ``sd_unit``."""
    return float(stats.t.ppf(0.975, n - 1)) * sd_unit / math.sqrt(n) if n >= 2 else math.inf


@dataclass(frozen=True)
class Reach:
    """The smallest effects (on the effect's own axis) that reach each verdict with ``n`` units.

    Attributes:
        n: units.
        half: half width of the interval on the scale it is made on.
        agrees: effects that agree (text), or why none can.
        disagrees: effects that disagree.
        partly: effects that give *partly* ("" for a claim without a size).
    """

    n: int
    half: float
    agrees: str
    disagrees: str
    partly: str


def reach(claim: Claim, scale: str, sd_unit: float, n: int, fmt: Callable[[float], str]) -> Reach:
    """Which effects reach each verdict of ``claim`` with ``n`` units of noise ``sd_unit`` (on ``scale``), the point
    estimate equal to the effect."""
    h = half_width(sd_unit, n)
    if not math.isfinite(h):
        return Reach(n, h, "noise unknown", "noise unknown", "")
    sc = SCALES[scale]
    s = claim.sign
    edge = sc.to(claim.null + s * claim.tolerance)
    null = sc.to(claim.null) if _in_domain(claim.null, scale) else math.nan
    side = ">" if s > 0 else "<"
    other = "<" if s > 0 else ">"
    if claim.size is None:
        agrees = f"{side} {fmt(sc.back(edge + s * h))}"
    else:
        lo, hi = sorted(claim.size)
        near, far = (lo, hi) if s > 0 else (hi, lo)
        a = sc.to(near) if _in_domain(near, scale) else edge
        a = max(a, edge) if s > 0 else min(a, edge)
        b = sc.to(far) if _in_domain(far, scale) else s * math.inf
        width = (b - a) * s
        if width < 2 * h:
            agrees = f"none: the size's range is narrower than the interval ({fmt(sc.back(a))} to {fmt(sc.back(b))})"
        else:
            agrees = f"{fmt(sc.back(a + s * h))} to {fmt(sc.back(b - s * h))}" if math.isfinite(b) else \
                f"{side} {fmt(sc.back(a + s * h))}"
    dis = edge - s * h
    disagrees = f"{other} {fmt(sc.back(dis))}"
    if math.isfinite(null) and claim.tolerance > 0:
        disagrees += " (no effect is enough)" if (dis - null) * s > 0 else " (only the other direction)"
    partly = ""
    if claim.size is not None:
        lo, hi = sorted(claim.size)
        near, far = (lo, hi) if s > 0 else (hi, lo)
        a = sc.to(near) if _in_domain(near, scale) else edge
        ways = []
        if (a - edge) * s > 2 * h:  # short of the size
            ways.append(f"{fmt(sc.back(edge + s * h))} to {fmt(sc.back(a - s * h))}")
        if math.isfinite(far) and _in_domain(far, scale):  # beyond it
            ways.append(f"{side} {fmt(sc.back(sc.to(far) + s * h))}")
        partly = " or ".join(ways) or "none: the gap between the tolerance and the size is narrower than the interval"
    return Reach(n, h, agrees, disagrees, partly)


def machine_sd(value: float, low: float, high: float, dof: float, scale: str) -> float:
    """The standard deviation between machines behind a t-interval over machines (``dof`` + 1 of them)."""
    if not (math.isfinite(low) and math.isfinite(high) and dof >= 1):
        return math.nan
    sc = SCALES[scale]
    half = (sc.to(high) - sc.to(low)) / 2
    return half * math.sqrt(dof + 1) / float(stats.t.ppf(0.975, dof))


def values_frame(groups: list[tuple[str, np.ndarray]]) -> pd.DataFrame:
    """``group``/``value`` rows from (group, values) pairs (for :func:`pooled_sd`)."""
    rows = [(g, float(v)) for g, vs in groups for v in vs]
    return pd.DataFrame(rows, columns=["group", "value"])


__all__ = ["DESIGNS", "SCALES", "Noise", "Reach", "half_width", "machine_sd", "pooled_sd", "reach", "values_frame"]

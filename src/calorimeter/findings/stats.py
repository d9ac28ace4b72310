"""The comparison core: an effect with its 95% interval, its degrees of freedom and its experimental unit, and the
symmetric verdict rule that the findings, the placement comparison and the reproduction check share.

* :class:`Effect` is a number with its interval, the degrees of freedom of that interval, how many experimental
  units it rests on and what they are (``repetitions`` of a configuration, ``paired repetitions``, ``points``);
  never cells of one host counted as independent hosts.
* Bounded quantities stay in bounds: a share (in [0, 1]) is averaged on the logit scale, a ratio (> 0) on the log
  scale, and the interval is carried back, so it never leaves [0, 1] or (0, inf).
* :func:`mean_interval`, :func:`welch` (difference or ratio of the means of two groups of repetitions),
  :func:`paired` (per repetition index) and :func:`within_slope` make effects; :func:`verdict` judges one against
  a :class:`Claim`.

Every interval is a Student-t interval. A quantity measured once has no interval (NaN bounds, ``dof`` 0), never a
made-up one. Metrics read by a quantized sensor (integer degrees Celsius) get the quantization variance
``resolution**2 / 12`` added to their sample variance, so that repeats that read the same integer do not give a
zero-width interval.

Example (a reproduction check: tokens/s of three reference and three new repetitions, equal within 3%)::

    >>> e = welch([100.0, 100.4, 99.7], [99.0, 99.5, 99.2], ratio=True)
    >>> verdict(e, Claim(sign=0, null=1.0, tolerance=0.03)).verdict
    'agrees'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
from scipy import stats

AGREES, DISAGREES, PARTLY, CANNOT_SAY = "agrees", "disagrees", "partly", "cannot say"
#: every verdict, in the order reports list them
VERDICTS = (AGREES, PARTLY, DISAGREES, CANNOT_SAY)
#: fewest degrees of freedom of an interval that a verdict may rest on
MIN_DOF = 2
#: the scales an effect can be made on: ``linear`` (a mean or difference), ``log`` (a ratio, > 0), ``logit``
#: (a share, in [0, 1])
SCALES = ("linear", "log", "logit")


@dataclass(frozen=True)
class Effect:
    """A number with its 95% interval.

    Attributes:
        value: point estimate (NaN when there is nothing to compare).
        low: lower bound of the 95% interval (NaN when there is none).
        high: upper bound (NaN when there is none).
        n: experimental units the estimate rests on (repetitions, paired repetitions, points).
        method: how the interval was made, for the reader (or why there is none).
        dof: degrees of freedom of the interval (0 without one).
        unit: what one experimental unit is (``repetitions``, ``paired repetitions``, ``points``, ...).
        scale: ``linear``, ``log`` (a ratio) or ``logit`` (a share): where the interval was made.
    """

    value: float
    low: float = math.nan
    high: float = math.nan
    n: int = 0
    method: str = ""
    dof: float = 0.0
    unit: str = ""
    scale: str = "linear"

    @property
    def has_interval(self) -> bool:
        """Whether both bounds are finite."""
        return math.isfinite(self.low) and math.isfinite(self.high)

    def map(self, f: Callable[[float], float], scale: str | None = None) -> Effect:
        """The effect through a monotone increasing function (e.g. ``exp`` of a log ratio); ``scale`` names the
        scale the result is on, where it changes."""
        g = lambda x: f(x) if math.isfinite(x) else math.nan  # noqa: E731
        return replace(self, value=g(self.value), low=g(self.low), high=g(self.high), scale=scale or self.scale)


#: the old name of :class:`Effect`
Estimate = Effect


class Judgement(NamedTuple):
    """A verdict, why, and for *cannot say* what left it undecided (:data:`UNDECIDED`; empty when decided)."""

    verdict: str
    why: str
    undecided: str = ""


#: what leaves a verdict *cannot say*: ``data`` (nothing to compare, or no interval), ``dof`` (too few degrees of
#: freedom), ``direction`` (the interval straddles the edge of the claimed direction), ``size`` (the direction holds,
#: the interval straddles an edge of the stated size), ``regime`` (the stated size cannot occur in the compared
#: cells' regime), ``precondition`` (no cell meets the finding's preconditions: set by the findings, not here)
UNDECIDED = ("data", "dof", "direction", "size", "regime", "precondition")


@dataclass(frozen=True)
class Claim:
    """What a statement says about an effect.

    Attributes:
        sign: +1 "above ``null``", -1 "below ``null``", 0 "equal to ``null`` within ``tolerance``" (a reproduction).
        null: no effect: 0 for a difference or slope, 1 for a ratio, 0.5 for "more than half".
        tolerance: the smallest effect the claim could mean (a sensor step, one clock step): an effect within
            ``null +- tolerance`` is no effect of the claimed kind.
        size: for a claim that states a size, the range of values (on the effect's scale) that is that size, e.g.
            ``(3.0, inf)`` for "more than 3x"; None for a claim about the direction only.
    """

    sign: int
    null: float = 0.0
    tolerance: float = 0.0
    size: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.sign not in (-1, 0, 1):
            raise ValueError(f"Claim.sign must be -1, 0 or +1, not {self.sign!r}")
        if not self.tolerance >= 0:
            raise ValueError(f"Claim.tolerance must be >= 0, not {self.tolerance!r}")
        if self.size is not None and not self.size[0] <= self.size[1]:
            raise ValueError(f"Claim.size must be (low, high) with low <= high, not {self.size!r}")


# ---------------------------------------------------------------------------------------------------------------
# making effects


def _finite(values: Iterable[float]) -> np.ndarray:
    a = np.asarray(list(values), dtype=float)
    return a[np.isfinite(a)]


def _t(dof: float) -> float:
    return float(stats.t.ppf(0.975, dof))


def _forward(scale: str) -> Callable[[np.ndarray], np.ndarray]:
    if scale == "linear":
        return lambda a: a
    if scale == "log":
        return np.log
    if scale == "logit":
        return lambda a: np.log(a / (1.0 - a))
    raise ValueError(f"scale must be one of {SCALES}, not {scale!r}")


def _back(scale: str) -> Callable[[float], float]:
    if scale == "log":
        return math.exp
    if scale == "logit":
        return lambda x: 1.0 / (1.0 + math.exp(-x))
    return lambda x: x


def _in_domain(a: np.ndarray, scale: str) -> str:
    if scale == "log" and (a <= 0).any():
        return "a value <= 0 on a log (ratio) scale"
    if scale == "logit" and ((a <= 0) | (a >= 1)).any():
        return "a share outside (0, 1) on a logit scale"
    return ""


def mean_interval(values: Iterable[float], resolution: float = 0.0, what: str = "repetitions",
                  scale: str = "linear") -> Effect:
    """Mean of ``values`` (``what``: the experimental units they are) with its t-interval on ``n - 1`` degrees of
    freedom; NaN bounds with fewer than two values.

    ``scale="log"`` (values > 0) gives the geometric mean and an interval in (0, inf); ``scale="logit"`` (shares in
    (0, 1)) the mean on the logit scale carried back, with an interval inside (0, 1). ``resolution`` (a quantized
    sensor's step) applies on the linear scale only.
    """
    a = _finite(values)
    if a.size == 0:
        return Effect(math.nan, method=f"no {what}", unit=what, scale=scale)
    bad = _in_domain(a, scale)
    if bad:
        return Effect(math.nan, n=int(a.size), method=bad, unit=what, scale=scale)
    z, back = _forward(scale)(a), _back(scale)
    m = float(z.mean())
    if a.size < 2:
        return Effect(back(m), n=1, method=f"one of the {what}: no interval", unit=what, scale=scale)
    var = float(z.var(ddof=1)) + (resolution**2 / 12 if scale == "linear" else 0.0)
    half = _t(a.size - 1) * math.sqrt(var / a.size)
    on = "" if scale == "linear" else f" on the {scale} scale"
    return Effect(back(m), back(m - half), back(m + half), int(a.size), f"t-interval over {a.size} {what}{on}",
                  float(a.size - 1), what, scale)


def welch(a: Iterable[float], b: Iterable[float], *, ratio: bool = False, resolution: float = 0.0,
          unit: str = "repetitions") -> Effect:
    """mean(a) - mean(b), or with ``ratio`` mean(a) / mean(b), of two groups of repetitions, with Welch's interval
    (Welch-Satterthwaite degrees of freedom).

    The ratio is the ratio of the arithmetic means; its interval is made on the log scale (delta method:
    ``var(log mean) = var / (n mean**2)``), so it stays above 0. Both groups need two values or more for an
    interval; a ratio needs positive means.
    """
    x, y = _finite(a), _finite(b)
    scale = "log" if ratio else "linear"
    if x.size == 0 or y.size == 0:
        return Effect(math.nan, method="a side has no value", unit=unit, scale=scale)
    mx, my = float(x.mean()), float(y.mean())
    if ratio and (mx <= 0 or my <= 0):
        return Effect(math.nan, n=int(x.size + y.size), method="a ratio of means <= 0", unit=unit, scale=scale)
    d = mx / my if ratio else mx - my
    n = int(x.size + y.size)
    if x.size < 2 or y.size < 2:
        return Effect(d, n=n, method=f"{unit} {x.size} and {y.size}: no interval", unit=unit, scale=scale)
    q = 0.0 if ratio else resolution**2 / 12
    vx = (float(x.var(ddof=1)) + q) / x.size / (mx**2 if ratio else 1.0)
    vy = (float(y.var(ddof=1)) + q) / y.size / (my**2 if ratio else 1.0)
    se = math.sqrt(vx + vy)
    what = "ratio of means, log-scale " if ratio else ""
    if se == 0.0:  # identical repeats on both sides (and no quantization given): a zero-width interval
        return Effect(d, d, d, n, f"{what}{unit} {x.size} and {y.size} without spread",
                      float(x.size + y.size - 2), unit, scale)
    dof = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    half = _t(dof) * se
    lo, hi = (d * math.exp(-half), d * math.exp(half)) if ratio else (d - half, d + half)
    return Effect(d, lo, hi, n, f"{what}Welch interval, {unit} {x.size} and {y.size}, {dof:.1f} dof", dof, unit,
                  scale)


def welch_difference(a: Iterable[float], b: Iterable[float], resolution: float = 0.0) -> Effect:
    """mean(a) - mean(b) with Welch's interval (:func:`welch` without ``ratio``)."""
    return welch(a, b, resolution=resolution)


def paired(a: Mapping[int, float], b: Mapping[int, float], *, ratio: bool = False,
           resolution: float = 0.0) -> Effect:
    """Mean of a - b (or, with ``ratio``, the geometric mean of a / b) over the repetition indices both sides have:
    repetitions interleaved in time (repetition k of every configuration in the same pass) are the experimental
    unit, one difference each; t-interval on ``k - 1`` degrees of freedom."""
    common = sorted(set(a) & set(b))
    if ratio:
        vals = [a[k] / b[k] for k in common if a[k] > 0 and b[k] > 0]
        return mean_interval(vals, 0.0, "paired repetitions", scale="log")
    return mean_interval([a[k] - b[k] for k in common], resolution * math.sqrt(2), "paired repetitions")


def within_slope(groups: list[tuple[np.ndarray, np.ndarray]], resolution: float = 0.0,
                 unit: str = "repetitions") -> Effect:
    """Slope of y on x with one intercept per group (x and y demeaned within each group), with its t-interval
    on ``N - G - 1`` degrees of freedom (``N`` points, ``G`` groups). Groups with fewer than two distinct x are
    ignored. ``unit`` names what one point is."""
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
        return Effect(math.nan, method="no group with two values of the knob", unit=unit)
    x, y = np.concatenate(xs), np.concatenate(ys)
    sxx = float((x * x).sum())
    b = float((x * y).sum() / sxx)
    dof = x.size - used - 1
    if dof < 1:
        return Effect(b, n=int(x.size), method=f"{x.size} {unit} in {used} group(s): no interval", unit=unit)
    ssr = float(((y - b * x) ** 2).sum()) + dof * resolution**2 / 12
    half = _t(dof) * math.sqrt(ssr / dof / sxx)
    return Effect(b, b - half, b + half, int(x.size), f"slope within {used} group(s), {x.size} {unit}, "
                  f"t-interval on {dof} dof", float(dof), unit)


# ---------------------------------------------------------------------------------------------------------------
# the verdict rule


def _g(x: float) -> str:
    return f"{x:.3g}"


def _regions(lo: float, hi: float, tol: float, size: tuple[float, float] | None) -> set[str]:
    """The claim's regions an oriented interval ``[lo, hi]`` touches (oriented: the claimed side is positive, the
    no-effect value at 0): ``none`` (at most ``tol``: no effect of the claimed kind, or the opposite one) and, beyond
    ``tol``, ``claimed`` (within the stated size, or anywhere beyond ``tol`` without one), ``short`` (short of the
    stated size) and ``beyond`` (past its upper end)."""
    out = set()
    if lo <= tol:
        out.add("none")
    if size is None:
        if hi > tol:
            out.add("claimed")
        return out
    a, b = max(size[0], tol), size[1]
    if a > tol and lo < a and hi > tol:  # (tol, a)
        out.add("short")
    if b > tol and lo <= b and (hi >= a if a > tol else hi > tol):  # [a, b], or (tol, b] where the size starts at tol
        out.add("claimed")
    if hi > b:  # (b, inf)
        out.add("beyond")
    return out


def verdict(effect: Effect | None, claim: Claim, min_dof: float = MIN_DOF, regime: str = "") -> Judgement:
    """The symmetric, monotonic verdict on ``claim`` (``tol``: its tolerance, ``null``: its no-effect value).

    Directional claims (``sign`` +-1) split the effect's axis into regions: *no effect of the claimed kind* (short of
    ``null + tol`` on the claimed side, or on the other side), the *claimed* region (beyond ``null + tol``; for a
    claim with a size, within that size) and, for a sized claim, *short of* and *beyond* the size (the direction
    holds, the size does not). The verdict says which regions the 95% interval touches:

    * **agrees**: only the claimed region (for a sized claim: the interval lies inside the size);
    * **partly**: only short of (or beyond) the size: the direction holds, the size is excluded;
    * **disagrees**: only the no-effect region: the opposite direction, or no effect as large as the tolerance;
    * **cannot say**: more than one region (``undecided`` says which edge it straddles: ``direction`` or ``size``),
      no effect, no interval, or fewer than ``min_dof`` degrees of freedom.

    A narrower interval touches a subset of the regions, so narrowing never turns a decided verdict into another
    one; mirrored data against the mirrored claim touches the mirrored regions, so it gets the same verdict.

    ``regime``: why the claim's stated size cannot occur in the compared cells (empty when it can): the verdict is
    then *cannot say* (``regime``), and the reason gives what the interval says about the direction alone.

    Equality claims (``sign`` 0, e.g. a reproduction): **agrees** when the interval lies within ``null +- tol``,
    **disagrees** when it lies wholly beyond it on one side, **cannot say** otherwise.
    """
    if effect is None or not math.isfinite(effect.value):
        return Judgement(CANNOT_SAY, f"nothing to compare{f' ({effect.method})' if effect and effect.method else ''}",
                         "data")
    if regime and claim.size is not None and claim.sign != 0:
        d = verdict(effect, replace(claim, size=None), min_dof)
        read = {AGREES: "the direction agrees", DISAGREES: "the direction disagrees"}.get(d.verdict,
                                                                                         "the direction is undecided")
        return Judgement(CANNOT_SAY, f"the stated size cannot occur here ({regime}); on the direction alone: {read} "
                         f"({d.why})", "regime")
    if not effect.has_interval:
        return Judgement(CANNOT_SAY, f"no 95% interval ({effect.method})", "data")
    if not effect.dof >= min_dof:
        more = "machines" if effect.unit == "machines" else "repetitions"
        return Judgement(CANNOT_SAY, f"{effect.dof:.3g} degree(s) of freedom, fewer than {min_dof:g} "
                         f"({effect.n} {effect.unit or 'units'}): more {more} needed", "dof")
    tol, null = claim.tolerance, claim.null
    if claim.sign == 0:
        if null - tol <= effect.low and effect.high <= null + tol:
            return Judgement(AGREES, f"95% interval within {_g(null)} +- {_g(tol)}")
        if effect.low > null + tol or effect.high < null - tol:
            return Judgement(DISAGREES, f"95% interval wholly beyond {_g(null)} +- {_g(tol)}")
        return Judgement(CANNOT_SAY, f"95% interval crosses {_g(null)} +- {_g(tol)} (more repetitions would "
                         "narrow it)", "direction")
    o = lambda x: (x - null) * claim.sign  # noqa: E731 - oriented: the claimed side positive
    lo, hi = sorted((o(effect.low), o(effect.high)))
    size = None if claim.size is None else tuple(sorted((o(claim.size[0]), o(claim.size[1]))))
    touched = _regions(lo, hi, tol, size)  # type: ignore[arg-type]
    side = "above" if claim.sign > 0 else "below"
    edge = f"{_g(null + claim.sign * tol)}" + (f" ({_g(null)} {'+' if claim.sign > 0 else '-'} tolerance "
                                                 f"{_g(tol)})" if tol else "")
    size_txt = "" if claim.size is None else f"the stated size [{_g(min(claim.size))}, {_g(max(claim.size))}]"
    if touched == {"claimed"}:
        return Judgement(AGREES, f"95% interval wholly {side} {edge}" + (f" and inside {size_txt}" if claim.size
                                                                          else ""))
    if touched == {"none"}:
        if hi < -tol:
            return Judgement(DISAGREES, "95% interval wholly on the opposite side, beyond "
                             f"{_g(null - claim.sign * tol)}")
        return Judgement(DISAGREES, f"95% interval excludes any effect {side} {edge}: no effect of the claimed kind")
    if touched and touched <= {"short", "beyond"}:
        where = "short of" if touched == {"short"} else "beyond"
        return Judgement(PARTLY, f"direction agrees (95% interval wholly {side} {edge}) but the interval lies {where} "
                         f"{size_txt}")
    if "none" in touched:
        excl = f"; it excludes {size_txt}, but whether there is an effect at all is undecided" if (
            claim.size is not None and "claimed" not in touched) else ""
        return Judgement(CANNOT_SAY, f"95% interval straddles {edge}{excl} (more repetitions would narrow it)",
                         "direction")
    return Judgement(CANNOT_SAY, f"direction agrees (95% interval wholly {side} {edge}) but the interval straddles an "
                     f"edge of {size_txt} (more repetitions would narrow it)", "size")


def direction(est: Effect | None, sign: int, threshold: float = 0.0) -> str:
    """Whether the point estimate alone lies on the claimed side (``agrees``/``disagrees``), ``""`` without one."""
    if est is None or not math.isfinite(est.value) or est.value == threshold or sign == 0:
        return ""
    return AGREES if (est.value - threshold) * sign > 0 else DISAGREES

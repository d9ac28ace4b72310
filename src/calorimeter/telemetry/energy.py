"""Energy from sampled power and from the hardware energy counter (pure functions).

Both estimators clip to a window ``[begin_s, end_s]`` and interpolate linearly at its edges, so a
window that falls between two samples still gets its share. A window not covered by samples
on both sides gives NaN (never an extrapolated value).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


def _clean(t: npt.ArrayLike, y: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    tt = np.asarray(t, dtype=np.float64)
    yy = np.asarray(y, dtype=np.float64)
    if tt.shape != yy.shape:
        raise ValueError(f"time and value arrays differ in shape: {tt.shape} vs {yy.shape}")
    keep = ~(np.isnan(tt) | np.isnan(yy))
    tt, yy = tt[keep], yy[keep]
    order = np.argsort(tt, kind="stable")
    return tt[order], yy[order]


def integrate(t_s: npt.ArrayLike, y: npt.ArrayLike, begin_s: float | None = None, end_s: float | None = None) -> float:
    """Trapezoid integral of ``y(t)`` over ``[begin_s, end_s]`` with linear interpolation at the edges.

    Args:
        t_s: Sample times in seconds.
        y: Sample values (NaN samples are dropped).
        begin_s: Window start; default the first sample.
        end_s: Window end; default the last sample.

    Returns:
        The integral (unit of ``y`` times seconds), or NaN when the window is not inside the
        sampled range or fewer than 2 valid samples exist.
    """
    return trapezoid_energy_j(t_s, y, begin_s, end_s)


def time_weighted_mean(
    t_s: npt.ArrayLike, y: npt.ArrayLike, begin_s: float | None = None, end_s: float | None = None
) -> float:
    """Time-weighted mean of ``y`` over a window (trapezoid integral / duration); NaN if not covered."""
    tt, _ = _clean(t_s, y)
    if tt.size < 2:
        return float("nan")
    b = tt[0] if begin_s is None else float(begin_s)
    e = tt[-1] if end_s is None else float(end_s)
    if e <= b:
        return float("nan")
    return integrate(t_s, y, b, e) / (e - b)


def _window(tt: np.ndarray, begin_s: float | None, end_s: float | None) -> tuple[float, float] | None:
    """(begin, end) of a window over sorted sample times (default: all of them); None when not covered."""
    if tt.size < 2:
        return None
    b = tt[0] if begin_s is None else float(begin_s)
    e = tt[-1] if end_s is None else float(end_s)
    if e < b:
        raise ValueError(f"window end {e} before begin {b}")
    if b < tt[0] or e > tt[-1]:
        return None
    return float(b), float(e)


def trapezoid_energy_j(
    t_s: npt.ArrayLike, power_w: npt.ArrayLike, begin_s: float | None = None, end_s: float | None = None
) -> float:
    """Energy in joules from the trapezoid rule over sampled power, clipped to a window.

    Args:
        t_s: Sample times in seconds.
        power_w: Power samples in watts (NaN samples are dropped).
        begin_s: Window start; default the first sample.
        end_s: Window end; default the last sample.

    Returns:
        Energy in J, or NaN when the window is not inside the sampled range or has < 2 points.
    """
    tt, pp = _clean(t_s, power_w)
    window = _window(tt, begin_s, end_s)
    if window is None:
        return float("nan")
    b, e = window
    inside = (tt > b) & (tt < e)
    ts = np.concatenate(([b], tt[inside], [e]))
    ps = np.concatenate(([np.interp(b, tt, pp)], pp[inside], [np.interp(e, tt, pp)]))
    return float(np.sum((ps[1:] + ps[:-1]) * np.diff(ts)) / 2.0)


def counter_delta(
    t_s: npt.ArrayLike, counter: npt.ArrayLike, begin_s: float | None = None, end_s: float | None = None
) -> float:
    """Increase of an unwrapped cumulative counter over a window, interpolated at the edges.

    Args:
        t_s: Sample times in seconds.
        counter: Unwrapped cumulative counter (NaN dropped).
        begin_s: Window start; default the first sample.
        end_s: Window end; default the last sample.

    Returns:
        ``C(end) - C(begin)`` in the counter's unit, or NaN when the window is not covered.
    """
    tt, cc = _clean(t_s, counter)
    window = _window(tt, begin_s, end_s)
    if window is None:
        return float("nan")
    b, e = window
    return float(np.interp(e, tt, cc) - np.interp(b, tt, cc))


def counter_energy_j(
    t_s: npt.ArrayLike, energy_mj: npt.ArrayLike, begin_s: float | None = None, end_s: float | None = None
) -> float:
    """Energy in joules from a cumulative energy counter (already unwrapped), clipped to a window.

    Args:
        t_s: Sample times in seconds.
        energy_mj: Unwrapped cumulative counter in millijoules (NaN dropped).
        begin_s: Window start; default the first sample.
        end_s: Window end; default the last sample.

    Returns:
        ``(E(end) - E(begin)) / 1000`` with linear interpolation at the edges, or NaN.
    """
    return counter_delta(t_s, energy_mj, begin_s, end_s) / 1000.0


def relative_difference(reference: float, other: float) -> float:
    """``(other - reference) / reference``; NaN if either is NaN or the reference is 0.

    Args:
        reference: The reference value (the counter energy).
        other: The compared value (the integrated energy).

    Returns:
        The signed relative difference.
    """
    if reference != reference or other != other or reference == 0:
        return float("nan")
    return (other - reference) / reference


@dataclass(frozen=True)
class EnergyCrossCheck:
    """Both energy estimates for one GPU and window.

    Attributes:
        counter_energy_j: From the hardware counter delta.
        integral_energy_j: From trapezoid integration of sampled power.
        rel_diff: ``(integral - counter) / counter``.
    """

    counter_energy_j: float
    integral_energy_j: float
    rel_diff: float


def cross_check_energy(
    t_s: npt.ArrayLike,
    power_w: npt.ArrayLike,
    energy_mj: npt.ArrayLike,
    begin_s: float | None = None,
    end_s: float | None = None,
) -> EnergyCrossCheck:
    """Compute counter and integral energy for one window and their relative difference.

    Args:
        t_s: Sample times in seconds.
        power_w: Power samples in watts.
        energy_mj: Unwrapped cumulative energy counter in mJ.
        begin_s: Window start (default first sample).
        end_s: Window end (default last sample).

    Returns:
        An :class:`EnergyCrossCheck`.
    """
    counter = counter_energy_j(t_s, energy_mj, begin_s, end_s)
    integral = trapezoid_energy_j(t_s, power_w, begin_s, end_s)
    return EnergyCrossCheck(counter, integral, relative_difference(counter, integral))

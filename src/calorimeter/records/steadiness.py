"""When a GPU's temperature is thermally steady over a measured window: one definition for the warm-up that waits for
it (:mod:`calorimeter.train.steady`, :mod:`calorimeter.command.run`) and for the analysis that judges the window
afterwards (:mod:`calorimeter.analysis.window`, the runs table's ``thermally_steady``).

A window is **thermally steady** when, for every GPU, the temperature drift that its least-squares slope implies over
the measured window, ``|slope| x max(measured duration, 30 s)``, is below the temperature sensor's resolution
(:data:`SENSOR_RESOLUTION_C`: NVML reports whole degrees). The slope is fitted over at least :data:`FIT_MIN_S`
seconds: the analysis over the measured window extended back to that length where it is shorter, the warm-up over its
last ``steady_window_s`` seconds against the measured duration it plans.

Why a drift and not a slope threshold: the dies reach their plateau within seconds of load, then fluctuate about one
degree step to step (pipeline stages alternate load) under a node-level drift of a few degrees over half an hour. A
slope fitted over 15 s of whole-degree readings scatters by several °C/min around zero on such a plateau, so "every
GPU's slope at most 1 °C/min" holds by chance a few percent of the time and says nothing about the window measured.
What matters to a measurement is how far the temperature moves while it is measured: less than the sensor can
resolve is as steady as it can be shown to be (docs/findings.md, preconditions; ``bench/steady_criterion.py``).
"""

from __future__ import annotations

import numpy as np

#: NVML reports the die temperature in whole degrees: a drift below one degree cannot be told from none
SENSOR_RESOLUTION_C = 1.0
#: the shortest fit of the slope, s: shorter fits of whole-degree readings scatter too much to mean anything
FIT_MIN_S = 30.0
#: the readings must span at least this share of the fit window (else the slope is NaN: too early, or a gap)
FIT_MIN_SPAN_FRAC = 0.9

#: (time_s, temperature_c) readings of one GPU, oldest first
Readings = list[tuple[float, float]]


def lsq_slope_c_per_min(t: np.ndarray, temp_c: np.ndarray, begin: float, end: float) -> float:
    """Least-squares slope (°C per minute) of the readings inside ``[begin, end]``; NaN unless three readings or more
    span at least :data:`FIT_MIN_SPAN_FRAC` of the window."""
    t = np.asarray(t, dtype=np.float64)
    v = np.asarray(temp_c, dtype=np.float64)
    m = (t >= begin) & (t <= end) & np.isfinite(v) & np.isfinite(t)
    t, v = t[m], v[m]
    if t.size < 3 or not end > begin or t.max() - t.min() < FIT_MIN_SPAN_FRAC * (end - begin):
        return float("nan")
    dt = t - t.mean()
    den = float((dt * dt).sum())
    return float((dt * (v - v.mean())).sum() / den * 60.0) if den > 0 else float("nan")


def slope_c_per_min(readings: Readings, now_s: float, window_s: float) -> float:
    """Slope of the readings of the last ``window_s`` seconds before ``now_s`` (:func:`lsq_slope_c_per_min`)."""
    r = np.asarray(readings, dtype=np.float64).reshape(-1, 2)
    return lsq_slope_c_per_min(r[:, 0], r[:, 1], now_s - window_s, now_s)


def fit_begin(begin_s: float, end_s: float) -> float:
    """Where the analysis fits a measured window ``[begin_s, end_s]`` from: its start, or :data:`FIT_MIN_S` before
    its end where the window is shorter."""
    return min(begin_s, end_s - FIT_MIN_S)


def drift_c(slope_c_per_min: float, duration_s: float) -> float:
    """The temperature change a slope implies over the measured window, °C (absolute; NaN with the slope), the
    window counted at least :data:`FIT_MIN_S` long: a short window of a GPU still heating is a snapshot of a
    transient, not a steady state (a 1.6 s window at 17 °C/min drifts 0.5 °C, yet the die is 8 °C warmer half a
    minute later), so the drift is judged over no less than the span its slope was fitted on."""
    return abs(slope_c_per_min) * max(duration_s, FIT_MIN_S) / 60.0


def is_steady(drift: float) -> bool:
    """Below the sensor's resolution (NaN, a slope that could not be fitted, is not steady)."""
    return bool(drift < SENSOR_RESOLUTION_C)

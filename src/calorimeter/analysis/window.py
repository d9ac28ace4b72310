"""Per-GPU statistics of tidy telemetry over a time window (pure functions, NaN for anything not measured).

Every column is evaluated on its own valid samples: the energy and PCIe counters are read less often than the
gauges, and an NVML error is null in the tidy table. Negative gauge readings (the ``-1`` NVML error value of
older samplers) are treated as missing, never averaged in.

A window is clipped to the samples of the column: a column whose samples cover less than ``MIN_COVERAGE`` of the
window gives NaN. Averages are time-weighted (trapezoid over the window with linear interpolation at its edges),
peaks are maxima of the samples inside the window, energies come from the counter delta and from the trapezoid of
power, link volumes from the (already unwrapped) cumulative byte counters.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from calorimeter.telemetry.energy import counter_delta, trapezoid_energy_j
from calorimeter.telemetry.reasons import CLOCK_EVENT_REASON_BITS, REASON_NAMES

#: a column must cover at least this share of the window to be summarised
MIN_COVERAGE = 0.9

#: gauge columns: (tidy column, output prefix)
GAUGES: tuple[tuple[str, str], ...] = (
    ("gpu_temp_c", "temp"),
    ("hbm_temp_c", "hbm_temp"),
    ("sm_clock_mhz", "sm_clock"),
    ("mem_clock_mhz", "mem_clock"),
    ("gpu_util_pct", "gpu_util"),
    ("memory_power_avg_w", "memory_power"),
)
#: unit suffix of each gauge prefix in output column names
GAUGE_UNITS = {"temp": "c", "hbm_temp": "c", "sm_clock": "mhz", "mem_clock": "mhz", "gpu_util": "pct",
               "memory_power": "w", "power": "w"}
#: cumulative byte counters (unwrapped in the tidy table)
LINK_COUNTERS: tuple[str, ...] = ("nvlink_rx_bytes", "nvlink_tx_bytes", "pcie_rx_bytes", "pcie_tx_bytes")
THROTTLE_COLUMNS: tuple[str, ...] = tuple(f"throttle_{n}" for n in REASON_NAMES)


def valid_series(g: pd.DataFrame, col: str) -> tuple[np.ndarray, np.ndarray]:
    """Sorted (time, value) of the valid samples of one column (NaN, null and negative values dropped)."""
    if col not in g.columns or g.empty:
        return np.empty(0), np.empty(0)
    t = g["time_s"].to_numpy(dtype=np.float64)
    v = pd.to_numeric(g[col], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    keep = ~(np.isnan(t) | np.isnan(v) | (v < 0))
    t, v = t[keep], v[keep]
    order = np.argsort(t, kind="stable")
    return t[order], v[order]


def clip_window(t: np.ndarray, begin: float, end: float) -> tuple[float, float] | None:
    """``[begin, end]`` clipped to the sampled range, or None when the samples cover less than MIN_COVERAGE."""
    if t.size < 2 or not end > begin:
        return None
    b, e = max(begin, float(t[0])), min(end, float(t[-1]))
    if e <= b or (e - b) < MIN_COVERAGE * (end - begin):
        return None
    return b, e


def time_average(t: np.ndarray, v: np.ndarray, begin: float, end: float) -> float:
    """Time-weighted mean (trapezoid / duration) over the clipped window; NaN if not covered."""
    w = clip_window(t, begin, end)
    if w is None:
        return float("nan")
    return trapezoid_energy_j(t, v, *w) / (w[1] - w[0])


def peak(t: np.ndarray, v: np.ndarray, begin: float, end: float, how: str = "max") -> float:
    """Maximum (or minimum) of the samples inside ``[begin, end]``; NaN if none."""
    x = v[(t >= begin) & (t <= end)]
    if not x.size:
        return float("nan")
    return float(x.max() if how == "max" else x.min())


def window_delta(t: np.ndarray, c: np.ndarray, begin: float, end: float) -> tuple[float, float]:
    """(increase of a cumulative counter over the clipped window, covered seconds); NaN if not covered."""
    w = clip_window(t, begin, end)
    if w is None:
        return float("nan"), float("nan")
    return counter_delta(t, c, *w), w[1] - w[0]


def reason_time_fractions(t: np.ndarray, masks: np.ndarray, begin: float, end: float) -> dict[str, float]:
    """Share of the window's time during which each clock-event reason was set.

    Each sample's mask holds until the next sample (sample and hold); the segments are clipped to the window.
    NaN for every reason when no segment overlaps the window.
    """
    out = {f"throttle_{n}": float("nan") for n in REASON_NAMES}
    if t.size < 2:
        return out
    seg_b = np.clip(t[:-1], begin, end)
    seg_e = np.clip(t[1:], begin, end)
    length = seg_e - seg_b
    total = float(length.sum())
    if total <= 0:
        return out
    m = masks[:-1].astype(np.uint64)
    for bit, name in CLOCK_EVENT_REASON_BITS.items():
        on = (m & np.uint64(bit)) != 0
        out[f"throttle_{name}"] = float(length[on].sum() / total)
    return out


def power_column(g: pd.DataFrame) -> str | None:
    """``power_instant_w`` where present, else ``power_avg_w`` (the driver's 1 s average), else None."""
    for col in ("power_instant_w", "power_avg_w"):
        if valid_series(g, col)[0].size >= 2:
            return col
    return None


def gpu_window_stats(g: pd.DataFrame, begin: float, end: float) -> dict[str, float | str | int]:
    """Statistics of one GPU's tidy samples over ``[begin, end]``.

    Returns:
        ``n_samples``, ``power_source``, ``power_avg_w``, ``power_peak_w``, ``<gauge>_avg_<unit>``,
        ``<gauge>_peak_<unit>`` (``sm_clock_min_mhz`` too), ``energy_counter_j`` (counter delta),
        ``energy_trapezoid_j`` (trapezoid of power), ``energy_window_s`` (seconds the energy covers),
        ``energy_rel_diff`` = (trapezoid - counter) / counter over the same span, the link byte totals and
        ``throttle_<reason>`` time fractions.
    """
    row: dict[str, float | str | int] = {"n_samples": int(((g["time_s"] >= begin) & (g["time_s"] <= end)).sum())}
    pcol = power_column(g)
    row["power_source"] = pcol or ""
    tp, p = valid_series(g, pcol) if pcol else (np.empty(0), np.empty(0))
    row["power_avg_w"] = time_average(tp, p, begin, end)
    row["power_peak_w"] = peak(tp, p, begin, end)
    for col, prefix in GAUGES:
        t, v = valid_series(g, col)
        unit = GAUGE_UNITS[prefix]
        row[f"{prefix}_avg_{unit}"] = time_average(t, v, begin, end)
        row[f"{prefix}_peak_{unit}"] = peak(t, v, begin, end)
        if prefix == "sm_clock":
            row["sm_clock_min_mhz"] = peak(t, v, begin, end, "min")
    te, e_mj = valid_series(g, "energy_mj")
    wp = clip_window(tp, begin, end)
    we = clip_window(te, begin, end)
    # both estimates over the span both cover, so that they can be compared
    if wp is not None and we is not None and min(wp[1], we[1]) > max(wp[0], we[0]):
        b, e = max(wp[0], we[0]), min(wp[1], we[1])
    else:
        b, e = wp if wp is not None else (we if we is not None else (float("nan"), float("nan")))
    row["energy_window_s"] = e - b
    row["energy_counter_j"] = counter_delta(te, e_mj, b, e) / 1000.0 if we is not None else float("nan")
    row["energy_trapezoid_j"] = trapezoid_energy_j(tp, p, b, e) if wp is not None else float("nan")
    c, i = row["energy_counter_j"], row["energy_trapezoid_j"]
    row["energy_rel_diff"] = (i - c) / c if c == c and i == i and c != 0 else float("nan")
    for name in LINK_COUNTERS:
        t, v = valid_series(g, name)
        row[name], _ = window_delta(t, v, begin, end)
    tm, masks = valid_series(g, "clock_event_reasons")
    row.update(reason_time_fractions(tm, masks, begin, end))
    return row


def gpu_energy_j(g: pd.DataFrame, begin: float, end: float) -> float:
    """Trapezoid energy of one GPU over a (short) window, e.g. one step; NaN if not covered."""
    pcol = power_column(g)
    if pcol is None:
        return float("nan")
    t, p = valid_series(g, pcol)
    w = clip_window(t, begin, end)
    return trapezoid_energy_j(t, p, *w) if w is not None else float("nan")

"""Cut telemetry by step and phase windows and summarise each (GPU, window)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from calorimeter.telemetry.energy import (
    counter_delta,
    counter_energy_j,
    relative_difference,
    time_weighted_mean,
    trapezoid_energy_j,
)
from calorimeter.telemetry.reasons import reason_fractions

WINDOW_COLUMNS: tuple[str, ...] = ("window", "step", "phase", "begin_s", "end_s")


def step_windows(
    markers: pd.DataFrame, how: Literal["union", "intersection"] = "union", rank: int | None = None
) -> pd.DataFrame:
    """One window per step from the ranks' step markers.

    Args:
        markers: Output of :func:`calorimeter.telemetry.markers.read_step_markers`.
        how: ``"union"``: earliest begin to latest end over ranks; ``"intersection"``: latest
            begin to earliest end.
        rank: Use only this rank's markers.

    Returns:
        Columns :data:`WINDOW_COLUMNS`, sorted by begin time; ``window`` is ``"step<n>"``.
    """
    m = markers if rank is None else markers[markers["rank"] == rank]
    if m.empty:
        return pd.DataFrame(columns=list(WINDOW_COLUMNS))
    g = m.groupby(["step", "phase"], sort=False)
    if how == "union":
        w = g.agg(begin_s=("begin_s", "min"), end_s=("end_s", "max"))
    elif how == "intersection":
        w = g.agg(begin_s=("begin_s", "max"), end_s=("end_s", "min"))
    else:
        raise ValueError(f"how must be 'union' or 'intersection', got {how!r}")
    w = w.reset_index()
    w = w[w["end_s"] > w["begin_s"]]
    w.insert(0, "window", "step" + w["step"].astype(str))
    return w.sort_values("begin_s", kind="stable").reset_index(drop=True)[list(WINDOW_COLUMNS)]


def phase_windows(markers: pd.DataFrame, rank: int | None = None) -> pd.DataFrame:
    """One window per phase: from the first step's begin to the last step's end (gaps included).

    Args:
        markers: Step markers.
        rank: Use only this rank's markers.

    Returns:
        Columns :data:`WINDOW_COLUMNS` (``step`` is the first step of the phase), ``window`` is the phase.
    """
    m = markers if rank is None else markers[markers["rank"] == rank]
    if m.empty:
        return pd.DataFrame(columns=list(WINDOW_COLUMNS))
    w = m.groupby("phase", sort=False).agg(step=("step", "min"), begin_s=("begin_s", "min"), end_s=("end_s", "max"))
    w = w.reset_index()
    w.insert(0, "window", w["phase"])
    return w.sort_values("begin_s", kind="stable").reset_index(drop=True)[list(WINDOW_COLUMNS)]


def assign_windows(t_s: npt.ArrayLike, begin_s: npt.ArrayLike, end_s: npt.ArrayLike) -> np.ndarray:
    """Index of the window ``[begin, end)`` containing each time, -1 where none does.

    Windows must not overlap (step windows of one run do not).

    Args:
        t_s: Sample times.
        begin_s: Window starts.
        end_s: Window ends.

    Returns:
        Integer array, same length as ``t_s``, indexing the windows in their given order.
    """
    t = np.asarray(t_s, dtype=np.float64)
    b = np.asarray(begin_s, dtype=np.float64)
    e = np.asarray(end_s, dtype=np.float64)
    order = np.argsort(b, kind="stable")
    bs, es = b[order], e[order]
    if bs.size > 1 and np.any(bs[1:] < es[:-1]):
        raise ValueError("windows overlap")
    pos = np.searchsorted(bs, t, side="right") - 1
    out = np.full(t.shape, -1, dtype=np.int64)
    ok = pos >= 0
    ok[ok] = t[ok] < es[pos[ok]]
    out[ok] = order[pos[ok]]
    return out


def cut_telemetry(samples: pd.DataFrame, windows: pd.DataFrame, time_col: str = "time_s") -> pd.DataFrame:
    """Label each sample with the window (step, phase) that contains it; drop samples outside all windows.

    Args:
        samples: Telemetry rows with a time column.
        windows: Output of :func:`step_windows` or :func:`phase_windows`.
        time_col: Name of the time column.

    Returns:
        The kept samples with ``window``, ``step`` and ``phase`` columns added.
    """
    idx = assign_windows(samples[time_col].to_numpy(), windows["begin_s"].to_numpy(), windows["end_s"].to_numpy())
    keep = idx >= 0
    out = samples.loc[keep].copy()
    w = windows.reset_index(drop=True)
    for col in ("window", "step", "phase"):
        out[col] = w[col].to_numpy()[idx[keep]]
    return out


def _series(g: pd.DataFrame, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Valid (time, value) pairs of one column, sorted by time (columns may be sampled sparsely)."""
    t = g["time_s"].to_numpy(dtype=np.float64)
    if name not in g.columns:
        return t[:0], t[:0]
    v = pd.to_numeric(g[name], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    keep = ~np.isnan(v)
    return t[keep], v[keep]


def _around(series: tuple[np.ndarray, np.ndarray], begin: float, end: float) -> tuple[np.ndarray, np.ndarray]:
    """The samples inside ``[begin, end]`` plus the nearest one on each side (for edge interpolation)."""
    t, v = series
    lo = max(int(np.searchsorted(t, begin, side="right")) - 1, 0)
    hi = min(int(np.searchsorted(t, end, side="left")) + 1, t.size)
    return t[lo:hi], v[lo:hi]


def _inside(series: tuple[np.ndarray, np.ndarray], begin: float, end: float) -> np.ndarray:
    t, v = series
    return v[(t >= begin) & (t <= end)]


_SUMMARY_COLUMNS = (
    "energy_mj", "clock_event_reasons", "gpu_temp_c", "hbm_temp_c", "sm_clock_mhz",
    "pcie_tx_bytes", "pcie_rx_bytes", "nvlink_tx_bytes", "nvlink_rx_bytes",
)  # fmt: skip


def window_summary(
    tidy: pd.DataFrame,
    windows: pd.DataFrame,
    power_col: str = "power_instant_w",
    fallback_power_col: str = "power_avg_w",
) -> pd.DataFrame:
    """Per (GPU, window): energy both ways, power, temperature, clock, reasons, link bytes.

    Each column is evaluated on its own valid samples (the energy and PCIe counters are read
    less often than power) around ``[begin_s, end_s]``, with linear interpolation at the edges;
    a window the samples do not cover yields NaN, not a guess.

    Args:
        tidy: Output of :func:`calorimeter.telemetry.convert.tidy_gpu_samples` (unwrapped counters).
        windows: Step or phase windows.
        power_col: Power column to integrate.
        fallback_power_col: Used for a GPU whose ``power_col`` is entirely missing.

    Returns:
        One row per (window, gpu_index) with columns ``window, step, phase, gpu_index, begin_s,
        end_s, duration_s, n_samples, counter_energy_j, integral_energy_j, energy_rel_diff,
        power_source, mean_power_w, max_power_w, mean_gpu_temp_c, max_gpu_temp_c, max_hbm_temp_c,
        mean_sm_clock_mhz, min_sm_clock_mhz, pcie_tx_bytes, pcie_rx_bytes, nvlink_tx_bytes,
        nvlink_rx_bytes`` and ``frac_<reason>`` for each clock-event reason.
    """
    rows: list[dict[str, object]] = []
    for gpu, g in tidy.sort_values("time_s", kind="stable").groupby("gpu_index", sort=True):
        pcol = power_col if _series(g, power_col)[0].size else fallback_power_col
        cols = {c: _series(g, c) for c in (*_SUMMARY_COLUMNS, pcol)}
        t_all = g["time_s"].to_numpy(dtype=np.float64)
        for w in windows.itertuples(index=False):
            b, e = float(w.begin_s), float(w.end_s)
            dur = e - b
            tp, p = _around(cols[pcol], b, e)
            te, en = _around(cols["energy_mj"], b, e)
            counter = counter_energy_j(te, en, b, e)
            integral = trapezoid_energy_j(tp, p, b, e)
            masks = [int(x) for x in _inside(cols["clock_event_reasons"], b, e)]
            row: dict[str, object] = {
                "window": w.window,
                "step": w.step,
                "phase": w.phase,
                "gpu_index": int(gpu),
                "begin_s": b,
                "end_s": e,
                "duration_s": dur,
                "n_samples": int(((t_all >= b) & (t_all <= e)).sum()),
                "counter_energy_j": counter,
                "integral_energy_j": integral,
                "energy_rel_diff": relative_difference(counter, integral),
                "power_source": pcol,
                "mean_power_w": integral / dur if dur > 0 else float("nan"),
                "max_power_w": _nanmax(_inside(cols[pcol], b, e)),
                "mean_gpu_temp_c": time_weighted_mean(*_around(cols["gpu_temp_c"], b, e), b, e),
                "max_gpu_temp_c": _nanmax(_inside(cols["gpu_temp_c"], b, e)),
                "max_hbm_temp_c": _nanmax(_inside(cols["hbm_temp_c"], b, e)),
                "mean_sm_clock_mhz": time_weighted_mean(*_around(cols["sm_clock_mhz"], b, e), b, e),
                "min_sm_clock_mhz": _nanmin(_inside(cols["sm_clock_mhz"], b, e)),
            }
            for name in ("pcie_tx_bytes", "pcie_rx_bytes", "nvlink_tx_bytes", "nvlink_rx_bytes"):
                row[name] = counter_delta(*_around(cols[name], b, e), b, e)
            for name, frac in reason_fractions(masks).items():
                row[f"frac_{name}"] = frac
            rows.append(row)
    cols_out = list(rows[0]) if rows else ["window", "step", "phase", "gpu_index"]
    return pd.DataFrame(rows, columns=cols_out)


def _nanmax(x: np.ndarray) -> float:
    x = x[~np.isnan(x)]
    return float(x.max()) if x.size else float("nan")


def _nanmin(x: np.ndarray) -> float:
    x = x[~np.isnan(x)]
    return float(x.min()) if x.size else float("nan")

"""Throttle attribution (beyond the study): (top) share of the measured time each clock-event reason was active, per
cell as the mean over its GPUs; (bottom) how far below its ceiling (the GPU's maximum SM clock) each cell's mean SM
clock ran, the findings' measure of throttling, which separates cells that all sit at the power cap. Bars: the
sampled clock-event bitmask; black ticks: NVML's own accumulated time for the reasons it keeps one for (the
cross-check, independent of the sampling period)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from calorimeter.figures.common import (
    REASON_COLORS,
    FigureResult,
    Tables,
    config_label,
    empty_axes_message,
    hardware_label,
    needs_gpu_telemetry,
    note,
    order_configs,
    status_band,
    unsteady,
)
from calorimeter.findings.preconditions import clock_ceiling_mhz
from calorimeter.telemetry.reasons import REASON_NAMES

NAME = "throttle"
TABLES = ("runs", "gpus")  # gpus: the machine of each cell
TITLE = "Throttle attribution"
needs = needs_gpu_telemetry


def _stack(ax: plt.Axes, x: np.ndarray, frame: pd.DataFrame, reasons: list[str], seen: set[str]) -> None:
    """Side-by-side bars per reason would hide overlaps less, but reasons co-occur: each reason gets its own thin
    bar inside the slot, so shares are read directly (they do not sum to 1)."""
    w = 0.85 / max(len(reasons), 1)
    for j, r in enumerate(reasons):
        v = pd.to_numeric(frame[f"throttle_{r}_frac"], errors="coerce").to_numpy(dtype=float)
        ax.bar(x - 0.425 + (j + 0.5) * w, np.nan_to_num(v), w, color=REASON_COLORS[r],
               label=r if r not in seen else None, gid=f"reason:{r}")
        zero = np.isfinite(v) & (v == 0)  # a measured 0 share: a tick, so that it never looks like a missing one
        if zero.any():
            ax.plot((x - 0.425 + (j + 0.5) * w)[zero], v[zero], "_", color=REASON_COLORS[r], ms=max(3.0, 30 * w),
                    mew=2.0, gid=f"zero:{r}")
        acc = f"throttle_{r}_counter_frac"
        if acc in frame.columns and pd.to_numeric(frame[acc], errors="coerce").notna().any():
            a = pd.to_numeric(frame[acc], errors="coerce").to_numpy(dtype=float)
            ax.plot(x - 0.425 + (j + 0.5) * w, a, "_", color="k", ms=max(4.0, 40 * w), mew=1.5,
                    label="NVML accumulated" if "_acc" not in seen else None, gid=f"accumulated:{r}")
            seen.add("_acc")
        seen.add(r)


def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
    """The figure (left open) and what it drew (``n_points`` = configurations in the top panel)."""
    runs = tables["runs"]
    res = FigureResult(NAME)
    cols = [f"throttle_{r}_frac" for r in REASON_NAMES]
    df = order_configs(runs)
    fig, axes = plt.subplots(2, 1, figsize=(max(8.0, 0.3 * len(df) + 3), 7.0))
    if df.empty:
        for ax in axes:
            empty_axes_message(ax, "no cells")
        note(fig, ["no cells"])
        return fig, FigureResult(NAME, 0, [], ["no cells"])
    have = [c for c in cols if c in df.columns]
    measured = df[have].notna().any(axis=1) if have else pd.Series(False, index=df.index)
    reasons = [r for r in REASON_NAMES if f"throttle_{r}_frac" in df.columns
               and (pd.to_numeric(df[f"throttle_{r}_frac"], errors="coerce").fillna(0) > 0).any()]
    seen: set[str] = set()
    ax = axes[0]
    x = np.arange(len(df))
    if reasons:
        _stack(ax, x, df, reasons, seen)
    else:
        empty_axes_message(ax, "no clock-event reason measured in any cell")
        res.missing.append("clock-event reasons (no telemetry)")
    for i, (st, ok) in enumerate(zip(df["status"], measured, strict=True)):
        if st != "ok":
            status_band(ax, i, st)
        elif not ok:
            ax.text(i, 0.5, "no telemetry", rotation=90, ha="center", va="center", fontsize=6,
                    transform=ax.get_xaxis_transform(), gid="notelemetry")
    res.cells = list(df["cell_id"])
    res.n_points = len(df)
    axes[1].sharex(ax)
    ax.set_xticks(x, [f"{r['model']} {config_label(r, short=True)} {r['optimization_label']} mb{r['micro_batch']}"
                      for _, r in df.iterrows()], rotation=90, fontsize=5)
    ax.set_ylabel("time share (mean over GPUs)", fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_xlim(-0.6, len(df) - 0.4)
    # how far below its ceiling each cell's clock ran (the findings' measure of throttling): separates cells whose
    # reason shares are all 1.0
    ax = axes[1]
    clock = pd.to_numeric(df.get("sm_clock_avg_mhz"), errors="coerce") if "sm_clock_avg_mhz" in df else None
    if clock is not None and clock.notna().any():
        deficit = (clock_ceiling_mhz(df) - clock).to_numpy(dtype=float)
        ax.bar(x, np.nan_to_num(deficit), 0.6, color="#9c755f", gid="deficit")
        warm = unsteady(df).to_numpy()
        if warm.any():
            ax.plot(x[warm], np.nan_to_num(deficit[warm]), "v", color="#777777", ms=4, lw=0, gid="unsteady",
                    label="window not thermally steady")
            ax.legend(fontsize=6, frameon=False, loc="upper left")
        ax.set_ylabel("SM clock below its ceiling\n(MHz, mean over GPUs)", fontsize=8)
        ax.set_xticks(x, [])
        ax.set_xlim(-0.6, len(df) - 0.4)
        ceilings = sorted({f"{h} {c:.0f} MHz" for h, c in zip(df["hardware"], clock_ceiling_mhz(df), strict=True)
                           if c == c})
        ax.set_title(f"ceiling: {', '.join(ceilings)} (the GPU's maximum SM clock)", fontsize=7)
    else:
        empty_axes_message(ax, "no SM clock measured")
        ax.set_xticks([])
    top_shares = [pd.to_numeric(df[f"throttle_{r}_frac"], errors="coerce") for r in reasons]
    if any(v.notna().any() and v.dropna().nunique() == 1 for v in top_shares):
        same = [r for r, v in zip(reasons, top_shares, strict=True) if v.notna().any() and v.dropna().nunique() == 1]
        res.missing.append(f"{', '.join(same)}: the same share in every cell, it cannot separate them (bottom: how "
                           "far below its ceiling each cell's clock ran)")
    if seen:
        acc = [ln for ln in axes[0].get_lines() if str(ln.get_gid()).startswith("accumulated:")]
        # the ticks are as wide as a bar; in the legend that would run over their label
        scale = min(1.0, 8.0 / max([ln.get_markersize() for ln in acc] or [8.0]))
        axes[0].legend(fontsize=6, ncol=5, loc="lower left", bbox_to_anchor=(0, 1.0), frameon=False, markerscale=scale)
    fig.suptitle(f"{TITLE} ({hardware_label(df)})", fontsize=10)
    bottom = note(fig, res.missing)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig, res

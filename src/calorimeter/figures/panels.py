"""The study's three stacked panels (GPU temperature, power, SM clock: average and peak) over cells, with the
efficiency on a second axis; shared by Fig. 4 (parallelism), Fig. 8 (optimization) and Fig. 13 (micro-batch)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from calorimeter.figures.common import (
    AVG_COLOR,
    EFF_COLOR,
    PEAK_COLOR,
    config_key,
    config_label,
    empty_axes_message,
    finite,
    group_bounds,
    group_separators,
    hardware_label,
    note,
    status_band,
    status_missing,
)

#: (avg column, peak column, y label, scale)
PANELS = (
    ("temp_avg_c", "temp_peak_c", "GPU temp. (°C)", 1.0),
    ("power_avg_w", "power_peak_w", "GPU power (W)", 1.0),
    ("sm_clock_avg_mhz", "sm_clock_peak_mhz", "SM clock (GHz)", 1e-3),
)


def draw_panels(df: pd.DataFrame, variant: str | None, efficiency: str, eff_label: str, title: str,
                xlabel: str) -> tuple[plt.Figure, list[str]]:
    """Draw the panels for ``df`` (already selected and ordered).

    Args:
        df: runs rows, in x order.
        variant: column giving the tick label inside a configuration group (``optimization_label``,
            ``micro_batch``), or None: one point per configuration, ticks are configuration labels.
        efficiency: ``efficiency`` or ``efficiency_norm``.
        eff_label: label of the right axis.
        title: figure title.
        xlabel: x-axis title.

    Returns:
        The figure and the list of missing-data notes.
    """
    n = len(df)
    fig, axes = plt.subplots(3, 1, figsize=(max(7.0, 0.32 * n + 3), 7.2), sharex=True)
    missing = status_missing(df) if n else []
    x = np.arange(n)
    if n == 0:
        for ax in axes:
            empty_axes_message(ax, "no cells")
        fig.suptitle(title, fontsize=10)
        return fig, ["no cells selected"]
    ok = (df["status"] == "ok").to_numpy()
    no_tele = ok & ~np.isfinite(finite(df.get("temp_avg_c", pd.Series(np.nan, index=df.index))))
    if no_tele.any():
        missing.append(f"{int(no_tele.sum())} ok cell{'s' if no_tele.sum() > 1 else ''} without GPU telemetry")
    eff = finite(df[efficiency]) if efficiency in df.columns else np.full(n, np.nan)
    if ok.any() and not np.isfinite(eff[ok]).any():
        missing.append("efficiency (no energy measured)")
    # lines are broken between groups (configurations with variants, models without)
    keys = [config_key(r) for _, r in df.iterrows()] if variant is not None else list(df["model"])
    segments = group_bounds(keys)
    for i, (avg, pk, ylab, scale) in enumerate(PANELS):
        ax = axes[i]
        a = finite(df[avg]) * scale if avg in df.columns else np.full(n, np.nan)
        p = finite(df[pk]) * scale if pk in df.columns else np.full(n, np.nan)
        for k, (s0, s1) in enumerate(segments):
            ax.plot(x[s0:s1], a[s0:s1], "o-", color=AVG_COLOR, ms=4, lw=1.2, label="Average" if k == 0 else None,
                    gid="avg")
            ax.plot(x[s0:s1], p[s0:s1], "s-", color=PEAK_COLOR, ms=4, lw=1.2, label="Peak" if k == 0 else None,
                    gid="peak")
        ax.set_ylabel(ylab, fontsize=8)
        ax.tick_params(labelsize=7)
        if not np.isfinite(a).any() and not np.isfinite(p).any():
            ax.text(0.01, 0.9, "no telemetry", transform=ax.transAxes, fontsize=7, color="#555555")
        ax2 = ax.twinx()
        for k, (s0, s1) in enumerate(segments):
            ax2.plot(x[s0:s1], eff[s0:s1], "x-", color=EFF_COLOR, ms=5, lw=1.0, label=eff_label if k == 0 else None,
                     gid="efficiency")
        ax2.set_ylabel(eff_label, fontsize=7, color=EFF_COLOR)
        ax2.tick_params(labelsize=7, colors=EFF_COLOR)
        for j, st in enumerate(df["status"]):
            if st != "ok":
                status_band(ax, j, st, text=(i == 0))
        if i == 0:
            h1, l1 = ax.get_legend_handles_labels()
            h2, l2 = ax2.get_legend_handles_labels()
            ax.legend(h1 + h2, l1 + l2, loc="lower left", bbox_to_anchor=(0, 1.12), ncol=3, fontsize=7,
                      frameon=False)
    # groups: model (solid) and, with variants, configuration (dashed)
    models = list(df["model"])
    mb = group_bounds(models)
    for ax in axes:
        group_separators(ax, [a for a, _ in mb[1:]])
    for a, b in mb:
        axes[0].text((a + b - 1) / 2, 1.02, models[a], transform=axes[0].get_xaxis_transform(), ha="center",
                     fontsize=8, fontweight="bold")
    if variant is None:
        ticks = [config_label(r, short=True) for _, r in df.iterrows()]
    else:
        cfg = [config_key(r) for _, r in df.iterrows()]
        cb = group_bounds(cfg)
        model_starts = {a for a, _ in mb}
        for ax in axes:
            group_separators(ax, [a for a, _ in cb[1:] if a not in model_starts], style="--", lw=0.5)
        for i, (a, b) in enumerate(cb):
            # One-point groups alternate between two rows so that neighbouring labels do not collide.
            y = -0.32 - (0.1 if b - a == 1 and i % 2 else 0.0)
            axes[2].text((a + b - 1) / 2, y, config_label(df.iloc[a], short=True),
                         transform=axes[2].get_xaxis_transform(), ha="center", va="top", fontsize=6)
        ticks = [str(v) for v in df[variant]]
    axes[2].set_xticks(x, ticks, rotation=90, fontsize=6)
    axes[2].set_xlim(-0.6, n - 0.4)
    axes[2].set_xlabel(xlabel, fontsize=8, labelpad=34 if variant else 4)
    fig.suptitle(f"{title} ({hardware_label(df)})", fontsize=10, y=0.995)
    note(fig, missing)
    fig.tight_layout(rect=(0, 0.02, 1, 0.97))
    return fig, missing

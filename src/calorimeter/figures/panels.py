"""The study's three stacked panels (GPU temperature, power, SM clock: average and peak) over cells, with the
efficiency on a second axis; shared by Fig. 4 (parallelism), Fig. 8 (optimization) and Fig. 13 (micro-batch).

One column of panels per model, each with its own x range and its own efficiency axis (models' efficiencies differ
by orders of magnitude); temperature, power and clock share their axis across models (same GPUs, same units).
The figure says at its bottom which parameters its comparisons do not hold fixed, and what it could not draw.
Where a configuration was repeated, its point is the mean over the repetitions with the 95% interval drawn.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from calorimeter.analysis.tables import best_configuration_efficiency
from calorimeter.figures.common import (
    AVG_COLOR,
    COMPARED_PARAMS,
    CUT_NOTE,
    EFF_COLOR,
    MACHINES_JOIN,
    PEAK_COLOR,
    config_key,
    config_label,
    cut_intervals,
    data_limits,
    differs,
    drawn_cells,
    empty_axes_message,
    finite,
    group_bounds,
    group_separators,
    hardware_label,
    interval,
    note,
    rep_points,
    split_machines,
    status_band,
    status_missing,
)

#: (avg column, extreme column, y label, scale): the peak of temperature and power; the clock's minimum (its peak is
#: the boost clock, reached whenever a GPU idles: it tells nothing about a configuration)
PANELS = (
    ("temp_avg_c", "temp_peak_c", "GPU temp. (°C)", 1.0),
    ("power_avg_w", "power_peak_w", "GPU power (W)", 1.0),
    ("sm_clock_avg_mhz", "sm_clock_min_mhz", "SM clock (GHz)", 1e-3),
)
#: how the extreme column of each panel is named in the legend
EXTREME_LABELS = {"temp_peak_c": "Peak", "power_peak_w": "Peak", "sm_clock_min_mhz": "Min. (clock)"}
#: x offset of the efficiency axis's repetition markers (beside the temperature's, not on them)
EFF_REP_OFFSET = 0.18
#: parameters whose change between neighbouring cells breaks a line (besides the figure's compared knobs): a line
#: joins only cells that differ in what the figure compares
LINE_PARAMS = ("recompute", "overlap", "micro_batch", "global_batch", "seq_len", "precision", "hardware",
               "world_size", "placement", "kind", "machine")
#: the narrowest temperature axis (degrees C): the sensor reads whole degrees
MIN_TEMP_AXIS_C = 6.0
#: inches per x point, and per model column for its axes' labels
POINT_IN, COLUMN_IN = 0.3, 1.1


def _series(df: pd.DataFrame, col: str, scale: float = 1.0) -> np.ndarray:
    return finite(df[col]) * scale if col in df.columns else np.full(len(df), np.nan)


def unmatched(df: pd.DataFrame, knobs: tuple[str, ...]) -> list[str]:
    """Notes on comparisons the cells cannot make: for each compared knob, how many configurations were measured
    at one of its values only (``no configuration ...`` when none was measured at two)."""
    out = []
    ok = df[df["status"] == "ok"]
    for k in knobs:
        if k not in ok.columns or ok.empty:
            continue
        name = COMPARED_PARAMS.get(k, k)
        rest = tuple(p for p in knobs if p != k)
        keys = pd.Series([(config_key(r), *(str(r.get(p)) for p in rest)) for _, r in ok.iterrows()], index=ok.index)
        n_vals = ok[k].astype(str).groupby(keys).nunique()
        if (n_vals > 1).sum() == 0:
            out.append(f"no configuration measured at two {name} values: no {name} comparison")
        elif (n_vals == 1).any():
            out.append(f"{int((n_vals == 1).sum())} of {len(n_vals)} configurations at one {name} value only")
    return out


def normalized_efficiency(df: pd.DataFrame) -> pd.DataFrame:
    """``efficiency_norm`` (and its interval and repetitions) of the drawn rows: the efficiency over the best drawn
    configuration's mean of the same model (:func:`~calorimeter.analysis.tables.best_configuration_efficiency` over
    the drawn rows: 1 = the best configuration drawn, never a cell left out or one repetition), the runs table's
    ``efficiency_norm`` where the figure draws the sweep's best configuration."""
    out = df.copy()
    eff = finite(out["efficiency"]) if "efficiency" in out.columns else np.full(len(out), np.nan)
    ref = best_configuration_efficiency(out)
    out["efficiency_norm"] = eff / ref.to_numpy()
    for c in ("_ci95_low", "_ci95_high"):
        if f"efficiency{c}" in out.columns:
            out[f"efficiency_norm{c}"] = finite(out[f"efficiency{c}"]) / ref.to_numpy()
    if "efficiency_reps" in out.columns:
        out["efficiency_norm_reps"] = [[v / r for v in reps] if isinstance(reps, list) and r == r else reps
                                       for reps, r in zip(out["efficiency_reps"], ref, strict=True)]
        out["efficiency_norm_n"] = out.get("efficiency_n")
    return out


def line_segments(d: pd.DataFrame, group: list, knobs: tuple[str, ...]) -> list[tuple[int, int]]:
    """(start, end) of the runs of rows a line may join: same ``group`` key, and equal in every
    :data:`LINE_PARAMS` the figure does not compare (machines: sharing one)."""
    def same(a: pd.Series, b: pd.Series) -> bool:
        for p in LINE_PARAMS:
            if p in knobs or p not in d.columns:
                continue
            va, vb = a[p], b[p]
            if p == "machine":
                if isinstance(va, str) and isinstance(vb, str) and \
                        not set(va.split(MACHINES_JOIN)) & set(vb.split(MACHINES_JOIN)):
                    return False
            elif str(va) != str(vb):
                return False
        return True

    out: list[tuple[int, int]] = []
    for i in range(len(d)):
        if out and group[i] == group[i - 1] and same(d.iloc[i], d.iloc[i - 1]):
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


def draw_panels(df: pd.DataFrame, variant: str | None, efficiency: str, eff_label: str, title: str,
                xlabel: str, knobs: tuple[str, ...] = ()) -> tuple[plt.Figure, list[str], list[str]]:
    """Draw the panels for ``df`` (already selected and ordered).

    Args:
        df: runs rows, in x order (grouped by model).
        variant: column giving the tick label inside a configuration group (``optimization_label``,
            ``micro_batch``), or None: one point per configuration, ticks are configuration labels.
        efficiency: ``efficiency`` or ``efficiency_norm``.
        eff_label: label of the right axis.
        title: figure title.
        xlabel: x-axis title.
        knobs: the parameters the figure compares (besides the layout); any other parameter that varies among
            a model's cells is named at the bottom of the figure.

    Returns:
        The figure, the list of missing-data notes and the "differs" notes (what the cells do not hold fixed).
    """
    if efficiency == "efficiency_norm" and len(df):
        df = normalized_efficiency(df)
    n = len(df)
    if n == 0:
        fig, axes = plt.subplots(3, 1, figsize=(7.0, 6.0))
        for ax in axes:
            empty_axes_message(ax, "no cells")
        fig.suptitle(title, fontsize=10)
        note(fig, ["no cells selected"])
        return fig, ["no cells selected"], []
    models = list(dict.fromkeys(df["model"]))
    counts = [int((df["model"] == m).sum()) for m in models]
    width = max(7.0, POINT_IN * n + COLUMN_IN * len(models) + 1.2)
    fig = plt.figure(figsize=(width, 7.8), layout="constrained")
    gs = fig.add_gridspec(4, len(models), height_ratios=[0.12, 1, 1, 1], width_ratios=[max(c, 2) for c in counts])
    legend_ax = fig.add_subplot(gs[0, :])
    legend_ax.axis("off")
    axes: list[list[plt.Axes]] = [[], [], []]
    for c in range(len(models)):
        for r in range(3):
            axes[r].append(fig.add_subplot(gs[r + 1, c], sharex=axes[0][c] if r else None,
                                           sharey=axes[r][0] if c else None))
            if r < 2:
                axes[r][c].tick_params(labelbottom=False)
            if c:
                axes[r][c].tick_params(labelleft=False)
    missing = status_missing(df)
    ok_all = (df["status"] == "ok").to_numpy()
    no_tele = ok_all & ~np.isfinite(_series(df, "temp_avg_c"))
    if no_tele.any():
        missing.append(f"{int(no_tele.sum())} ok cell{'s' if no_tele.sum() > 1 else ''} without GPU telemetry")
    missing += unmatched(df, knobs)
    if variant is None:  # one configuration of a model: nothing to compare, said rather than left silent
        one = [m for m in dict.fromkeys(df["model"]) if (df["model"] == m).sum() == 1]
        missing += [f"{m}: one configuration only, no comparison" for m in one]
    eff_all = _series(df, efficiency)
    if ok_all.any() and not np.isfinite(eff_all[ok_all]).any():
        missing.append("efficiency (no energy measured)")
    missing += split_machines(df)
    warm = finite(df["unsteady_n"]) if "unsteady_n" in df.columns else np.zeros(n)
    if np.nansum(warm) > 0:
        n_cells = len(drawn_cells(df[df["status"] == "ok"]))
        missing.append(f"{int(np.nansum(warm))} of {n_cells} drawn cells' measured window not thermally steady (grey "
                       "rings): their temperature, power and clock are of a window still moving")
    handles: dict[str, object] = {}
    drawn: list[list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]] = [[], [], []]  # (avg, peak, avg yerr)
    reps_drawn: list[list[np.ndarray]] = [[], [], []]  # repetitions drawn as points
    cut = False
    for c, model in enumerate(models):
        d = df[df["model"] == model]
        m = len(d)
        x = np.arange(m)
        keys = [config_key(r) for _, r in d.iterrows()] if variant is not None else [model] * m
        segments = line_segments(d, keys, knobs)
        warm_d = (finite(d["unsteady_n"]) > 0) if "unsteady_n" in d.columns else np.zeros(m, dtype=bool)
        eff = _series(d, efficiency)
        for r, (avg, pk, ylab, scale) in enumerate(PANELS):
            ax = axes[r][c]
            ax.set_gid(f"panel:{avg}:{model}")
            a, p = _series(d, avg, scale), _series(d, pk, scale)
            err = interval(d, avg, scale)
            drawn[r].append((a, p, err))
            if err is not None:  # repetitions: the average's 95% interval
                ax.errorbar(x, a, yerr=err, fmt="none", ecolor=AVG_COLOR, capsize=2, lw=0.8, gid="avg_ci95")
            for metric, color, marker in ((avg, AVG_COLOR, "o"), (pk, PEAK_COLOR, "s")):  # 2-3 repetitions: points
                rx, ry = rep_points(d, metric, scale)
                if rx.size:
                    ax.plot(rx, ry, marker, mfc="none", mec=color, ms=3, mew=0.7, lw=0, gid=f"reps:{metric}")
                    reps_drawn[r].append(ry)
            for s0, s1 in segments:  # lines are broken between configurations and wherever another knob changes
                (la,) = ax.plot(x[s0:s1], a[s0:s1], "o-", color=AVG_COLOR, ms=4, lw=1.2, gid="avg")
                (lp,) = ax.plot(x[s0:s1], p[s0:s1], "s-" if "peak" in pk else "v-", color=PEAK_COLOR, ms=4,
                                lw=1.2, gid="peak" if "peak" in pk else "min")
            handles.setdefault("Average", la)
            handles.setdefault(EXTREME_LABELS[pk], lp)
            if warm_d.any():
                (lw_,) = ax.plot(x[warm_d], a[warm_d], "o", ms=9, mfc="none", mec="#999999", mew=1.2, lw=0,
                                 gid="unsteady")
                handles.setdefault("window not steady", lw_)
            if c == 0:
                ax.set_ylabel(ylab, fontsize=8)
            ax.tick_params(labelsize=7)
            if not np.isfinite(a).any() and not np.isfinite(p).any():
                ax.text(0.02, 0.9, "no telemetry", transform=ax.transAxes, fontsize=6, color="#555555",
                        gid="notelemetry")
            ax2 = ax.twinx()
            ax2.set_gid(f"efficiency:{avg}:{model}")
            eff_err = interval(d, efficiency)
            if eff_err is not None:
                ax2.errorbar(x, eff, yerr=eff_err, fmt="none", ecolor=EFF_COLOR, capsize=2, lw=0.8, gid="eff_ci95")
            ex, ey = rep_points(d, efficiency)
            if ex.size:  # beside the temperature's repetition markers, not inside them
                ax2.plot(ex + EFF_REP_OFFSET, ey, "x", color=EFF_COLOR, ms=3, mew=0.6, lw=0, alpha=0.6,
                         gid=f"reps:{efficiency}")
            for s0, s1 in segments:
                (le,) = ax2.plot(x[s0:s1], eff[s0:s1], "x--", color=EFF_COLOR, ms=5, lw=1.0, gid="efficiency")
            handles.setdefault(eff_label, le)
            ax2.tick_params(labelsize=6, colors=EFF_COLOR)
            if np.isfinite(eff).any():
                lims = data_limits([eff, ey, np.zeros(1)], [(eff, eff_err)], floor=0.0, margin=0.1)
                ax2.set_ylim(*(lims if lims is not None and lims[1] > 0 else (0.0, 1.0)))
                cut |= cut_intervals(ax2.get_ylim(), [eff], [eff_err])
            else:  # no energy: no efficiency scale (a -0.04..0.04 axis would read as a measured zero)
                ax2.set_yticks([])
            if c == len(models) - 1 and r == 1:  # once, on the middle row: the three rows share its meaning
                ax2.set_ylabel(eff_label + (" (own axis per model)" if len(models) > 1 else ""), fontsize=7,
                               color=EFF_COLOR)
            for j, st in enumerate(d["status"]):
                if st != "ok":
                    status_band(ax, j, st, text=(r == 0))
            if variant is not None:
                cb = group_bounds(keys)
                group_separators(ax, [s for s, _ in cb[1:]], style="--", lw=0.5)
        axes[0][c].set_title(model, fontsize=8, fontweight="bold")
        bottom_ax = axes[2][c]
        if variant is None:
            ticks = [config_label(row, short=True) for _, row in d.iterrows()]
        else:
            ticks = [str(v) for v in d[variant]]
            cb = group_bounds(keys)
            sec = axes[0][c].secondary_xaxis("top")
            sec.set_xticks([(s + e - 1) / 2 for s, e in cb], [config_label(d.iloc[s], short=True) for s, _ in cb],
                           rotation=90, fontsize=6)
            sec.tick_params(length=0, pad=2)
        bottom_ax.set_xticks(x, ticks, rotation=90, fontsize=6)
        bottom_ax.set_xlabel(xlabel, fontsize=7)
        bottom_ax.set_xlim(-0.6, max(m, 2) - 0.4)
    for r, (avg, _pk, _lab, _scale) in enumerate(PANELS):  # axes fit the points; long intervals are cut
        points = [v for a, p, _ in drawn[r] for v in (a, p)] + reps_drawn[r]
        lims = data_limits(points, [(a, e) for a, _, e in drawn[r]], floor=0.0 if "power" in avg else None)
        if lims is not None and avg.endswith("_c") and lims[1] - lims[0] < MIN_TEMP_AXIS_C:
            mid = (lims[0] + lims[1]) / 2  # whole-degree sensor steps must not look like a trend
            lims = (mid - MIN_TEMP_AXIS_C / 2, mid + MIN_TEMP_AXIS_C / 2)
        if lims is not None:
            axes[r][0].set_ylim(*lims)  # shared by the row's models
            cut |= cut_intervals(lims, [a for a, _, _ in drawn[r]], [e for _, _, e in drawn[r]])
        else:  # nothing measured in this row: no scale (negative temperatures, clocks, powers are not data)
            axes[r][0].set_yticks([])
    if cut:
        missing.append(CUT_NOTE)
    fig.suptitle(f"{title} ({hardware_label(df)})", fontsize=10)
    legend_ax.legend(list(handles.values()), list(handles.keys()), loc="center", ncol=min(len(handles), 6), fontsize=7,
                     frameon=False)
    diff = differs(df, knobs)
    bottom = note(fig, missing, diff)
    fig.get_layout_engine().set(rect=(0, bottom, 1, 1 - bottom))
    return fig, missing, diff

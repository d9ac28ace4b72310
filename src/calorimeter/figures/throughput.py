"""First figure: throughput (tokens/s per GPU) and MFU per parallel configuration, grouped by model."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from calorimeter.figures.common import (
    CUT_NOTE,
    LAYOUT_KNOBS,
    STATUS_COLORS,
    FigureResult,
    Tables,
    collapse_repeats,
    config_label,
    cut_intervals,
    data_limits,
    differs,
    drawn_cells,
    interval,
    note,
    order_configs,
    rep_points,
    split_machines,
)

NAME = "throughput"
TABLES = ("runs", "configs", "gpus")  # gpus: the machine of each cell
TITLE = "Throughput per configuration"


def cell_label(row: pd.Series) -> str:
    """x tick label derived from the cell's parameters (never from a lookup table): the layout as every figure names
    it (:func:`config_label`: ``+SP``, LoRA, placement), the ZeRO stage, the optimization, micro-batch and GPUs."""
    parts = [config_label(row), f"Z{row['zero_stage']}"]
    if row["optimization_label"] != "base":
        parts.append(row["optimization_label"])
    parts.append(f"mb{row['micro_batch']}")
    parts.append(f"x{row['world_size']}")
    return " ".join(parts)


def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
    """Bar chart of tokens/s per GPU (top) and MFU or TFLOP/s per GPU (bottom), one bar per cell (left open), and
    what it drew. Repetitions of a configuration are one bar: their mean, with the 95% interval as an error bar.

    Cells that did not produce a measurement (pruned, oom, failed, not run) are drawn as shaded bands labelled with
    their status, never dropped.
    """
    runs = collapse_repeats(tables)
    df = order_configs(runs).reset_index(drop=True)  # the order of Fig. 4 (FSDP first, then deeper pipelines)
    have_mfu = df["mfu_full"].notna().any()
    lower_key, lower_label = ("mfu_full", "MFU, full attention (%)") if have_mfu else ("tflops_per_gpu",
                                                                                       "TFLOP/s per GPU")
    x = np.arange(len(df))
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(6.0, 0.55 * len(df) + 2), 6.0), sharex=True)
    tps = df["tokens_per_s_per_gpu"].astype(float)
    low = df[lower_key].astype(float) * (100 if have_mfu else 1)
    err1, err2 = interval(df, "tokens_per_s_per_gpu"), interval(df, lower_key, 100 if have_mfu else 1)
    several = "n_repeats" in df.columns and (pd.to_numeric(df["n_repeats"], errors="coerce") > 1).any()
    ax1.bar(x, tps.fillna(0), color="#4e79a7", yerr=err1, capsize=3, error_kw={"gid": "ci95"},
            label="mean of the repetitions" if several else "measured")
    ax2.bar(x, low.fillna(0), color="#f28e2b", yerr=err2, capsize=3, error_kw={"gid": "ci95"})
    reps = [rep_points(df, "tokens_per_s_per_gpu"), rep_points(df, lower_key, 100 if have_mfu else 1)]
    for ax, (rx, ry) in zip((ax1, ax2), reps, strict=True):  # 2-3 repetitions: their values, not a t-interval
        if rx.size:
            ax.plot(rx, ry, "o", mfc="none", mec="k", ms=3, mew=0.7, lw=0, gid="reps",
                    label="each repetition" if ax is ax1 else None)
    legend = several or err1 is not None
    if legend:  # in the figure's corner, above the model names
        fig.legend(*ax1.get_legend_handles_labels(), fontsize=6, frameon=False, loc="upper right", ncol=3)
    cut = False
    for ax, v, e, room, (_, ry) in ((ax1, tps, err1, 0.4, reps[0]), (ax2, low, err2, 0.08, reps[1])):
        lims = data_limits([np.append(v.to_numpy(dtype=float), 0.0), ry], [(v.to_numpy(dtype=float), e)], floor=0.0,
                           margin=room)  # from zero; long intervals are cut
        if lims is not None:
            ax.set_ylim(*lims)
            cut |= cut_intervals(lims, [v.to_numpy(dtype=float)], [e])
    for ax in (ax1, ax2):
        for i, row in df.iterrows():
            if row["status"] != "ok":
                ax.axvspan(i - 0.45, i + 0.45, color=STATUS_COLORS.get(row["status"], "#d3d3d3"), alpha=0.5)
                if ax is ax1:
                    ax.text(i, 0, row["status"].upper(), rotation=90, ha="center", va="bottom", fontsize=7)
    for i, v in enumerate(tps):  # beside the error bar, not on it
        if np.isfinite(v):
            ax1.text(i + 0.22, v, f" {v:,.0f}", ha="center", va="bottom", fontsize=6, rotation=90)
    unit = "rank" if (df["hardware"] == "cpu").all() else "GPU"
    ax1.set_ylabel(f"tokens/s per {unit}")
    ax2.set_ylabel(lower_label.replace("GPU", unit))
    # Model groups separated by lines, model name above.
    bounds = [0] + [i for i in range(1, len(df)) if df.loc[i, "model"] != df.loc[i - 1, "model"]] + [len(df)]
    bounds = bounds if len(df) else [0]  # no training cell (a collectives sweep): no model groups
    for a in bounds[1:-1]:
        for ax in (ax1, ax2):
            ax.axvline(a - 0.5, color="k", lw=0.8)
    top = ax1.secondary_xaxis("top")  # model names: laid out as tick labels, rotated when groups are narrow
    narrow = min(b - a for a, b in zip(bounds[:-1], bounds[1:], strict=True)) < 3 if len(df) else False
    top.set_xticks([(a + b - 1) / 2 for a, b in zip(bounds[:-1], bounds[1:], strict=True)],
                   [df.loc[a, "model"] for a in bounds[:-1]], fontsize=8, rotation=90 if narrow else 0)
    top.tick_params(length=0)
    ax2.set_xticks(x, [cell_label(r) for _, r in df.iterrows()], rotation=90, fontsize=7)
    ax2.set_xlabel("parallel configuration")
    hw = ", ".join(sorted({f"{h} x{w}" for h, w in zip(df["hardware"], df["world_size"], strict=True)}))
    fig.suptitle(f"{TITLE} ({hw})", fontsize=10)
    if not have_mfu:
        ax2.text(0.99, 0.95, "MFU n/a: no dense peak for this hardware", transform=ax2.transAxes, ha="right",
                 va="top", fontsize=7)
    missing = ([CUT_NOTE] if cut else []) + split_machines(df)
    diff = [d for d in differs(df, LAYOUT_KNOBS) if " machine: " in d]  # the labels say every other knob
    bottom = note(fig, missing, diff)
    fig.tight_layout(rect=(0, bottom, 1, 0.97 if legend else 1))
    return fig, FigureResult(NAME, len(df), drawn_cells(df), missing, diff)

"""Fig. 15, per-pipeline-stage kernel breakdown: for each configuration one stacked bar per traced rank (one per
pipeline stage), in stage order, micro-batch 1 (top) vs. 4 (bottom)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from calorimeter.figures.common import (
    CATEGORY_COLORS,
    CATEGORY_LABELS,
    FigureResult,
    Tables,
    config_label,
    differs,
    empty_axes_message,
    hardware_label,
    note,
    order_configs,
    prefer,
    status_band,
)
from calorimeter.telemetry.kernels import CATEGORIES

NAME = "fig15_stages"
TABLES = ("runs", "kernels")


def select(runs: pd.DataFrame, micro_batches: tuple[int, ...] = (1, 4)) -> pd.DataFrame:
    """Cells of the given micro-batches, one optimization per configuration (``act`` where present)."""
    df = prefer(runs, "optimization_label", ["act", "cc+act", "base", "cc"])
    return order_configs(df[df["micro_batch"].isin(micro_batches)])


def draw(tables: Tables, micro_batches: tuple[int, ...] = (1, 4),
         model: str | None = None) -> tuple[plt.Figure, FigureResult]:
    """The figure (left open) and what it drew; ``model`` restricts to one model (the study: GPT-3 175B)."""
    runs, kernels = tables["runs"], tables["kernels"]
    src = runs if model is None else runs[runs["model"] == model]
    df = select(src, micro_batches)
    res = FigureResult(NAME)
    n_bars = {mb: 0 for mb in micro_batches}
    layout = {}
    for mb in micro_batches:
        rows = []
        for _, r in df[df["micro_batch"] == mb].iterrows():
            k = kernels[kernels["cell_id"] == r["cell_id"]] if not kernels.empty else pd.DataFrame()
            stages = sorted(pd.to_numeric(k["stage"], errors="coerce").dropna().astype(int).unique()) \
                if not k.empty else []
            rows.append((r, k, stages))
            n_bars[mb] += max(len(stages), 1) + 1
        layout[mb] = rows
    width = max(7.0, 0.16 * max(n_bars.values(), default=1) + 3)
    fig, axes = plt.subplots(len(micro_batches), 1, figsize=(width + 1.6, 3.0 * len(micro_batches) + 0.8),
                             squeeze=False, sharey=True)  # the rows are compared: one kernel-time scale
    seen: set[str] = set()
    for ax, mb in zip(axes[:, 0], micro_batches, strict=True):
        ax.set_title(f"micro-batch {mb}", fontsize=8, loc="left")
        if not layout[mb]:
            empty_axes_message(ax, f"no cells with micro-batch {mb} in this sweep")
            res.missing.append(f"micro-batch {mb} cells")
            continue
        x = 0
        ticks, tick_labels = [], []
        group_x, group_labels = [], []
        for r, k, stages in layout[mb]:
            res.cells.append(r["cell_id"])
            start = x
            if r["status"] != "ok":
                status_band(ax, x, r["status"])
                x += 2
            elif not stages:
                ax.text(x, 0.02, "no trace", rotation=90, ha="center", va="bottom", fontsize=6,
                        transform=ax.get_xaxis_transform(), gid="notrace")
                res.missing.append(f"kernel trace of {r['cell_id']}")
                x += 2
            else:
                for s in stages:
                    ks = k[pd.to_numeric(k["stage"], errors="coerce") == s]
                    sums = ks.groupby("category")["sum_s"].sum() / max(ks["rank"].nunique(), 1)
                    bottom = 0.0
                    for c in CATEGORIES:
                        v = float(sums.get(c, 0.0))
                        if v > 0:
                            ax.bar(x, v, 0.85, bottom=bottom, color=CATEGORY_COLORS[c],
                                   label=CATEGORY_LABELS[c] if c not in seen else None, gid=f"bar:{c}")
                            seen.add(c)
                            bottom += v
                    ticks.append(x)
                    tick_labels.append(str(s))
                    res.n_points += 1
                    x += 1
                x += max(0, 3 - len(stages)) + 1  # narrow groups keep room for their label
            ax.axvline(x - 1 if x - 1 > start else x, color="k", lw=0.6)
            multi = df["model"].nunique() > 1
            group_x.append((start + x - 2) / 2)
            group_labels.append((f"{r['model']} " if multi else "") + config_label(r, short=True))
        # configuration labels: tick labels of a top axis, rotated, so that narrow groups never collide
        top = ax.secondary_xaxis("top")
        top.set_xticks(group_x, group_labels, rotation=90, fontsize=6)
        top.tick_params(length=0, pad=1)
        ax.set_xticks(ticks, tick_labels, fontsize=5 if len(ticks) > 40 else 6)
        ax.set_xlim(-1, max(x - 1, 1))
        ax.set_ylabel("kernel time (s, shared)", fontsize=8)
        ax.tick_params(labelleft=True)
    axes[-1, 0].set_xlabel("pipeline stage", fontsize=8)
    if seen:
        axes[0, 0].legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    only = f"{df['model'].iloc[0]}, " if len(df) and df["model"].nunique() == 1 else ""
    fig.suptitle(f"Fig. 15: kernel time per pipeline stage ({only}{hardware_label(df)})", fontsize=10)
    res.differs = differs(df, ("micro_batch",))
    bottom = note(fig, res.missing, res.differs)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig, res

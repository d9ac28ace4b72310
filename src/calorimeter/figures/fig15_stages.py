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
    is_cpu,
    needs_kernel_traces,
    note,
    order_configs,
    prefer,
    status_band,
)
from calorimeter.telemetry.kernels import CATEGORIES

NAME = "fig15_stages"
TABLES = ("runs", "kernels")
TITLE = "Fig. 15: kernel time per pipeline stage"


def needs(tables: Tables) -> str:
    """Why the sweep cannot draw the figure: no kernel traces, or no cell at the micro-batches it compares."""
    why = needs_kernel_traces(tables)
    runs = tables["runs"]
    ok = runs[runs["status"] == "ok"]
    if why or ok.empty or ok["micro_batch"].isin((1, 4)).any():
        return why
    have = "/".join(map(str, sorted(set(ok["micro_batch"].astype(int)))))
    return f"needs cells at micro-batch 1 or 4 (the study's comparison): this sweep has micro-batch {have} only"


def select(runs: pd.DataFrame, micro_batches: tuple[int, ...] = (1, 4)) -> pd.DataFrame:
    """Cells of the given micro-batches, one optimization per configuration (``act`` where present)."""
    df = prefer(runs, "optimization_label", ["act", "cc+act", "base", "cc"])
    return order_configs(df[df["micro_batch"].isin(micro_batches)])


def _draw_stages(ax: plt.Axes, rows: list, res: FigureResult, seen: set[str]) -> None:
    """One panel: per configuration one stacked bar per pipeline stage (stage order), configurations separated."""
    x = 0
    ticks, tick_labels = [], []
    group_x, group_labels = [], []
    for r, k, stages in rows:
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
        group_x.append((start + x - 2) / 2)
        group_labels.append(config_label(r, short=True))
    # configuration labels: tick labels of a top axis, rotated, so that narrow groups never collide
    top = ax.secondary_xaxis("top")
    top.set_xticks(group_x, group_labels, rotation=90, fontsize=6)
    top.tick_params(length=0, pad=1)
    ax.set_xticks(ticks, tick_labels, fontsize=5 if len(ticks) > 40 else 6)
    ax.set_xlim(-1, max(x - 1, 1))


def draw(tables: Tables, micro_batches: tuple[int, ...] = (1, 4),
         model: str | None = None) -> tuple[plt.Figure, FigureResult]:
    """The figure (left open) and what it drew; ``model`` restricts to one model (the study: GPT-3 175B).

    One column per model, each with its own kernel-time axis (models' step times differ by an order of magnitude),
    shared by the micro-batch rows it compares."""
    runs, kernels = tables["runs"], tables["kernels"]
    src = runs if model is None else runs[runs["model"] == model]
    df = select(src, micro_batches)
    res = FigureResult(NAME)
    models = list(dict.fromkeys(df["model"])) or ["-"]
    layout: dict[tuple[int, str], list] = {}
    n_bars = dict.fromkeys(models, 0)
    for m in models:
        for mb in micro_batches:
            rows = []
            for _, r in df[(df["micro_batch"] == mb) & (df["model"] == m)].iterrows():
                k = kernels[kernels["cell_id"] == r["cell_id"]] if not kernels.empty else pd.DataFrame()
                stages = sorted(pd.to_numeric(k["stage"], errors="coerce").dropna().astype(int).unique()) \
                    if not k.empty else []
                rows.append((r, k, stages))
            layout[(mb, m)] = rows
            n_bars[m] = max(n_bars[m], sum(max(len(st), 1) + 1 for _, _, st in rows))
    width = max(7.0, 0.16 * sum(n_bars.values()) + 3 + 1.2 * (len(models) - 1))
    fig, axes = plt.subplots(len(micro_batches), len(models), figsize=(width + 1.6, 3.0 * len(micro_batches) + 0.8),
                             squeeze=False, sharey="col",  # a model's rows are compared: one kernel-time scale
                             gridspec_kw={"width_ratios": [max(n_bars[m], 4) for m in models]})
    seen: set[str] = set()
    for i, mb in enumerate(micro_batches):
        if not any(layout[(mb, m)] for m in models):
            res.missing.append(f"micro-batch {mb} cells")
        for j, m in enumerate(models):
            ax = axes[i, j]
            ax.set_title(f"micro-batch {mb}" if j == 0 else "", fontsize=8, loc="left")
            if i == 0 and len(models) > 1:
                ax.set_title(m, fontsize=8, fontweight="bold")
            if not layout[(mb, m)]:
                empty_axes_message(ax, f"no micro-batch {mb} cells" + ("" if len(models) > 1 else " in this sweep"))
                ax.set_xticks([])  # no data: no meaningless 0-1 stage axis
                ax.tick_params(left=False, labelleft=False)  # nor the shared kernel-time ticks under the message
                continue
            _draw_stages(ax, layout[(mb, m)], res, seen)
            ax.tick_params(labelleft=True)
        what = "CPU op time" if is_cpu(kernels) else "kernel time"
        axes[i, 0].set_ylabel(f"{what} (s" + (", own axis per model)" if len(models) > 1 else ")"), fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel("pipeline stage", fontsize=8)
    handles, names = [], []
    for ax in axes.ravel():  # every category drawn in any panel
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in names:
                handles.append(h)
                names.append(lab)
    if handles:
        axes[0, -1].legend(handles, names, fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    what = ", ".join(p for p in (df["model"].iloc[0] if len(df) and df["model"].nunique() == 1 else "",
                                  hardware_label(df)) if p)
    fig.suptitle(f"{TITLE} ({what})" if what else TITLE, fontsize=10)
    res.differs = differs(df, ("micro_batch",))
    bottom = note(fig, res.missing, res.differs)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig, res

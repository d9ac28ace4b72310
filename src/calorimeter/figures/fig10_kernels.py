"""Fig. 10, kernel-time breakdown: per parallel configuration and overlap setting two stacked bars, without and
with activation recomputation (base / act with overlap off, cc / cc+act with it on), of the kernel time per category
of the profiled step, averaged over the traced ranks (one per pipeline stage). Summed kernel time counts overlapping
kernels fully (as the study); a black tick marks the wall time the kernels occupy (interval union), so the overlap
the sums double count is visible."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from calorimeter.figures.common import (
    CATEGORY_COLORS,
    CATEGORY_LABELS,
    FigureResult,
    Tables,
    config_key,
    config_label,
    differs,
    empty_axes_message,
    group_separators,
    hardware_label,
    is_cpu,
    needs_kernel_traces,
    note,
    order_configs,
    smallest,
    status_band,
)
from calorimeter.telemetry.kernels import CATEGORIES

NAME = "fig10_kernels"
TABLES = ("runs", "kernels")
TITLE = "Fig. 10: kernel-time breakdown, without vs. with recomputation"
needs = needs_kernel_traces
#: the two bars of a pair: without and with recomputation, named by the overlap setting (the study's labels)
PAIRS = {False: ("base", "act"), True: ("cc", "cc+act")}


def select(runs: pd.DataFrame) -> pd.DataFrame:
    """Every optimization variant, smallest micro-batch: pairs without/with recomputation per overlap setting."""
    df = runs[runs["optimization_label"].isin([v for p in PAIRS.values() for v in p])]
    return order_configs(smallest(df, "micro_batch"))


def per_stage_breakdown(kernels: pd.DataFrame, cell_id: str) -> tuple[dict[str, float], float, int]:
    """(mean over traced ranks of summed time per category, mean union busy time, number of traced ranks)."""
    k = kernels[kernels["cell_id"] == cell_id] if not kernels.empty and "cell_id" in kernels else pd.DataFrame()
    if k.empty:
        return {}, float("nan"), 0
    n = k["rank"].nunique()
    sums = k.groupby("category")["sum_s"].sum() / n
    busy = float(k.drop_duplicates("rank")["busy_s"].mean()) if "busy_s" in k else float("nan")
    return {c: float(sums.get(c, 0.0)) for c in CATEGORIES}, busy, n


def mean_breakdown(kernels: pd.DataFrame, cell_ids: list[str]) -> tuple[dict[str, float], float, int, list[float]]:
    """:func:`per_stage_breakdown` averaged over repetitions (the cells of one configuration that have a trace):
    (sums, busy, traced ranks of the first, each averaged repetition's total summed time)."""
    parts = [per_stage_breakdown(kernels, c) for c in cell_ids]
    parts = [p for p in parts if p[2]]
    if not parts:
        return {}, float("nan"), 0, []
    sums = {c: float(np.mean([p[0][c] for p in parts])) for c in CATEGORIES}
    busy = float(np.nanmean([p[1] for p in parts])) if any(p[1] == p[1] for p in parts) else float("nan")
    return sums, busy, parts[0][2], [float(sum(p[0].values())) for p in parts]


def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
    """The figure (left open) and what it drew: one panel per model with its own time axis (models' step times
    differ by an order of magnitude); each bar the mean over the configuration's ok repetitions."""
    kernels = tables["kernels"]
    df = select(tables["runs"])
    configs = list(dict.fromkeys((config_key(r), bool(r["overlap"])) for _, r in df.iterrows()))
    if not configs:
        fig, ax = plt.subplots(figsize=(7.0, 5.2))
        empty_axes_message(ax, "no cells with and without recomputation")
        fig.suptitle(TITLE, fontsize=10)
        note(fig, ["no configuration has a base/act or cc/cc+act cell: nothing to compare"])
        return fig, FigureResult(NAME, 0, [], ["no cells to compare"])
    models = list(dict.fromkeys(k[0][0] for k in configs))
    per_model = {m: [k for k in configs if k[0][0] == m] for m in models}
    n = 2 * len(configs)
    fig, axs = plt.subplots(1, len(models), figsize=(max(7.0, 0.38 * n + 2.2 * len(models) + 1), 5.2), squeeze=False,
                            gridspec_kw={"width_ratios": [max(len(per_model[m]), 1) for m in models]})
    missing: list[str] = []
    res = FigureResult(NAME, 0)
    keys = pd.Series([(config_key(r), bool(r["overlap"])) for _, r in df.iterrows()], index=df.index)
    by_cfg = {k: df.loc[idx] for k, idx in df.groupby(keys, sort=False).groups.items()}
    seen_cats: set[str] = set()
    unpaired = 0
    for ax, model in zip(axs[0], models, strict=True):
        mine = per_model[model]
        labels = []
        for i, key in enumerate(mine):
            g = by_cfg[key]
            variants = PAIRS[key[1]]
            unpaired += int(g["optimization_label"].nunique() < 2)
            for j, var in enumerate(variants):
                x = 2 * i + j
                labels.append(var)
                rows = g[g["optimization_label"] == var]
                if rows.empty:
                    ax.text(x, 0.02, "not in sweep", rotation=90, ha="center", va="bottom", fontsize=6,
                            transform=ax.get_xaxis_transform(), gid="absent")
                    continue
                ok = rows[rows["status"] == "ok"]
                res.cells.extend(rows["cell_id"])
                if ok.empty:
                    status_band(ax, x, rows["status"].iloc[0])
                    continue
                sums, busy, n_ranks, totals = mean_breakdown(kernels, list(ok["cell_id"]))
                n_reps = len(totals)
                if not n_ranks:
                    ax.text(x, 0.02, "no trace", rotation=90, ha="center", va="bottom", fontsize=6,
                            transform=ax.get_xaxis_transform(), gid="notrace")
                    missing.append(f"kernel trace of {ok['cell_id'].iloc[0]}")
                    continue
                if n_reps < len(ok):
                    missing.append(f"{len(ok) - n_reps} repetition(s) of {ok['cell_id'].iloc[0]} without a trace")
                bottom = 0.0
                for c in CATEGORIES:
                    if sums[c] > 0:
                        ax.bar(x, sums[c], 0.8, bottom=bottom, color=CATEGORY_COLORS[c],
                               label=CATEGORY_LABELS[c] if c not in seen_cats else None, gid=f"bar:{c}")
                        seen_cats.add(c)
                        bottom += sums[c]
                if n_reps > 1:  # the repetitions' totals (the bar is their mean), then their count above all
                    ax.plot(np.full(n_reps, x + 0.25), totals, "o", mfc="none", mec="k", ms=3, mew=0.6, lw=0,
                            label="each repetition (total)" if "reps" not in seen_cats else None, gid="reps")
                    seen_cats.add("reps")
                    ax.text(x, max([bottom, *totals, busy if busy == busy else 0.0]) * 1.02, f"n={n_reps}",
                            ha="center", va="bottom", fontsize=5, gid="nreps")
                res.n_points += 1
                if busy == busy:
                    ax.hlines(busy, x - 0.4, x + 0.4, color="k", lw=2,
                              label="wall (union)" if "wall" not in seen_cats else None, gid="busy")
                    seen_cats.add("wall")
        group_separators(ax, [2 * i for i in range(1, len(mine))], style="--", lw=0.5)
        ax.set_title(model, fontsize=8, fontweight="bold")
        cfg = ax.secondary_xaxis(-0.16)
        cfg.set_xticks([2 * i + 0.5 for i in range(len(mine))],
                       [config_label(by_cfg[key].iloc[0], short=True) for key in mine], fontsize=6, rotation=90)
        cfg.tick_params(length=0)
        cfg.spines["bottom"].set_visible(False)
        ax.set_xticks(np.arange(2 * len(mine)), labels, rotation=90, fontsize=6)
        ax.set_xlim(-0.6, 2 * len(mine) - 0.4)
        ax.tick_params(axis="y", labelsize=7)
    what = "CPU op time" if is_cpu(kernels) else "kernel time"
    axs[0][0].set_ylabel(f"{what} per stage (s" + (", own axis per model)" if len(models) > 1 else ")"), fontsize=8)
    handles, names = [], []
    for ax in axs[0]:  # every category drawn in any panel
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in names:
                handles.append(h)
                names.append(lab)
    if handles:
        fig.legend(handles, names, fontsize=6, ncol=6, loc="upper left", bbox_to_anchor=(0.01, 0.95), frameon=False)
    if unpaired:
        missing.insert(0, f"{unpaired} of {len(configs)} configuration(s) measured without or with recomputation "
                          "only (\"not in sweep\")")
    fig.suptitle(f"{TITLE} ({hardware_label(df)})", fontsize=10)
    res.missing, res.differs = missing, differs(df, ("recompute", "overlap"))
    bottom = note(fig, missing, res.differs)
    fig.tight_layout(rect=(0, bottom, 1, 0.9))
    return fig, res

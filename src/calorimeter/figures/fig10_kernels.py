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
    group_bounds,
    group_separators,
    hardware_label,
    note,
    order_configs,
    smallest,
    status_band,
)
from calorimeter.telemetry.kernels import CATEGORIES

NAME = "fig10_kernels"
TABLES = ("runs", "kernels")
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


def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
    """The figure (left open) and what it drew."""
    kernels = tables["kernels"]
    df = select(tables["runs"])
    configs = list(dict.fromkeys((config_key(r), bool(r["overlap"])) for _, r in df.iterrows()))
    n = 2 * len(configs)
    fig, ax = plt.subplots(figsize=(max(7.0, 0.38 * n + 3), 5.2))
    missing: list[str] = []
    res = FigureResult(NAME, 0)
    if not configs:
        empty_axes_message(ax, "no cells with and without recomputation")
        fig.suptitle("Fig. 10: kernel-time breakdown, without vs. with recomputation", fontsize=10)
        note(fig, ["no configuration has a base/act or cc/cc+act cell: nothing to compare"])
        return fig, FigureResult(NAME, 0, [], ["no cells to compare"])
    keys = pd.Series([(config_key(r), bool(r["overlap"])) for _, r in df.iterrows()], index=df.index)
    by_cfg = {k: df.loc[idx] for k, idx in df.groupby(keys, sort=False).groups.items()}
    seen_cats: set[str] = set()
    labels, models = [], []
    unpaired = 0
    for i, key in enumerate(configs):
        g = by_cfg[key]
        variants = PAIRS[key[1]]
        unpaired += int(g["optimization_label"].nunique() < 2)
        for j, var in enumerate(variants):
            x = 2 * i + j
            labels.append(var)
            models.append(key[0][0])
            row = g[g["optimization_label"] == var]
            if row.empty:
                ax.text(x, 0.02, "not in sweep", rotation=90, ha="center", va="bottom", fontsize=6,
                        transform=ax.get_xaxis_transform(), gid="absent")
                continue
            r = row.iloc[0]
            res.cells.append(r["cell_id"])
            if r["status"] != "ok":
                status_band(ax, x, r["status"])
                continue
            sums, busy, n_ranks = per_stage_breakdown(kernels, r["cell_id"])
            if not n_ranks:
                ax.text(x, 0.02, "no trace", rotation=90, ha="center", va="bottom", fontsize=6,
                        transform=ax.get_xaxis_transform(), gid="notrace")
                missing.append(f"kernel trace of {r['cell_id']}")
                continue
            bottom = 0.0
            for c in CATEGORIES:
                if sums[c] > 0:
                    ax.bar(x, sums[c], 0.8, bottom=bottom, color=CATEGORY_COLORS[c],
                           label=CATEGORY_LABELS[c] if c not in seen_cats else None, gid=f"bar:{c}")
                    seen_cats.add(c)
                    bottom += sums[c]
            res.n_points += 1
            if busy == busy:
                ax.hlines(busy, x - 0.4, x + 0.4, color="k", lw=2,
                          label="wall (union)" if "wall" not in seen_cats else None, gid="busy")
                seen_cats.add("wall")
    if unpaired:
        missing.insert(0, f"{unpaired} of {len(configs)} configuration(s) measured without or with recomputation "
                          "only (\"not in sweep\")")
    group_separators(ax, [2 * i for i in range(1, len(configs))], style="--", lw=0.5)
    mb = group_bounds(models)
    group_separators(ax, [a for a, _ in mb[1:]])
    top = ax.secondary_xaxis("top")
    top.set_xticks([(a + b - 1) / 2 for a, b in mb], [models[a] for a, _ in mb], fontsize=8, fontweight="bold")
    top.tick_params(length=0)
    cfg = ax.secondary_xaxis(-0.16)
    cfg.set_xticks([2 * i + 0.5 for i in range(len(configs))],
                   [config_label(by_cfg[key].iloc[0], short=True) for key in configs], fontsize=6, rotation=90)
    cfg.tick_params(length=0)
    cfg.spines["bottom"].set_visible(False)
    ax.set_xticks(np.arange(n), labels, rotation=90, fontsize=6)
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_ylabel("kernel time per stage (s)", fontsize=8)
    cfg.set_xlabel("configuration", fontsize=8)
    if seen_cats:
        ax.legend(fontsize=6, ncol=6, loc="lower left", bbox_to_anchor=(0, 1.08), frameon=False)
    fig.suptitle(f"Fig. 10: kernel-time breakdown, without vs. with recomputation ({hardware_label(df)})",
                 fontsize=10)
    res.missing = missing
    bottom = note(fig, missing, differs(df, ("recompute", "overlap")))
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig, res

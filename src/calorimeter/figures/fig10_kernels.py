"""Fig. 10, kernel-time breakdown: per parallel configuration two stacked bars, without (base) and with
activation recomputation (act), of the kernel time per category of the profiled step, averaged over the traced
ranks (one per pipeline stage). Summed kernel time counts overlapping kernels fully (as the study); a black tick
marks the wall time the kernels occupy (interval union), so the overlap the sums double count is visible."""

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
VARIANTS = ("base", "act")


def select(runs: pd.DataFrame) -> pd.DataFrame:
    """Cells without overlap, base (no recomputation) and act (recomputation), smallest micro-batch."""
    df = runs[(runs["overlap"].astype(bool) == False) & runs["optimization_label"].isin(VARIANTS)]  # noqa: E712
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
    configs = list(dict.fromkeys(config_key(r) for _, r in df.iterrows()))
    n = 2 * len(configs)
    fig, ax = plt.subplots(figsize=(max(7.0, 0.38 * n + 3), 4.8))
    missing: list[str] = []
    res = FigureResult(NAME, 0)
    if not configs:
        empty_axes_message(ax, "no base/act cells without overlap")
        note(fig, ["no cells to compare"])
        fig.suptitle("Fig. 10: kernel-time breakdown, base vs. recomputation", fontsize=10)
        return fig, FigureResult(NAME, 0, [], ["no cells to compare"])
    by_cfg = {k: g for k, g in df.groupby(df.apply(config_key, axis=1), sort=False)}
    seen_cats: set[str] = set()
    labels, models = [], []
    for i, key in enumerate(configs):
        g = by_cfg[key]
        for j, var in enumerate(VARIANTS):
            x = 2 * i + j
            labels.append(var)
            models.append(key[0])
            row = g[g["optimization_label"] == var]
            if row.empty:
                ax.text(x, 0.02, "not in sweep", rotation=90, ha="center", va="bottom", fontsize=6,
                        transform=ax.get_xaxis_transform(), gid="absent")
                missing.append(f"{config_label(g.iloc[0])} {var} not in sweep")
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
    group_separators(ax, [2 * i for i in range(1, len(configs))], style="--", lw=0.5)
    mb = group_bounds(models)
    group_separators(ax, [a for a, _ in mb[1:]])
    for a, b in mb:
        ax.text((a + b - 1) / 2, 1.01, models[a], transform=ax.get_xaxis_transform(), ha="center", fontsize=8,
                fontweight="bold")
    for i, key in enumerate(configs):
        ax.text(2 * i + 0.5, -0.2, config_label(by_cfg[key].iloc[0], short=True), transform=ax.get_xaxis_transform(),
                ha="center", va="top", fontsize=6)
    ax.set_xticks(np.arange(n), labels, rotation=90, fontsize=6)
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_ylabel("kernel time per stage (s)", fontsize=8)
    ax.set_xlabel("configuration", fontsize=8, labelpad=22)
    ax.legend(fontsize=6, ncol=6, loc="lower left", bbox_to_anchor=(0, 1.06), frameon=False)
    fig.suptitle(f"Fig. 10: kernel-time breakdown, base vs. recomputation ({hardware_label(df)})", fontsize=10)
    res.missing = missing
    bottom = note(fig, missing)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig, res

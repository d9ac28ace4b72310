"""Per-GPU heatmaps: rows = configurations (cells), columns = GPUs (global index = node x GPUs per node + local
index), node boundaries marked. Shared by Fig. 5 (NVLink / PCIe receive volume) and Fig. 17 (temperature, SM
clock)."""

from __future__ import annotations

from collections.abc import Callable

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm, Normalize

from calorimeter.figures.common import (
    STATUS_COLORS,
    FigureResult,
    Tables,
    config_label,
    empty_axes_message,
    hardware_label,
    note,
    order_configs,
    prefer,
    smallest,
)


def select(runs: pd.DataFrame) -> pd.DataFrame:
    """One cell per configuration: the baseline (``base``) where present, as the study; smallest micro-batch."""
    df = prefer(runs, "optimization_label", ["base", "act"])
    return order_configs(smallest(df, "micro_batch"))


def gpu_matrix(rows: pd.DataFrame, gpus: pd.DataFrame, column: str) -> tuple[np.ndarray, int, int]:
    """(matrix rows x GPUs of ``column``, GPUs per node used for the column index, number of columns)."""
    g = gpus[gpus["cell_id"].isin(rows["cell_id"])] if not gpus.empty and "cell_id" in gpus else pd.DataFrame()
    per_node = int(max([int(v) for v in rows["gpus_per_node"].dropna()] or [1]))
    if not g.empty:
        per_node = max(per_node, int(g["gpu_index"].max()) + 1)
    n_nodes = int(max([int(v) for v in rows["nodes"].dropna()] or [1]))
    if not g.empty:
        n_nodes = max(n_nodes, int(g["node"].max()) + 1)
    ncol = per_node * n_nodes
    m = np.full((len(rows), ncol), np.nan)
    if g.empty or column not in g.columns:
        return m, per_node, ncol
    pos = {cid: i for i, cid in enumerate(rows["cell_id"])}
    col = (g["node"].astype(int) * per_node + g["gpu_index"].astype(int)).to_numpy()
    r = g["cell_id"].map(pos).to_numpy()
    v = pd.to_numeric(g[column], errors="coerce").to_numpy(dtype=float)
    m[r, col] = v
    return m, per_node, ncol


def draw_heatmaps(runs: pd.DataFrame, gpus: pd.DataFrame, panels: list[tuple[str, str, str, str, float]],
                  name: str, title: str, avg_row: bool = False) -> tuple[plt.Figure, FigureResult]:
    """Heatmap panels side by side.

    Args:
        panels: (gpus column, colorbar label, colormap, scale "linear"|"log", value factor).
        avg_row: add a top row with the mean over configurations of each GPU (the study's "Per-GPU Avg.").
    """
    rows = select(runs)
    res = FigureResult(name, len(rows), list(rows["cell_id"]) if len(rows) else [])
    nrows = len(rows) + (1 if avg_row else 0)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), max(2.6, 0.28 * nrows + 1.8)),
                             squeeze=False)
    if rows.empty:
        for ax in axes[0]:
            empty_axes_message(ax, "no cells")
        res.missing.append("no cells")
        note(fig, res.missing)
        fig.suptitle(title, fontsize=10)
        return fig, res
    ylabels = [f"{r['model']} {config_label(r, short=True)}" for _, r in rows.iterrows()]
    status = list(rows["status"])
    no_tele = [cid for cid, st in zip(rows["cell_id"], status, strict=True)
               if st == "ok" and (gpus.empty or cid not in set(gpus.get("cell_id", [])))]
    for ax, (column, label, cmap, scale, factor) in zip(axes[0], panels, strict=True):
        m, per_node, ncol = gpu_matrix(rows, gpus, column)
        m = m * factor
        if avg_row:
            with np.errstate(all="ignore"):
                avg = np.nanmean(m, axis=0) if np.isfinite(m).any() else np.full(ncol, np.nan)
            m = np.vstack([avg, m])
        data = np.ma.masked_invalid(m)
        finite = m[np.isfinite(m)]
        if scale == "log":
            pos = finite[finite > 0]
            norm = LogNorm(vmin=pos.min(), vmax=max(pos.max(), pos.min() * 1.01)) if pos.size else Normalize(0, 1)
            data = np.ma.masked_where(~(m > 0), m)
        else:
            norm = Normalize(finite.min(), finite.max() if finite.max() > finite.min() else finite.min() + 1) \
                if finite.size else Normalize(0, 1)
        cm = plt.get_cmap(cmap).with_extremes(bad="#f0f0f0")
        im = ax.imshow(data, aspect="auto", cmap=cm, norm=norm, interpolation="nearest", gid=f"heatmap:{column}")
        cb = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
        cb.set_label(label, fontsize=7)
        cb.ax.tick_params(labelsize=6)
        off = 1 if avg_row else 0
        for i, st in enumerate(status):
            if st != "ok":
                ax.add_patch(plt.Rectangle((-0.5, i + off - 0.5), ncol, 1, facecolor=STATUS_COLORS.get(st, "#ddd"),
                                           alpha=0.6, hatch="//", edgecolor="#666666", lw=0, gid=f"band:{st}"))
                ax.text(ncol / 2, i + off, st.replace("_", " ").upper(), ha="center", va="center", fontsize=6)
            elif rows["cell_id"].iloc[i] in no_tele:
                ax.text(ncol / 2, i + off, "no telemetry", ha="center", va="center", fontsize=6, color="#555555")
        for b in range(per_node, ncol, per_node):
            ax.axvline(b - 0.5, color="k", lw=1.0)
        for k in range(ncol // per_node):
            ax.text((k + 0.5) * per_node - 0.5, -0.6 - (0 if not avg_row else 0), f"node {k}", ha="center",
                    va="bottom", fontsize=6)
        models = list(rows["model"])
        for i in range(1, len(models)):
            if models[i] != models[i - 1]:
                ax.axhline(i + off - 0.5, color="k", lw=0.8)
        if avg_row:
            ax.axhline(0.5, color="k", lw=1.2)
        ax.set_yticks(np.arange(nrows), (["per-GPU avg."] if avg_row else []) + ylabels, fontsize=6)
        step = max(1, ncol // 32)
        ax.set_xticks(np.arange(0, ncol, step), [str(i) for i in range(0, ncol, step)], fontsize=5)
        ax.set_xlabel("GPU index", fontsize=8)
        ax.set_title(label, fontsize=8, pad=12)
    if no_tele:
        res.missing.append(f"{len(no_tele)} ok cell{'s' if len(no_tele) > 1 else ''} without GPU telemetry")
    counts = rows.loc[rows["status"] != "ok", "status"].value_counts()
    res.missing += [f"{n} {s.replace('_', ' ')} (hatched rows)" for s, n in sorted(counts.items())]
    fig.suptitle(f"{title} ({hardware_label(rows)})", fontsize=10)
    note(fig, res.missing)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig, res


def heatmap_figure(name: str, panels: list[tuple[str, str, str, str, float]], title: str,
                   avg_row: bool = False) -> Callable[[Tables], tuple[plt.Figure, FigureResult]]:
    """The ``draw(tables)`` of a heatmap figure (reads the ``runs`` and ``gpus`` tables)."""

    def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
        return draw_heatmaps(tables["runs"], tables["gpus"], panels, name, title, avg_row)

    draw.__doc__ = f"{title}: the heatmaps (left open) and what they drew."
    return draw

"""Per-GPU heatmaps: rows = configurations (cells), columns = GPUs (global index = node x GPUs per node + local
index), node boundaries marked. Shared by Fig. 5 (NVLink receive volume) and Fig. 17 (GPU and HBM temperature, SM
clock).

Colour scales are honest: a volume starts at zero on a linear scale unless its positive values span two decades or
more (then log, and the colour bar says so); measured zeros are drawn white and named in the legend; a GPU of the
cell without data is hatched ("no data"), a GPU the cell does not use is left blank.
"""

from __future__ import annotations

from collections.abc import Callable

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap, LogNorm, Normalize
from matplotlib.patches import Patch, Rectangle

from calorimeter.figures.common import (
    STATUS_COLORS,
    FigureResult,
    Tables,
    config_label,
    differs,
    empty_axes_message,
    hardware_label,
    note,
    order_configs,
    prefer,
    smallest,
    unsteady,
    with_machines,
)

#: a volume is drawn on a log scale only if its positive values span at least this factor
LOG_SPAN = 100.0
ZERO_COLOR, NODATA_COLOR, UNUSED_COLOR = "#ffffff", "#d9d9d9", "#efefef"
#: temperature panels share one colour scale spanning at least this many degrees (a 1 degC sensor step is not the
#: whole colour map, and one colour is one temperature in every panel)
MIN_CELSIUS_SPAN = 10.0
#: the low end of a volume colour map left out, so that the smallest volume is visibly coloured (never white like
#: a measured zero or an unused GPU)
VOLUME_CMAP_FLOOR = 0.25
#: clock panels share one colour scale spanning at least this many MHz (a 15 MHz clock step, 1% of the clock, is
#: not the whole colour map)
MIN_MHZ_SPAN = 200.0
#: the scales shared by every panel of a figure, and the narrowest span of each
SHARED_SPANS = {"celsius": MIN_CELSIUS_SPAN, "mhz": MIN_MHZ_SPAN}
#: the row-label mark of a cell whose measured window was not thermally steady (:func:`~.common.unsteady`)
UNSTEADY_MARK = " †"


def select(runs: pd.DataFrame) -> pd.DataFrame:
    """One cell per configuration: the baseline (``base``) where present, as the study; smallest micro-batch."""
    df = prefer(runs, "optimization_label", ["base", "cc", "act", "cc+act"])
    return order_configs(smallest(df, "micro_batch"))


def gpu_matrix(rows: pd.DataFrame, gpus: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(matrix rows x GPUs of ``column``, mask of the GPUs each cell uses, GPUs per node used for the column
    index, number of columns)."""
    g = gpus[gpus["cell_id"].isin(rows["cell_id"])] if not gpus.empty and "cell_id" in gpus else pd.DataFrame()
    per_node = int(max([int(v) for v in rows["gpus_per_node"].dropna()] or [1]))
    n_nodes = int(max([int(v) for v in rows["nodes"].dropna()] or [1]))
    if not g.empty:
        per_node = max(per_node, int(g["gpu_index"].max()) + 1)
        n_nodes = max(n_nodes, int(g["node"].max()) + 1)
    ncol = per_node * n_nodes
    m = np.full((len(rows), ncol), np.nan)
    used = np.zeros((len(rows), ncol), dtype=bool)
    for i, (nodes, gpn) in enumerate(zip(rows["nodes"], rows["gpus_per_node"], strict=True)):
        for node in range(int(nodes if nodes == nodes else 1)):
            used[i, node * per_node: node * per_node + int(gpn if gpn == gpn else 1)] = True
    if g.empty or column not in g.columns:
        return m, used, per_node, ncol
    pos = {cid: i for i, cid in enumerate(rows["cell_id"])}
    col = (g["node"].astype(int) * per_node + g["gpu_index"].astype(int)).to_numpy()
    r = g["cell_id"].map(pos).to_numpy()
    m[r, col] = pd.to_numeric(g[column], errors="coerce").to_numpy(dtype=float)
    used[r, col] = True
    return m, used, per_node, ncol


def color_norm(values: np.ndarray, scale: str) -> tuple[Normalize, str]:
    """The colour normalisation of a panel and how to say it: ``linear`` = the data's range; ``celsius`` / ``mhz``
    = the data's range widened to ``MIN_CELSIUS_SPAN`` / ``MIN_MHZ_SPAN`` (the caller passes every such panel's
    values, so the panels share it); ``volume`` = linear from zero, or log when positive values span ``LOG_SPAN`` or
    more."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return Normalize(0, 1), ""
    if scale == "volume":
        pos = finite[finite > 0]
        if pos.size and pos.max() / pos.min() >= LOG_SPAN:
            return LogNorm(vmin=pos.min(), vmax=pos.max()), "log scale"
        top = float(finite.max())
        return Normalize(0, top if top > 0 else 1.0), "linear from 0"
    lo, hi = float(finite.min()), float(finite.max())
    span = SHARED_SPANS.get(scale)
    if span is not None and hi - lo < span:  # widened around the data, never below 0
        mid = (lo + hi) / 2
        lo, hi = max(0.0, mid - span / 2), max(0.0, mid - span / 2) + span
        return Normalize(lo, hi), f"{span:g} {'°C' if scale == 'celsius' else 'MHz'} at least, shared"
    return Normalize(lo, hi if hi > lo else lo + 1.0), "shared" if span is not None else ""


def ok_rows_for(rows: pd.DataFrame, status: list[str], no_tele: list[str]) -> np.ndarray:
    """Which rows are measured cells with telemetry."""
    return np.array([st == "ok" and cid not in no_tele for cid, st in zip(rows["cell_id"], status, strict=True)])




def _row_runs(mask: np.ndarray) -> list[tuple[int, int, int]]:
    """(row, first column, length) of each run of True in a boolean matrix (few patches for many cells)."""
    out = []
    for i, row in enumerate(mask):
        j = 0
        while j < row.size:
            if row[j]:
                k = j
                while k < row.size and row[k]:
                    k += 1
                out.append((i, j, k - j))
                j = k
            else:
                j += 1
    return out


#: a panel: (gpus column, panel title with unit, colormap, scale ``linear``|``volume``|``celsius``|``mhz``, value
#: factor[, runs column each row is divided by: ``measured_steps`` for a volume per iteration])
Panel = tuple


def _avg_rows(m: np.ndarray, used: np.ndarray, machines: list[str | None]) -> list[tuple[str, np.ndarray, int]]:
    """The study's "Per-GPU Avg." rows: per machine (GPUs of two machines are not one GPU), the mean of each GPU over
    the cells that use the most GPUs (every column averages the same cells): (label, row, cells averaged)."""
    names = list(dict.fromkeys(mm for mm in machines if mm))
    groups = [(f" {mm}", np.array([x == mm for x in machines])) for mm in names] if len(names) > 1 else \
        [("", np.ones(len(machines), dtype=bool))]
    out = []
    for suffix, mine in groups:
        width = used.sum(axis=1)
        widest = mine & (width == width[mine].max()) if mine.any() else mine
        sub = m[widest]
        fin = np.isfinite(sub)
        n = fin.sum(axis=0)  # a GPU no cell measured stays NaN (no empty-mean warning)
        avg = np.where(n > 0, np.where(fin, sub, 0.0).sum(axis=0) / np.maximum(n, 1), np.nan)
        k = int(widest.sum())
        out.append((f"per-GPU avg.{suffix} ({k} widest cell{'s' if k != 1 else ''})", avg, k))
    return out


def draw_heatmaps(runs: pd.DataFrame, gpus: pd.DataFrame, panels: list[Panel], name: str, title: str,
                  avg_row: bool = False, ncols: int | None = None,
                  notes: list[str] | None = None) -> tuple[plt.Figure, FigureResult]:
    """Heatmap panels (``ncols`` per row, default all side by side).

    Args:
        panels: :data:`Panel` tuples.
        avg_row: add top rows with the mean over configurations of each GPU (the study's "Per-GPU Avg."), one per
            machine.
        notes: what the figure does not draw and why (added to the figure's missing list).

    Rows name their machine where the cells ran on more than one, and carry :data:`UNSTEADY_MARK` where the
    cell's measured window was not thermally steady.
    """
    rows = select(runs)
    res = FigureResult(name, len(rows), list(rows["cell_id"]) if len(rows) else [], list(notes or []))
    machines = [x if isinstance(x, str) and x else None for x in rows["machine"]] if "machine" in rows.columns \
        else [None] * len(rows)
    several = len(set(mm for mm in machines if mm)) > 1
    ncols = ncols or len(panels)
    nprow = -(-len(panels) // ncols)
    warm = unsteady(rows).to_numpy() if len(rows) else np.zeros(0, dtype=bool)
    ylabels = [f"{r['model']} {config_label(r, short=True)}" + (f" @{mm}" if several and mm else "")
               + (UNSTEADY_MARK if w else "") for (_, r), mm, w in zip(rows.iterrows(), machines, warm, strict=True)]
    n_avg = (len(set(mm for mm in machines if mm)) if several else 1) if avg_row else 0
    nrows = len(rows) + n_avg
    height = max(2.6, 0.16 * nrows + 2.0)
    avg_names = [f"per-GPU avg. {mm} (00 widest cells)" for mm in set(machines) if mm] if avg_row else []
    labels_w = 0.07 * max([len(lab) for lab in ylabels + avg_names] or [10])
    fig, axes = plt.subplots(nprow, ncols, figsize=(ncols * (4.4 + labels_w), nprow * height), squeeze=False)
    flat = axes.ravel()
    for ax in flat[len(panels):]:
        ax.set_visible(False)
    if rows.empty:
        for ax in flat[:len(panels)]:
            empty_axes_message(ax, "no cells")
            ax.set_xticks([])
        res.missing.append("no cells")
        fig.suptitle(title, fontsize=10)
        note(fig, res.missing)
        return fig, res
    status = list(rows["status"])
    have = set(gpus["cell_id"]) if not gpus.empty and "cell_id" in gpus else set()
    no_tele = [cid for cid, st in zip(rows["cell_id"], status, strict=True) if st == "ok" and cid not in have]
    ok_rows = ok_rows_for(rows, status, no_tele)
    legend: dict[str, Patch] = {}

    def matrix(panel: Panel) -> tuple[np.ndarray, np.ndarray, int, int]:
        m, used, per_node, ncol = gpu_matrix(rows, gpus, panel[0])
        m = m * panel[4]
        if len(panel) > 5 and panel[5]:  # per iteration: each cell's volume over its own measured steps
            per = pd.to_numeric(rows[panel[5]], errors="coerce").to_numpy(dtype=float)
            m = m / np.where(per > 0, per, np.nan)[:, None]
        return m, used, per_node, ncol

    shared = {}
    for scale in SHARED_SPANS:
        vals = [matrix(p)[0].ravel() for p in panels if p[3] == scale]
        if vals:
            shared[scale] = color_norm(np.concatenate(vals), scale)
    for ax, panel in zip(flat, panels, strict=False):
        column, label, cmap, scale = panel[:4]
        m, used, per_node, ncol = matrix(panel)
        nodata = used & ~np.isfinite(m) & ok_rows[:, None]
        unused = ~used
        avg_labels: list[str] = []
        if avg_row:
            avgs = _avg_rows(m, used, machines)
            avg_labels = [lab for lab, _, _ in avgs]
            top_rows = np.vstack([v for _, v, _ in avgs])
            m = np.vstack([top_rows, m])
            nodata = np.vstack([np.zeros_like(top_rows, dtype=bool), nodata])
            unused = np.vstack([~np.isfinite(top_rows), unused])
        norm, how = shared[scale] if scale in shared else color_norm(m, scale)
        zero = np.isfinite(m) & (m == 0)
        data = np.ma.masked_where(~np.isfinite(m) | (zero if isinstance(norm, LogNorm) else False), m)
        cm = plt.get_cmap(cmap)
        if scale == "volume":
            cm = ListedColormap(cm(np.linspace(VOLUME_CMAP_FLOOR, 1.0, 256)))
        cm = cm.with_extremes(bad=UNUSED_COLOR)  # unused GPUs light grey; zeros and no-data overdrawn
        if (unused & np.concatenate([np.ones(n_avg, dtype=bool), ok_rows])[:, None]).any():
            legend["unused"] = Patch(facecolor=UNUSED_COLOR, label="GPU not used by the cell")
        im = ax.imshow(data, aspect="auto", cmap=cm, norm=norm, interpolation="nearest", gid=f"heatmap:{column}")
        if zero.any():  # zeros in white with a thin outline, whatever the scale
            for i, j0, n in _row_runs(zero):
                ax.add_patch(Rectangle((j0 - 0.5, i - 0.5), n, 1, facecolor=ZERO_COLOR, edgecolor="#999999",
                                       lw=0.3, gid="zero"))
            legend["zero"] = Patch(facecolor=ZERO_COLOR, edgecolor="#999999", lw=0.3, label="0 (measured)")
        if nodata.any():
            for i, j0, n in _row_runs(nodata):
                ax.add_patch(Rectangle((j0 - 0.5, i - 0.5), n, 1, facecolor=NODATA_COLOR, hatch="xxx",
                                       edgecolor="#888888", lw=0, gid="nodata"))
            legend["nodata"] = Patch(facecolor=NODATA_COLOR, hatch="xxx", edgecolor="#888888", label="no data")
            res.missing.append(f"{label.split(' (')[0]}: {int(nodata.sum())} GPU(s) without data (hatched)")
        cb = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
        cb.ax.tick_params(labelsize=6)
        if how:
            cb.set_label(how, fontsize=6)
        for i, st in enumerate(status):
            if st != "ok":
                ax.add_patch(Rectangle((-0.5, i + n_avg - 0.5), ncol, 1, facecolor=STATUS_COLORS.get(st, "#ddd"),
                                       alpha=0.6, hatch="//", edgecolor="#666666", lw=0, gid=f"band:{st}"))
                ax.text(ncol / 2 - 0.5, i + n_avg, st.replace("_", " ").upper(), ha="center", va="center",
                        fontsize=5)
            elif rows["cell_id"].iloc[i] in no_tele:
                ax.text(ncol / 2 - 0.5, i + n_avg, "no telemetry", ha="center", va="center", fontsize=5,
                        color="#555555")
        for b in range(per_node, ncol, per_node):
            ax.axvline(b - 0.5, color="k", lw=1.0)
        top = ax.secondary_xaxis("top")
        nodes = ncol // per_node
        top.set_xticks([(k + 0.5) * per_node - 0.5 for k in range(nodes)],
                       [f"{'cell ' if several else ''}node {k}" for k in range(nodes)], fontsize=6)
        top.tick_params(length=0, pad=1)
        models = list(rows["model"])
        for i in range(1, len(models)):
            if models[i] != models[i - 1]:
                ax.axhline(i + n_avg - 0.5, color="k", lw=0.8)
        if n_avg:
            ax.axhline(n_avg - 0.5, color="k", lw=1.2)
        ax.set_yticks(np.arange(nrows), avg_labels + ylabels, fontsize=5)
        for tick, w in zip(ax.get_yticklabels()[n_avg:], warm, strict=True):
            if w:
                tick.set_color("#777777")
        step = max(1, -(-ncol // 32))
        ax.set_xticks(np.arange(0, ncol, step), [str(i) for i in range(0, ncol, step)], fontsize=5)
        ax.set_xlabel("GPU index", fontsize=7)
        ax.set_title(label, fontsize=8)
    top = 0.97
    if legend:  # a line of its own under the title (beside it, a long title ran into it)
        inch = 1.0 / fig.get_figheight()
        fig.legend(handles=list(legend.values()), loc="upper right", fontsize=6, frameon=False, ncol=len(legend),
                   bbox_to_anchor=(0.995, 1 - 0.32 * inch))
        top = min(top, 1 - 0.55 * inch)
    if no_tele:
        res.missing.append(f"{len(no_tele)} ok cell{'s' if len(no_tele) > 1 else ''} without GPU telemetry")
    if warm.any():
        res.missing.append(f"{int(warm.sum())} of {int(ok_rows.sum())} rows (grey, {UNSTEADY_MARK.strip()}): "
                           "measured window not thermally steady, the values are of a window still moving")
    counts = rows.loc[rows["status"] != "ok", "status"].value_counts()
    res.missing += [f"{n} {s.replace('_', ' ')} (hatched rows)" for s, n in sorted(counts.items())]
    fig.suptitle(f"{title} ({hardware_label(rows)})", fontsize=10, x=0.01, ha="left")
    res.differs = differs(rows.drop(columns=["machine"], errors="ignore"), ())  # machines: named on the rows
    if several:
        res.differs.append(f"machine: {len(set(mm for mm in machines if mm))} machines, each row names its own "
                           "(@ its GPUs' UUIDs); a GPU index is a position on that machine")
    bottom = note(fig, res.missing, res.differs)
    fig.tight_layout(rect=(0, bottom, 1, top))
    return fig, res


def heatmap_figure(name: str, panels: list[Panel], title: str, avg_row: bool = False,
                   ncols: int | None = None, notes: list[str] | None = None
                   ) -> Callable[[Tables], tuple[plt.Figure, FigureResult]]:
    """The ``draw(tables)`` of a heatmap figure (reads the ``runs`` and ``gpus`` tables); see ``draw_heatmaps``."""

    def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
        return draw_heatmaps(with_machines(tables)["runs"], tables["gpus"], panels, name, title, avg_row, ncols, notes)

    draw.__doc__ = f"{title}: the heatmaps (left open) and what they drew."
    return draw

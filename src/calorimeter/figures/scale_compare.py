"""Scale comparison (the study's 32 H200 vs. 64 H100): per model, the throughput (tokens/s of the whole system and
per GPU) and energy per token of each system of the compared sweeps. A system is one sweep's hardware and node
layout (``h200x2-findings: h200 1x2``); only this sweep and the sweeps its configuration names under ``compare:`` are
drawn, never others found on disk. Bars = each system's best configuration (highest tokens/s, labelled), dots =
every measured configuration."""

from __future__ import annotations

import zlib

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from calorimeter.figures.common import FigureResult, Tables, config_label, differs, empty_axes_message, finite, note

NAME = "scale_compare"
TABLES = ("runs",)
COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1"]
#: (runs column, y label)
PANELS = (("tokens_per_s", "tokens/s (system)"), ("tokens_per_s_per_gpu", "tokens/s per GPU"),
          ("energy_per_token_j", "energy per token (J)"))


def system_color(system: str) -> str:
    """A system's colour from its hardware and layout only (``h100 1x1`` is the same colour in every sweep's
    figure, whatever the order of the sweeps)."""
    hw = system.split(": ", 1)[-1]
    return COLORS[zlib.crc32(hw.encode()) % len(COLORS)]


def systems(runs: pd.DataFrame) -> pd.Series:
    """``<sweep>: <hardware> <nodes>x<GPUs per node>`` of each row."""
    sweep = runs["sweep"].astype(str) + ": " if "sweep" in runs.columns else ""
    return (sweep + runs["hardware"].astype(str) + " " + runs["nodes"].astype(int).astype(str) + "x"
            + runs["gpus_per_node"].astype(int).astype(str))


def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
    """``tables["runs"]``: this sweep's runs table and those of the sweeps it names under ``compare:``."""
    runs = tables["runs"]
    res = FigureResult(NAME)
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(9.0, 7.6), sharex=True)
    if runs.empty:
        for ax in axes:
            empty_axes_message(ax, "no cells")
        res.missing.append("no runs")
        note(fig, res.missing)
        return fig, res
    runs = runs.assign(_system=systems(runs))
    names = list(dict.fromkeys(runs["_system"]))
    sweeps = list(dict.fromkeys(runs["sweep"])) if "sweep" in runs.columns else []
    models = list(dict.fromkeys(runs["model"]))
    if len(sweeps) < 2:
        res.missing.append(f"only sweep {', '.join(map(str, sweeps))}: name the sweeps to compare with under "
                           "`compare:` (e.g. the H100 run of the same cells)")
    if runs["hardware"].nunique() < 2:
        res.missing.append(f"one GPU type ({runs['hardware'].iloc[0]}): no hardware comparison")
    ok = runs[runs["status"] == "ok"]
    width = 0.8 / max(len(names), 1)
    for k, system in enumerate(names):
        col = system_color(system)
        xs, best_rows = [], []
        for i, m in enumerate(models):
            g = ok[(ok["_system"] == system) & (ok["model"] == m)]
            x = i + (k - (len(names) - 1) / 2) * width
            if g.empty:
                if ((runs["_system"] == system) & (runs["model"] == m)).any():
                    res.missing.append(f"{m} on {system}: no measured cell")
                continue
            tps = finite(g["tokens_per_s"])
            best_rows.append(g.iloc[int(np.nanargmax(tps))] if np.isfinite(tps).any() else g.iloc[0])
            xs.append(x)
            res.cells += list(g["cell_id"])
            for ax, (colname, _) in zip(axes, PANELS, strict=True):
                vals = finite(g[colname]) if colname in g.columns else np.full(len(g), np.nan)
                ax.plot(np.full(len(g), x), vals, ".", color="k", ms=3, gid="dots", zorder=4)
        for ax, (colname, _) in zip(axes, PANELS, strict=True):
            ys = [float(r.get(colname, np.nan)) for r in best_rows]
            ax.bar(xs, np.nan_to_num(ys), width * 0.9, color=col, label=system if ax is axes[0] else None,
                   gid=f"bar:{system}")
        for x, r in zip(xs, best_rows, strict=True):  # above the bar (the best: every dot is below it)
            top = float(r.get(PANELS[0][0], np.nan))
            axes[0].text(x, top if np.isfinite(top) else 0.0, " " + config_label(r, short=True), rotation=90,
                         ha="center", va="bottom", fontsize=6, gid="best")
        res.n_points += len(xs)
        if xs and not np.isfinite([float(r.get("energy_per_token_j", np.nan)) for r in best_rows]).any():
            res.missing.append(f"energy per token on {system} (no telemetry)")
    for ax, (_, ylab) in zip(axes, PANELS, strict=True):
        ax.set_ylabel(ylab, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.margins(y=0.1)
    lo, hi = axes[0].get_ylim()
    axes[0].set_ylim(lo, hi + 0.45 * (hi - lo))  # room for the labels above the bars
    axes[0].legend(fontsize=7, frameon=False, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=min(len(names), 3))
    axes[-1].set_xticks(np.arange(len(models)), models, fontsize=8)
    fig.suptitle(f"Scale comparison: {' vs. '.join(map(str, sweeps))}\nbars: each system's highest-tokens/s "
                 "configuration (labelled, all three panels); dots: every measured configuration", fontsize=9)
    knobs = ("hardware", "world_size", "nodes", "gpus_per_node")  # what the systems differ in by design
    res.differs = differs(ok, knobs, within="_system")  # e.g. micro-batches measured on one system only
    bottom = note(fig, res.missing, res.differs)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig, res

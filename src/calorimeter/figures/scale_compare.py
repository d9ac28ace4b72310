"""Scale-up vs. scale-out: per model, the throughput (tokens/s) and energy per token of each hardware sweep
(e.g. 32 H200 vs. 64 H100); bars = each hardware's best configuration (highest throughput, labelled), dots =
every measured configuration."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from calorimeter.figures.common import FigureResult, Tables, config_label, empty_axes_message, finite, note

NAME = "scale_compare"
TABLES = ("runs",)
COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2"]


def system_label(g: pd.DataFrame) -> str:
    """``h200 4x8`` from the cells' hardware and node layout (the most common one of the group)."""
    lay = (g["nodes"].astype(int).astype(str) + "x" + g["gpus_per_node"].astype(int).astype(str)).mode()
    return f"{g['hardware'].iloc[0]} {lay.iloc[0] if len(lay) else ''}".strip()


def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
    """``tables["runs"]``: the runs tables of the compared sweeps, concatenated."""
    runs = tables["runs"]
    res = FigureResult(NAME)
    fig, axes = plt.subplots(2, 1, figsize=(8.5, 6.0), sharex=True)
    if runs.empty:
        for ax in axes:
            empty_axes_message(ax, "no cells")
        res.missing.append("no runs")
        note(fig, res.missing)
        return fig, res
    systems = {h: system_label(g) for h, g in runs.groupby("hardware", sort=True)}
    hws = list(systems)
    models = list(dict.fromkeys(runs["model"]))
    if len(hws) < 2:
        res.missing.append(f"only {', '.join(systems.values())} present: run the other hardware's sweep "
                           "(e.g. config/sweeps/h100-optimization.yaml) to compare")
    ok = runs[runs["status"] == "ok"]
    width = 0.8 / max(len(hws), 1)
    for k, hw in enumerate(hws):
        xs, tput, ept, labels = [], [], [], []
        for i, m in enumerate(models):
            g = ok[(ok["hardware"] == hw) & (ok["model"] == m)]
            x = i + (k - (len(hws) - 1) / 2) * width
            if g.empty:
                axes[0].text(x, 0.02, "none", rotation=90, ha="center", va="bottom", fontsize=6,
                             transform=axes[0].get_xaxis_transform(), gid="none")
                res.missing.append(f"{m} on {hw}")
                continue
            tps = finite(g["tokens_per_s"])
            best = g.iloc[int(np.nanargmax(tps))] if np.isfinite(tps).any() else g.iloc[0]
            res.cells += list(g["cell_id"])
            xs.append(x)
            tput.append(float(best["tokens_per_s"]))
            ept.append(float(best.get("energy_per_token_j", np.nan)))
            labels.append(config_label(best, short=True))
            axes[0].plot(np.full(len(g), x), finite(g["tokens_per_s"]), ".", color="k", ms=3, gid="dots")
            axes[1].plot(np.full(len(g), x), finite(g.get("energy_per_token_j", pd.Series(np.nan, index=g.index))),
                         ".", color="k", ms=3, gid="dots")
        col = COLORS[k % len(COLORS)]
        axes[0].bar(xs, tput, width * 0.9, color=col, label=systems[hw], gid=f"bar:{hw}")
        axes[1].bar(xs, np.nan_to_num(ept), width * 0.9, color=col, gid=f"bar:{hw}")
        res.n_points += len(xs)
        for x, t, lab in zip(xs, tput, labels, strict=True):
            axes[0].text(x, t, lab, rotation=90, ha="center", va="bottom", fontsize=6)
        if xs and not np.isfinite(ept).any():
            res.missing.append(f"energy per token on {hw} (no telemetry)")
    axes[0].set_ylabel("tokens/s (best config.)", fontsize=8)
    axes[1].set_ylabel("energy per token (J)", fontsize=8)
    axes[0].legend(fontsize=7, frameon=False)
    axes[1].set_xticks(np.arange(len(models)), models, fontsize=8)
    for ax in axes:
        ax.tick_params(labelsize=7)
        ax.margins(y=0.25)
    fig.suptitle("Scale-up vs. scale-out: throughput and energy per token per model", fontsize=10)
    bottom = note(fig, res.missing)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig, res

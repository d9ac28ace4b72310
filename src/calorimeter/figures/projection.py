"""Projected cells drawn apart from measured ones (``projection/projected.parquet``).

Projected values are always hatched and carry their error band (the validation's 90th-percentile absolute error);
measured values are solid. Nothing projected is ever drawn as if it were measured.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from calorimeter.figures.common import FigureResult, Tables, config_label  # noqa: E402

NAME = "projection"
TABLES = ("projected", "runs")
PROJECTED_HATCH = "///"
PROJECTED_COLOR, MEASURED_COLOR = "#f28e2b", "#4e79a7"


def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
    """Tokens/s per GPU and energy per token of every projected cell: hatched bars with their error band, next to
    the measured value (solid, from ``runs``) where the same cell was measured."""
    projected, measured = tables["projected"], tables.get("runs", pd.DataFrame())
    res = FigureResult(NAME)
    fig, axes = plt.subplots(2, 1, figsize=(min(40.0, max(7.0, 0.32 * len(projected) + 2)), 7.0), sharex=True)
    if projected.empty:
        axes[0].text(0.5, 0.5, "no planned cell", ha="center", va="center", transform=axes[0].transAxes)
        res.missing.append("no projected cell")
        return fig, res
    d = projected.sort_values(["model", "world_size", "pp", "tp"], kind="stable").reset_index(drop=True)
    meas = measured.set_index("cell_id") if not measured.empty and "cell_id" in measured else pd.DataFrame()
    x = np.arange(len(d))
    t = d["iteration_time_s"].astype(float)
    tps = d["tokens_per_s_per_gpu"].astype(float)
    panels = (
        (axes[0], tps, tps * t / d["iteration_time_s_high"].astype(float),
         tps * t / d["iteration_time_s_low"].astype(float), "tokens_per_s_per_gpu", "tokens/s per GPU"),
        (axes[1], d["energy_per_token_j"].astype(float), d["energy_per_token_j_low"].astype(float),
         d["energy_per_token_j_high"].astype(float), "energy_per_token_j", "energy per token (J)"),
    )
    width = 0.4
    for ax, val, low, high, col, label in panels:
        ax.bar(x - width / 2, val.fillna(0), width, color="white", edgecolor=PROJECTED_COLOR,
               hatch=PROJECTED_HATCH, label="projected (hatched; bar: error band)")
        ok = low.notna() & high.notna()
        ax.errorbar(x[ok], val[ok], yerr=[(val - low)[ok], (high - val)[ok]], fmt="none", ecolor="k", lw=0.8,
                    capsize=2)
        if not meas.empty and col in meas:
            mv = d["cell_id"].map(meas[col]).astype(float)
            ax.bar(x + width / 2, mv.fillna(0), width, color=MEASURED_COLOR, label="measured")
        ax.set_ylabel(label)
        ax.set_yscale("log")
    axes[0].legend(fontsize=7)
    labels = [f"{r['model']} {config_label(r, short=True)} {r['optimization_label']} x{r['world_size']}"
              for _, r in d.iterrows()]
    axes[1].set_xticks(x)
    axes[1].set_xticklabels(labels, rotation=90, fontsize=6 if len(d) < 80 else 4)
    fig.suptitle("Projected cells (hatched, with error band) and measured ones (solid)", fontsize=10)
    fig.tight_layout()
    res.n_points = len(d)
    res.cells = list(d["cell_id"])
    return fig, res

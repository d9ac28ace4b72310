"""Figures of the projection: predicted vs. measured (validation) and projected cells drawn apart from measured ones.

Projected values are always hatched and carry their error band (the validation's 90th-percentile absolute error);
measured values are solid. Nothing projected is ever drawn as if it were measured.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from calorimeter.figures.common import FigureResult, config_label, save  # noqa: E402

FOLD_MARKERS = ("o", "s", "^", "D", "v")
PROJECTED_HATCH = "///"
PROJECTED_COLOR, MEASURED_COLOR = "#f28e2b", "#4e79a7"
VALIDATION_PANELS = (("iteration_time_s", "iteration time (s)"), ("energy_per_token_j", "energy per token (J)"))


def plot_validation(table: pd.DataFrame, out_png: Path, out_pdf: Path | None = None) -> FigureResult:
    """Predicted vs. measured iteration time and energy per token of every held-out cell, per fold, with the
    identity line and the 10% / 25% bands; cells beyond 25% are labelled (their notes are in the table)."""
    res = FigureResult("projection_validation")
    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    if table.empty:
        for ax in axes:
            ax.text(0.5, 0.5, "no held-out cell", ha="center", va="center", transform=ax.transAxes)
        res.missing.append("no validation fold")
    for ax, (metric, label) in zip(axes, VALIDATION_PANELS, strict=True):
        meas, pred = f"{metric}_measured", f"{metric}_predicted"
        d = table.dropna(subset=[meas, pred]) if not table.empty else table
        if d.empty:
            ax.set_title(f"{label}: nothing to compare")
            continue
        lo = 0.8 * float(min(d[meas].min(), d[pred].min()))
        hi = 1.25 * float(max(d[meas].max(), d[pred].max()))
        xs = np.geomspace(lo, hi, 50)
        ax.plot(xs, xs, color="k", lw=0.8)
        for band, alpha in ((0.10, 0.18), (0.25, 0.08)):
            ax.fill_between(xs, xs * (1 - band), xs * (1 + band), color="grey", alpha=alpha, lw=0,
                            label=f"±{band:.0%}")
        for i, (fold, g) in enumerate(d.groupby("fold", sort=False)):
            err = g[f"{metric}_rel_error"].abs()
            host = g["notes"].fillna("").str.startswith("host-bound")
            marker = FOLD_MARKERS[i % len(FOLD_MARKERS)]
            eg = err[~host]
            sc = ax.scatter(g.loc[~host, meas], g.loc[~host, pred], marker=marker, s=36, zorder=3,
                            label=f"{fold}: median |err| {eg.median():.1%}, max {eg.max():.1%} (GPU-bound)")
            if host.any():
                ax.scatter(g.loc[host, meas], g.loc[host, pred], marker=marker, s=36, zorder=3,
                           facecolors="none", edgecolors=sc.get_facecolor(),
                           label=f"{fold}: host-bound, not modelled ({int(host.sum())})")
            for r in g[(err > 0.25) & ~host].itertuples():
                ax.annotate(f"{r.model} {r.parallel_label}", (getattr(r, meas), getattr(r, pred)), fontsize=6,
                            xytext=(4, -8), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"predicted {label}")
        ax.legend(fontsize=7, loc="upper left")
        res.n_points += len(d)
    if not table.empty:
        res.cells = sorted(set(table["cell_id"]))
    fig.suptitle("Projection validation: held-out measured cells predicted from the others", fontsize=10)
    fig.tight_layout()
    save(fig, out_png, out_pdf, dpi=120)
    return res


def plot_projected(projected: pd.DataFrame, measured: pd.DataFrame, out_png: Path, out_pdf: Path | None = None
                   ) -> FigureResult:
    """Tokens/s per GPU and energy per token of every projected cell: hatched bars with their error band, next to
    the measured value (solid) where the same cell was measured."""
    res = FigureResult("projection")
    fig, axes = plt.subplots(2, 1, figsize=(min(40.0, max(7.0, 0.32 * len(projected) + 2)), 7.0), sharex=True)
    if projected.empty:
        axes[0].text(0.5, 0.5, "no planned cell", ha="center", va="center", transform=axes[0].transAxes)
        res.missing.append("no projected cell")
        save(fig, out_png, out_pdf, dpi=120)
        return res
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
    save(fig, out_png, out_pdf, dpi=120)
    res.n_points = len(d)
    res.cells = list(d["cell_id"])
    return res

"""Projection validation: predicted vs. measured for every held-out cell (``projection/validation.parquet``)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from calorimeter.figures.common import FigureResult, Tables  # noqa: E402

NAME = "projection_validation"
TABLES = ("validation",)
FOLD_MARKERS = ("o", "s", "^", "D", "v")
PANELS = (("iteration_time_s", "iteration time (s)"), ("energy_per_token_j", "energy per token (J)"))


def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
    """Predicted vs. measured iteration time and energy per token of every held-out cell, per fold, with the
    identity line and the 10% / 25% bands; cells beyond 25% are labelled (their notes are in the table), host-bound
    cells hollow (the model does not claim them)."""
    table = tables["validation"]
    res = FigureResult(NAME)
    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    if table.empty:
        for ax in axes:
            ax.text(0.5, 0.5, "no held-out cell", ha="center", va="center", transform=ax.transAxes)
        res.missing.append("no validation fold")
    for ax, (metric, label) in zip(axes, PANELS, strict=True):
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
    return fig, res

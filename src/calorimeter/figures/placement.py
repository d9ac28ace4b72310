"""Placement policies per layout (beyond the study): throughput and energy per token (mean over repetitions, the
repetitions as points below 4 of them and a 95 % interval from 4, as every figure; gain against ``default`` with
the Welch interval of the comparison), and the per-GPU temperature and SM-clock spread each policy left."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from calorimeter.analysis.placement import layout_id, policy_comparison
from calorimeter.figures.common import (
    MIN_INTERVAL_REPEATS,
    FigureResult,
    Tables,
    hardware_label,
    not_drawn_figure,
    note,
)

NAME = "placement"
TABLES = ("runs", "gpus")
TITLE = "Placement policies"
NOTHING = ("needs a layout measured under more than one placement policy (default and balanced or thermal): this "
           "sweep has none")
POLICY_COLORS = {"default": "#bab0ac", "balanced": "#4e79a7", "thermal": "#e15759"}
PANELS = (
    ("tokens_per_s_per_gpu", "tokens/s per GPU", True),
    ("energy_per_token_j", "energy per token (J)", True),
    ("temp_spread_c", "GPU temperature spread (°C)\n(max - min of GPU averages)", False),
    ("clock_spread_mhz", "SM clock spread (MHz)\n(max - min of GPU averages)", False),
)


def select(runs: pd.DataFrame) -> pd.DataFrame:
    """The cells of every layout measured under more than one placement policy (what the figure compares)."""
    if runs.empty or "placement" not in runs.columns:
        return runs.iloc[0:0]
    lay = runs["cell_id"].map(layout_id)
    n = runs.groupby(lay)["placement"].transform(lambda p: p.fillna("default").nunique())
    return runs[n > 1]


def needs(tables: Tables) -> str:
    """Why the sweep cannot draw the figure: no layout measured under two placement policies."""
    return "" if len(select(tables["runs"])) else NOTHING


def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
    """The figure (left open) and what it drew (``n_points`` = layout x policy bars)."""
    runs, gpus = tables["runs"], tables.get("gpus")
    cmp = policy_comparison(runs, gpus)
    if cmp.empty:  # render() draws needs() instead; drawn directly, the same sentence
        return not_drawn_figure(TITLE, NOTHING), FigureResult(NAME, 0, [], [NOTHING], not_drawn=NOTHING)
    fig, axes = plt.subplots(1, 4, figsize=(14.0, 4.2))
    layouts = list(dict.fromkeys(cmp["layout_id"]))
    policies = [p for p in POLICY_COLORS if p in set(cmp["placement"])]
    w = 0.8 / max(len(policies), 1)
    missing: list[str] = []
    for ax, (col, label, has_ci) in zip(axes, PANELS, strict=True):
        for j, pol in enumerate(policies):
            sub = cmp[cmp["placement"] == pol].set_index("layout_id").reindex(layouts)
            x = np.arange(len(layouts)) - 0.4 + (j + 0.5) * w
            mean = pd.to_numeric(sub[f"{col}_mean"], errors="coerce").to_numpy(dtype=float)
            ax.bar(x, np.nan_to_num(mean), w, color=POLICY_COLORS[pol], label=pol, gid=f"{col}:{pol}")
            values = [v if isinstance(v, list) else [] for v in sub.get(f"{col}_values", [[]] * len(sub))]
            for xi, v in zip(x, values, strict=True):  # as every figure: 2-3 repetitions are points, not a t-interval
                if 1 < len(v) < MIN_INTERVAL_REPEATS:
                    ax.plot(np.full(len(v), xi), v, "o", mfc="none", mec="k", ms=3, mew=0.7, lw=0, gid="reps")
            if has_ci:
                lo = pd.to_numeric(sub[f"{col}_ci95_low"], errors="coerce").to_numpy(dtype=float)
                hi = pd.to_numeric(sub[f"{col}_ci95_high"], errors="coerce").to_numpy(dtype=float)
                ok = np.isfinite(lo) & np.isfinite(hi) & (np.array([len(v) for v in values]) >= MIN_INTERVAL_REPEATS)
                if ok.any():
                    ax.errorbar(x[ok], mean[ok], yerr=[mean[ok] - lo[ok], hi[ok] - mean[ok]], fmt="none",
                                ecolor="k", capsize=2, lw=0.8, gid="ci95")
                if pol != "default":
                    for xi, (_, r) in zip(x, sub.iterrows(), strict=True):
                        g, gl, gh = r.get(f"{col}_gain"), r.get(f"{col}_gain_ci95_low"), r.get(f"{col}_gain_ci95_high")
                        if g is None or not np.isfinite(g):
                            continue
                        txt = f"{g:+.1%}" + (f" [{gl:+.1%}, {gh:+.1%}] Welch" if np.isfinite(gl) else " (n=1)")
                        # inside the axes whatever the bar's height: from its foot, on a light box
                        ax.text(xi, 0.03, txt, rotation=90, ha="center", va="bottom", fontsize=6, gid="gain",
                                transform=ax.get_xaxis_transform(),
                                bbox={"facecolor": "white", "alpha": 0.7, "lw": 0, "pad": 0.5})
            if not np.isfinite(mean).any():
                missing.append(f"{label.splitlines()[0]} ({pol})")
        labels = []
        for lid in layouts:
            r = cmp[cmp["layout_id"] == lid].iloc[0]
            labels.append(f"{r['model']}\n{r['parallel_label']}")
        ax.set_xticks(np.arange(len(layouts)), labels, fontsize=6)
        ax.set_ylabel(label, fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    axes[0].legend(fontsize=7, frameon=False, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=3)
    splits = "; ".join(f"{r['placement']}: {r['placement_split'] or 'uniform'}"
                       + (" moved" if r["placement_moved"] else "")
                       for _, r in cmp.drop_duplicates("placement").iterrows())
    fig.suptitle(f"{TITLE} ({hardware_label(runs[runs['status'] == 'ok'])}; {splits})", fontsize=9)
    if "placement_applied" in runs.columns:
        fell = runs[(runs["status"] == "ok") & (runs["placement"].fillna("default") != "default")
                    & (runs["placement_applied"] == False)]  # noqa: E712 - a column of bools
        for pol, g in fell.groupby("placement"):
            missing.append(f"{pol} fell back to default in {len(g)} cell(s), counted as default: "
                           f"{g['placement_reason'].iloc[0].removeprefix('falls back to default: ')}")
    note(fig, missing)
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    cells = list(runs.loc[runs["cell_id"].map(layout_id).isin(layouts), "cell_id"])
    return fig, FigureResult(NAME, len(cmp), cells, missing)

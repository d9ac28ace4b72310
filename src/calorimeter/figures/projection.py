"""Projected cells drawn apart from measured ones (``projection/projected.parquet``): dot and band per
configuration, one row of panels per model, one colour per GPU count.

Each model's configurations (layout, optimization, micro-batch) are ordered as the study's figures order them
(:func:`~calorimeter.figures.common.order_configs`); a configuration projected at several GPU counts has one dot per
count, side by side. Every projected value is an open dot with its band (the projection's stated coverage); a
measured value of the same cell, where one exists, is a filled black diamond. Values on a log axis, as dots, never
bars. A row the projection refuses (:func:`calorimeter.projection.study.refusal`) is a cross at the axis' bottom, its
reason in the note. Nothing projected is drawn as if it were measured.
"""

from __future__ import annotations

import re
from collections import Counter

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator  # noqa: E402

from calorimeter.figures.common import FigureResult, Tables, config_label, note, order_configs  # noqa: E402
from calorimeter.figures.projected_study import (  # noqa: E402
    band,
    band_notes,
    calibration_line,
    dots_with_bands,
    watermark,
)
from calorimeter.projection.coverage import reason_kind  # noqa: E402
from calorimeter.projection.study import refusal  # noqa: E402

NAME = "projection"
TABLES = ("projected", "runs")
PANELS = (("tokens_per_s_per_gpu", "tokens/s per GPU"), ("energy_per_token_j", "energy per token (J)"))
GPU_COLORS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666")
#: log-axis tick labels as plain numbers (``300``, ``0.6``), not powers of ten
PLAIN = FuncFormatter(lambda v, _: f"{v:g}")
#: inches per configuration on the x axis, and the most configurations of one model drawn
POINT_IN, MAX_CONFIGS = 0.32, 40


def _config(row: pd.Series) -> str:
    """A configuration's label without its scale (GPU count, data-parallel degree): layout, optimization,
    micro-batch; the same layout at several scales shares one x position."""
    layout = re.sub(r"-D\d+", "", config_label(row, short=True))
    return f"{layout} {row['optimization_label']} mb{row['micro_batch']}"


def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
    """Tokens/s per GPU and energy per token of every projected cell, per model, with their bands, next to the
    measured value where the same cell was measured (``runs``)."""
    projected, measured = tables["projected"], tables.get("runs", pd.DataFrame())
    res = FigureResult(NAME)
    if projected.empty:
        fig, ax = plt.subplots(figsize=(7, 3))
        ax.axis("off")
        ax.text(0.5, 0.5, "no planned cell", ha="center", va="center")
        res.missing.append("no projected cell")
        return fig, res
    d = order_configs(projected).reset_index(drop=True)
    d["_refused"] = [refusal(r) for r in d.to_dict("records")]
    d["_config"] = [_config(r) for _, r in d.iterrows()]
    meas = pd.DataFrame()
    if not measured.empty and "cell_id" in measured:
        ok = measured[measured["status"] == "ok"] if "status" in measured else measured
        meas = ok.drop_duplicates("cell_id", keep="last").set_index("cell_id")
    models = list(dict.fromkeys(d["model"]))
    gpus = sorted({int(w) for w in d["world_size"]})
    colors = {g: GPU_COLORS[i % len(GPU_COLORS)] for i, g in enumerate(gpus)}
    n_conf = min(max(d.groupby("model")["_config"].nunique()), MAX_CONFIGS)
    panels = [(m, p) for m in models for p in (PANELS if (d.loc[d["model"] == m, "_refused"] == "").any()
                                               else PANELS[:1])]
    fig = plt.figure(figsize=(max(8.0, n_conf * POINT_IN + 2.0), 2.4 * len(panels) + 1.3), layout="constrained")
    gs = fig.add_gridspec(len(panels) + 1, 1, height_ratios=[0.25] + [1] * len(panels))
    legend_ax = fig.add_subplot(gs[0, 0])
    legend_ax.axis("off")
    axes = np.array([[fig.add_subplot(gs[i + 1, 0])] for i in range(len(panels))])
    handles: dict[str, object] = {}
    unbanded = [0, 0]  # values with a band unbounded above, without a band
    cut: list[str] = []
    n_meas = 0
    for ax, (model, (col, label)) in zip(axes[:, 0], panels, strict=True):
        dm = d[d["model"] == model]
        confs = list(dict.fromkeys(dm["_config"]))
        if len(confs) > MAX_CONFIGS:
            if col == PANELS[0][0]:
                cut.append(f"{model}: {len(confs) - MAX_CONFIGS} configurations beyond the first {MAX_CONFIGS} not "
                           "drawn (in the table)")
            confs = confs[:MAX_CONFIGS]
        xpos = {c: k for k, c in enumerate(confs)}
        g_here = sorted({int(w) for w in dm["world_size"]})
        step = 0.8 / max(len(g_here), 1)
        for k, g in enumerate(g_here):
            dg = dm[(dm["world_size"] == g) & dm["_config"].isin(xpos)]
            x = dg["_config"].map(xpos).to_numpy(dtype=float) + (k - (len(g_here) - 1) / 2) * step
            ok = (dg["_refused"] == "").to_numpy()
            val, err = band(dg, col)
            good = ok & np.isfinite(val)
            eb, n_unb, n_none = dots_with_bands(ax, x, np.where(good, val, np.nan), err, colors[g],
                                                 f"projected:{col}:{g}", ms=4.0)
            unbanded[0] += n_unb
            unbanded[1] += n_none
            if eb is not None:
                handles.setdefault(f"projected, {g} GPUs", eb)
            if (~ok).any():
                (rh,) = ax.plot(x[~ok], np.full((~ok).sum(), 0.04), "x", color=colors[g], ms=5,
                                transform=ax.get_xaxis_transform(), gid=f"refused:{g}")
                handles.setdefault("refused (x, at the bottom)", rh)
            if not meas.empty and col in meas.columns:
                mv = dg["cell_id"].map(meas[col]).astype(float).to_numpy()
                have = np.isfinite(mv)
                if have.any():
                    (mh,) = ax.plot(x[have], mv[have], "D", color="k", ms=4, gid=f"measured:{col}")
                    handles.setdefault("measured (filled)", mh)
                    n_meas += int(have.sum()) if col == PANELS[0][0] else 0
        if (dm["_refused"] == "").any():
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(PLAIN)
            ax.yaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
            ax.yaxis.set_minor_formatter(PLAIN)
            ax.grid(axis="y", which="both", lw=0.3, alpha=0.5)
            ax.set_ylabel(label, fontsize=8)
            ax.set_title(f"{model}: {label}", fontsize=8, fontweight="bold", loc="left")
        else:
            ax.set_yticks([])
            ax.set_title(f"{model}: all {len(dm)} cells refused ({reason_kind(dm['_refused'].iloc[0]).split(':')[0]};"
                         " the reason in the note)", fontsize=8, fontweight="bold", loc="left")
        ax.set_xlim(-0.6, max(len(confs), 2) - 0.4)
        ax.set_xticks(range(len(confs)), confs, rotation=90, fontsize=6)
        ax.tick_params(axis="y", labelsize=7)
    legend_ax.legend(list(handles.values()), list(handles.keys()), loc="center", ncol=min(len(handles), 4),
                     fontsize=7, frameon=False)
    kept = d[d["_refused"] == ""].assign(status="projected")
    fig.suptitle(f"PROJECTED, not measured: {len(d)} cells; {calibration_line(kept)}", fontsize=9, color="#7f2704")
    watermark(fig)
    missing = [f"{n} refused ({why})" for why, n in Counter(reason_kind(r) for r in d["_refused"] if r).most_common()]
    missing += [*cut, *band_notes(*unbanded)]
    if not n_meas:
        missing.append("no projected cell was measured (no filled marker)")
    bottom = note(fig, missing)
    fig.get_layout_engine().set(rect=(0, bottom, 1, 1 - bottom))
    res.n_points = len(d)
    res.cells = list(d["cell_id"])
    res.missing = missing
    return fig, res

"""The study's figures drawn from projected rows (:mod:`calorimeter.projection.study`), marked *projected*.

Fig. 4 (parallelism), Fig. 8 (optimization) and Fig. 13 (micro-batch) select, order and label their cells as the
measured figures do (the same ``select`` functions, :func:`~calorimeter.figures.common.order_configs` and
:func:`~calorimeter.figures.common.config_label`): one column per model, the study's variants on the x axis. What a
projection gives is drawn: tokens/s per GPU, average GPU power and the efficiency (samples/s per MJ of one iteration;
Figs. 8 and 13 normalised per model, as the study does); temperature and SM clock are not projected. Every projected
value is an open marker with its band (the projection's stated coverage, ``<metric>_low``/``_high``); power and a
normalised efficiency share their axis across models, throughput and a raw efficiency have one per model; a measured
value of the same cell, where one exists, is a filled marker beside it (the mean over its repetitions). Refused and
pruned cells are bands that say so, their reasons at the bottom; nothing is dropped. Every figure says *PROJECTED*
in its title and across its panels.
"""

from __future__ import annotations

from collections import Counter

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from calorimeter.figures import fig04_parallelism, fig08_optimization, fig13_microbatch  # noqa: E402
from calorimeter.figures.common import (  # noqa: E402
    FigureResult,
    Tables,
    collapse_repeats,
    config_key,
    config_label,
    finite,
    group_bounds,
    group_separators,
    hardware_label,
    note,
    status_band,
)
from calorimeter.projection.coverage import reason_kind  # noqa: E402
from calorimeter.projection.study import STATUS_PROJECTED  # noqa: E402

TABLES = ("projected", "runs", "configs")
PROJECTED_COLOR, MEASURED_COLOR = "#d95f02", "#1b6ca8"
#: the study figure -> (select function, variant column on the x axis or None, title, x axis title, normalised)
STUDY_FIGURES = {
    "fig04_parallelism": (fig04_parallelism.select, None, "Fig. 4: parallelism sweep", "parallelism configuration",
                          False),
    "fig08_optimization": (fig08_optimization.select, "optimization_label", "Fig. 8: optimization sweep",
                           "optimization configuration", True),
    "fig13_microbatch": (fig13_microbatch.select, "micro_batch", "Fig. 13: micro-batch sweep", "micro-batch size",
                         True),
}
#: the panels: (projected column, label, scale)
PANELS = (("tokens_per_s_per_gpu", "tokens/s per GPU", 1.0), ("power_avg_w", "avg. GPU power (W)", 1.0))


def figures_for(cells: list[dict]) -> list[str]:
    """The study figures a sweep's cells make: Fig. 4 always, Fig. 8 where they vary the optimization, Fig. 13
    where they vary the micro-batch."""
    vary = {k: len({str(c.get(k)) for c in cells}) > 1 for k in ("optimization_label", "micro_batch")}
    return ["fig04_parallelism", *(["fig08_optimization"] if vary["optimization_label"] else []),
            *(["fig13_microbatch"] if vary["micro_batch"] else [])]


def output_name(figure: str) -> str:
    """``projected_fig08_optimization``."""
    return f"projected_{figure}"


def watermark(fig: plt.Figure, text: str = "PROJECTED") -> None:
    """The word across the figure, faint, behind the data."""
    fig.text(0.5, 0.5, text, ha="center", va="center", rotation=20, fontsize=min(110, 14 * fig.get_figwidth()),
             color="#d95f02", alpha=0.07, zorder=0, gid="watermark")


def band(df: pd.DataFrame, metric: str, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """A metric's value and its ``[[below], [above]]`` band for ``yerr`` (NaN where the row has none)."""
    v = finite(df[metric]) * scale if metric in df.columns else np.full(len(df), np.nan)
    lo = finite(df[f"{metric}_low"]) * scale if f"{metric}_low" in df.columns else np.full(len(df), np.nan)
    hi = finite(df[f"{metric}_high"]) * scale if f"{metric}_high" in df.columns else np.full(len(df), np.nan)
    return v, np.vstack([v - lo, hi - v])


def dots_with_bands(ax: plt.Axes, x: np.ndarray, val: np.ndarray, err: np.ndarray, color: str, gid: str,
                    ms: float = 5.0) -> tuple[object | None, int, int]:
    """Open dots with their band's whiskers; a band unbounded above (a half-width of 100% or more) as an arrow to
    the axis' top, a value without a band as the dot alone. Returns the handle and how many were unbounded and
    without a band."""
    ok = np.isfinite(val)
    if not ok.any():
        return None, 0, 0
    below, above = err[0], err[1]
    unbounded = ok & (above == np.inf)
    none = ok & ~np.isfinite(below) & ~unbounded
    yerr = np.vstack([np.where(np.isfinite(below), below, 0.0), np.where(np.isfinite(above), above, 0.0)])
    eb = ax.errorbar(x[ok], val[ok], yerr=yerr[:, ok], fmt="o", mfc="white", mec=color, ecolor=color, ms=ms,
                     capsize=2, lw=0.9, gid=gid)
    for xi, vi in zip(x[unbounded], val[unbounded], strict=True):
        ax.annotate("", xy=(xi, 0.99), xycoords=ax.get_xaxis_transform(), xytext=(xi, vi), textcoords="data",
                    arrowprops={"arrowstyle": "->", "color": color, "lw": 0.8}, gid=f"unbounded:{gid}")
    return eb, int(unbounded.sum()), int(none.sum())


def band_notes(unbounded: int, none: int) -> list[str]:
    """What the bands of the drawn values do not claim."""
    return ([f"{unbounded} bands of +-100% or more (unbounded above: arrows)"] if unbounded else []) + (
        [f"{none} values without a band (their regime claims none)"] if none else [])


def efficiency_band(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Projected efficiency (samples/s per MJ of one iteration = 1e6 / (iteration time x energy per token x
    sequence)) and its band from the iteration-time and energy-per-token bands combined at their worst."""
    eff = finite(df["efficiency"]) if "efficiency" in df.columns else np.full(len(df), np.nan)
    seq = finite(df["seq_len"])
    t_lo, t_hi = (finite(df.get(f"iteration_time_s_{s}", pd.Series(np.nan, index=df.index))) for s in ("low", "high"))
    e_lo, e_hi = (finite(df.get(f"energy_per_token_j_{s}", pd.Series(np.nan, index=df.index))) for s in ("low",
                                                                                                          "high"))
    with np.errstate(divide="ignore", invalid="ignore"):
        return eff, 1e6 / (t_hi * e_hi * seq), 1e6 / (t_lo * e_lo * seq)


def measured_by_cell(tables: Tables) -> pd.DataFrame:
    """The measured cells (one row per configuration, its repetitions' mean) by cell id; empty without any."""
    runs = tables.get("runs")
    if runs is None or runs.empty:
        return pd.DataFrame()
    m = collapse_repeats({"runs": runs, "configs": tables.get("configs", pd.DataFrame())})
    m = m[m["status"] == "ok"] if "status" in m.columns else m
    return m.drop_duplicates("cell_id", keep="last").set_index("cell_id")


def refused_notes(df: pd.DataFrame) -> list[str]:
    """``3 refused (MoE: ...)``, ``2 pruned (estimated memory # GB per device exceeds ...)``: one note per kind of
    reason (:func:`calorimeter.projection.study.reason_kind`; the figure's JSON and the table keep each)."""
    out = []
    for status in ("refused", "pruned"):
        d = df[df["status"] == status]
        for why, n in Counter(reason_kind(r) for r in d["reason"].fillna("")).most_common():
            out.append(f"{n} {status}{f' ({why})' if why else ''}")
    return out


def assumption_notes(df: pd.DataFrame) -> list[str]:
    """What the projected rows rest on: outside the calibration's range (by key), inter-node links assumed."""
    p = df[df["status"] == STATUS_PROJECTED]
    if p.empty:
        return []
    out = []
    keys = Counter(part.split("=")[0].strip() for parts in p.get("extrapolated_parts", pd.Series(dtype=str)).fillna("")
                   for part in str(parts).split(";") if "=" in part)
    if keys:
        out.append(f"{int(p['extrapolated'].fillna(False).astype(bool).sum())} of {len(p)} projected cells outside the "
                   f"calibration's range ({', '.join(f'{k}: {n}' for k, n in keys.most_common())}): banded as the "
                   "model bands extrapolated rows (docs/projection.md)")
    inter = p["assumed"].fillna("").str.contains("inter-node").sum() if "assumed" in p.columns else 0
    if inter:
        out.append(f"{inter} with inter-node links from the hardware profile (assumed, never measured)")
    host = int(p["host_bound"].fillna(False).astype(bool).sum()) if "host_bound" in p.columns else 0
    if host:
        out.append(f"{host} projected host-bound (host-bound band)")
    return out


def calibration_line(df: pd.DataFrame) -> str:
    """Which calibration(s) the projected rows came from."""
    p = df[df["status"] == STATUS_PROJECTED]
    if p.empty or "calibration" not in p.columns:
        return "no projected cell"
    cov = p["band_coverage"].dropna() if "band_coverage" in p.columns else pd.Series(dtype=float)
    stated = f"; bands: {cov.iloc[0]:.0%} stated coverage" if len(cov) else ""
    return f"calibration {', '.join(sorted(set(p['calibration'].dropna().astype(str))))}{stated}"


def draw(tables: Tables, figure: str) -> tuple[plt.Figure, FigureResult]:
    """One of :data:`STUDY_FIGURES` from ``tables['projected']`` (with ``runs``/``configs`` of measured cells where
    they exist)."""
    select, variant, title, xlabel, normalised = STUDY_FIGURES[figure]
    res = FigureResult(output_name(figure))
    rows = tables["projected"]
    df = select(rows).reset_index(drop=True) if not rows.empty else rows
    if df.empty:
        fig, ax = plt.subplots(figsize=(7, 3))
        ax.axis("off")
        ax.text(0.5, 0.5, "no cell to project", ha="center", va="center")
        fig.suptitle(f"PROJECTED {title}", fontsize=10)
        res.missing.append("no cell")
        return fig, res
    meas = measured_by_cell(tables)
    models = list(dict.fromkeys(df["model"]))
    counts = [int((df["model"] == m).sum()) for m in models]
    eff_label = ("efficiency / best projected of the model" if normalised else "samples/(s·MJ)")
    n_rows = len(PANELS) + 1
    fig = plt.figure(figsize=(max(7.0, 0.3 * len(df) + 1.2 * len(models) + 1.5), 7.2), layout="constrained")
    gs = fig.add_gridspec(n_rows + 1, len(models), height_ratios=[0.12] + [1] * n_rows,
                          width_ratios=[max(c, 2) for c in counts])
    legend_ax = fig.add_subplot(gs[0, :])
    legend_ax.axis("off")
    axes: list[list[plt.Axes]] = [[] for _ in range(n_rows)]
    handles: dict[str, object] = {}
    n_measured = 0
    unbanded = [0, 0]  # values with a band unbounded above, without a band
    for c, model in enumerate(models):
        d = df[df["model"] == model]
        x = np.arange(len(d))
        keys = [config_key(r) for _, r in d.iterrows()]
        eff, eff_lo, eff_hi = efficiency_band(d)
        ref = np.nanmax(eff) if normalised and np.isfinite(eff).any() else 1.0
        series = [(*band(d, col, scale), col, scale, label) for col, label, scale in PANELS]
        series.append((eff / ref, np.vstack([(eff - eff_lo) / ref, (eff_hi - eff) / ref]), "efficiency",
                       1.0 / ref, eff_label))
        for r, (val, err, col, scale, label) in enumerate(series):
            ax = fig.add_subplot(gs[r + 1, c], sharex=axes[0][c] if r else None)
            axes[r].append(ax)
            for s0, s1 in group_bounds(keys):  # lines broken between configurations
                ax.plot(x[s0:s1], val[s0:s1], "--", color=PROJECTED_COLOR, lw=0.8, alpha=0.7)
            eb, n_unb, n_none = dots_with_bands(ax, x, val, err, PROJECTED_COLOR, f"projected:{col}")
            unbanded[0] += n_unb
            unbanded[1] += n_none
            if eb is not None:
                handles.setdefault("projected (open; whisker: band)", eb)
            if not meas.empty and col in meas.columns:
                mv = d["cell_id"].map(meas[col]).astype(float).to_numpy() * scale
                have = np.isfinite(mv)
                if have.any():
                    (mh,) = ax.plot(x[have] + 0.18, mv[have], "D", color=MEASURED_COLOR, ms=4, gid=f"measured:{col}")
                    handles.setdefault("measured (filled)", mh)
                    if r == 0:
                        n_measured += int(have.sum())
            for j, st in enumerate(d["status"]):
                if st != STATUS_PROJECTED:
                    status_band(ax, j, st, text=(r == 0))
            if variant is not None:
                group_separators(ax, [s for s, _ in group_bounds(keys)[1:]], style="--", lw=0.5)
            ax.set_ylim(bottom=0)
            ax.tick_params(labelsize=7)
            if c == 0:
                ax.set_ylabel(label, fontsize=8)
            if r < n_rows - 1:
                ax.tick_params(labelbottom=False)
        if not (d["status"] == STATUS_PROJECTED).any():  # nothing projected: no scale to read
            for r in range(n_rows):
                axes[r][c].set_yticks([])
        axes[0][c].set_title(model, fontsize=8, fontweight="bold")
        many = d["world_size"].nunique() > 1  # the same layout at several scales: say which

        def lab(row: pd.Series, many: bool = many) -> str:
            return config_label(row, short=True) + (f" x{int(row['world_size'])}" if many else "")

        if variant is None:
            ticks = [lab(row) for _, row in d.iterrows()]
        else:
            ticks = [str(v) for v in d[variant]]
            cb = group_bounds(keys)
            sec = axes[0][c].secondary_xaxis("top")
            sec.set_xticks([(s + e - 1) / 2 for s, e in cb], [lab(d.iloc[s]) for s, _ in cb], rotation=90,
                           fontsize=6)
            sec.tick_params(length=0, pad=2)
        axes[-1][c].set_xticks(x, ticks, rotation=90, fontsize=6)
        axes[-1][c].set_xlabel(xlabel, fontsize=7)
        axes[-1][c].set_xlim(-0.6, max(len(d), 2) - 0.4)
    shared = [r for r, (col, _, _) in enumerate(PANELS) if col == "power_avg_w"] + ([n_rows - 1] if normalised else [])
    for r in shared:  # the same GPUs' power, and a normalised efficiency, on one axis across models
        top = max((a.get_ylim()[1] for a in axes[r]), default=1.0)
        for a in axes[r]:
            a.set_ylim(0, top)
            if a is not axes[r][0]:
                a.tick_params(labelleft=False)
    legend_ax.legend(list(handles.values()), list(handles.keys()), loc="center", ncol=3, fontsize=7, frameon=False)
    fig.suptitle(f"PROJECTED, not measured: {title} ({hardware_label(df)}); {calibration_line(df)}", fontsize=9,
                 color="#7f2704")
    watermark(fig)
    missing = [*refused_notes(df), *assumption_notes(df), *band_notes(*unbanded),
               "temperature and SM clock: not projected"]
    if normalised:
        missing.append("efficiency normalised by the largest projected efficiency of each model (measured cells "
                       "by the same value)")
    missing.append("band of efficiency: the iteration-time and energy-per-token bands combined at their worst")
    bottom = note(fig, missing)
    fig.get_layout_engine().set(rect=(0, bottom, 1, 1 - bottom))
    res.n_points = len(df)
    res.cells = list(df["cell_id"])
    res.missing = missing
    if n_measured:
        res.differs = [f"{n_measured} cells measured as well (filled markers)"]
    return fig, res


__all__ = ["MEASURED_COLOR", "PROJECTED_COLOR", "STUDY_FIGURES", "band", "calibration_line", "draw",
           "efficiency_band", "figures_for", "measured_by_cell", "output_name", "refused_notes", "watermark"]

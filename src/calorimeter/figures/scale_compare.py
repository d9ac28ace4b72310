"""Scale comparison (the study's 32 H200 vs. 64 H100): per model, the throughput (tokens/s of the whole system and
per GPU) and energy per token of each system of the compared sweeps. A system is one sweep's hardware and node
layout (``h200x2-findings: h200 1x2``); only this sweep and the sweeps its configuration names under ``compare:`` are
drawn, never others found on disk. Bars = each system's best configuration, by its mean over the repetitions
(labelled; its repetitions as hollow markers), dots = every other measured configuration's mean."""

from __future__ import annotations

import colorsys
import zlib

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import to_hex, to_rgb

from calorimeter.figures.common import (
    FigureResult,
    Tables,
    config_label,
    differs,
    empty_axes_message,
    finite,
    note,
)
from calorimeter.records.legacy import config_ids

NAME = "scale_compare"
TABLES = ("runs", "gpus")  # gpus: the machine of each cell
TITLE = "Scale comparison"
#: one hue per GPU type, the same in every figure (others: a hue not used by the figure's other systems)
HARDWARE_COLORS = {"h200": "#4e79a7", "h100": "#f28e2b", "a100": "#59a14f", "mi250": "#e15759", "cpu": "#76b7b2",
                   "b200": "#b07aa1"}
COLORS = list(HARDWARE_COLORS.values()) + ["#edc948", "#9c755f", "#ff9da7"]
#: (runs column, y label: ``{unit}`` is GPU, or rank on CPU)
PANELS = (("tokens_per_s", "tokens/s (system)"), ("tokens_per_s_per_gpu", "tokens/s per {unit}"),
          ("energy_per_token_j", "energy per token (J)"))


def systems(runs: pd.DataFrame) -> pd.Series:
    """``<sweep>: <hardware> <nodes>x<GPUs per node>`` of each row."""
    sweep = runs["sweep"].astype(str) + ": " if "sweep" in runs.columns else ""
    return (sweep + runs["hardware"].astype(str) + " " + runs["nodes"].astype(int).astype(str) + "x"
            + runs["gpus_per_node"].astype(int).astype(str))


def system_colors(names: list[str]) -> dict[str, str]:
    """A colour per system, distinct within the figure: the hue of its GPU type (:data:`HARDWARE_COLORS`, the same
    in every sweep's figure), lighter for each further layout of that type (ordered by GPU count)."""
    def layout(name: str) -> tuple[str, int]:
        hw, nodes = name.split(": ", 1)[-1].rsplit(" ", 1)
        n, g = nodes.split("x")
        return hw, int(n) * int(g)

    out: dict[str, str] = {}
    used = {HARDWARE_COLORS[layout(n)[0]] for n in names if layout(n)[0] in HARDWARE_COLORS}
    free = [c for c in COLORS if c not in used]
    base: dict[str, str] = {}
    for hw in dict.fromkeys(layout(n)[0] for n in names):
        if hw not in HARDWARE_COLORS:
            pick = free[zlib.crc32(hw.encode()) % len(free)] if free else COLORS[0]
            free = [c for c in free if c != pick] or free
        base[hw] = HARDWARE_COLORS.get(hw) or pick
    by_hw: dict[str, list[str]] = {}
    for n in sorted(dict.fromkeys(names), key=lambda n: (layout(n)[0], layout(n)[1], n)):
        by_hw.setdefault(layout(n)[0], []).append(n)
    for hw, group in by_hw.items():
        h, lum, sat = colorsys.rgb_to_hls(*to_rgb(base[hw]))
        for k, n in enumerate(group):  # the first layout in the type's own colour, the next ones lighter
            out[n] = to_hex(colorsys.hls_to_rgb(h, min(0.85, lum + 0.18 * k), sat))
    return out


def configuration_means(ok: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration of each system (the first repetition's parameters), the panels' metrics averaged
    over its ok repetitions, with ``<metric>_reps`` (the repetitions' values) and ``n_reps``."""
    d = ok.assign(_config=config_ids(ok).to_numpy())
    rows = []
    for (_system, _cfg), g in d.groupby(["_system", "_config"], sort=False):
        row = g.iloc[0].copy()
        for col, _ in PANELS:
            v = finite(g[col]) if col in g.columns else np.full(len(g), np.nan)
            v = v[np.isfinite(v)]
            row[col] = float(v.mean()) if v.size else np.nan
            row[f"{col}_reps"] = list(v)
        row["n_reps"] = len(g)
        row["repeat"] = 0
        rows.append(row)
    return pd.DataFrame(rows).reset_index(drop=True)


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
    colors = system_colors(names)
    sweeps = list(dict.fromkeys(runs["sweep"])) if "sweep" in runs.columns else []
    models = list(dict.fromkeys(runs["model"]))
    unit = "rank" if (runs["hardware"].astype(str) == "cpu").all() else "GPU"
    if len(sweeps) < 2:
        res.missing.append(f"only sweep {', '.join(map(str, sweeps))}: name the sweeps to compare with under "
                           "`compare:` (e.g. the H100 run of the same cells)")
    if runs["hardware"].nunique() < 2:
        res.missing.append(f"one hardware type ({runs['hardware'].iloc[0]}): no hardware comparison")
    ok = runs[runs["status"] == "ok"]
    means = configuration_means(ok) if not ok.empty else ok
    width = 0.8 / max(len(names), 1)
    best_all = []
    for k, system in enumerate(names):
        xs, best_rows = [], []
        for i, m in enumerate(models):
            g = means[(means["_system"] == system) & (means["model"] == m)] if len(means) else means
            x = i + (k - (len(names) - 1) / 2) * width
            if g.empty:
                if ((runs["_system"] == system) & (runs["model"] == m)).any():
                    res.missing.append(f"{m} on {system}: no measured cell")
                continue
            tps = finite(g["tokens_per_s"])
            best = int(np.nanargmax(tps)) if np.isfinite(tps).any() else 0
            best_rows.append(g.iloc[best])
            xs.append(x)
            res.cells += list(ok.loc[(ok["_system"] == system) & (ok["model"] == m), "cell_id"])
            others = g.drop(index=g.index[best])
            for ax, (colname, _) in zip(axes, PANELS, strict=True):
                ax.plot(np.full(len(others), x), finite(others[colname]), ".", color="k", ms=3, gid="dots", zorder=4)
                reps = g.iloc[best][f"{colname}_reps"]
                if len(reps) > 1:
                    ax.plot(np.full(len(reps), x + min(0.08, width * 0.2)), reps, "o", mfc="none", mec="k", ms=3,
                            mew=0.7,
                            lw=0, gid="reps", zorder=4)
        for ax, (colname, _) in zip(axes, PANELS, strict=True):
            ys = [float(r.get(colname, np.nan)) for r in best_rows]
            ax.bar(xs, np.nan_to_num(ys), width * 0.9, color=colors[system],
                   label=system if ax is axes[0] else None, gid=f"bar:{system}")
        for x, r in zip(xs, best_rows, strict=True):  # above the bar
            top = max([float(r.get(PANELS[0][0], np.nan)), *r[f"{PANELS[0][0]}_reps"], 0.0])
            n = int(r["n_reps"])
            label = f" {config_label(r, short=True)} {r['optimization_label']} mb{r['micro_batch']}"
            axes[0].text(x, top, label + (f" (n={n})" if n > 1 else ""), rotation=90, ha="center", va="bottom",
                         fontsize=6, gid="best")
        best_all += best_rows
        res.n_points += len(xs)
    for ax, (colname, ylab) in zip(axes, PANELS, strict=True):
        ax.set_ylabel(ylab.format(unit=unit), fontsize=8)
        ax.tick_params(labelsize=7)
        ax.margins(y=0.1)
        vals = finite(means[colname]) if len(means) and colname in means.columns else np.array([])
        if not np.isfinite(vals).any():  # e.g. energy on CPU ranks: no scale, a sentence
            empty_axes_message(ax, f"{ylab.format(unit=unit)}: not measured (needs GPU telemetry)")
            res.missing.append(f"{ylab.format(unit=unit)} (no telemetry)")
    if np.isfinite(finite(means["tokens_per_s"]) if len(means) else np.array([])).any():
        lo, hi = axes[0].get_ylim()
        axes[0].set_ylim(lo, hi + 0.7 * (hi - lo))  # room for the labels above the bars
    axes[0].legend(fontsize=7, frameon=False, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=min(len(names), 3))
    axes[-1].set_xticks(np.arange(len(models)), models, fontsize=8)
    fig.suptitle(f"{TITLE}: {' vs. '.join(map(str, sweeps))}\nbars: each system's configuration with the highest "
                 "mean tokens/s (labelled; hollow: its repetitions); dots: every other configuration's mean",
                 fontsize=9)
    knobs = ("hardware", "world_size", "nodes", "gpus_per_node", "machine")  # the systems differ in them by design
    res.differs = differs(pd.DataFrame(best_all), knobs) if best_all else []  # what else the compared bars differ in
    bottom = note(fig, res.missing, res.differs)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig, res

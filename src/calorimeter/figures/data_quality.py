"""Data quality (beyond the study): per cell, how much of the measured window the power samples observed without
gaps (the worst GPU) and how many of the expected samples arrived; cells marked poor in red; below, what the
analysis had to say about each cell's samples (gaps, NVML errors dropped, counter glitches and resets, duplicate or
out-of-order timestamps), which cells' measured window was not thermally steady after a ``steady`` warm-up, and on
which machines the cells ran."""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from calorimeter.analysis.window import MIN_COVERAGE
from calorimeter.figures.common import (
    FigureResult,
    Tables,
    config_label,
    empty_axes_message,
    finite,
    hardware_label,
    needs_gpu_telemetry,
    note,
    order_configs,
    status_band,
    unsteady,
    with_machines,
)

NAME = "data_quality"
TABLES = ("runs", "gpus")  # gpus: the machine of each cell
TITLE = "Data quality"
needs = needs_gpu_telemetry
#: lines of notes listed below the bars (cells whose notes do not fit are counted)
MAX_NOTE_LINES = 14


def wrapped(text: str, width: int, max_lines: int = 3) -> list[str]:
    """A cell's note wrapped to the panel's width, continuation lines indented, at most max_lines lines."""
    return textwrap.wrap(text, width, subsequent_indent="    ", max_lines=max_lines, placeholder=" [...]")


def _labels(df: pd.DataFrame, several: bool) -> list[str]:
    """Tick labels: model, layout (LoRA, placement and repetition included), optimization, micro-batch, and the
    machine where the cells ran on several."""
    return [f"{r['model']} {config_label(r, short=True)} {r['optimization_label']} mb{r['micro_batch']}"
            + (f" @{r['machine']}" if several and isinstance(r.get("machine"), str) else "") for _, r in df.iterrows()]


def _summary(df: pd.DataFrame, warm: np.ndarray) -> list[str]:
    """The lines about every cell at once: machines and warm-up outcome."""
    out = []
    ok = df[df["status"] == "ok"]
    if "machine" in ok.columns and ok["machine"].nunique() > 1:
        counts = ok["machine"].value_counts()
        out.append("machines: " + ", ".join(f"{m} ({n} cells)" for m, n in counts.items()))
    if warm.any():
        out.append(f"{int(warm.sum())} of {len(ok)} measured cells (v): measured window not thermally steady (a GPU's "
                   "temperature drifted by 1 degC or more); their thermal values are of a window still moving (the "
                   "findings leave them out of thermal verdicts)")
    return out


def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
    """The figure (left open) and what it drew (``n_points`` = cells in the top panel)."""
    df = order_configs(with_machines(tables)["runs"])
    if df.empty or "data_quality" not in df.columns:
        fig, ax = plt.subplots(figsize=(8.0, 3.0))
        why = "no cells" if df.empty else "no data-quality columns (tables built before they existed)"
        empty_axes_message(ax, why)
        ax.set_xticks([])
        note(fig, [why])
        return fig, FigureResult(NAME, 0, [], [why])
    warm = unsteady(df).to_numpy()
    several = "machine" in df.columns and df.loc[df["status"] == "ok", "machine"].nunique() > 1
    width_in = max(8.0, 0.3 * len(df) + 3)
    width = int(0.75 * width_in * 72 / (6 * 0.61))  # monospace 6 pt characters that fit the notes panel
    notes = [(r["cell_id"], r["data_quality"], str(r.get("data_notes") or "")) for _, r in df.iterrows()
             if r["data_quality"] == "poor" or "gpu" in str(r.get("data_notes") or "")]
    lines = [w for line in _summary(df, warm) for w in wrapped(line, width)]
    shown = 0
    for cid, q, n in notes:
        more = wrapped(f"[{q}] {cid}: {n}", width)
        if len(lines) + len(more) > MAX_NOTE_LINES:
            break
        lines, shown = lines + more, shown + 1
    if shown < len(notes):
        lines.append(f"... and {len(notes) - shown} more cells with notes (runs table, data_notes)")
    notes_in = 0.35 + 0.11 * max(len(lines), 1)  # the notes panel as tall as its lines
    fig, (ax, ax_notes) = plt.subplots(2, 1, figsize=(width_in, 5.6 + notes_in),
                                       gridspec_kw={"height_ratios": [5.6, notes_in]})
    ax_notes.axis("off")
    x = np.arange(len(df))
    cov = finite(df.get("power_coverage_frac", pd.Series(np.nan, index=df.index))) * 100
    exp = finite(df.get("samples_expected", pd.Series(np.nan, index=df.index)))
    rec = finite(df.get("samples_received", pd.Series(np.nan, index=df.index)))
    got = np.where(exp > 0, 100 * rec / np.where(exp > 0, exp, 1), np.nan)
    poor = (df["data_quality"] == "poor").to_numpy()
    ax.bar(x - 0.2, np.nan_to_num(cov), 0.4, color=np.where(poor, "#e15759", "#4e79a7"),
           label="power observed without gaps (worst GPU, %)", gid="coverage")
    ax.bar(x + 0.2, np.nan_to_num(got), 0.4, color=np.where(poor, "#ff9da7", "#a0cbe8"),
           label="samples received / expected (%)", gid="samples")
    if warm.any():
        ax.plot(x[warm], np.full(int(warm.sum()), 105.0), "v", color="#777777", ms=4, lw=0, gid="unsteady",
                label="window not thermally steady")
    ax.axhline(100 * MIN_COVERAGE, color="k", lw=0.8, ls="--")
    for i, st in enumerate(df["status"]):
        if st != "ok":
            status_band(ax, i, st)
        elif not np.isfinite(cov[i]):
            ax.text(i, 50, "no telemetry", rotation=90, ha="center", va="center", fontsize=6, gid="notelemetry")
    ax.set_ylim(0, 110)
    ax.set_ylabel("% of the measured window", fontsize=8)
    ax.set_xticks(x, _labels(df, several), rotation=90, fontsize=5)
    ax.set_xlim(-0.6, len(df) - 0.4)
    ax.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=3, frameon=False)
    ax_notes.text(0, 1, "\n".join(lines) if lines else "every measured cell's samples are complete and every "
                  "warm-up that was asked to reach a steady window reached it: nothing to report",
                  va="top", fontsize=6, family="monospace", transform=ax_notes.transAxes, gid="notes")
    n_poor = int(poor.sum())
    fig.suptitle(f"{TITLE}: {n_poor} poor of {int((df['status'] == 'ok').sum())} measured cells "
                 f"({hardware_label(df)})", fontsize=10)
    fig.tight_layout()
    missing = [f"{n_poor} cells with poor data"] if n_poor else []
    missing += [f"{int(warm.sum())} cells not thermally steady"] if warm.any() else []
    return fig, FigureResult(NAME, len(df), list(df["cell_id"]), missing)

"""The engine benchmark's set (``bench/engine_speed.py``: ``call*/engine_speed.jsonl``, no sweep tables): per layout
the MFU of every variant, before (today's kernels) and after (the engine's choices) and the peer baseline, each call
a marker (top); the tensor-parallel layout's profiled step of rank 0 by kernel category, every variant a stacked bar
(bottom). Drawn by ``calorimeter rebuild`` of such a set."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from calorimeter.figures.common import CATEGORY_COLORS, CATEGORY_LABELS, FigureResult, empty_axes_message, note
from calorimeter.projection.engine_speed import JSONL
from calorimeter.telemetry.kernels import CATEGORIES

NAME = "engine_speed"
TITLE = "Engine speed: every layout before and after"
PHASE_COLORS = {"today": "#bab0ac", "after": "#4e79a7", "peer": "#f28e2b"}
CALL_MARKERS = "osD^v<>"
#: the layout whose profiled step the bottom panel breaks down
BREAKDOWN_LAYOUT = "tp-sp"


def variants(folder: Path) -> pd.DataFrame:
    """One row per variant of every call: call, variant, layout, phase, MFU, tokens/s per GPU, and rank 0's summed
    kernel time per category of the profiled step (``<category>_sum_s``)."""
    rows = []
    for path in sorted(Path(folder).glob(f"*/{JSONL}")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            d = json.loads(line)
            m = d.get("metrics") or {}
            if d.get("status") != "ok" or not m:
                continue
            row = {"call": path.parent.name, "variant": d.get("variant"), "layout": d.get("layout"),
                   "phase": d.get("phase"), "mfu_full": m.get("mfu_full"),
                   "tokens_per_s_per_gpu": m.get("tokens_per_s_per_gpu")}
            ranks = (d.get("kernels") or {}).get("ranks") or []
            r0 = next((r for r in ranks if int(r.get("rank", -1)) == 0), None)
            if r0:
                row.update({f"{c}_sum_s": float(r0.get(f"{c}_sum_s", 0.0)) for c in CATEGORIES})
            rows.append(row)
    return pd.DataFrame(rows)


def draw_set(folder: Path) -> tuple[plt.Figure, FigureResult]:
    """The figure of one engine-benchmark set (left open) and what it drew."""
    df = variants(folder)
    res = FigureResult(NAME, len(df), [f"{r.call}/{r.variant}" for r in df.itertuples()] if len(df) else [])
    fig, (ax, ax_k) = plt.subplots(2, 1, figsize=(11.0, 8.5), gridspec_kw={"height_ratios": [1, 1.1]})
    if df.empty:
        for a in (ax, ax_k):
            empty_axes_message(a, f"no {JSONL} with a measured variant")
            a.set_xticks([])
        res.missing.append("no measured variant")
        return fig, res
    layouts = list(dict.fromkeys(df["layout"]))
    calls = list(dict.fromkeys(df["call"]))
    phases = [p for p in PHASE_COLORS if p in set(df["phase"])]
    for i, lay in enumerate(layouts):
        for j, ph in enumerate(phases):
            g = df[(df["layout"] == lay) & (df["phase"] == ph)]
            x = i + (j - (len(phases) - 1) / 2) * 0.25
            for _, r in g.iterrows():
                ax.plot(x, 100 * float(r["mfu_full"]), CALL_MARKERS[calls.index(r["call"]) % len(CALL_MARKERS)],
                        color=PHASE_COLORS[ph], ms=6, mec="k", mew=0.4, gid=f"mfu:{r['call']}/{r['variant']}")
    ax.set_xticks(range(len(layouts)), layouts, fontsize=7)
    ax.set_ylabel("MFU, full attention (%)", fontsize=8)
    handles = [plt.Line2D([], [], lw=0, marker="o", color=PHASE_COLORS[p], mec="k", mew=0.4, label=p) for p in phases]
    handles += [plt.Line2D([], [], lw=0, marker=CALL_MARKERS[k % len(CALL_MARKERS)], color="w", mec="k", label=c)
                for k, c in enumerate(calls)]
    ax.legend(handles=handles, fontsize=6, frameon=False, ncol=len(handles), loc="lower left",
              bbox_to_anchor=(0, 1.0))
    ax.grid(axis="y", lw=0.3)
    tp = df[(df["layout"] == BREAKDOWN_LAYOUT) & df.get("gemm_attention_sum_s", pd.Series(np.nan)).notna()] \
        if "gemm_attention_sum_s" in df.columns else df.iloc[0:0]
    if tp.empty:
        empty_axes_message(ax_k, f"no kernel breakdown of layout {BREAKDOWN_LAYOUT}")
        ax_k.set_xticks([])
        res.missing.append(f"kernel breakdown of {BREAKDOWN_LAYOUT}")
    else:
        x = np.arange(len(tp))
        bottom = np.zeros(len(tp))
        for c in CATEGORIES:
            v = tp[f"{c}_sum_s"].to_numpy(dtype=float)
            if (v > 0).any():
                ax_k.bar(x, v, 0.7, bottom=bottom, color=CATEGORY_COLORS[c], label=CATEGORY_LABELS[c], gid=f"bar:{c}")
                bottom += v
        ax_k.set_xticks(x, [f"{r['variant']} ({r['call']})" for _, r in tp.iterrows()], rotation=30, ha="right",
                        fontsize=7)
        ax_k.set_ylabel(f"{BREAKDOWN_LAYOUT}: kernel time of the\nprofiled step, rank 0 (s)", fontsize=8)
        ax_k.legend(fontsize=6, frameon=False, ncol=5, loc="lower left", bbox_to_anchor=(0, 1.0))
    fig.suptitle(f"{TITLE} ({Path(folder).name})", fontsize=10)
    bottom_frac = note(fig, res.missing)
    fig.tight_layout(rect=(0, bottom_frac, 1, 1))
    return fig, res

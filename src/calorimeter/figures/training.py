"""Training (beyond the study, and what CPU ranks measure): per configuration the mean step time of the measured
steps (top); per model the loss of every optimizer step of each configuration (middle) and each layout's loss minus
the single-rank reference's at the same step (bottom): every parallel layout trains the same model on the same
batches, so the differences are rounding only (the equivalence CI checks on every layout, here on the sweep's own
cells). The reference is the model's cell on one rank at the same global batch, sequence length and precision;
without one, the bottom panel says so."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from calorimeter.figures.common import (
    FigureResult,
    Tables,
    collapse_repeats,
    config_label,
    drawn_cells,
    empty_axes_message,
    finite,
    hardware_label,
    note,
    order_configs,
    rep_points,
    split_machines,
)

NAME = "training"
TABLES = ("runs", "configs", "steps", "gpus")  # gpus: the machine of each cell
TITLE = "Step time, loss and the layouts' equivalence"
#: what a layout's loss must share with the single-rank reference to be compared with it step by step
SAME_BATCHES = ("model", "global_batch", "seq_len", "precision")
#: |loss difference| below which the bottom panel's log scale turns linear (float32 rounding of a loss near 5)
LINEAR_BELOW = 1e-6


def step_losses(steps: pd.DataFrame, cell_id: str) -> pd.Series:
    """The loss of each optimizer step of a cell (index: step), from the first rank that reports one."""
    if steps.empty or "loss" not in steps.columns:
        return pd.Series(dtype=float)
    s = steps[(steps["cell_id"] == cell_id) & steps["loss"].notna()].sort_values(["step", "rank"])
    return s.drop_duplicates("step").set_index("step")["loss"].astype(float)


def reference_cell(row: pd.Series, runs: pd.DataFrame) -> str | None:
    """The single-rank cell (first repetition) that trains the same model on the same batches as ``row``."""
    ok = runs[(runs["status"] == "ok") & (pd.to_numeric(runs["world_size"], errors="coerce") == 1)]
    for p in SAME_BATCHES:
        ok = ok[ok[p].astype(str) == str(row[p])]
    ok = ok.sort_values("repeat") if "repeat" in ok.columns else ok
    return str(ok["cell_id"].iloc[0]) if len(ok) else None


def label(row: pd.Series) -> str:
    """A configuration's legend label: layout, optimization and micro-batch."""
    return f"{config_label(row, short=True)} {row['optimization_label']} mb{row['micro_batch']}"


def draw(tables: Tables) -> tuple[plt.Figure, FigureResult]:
    """The figure (left open) and what it drew (``n_points`` = configurations)."""
    runs, steps = tables["runs"], tables.get("steps", pd.DataFrame())
    df = order_configs(collapse_repeats(tables))
    res = FigureResult(NAME, len(df), drawn_cells(df))
    models = list(dict.fromkeys(df["model"])) if len(df) else []
    tick_in = 0.06 * max([len(f"{r['model']} {label(r)}") for _, r in df.iterrows()] or [10])  # rotated labels
    fig = plt.figure(figsize=(max(8.0, 0.45 * len(df) + 3, 4.2 * len(models)), 7.5 + tick_in), layout="constrained")
    gs = fig.add_gridspec(3, max(len(models), 1), height_ratios=[1.1 + tick_in / 2.5, 1, 1])
    ax_t = fig.add_subplot(gs[0, :])
    if df.empty:
        empty_axes_message(ax_t, "no cells")
        ax_t.set_xticks([])
        fig.suptitle(TITLE, fontsize=10)
        res.missing.append("no cells")
        return fig, res
    x = np.arange(len(df))
    t = finite(df["iteration_time_s"])
    ok = (df["status"] == "ok").to_numpy()
    ax_t.bar(x, np.nan_to_num(t), 0.7, color="#4e79a7", gid="step_time")
    rx, ry = rep_points(df, "iteration_time_s")
    if rx.size:
        ax_t.plot(rx, ry, "o", mfc="none", mec="k", ms=3, mew=0.7, lw=0, gid="reps", label="each repetition")
        ax_t.legend(fontsize=6, frameon=False, loc="upper left")
    for i, st in enumerate(df["status"]):
        if st != "ok":
            ax_t.text(i, 0.02, st.replace("_", " ").upper(), rotation=90, ha="center", va="bottom", fontsize=6,
                      transform=ax_t.get_xaxis_transform(), gid=f"band:{st}")
    ax_t.set_xticks(x, [f"{r['model']} {label(r)}" for _, r in df.iterrows()], rotation=90, fontsize=6)
    ax_t.set_ylabel("step time (s, mean of\nthe measured steps)", fontsize=8)
    ax_t.tick_params(axis="y", labelsize=7)
    ax_t.set_xlim(-0.6, len(df) - 0.4)
    cmap = plt.get_cmap("tab10")
    for c, model in enumerate(models):
        d = df[(df["model"] == model) & ok]
        ax_d = fig.add_subplot(gs[2, c])
        ax_l = fig.add_subplot(gs[1, c], sharex=ax_d)
        ax_l.tick_params(labelbottom=False)  # the steps are read on the panel below
        ax_l.set_title(model, fontsize=8, fontweight="bold")
        drew = False
        for k, (_, r) in enumerate(d.iterrows()):
            loss = step_losses(steps, r["cell_id"])
            if loss.empty:
                continue
            ax_l.plot(loss.index, loss.to_numpy(), "-", marker=".", ms=3, lw=1.0, color=cmap(k % 10), label=label(r),
                      gid=f"loss:{r['cell_id']}")
            drew = True
        if drew:
            ax_l.set_ylabel("loss", fontsize=8)
            ax_l.legend(fontsize=5, frameon=False)
            ax_l.tick_params(labelsize=7)
        else:
            empty_axes_message(ax_l, "no step losses recorded")
            res.missing.append(f"{model}: no step losses")
        ref = reference_cell(d.iloc[0], runs) if len(d) else None
        ref_loss = step_losses(steps, ref) if ref else pd.Series(dtype=float)
        compared = 0
        for k, (_, r) in enumerate(d.iterrows()):
            if ref is None or r["cell_id"] == ref or reference_cell(r, runs) != ref:
                continue
            diff = (step_losses(steps, r["cell_id"]) - ref_loss).dropna()
            if diff.empty:
                continue
            ax_d.plot(diff.index, diff.to_numpy(), "-", marker=".", ms=3, lw=1.0, color=cmap(k % 10),
                      label=f"{label(r)}: max |diff| {np.abs(diff.to_numpy()).max():.1e}", gid=f"diff:{r['cell_id']}")
            compared += 1
        if compared:
            ax_d.axhline(0, color="k", lw=0.6)
            ax_d.set_yscale("symlog", linthresh=LINEAR_BELOW)
            ax_d.set_ylabel("loss minus single-rank loss", fontsize=8)
            ax_d.legend(fontsize=5, frameon=False)
            ax_d.tick_params(labelsize=6)
            ax_d.set_title(f"reference: {label(runs[runs['cell_id'] == ref].iloc[0])} (one rank)", fontsize=7)
        else:
            why = "no single-rank cell of this model at the same batches: nothing to compare the layouts with" \
                if ref is None else "no other layout with step losses"
            empty_axes_message(ax_d, why)
            ax_d.set_xticks([])
            res.missing.append(f"{model}: {why}")
        ax_d.set_xlabel("optimizer step", fontsize=8)
    fig.suptitle(f"{TITLE} ({hardware_label(df)})", fontsize=10)
    res.missing += split_machines(df)
    bottom = note(fig, res.missing)
    fig.get_layout_engine().set(rect=(0, bottom, 1, 1 - bottom))
    return fig, res

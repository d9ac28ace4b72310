"""Per-GPU timeline of one cell (beyond the study): GPU temperature, power and SM clock over time, one line per
GPU, with the steps shaded by phase (warmup, measured, profiled) and the clock-event (throttle) reasons marked."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from calorimeter.figures.common import (
    REASON_COLORS,
    FigureResult,
    Tables,
    empty_axes_message,
    needs_gpu_telemetry,
    note,
    unsteady,
    with_machines,
)
from calorimeter.telemetry.reasons import CLOCK_EVENT_REASON_BITS

NAME = "timeline"
#: the cell is picked when drawing (the hottest measured): a caption written before cannot name it
PICKED_AT_RENDER = True
TABLES = ("runs", "timeseries", "steps", "gpus")  # gpus: the machine of each cell
TITLE = "Per-GPU timeline"
needs = needs_gpu_telemetry
PHASE_COLORS = {"warmup": "#d9d9d9", "measured": "#ffffff", "profiled": "#e5d8f0"}


def pick_cell(runs: pd.DataFrame, timeseries: pd.DataFrame) -> str | None:
    """The ok cell with telemetry whose peak GPU temperature is highest (ties: first cell id)."""
    if timeseries.empty or "cell_id" not in timeseries:
        return None
    have = set(timeseries["cell_id"])
    c = runs[(runs["status"] == "ok") & runs["cell_id"].isin(have)].copy()
    if c.empty:
        return None
    c["_t"] = pd.to_numeric(c.get("temp_peak_c"), errors="coerce").fillna(-1e9)
    return str(c.sort_values(["_t", "cell_id"], ascending=[False, True]).iloc[0]["cell_id"])


def draw(tables: Tables, cell_id: str | None = None) -> tuple[plt.Figure, FigureResult]:
    """The figure (left open) and what it drew (``n_points`` = GPUs drawn)."""
    runs, timeseries, steps = tables["runs"], tables["timeseries"], tables["steps"]
    cid = cell_id or pick_cell(runs, timeseries)
    res = FigureResult(NAME)
    fig, axes = plt.subplots(4, 1, figsize=(10, 7.5), sharex=True, gridspec_kw={"height_ratios": [3, 3, 3, 1.6]})
    if cid is None:
        for ax in axes:
            empty_axes_message(ax, "no cell with GPU telemetry")
        res.missing.append("GPU telemetry (no ok cell has any)")
        fig.suptitle(TITLE, fontsize=10)
        note(fig, res.missing)
        return fig, res
    res.cells = [cid]
    ts = timeseries[timeseries["cell_id"] == cid].sort_values(["node", "gpu_index", "t_rel_s"])
    st = steps[steps["cell_id"] == cid] if not steps.empty and "cell_id" in steps else pd.DataFrame()
    t0 = float(ts["time_s"].iloc[0] - ts["t_rel_s"].iloc[0]) if not ts.empty else 0.0
    # step and phase shading (union over ranks of each step)
    if not st.empty:
        w = st.groupby(["step", "phase"], sort=False).agg(b=("t_begin_s", "min"), e=("t_end_s", "max")).reset_index()
        for r in w.itertuples(index=False):
            for ax in axes:
                ax.axvspan(r.b - t0, r.e - t0, color=PHASE_COLORS.get(r.phase, "#ffffff"), alpha=0.6, lw=0,
                           gid=f"phase:{r.phase}")
                ax.axvline(r.b - t0, color="#999999", lw=0.3)
        for phase, g in w.groupby("phase", sort=False):  # inside the top panel: the GPU legend sits above it
            axes[0].text(g["b"].min() - t0, 0.97, f" {phase}", transform=axes[0].get_xaxis_transform(), fontsize=6,
                         va="top", color="#555555", gid=f"phasetext:{phase}", zorder=5,
                         bbox={"facecolor": "white", "alpha": 0.8, "lw": 0, "pad": 0.5})  # above the GPU lines
    else:
        res.missing.append("step timings")
    gpus = list(ts.groupby(["node", "gpu_index"], sort=True))
    cmap = plt.get_cmap("viridis")
    for k, ((node, gi), g) in enumerate(gpus):
        col = cmap(0.85 * k / max(len(gpus) - 1, 1))  # viridis's pale yellow end is lost on the warm-up shading
        lab = f"n{node}:gpu{gi}" + (f" (rank {int(g['rank'].iloc[0])})" if "rank" in g and g["rank"].notna().any()
                                    else "")
        for ax, c, scale in ((axes[0], "gpu_temp_c", 1), (axes[1], "power_w", 1), (axes[2], "sm_clock_mhz", 1e-3)):
            ax.plot(g["t_rel_s"], g[c] * scale, color=col, lw=0.8, label=lab if ax is axes[0] else None,
                    gid=f"gpu:{node}:{gi}")
    res.n_points = len(gpus)
    if not st.empty and not ts.empty:  # idle time before the run: a short lead-in, not half of the x range
        begin, end = float(w["b"].min() - t0), float(max(w["e"].max() - t0, ts["t_rel_s"].max()))
        lead = max(2.0, 0.1 * (end - begin))
        if float(ts["t_rel_s"].min()) < begin - lead:
            for ax in axes:
                ax.set_xlim(begin - lead, end)
            res.missing.append(f"idle samples before the first step shown for {lead:.0f} s only")
    for ax, lab in zip(axes[:3], ("GPU temp. (°C)", "power (W)", "SM clock (GHz)"), strict=True):
        ax.set_ylabel(lab, fontsize=8)
        ax.tick_params(labelsize=7)
    if len(gpus) <= 16:
        axes[0].legend(fontsize=5, ncol=8, loc="lower left", bbox_to_anchor=(0, 1.0), frameon=False)
    # throttle reasons: one row per reason seen, marks where any GPU's bin had it (darker = more GPUs)
    ax = axes[3]
    masks = pd.to_numeric(ts["clock_event_reasons"], errors="coerce") if "clock_event_reasons" in ts else None
    seen = []
    if masks is not None and masks.notna().any():
        m = masks.fillna(0).astype("uint64").to_numpy()
        bins = ts["t_rel_s"].round(3).to_numpy()
        for bit, name in CLOCK_EVENT_REASON_BITS.items():
            on = (m & np.uint64(bit)) != 0
            if not on.any():
                continue
            share = pd.Series(on).groupby(bins).mean()
            y = len(seen)
            seen.append(name)
            ax.scatter(share.index, np.full(len(share), y), c=[REASON_COLORS[name]], s=60, linewidths=2,
                       alpha=np.clip(share.to_numpy(), 0.25, 1) * (share.to_numpy() > 0), marker="|",
                       gid=f"reason:{name}")
        ax.set_yticks(range(len(seen)), seen, fontsize=6)
        if not seen:
            ax.text(0.01, 0.5, "no clock-event reason set", transform=ax.transAxes, fontsize=7)
    else:
        ax.text(0.01, 0.5, "clock-event reasons not recorded", transform=ax.transAxes, fontsize=7)
        res.missing.append("clock-event reasons")
    ax.set_ylim(-0.8, max(len(seen), 1) - 0.2)
    ax.set_xlabel("time since the first step (s)", fontsize=8)
    ax.tick_params(labelsize=7)
    row = with_machines(tables)["runs"].query("cell_id == @cid")
    machine = str(row["machine"].iloc[0]) if len(row) and isinstance(row["machine"].iloc[0], str) else ""
    gpu_ids = machine.split("+")
    where = f" on {gpu_ids[0]} +{len(gpu_ids) - 1} GPUs" if len(gpu_ids) > 2 else f" on {machine}" if machine else ""
    warming = bool(len(row) and unsteady(row).iloc[0])
    if warming:
        res.missing.append("the measured window is not thermally steady: a GPU's temperature drifted by 1 degC or "
                           f"more over it (warm-up: {row['warmup_reason'].iloc[0]})")
    fig.suptitle(f"{TITLE}: {cid}{where}" + ("\nnot steady: the measured window drifted" if warming else ""),
                 fontsize=9)
    bottom = note(fig, res.missing)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig, res

"""Shared pieces of the figures: cell ordering and labels from cell parameters, status bands, notes, saving."""

from __future__ import annotations

import itertools
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from calorimeter.analysis.repeats import CONFIG_METRICS  # noqa: E402
from calorimeter.findings.preconditions import STEADY  # noqa: E402
from calorimeter.plan.kinds import DEFAULT_KIND, kind_of, kinds_where  # noqa: E402
from calorimeter.records.atomic import write_atomic  # noqa: E402
from calorimeter.records.legacy import add_machines, config_ids  # noqa: E402
from calorimeter.records.machines import machine_label  # noqa: E402
from calorimeter.telemetry.kernels import CATEGORIES  # noqa: E402
from calorimeter.telemetry.reasons import REASON_NAMES  # noqa: E402

#: the sweep's tables by name (runs, gpus, steps, kernels, timeseries, configs), as every figure's ``draw`` takes them
Tables = dict[str, pd.DataFrame]
STATUS_COLORS = {"oom": "#e15759", "failed": "#9c755f", "pruned": "#bab0ac", "not_run": "#d3d3d3"}
OPT_ORDER = ("base", "cc", "act", "cc+act")
#: kernel category colours (the artifact's for its categories; new ones for all-to-all and other communication)
CATEGORY_COLORS = {
    "gemm_attention": "#4e79a7", "send_recv": "#59a14f", "all_gather": "#76b7b2", "reduce_scatter": "#e15759",
    "all_reduce": "#f28e2b", "all_to_all": "#ff9da7", "other_comm": "#bab0ac", "memory_elementwise": "#edc948",
    "normalization": "#b07aa1", "other": "#9c755f",
}  # fmt: skip
CATEGORY_LABELS = {
    "gemm_attention": "Compute (GEMM/attention)", "send_recv": "SendRecv", "all_gather": "AllGather",
    "reduce_scatter": "ReduceScatter", "all_reduce": "AllReduce", "all_to_all": "AllToAll",
    "other_comm": "other comm.", "memory_elementwise": "Memory/Elementwise", "normalization": "Norm",
    "other": "Other",
}  # fmt: skip
assert set(CATEGORY_COLORS) == set(CATEGORIES)
REASON_COLORS = dict(zip(REASON_NAMES, itertools.cycle(["#bab0ac", "#76b7b2", "#f28e2b", "#e15759", "#59a14f",
                                                        "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#4e79a7",
                                                        "#8cd17d"])))
AVG_COLOR, PEAK_COLOR, EFF_COLOR = "#1f77b4", "#d62728", "#2ca02c"


@dataclass
class FigureResult:
    """What a figure drew: its name, number of x points (or rows), the cells drawn, what is missing and what the
    compared cells do not hold fixed."""

    name: str
    n_points: int = 0
    cells: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    differs: list[str] = field(default_factory=list)  # what the compared cells do not hold fixed (the bottom note)
    #: why the figure could not be drawn from the sweep's data at all ("" when drawn): the report leaves it out and
    #: lists it with this reason
    not_drawn: str = ""

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict."""
        return {"name": self.name, "n_points": self.n_points, "cells": self.cells, "missing": self.missing,
                "differs": self.differs, "drawn": not self.not_drawn, "not_drawn": self.not_drawn}


def config_label(row: pd.Series | dict, short: bool = False) -> str:
    """Label of a cell's parallel layout from its parameters: ``TP4-PP8``, ``EP8-TP1-PP1``, ``TP8-FSDP``, with the
    ZeRO stage where it is not implied and the node count where it is not one; ``+SP`` where tensor parallelism
    shards the sequence too; `` LoRA`` for a fine-tuning cell (its layout is the same as full training's);
    `` pl-<policy>`` for a placement other than the default; `` r<k>`` for repetition k > 0 (figures that draw every
    repetition would otherwise show two identical labels)."""
    lab = str(row["parallel_label"])
    z = int(row["zero_stage"]) if row.get("zero_stage") == row.get("zero_stage") else None
    if z in (0, 2) and int(row.get("dp") or 1) > 1:
        lab += f"-Z{z}"
    if short:
        lab = lab.replace("TP", "T").replace("PP", "P").replace("EP", "E").replace("-DP", "-D")
    if _true(row.get("sequence_parallel")) and "+SP" not in lab:
        lab = re.sub(r"(T(?:P)?\d+)", r"\1+SP", lab, count=1)
    if (kind := kind_of(row.get("kind"))) is not None and kind.adapters:
        lab += " LoRA"
    pl = row.get("placement")
    if isinstance(pl, str) and pl not in ("", "default"):  # the placement knob is part of what a cell compares
        lab += f" pl-{pl}"
    rep = pd.to_numeric(pd.Series([row.get("repeat")]), errors="coerce").fillna(0).iloc[0]
    return lab + (f" r{int(rep)}" if rep > 0 else "")


def _true(v: object) -> bool:
    """A table's boolean (None, NaN and the string ``"False"`` are false)."""
    return v is not None and v == v and str(v).lower() not in ("false", "0", "")


#: joins the machines of a configuration whose repetitions ran on several (a machine's own name joins its GPUs
#: with ``+``)
MACHINES_JOIN = " & "


def cell_machines(tables: Tables) -> pd.Series:
    """The machine each cell ran on (index ``cell_id``), named for the reader: the runs table's ``machine`` (its GPUs'
    NVML UUIDs, :func:`calorimeter.records.machines.machine_id`; from the ``gpus`` table for tables written before
    the column) shortened by :func:`~calorimeter.records.machines.machine_label`; else the cell's ``hosts`` (CPU
    ranks); empty where nothing says (a cell without a record)."""
    runs = add_machines(tables["runs"], tables.get("gpus"))
    ids = runs["machine"].fillna("").astype(str)
    hosts = runs["hosts"].astype(object) if "hosts" in runs.columns else pd.Series(None, index=runs.index)
    named = ids.map(lambda m: machine_label(m) if m else None).where(ids != "", hosts)
    return pd.Series(named.to_numpy(dtype=object), index=runs["cell_id"])


def with_machines(tables: Tables) -> Tables:
    """The tables with the runs table's ``machine`` column named for the reader (:func:`cell_machines`; applying it
    twice changes nothing)."""
    runs = tables.get("runs")
    if runs is None or runs.empty or "cell_id" not in runs.columns:
        return tables
    m = cell_machines(tables)
    return {**tables, "runs": runs.assign(machine=runs["cell_id"].map(m[~m.index.duplicated()]).to_numpy())}


def split_machines(df: pd.DataFrame) -> list[str]:
    """A note on the drawn configurations whose repetitions ran on more than one machine (their spread includes the
    machines' difference), empty when none did."""
    if "machine" not in df.columns:
        return []
    split = df[df["machine"].astype(str).str.contains(MACHINES_JOIN, regex=False) & df["machine"].notna()]
    if split.empty:
        return []
    names = sorted({p for m in split["machine"] for p in str(m).split(MACHINES_JOIN)})
    return [f"{len(split)} of {len(df)} configurations' repetitions ran on {len(names)} machines ({', '.join(names)}): "
            "their spread includes the machines' difference"]


def unsteady(runs: pd.DataFrame) -> pd.Series:
    """Measured cells whose warm-up was asked to reach a thermally steady window (``warmup: steady``) and whose
    measured window is not thermally steady (:data:`~calorimeter.findings.preconditions.STEADY`: a GPU's temperature
    drifted by 1 °C or more over it): their thermal values are of a window still moving (the findings leave them out
    of thermal verdicts)."""
    if "warmup_mode" not in runs.columns or "warmup_reason" not in runs.columns:
        return pd.Series(False, index=runs.index)
    return (runs["status"] == "ok") & (runs["warmup_mode"].astype(str) == "steady") & ~STEADY.keep(runs)


def data_limits(values: list[np.ndarray], bars: list[tuple[np.ndarray, np.ndarray | None]] = (),
                floor: float | None = None, margin: float = 0.08) -> tuple[float, float] | None:
    """y limits that fit the drawn points and their error bars (``(points, yerr)``), the bars only as far as the
    points' own span (at least a quarter of their magnitude) beyond them; ``margin`` of the range on each side, not
    below ``floor``; None without a finite value. Two repetitions give t-intervals of 12.7 standard errors: axes
    scaled to them (negative power, negative tokens/s) would squash the points, so such intervals are cut."""
    v = np.concatenate([np.asarray(a, dtype=float).ravel() for a in values]) if values else np.array([])
    v = v[np.isfinite(v)]
    if v.size == 0:
        return None
    lo, hi = float(v.min()), float(v.max())
    reach = max(hi - lo, 0.25 * max(abs(lo), abs(hi)), 1e-9)
    for p, e in bars:
        if e is None:
            continue
        p = np.asarray(p, dtype=float)
        blo, bhi = (p - e[0])[np.isfinite(p)], (p + e[1])[np.isfinite(p)]
        if blo.size:
            lo, hi = min(lo, max(float(blo.min()), float(v.min()) - reach)), max(hi, min(float(bhi.max()),
                                                                                    float(v.max()) + reach))
    pad = (hi - lo) * margin if hi > lo else max(abs(hi) * 0.05, 1e-9)
    lo, hi = lo - pad, hi + pad
    if floor is not None:
        lo = max(lo, floor)
    return lo, hi


def cut_intervals(lims: tuple[float, float] | None, points: list[np.ndarray], errs: list[np.ndarray | None]) -> bool:
    """Whether any error bar (``yerr`` rows [below, above] of ``points``) reaches beyond ``lims``."""
    if lims is None:
        return False
    for p, e in zip(points, errs, strict=True):
        if e is None:
            continue
        p = np.asarray(p, dtype=float)
        lo, hi = p - e[0], p + e[1]
        if (np.isfinite(lo) & (lo < lims[0] - 1e-9)).any() or (np.isfinite(hi) & (hi > lims[1] + 1e-9)).any():
            return True
    return False


#: the note of a figure whose error bars were cut at its axes
CUT_NOTE = ("95% intervals cut at the axes (few repetitions give wide t-intervals: 12.7 standard errors each side "
            "with 2)")


def config_key(row: pd.Series | dict) -> tuple:
    """Identity of a parallel configuration (everything but optimization and micro-batch; the placement policy and
    the kind are part of it: cells placed differently, and LoRA next to full training, are different
    configurations)."""
    return (row["model"], row["hardware"], row["world_size"], row["parallel_label"], row["zero_stage"],
            str(row.get("pp_split") or ""), bool(row.get("sequence_parallel")), str(row.get("placement") or "default"),
            str(row.get("kind") or DEFAULT_KIND))


def model_order(df: pd.DataFrame) -> dict[str, int]:
    """Models in order of first appearance (the sweep file's order)."""
    return {m: i for i, m in enumerate(dict.fromkeys(df["model"]))}


def order_configs(df: pd.DataFrame) -> pd.DataFrame:
    """Cells ordered as the study's figures: by model, FSDP first, then ascending pipeline depth (descending TP),
    then optimization (base, cc, act, cc+act) and micro-batch."""
    if df.empty:
        return df
    d = df.copy()
    d["_m"] = d["model"].map(model_order(d))
    d["_fsdp"] = ~((d["zero_stage"] == 3) & (d["pp"] == 1))
    d["_opt"] = d["optimization_label"].map({o: i for i, o in enumerate(OPT_ORDER)}).fillna(9)
    d["_tp"] = -pd.to_numeric(d["tp"], errors="coerce").fillna(0)  # a command cell has no layout: first
    keys = ["_m", "world_size", "_fsdp", "pp", "_tp", "ep", "zero_stage", "_opt", "micro_batch"]
    d = d.sort_values(keys, kind="stable")
    return d.drop(columns=["_m", "_fsdp", "_opt", "_tp"]).reset_index(drop=True)


def prefer(df: pd.DataFrame, col: str, preferred: list) -> pd.DataFrame:
    """Within each configuration keep the rows whose ``col`` is the first value of ``preferred`` present
    (else the configuration's most frequent value, ties to the smallest)."""
    if df.empty:
        return df
    keep = []
    for _, g in df.groupby(df.apply(config_key, axis=1), sort=False):
        vals = list(g[col])
        choice = next((p for p in preferred if p in vals), None)
        if choice is None:
            counts = g[col].value_counts()
            choice = sorted(counts[counts == counts.max()].index)[0]
        keep.append(g[g[col] == choice])
    return pd.concat(keep)


def smallest(df: pd.DataFrame, col: str) -> pd.DataFrame:
    """Within each configuration keep the rows with the smallest ``col``."""
    if df.empty:
        return df
    mins = df.groupby(df.apply(config_key, axis=1), sort=False)[col].transform("min")
    return df[df[col] == mins]


def status_band(ax: plt.Axes, x: float, status: str, width: float = 0.9, text: bool = True) -> None:
    """Shaded band over one x position, labelled with the cell's status (OOM, FAILED, PRUNED, NOT RUN)."""
    ax.axvspan(x - width / 2, x + width / 2, color=STATUS_COLORS.get(status, "#d3d3d3"), alpha=0.45, lw=0,
               gid=f"band:{status}")
    if text:
        ax.text(x, 0.5, status.replace("_", " ").upper(), rotation=90, ha="center", va="center", fontsize=6,
                transform=ax.get_xaxis_transform(), gid=f"bandtext:{status}")


#: at most this many lines of notes at the bottom of a figure (the figure's JSON lists everything)
NOTE_LINES = 6
NOTE_FONTSIZE = 6


def note(fig: plt.Figure, missing: list[str], differs: list[str] | None = None) -> float:
    """Say at the bottom of the figure what its comparisons do not hold fixed (``differs``) and what it could not
    draw and why (``missing``), wrapped to the figure's width.

    Returns:
        The fraction of the figure's height the text takes: the bottom of the ``rect`` to give ``tight_layout``.
    """
    lines = []
    if differs:
        lines.append("differs: " + "; ".join(dict.fromkeys(differs)))
    if missing:
        lines.append("not drawn / missing: " + "; ".join(dict.fromkeys(missing)))
    if not lines:
        return 0.01
    width = max(40, int(fig.get_figwidth() * 72 / (NOTE_FONTSIZE * 0.6)))
    wrapped = [w for line in lines for w in textwrap.wrap(line, width)]
    if len(wrapped) > NOTE_LINES:
        wrapped = wrapped[:NOTE_LINES - 1] + [f"... ({len(wrapped) - NOTE_LINES + 1} more lines in the figure's JSON)"]
    fig.text(0.005, 0.003, "\n".join(wrapped), ha="left", va="bottom", fontsize=NOTE_FONTSIZE, color="#7f1d1d",
             gid="missing", linespacing=1.2)
    return min(0.45, (len(wrapped) * NOTE_FONTSIZE * 1.25 + 6) / 72 / fig.get_figheight())


#: parameters a comparison may leave unequal, and how to name them
COMPARED_PARAMS = {"recompute": "recompute", "overlap": "overlap", "micro_batch": "micro-batch",
                   "global_batch": "global batch", "seq_len": "sequence", "precision": "precision",
                   "hardware": "hardware", "world_size": "GPUs", "placement": "placement", "kind": "training",
                   "machine": "machine"}
LAYOUT_KNOBS = ("tp", "pp", "dp", "ep", "cp", "sequence_parallel", "zero_stage", "pp_split", "parallel_label")


def _fmt_value(p: str, v: object) -> str:
    if p == "overlap":
        return "on" if bool(v) else "off"
    return str(v)


def differs(df: pd.DataFrame, knobs: tuple[str, ...], within: str = "model", max_labels: int = 4) -> list[str]:
    """What the drawn cells do not hold fixed besides the figure's ``knobs``, per ``within`` group (model):
    ``llama3-8b overlap: on (T1-FSDP, T2-FSDP) / off (T4-P1, T2-P2)``. Empty when everything else is equal."""
    out: list[str] = []
    if df.empty:
        return out
    for key, g in df.groupby(within, sort=False):
        for p, name in COMPARED_PARAMS.items():
            if p in knobs or p not in g.columns:
                continue
            vals = g[p].dropna()
            if vals.astype(str).nunique() < 2:
                continue
            groups = [(_fmt_value(p, gg[p].iloc[0]),
                       list(dict.fromkeys(config_label(r, short=True) for _, r in gg.iterrows())))
                      for _, gg in g.groupby(g[p].astype(str), sort=True)]
            counts = pd.Series([lab for _, labs in groups for lab in labs]).value_counts()
            shared = [lab for lab in dict.fromkeys(lab for _, labs in groups for lab in labs) if counts[lab] > 1]
            parts = []
            for value, labs in groups:  # a label under two values would read as a contradiction: said once below
                own = [lab for lab in labs if counts[lab] == 1]
                more = f" +{len(own) - max_labels}" if len(own) > max_labels else ""
                parts.append(f"{value} ({', '.join(own[:max_labels])}{more})" if own else value)
            within = f"; {name} varies within {', '.join(shared[:max_labels])}" if shared else ""
            out.append(f"{key} {name}: " + " / ".join(parts) + within)
    return out


def status_missing(df: pd.DataFrame) -> list[str]:
    """One note per status other than ok: ``2 oom``, ``1 pruned`` ..."""
    counts = df.loc[df["status"] != "ok", "status"].value_counts()
    return [f"{n} {s.replace('_', ' ')} cell{'s' if n > 1 else ''} (bands)" for s, n in sorted(counts.items())]


def empty_axes_message(ax: plt.Axes, text: str) -> None:
    """Centered message on an axes without data, which keeps no numeric tick (an empty axis with a -0.04..0.04 or
    0..1 range reads as a measured zero or a negative temperature)."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9, color="#555555",
            gid="empty", wrap=True)
    ax.set_yticks([])
    ax.tick_params(axis="y", left=False, right=False, labelleft=False, labelright=False)


def not_drawn_figure(title: str, why: str) -> plt.Figure:
    """The figure of a sweep whose data cannot draw it: its title and why, without axes."""
    fig = plt.figure(figsize=(7.0, 1.6))
    fig.text(0.5, 0.68, title, ha="center", va="center", fontsize=10)
    fig.text(0.5, 0.35, "\n".join(textwrap.wrap(why, 100)), ha="center", va="center", fontsize=8, color="#555555",
             gid="not_drawn")
    return fig


def _hardware_words(ok: pd.DataFrame) -> str:
    hw = sorted({str(h) for h in ok["hardware"]}) if "hardware" in ok.columns else []
    return f" ({', '.join(hw)}{' ranks' if hw == ['cpu'] else ''})" if hw else ""


def needs_gpu_telemetry(tables: Tables) -> str:
    """Why a figure of GPU telemetry cannot be drawn: no measured cell has any ("" when one has, or when no cell
    was measured: the figure then says so itself)."""
    runs = tables["runs"]
    ok = runs[runs["status"] == "ok"] if "status" in runs.columns else runs.iloc[0:0]
    cols = [c for c in ("temp_avg_c", "power_avg_w", "sm_clock_avg_mhz") if c in ok.columns]
    if ok.empty or (cols and ok[cols].notna().any().any()):
        return ""
    return ("needs GPU telemetry (power, temperature, clocks): no measured cell of this sweep has any"
            + _hardware_words(ok))


def is_cpu(kernels: pd.DataFrame | None) -> bool:
    """Whether a kernels table holds CPU operators (CPU ranks: the profiler's operators by their own time) rather
    than GPU kernels."""
    return kernels is not None and not kernels.empty and "device" in kernels.columns and \
        kernels["device"].astype(str).eq("cpu").all()


def needs_kernel_traces(tables: Tables) -> str:
    """Why a kernel-time figure cannot be drawn: no measured cell has a profiled step with kernel time ("" when
    one has)."""
    runs, kernels = tables["runs"], tables.get("kernels")
    ok = runs[runs["status"] == "ok"] if "status" in runs.columns else runs.iloc[0:0]
    if ok.empty:
        return ""
    if kernels is not None and not kernels.empty and "sum_s" in kernels.columns and \
            (pd.to_numeric(kernels["sum_s"], errors="coerce") > 0).any():
        return ""
    return "needs kernel traces of a profiled step: no measured cell of this sweep has any" + _hardware_words(ok)


def group_separators(ax: plt.Axes, bounds: list[int], style: str = "-", lw: float = 0.8) -> None:
    """Vertical lines between groups (``bounds`` = start index of each group after the first)."""
    for b in bounds:
        ax.axvline(b - 0.5, color="k", ls=style, lw=lw)


def group_bounds(keys: list) -> list[tuple[int, int]]:
    """(start, end) index ranges of consecutive equal keys."""
    out: list[tuple[int, int]] = []
    for i, k in enumerate(keys):
        if out and keys[out[-1][0]] == k:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


def finite(values: pd.Series | np.ndarray) -> np.ndarray:
    """Float array with None as NaN."""
    return pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=float)


def save(fig: plt.Figure, out_png: Path | str, out_pdf: Path | str | None = None, dpi: int = 130) -> None:
    """Save deterministically (no dates or software versions in the files) and close the figure."""
    write_atomic(Path(out_png), lambda tmp: fig.savefig(tmp, format="png", dpi=dpi, metadata={"Software": None}))
    if out_pdf is not None:
        write_atomic(Path(out_pdf), lambda tmp: fig.savefig(tmp, format="pdf", metadata={
            "CreationDate": None, "Producer": None, "Creator": None}))
    plt.close(fig)


def hardware_label(df: pd.DataFrame) -> str:
    """``h200 x32`` style description of the cells' hardware and GPU counts."""
    if df.empty:
        return ""
    return ", ".join(sorted({f"{h} x{int(w)}" for h, w in zip(df["hardware"], df["world_size"], strict=True)}))


#: metrics that are a maximum over samples and GPUs: over repetitions their maximum as well, so that a peak is
#: always a value a sensor reported (never the mean of maxima), drawn without an interval
PEAK_METRICS: tuple[str, ...] = ("temp_peak_c", "power_peak_w", "sm_clock_peak_mhz", "hbm_temp_peak_c")
#: fewest repetitions drawn as a mean with a 95% t-interval; with fewer (2 or 3: 12.7 or 4.3 standard errors each
#: side) the repetitions are drawn as points around their mean
MIN_INTERVAL_REPEATS = 4


def collapse_repeats(tables: Tables) -> pd.DataFrame:
    """The runs table with one row per configuration where the sweep repeats cells: the first repetition's row, its
    metrics replaced by the mean over the configuration's ok repetitions (peaks, :data:`PEAK_METRICS`: their
    maximum), with ``<metric>_ci95_low``/``_high`` (the ``configs`` table's intervals), ``<metric>_n`` and
    ``<metric>_reps`` (the repetitions' values) and ``repeat_cell_ids``; status ``ok`` when any repetition is;
    ``machine``: the machines of its repetitions (joined by :data:`MACHINES_JOIN`), ``unsteady_n``: how many of them
    measured a window that was not thermally steady (:func:`unsteady`). The runs table (with ``machine`` and
    ``unsteady_n``) when there are no repetitions (or no configs table)."""
    runs = with_machines(tables)["runs"]
    runs = runs.assign(unsteady_n=unsteady(runs).astype(int)) if not runs.empty else runs
    cfg = tables.get("configs")
    if cfg is None or cfg.empty or runs.empty or "n_planned" not in cfg.columns or (cfg["n_planned"] <= 1).all():
        return runs
    ids = config_ids(runs)
    first = runs.assign(config_id=ids).drop_duplicates("config_id").reset_index(drop=True)
    keep = ["config_id", "n_repeats", "repeat_cell_ids"] + [c for c in cfg.columns if c.endswith(
        ("_mean", "_ci95_low", "_ci95_high"))]
    out = first.merge(cfg[keep], on="config_id", how="left")
    ok = out["n_repeats"].fillna(0) > 0
    good = runs.assign(config_id=ids)[runs["status"] == "ok"]
    cols: dict[str, pd.Series] = {}
    for m in [*CONFIG_METRICS, *PEAK_METRICS]:
        if m not in runs.columns:
            continue
        vals = good.groupby("config_id")[m].apply(lambda v: [float(x) for x in pd.to_numeric(v, errors="coerce")
                                                             if np.isfinite(x)])
        reps = out["config_id"].map(vals).apply(lambda v: v if isinstance(v, list) else [])
        n = reps.apply(len)
        combine = max if m in PEAK_METRICS else (lambda v: float(np.mean(v)))
        agg = reps.apply(lambda v, f=combine: f(v) if v else np.nan)
        cols[m] = agg.where(ok & (n > 0), out[m])
        cols[f"{m}_reps"], cols[f"{m}_n"] = reps, n
    peaks_ci = [f"{m}_ci95_{b}" for m in PEAK_METRICS for b in ("low", "high")]  # a maximum has no t-interval
    out = out.drop(columns=[c for c in [*cols, *peaks_ci] if c in out.columns])
    out = pd.concat([out, pd.DataFrame(cols, index=out.index)], axis=1)
    out.loc[ok, "status"] = "ok"
    out["unsteady_n"] = out["config_id"].map(good.groupby("config_id")["unsteady_n"].sum()).fillna(0).astype(int)
    if "machine" in runs.columns:  # the machines of the repetitions (a configuration may span two)
        joined = good.groupby("config_id")["machine"].agg(
            lambda m: MACHINES_JOIN.join(sorted({p for v in m.dropna() for p in str(v).split(MACHINES_JOIN)}))
            or None)
        out["machine"] = out["config_id"].map(joined).where(ok, out["machine"])
    return out


def rep_points(df: pd.DataFrame, metric: str, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """x positions (row index) and values of the repetitions of rows that have 2 to ``MIN_INTERVAL_REPEATS - 1``
    of them (drawn as points instead of an interval), for ``ax.plot(x, y, ...)``."""
    col = f"{metric}_reps"
    if col not in df.columns:
        return np.array([]), np.array([])
    xs, ys = [], []
    for i, v in enumerate(df[col]):
        if isinstance(v, list) and 2 <= len(v) < MIN_INTERVAL_REPEATS:
            xs += [i] * len(v)
            ys += [x * scale for x in v]
    return np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)


def drawn_cells(df: pd.DataFrame) -> list[str]:
    """Every cell a figure's rows stand for (all repetitions of a collapsed configuration)."""
    if df.empty:
        return []
    if "repeat_cell_ids" not in df.columns:
        return list(df["cell_id"])
    return [c for ids, cid in zip(df["repeat_cell_ids"], df["cell_id"], strict=True)
            for c in (str(ids).split(",") if isinstance(ids, str) and ids else [cid])]


def interval(df: pd.DataFrame, metric: str, scale: float = 1.0) -> np.ndarray | None:
    """``[[mean - low], [high - mean]]`` of a metric's 95% intervals (rows without one, or with fewer than
    ``MIN_INTERVAL_REPEATS`` repetitions: 0), for ``yerr``; None when no row has one."""
    lo, hi = f"{metric}_ci95_low", f"{metric}_ci95_high"
    if lo not in df.columns or metric not in df.columns:
        return None
    v = finite(df[metric]) * scale
    low, high = finite(df[lo]) * scale, finite(df[hi]) * scale
    if f"{metric}_n" in df.columns:  # few repetitions: drawn as points (rep_points), not as a t-interval
        few = finite(df[f"{metric}_n"]) < MIN_INTERVAL_REPEATS
        low, high = np.where(few, np.nan, low), np.where(few, np.nan, high)
    if not np.isfinite(low).any():
        return None
    return np.vstack([np.nan_to_num(v - low), np.nan_to_num(high - v)])



def training_only(tables: Tables) -> tuple[Tables, list[str]]:
    """The tables without cells that do not train (``thermal-calibration``, ``collectives``: no model, no training
    metrics), which no training figure draws as a model; and a note naming them. LoRA cells train (fine-tuning): they
    are drawn, as configurations of their own (:func:`config_key`, :func:`config_label`)."""
    runs = tables.get("runs")
    if runs is None or runs.empty or "kind" not in runs.columns:
        return tables, []
    other = runs[~runs["kind"].fillna(DEFAULT_KIND).astype(str).isin(kinds_where(trains_model=True))]
    if other.empty:
        return tables, []
    drop = set(other["cell_id"])
    out = {n: (t[~t["cell_id"].isin(drop)] if isinstance(t, pd.DataFrame) and "cell_id" in t.columns else t)
           for n, t in tables.items()}
    if "configs" in out and isinstance(out["configs"], pd.DataFrame) and "config_id" in out["configs"].columns:
        out["configs"] = out["configs"][~out["configs"]["config_id"].isin(set(config_ids(other)))]
    kinds = ", ".join(f"{n} {k}" for k, n in other["kind"].value_counts().sort_index().items())
    return out, [f"{len(drop)} non-training cell{'s' if len(drop) > 1 else ''} not drawn ({kinds})"]

#!/usr/bin/env python
"""Layout efficiency: every parallel layout of the engine beside the best peers, per run and GPU count, each figure a
ratio within one run (the same machine, one cell after another).

    python bench/layout_efficiency.py RUN [RUN ...] [--csv OUT.csv]

A RUN is a sweep's results folder (``<results_dir>/<sweep>``, what bench/gpu/layouts.sh brings back): its
``tables/`` when built (``snakemake figures``), else its cells' records read directly. Every sweep is one run; the
4-GPU runs are config/reference/h100x4-layouts-{a,b,c}.yaml (and the H200 twins), the 1- and 2-GPU ones any sweep
with engine and peer cells (e.g. results/reference/h200x1-peers-2026-11-25/h200x1-peers). Per run and GPU count it
prints one row per cell that ran (``ok``), fastest first:

* ``tok/s/GPU``, ``MFU`` (full attention, the engine's formula for every cell), ``J/token`` (GPU energy over the
  measured steps), the step time and its standard deviation over the measured steps;
* ``x best``: tokens/s per GPU over the best engine layout of the run at the same global batch, and ``x peer``: the
  same over the best peer (a ``command`` cell) at that batch;
* from the engine's traced step (one per cell; peers have none), means over the traced ranks as a share of the
  measured step: ``coll%`` exposed collective time (communication under no compute kernel, the pipeline's
  point-to-point kernels left out), ``p2p%`` the pipeline's send/recv kernels (transfers and the waits for the
  neighbouring stage: the bubble shows up here), ``idle%`` the step minus the busy kernel time (``idle_min``:
  the GPU ran nothing; bench/step_breakdown.py), and ``bubble%`` for 1F1B pipelines, the idle share
  ``(pp - 1) / (m + pp - 1)`` that its schedule imposes with equal stages (``m`` micro-batches a step).

* ``comm/link`` for tensor-parallel cells without pipeline: the traced step's collective and peer-copy kernel time
  (all-gather, reduce-scatter, the overlap mechanisms' copies and sends) over the time the same collectives take at
  NCCL's speed measured on this GPU type (the committed ``collectives`` sets' curves, group and message size of each
  call from the cell's workload): 1.00 is the links' own speed, above it time the engine adds (``-`` without a curve
  of this GPU type and group size).

Then the verdicts where a run holds the cells they compare: the engine's best layout over torchtitan's best at the
same global batch (target >= 1.10) and, at 4 GPUs and global batch >= 32, TP4+SP and PP4 (any split, schedule or
overlap) over the engine's best layout (targets 0.85 and 0.80), each with the exposed communication, pipeline and
idle shares of its traced step beside the gap; and the noise: configurations measured in more than one run, with
their spread. Ratios across runs are never formed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_breakdown import rank_breakdown  # noqa: E402

#: targets of the layout comparison (ratios of tokens/s per GPU within one run)
TARGET_OVER_TITAN, TARGET_TP4, TARGET_PP4, MIN_GB_LAYOUT_TARGETS = 1.10, 0.85, 0.80, 32
RUN_COLUMNS = ["cell_id", "kind", "status", "tp", "pp", "dp", "zero_stage", "sequence_parallel", "overlap",
               "recompute", "repeat", "world_size", "micro_batch", "global_batch", "grad_accum", "iteration_time_s",
               "iteration_time_std_s", "tokens_per_s_per_gpu", "mfu_full", "energy_per_token_j"]


def load_run(sweep_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, kernels) of one sweep folder: its tables, else every cell's record (calorimeter.analysis.cell)."""
    tables = sweep_dir / "tables"
    if (tables / "runs.parquet").is_file():
        runs = pd.read_parquet(tables / "runs.parquet")
        kpath = tables / "kernels.parquet"
        return runs, pd.read_parquet(kpath) if kpath.is_file() else pd.DataFrame()
    from calorimeter.analysis.cell import cell_tables

    parts = [cell_tables(p.parent) for p in sorted((sweep_dir / "cells").glob("*/run.json"))]
    if not parts:
        raise SystemExit(f"{sweep_dir}: neither tables/runs.parquet nor cells/*/run.json")
    kernels = [t.kernels for t in parts if not t.kernels.empty]
    return (pd.concat([t.runs for t in parts], ignore_index=True),
            pd.concat(kernels, ignore_index=True) if kernels else pd.DataFrame())


#: kernel categories of a tensor-parallel step's communication (NCCL's gathers and reduce-scatters, the symmetric-memory
#: copies and barriers, the ring's sends): with pp = 1 none of them is a pipeline's
TP_COMM_CATEGORIES = ("all_gather", "reduce_scatter", "other_comm", "send_recv")
LINK_COLLECTIVES = ("all_gather", "reduce_scatter")


def link_seconds(sweep_dir: Path, runs: pd.DataFrame) -> dict[str, float]:
    """Per tensor-parallel engine cell without pipeline: the seconds a step its all-gathers and reduce-scatters take at
    NCCL's measured speed on the cell's GPU type (the committed ``collectives`` sets), from its workload's calls; cells
    whose GPU type has no curve of that group size are left out."""
    from calorimeter.plan.cell import Cell
    from calorimeter.plan.hardware import get_profile
    from calorimeter.plan.work import workload
    from calorimeter.projection.calibration import collective_points
    from calorimeter.projection.catalogue import default_collectives, repo_root
    from calorimeter.projection.collectives import CollectiveCurves, Network
    from calorimeter.projection.measured import register_recorded_models
    from calorimeter.records.run_record import read_run_record

    cand = runs[(runs.kind == "train") & (runs.status == "ok") & (runs.tp > 1) & (runs.pp == 1)]
    if cand.empty:
        return {}
    root = repo_root()
    points = collective_points([str(root / s) for s in default_collectives(root)])
    register_recorded_models(sweep_dir, cand)
    out: dict[str, float] = {}
    for cid in cand.cell_id:
        cell = Cell.from_dict(read_run_record(sweep_dir / "cells" / cid / "run.json").cell)
        mine = points[(points.hardware == cell.hardware) & (points.group == cell.tp)]
        if mine.empty:
            continue
        hw = get_profile(cell.hardware)
        curves = CollectiveCurves(mine, hw, Network.from_profile(hw))
        ops = [op for op in workload(cell).stages[0].comm if op.collective in LINK_COLLECTIVES and op.group > 1]
        out[cid] = sum(curves.op_time(op)[0] for op in ops)
    return out


def label(row: pd.Series) -> str:
    """``ZeRO-1 dp4``, ``TP2-DP2+SP ov``, ``TP4+SP ov symm mb4`` (micro-batch 4), ``PP4 dualpipev 3.5.4.4``,
    ``PP4 balanced``, ``PP4 rc-full r1`` (a repetition), ``peer torchtitan``."""
    cid = str(row.cell_id)
    if row.kind == "command":
        return "peer " + cid.removeprefix("cmd-").split("_", 1)[0]
    tp, pp, dp = int(row.tp), int(row.pp), int(row.dp)
    if tp == 1 and pp == 1:
        name = f"ZeRO-{int(row.zero_stage)} dp{dp}"
    else:
        name = "-".join(p for p in (f"TP{tp}" if tp > 1 else "", f"PP{pp}" if pp > 1 else "",
                                    f"DP{dp}" if dp > 1 else "") if p)
        name += "+SP" if bool(row.sequence_parallel) else ""
        if int(row.zero_stage) != 1:
            name += f" z{int(row.zero_stage)}"
    extra = [w for w in ("dualpipev",) if f"-{w}_" in cid]
    if "-split" in cid:
        extra.append(cid.split("-split", 1)[1].split("_", 1)[0].split("-", 1)[0])
    if cid.endswith("_pl-balanced") or "_pl-balanced_" in cid:
        extra.append("balanced")
    if bool(row.overlap):  # with the cell's TP overlap mechanism where it names one (ov-on-tpsymm: "ov symm")
        extra.insert(0, "ov " + cid.split("_ov-on-tp", 1)[1].split("_", 1)[0] if "_ov-on-tp" in cid else "ov")
    if row.recompute not in ("none", None) and row.recompute == row.recompute:
        extra.append(f"rc-{row.recompute}")
    mb = row.get("micro_batch")
    if mb == mb and mb is not None and int(mb) != 1:  # a micro-batch other than the runs' usual 1
        extra.append(f"mb{int(mb)}")
    rep = row["repeat"]  # (row.repeat is the Series method)
    if rep == rep and int(rep or 0):
        extra.append(f"r{int(rep)}")
    return " ".join([name, *extra])


def one_f_one_b_bubble(row: pd.Series) -> float:
    """The idle share of a step that 1F1B imposes with equal stages: ``(pp - 1) / (m + pp - 1)``; NaN otherwise."""
    if row.kind != "train" or row.pp is None or row.pp != row.pp:  # a peer's cell has no layout of the engine's
        return float("nan")
    pp, m = int(row.pp), int(row.grad_accum or 0)
    if pp < 2 or m < 1 or "-dualpipev_" in str(row.cell_id):
        return float("nan")
    return (pp - 1) / (m + pp - 1)


def table(runs: pd.DataFrame, kernels: pd.DataFrame, link: dict[str, float] | None = None) -> pd.DataFrame:
    """One row per cell that ran: figures, same-run ratios and trace shares (module docstring); ``link``: each
    tensor-parallel cell's collectives at the links' speed (:func:`link_seconds`)."""
    ok = runs[runs.status == "ok"].copy()
    for c in RUN_COLUMNS:
        if c not in ok:
            ok[c] = float("nan")
    ok = ok[RUN_COLUMNS].reset_index(drop=True)
    ok["layout"] = ok.apply(label, axis=1)
    ok["bubble_pct"] = 100.0 * ok.apply(one_f_one_b_bubble, axis=1)
    if not kernels.empty:
        br = rank_breakdown(kernels, ok)
        br = br[br.n_kernels > 0]  # a CPU rank's trace has no device kernel: nothing to share out
        br["coll_exposed_s"] = (br.comm_exposed_s - br.send_recv_s).clip(lower=0.0)
        shares = br.groupby("cell_id").agg(coll_s=("coll_exposed_s", "mean"), p2p_s=("send_recv_s", "mean"),
                                           idle_s=("idle_min_s", "mean"), step_s=("step_s", "first"),
                                           traced_ranks=("rank", "nunique"))
        for name in ("coll", "p2p", "idle"):
            shares[f"{name}_pct"] = 100.0 * shares[f"{name}_s"] / shares.step_s
        ok = ok.merge(shares[["coll_pct", "p2p_pct", "idle_pct", "traced_ranks"]], left_on="cell_id",
                      right_index=True, how="left")
        if "sum_s" in kernels:
            tpc = kernels[kernels.category.isin(TP_COMM_CATEGORIES)].groupby(["cell_id", "rank"]).sum_s.sum()
            ok["tp_comm_s"] = ok.cell_id.map(tpc.groupby(level="cell_id").mean())
        else:  # a kernels table without per-category kernel sums
            ok["tp_comm_s"] = float("nan")
    else:
        for c in ("coll_pct", "p2p_pct", "idle_pct", "traced_ranks", "tp_comm_s"):
            ok[c] = float("nan")
    ok["link_s"] = ok.cell_id.map(link or {})
    ok["comm_over_link"] = ok.tp_comm_s / ok.link_s
    engine = ok[ok.kind == "train"]
    peers = ok[ok.kind == "command"]
    best_engine = engine.groupby(["world_size", "global_batch"]).tokens_per_s_per_gpu.max()
    best_peer = peers.groupby(["world_size", "global_batch"]).tokens_per_s_per_gpu.max()
    key = list(zip(ok.world_size, ok.global_batch, strict=True))
    ok["x_best"] = ok.tokens_per_s_per_gpu / [best_engine.get(k, float("nan")) for k in key]
    ok["x_peer"] = ok.tokens_per_s_per_gpu / [best_peer.get(k, float("nan")) for k in key]
    return ok.sort_values(["world_size", "global_batch", "tokens_per_s_per_gpu"], ascending=[True, True, False])


def verdicts(t: pd.DataFrame) -> list[str]:
    """The layout targets this run can decide, each with its numbers (module docstring)."""
    out: list[str] = []
    for (world, gb), g in t.groupby(["world_size", "global_batch"]):
        engine, titan = g[g.kind == "train"], g[g.layout.str.startswith("peer torchtitan")]
        if engine.empty:
            continue
        best = engine.iloc[0]
        if not titan.empty:
            tb = titan.iloc[0]
            r = best.tokens_per_s_per_gpu / tb.tokens_per_s_per_gpu
            out.append(f"{world} GPUs, gb {gb}: engine's best ({best.layout}) / torchtitan's best ({tb.layout}) = "
                       f"{r:.3f} (target >= {TARGET_OVER_TITAN}: {'met' if r >= TARGET_OVER_TITAN else 'not met'})")
        if world != 4 or gb < MIN_GB_LAYOUT_TARGETS:
            continue
        for prefix, target in (("TP4+SP", TARGET_TP4), ("PP4", TARGET_PP4)):
            cells = engine[engine.layout.str.startswith(prefix + " ") | (engine.layout == prefix)]
            if cells.empty:
                continue
            c = cells.iloc[0]
            gap = 100.0 * (1.0 - c.x_best)
            bound = f", 1F1B bubble bound {c.bubble_pct:.1f}%" if c.bubble_pct == c.bubble_pct else ""
            link = (f"; its TP communication kernels {c.tp_comm_s:.3f} s a step, {c.link_s:.3f} s at NCCL's measured "
                    f"speed on this GPU type ({c.comm_over_link:.2f}x)") if c.comm_over_link == c.comm_over_link else ""
            out.append(f"4 GPUs, gb {gb}: {c.layout} / {best.layout} = {c.x_best:.3f} (target >= {target}: "
                       f"{'met' if c.x_best >= target else 'not met'}); gap {gap:.1f}% of the best's rate; its traced "
                       f"step: exposed collectives {c.coll_pct:.1f}%, pipeline send/recv {c.p2p_pct:.1f}%, idle "
                       f"{c.idle_pct:.1f}%{bound}{link}")
    return out


def noise(all_rows: pd.DataFrame) -> list[str]:
    """Configurations (same cell id without repetition) measured in more than one run: their spread."""
    out = []
    for _, g in all_rows.groupby("cell_id"):
        if g.run.nunique() < 2:
            continue
        v = g.tokens_per_s_per_gpu
        rates = ", ".join(f"{x:,.0f}" for x in v)
        out.append(f"{g.layout.iloc[0]} (gb {g.global_batch.iloc[0]}): {rates} tokens/s/GPU in runs "
                   f"{', '.join(g.run)}: spread {100.0 * (v.max() - v.min()) / v.mean():.2f}% of the mean")
    return out


def render(t: pd.DataFrame) -> str:
    """The printed table of one run."""
    cols = {"layout": "layout", "global_batch": "gb", "tokens_per_s_per_gpu": "tok/s/GPU", "mfu_full": "MFU",
            "energy_per_token_j": "J/token", "iteration_time_s": "step s", "iteration_time_std_s": "sd",
            "x_best": "x best", "x_peer": "x peer", "coll_pct": "coll%", "p2p_pct": "p2p%", "idle_pct": "idle%",
            "bubble_pct": "bubble%", "comm_over_link": "comm/link"}
    show = t[list(cols)].rename(columns=cols).copy()
    fmt: dict[str, Any] = {"tok/s/GPU": "{:,.0f}".format, "MFU": "{:.1%}".format, "J/token": "{:.4f}".format,
                           "step s": "{:.3f}".format, "sd": "{:.3f}".format, "x best": "{:.3f}".format,
                           "x peer": "{:.3f}".format, "comm/link": "{:.2f}".format}
    for c in ("coll%", "p2p%", "idle%", "bubble%"):
        fmt[c] = "{:.1f}".format
    return show.to_string(index=False, formatters=fmt, na_rep="-")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="sweep results folders, one per run")
    ap.add_argument("--csv", type=Path, help="also write every row (all runs) to this CSV")
    args = ap.parse_args(argv)
    rows = []
    for run in args.runs:
        runs, kernels = load_run(run)
        t = table(runs, kernels, link_seconds(run, runs))
        if t.empty:
            print(f"== {run}: no cell ran", file=sys.stderr)
            continue
        t.insert(0, "run", run.name)
        rows.append(t)
        for world, g in t.groupby("world_size"):
            print(f"== {run.name}: {world} GPU(s), {len(g)} cells (ratios within this run only)")
            print(render(g))
        for line in verdicts(t):
            print("  " + line)
        print()
    if not rows:
        return 1
    every = pd.concat(rows, ignore_index=True)
    spread = noise(every)
    if spread:
        print("== noise: one configuration in several runs")
        print("\n".join("  " + s for s in spread))
    if args.csv:
        every.to_csv(args.csv, index=False)
    print(json.dumps({"runs": len(rows), "cells": len(every)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

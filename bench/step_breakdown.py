#!/usr/bin/env python
"""Where each cell's step goes, from a sweep's tables: the profiled step's kernel trace next to the measured steps.

    python bench/step_breakdown.py results/reference/findings-2026-11-23/h200x2-findings [--match tp2]

Per cell and traced rank it prints the measured step time (``iteration_time_s`` of the runs table: the unprofiled
measured steps), the profiled step's span and its kernel-trace breakdown (interval unions, ``tables/kernels``):
GPU busy, compute, communication, exposed communication (communication under no compute kernel), and two idle
figures: ``idle_prof`` = span - busy in the profiled step (torch.profiler adds host time per op, so this overstates),
and ``idle_min`` = measured step - busy, a lower bound of the time the GPU ran no kernel in an unprofiled step (it
assumes the kernels take as long with and without the profiler). A cell whose ``idle_min`` is a large share of its
step is host-bound: faster kernels or less communication cannot make it faster, fewer launches can. Where the
record has them (records from 2026-11-28 on), ``alloc_retries`` and ``device_mallocs``: what the CUDA caching
allocator did on that rank over the measured steps (retries free the cache and synchronise; each device allocation
is a cudaMalloc), one explanation of idle time that is not kernel launches.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

COLUMNS = ["step_s", "span_s", "busy_s", "compute_s", "comm_s", "comm_exposed_s", "idle_prof_s", "idle_min_s",
           "idle_min_pct", "n_kernels", "alloc_retries", "device_mallocs"]


def breakdown(sweep_dir: Path, match: str = "") -> pd.DataFrame:
    """One row per (cell, traced rank): measured step time and the profiled step's trace breakdown, in seconds."""
    tables = sweep_dir / "tables"
    kernels = pd.read_parquet(tables / "kernels.parquet")
    runs = pd.read_parquet(tables / "runs.parquet", columns=["cell_id", "iteration_time_s"])
    df = rank_breakdown(kernels, runs).merge(allocator(sweep_dir), on=["cell_id", "rank"], how="left")
    if match:
        df = df[df.cell_id.str.contains(match, regex=False)]
    return df.set_index(["cell_id", "rank"])[COLUMNS].sort_index()


def allocator(sweep_dir: Path) -> pd.DataFrame:
    """Per (cell, rank): the allocator's retries and device allocations over the measured steps, from each cell's
    record (``provenance.ranks[].allocator``); no row where the record does not have them."""
    from calorimeter.records.run_record import read_run_record

    rows = []
    for path in sorted((sweep_dir / "cells").glob("*/run.json")):
        record = read_run_record(path)
        for r in record.ranks:
            counts = r.get("allocator")
            if counts:
                rows.append({"cell_id": record.cell_id, "rank": r.get("rank"),
                             "alloc_retries": counts.get("num_alloc_retries"),
                             "device_mallocs": counts.get("num_device_alloc")})
    return pd.DataFrame(rows, columns=["cell_id", "rank", "alloc_retries", "device_mallocs"])


def rank_breakdown(kernels: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """:func:`breakdown` of a kernels and a runs table (``cell_id``, ``iteration_time_s``), one row per (cell,
    traced rank), with the pipeline's point-to-point time (``send_recv_s``: transfers and the waits for the
    neighbouring stage, its bubble included) beside the columns of :data:`COLUMNS`."""
    per_rank = (kernels.groupby(["cell_id", "rank"], as_index=False)
                .first()[["cell_id", "rank", "n_kernels", "busy_s", "compute_s", "comm_s", "comm_exposed_s",
                          "span_s"]])
    p2p = (kernels[kernels.category == "send_recv"].groupby(["cell_id", "rank"], as_index=False)["union_s"].sum()
           .rename(columns={"union_s": "send_recv_s"}))
    df = (per_rank.merge(p2p, on=["cell_id", "rank"], how="left")
          .merge(runs[["cell_id", "iteration_time_s"]], on="cell_id", how="left")
          .rename(columns={"iteration_time_s": "step_s"}))
    df["send_recv_s"] = df.send_recv_s.fillna(0.0)
    df["idle_prof_s"] = df.span_s - df.busy_s
    df["idle_min_s"] = (df.step_s - df.busy_s).clip(lower=0.0)
    df["idle_min_pct"] = 100.0 * df.idle_min_s / df.step_s
    return df


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep_dir", type=Path, help="a sweep's results folder (holds tables/)")
    ap.add_argument("--match", default="", help="keep cells whose id contains this text")
    args = ap.parse_args(argv)
    df = breakdown(args.sweep_dir, args.match)
    if df.empty:
        print(f"no traced cell in {args.sweep_dir} matches {args.match!r}", file=sys.stderr)
        return 1
    with pd.option_context("display.width", 250, "display.max_colwidth", 80, "display.max_rows", None):
        print(df.round(3).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Per-rank entry point of the ``collectives`` cell kind (:data:`calorimeter.plan.kinds.KINDS`)."""

from __future__ import annotations

import math
import time

import torch

from calorimeter.collectives.measure import SweepSpec, measure
from calorimeter.collectives.table import write_table
from calorimeter.plan.json_types import JsonObject
from calorimeter.records.rank import RankContext, RankResult


def summarize(rows: list[JsonObject]) -> JsonObject:
    """Per collective and group size: the largest bus bandwidth (GB/s) and the smallest time (s) measured."""
    out: JsonObject = {}
    for r in rows:
        if r.get("error") or not (r.get("time_s") or 0) > 0:
            continue
        key = f"{r['kind']}_g{r['group']}"
        cur = out.setdefault(key, {"busbw_max_gbyte_s": 0.0, "latency_min_s": math.inf})
        cur["busbw_max_gbyte_s"] = max(cur["busbw_max_gbyte_s"], float(r["busbw_gbyte_s"]))
        cur["latency_min_s"] = min(cur["latency_min_s"], float(r["time_s"]))
    return out


def run_collectives(ctx: RankContext) -> RankResult:
    """Time the collectives on this rank's group of ranks; rank 0 writes ``collectives.parquet`` into the run's
    folder.

    Message sizes and dtype follow the device (:meth:`SweepSpec.for_device`); each point gets the cell's
    ``warmup_steps`` untimed and ``measured_steps`` timed calls.
    """
    cell, device = ctx.cell, torch.device(ctx.rank.device)
    spec = SweepSpec.for_device(device, warmup=max(cell.warmup_steps, 1), iterations=max(cell.measured_steps, 1))
    t0 = time.time()
    rank = ctx.rank.rank
    progress = (lambda msg: print(f"[collectives] {msg}", flush=True)) if rank == 0 else None
    rows = measure(spec, device, cell.gpus_per_node, progress)
    if rank == 0:
        write_table(rows, ctx.run.root)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return RankResult(kind_metrics={"collectives": summarize(rows), "points": len(rows),
                                    "wall_time_s": time.time() - t0}, peak_memory_bytes=peak)

"""Telemetry overhead: the same cell with the node sampler off, at 50 ms and at 10 ms, interleaved.

Usage (on a GPU machine; works on CPU too, where only host metrics are sampled)::

    python bench/telemetry_overhead.py --out /tmp/overhead [--model llama3-8b --seq 4096 --steps 20 --reps 2]

Each variant runs the full cell (launch, train, record) ``--reps`` times in the order off, 50, 10, off, 50, 10, ...
so that drift (warming GPUs) hits every variant alike. Prints the mean iteration time per variant over all its
measured steps and the overhead relative to telemetry off; writes ``overhead.csv``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

import pandas as pd

from calorimeter.launch.run import run_cell
from calorimeter.launch.settings import launcher_settings
from calorimeter.plan import make_plan
from calorimeter.records.paths import CellPaths

VARIANTS = {"off": {"enabled": False}, "50ms": {"enabled": True, "period_ms": 50},
            "10ms": {"enabled": True, "period_ms": 10}}


def main() -> None:
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--zero", type=int, default=1)
    args = ap.parse_args()
    cfg = {"sweep": "overhead", "hardware": "auto", "results_dir": str(args.out), "memory_check": False,
           "defaults": {"gpus_per_node": "all", "global_batch": 8, "micro_batch": 1, "warmup_steps": 3,
                        "measured_steps": args.steps, "lr": 1e-4},
           "grid": [{"model": args.model, "seq_len": args.seq, "zero_stage": args.zero}]}
    plan = make_plan(cfg)
    pc = plan.runnable[0]
    settings = launcher_settings(plan.config)
    rows = []
    for rep in range(args.reps):
        for name, tel in VARIANTS.items():
            cell = CellPaths(args.out / f"{name}-rep{rep}")
            telemetry = dataclasses.replace(settings.telemetry, **tel, profile_steps=0)
            rec = run_cell(pc.cell, dataclasses.replace(settings, telemetry=telemetry), cell, pc.estimates)
            times = []
            if rec["status"] == "ok":
                steps = pd.read_parquet(cell.steps)
                meas = steps[steps["phase"] == "measured"].groupby("step")["time_s"].max()
                times = list(meas)
            rows.append({"variant": name, "rep": rep, "status": rec["status"], "steps": len(times),
                         "iteration_time_s": statistics.fmean(times) if times else float("nan"),
                         "times": times})
            print(f"{name:>5} rep {rep}: {rec['status']} {rows[-1]['iteration_time_s']:.4f} s/iter", flush=True)
    df = pd.DataFrame(rows)
    df.drop(columns="times").to_csv(args.out / "overhead.csv", index=False)
    pooled = {v: [t for ts in df[df.variant == v]["times"] for t in ts] for v in VARIANTS}
    base = statistics.fmean(pooled["off"]) if pooled["off"] else float("nan")
    print(f"\ncell {pc.cell.cell_id}")
    print(f"{'variant':>8} {'steps':>6} {'mean s/iter':>12} {'median':>9} {'overhead':>9}")
    for v, ts in pooled.items():
        if ts:
            mean = statistics.fmean(ts)
            print(f"{v:>8} {len(ts):>6} {mean:>12.4f} {statistics.median(ts):>9.4f} {100 * (mean / base - 1):>8.2f}%")


if __name__ == "__main__":
    main()

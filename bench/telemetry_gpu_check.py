#!/usr/bin/env python
"""Check the node sampler on a real GPU machine (H100/H200): metrics present, energy, reasons, overhead.

Run with the ``calorimeter`` package on PYTHONPATH (no network needed)::

    PYTHONPATH=src python bench/telemetry_gpu_check.py --out-dir /tmp/telemetry_check

For each sampling period (default 50 ms and 10 ms) it starts the sampler for every GPU of the
node, runs a bf16 matmul load on each GPU for a few seconds in timed steps (2 warmup, N measured,
1 profiled with torch.profiler; written as the pipeline's ``steps.parquet``), idles a second, stops
the sampler, converts the streams to ``telemetry.parquet`` and prints per GPU, through the pipeline's
own analysis path (:class:`calorimeter.analysis.window.GpuSamples`): which metrics were present,
counter-vs-trapezoid energy over the measured phase and per step, the throttle share of each reason
from the sampled bitmask next to NVML's accumulated throttle time (their difference), the data
quality, and the sampler's overhead. Everything is written under ``--out-dir/period_<ms>ms/`` plus
``summary.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


def _matmul_setup(n: int) -> tuple[list[Any], Any]:
    import torch

    mats = []
    for d in range(torch.cuda.device_count()):
        with torch.cuda.device(d):
            a = torch.randn(n, n, device=f"cuda:{d}", dtype=torch.bfloat16)
            b = torch.randn(n, n, device=f"cuda:{d}", dtype=torch.bfloat16)
            mats.append((a, b, torch.empty_like(a)))
    return mats, torch


def _sync_all(torch: Any) -> None:
    for d in range(torch.cuda.device_count()):
        torch.cuda.synchronize(d)


def _launch(mats: list[Any], iters: int, torch: Any) -> None:
    for _ in range(iters):
        for a, b, c in mats:
            torch.matmul(a, b, out=c)


def _calibrate(mats: list[Any], torch: Any, step_s: float) -> tuple[int, float]:
    _launch(mats, 3, torch)
    _sync_all(torch)
    t0 = time.perf_counter()
    _launch(mats, 10, torch)
    _sync_all(torch)
    per_iter = (time.perf_counter() - t0) / 10
    return max(1, int(step_s / per_iter)), per_iter


def run_period(out: Path, period_s: float, load_s: float, size: int, step_s: float) -> dict[str, Any]:
    """One sampler run at ``period_s`` with a matmul load; returns the per-GPU report."""
    from calorimeter.analysis.window import GpuSamples
    from calorimeter.telemetry import (
        breakdown_traces,
        convert_node,
        decode_clock_event_reasons,
        read_stream,
        start_node_sampler,
    )
    from calorimeter.telemetry.reasons import ACCUMULATED_REASON_FIELDS
    from calorimeter.telemetry.schema import GPU_METRIC_NAMES

    mats, torch = _matmul_setup(size)
    iters, per_iter = _calibrate(mats, torch, step_s)
    n_gpus = len(mats)
    tflops = 2 * size**3 * n_gpus / per_iter / 1e12 / max(n_gpus, 1)
    n_measured = max(2, int(load_s / step_s))
    out.mkdir(parents=True, exist_ok=True)
    sampler = start_node_sampler(out, period_s=period_s, label="check", stop_at_exit=True)
    time.sleep(1.0)  # idle baseline
    steps: list[dict[str, Any]] = []

    def timed_step(step: int, phase: str, n: int) -> None:
        _sync_all(torch)
        b, pb = time.time(), time.perf_counter()
        _launch(mats, n, torch)
        _sync_all(torch)
        steps.append({"rank": 0, "step": step, "phase": phase, "time_s": time.perf_counter() - pb, "t_begin_s": b,
                      "t_end_s": time.time()})

    for step in range(2):
        timed_step(step, "warmup", iters)
    for step in range(2, 2 + n_measured):
        timed_step(step, "measured", iters)
    trace_dir = out / "trace"
    trace_dir.mkdir(exist_ok=True)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        timed_step(2 + n_measured, "profiled", max(1, iters // 4))
    prof.export_chrome_trace(str(trace_dir / "rank-0.json"))
    time.sleep(1.0)  # idle tail
    sampler.stop()
    steps_df = pd.DataFrame(steps)
    steps_df.to_parquet(out / "steps.parquet", index=False)
    report = convert_node(out)
    meta = sampler.metadata() or {}
    tidy = pd.read_parquet(report["telemetry"])
    host = read_stream(sampler.paths.host_stream).table.to_pandas()
    m = steps_df[steps_df["phase"] == "measured"]
    begin, end = float(m["t_begin_s"].min()), float(m["t_end_s"].max())
    kernels = breakdown_traces([trace_dir / "rank-0.json"])

    loop = host[host["metric"] == "sampler_loop_s"]
    gaps = np.diff(np.sort(loop["time_s"].to_numpy()))
    gpus: dict[str, Any] = {}
    for gpu, g in tidy.groupby("gpu_index"):
        gs = GpuSamples(g, period_s)
        present = {c: float(g[c].notna().mean()) for c in g.columns
                   if c in GPU_METRIC_NAMES or c.endswith("_raw")}
        masks = [int(x) for x in g["clock_event_reasons"].dropna()]
        seen = sorted({r for mk in masks for r in decode_clock_event_reasons(mk)})
        phase = gs.window_stats(begin, end)
        per_step = [gs.window_stats(float(s.t_begin_s), float(s.t_end_s))["energy_rel_diff"]
                    for s in m.itertuples(index=False)]
        diff = np.abs(np.asarray(per_step, dtype=float))
        throttle = {r: {"sampled_frac": phase[f"throttle_{r}_frac"],
                        "accumulated_frac": phase[f"throttle_{r}_counter_frac"],
                        "accumulated_minus_sampled": phase[f"throttle_{r}_counter_frac"] - phase[f"throttle_{r}_frac"]}
                    for r in ACCUMULATED_REASON_FIELDS}
        gpus[str(gpu)] = {
            "metrics_present_fraction": present,
            "measured_phase": phase,
            "per_step_abs_rel_diff_median": float(np.nanmedian(diff)) if diff.size else math.nan,
            "per_step_abs_rel_diff_max": float(np.nanmax(diff)) if diff.size else math.nan,
            "reasons_seen": seen,
            "throttle_sampled_vs_accumulated": throttle,
            "read_s_mean": float(g["read_s"].mean()),
        }
    return {
        "period_s": period_s,
        "n_gpus": n_gpus,
        "matmul_size": size,
        "matmul_tflops_per_gpu": tflops,
        "iters_per_step": iters,
        "n_measured_steps": n_measured,
        "measured_window_s": end - begin,
        "sampler": {
            "n_samples": meta.get("stats", {}).get("n_samples"),
            "n_missed_deadlines": meta.get("stats", {}).get("n_missed_deadlines"),
            "loop_s": meta.get("stats", {}).get("loop_s"),
            "gpu_call_ms": meta.get("stats", {}).get("gpu_call_ms"),
            "slow_every": meta.get("slow_every"),
            "achieved_period_median_s": float(np.median(gaps)) if gaps.size else math.nan,
            "achieved_period_p99_s": float(np.quantile(gaps, 0.99)) if gaps.size else math.nan,
        },
        "unavailable": meta.get("unavailable", []),
        "gpu_library": meta.get("gpu_library"),
        "gpu_info": meta.get("gpus"),
        "streams": report["streams"],
        "kernels_profiled_step": kernels.drop(columns=["file"]).to_dict(orient="records"),
        "gpus": gpus,
    }


def _print(rep: dict[str, Any]) -> None:
    s = rep["sampler"]
    print(
        f"\n=== period {rep['period_s'] * 1000:.0f} ms: {rep['n_gpus']} GPU(s), "
        f"{rep['matmul_tflops_per_gpu']:.0f} TFLOP/s/GPU matmul, "
        f"{rep['n_measured_steps']} measured steps ==="
    )
    loop = s["loop_s"] or {}
    print(
        f"sampler: {s['n_samples']} samples, missed deadlines {s['n_missed_deadlines']}, achieved period "
        f"median {s['achieved_period_median_s'] * 1e3:.2f} ms p99 {s['achieved_period_p99_s'] * 1e3:.2f} ms, "
        f"loop time per sample mean {1e3 * (loop.get('mean') or math.nan):.3f} ms "
        f"p99 {1e3 * (loop.get('p99') or math.nan):.3f} ms "
        f"max {1e3 * (loop.get('max') or math.nan):.3f} ms"
    )
    for dev, calls in (s.get("gpu_call_ms") or {}).items():
        costly = {k: round(v["mean_ms"], 3) for k, v in calls.items() if v["calls"] and v["mean_ms"] > 0.05}
        print(
            f"  {dev}: NVML/Zeus calls over 0.05 ms (mean ms): {costly or 'none'}; slow reads every "
            f"{s.get('slow_every')} samples"
        )
    if rep["unavailable"]:
        print("unavailable:")
        for u in rep["unavailable"]:
            print(f"  {u['metric']:<24} {u['device']:<6} {u['reason']}")
    for gpu, g in rep["gpus"].items():
        missing = [m for m, f in g["metrics_present_fraction"].items() if f == 0.0]
        partial = {m: round(f, 3) for m, f in g["metrics_present_fraction"].items() if 0.0 < f < 1.0}
        print(
            f"GPU {gpu}: missing {missing or 'none'}; partially present {partial or 'none'}; "
            f"read {g['read_s_mean'] * 1e3:.3f} ms/sample"
        )
        m = g["measured_phase"]
        print(
            f"  measured phase {rep['measured_window_s']:.2f} s: counter {m['energy_counter_j']:.1f} J over "
            f"{m['energy_counter_s']:.2f} s, trapezoid({m['power_source']}) {m['energy_trapezoid_j']:.1f} J, "
            f"mean-power rel diff {m['energy_rel_diff']:+.4f}; mean {m['power_avg_w']:.0f} W "
            f"peak {m['power_peak_w']:.0f} W, temp mean {m['temp_avg_c']:.1f} peak {m['temp_peak_c']:.0f} C, "
            f"HBM peak {m['hbm_temp_peak_c']} C, SM clock mean {m['sm_clock_avg_mhz']:.0f} "
            f"min {m['sm_clock_min_mhz']:.0f} MHz; data {m['data_quality']} {m['quality_notes']}"
        )
        print(
            f"  per-step |rel diff| median {g['per_step_abs_rel_diff_median']:.4f} "
            f"max {g['per_step_abs_rel_diff_max']:.4f}"
        )
        print(f"  reasons seen {g['reasons_seen']}")
        for r, v in g["throttle_sampled_vs_accumulated"].items():
            print(f"  throttle {r:<24} sampled {v['sampled_frac']:.4f} accumulated {v['accumulated_frac']:.4f} "
                  f"difference {v['accumulated_minus_sampled']:+.4f}")
    for k in rep["kernels_profiled_step"]:
        print(
            f"  kernels (profiled step, device {k['device']}): busy {k['busy_s'] * 1e3:.2f} ms, "
            f"gemm {k['gemm_attention_sum_s'] * 1e3:.2f} ms, other {k['other_sum_s'] * 1e3:.2f} ms"
        )


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--periods-ms", type=float, nargs="+", default=[50.0, 10.0])
    p.add_argument("--load-s", type=float, default=5.0, help="measured load per period")
    p.add_argument("--step-s", type=float, default=0.25, help="target duration of one step")
    p.add_argument("--size", type=int, default=8192, help="matmul size")
    a = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU machine", file=sys.stderr)
        return 2
    reports = []
    for ms in a.periods_ms:
        rep = run_period(a.out_dir / f"period_{ms:g}ms", ms / 1000.0, a.load_s, a.size, a.step_s)
        _print(rep)
        reports.append(rep)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    (a.out_dir / "summary.json").write_text(json.dumps(reports, indent=2, default=str))
    print(f"\nwrote {a.out_dir / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Check the node sampler on a real GPU machine (H100/H200): metrics present, energy, reasons, overhead.

Run with the ``calorimeter`` package on PYTHONPATH (no network needed)::

    PYTHONPATH=src python bench/telemetry_gpu_check.py --out-dir /tmp/telemetry_check

For each sampling period (default 50 ms and 10 ms) it starts the sampler for every GPU of the
node, runs a bf16 matmul load on each GPU for a few seconds in steps bracketed by step markers
(2 warmup, N measured, 1 profiled with torch.profiler), idles a second, stops the sampler,
converts the streams to ``telemetry.parquet`` and prints per GPU: which metrics were present,
counter-vs-integral energy over the measured phase and per step, throttle reasons seen, and the
sampler's overhead. Everything is written under ``--out-dir/period_<ms>ms/`` plus
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
    """One sampler session at ``period_s`` with a matmul load; returns the per-GPU report."""
    from calorimeter.telemetry import (
        StepMarker,
        ZeusEnergyWindows,
        breakdown_traces,
        convert_node,
        decode_clock_event_reasons,
        phase_windows,
        read_step_markers,
        read_stream,
        reason_fractions,
        start_node_sampler,
        step_windows,
        window_summary,
    )
    from calorimeter.telemetry.schema import GPU_METRIC_NAMES

    mats, torch = _matmul_setup(size)
    iters, per_iter = _calibrate(mats, torch, step_s)
    n_gpus = len(mats)
    tflops = 2 * size**3 * n_gpus / per_iter / 1e12 / max(n_gpus, 1)
    n_measured = max(2, int(load_s / step_s))
    out.mkdir(parents=True, exist_ok=True)
    sampler = start_node_sampler(out, period_s=period_s, session="check", stop_at_exit=True)
    time.sleep(1.0)  # idle baseline
    zeus = ZeusEnergyWindows(gpu_indices=None, sync_execution_with="torch")
    marker = StepMarker(out / "markers", rank=0, local_rank=0, sync=lambda: _sync_all(torch))
    step = 0
    for _ in range(2):
        with marker.step(step, "warmup"):
            _launch(mats, iters, torch)
        step += 1
    zeus.begin("measured")
    for _ in range(n_measured):
        with marker.step(step, "measured"):
            _launch(mats, iters, torch)
        step += 1
    zw = zeus.end("measured")
    trace_dir = out / "trace"
    trace_dir.mkdir(exist_ok=True)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof, marker.step(step, "profiled"):
        _launch(mats, max(1, iters // 4), torch)
    prof.export_chrome_trace(str(trace_dir / "rank-0.json"))
    marker.close()
    time.sleep(1.0)  # idle tail
    sampler.stop()
    report = convert_node(out)
    meta = sampler.metadata() or {}
    tidy = pd.read_parquet(report["telemetry"])
    host = read_stream(sampler.paths.host_stream).table.to_pandas()
    markers = read_step_markers(out / "markers")
    steps = step_windows(markers)
    phases = phase_windows(markers)
    per_step = window_summary(tidy, steps[steps["phase"] == "measured"])
    per_phase = window_summary(tidy, phases)
    kernels = breakdown_traces([trace_dir / "rank-0.json"])

    loop = host[host["metric"] == "sampler_loop_s"]
    gaps = np.diff(np.sort(loop["time_s"].to_numpy()))
    gpus: dict[str, Any] = {}
    for gpu, g in tidy.groupby("gpu_index"):
        present = {m: float(g[m].notna().mean()) for m in GPU_METRIC_NAMES if m in g and not m.endswith("_kib")}
        for m in ("nvlink_tx_kib_raw", "nvlink_rx_kib_raw"):
            present[m.replace("_raw", "")] = float(g[m].notna().mean())
        masks = [int(x) for x in g["clock_event_reasons"].dropna()]
        seen = sorted({r for m in masks for r in decode_clock_event_reasons(m)})
        ph = per_phase[(per_phase["gpu_index"] == gpu) & (per_phase["window"] == "measured")]
        st = per_step[per_step["gpu_index"] == gpu]
        gpus[str(gpu)] = {
            "metrics_present_fraction": present,
            "measured_phase": ph.drop(columns=["window", "step", "phase"]).iloc[0].to_dict() if len(ph) else None,
            "per_step_abs_rel_diff_median": float(st["energy_rel_diff"].abs().median()) if len(st) else math.nan,
            "per_step_abs_rel_diff_max": float(st["energy_rel_diff"].abs().max()) if len(st) else math.nan,
            "reasons_seen": seen,
            "reason_fractions": reason_fractions(masks),
            "read_s_mean": float(g["read_s"].mean()),
            "zeus_window_energy_j": zw.gpu_energy_j.get(int(gpu)),
        }
    return {
        "period_s": period_s,
        "n_gpus": n_gpus,
        "matmul_size": size,
        "matmul_tflops_per_gpu": tflops,
        "iters_per_step": iters,
        "n_measured_steps": n_measured,
        "sampler": {
            "n_samples": meta.get("stats", {}).get("n_samples"),
            "n_missed_deadlines": meta.get("stats", {}).get("n_missed_deadlines"),
            "loop_s": meta.get("stats", {}).get("loop_s"),
            "gpu_call_ms": meta.get("stats", {}).get("gpu_call_ms"),
            "slow_every": meta.get("slow_every"),
            "achieved_period_median_s": float(np.median(gaps)) if gaps.size else math.nan,
            "achieved_period_p99_s": float(np.quantile(gaps, 0.99)) if gaps.size else math.nan,
        },
        "zeus_window": {"time_s": zw.time_s, "gpu_energy_j": zw.gpu_energy_j, "reason": zw.unavailable_reason},
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
    print(f"zeus window: {rep['zeus_window']}")
    for gpu, g in rep["gpus"].items():
        missing = [m for m, f in g["metrics_present_fraction"].items() if f == 0.0]
        partial = {m: round(f, 3) for m, f in g["metrics_present_fraction"].items() if 0.0 < f < 1.0}
        print(
            f"GPU {gpu}: missing {missing or 'none'}; partially present {partial or 'none'}; "
            f"read {g['read_s_mean'] * 1e3:.3f} ms/sample"
        )
        m = g["measured_phase"]
        if m:
            print(
                f"  measured phase {m['duration_s']:.2f} s: counter {m['counter_energy_j']:.1f} J, "
                f"integral({m['power_source']}) {m['integral_energy_j']:.1f} J, "
                f"rel diff {m['energy_rel_diff']:+.4f}; "
                f"zeus {g['zeus_window_energy_j']}; mean {m['mean_power_w']:.0f} W max {m['max_power_w']:.0f} W, "
                f"temp mean {m['mean_gpu_temp_c']:.1f} max {m['max_gpu_temp_c']:.0f} C, "
                f"HBM max {m['max_hbm_temp_c']} C, "
                f"SM clock mean {m['mean_sm_clock_mhz']:.0f} min {m['min_sm_clock_mhz']:.0f} MHz"
            )
        print(
            f"  per-step |rel diff| median {g['per_step_abs_rel_diff_median']:.4f} "
            f"max {g['per_step_abs_rel_diff_max']:.4f}"
        )
        fr = {k: round(v, 3) for k, v in g["reason_fractions"].items() if v}
        print(f"  reasons seen {g['reasons_seen']}; fractions {fr}")
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

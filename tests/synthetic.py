"""Synthetic sweep tables (runs, gpus, steps, kernels, timeseries) for figure tests and bench/figures_bench.py.

Numbers are plausible, not measured: deterministic from a seed, shaped like the study (rear GPUs hotter, deeper
pipelines throttle more, larger micro-batches draw more power). Some planned cells are marked OOM or failed so
that figures show their bands.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pandas as pd

from calorimeter.analysis.cell import efficiency_metrics, kernel_metrics
from calorimeter.analysis.tables import add_normalized_efficiency, plan_row
from calorimeter.analysis.window import THROTTLE_COLUMNS
from calorimeter.telemetry.kernels import CATEGORIES, COMM_CATEGORIES
from calorimeter.telemetry.reasons import REASON_NAMES

PEAK_TFLOPS = {"h200": 989.0, "h100": 989.0}


def _rng(cell_id: str, seed: int) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(cell_id.encode()) + seed)


def synthetic_tables(plan_cells: list[dict[str, Any]], seed: int = 0, timeseries_bins: int = 60,
                     oom_every: int = 11, failed_every: int = 37, run_pruned: bool = False) -> dict[str, pd.DataFrame]:
    """Tables of a sweep whose planned cells all ran (every ``oom_every``-th OOM, every ``failed_every``-th
    failed); pruned cells stay pruned, except with ``run_pruned`` those pruned for another reason than memory
    (e.g. an engine feature not implemented yet) run as if planned."""
    runs, gpus, steps, kernels, series = [], [], [], [], []
    planned = 0
    for c in plan_cells:
        memory = any("memory" in r for r in c.get("reasons") or [])
        if c.get("status") == "pruned" and (memory or not run_pruned):
            runs.append(plan_row(c))
            continue
        planned += 1
        cid = c["cell_id"]
        rng = _rng(cid, seed)
        row = plan_row(c)
        if planned % oom_every == 0 or planned % failed_every == 0:
            row.update(status="oom" if planned % oom_every == 0 else "failed",
                       reason="rank 0: CUDA out of memory" if planned % oom_every == 0 else "rank 3: error")
            runs.append(row)
            continue
        world, pp, gpn = int(c["world_size"]), int(c["pp"]), int(c["gpus_per_node"])
        mb, tp = int(c["micro_batch"]), int(c["tp"])
        mfu = float(np.clip(0.42 - 0.012 * pp - 0.01 * np.log2(tp) + 0.015 * np.log2(mb) + rng.normal(0, 0.02),
                            0.05, 0.7))
        flops = float(c.get("model_flops_per_iteration") or 1e15)
        peak = PEAK_TFLOPS.get(c["hardware"], 989.0)
        it = flops / (world * peak * 1e12 * mfu)
        sps = c["global_batch"] / it
        row.update(status="ok", reason="", iteration_time_s=it, samples_per_s=sps,
                   tokens_per_s=sps * c["seq_len"], tokens_per_s_per_gpu=sps * c["seq_len"] / world,
                   model_tflops_per_gpu=flops / it / world / 1e12, mfu_full=mfu, measured_steps=5,
                   tflops_per_gpu=flops / it / world / 1e12 * (4 / 3 if c["recompute"] != "none" else 1))
        per_stage = max(world // pp, 1)
        g_rows = []
        thr = min(0.9, 0.02 * pp + 0.05 * np.log2(mb) + (0.1 if c["overlap"] else 0))
        for g in range(world):
            node, local = divmod(g, gpn)
            rear = local / max(gpn - 1, 1)
            temp = 48 + 14 * rear + 3 * np.log2(mb) + 0.3 * pp + rng.normal(0, 1.5)
            power = 430 + 120 * mfu + 25 * np.log2(mb) + rng.normal(0, 15)
            clock = 1980 - 250 * thr * rear - rng.uniform(0, 40)
            frac = {f"throttle_{n}_frac": 0.0 for n in REASON_NAMES}
            frac["throttle_sw_power_cap_frac"] = float(np.clip(thr * (0.6 + 0.4 * rear) + rng.normal(0, 0.02), 0, 1))
            frac["throttle_sw_thermal_slowdown_frac"] = float(np.clip((temp - 62) / 40, 0, 1))
            frac["throttle_gpu_idle_frac"] = float(np.clip(0.03 * pp / 4 + rng.normal(0, 0.01), 0, 1))
            stage = g // per_stage
            boundary = (g % per_stage == 0) or (g % per_stage == per_stage - 1)
            dur = it * 5
            g_rows.append({
                "cell_id": cid, "node": node, "gpu_index": local, "rank": g, "local_rank": local, "stage": stage,
                "hostname": f"node{node:02d}", "begin_s": 1000.0, "end_s": 1000.0 + dur, "duration_s": dur,
                "samples_received": int(dur / 0.05), "power_source": "power_instant_w", "power_avg_w": power,
                "power_peak_w": power + 80 + 30 * np.log2(mb) + rng.uniform(0, 40), "temp_avg_c": temp,
                "temp_peak_c": temp + 4 + rng.uniform(0, 4), "hbm_temp_avg_c": temp + 5,
                "hbm_temp_peak_c": temp + 9, "sm_clock_avg_mhz": clock, "sm_clock_peak_mhz": 1980.0,
                "sm_clock_min_mhz": clock - 200 * thr, "energy_window_s": dur, "energy_counter_s": dur,
                "energy_counter_j": power * dur,
                "energy_trapezoid_j": power * dur * (1 + rng.normal(0, 0.004)),
                "nvlink_rx_bytes": float(2 ** rng.uniform(30, 36) * (tp > 1 or c["zero_stage"] == 3)),
                "nvlink_tx_bytes": float(2 ** rng.uniform(30, 36)),
                "pcie_rx_bytes": float(2 ** rng.uniform(24, 27) * (8 if pp > 1 and boundary else 1)),
                "pcie_tx_bytes": float(2 ** rng.uniform(24, 27)), **frac,
            })
        gdf = pd.DataFrame(g_rows)
        gpus.append(gdf)
        for r in range(world):
            for s in range(7):
                phase = "warmup" if s < 2 else "measured"
                b = 1000.0 + (s - 2) * it
                steps.append((cid, r, s, phase, 10.0 - 0.3 * s, it, b, b + it, r // per_stage))
        k_rows = []
        for stage in range(pp):
            comp = it * rng.uniform(0.55, 0.8) * (4 / 3 if c["recompute"] != "none" else 1)
            sums = {"gemm_attention": comp * 0.8, "memory_elementwise": comp * 0.15, "normalization": comp * 0.03,
                    "other": comp * 0.02, "send_recv": it * 0.05 * (pp > 1),
                    "all_reduce": it * 0.08 * (tp > 1), "reduce_scatter": it * 0.04 * (c["dp"] > 1),
                    "all_gather": it * 0.04 * (c["dp"] > 1 or c["zero_stage"] == 3),
                    "all_to_all": it * 0.06 * (c["ep"] > 1), "other_comm": 0.0}
            comm = sum(v for k, v in sums.items() if k in COMM_CATEGORIES)
            busy = min(comp + comm * 0.6, it)
            for cat in CATEGORIES:
                k_rows.append({"cell_id": cid, "rank": stage * per_stage, "stage": stage, "device": "0",
                               "category": cat, "is_comm": cat in COMM_CATEGORIES, "sum_s": sums[cat],
                               "union_s": sums[cat] * 0.95, "count": int(sums[cat] * 1e4), "n_kernels": 1000,
                               "busy_s": busy, "compute_s": comp, "comm_s": comm,
                               "comm_exposed_s": busy - comp, "overlap_s": comp + comm - busy, "span_s": it})
        kdf = pd.DataFrame(k_rows)
        kernels.append(kdf)
        t = np.linspace(-2 * it, 5 * it, timeseries_bins)
        for g in g_rows:
            series.append(pd.DataFrame({
                "cell_id": cid, "node": g["node"], "gpu_index": g["gpu_index"], "t_rel_s": t + 2 * it,
                "time_s": 1000.0 + t, "power_w": g["power_avg_w"] + 60 * np.sin(t / max(it, 1e-3) * 6.28),
                "gpu_temp_c": g["temp_avg_c"] - 6 * np.exp(-(t + 2 * it) / max(it, 1e-3)),
                "hbm_temp_c": g["hbm_temp_avg_c"], "sm_clock_mhz": g["sm_clock_avg_mhz"] + 0 * t,
                "clock_event_reasons": pd.array(np.where(np.sin(t * 3 + g["gpu_index"]) > 0.6, 4, 0),
                                                dtype="UInt64"),
                "rank": g["rank"], "stage": g["stage"]}))
        row.update(efficiency_metrics(row, gdf))
        row.update(kernel_metrics(kdf))
        row.update({k: float(gdf[k].mean()) for k in THROTTLE_COLUMNS})
        runs.append(row)
    step_cols = ["cell_id", "rank", "step", "phase", "loss", "time_s", "t_begin_s", "t_end_s", "stage"]
    return {
        "runs": add_normalized_efficiency(pd.DataFrame(runs)),
        "gpus": pd.concat(gpus, ignore_index=True) if gpus else pd.DataFrame(),
        "steps": pd.DataFrame(steps, columns=step_cols),
        "kernels": pd.concat(kernels, ignore_index=True) if kernels else pd.DataFrame(),
        "timeseries": pd.concat(series, ignore_index=True) if series else pd.DataFrame(),
    }

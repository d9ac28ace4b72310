"""calorimeter export --format charllm-ppt: the study artifact's layout and per-rank files from raw records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from conftest import ROOT

from calorimeter.cli import main
from calorimeter.reproduce.charllm import FILES, PSEUDO_KERNELS

H100 = ROOT / "results" / "reference" / "findings-2026-11-23" / "h100x1-findings"
CELL = "llama3-8b-8l_h100-1x1_tp1-pp1-dp1_z1_rc-full_ov-off_mb1-gb8-s2048"


def test_export_layout_files_window_and_manifest(tmp_path: Path) -> None:
    assert main(["export", "--format", "charllm-ppt", str(H100), str(tmp_path)]) == 0
    res = tmp_path / "results"
    opt = res / "optimization-sweep-h100" / "llama3-8b-8l"
    assert sorted(p.name for p in opt.iterdir()) == ["llama3-8b-8l_1_00000", "llama3-8b-8l_1_01000"]
    mbs = res / "microbatch-sweep-h100" / "llama3-8b-8l"
    assert sorted(p.name for p in mbs.iterdir()) == [f"llama3-8b-8l_1_mbs{m}" for m in (1, 2, 4, 8)]
    run = opt / "llama3-8b-8l_1_01000"
    nvlink = {"nvlink_rx_throughput", "nvlink_tx_throughput"}  # one H100 alone: NVML reports no NVLink counter
    assert sorted(p.name for p in run.iterdir()) == sorted(f"{f}_0.csv" for f in set(FILES) - nvlink)
    # one iteration: rank 0's last measured step, samples every ~50 ms inside it
    steps = pd.read_parquet(H100 / "cells" / CELL / "steps.parquet")
    last = steps[steps["phase"] == "measured"].sort_values("step").iloc[-1]
    power = pd.read_csv(run / "gpu_power_0.csv", header=None).to_numpy()
    assert last["t_begin_s"] <= power[0, 0] and power[-1, 0] <= last["t_end_s"]
    assert 0.5 * last["time_s"] < power[-1, 0] - power[0, 0] <= last["time_s"]
    assert np.all(np.diff(power[:, 0]) > 0.03) and 300 < power[:, 1].mean() < 800
    counter = (run / "pcie_rx_bytes_0.csv").read_text().splitlines()[0].split(",")[1]
    assert counter.isdigit()  # full-precision integer counters, never floats or -1
    # kernels: one pseudo-kernel per category, microseconds, summing to calorimeter's category time
    ks = pd.read_csv(res / "kineto-optimization-sweep-h100" / "llama3-8b-8l" / "llama3-8b-8l_1_01000_kernel_stats.csv")
    assert list(ks["kernel_name"]) == list(PSEUDO_KERNELS.values())
    kern = pd.read_parquet(H100 / "cells" / CELL / "kernels.parquet").iloc[0]
    total = ks[[c for c in ks.columns if c.endswith("_total_duration")]].sum().sum()
    assert abs(total - sum(kern[f"{c}_sum_s"] for c in PSEUDO_KERNELS) * 1e6) < 1e-3 and total > 1e5
    man = json.loads((tmp_path / "calorimeter_manifest.json").read_text())
    assert man["model_parallel_configs"] == {"llama3-8b-8l": {"TP1-PP1": 1}}
    c = man["cells"][CELL]
    assert "rank 0: nvlink_rx_throughput not recorded" in c["notes"]  # what is missing is said, not written as -1
    assert c["global_batch"] == 8 and c["status"] == "ok" and c["calorimeter"]["iteration_time_s"] > 0
    assert sorted(c["folders"]) == ["results/microbatch-sweep-h100/llama3-8b-8l/llama3-8b-8l_1_mbs1",
                                    "results/optimization-sweep-h100/llama3-8b-8l/llama3-8b-8l_1_01000"]


def test_pseudo_kernel_names_land_in_the_artifacts_bars() -> None:
    """The artifact sorts a kernel by substrings of its lower-cased name (nccl + collective; gemm; elementwise or
    kernel; norm; else Other); each pseudo-kernel holds exactly the substrings of its intended bar."""
    for cat, name in PSEUDO_KERNELS.items():
        comm = cat in ("all_reduce", "all_gather", "reduce_scatter", "send_recv", "all_to_all")
        assert ("nccl" in name) == comm and "kernel" not in name and "communication" not in name
        assert ("gemm" in name) == (cat == "gemm_attention")
        assert ("elementwise" in name) == (cat == "memory_elementwise") and ("norm" in name) == (cat == "normalization")
    assert "sendrecv" in PSEUDO_KERNELS["all_to_all"]  # the artifact has no AllToAll bar


def test_export_refuses_a_folder_without_records(tmp_path: Path) -> None:
    assert main(["export", "--format", "charllm-ppt", str(tmp_path), str(tmp_path / "o")]) == 2

"""Collecting a cell's telemetry, on a real sample: 2x H200 under a bf16 matmul load, sampled every 50 ms.

The fixture (tests/fixtures/telemetry/h200x2-matmul-50ms, see its README) is the raw output of the node sampler
on a 2x H200 GPU node: Arrow IPC streams, sampler metadata, step markers and a torch.profiler trace.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from calorimeter.analysis.cell import gpu_samples, measured_window, normalize_telemetry, rank_table, sampler_periods
from calorimeter.records.paths import CellPaths, RunPaths
from calorimeter.records.rank import RankReport
from calorimeter.records.run_record import RunRecord
from calorimeter.telemetry.collect import collect_telemetry

FIXTURE = Path(__file__).parent / "fixtures" / "telemetry" / "h200x2-matmul-50ms"


def fixture_steps() -> pd.DataFrame:
    """The fixture's step markers (one JSON line per step) as the pipeline's steps table."""
    m = pd.read_json(FIXTURE / "markers" / "markers-rank0.jsonl", lines=True)
    return m.rename(columns={"begin_s": "t_begin_s", "end_s": "t_end_s", "duration_s": "time_s"})[
        ["rank", "step", "phase", "time_s", "t_begin_s", "t_end_s"]]


@pytest.fixture
def staging(tmp_path: Path) -> RunPaths:
    run = RunPaths(tmp_path)
    run.node(0).mkdir(parents=True)
    for name in ("gpu-check.arrows", "host-check.arrows", "sampler-check.json"):
        shutil.copy(FIXTURE / name, run.node(0) / name)
    shutil.copytree(FIXTURE / "traces", run.traces)
    return run


def test_collect_real_h200_sample(staging: RunPaths, tmp_path: Path) -> None:
    dest = CellPaths(tmp_path / "cell")
    ranks = [RankReport(rank=0, local_rank=0, node=0, hostname="gpu-host-a", stage=0)]
    written = collect_telemetry(staging, dest, ranks)
    assert written == ["telemetry.parquet", "host_telemetry.parquet", "telemetry.json", "kernels.parquet"]
    tel = pd.read_parquet(dest.telemetry)
    assert set(tel["gpu_index"]) == {0, 1} and set(tel["node"]) == {0} and set(tel["hostname"]) == {"gpu-host-a"}
    # Real readings, units in the names; no NVML error value (-1) anywhere.
    assert tel["power_instant_w"].between(50, 1000).all()
    assert tel["gpu_temp_c"].between(20, 95).all()
    assert (tel.select_dtypes("number") != -1).all().all()
    # The H200 reports no instantaneous memory power: recorded as unavailable, with the reason, never invented.
    meta = json.loads(dest.telemetry_json.read_text())["node0"]["sampler"]
    unavailable = json.dumps(meta)
    assert "memory_power_instant_w" in unavailable and "Not Supported" in unavailable
    assert tel["memory_power_instant_w"].isna().all()
    kern = pd.read_parquet(dest.kernels)
    # One traced process that drove both GPUs: one row per device, all GEMM, no communication.
    assert set(kern["rank"]) == {0} and set(kern["stage"]) == {0} and len(kern) == 2
    assert (kern["compute_s"] > 0).all() and (kern["comm_exposed_s"] == 0).all()


def test_energy_counter_and_integral_agree_on_real_data(staging: RunPaths, tmp_path: Path) -> None:
    dest = CellPaths(tmp_path / "cell")
    ranks = [{"rank": 0, "local_rank": 0, "node": 0, "hostname": "h", "stage": 0}]
    collect_telemetry(staging, dest, [RankReport.from_dict(r) for r in ranks])
    tel = normalize_telemetry(pd.read_parquet(dest.telemetry),
                              rank_table(RunRecord({"world_size": 1}, "ok", provenance={"ranks": ranks})))
    samples = gpu_samples(tel, sampler_periods(json.loads(dest.telemetry_json.read_text())))
    begin, end, n = measured_window(fixture_steps())
    assert n == 16 and len(samples) == 2
    for gs in samples.values():
        assert gs.period_s == 0.05  # from the sampler's metadata
        row = gs.window_stats(begin, end)
        # Over seconds of steady load the NVML energy counter and the power integral agree to a few percent
        # (2.5% and 0.2% on the two GPUs of this sample).
        assert abs(row["energy_rel_diff"]) < 0.05, row
        assert row["energy_counter_j"] > 1000 and row["samples_received"] > 80
        assert row["data_quality"] == "good" and row["quality_notes"] == ""

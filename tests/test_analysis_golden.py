"""Golden numbers of the aggregation on a hand-made cell (every expected value computed by hand below)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "analysis"))
import builders  # noqa: E402

from calorimeter.analysis.cell import cell_tables, write_cell_tables  # noqa: E402
from calorimeter.analysis.tables import add_normalized_efficiency, concat_cell_tables, runs_table  # noqa: E402
from calorimeter.analysis.window import hold_shares, time_average  # noqa: E402
from calorimeter.records.paths import CellPaths  # noqa: E402


@pytest.fixture
def tables(tmp_path: Path):
    return cell_tables(builders.write_cell(tmp_path))


def test_gpu_table_time_weighted_average_peak_and_nvml_errors(tables) -> None:
    g = tables.gpus.set_index("gpu_index")
    assert list(g.index) == [0, 1] and list(g["rank"]) == [0, 1] and list(g["stage"]) == [0, 1]
    # measured phase [1, 3]; GPU 0 temperature: samples 1.0:40, 1.5:40, (2.0: -1 = NVML error, dropped), 2.5:60,
    # 3.0:40 -> trapezoid 0.5*40 + 1.0*(40+60)/2 + 0.5*(60+40)/2 = 95 over 2 s = 47.5 (with -1 averaged in: less)
    assert g.loc[0, "temp_avg_c"] == pytest.approx(47.5)
    assert g.loc[0, "temp_peak_c"] == 60.0
    # SM clock: 1980 with a 1500 dip at t=2 -> (2*1980 - 0.5*1*480) / 2 = 1860; min 1500, peak 1980
    assert g.loc[0, "sm_clock_avg_mhz"] == pytest.approx(1860.0)
    assert (g.loc[0, "sm_clock_min_mhz"], g.loc[0, "sm_clock_peak_mhz"]) == (1500.0, 1980.0)
    # power: 100 W with a triangle to 300 W at t=2 -> 200 + 0.5*1*200 = 300 J; average 150 W; peak 300 W
    assert g.loc[0, "energy_trapezoid_j"] == pytest.approx(300.0)
    assert g.loc[0, "power_avg_w"] == pytest.approx(150.0) and g.loc[0, "power_peak_w"] == 300.0
    # counter: 120 W for 2 s = 240 J; relative difference (300 - 240) / 240
    assert g.loc[0, "energy_counter_j"] == pytest.approx(240.0)
    assert g.loc[0, "energy_rel_diff"] == pytest.approx(0.25)
    assert g.loc[1, "energy_counter_j"] == pytest.approx(400.0) and g.loc[1, "temp_avg_c"] == pytest.approx(50.0)
    # NVLink rx (KiB, uint32): 2**32-100 at t=1 -> 250 at t=3 across one wrap = 100 + 250 = 350 KiB
    assert g.loc[0, "nvlink_rx_bytes"] == pytest.approx(350 * 1024)
    assert g.loc[0, "pcie_rx_bytes"] == pytest.approx(4000.0)  # 1000 B per 0.5 s for 2 s
    # reasons, sample and hold over [1, 3]: 0x4 from 1.5 to 2.5 (1 s of 2), 0x20 from 2.0 to 2.5 (0.5 s)
    assert g.loc[0, "throttle_sw_power_cap_frac"] == pytest.approx(0.5)
    assert g.loc[0, "throttle_sw_thermal_slowdown_frac"] == pytest.approx(0.25)
    assert g.loc[0, "throttle_hw_slowdown_frac"] == 0.0
    # the -1 temperature is one NVML error, counted; nothing else is wrong with these samples
    assert g.loc[0, "nvml_errors"] == 1 and g.loc[1, "nvml_errors"] == 0
    assert g.loc[0, "data_quality"] == "good" and g.loc[0, "samples_received"] == 5


def test_run_row_energy_efficiency_from_the_cells_own_record(tables) -> None:
    r = tables.runs.iloc[0]
    # energy of one iteration = sum over GPUs of counter energy / covered seconds x iteration time:
    # (240/2 + 400/2) W x 1.0 s = 320 J (counter energy on every GPU)
    assert r["energy_source"] == "counter"
    assert r["energy_per_iteration_j"] == pytest.approx(320.0)
    # per token: global batch 8 x sequence 128 of this cell (never a hard-coded 128 x seq)
    assert r["energy_per_token_j"] == pytest.approx(320.0 / (8 * 128))
    # efficiency = samples/s / MJ per iteration = (8 / 1.0) / 320e-6
    assert r["samples_per_s"] == pytest.approx(8.0)
    assert r["efficiency"] == pytest.approx(8.0 / 320e-6)
    assert r["mfu_full"] == pytest.approx(r["model_tflops_per_gpu"] / 989.0)
    # averages over GPUs of time-weighted averages, peaks over GPUs
    assert r["temp_avg_c"] == pytest.approx((47.5 + 50.0) / 2) and r["temp_peak_c"] == 60.0
    assert r["power_avg_w"] == pytest.approx(175.0) and r["power_total_avg_w"] == pytest.approx(350.0)
    assert r["throttle_sw_power_cap_frac"] == pytest.approx(0.25)
    assert r["nvlink_rx_bytes_total"] == pytest.approx(350 * 1024)
    # exposed communication: mean over traced ranks of comm_exposed / span = (0.1 + 0.3) / 2
    assert r["exposed_comm_frac"] == pytest.approx(0.2)
    assert r["n_gpus"] == 2 and "memory_power_instant_w" in r["unavailable_metrics"]


def test_steps_kernels_timeseries(tables) -> None:
    s = tables.steps
    assert len(s) == 6 and set(s["stage"]) == {0, 1}
    s1 = s[(s["rank"] == 0) & (s["step"] == 1)].iloc[0]
    # rank 0 step 1 = [1, 2]: 100 W rising to 300 W over the last 0.5 s: 0.5*100 + 0.5*(100+300)/2 = 150 J
    assert s1["energy_j"] == pytest.approx(150.0)
    k = tables.kernels
    assert list(k.drop_duplicates("rank")["rank"]) == [0, 1]  # stage order, not file order
    assert len(k) == 2 * 10 and k.loc[k["category"] == "send_recv", "sum_s"].tolist() == [0.4, 0.4]
    ts = tables.timeseries
    assert set(ts["gpu_index"]) == {0, 1} and (ts["t_rel_s"].min() == 0.0)
    assert ts["gpu_temp_c"].min() >= 0  # the -1 error never reaches the series


def test_pure_window_functions() -> None:
    t = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    # time-weighted mean of 0, 10, 10, 0, 0 over [0.5, 3.5]: trapezoid 0.5*(5+10)/2 + 10 + 5 + 0 = 18.75 / 3
    assert time_average(t, np.array([0, 10, 10, 0, 0.0]), 0.5, 3.5) == pytest.approx(18.75 / 3)
    f = hold_shares(t, np.array([0, 4, 4, 0, 0]), 0.5, 3.5)
    assert f[0x4] == pytest.approx(2 / 3)
    assert math.isnan(time_average(t[:1], np.array([1.0]), 0, 1))
    assert math.isnan(time_average(t, np.zeros(5), 3.0, 8.0))  # samples cover < 90% of the window


def test_sweep_runs_table_keeps_oom_pruned_and_not_run_and_normalizes(tmp_path: Path) -> None:
    ok1 = builders.cell_dict(parallel_label="TP1-PP2")
    ok2 = builders.cell_dict(parallel_label="TP1-PP1-DP2", pp=1, dp=2, cell_id="golden-b")
    oom = builders.cell_dict(micro_batch=4, cell_id="golden-oom")
    paths = []
    for c, st in ((ok1, "ok"), (ok2, "ok"), (oom, "oom")):
        d = builders.write_cell(tmp_path / "cells", c, st)
        if c is ok2:  # a cell twice as slow: half the efficiency
            rec = builders.record(c, "ok", iteration_time_s=2.0)
            (d / "run.json").write_text(__import__("json").dumps(rec))
        cell = CellPaths(d)
        write_cell_tables(cell_tables(d), cell)
        paths.append(cell.table("runs"))
    plan = [{**ok1, "status": "planned"}, {**ok2, "status": "planned"}, {**oom, "status": "planned"},
            {**builders.cell_dict(cell_id="golden-pruned"), "status": "pruned", "reasons": ["too big"]},
            {**builders.cell_dict(cell_id="golden-later"), "status": "planned"}]
    runs = runs_table(plan, concat_cell_tables(paths))
    assert list(runs["status"]) == ["ok", "ok", "oom", "pruned", "not_run"]
    assert runs.loc[3, "reason"] == "too big"
    assert runs.loc[0, "efficiency_norm"] == pytest.approx(1.0)
    # iteration 2 s: energy per iteration doubles and samples/s halves -> efficiency / 4
    assert runs.loc[1, "efficiency_norm"] == pytest.approx(0.25)
    assert runs.loc[2:, "efficiency"].isna().all() and math.isnan(runs.loc[2, "iteration_time_s"])


def test_efficiency_is_normalised_by_the_best_configurations_mean_never_one_repetition() -> None:
    """Configuration a (repetitions 1 and 3: mean 2) would be the "1" by its fast repetition; b's one cell (2.5) is the
    best configuration; a failed cell and another model do not count; each sweep on its own."""
    runs = pd.DataFrame({
        "sweep": ["s", "s", "s", "s", "s", "t"], "model": ["m", "m", "m", "m", "n", "m"],
        "cell_id": ["a", "a_r1", "b", "c", "d", "a"], "config_id": ["a", "a", "b", "c", "d", "a"],
        "status": ["ok", "ok", "ok", "failed", "ok", "ok"], "efficiency": [1.0, 3.0, 2.5, 9.0, 4.0, 5.0]})
    norm = add_normalized_efficiency(runs)["efficiency_norm"]
    assert list(norm) == pytest.approx([0.4, 1.2, 1.0, 3.6, 1.0, 1.0])


def test_cell_without_telemetry_has_nan_not_zero(tmp_path: Path) -> None:
    t = cell_tables(builders.write_cell(tmp_path, telemetry=False))
    r = t.runs.iloc[0]
    assert math.isnan(r["energy_per_iteration_j"]) and math.isnan(r["temp_avg_c"]) and r["n_gpus"] == 0
    assert "no telemetry" in r["data_notes"] and t.gpus.empty and len(t.steps) == 6
    assert pd.isna(t.steps["energy_j"]).all()

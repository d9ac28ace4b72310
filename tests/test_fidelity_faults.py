"""Measurement fidelity on real traces with injected faults.

The base data are real: the committed 2x H200 matmul trace (tests/fixtures/telemetry/h200x2-matmul-50ms) and a
shipped 2x H200 Llama-3 8B ZeRO-3 record (results/reference/h200x2-2026-11-21). Faults are injected as a sampler or
a driver would produce them (duplicated, reordered and missing samples, NVML errors, an energy counter reset and a
glitch, a short window). Every aggregate of the analysis path is checked against an independent computation written
differently here (dense time grids instead of trapezoids, hand-cut counter segments) and against the quality
columns and notes.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT

from calorimeter.analysis.cell import cell_tables
from calorimeter.analysis.window import GpuSamples
from calorimeter.telemetry.convert import load_gpu_samples, tidy_gpu_samples

FIXTURE = ROOT / "tests" / "fixtures" / "telemetry" / "h200x2-matmul-50ms"
REFERENCE = ROOT / "results" / "reference" / "h200x2-2026-11-21" / "gpu-llama8b" / "cells"
Z3 = "llama3-8b_h200-1x2_tp1-pp1-dp2_z3_rc-none_ov-on_mb1-gb8-s8192"
PERIOD_S = 0.05


def measured() -> tuple[float, float]:
    """The fixture's measured phase (first measured step's begin to last one's end)."""
    m = pd.read_json(FIXTURE / "markers" / "markers-rank0.jsonl", lines=True)
    m = m[m["phase"] == "measured"]
    return float(m["begin_s"].min()), float(m["end_s"].max())


@pytest.fixture(scope="module")
def raw() -> pd.DataFrame:
    """GPU 0 of the real trace, as the sampler recorded it (stream columns, recorded order)."""
    return load_gpu_samples(FIXTURE).query("gpu_index == 0").reset_index(drop=True)


def stats(raw_rows: pd.DataFrame, begin: float, end: float) -> dict:
    return GpuSamples(tidy_gpu_samples(raw_rows), PERIOD_S).window_stats(begin, end)


# ---- independent computations (dense grids, no trapezoid code) ------------------------------------------------
GRID_S = 1e-4


def grid(lo: float, hi: float) -> np.ndarray:
    """Midpoints of 0.1 ms cells over [lo, hi] (built from offsets: absolute epoch times have too few digits)."""
    n = max(int(round((hi - lo) / GRID_S)), 1)
    return lo + (np.arange(n) + 0.5) * ((hi - lo) / n)


def grid_mean(t: np.ndarray, v: np.ndarray, begin: float, end: float) -> float:
    """Mean of the piecewise-linear interpolant on a 0.1 ms grid over the window clipped to the samples."""
    ok = ~np.isnan(v) & (v >= 0)
    t, v = t[ok], v[ok]
    order = np.argsort(t)
    t, v = t[order], v[order]
    g = grid(max(begin, t[0]), min(end, t[-1]))
    return float(np.interp(g, t, v).mean())


def grid_share(t: np.ndarray, masks: np.ndarray, bit: int, begin: float, end: float) -> float:
    """Share of a 0.1 ms grid over the sampled part of the window where the last sample before had ``bit`` set."""
    order = np.argsort(t)
    t, masks = t[order], masks[order]
    g = grid(max(begin, t[0]), min(end, t[-1]))
    last = np.searchsorted(t, g, side="right") - 1
    return float(((masks[last].astype(np.int64) & bit) != 0).mean())


def counter_joules(t: np.ndarray, mj: np.ndarray, begin: float, end: float) -> float:
    """Energy of one monotone counter segment between two times (interpolated at both, in joules)."""
    order = np.argsort(t)
    return float(np.interp(end, t[order], mj[order]) - np.interp(begin, t[order], mj[order])) / 1000.0


def columns(frame: pd.DataFrame) -> tuple[np.ndarray, ...]:
    t = frame["time_s"].to_numpy(float)
    p = pd.to_numeric(frame["power_instant_w"], errors="coerce").to_numpy(float)
    temp = pd.to_numeric(frame["gpu_temp_c"], errors="coerce").to_numpy(float)
    e = frame[["time_s", "energy_millijoule"]].dropna()
    masks = frame[["time_s", "clock_event_reasons"]].dropna()
    return (t, p, temp, e["time_s"].to_numpy(float), e["energy_millijoule"].to_numpy(float),
            masks["time_s"].to_numpy(float), masks["clock_event_reasons"].to_numpy(np.int64))


def check_against_independent(row: dict, frame: pd.DataFrame, begin: float, end: float) -> None:
    t, p, temp, te, e, tm, m = columns(frame)
    if row["power_coverage_frac"] >= 0.9:  # the samples observe the window: their time-weighted mean
        assert row["power_avg_w"] == pytest.approx(grid_mean(t, p, begin, end), rel=1e-5)
    else:  # gaps over more than a tenth of it: the energy counter's mean power, said in the notes
        assert row["power_source"] == "energy_counter" and "average power from the energy counter" in row[
            "quality_notes"]
        assert row["power_avg_w"] == pytest.approx(counter_joules(te, e, begin, end) / (end - begin), rel=1e-3)
    assert row["temp_avg_c"] == pytest.approx(grid_mean(t, temp, begin, end), rel=1e-5)
    inside = (t >= begin) & (t <= end) & ~np.isnan(p)
    assert row["power_peak_w"] == max(p[inside])
    assert row["throttle_sw_power_cap_frac"] == pytest.approx(grid_share(tm, m, 0x4, begin, end), abs=1e-4)


# ---- the clean trace --------------------------------------------------------------------------------------------


def test_clean_real_trace_matches_independent_computation(raw: pd.DataFrame) -> None:
    b, e = measured()
    row = stats(raw, b, e)
    check_against_independent(row, raw, b, e)
    _, _, _, te, mj, _, _ = columns(raw)
    assert row["energy_counter_j"] == pytest.approx(counter_joules(te, mj, b, e), rel=1e-9)
    assert row["energy_counter_s"] == pytest.approx(e - b)
    assert row["data_quality"] == "good" and row["quality_notes"] == ""
    assert row["samples_received"] == pytest.approx((e - b) / PERIOD_S, abs=2)
    assert row["gaps"] == row["nvml_errors"] == row["duplicate_timestamps"] == row["counter_resets"] == 0


# ---- injected faults --------------------------------------------------------------------------------------------


def test_duplicated_samples_are_dropped_and_counted(raw: pd.DataFrame) -> None:
    b, e = measured()
    rng = np.random.default_rng(1)
    inside = raw.index[(raw["time_s"] > b) & (raw["time_s"] < e)]
    dup = np.sort(rng.choice(inside, 20, replace=False))
    faulty = pd.concat([raw, raw.loc[dup]]).sort_index(kind="stable").reset_index(drop=True)  # each right after
    row, clean = stats(faulty, b, e), stats(raw, b, e)
    for k in ("power_avg_w", "temp_avg_c", "energy_counter_j", "energy_trapezoid_j", "throttle_sw_power_cap_frac"):
        assert row[k] == clean[k], k
    assert row["duplicate_timestamps"] == 20 and "20 duplicate timestamp(s) dropped" in row["quality_notes"]
    assert row["counter_resets"] == row["counter_glitches"] == 0  # a repeated counter reading is no decrease


def test_reordered_samples_are_sorted_and_counted(raw: pd.DataFrame) -> None:
    b, e = measured()
    idx = raw.index[(raw["time_s"] > b + 0.2) & (raw["time_s"] < e - 0.2)].to_numpy()
    order = raw.index.to_numpy().copy()
    swaps = idx[::8][:10]  # ten disjoint adjacent swaps: ten rows arrive after a later-stamped one
    for i in swaps:
        order[i], order[i + 1] = order[i + 1], order[i]
    faulty = raw.loc[order].reset_index(drop=True)
    row, clean = stats(faulty, b, e), stats(raw, b, e)
    assert row["energy_counter_j"] == clean["energy_counter_j"] and row["power_avg_w"] == clean["power_avg_w"]
    assert row["counter_resets"] == row["counter_glitches"] == 0  # not read as a decrease of the counter
    assert row["out_of_order_timestamps"] == 10 and row["duplicate_timestamps"] == 0
    assert "10 out-of-order timestamp(s) re-sorted" in row["quality_notes"]


def test_missing_samples_leave_a_gap_and_the_rest_is_exact(raw: pd.DataFrame) -> None:
    b, e = measured()
    t = raw["time_s"]
    hole = (t > b + 1.0) & (t < b + 1.5)  # 0.5 s of samples lost (a stalled sampler)
    faulty = raw[~hole].reset_index(drop=True)
    row = stats(faulty, b, e)
    check_against_independent(row, faulty, b, e)
    kept = faulty["time_s"]
    gap = float(kept[kept > b + 1.5].min() - kept[kept < b + 1.0].max())
    assert row["gaps"] == 1 and row["gap_s"] == pytest.approx(gap)
    assert row["samples_received"] == stats(raw, b, e)["samples_received"] - int(hole.sum())
    assert row["power_coverage_frac"] == pytest.approx(1 - gap / (e - b), abs=1e-3)
    assert "1 gap(s) > 125 ms" in row["quality_notes"]
    # the energy counter integrates through the gap: exact
    _, _, _, te, mj, _, _ = columns(faulty)
    assert row["energy_counter_j"] == pytest.approx(counter_joules(te, mj, b, e), rel=1e-9)
    # losing a third of the samples at random makes the window poor, with the count in the notes
    rng = np.random.default_rng(2)
    sparse = raw[rng.random(len(raw)) > 0.33].reset_index(drop=True)
    r2 = stats(sparse, b, e)
    assert r2["data_quality"] == "poor" and f"{r2['samples_received']} of" in r2["quality_notes"]
    check_against_independent(r2, sparse, b, e)


def test_nvml_errors_are_dropped_counted_and_never_averaged(raw: pd.DataFrame) -> None:
    b, e = measured()
    faulty = raw.copy()
    inside = faulty.index[(faulty["time_s"] > b) & (faulty["time_s"] < e)].to_numpy()
    faulty.loc[inside[5:80:5], "power_instant_w"] = np.nan  # failed reads are null in the stream
    faulty.loc[inside[30:35], "gpu_temp_c"] = -1.0  # older samplers stored NVML's -1
    row = stats(faulty, b, e)
    check_against_independent(row, faulty, b, e)
    assert row["nvml_errors"] == 20 and "20 NVML error(s) dropped" in row["quality_notes"]
    assert row["temp_avg_c"] > 60 and row["power_coverage_frac"] > 0.95


def test_energy_counter_reset_is_a_segment_never_a_wrap(raw: pd.DataFrame) -> None:
    b, e = measured()
    faulty = raw.copy()
    tr = b + 2.0
    e_mj = faulty["energy_millijoule"].astype("Int64")
    after = faulty["time_s"] >= tr
    base = int(e_mj[after].dropna().iloc[0]) - 5_000  # the driver reloads: the counter restarts near zero
    faulty["energy_millijoule"] = e_mj.where(~after, e_mj - base).astype("UInt64")
    row = stats(faulty, b, e)
    assert row["counter_resets"] == 1 and row["data_quality"] == "poor"
    assert "energy_millijoule: 1 reset(s)" in row["quality_notes"]
    # independent: the two segments cut by hand, each interpolated at the window edge it touches
    tt = faulty[["time_s", "energy_millijoule"]].dropna()
    t0, v0 = tt[tt["time_s"] < tr], tt[tt["time_s"] >= tr]
    first = counter_joules(t0["time_s"].to_numpy(), t0["energy_millijoule"].to_numpy(float), b,
                           float(t0["time_s"].max()))
    second = counter_joules(v0["time_s"].to_numpy(), v0["energy_millijoule"].to_numpy(float),
                            float(v0["time_s"].min()), e)
    cut = float(v0["time_s"].min() - t0["time_s"].max())
    assert row["energy_counter_j"] == pytest.approx(first + second, rel=1e-9)
    assert row["energy_counter_s"] == pytest.approx(e - b - cut)
    assert row["energy_counter_j"] < 1e6  # never 2**64 mJ = 1.8e16 J
    # the mean power over what the counter covers is the clean one within the cut's share
    clean = stats(raw, b, e)
    p_clean = clean["energy_counter_j"] / clean["energy_counter_s"]
    assert row["energy_counter_j"] / row["energy_counter_s"] == pytest.approx(p_clean, rel=0.02)


def test_energy_counter_glitch_is_dropped(raw: pd.DataFrame) -> None:
    b, e = measured()
    faulty = raw.copy()
    rows = faulty.index[faulty["energy_millijoule"].notna() & (faulty["time_s"] > b + 1) & (faulty["time_s"] < e - 1)]
    i, earlier = rows[10], rows[2]
    faulty.loc[i, "energy_millijoule"] = faulty.loc[earlier, "energy_millijoule"]  # a stale reading
    row, clean = stats(faulty, b, e), stats(raw, b, e)
    assert row["counter_glitches"] == 1 and row["counter_resets"] == 0
    assert row["energy_counter_j"] == pytest.approx(clean["energy_counter_j"], rel=1e-12)


def test_short_window_gives_nan_for_every_aggregate_and_says_why(raw: pd.DataFrame) -> None:
    b, e = measured()
    # the sampler stopped early: its samples span only 80% of the window
    cut = raw[raw["time_s"] <= b + 0.8 * (e - b)].reset_index(drop=True)
    row = stats(cut, b, e)
    for k in ("power_avg_w", "power_peak_w", "temp_avg_c", "temp_peak_c", "sm_clock_min_mhz", "energy_counter_j",
              "energy_trapezoid_j", "pcie_rx_bytes", "throttle_sw_power_cap_frac", "throttle_gpu_idle_frac"):
        assert math.isnan(row[k]), k
    assert row["data_quality"] == "poor" and "power observed over" in row["quality_notes"]
    # a window of two samples is too short to trust
    tiny = stats(raw, b, b + 0.06)
    assert tiny["samples_expected"] == 1 and tiny["data_quality"] in ("good", "poor")


# ---- a shipped cell with a counter reset, through the pipeline -------------------------------------------------


def test_shipped_cell_with_reset_keeps_its_energy_and_reports_the_reset(tmp_path: Path) -> None:
    cell = tmp_path / Z3
    shutil.copytree(REFERENCE / Z3, cell)
    clean = cell_tables(cell).runs.iloc[0]
    tel = pd.read_parquet(cell / "telemetry.parquet")  # shipped with the old names: energy_mj_raw
    g1 = (tel["gpu_index"] == 1) & (tel["time_s"] >= float(tel["time_s"].median()))
    raw = tel["energy_mj_raw"].astype("Int64")
    tel["energy_mj_raw"] = raw.where(~g1, raw - int(raw[g1].dropna().iloc[0]) + 1000).astype("UInt64")
    tel.to_parquet(cell / "telemetry.parquet", index=False)
    t = cell_tables(cell)
    r = t.runs.iloc[0]
    assert r["counter_resets"] == 1 and r["data_quality"] == "poor"
    assert "node0/gpu1: energy_millijoule: 1 reset(s)" in r["data_notes"]
    assert r["energy_per_iteration_j"] == pytest.approx(clean["energy_per_iteration_j"], rel=0.01)
    assert r["energy_per_token_j"] < 1.0  # joules per token; a 2**64 wrap would give ~1e12
    g = t.gpus.set_index("gpu_index")
    assert g.loc[1, "counter_resets"] == 1 and g.loc[0, "counter_resets"] == 0
    assert json.loads((cell / "run.json").read_text())["metrics"]["mfu"] == pytest.approx(r["mfu_full"])

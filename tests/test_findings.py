"""Findings report: intervals, pairing (everything fixed but the knob), verdicts, and the shipped GPU records."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, SWEEPS
from scipy import stats
from synthetic import synthetic_tables

from calorimeter.analysis.tables import read_tables
from calorimeter.findings import CATALOG_VERSION, COLUMNS, evaluate
from calorimeter.findings.report import to_html, write_findings
from calorimeter.findings.stats import (
    AGREES,
    CANNOT_SAY,
    DISAGREES,
    PARTLY,
    VERDICTS,
    mean_interval,
    welch_difference,
    within_slope,
)
from calorimeter.plan.plan import plan_file

REFERENCE = ROOT / "results" / "reference"


def row(**kw) -> dict:
    """A measured runs row of Llama-3 8B on 2 H200, ZeRO-1 dp2, overridden by ``kw``."""
    base = dict(model="llama3-8b", hardware="h200", nodes=1, gpus_per_node=2, world_size=2, tp=1, pp=1, dp=2, ep=1,
                cp=1, sequence_parallel=False, zero_stage=1, recompute="none", recompute_layers=None, overlap=False,
                micro_batch=1, global_batch=8, seq_len=4096, precision="bf16", pp_split="", status="ok", repeat=0,
                measured_steps=4, warmup_reason="steady", thermally_steady=True, throttle_sw_power_cap_frac=1.0,
                kernel_busy_s=0.95,
                iteration_time_s=1.0)
    base.update(kw)
    sp = "-sp" if base["sequence_parallel"] else ""
    cid = (f"{base['model']}_{base['hardware']}_tp{base['tp']}-pp{base['pp']}-dp{base['dp']}{sp}_z{base['zero_stage']}"
           f"_rc-{base['recompute']}_ov-{'on' if base['overlap'] else 'off'}_mb{base['micro_batch']}")
    base.setdefault("config_id", cid)
    base["cell_id"] = cid + (f"_r{base['repeat']}" if base["repeat"] else "")
    return base


def runs(rows: list[dict]) -> dict[str, pd.DataFrame]:
    return {"runs": pd.DataFrame(rows), "gpus": pd.DataFrame(), "kernels": pd.DataFrame()}


def result(tables: dict, finding: str) -> pd.Series:
    df = evaluate(tables)
    assert list(df.columns) == list(COLUMNS)
    assert not df["why"].str.contains("check failed").any(), df.loc[df["why"].str.contains("check failed"), "why"]
    return df.set_index("finding").loc[finding]


# ---------------------------------------------------------------------------------------------------------------
# statistics


def test_mean_and_welch_intervals_match_scipy() -> None:
    x = [1.0, 2.0, 4.0, 7.0]
    e = mean_interval(x)
    lo, hi = stats.t.interval(0.95, 3, loc=np.mean(x), scale=stats.sem(x))
    assert (e.value, e.low, e.high, e.n) == pytest.approx((3.5, lo, hi, 4))
    assert not mean_interval([3.0]).has_interval and mean_interval([3.0]).value == 3.0
    assert math.isnan(mean_interval([]).value)
    a, b = [10.0, 11.0, 12.0], [7.0, 9.0]
    w = welch_difference(a, b)
    r = stats.ttest_ind(a, b, equal_var=False)
    ci = r.confidence_interval(0.95)
    assert (w.value, w.low, w.high) == pytest.approx((3.0, ci.low, ci.high))
    assert not welch_difference([1.0], [2.0, 3.0]).has_interval


def test_quantized_sensor_never_gives_a_zero_width_interval() -> None:
    e = mean_interval([60.0, 60.0, 60.0], resolution=1.0)
    assert e.low < 60.0 < e.high
    assert mean_interval([60.0, 60.0, 60.0]).low == 60.0  # without a resolution: the sample variance only


def test_within_slope_recovers_a_known_slope_with_group_offsets() -> None:
    rng = np.random.default_rng(0)
    x = np.log2([1, 2, 4, 8] * 3)
    groups = [(x, 700 + off + 25 * x + rng.normal(0, 2, x.size)) for off in (0.0, -80.0, 40.0)]
    e = within_slope(groups)
    assert e.low < 25 < e.high and e.high - e.low < 6 and e.n == 36
    assert math.isnan(within_slope([(np.ones(3), np.arange(3.0))]).value)  # one x value: no slope
    assert not within_slope([(np.array([0.0, 1.0]), np.array([1.0, 2.0]))]).has_interval  # no dof left


# ---------------------------------------------------------------------------------------------------------------
# pairing and verdicts on constructed tables


CONFIGS3 = ((1, "none", 60.0), (3, "none", 64.0), (3, "full", 66.0))


def overlap_rows(effect_c: float, repeats: int = 2, noise: float = 0.3, seed: int = 0,
                 cfgs: tuple = CONFIGS3, cap: float = 0.0) -> list[dict]:
    """Overlap on/off at data-parallel configurations (ZeRO stage, recompute, base peak temperature),
    ``repeats`` repetitions each; peak temperature raised by ``effect_c`` with overlap on; the power-cap reason set
    ``cap`` of the window (temperature claims are judged below the cap, clock claims at it)."""
    rng = np.random.default_rng(seed)
    out = []
    for z, rc, base in cfgs:
        for ov in (False, True):
            for k in range(repeats):
                out.append(row(zero_stage=z, recompute=rc, overlap=ov, repeat=k, throttle_sw_power_cap_frac=cap,
                               temp_peak_c=base + effect_c * ov + rng.normal(0, noise),
                               sm_clock_avg_mhz=1800 - 40 * ov + rng.normal(0, 3)))
    # never an overlap pair: pipeline with dp = 1 (overlap changes nothing there), and an oom cell
    out.append(row(tp=1, pp=2, dp=1, overlap=False, temp_peak_c=50.0, sm_clock_avg_mhz=1900.0))
    out.append(row(tp=1, pp=2, dp=1, overlap=True, temp_peak_c=90.0, sm_clock_avg_mhz=1000.0))
    out.append(row(zero_stage=2, micro_batch=8, overlap=True, status="oom", temp_peak_c=99.0))
    out.append(row(zero_stage=2, micro_batch=8, overlap=False, temp_peak_c=40.0))
    return out


def test_overlap_pairs_only_where_overlap_acts_and_averages_layouts_within_a_repetition() -> None:
    r = result(runs(overlap_rows(+3.0, repeats=3)), "overlap_raises_peak_temp")
    assert r["verdict"] == AGREES and r["n"] == 3 and r["dof"] == 2 and r["n_repeats"] == 3  # 3 repetitions
    assert "mean over 3 pair(s)" in r["experimental_unit"]  # the layouts are not units of their own
    assert r["value"] == pytest.approx(3.0, abs=0.5)
    assert "pp2" not in r["configs"] and "mb8" not in r["configs"]  # no-op and oom pairs are not compared
    assert result(runs(overlap_rows(-3.0, repeats=3)), "overlap_raises_peak_temp")["verdict"] == DISAGREES
    eight = tuple((z, rc, 60.0 + k) for k, (z, rc) in enumerate((z, rc) for z in (1, 2, 3, 0)
                                                                  for rc in ("none", "full")))
    none = result(runs(overlap_rows(0.0, repeats=3, noise=0.05, cfgs=eight)), "overlap_raises_peak_temp")
    assert "6 pair(s)" in none["scope"]  # ZeRO-0 has no overlapped path (docs/knobs.md): not compared
    assert none["verdict"] == DISAGREES and "no effect" in none["why"]  # the interval sits below the 1 degC step
    two = result(runs(overlap_rows(+3.0, repeats=2)), "overlap_raises_peak_temp")
    assert two["verdict"] == CANNOT_SAY and "degree(s) of freedom" in two["why"]  # 2 repetitions: 1 dof
    clock = result(runs(overlap_rows(+3.0, repeats=3, cap=1.0)), "overlap_raises_throttling")
    assert clock["verdict"] == AGREES and clock["value"] == pytest.approx(-40, abs=5)
    capped = result(runs(overlap_rows(+3.0, repeats=3, cap=1.0)), "overlap_raises_peak_temp")
    assert capped["verdict"] == CANNOT_SAY and "below the power cap" in capped["why"]  # the limit sets it there


def test_tensor_parallel_overlap_pairs_need_sequence_parallelism() -> None:
    rows = [row(tp=2, dp=1, sequence_parallel=sp, overlap=ov, repeat=k, temp_peak_c=60.0 + 2 * ov + 0.1 * k,
                throttle_sw_power_cap_frac=0.0) for sp in (True, False) for ov in (False, True) for k in range(2)]
    r = result(runs(rows), "overlap_raises_peak_temp")
    assert "1 pair(s)" in r["scope"] and "sp" in r["configs"].split(";")[0]  # tp2 without SP: a no-op


def test_one_measurement_has_no_interval_and_says_what_is_missing() -> None:
    below = {"throttle_sw_power_cap_frac": 0.0}  # temperature claims are judged below the power cap
    one = [row(zero_stage=3, overlap=ov, temp_peak_c=60.0 + 2 * ov, **below) for ov in (False, True)]
    r = result(runs(one), "overlap_raises_peak_temp")
    assert r["verdict"] == CANNOT_SAY and r["direction"] == AGREES and r["value"] == 2.0
    assert math.isnan(r["ci95_low"]) and "repetitions" in r["needs"]
    # one pair with repetitions: paired by repetition index (repetition k of both ran in the same pass)
    rep = [row(zero_stage=3, overlap=ov, repeat=k, temp_peak_c=60.0 + 4 * ov + 0.2 * k, **below)
           for ov in (False, True) for k in range(3)]
    r = result(runs(rep), "overlap_raises_peak_temp")
    assert r["verdict"] == AGREES and r["n"] == 3 and "paired repetitions" in r["interval"]
    # repetitions that do not line up (another pass's cells failed): Welch's interval over the two sides
    skew = [x for x in rep if not (x["overlap"] and x["repeat"] == 0) and not (not x["overlap"] and x["repeat"] > 0)]
    skew += [row(zero_stage=3, overlap=False, repeat=3, temp_peak_c=60.1, **below)]
    r = result(runs(skew), "overlap_raises_peak_temp")
    assert "Welch" in r["interval"]
    # ... but never across machines: the same repetitions split over two machines have no pair and no Welch
    split = [{**x, "machine": "GPU-a" if x["overlap"] else "GPU-b"} for x in skew]
    r = result(runs(split), "overlap_raises_peak_temp")
    assert r["verdict"] == CANNOT_SAY and "never cross machines" in r["why"]


def test_pairs_never_cross_machines_and_say_what_they_left_out() -> None:
    """Repetition 1 of one side ran on another machine (a cut pass finished later elsewhere): that pair is left
    out and counted, never paired across the machines; the units say how many machines the effect rests on."""
    below = {"throttle_sw_power_cap_frac": 0.0}
    rows = [row(zero_stage=3, overlap=ov, repeat=k, temp_peak_c=60.0 + 4 * ov + 0.2 * k, machine="GPU-a", **below)
            for ov in (False, True) for k in range(4)]
    rows[5]["machine"] = "GPU-b"  # overlap on, repetition 1
    r = result(runs(rows), "overlap_raises_peak_temp")
    assert r["n"] == 3 and r["dof"] == 2 and r["n_machines"] == 1 and r["dof_machines"] == 0
    assert "2 cell(s) without a partner on the same machine and repetition" in r["scope"]  # both cells of r1
    both = [{**x, "machine": "GPU-b" if x["repeat"] >= 2 else "GPU-a"} for x in rows]  # passes 2-3 elsewhere
    r = result(runs(both), "overlap_raises_peak_temp")
    assert r["n"] == 4 and r["n_machines"] == 2 and r["dof_machines"] == 1 and r["dof_repetitions"] == 3


def test_transient_windows_are_left_out_of_thermal_findings() -> None:
    """Judged on the window's drift: a warm-up flagged steady does not make a drifting window steady."""
    rep = [row(zero_stage=3, overlap=ov, repeat=k, temp_peak_c=60.0 + 4 * ov + 0.2 * k, thermally_steady=False)
           for ov in (False, True) for k in range(3)]
    r = result(runs(rep), "overlap_raises_peak_temp")
    assert r["verdict"] == CANNOT_SAY and "6 of 6 measured cell(s) fail: a thermally steady measured window" in r["why"]


def test_clock_findings_need_the_power_cap_below_the_ceiling() -> None:
    rows = [row(zero_stage=3, recompute=rc, repeat=k, sm_clock_avg_mhz=1972.0 - 3 * (rc == "full") + k)
            for rc in ("none", "full") for k in range(4)]  # the review's case: both sides at the 1980 MHz ceiling
    r = result(runs(rows), "recompute_more_throttling_dp")
    assert r["verdict"] == CANNOT_SAY and "below the ceiling" in r["why"]  # never a spurious "disagrees"


def _mb_rows(nodes: int = 1, pp_layout: dict | None = None) -> list[dict]:
    rows = []
    for layout in ({"zero_stage": 3}, pp_layout or {"pp": 4, "dp": 1, "gpus_per_node": 4, "world_size": 4}):
        for mb in (1, 2, 4, 8):
            for k in range(3):
                fsdp = layout.get("zero_stage") == 3
                rows.append(row(**{"nodes": nodes, **layout}, micro_batch=mb, repeat=k, recompute="full",
                                throttle_sw_power_cap_frac=0.0,
                                power_peak_w=500 + 30 * math.log2(mb) + k, temp_peak_c=60 + math.log2(mb) + k,
                                tokens_per_s=1000 * (1.2 if fsdp else 0.9) ** math.log2(mb) * (1 + 0.01 * k)))
    return rows


def test_microbatch_slopes_and_the_fsdp_size() -> None:
    t = runs(_mb_rows())
    power = result(t, "microbatch_raises_peak_power")
    assert power["verdict"] == AGREES and power["value"] == pytest.approx(30, abs=1) and power["n"] == 3
    fsdp, pp = result(t, "microbatch_speeds_up_fsdp"), result(t, "microbatch_no_gain_pp")
    # mb 1 -> 4: 1.44x; on one node the study's >3x (FSDP over a network) cannot occur: no verdict on the size
    assert fsdp["value"] == pytest.approx(1.44, rel=0.02) and fsdp["verdict"] == CANNOT_SAY
    assert fsdp["undecided"] == "regime" and "direction agrees" in fsdp["why"] and "several nodes" in fsdp["needs"]
    assert pp["value"] == pytest.approx(0.9, rel=0.02) and pp["verdict"] == AGREES and "1F1B bubble" in pp["detail"]
    # over nodes the size can occur: the direction agrees, the interval excludes 3x
    assert result(runs(_mb_rows(nodes=2)), "microbatch_speeds_up_fsdp")["verdict"] == PARTLY
    # PP2 is not pipeline-heavy (pp >= 4, as everywhere)
    shallow = result(runs(_mb_rows(pp_layout={"pp": 2, "dp": 1})), "microbatch_no_gain_pp")
    assert shallow["verdict"] == CANNOT_SAY and "pp >= 4" in shallow["why"]


def test_throughput_and_peaks_compare_gpu_bound_cells_only() -> None:
    """The review's host-bound case: micro-batch 1 waits on its host (busy 37% of the step, far below the cap),
    micro-batch 4 is GPU-bound; peak power "rising" there is utilisation, not the micro-batch."""
    rows = _mb_rows()
    for x in rows:
        if x["micro_batch"] == 1:
            x["kernel_busy_s"] = 0.37
    t = runs(rows)
    for f in ("microbatch_raises_peak_power", "microbatch_raises_peak_temp", "microbatch_speeds_up_fsdp"):
        r = result(t, f)
        assert "GPU-bound" in r["why"] + r["scope"], (f, r["why"], r["scope"])
        assert "mb1" not in r["configs"], f


def test_pipeline_depth_needs_a_deep_pipeline_at_the_same_data_parallel_degree() -> None:
    """TP2 vs PP2 is no deep pipeline; TP4 / TP2-PP2 / TP1-PP4 is; a dp2 layout on the same GPUs stays out."""
    rows = [row(tp=2, dp=1, sequence_parallel=True, sm_clock_avg_mhz=1850.0 + k, repeat=k) for k in range(3)]
    rows += [row(pp=2, dp=1, sm_clock_avg_mhz=1750.0 + k, repeat=k) for k in range(3)]
    r = result(runs(rows), "deep_pp_throttles_more")
    assert r["verdict"] == CANNOT_SAY and "not a deep pipeline" in r["why"]
    four = [row(gpus_per_node=4, world_size=4, tp=tp, pp=pp, dp=1, sm_clock_avg_mhz=1800.0 - 50 * math.log2(pp) + k,
                repeat=k) for tp, pp in ((4, 1), (2, 2), (1, 4)) for k in range(3)]
    four += [row(gpus_per_node=4, world_size=4, dp=4, sm_clock_avg_mhz=1500.0 + k, repeat=k) for k in range(3)]
    r = result(runs(four), "deep_pp_throttles_more")
    assert r["value"] == pytest.approx(-50.0) and r["verdict"] == AGREES and "dp4" not in r["configs"]


def test_pipeline_depth_slope_of_a_repetition_that_lost_its_deep_cell_is_left_out() -> None:
    """A repetition with TP4 and TP2-PP2 but no PP4 cell measures the shallow slope, not the deep one: left out."""
    clock = {1: 1710.0, 2: 1702.0, 4: 1730.0}  # the 4x H200 sweep's shape: shallow dip, deep rise
    four = [row(gpus_per_node=4, world_size=4, tp=4 // pp, pp=pp, dp=1, sm_clock_avg_mhz=clock[pp] + k, repeat=k)
            for pp in (1, 2, 4) for k in range(3) if (pp, k) != (4, 2)]
    r = result(runs(four), "deep_pp_throttles_more")
    assert r["dof"] == 1 and "outside the claim's regime" in r["scope"]
    assert r["value"] == pytest.approx(10.0)  # the deep slope alone; the shallow one (-8) would pull it to +4


def test_kernel_shares_leave_out_single_gpu_cells_and_stay_in_bounds() -> None:
    """One GPU has no communication kernels: its compute share of 1 is no evidence for a distributed claim."""
    one = row(world_size=1, gpus_per_node=1, dp=1)
    two = [row(repeat=k) for k in range(2)]
    kernels = pd.DataFrame({"cell_id": [one["cell_id"]] + [c["cell_id"] for c in two for _ in range(2)],
                            "category": ["gemm_attention", "gemm_attention", "all_gather", "gemm_attention",
                                         "all_gather"],
                            "is_comm": [False, False, True, False, True], "sum_s": [1.0, 0.665, 0.335, 0.427, 0.573]})
    r = result({**runs([one]), "kernels": kernels}, "dense_compute_share_over_half")
    assert math.isnan(r["value"]) and "two GPUs or more" in r["why"]
    r = result({**runs([one, *two]), "kernels": kernels}, "dense_compute_share_over_half")
    assert r["configs"] == two[0]["config_id"]
    assert 0 < r["ci95_low"] < r["value"] < r["ci95_high"] < 1  # the review's 0.665 / 0.427: [-0.96, 2.06] before


def test_cross_hardware_findings_need_clusters_over_nodes() -> None:
    h200 = [row(world_size=1, gpus_per_node=1, dp=1, repeat=k, tokens_per_s_per_gpu=10000 + 50 * k,
                tokens_per_s=10000 + 50 * k, energy_per_token_j=0.070) for k in range(3)]
    h100 = [row(hardware="h100", world_size=1, gpus_per_node=1, dp=1, repeat=k, tokens_per_s_per_gpu=8000 + 50 * k,
                tokens_per_s=8000 + 50 * k, energy_per_token_j=0.080) for k in range(3)]
    t = runs(h200)
    assert "compare:" in result(t, "h100_scale_out_wins_compute_bound")["why"]
    t["compare_missing"] = pd.DataFrame({"sweep": ["h100x1-findings"]})
    assert "h100x1-findings" in result(t, "h100_scale_out_wins_compute_bound")["why"]
    t["compare"] = pd.DataFrame(h100)
    for f in ("h100_scale_out_wins_compute_bound", "h200_energy_per_token"):
        r = result(t, f)  # single-node cells: shown in detail, never judged (a per-GPU ratio cannot answer it)
        assert r["verdict"] == CANNOT_SAY and "two or more nodes" in r["why"]
        assert "single-node H200 / H100" in r["detail"]


def test_every_finding_evaluates_on_synthetic_study_sweeps(tmp_path) -> None:
    for sweep in ("h200-microbatch.yaml",):
        t = synthetic_tables([pc.to_dict() for pc in plan_file(SWEEPS / sweep).cells], run_pruned=True)
        df = evaluate(t)
        assert not df["why"].str.contains("check failed").any()
        assert set(df["verdict"]) <= set(VERDICTS)
        assert (df.loc[df["verdict"] == CANNOT_SAY, "needs"] != "").all()  # each "cannot say" says what is missing
    write_findings(df, tmp_path / "f.csv", tmp_path / "f.html", "synthetic")
    back = pd.read_csv(tmp_path / "f.csv")
    assert list(back["finding"]) == list(df["finding"]) and (back["catalog_version"] == CATALOG_VERSION).all()
    assert "<table>" in (tmp_path / "f.html").read_text()


# ---------------------------------------------------------------------------------------------------------------
# shipped GPU records (all measured before the steady warm-up and with one or two repetitions: no verdict stands)


def test_shipped_8_gpu_records() -> None:
    t = read_tables(REFERENCE / "h200x8-2026-11-21" / "h200x8-parallelism" / "tables")
    df = evaluate(t).set_index("finding")
    assert (df["verdict"] == CANNOT_SAY).all()
    assert "steady" in df.loc["gpus_thermally_asymmetric", "why"]
    for f in ("overlap_raises_peak_temp", "microbatch_raises_peak_power", "recompute_less_throttling_deep_pp"):
        assert df.loc[f, "needs"]


def test_shipped_4_gpu_records_single_measurement_has_no_interval() -> None:
    t = read_tables(REFERENCE / "h200x4-2026-11-21" / "h200x4-parallelism" / "tables")
    df = evaluate(t).set_index("finding")
    share = df.loc["dense_compute_share_over_half"]  # the lowest GEMM/attention share: TP1-PP4, one measurement
    assert share["value"] == pytest.approx(0.483, abs=0.001) and share["direction"] == DISAGREES
    assert "non-communication share of llama3-8b_h200-1x4_tp1-pp4-dp1_z1_rc-none_ov-off_mb1-gb8-s8192: 0.638" in \
        share["detail"]  # the secondary reading, labelled, never judged
    assert share["verdict"] == CANNOT_SAY and "tp1-pp4" in share["configs"] and math.isnan(share["ci95_low"])
    html = to_html(evaluate(t), "h200x4")
    assert html.count("<tr") == len(df) + 1


def test_shipped_findings_sweeps_2x_h200_and_1x_h100() -> None:
    """The findings sweeps of 2026-11-23: transient windows, 1-2 repetitions, single-node cross-hardware pairs."""
    ref = REFERENCE / "findings-2026-11-23"
    t = read_tables(ref / "h200x2-findings" / "tables")
    t["compare"] = read_tables(ref / "h100x1-findings" / "tables")["runs"]
    df = evaluate(t).set_index("finding")
    assert (df["verdict"] == CANNOT_SAY).all()
    assert "23 of 23 measured cell(s) fail: a thermally steady" in df.loc["microbatch_raises_peak_temp", "why"]
    fsdp = df.loc["microbatch_speeds_up_fsdp"]  # mb 1 -> 4 measured once each side at a common repetition
    assert fsdp["direction"] == AGREES and math.isnan(fsdp["ci95_low"])
    ratio = df.loc["h100_scale_out_wins_compute_bound"]
    assert "two or more nodes" in ratio["why"] and "single-node H200 / H100" in ratio["detail"]
    assert "-1x1_" not in df.loc["dense_compute_share_over_half", "configs"]


def test_a_cpu_sweep_says_why_it_cannot_say() -> None:
    cpu = [row(hardware="cpu", zero_stage=3, overlap=ov, tokens_per_s=100.0) for ov in (False, True)]
    r = result(runs(cpu), "overlap_raises_peak_temp")
    assert r["verdict"] == CANNOT_SAY and "CPU ranks: no GPU telemetry" in r["why"]


def _depth_rows(loaded: dict[int, float] | None) -> list[dict]:
    """TP4+SP, TP2-PP2+SP and TP1-PP4 on one 4-GPU node, 3 repetitions: the time-averaged clock rises with depth
    (+10 MHz a doubling, as PP4's bubbles run near the ceiling), the clock under load as ``loaded`` says."""
    clock = {1: 1710.0, 2: 1712.0, 4: 1730.0}
    out = []
    for pp in (1, 2, 4):
        for k in range(3):
            extra = {} if loaded is None else {"sm_clock_loaded_avg_mhz": loaded[pp] + k}
            out.append(row(gpus_per_node=4, world_size=4, tp=4 // pp, pp=pp, dp=1, sequence_parallel=pp < 4,
                           sm_clock_avg_mhz=clock[pp] + k, repeat=k, **extra))
    return out


def test_the_depth_finding_shows_the_clock_under_load_beside_its_verdict() -> None:
    r = result(runs(_depth_rows({1: 1710.0, 2: 1700.0, 4: 1670.0})), "deep_pp_throttles_more")
    assert r["value"] == pytest.approx(10.0)  # the verdict reads the registered time average
    assert "secondary reading, never judged: mean SM clock under load" in r["detail"]
    assert "-20 MHz/doubling" in r["detail"]  # (1670 - 1710) / 2 doublings
    r = result(runs(_depth_rows(None)), "deep_pp_throttles_more")  # tables built before the column: nothing shown
    assert "secondary reading" not in r["detail"] and r["value"] == pytest.approx(10.0)

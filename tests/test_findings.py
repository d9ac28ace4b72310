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
from calorimeter.findings import COLUMNS, evaluate
from calorimeter.findings.report import to_html, write_findings
from calorimeter.findings.stats import (
    AGREES,
    CANNOT_SAY,
    DISAGREES,
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
                measured_steps=4)
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
                 cfgs: tuple = CONFIGS3) -> list[dict]:
    """Overlap on/off at data-parallel configurations (ZeRO stage, recompute, base peak temperature),
    ``repeats`` repetitions each; peak temperature raised by ``effect_c`` with overlap on."""
    rng = np.random.default_rng(seed)
    out = []
    for z, rc, base in cfgs:
        for ov in (False, True):
            for k in range(repeats):
                out.append(row(zero_stage=z, recompute=rc, overlap=ov, repeat=k,
                               temp_peak_c=base + effect_c * ov + rng.normal(0, noise),
                               sm_clock_avg_mhz=1800 - 40 * ov + rng.normal(0, 3)))
    # never an overlap pair: pipeline with dp = 1 (overlap changes nothing there), and an oom cell
    out.append(row(tp=1, pp=2, dp=1, overlap=False, temp_peak_c=50.0, sm_clock_avg_mhz=1900.0))
    out.append(row(tp=1, pp=2, dp=1, overlap=True, temp_peak_c=90.0, sm_clock_avg_mhz=1000.0))
    out.append(row(zero_stage=2, micro_batch=8, overlap=True, status="oom", temp_peak_c=99.0))
    out.append(row(zero_stage=2, micro_batch=8, overlap=False, temp_peak_c=40.0))
    return out


def test_overlap_effect_agrees_disagrees_or_shows_no_effect() -> None:
    r = result(runs(overlap_rows(+3.0)), "overlap_raises_peak_temp")
    assert r["verdict"] == AGREES and r["n"] == 6 and r["n_repeats"] == 2  # 3 pairs x 2 repetitions
    assert r["value"] == pytest.approx(3.0, abs=0.5)
    assert "pp2" not in r["configs"] and "mb8" not in r["configs"]  # no-op and oom pairs are not compared
    assert result(runs(overlap_rows(-3.0)), "overlap_raises_peak_temp")["verdict"] == DISAGREES
    eight = tuple((z, rc, 60.0 + k) for k, (z, rc) in enumerate((z, rc) for z in (1, 2, 3, 0)
                                                                  for rc in ("none", "full")))
    none = result(runs(overlap_rows(0.0, repeats=3, noise=0.05, cfgs=eight)), "overlap_raises_peak_temp")
    assert none["n"] == 18  # 6 pairs x 3 repetitions: ZeRO-0 has no overlapped path (docs/knobs.md), not compared
    assert none["verdict"] == DISAGREES and "no effect" in none["why"]  # the interval sits within the 1 degC step
    few = result(runs(overlap_rows(0.0, repeats=1, noise=0.05, cfgs=CONFIGS3[:2])), "overlap_raises_peak_temp")
    assert few["verdict"] == CANNOT_SAY  # 2 differences: the 1 degC quantization alone makes the interval wider
    clock = result(runs(overlap_rows(+3.0)), "overlap_raises_throttling")
    assert clock["verdict"] == AGREES and clock["value"] == pytest.approx(-40, abs=5)


def test_tensor_parallel_overlap_pairs_need_sequence_parallelism() -> None:
    rows = [row(tp=2, dp=1, sequence_parallel=sp, overlap=ov, repeat=k, temp_peak_c=60.0 + 2 * ov + 0.1 * k)
            for sp in (True, False) for ov in (False, True) for k in range(2)]
    r = result(runs(rows), "overlap_raises_peak_temp")
    assert r["n"] == 2 and "sp" in r["configs"].split(";")[0]  # the ring overlap needs SP; tp2 without it: no-op


def test_one_measurement_has_no_interval_and_says_what_is_missing() -> None:
    one = [row(zero_stage=3, overlap=ov, temp_peak_c=60.0 + 2 * ov) for ov in (False, True)]
    r = result(runs(one), "overlap_raises_peak_temp")
    assert r["verdict"] == CANNOT_SAY and r["direction"] == AGREES and r["value"] == 2.0
    assert math.isnan(r["ci95_low"]) and "repetitions" in r["needs"]
    # one pair with repetitions: paired by repetition index (repetition k of both ran in the same pass)
    rep = [row(zero_stage=3, overlap=ov, repeat=k, temp_peak_c=60.0 + 4 * ov + 0.2 * k)
           for ov in (False, True) for k in range(3)]
    r = result(runs(rep), "overlap_raises_peak_temp")
    assert r["verdict"] == AGREES and r["n"] == 3 and "3 differences" in r["interval"]
    # repetitions that do not line up (another pass's cells failed): Welch's interval over the two sides
    skew = [x for x in rep if not (x["overlap"] and x["repeat"] == 0) and not (not x["overlap"] and x["repeat"] > 0)]
    skew += [row(zero_stage=3, overlap=False, repeat=3, temp_peak_c=60.1)]
    r = result(runs(skew), "overlap_raises_peak_temp")
    assert "Welch" in r["interval"]


def test_microbatch_slopes_and_throughput_ratio() -> None:
    rows = []
    for layout in ({"zero_stage": 3}, {"pp": 2, "dp": 1}):
        for mb in (1, 2, 4, 8):
            for k in range(2):
                fsdp = layout.get("zero_stage") == 3
                rows.append(row(**layout, micro_batch=mb, repeat=k, recompute="full",
                                power_peak_w=700 + 30 * math.log2(mb) + k, temp_peak_c=60 + math.log2(mb) + k,
                                tokens_per_s=1000 * (1.2 if fsdp else 0.9) ** math.log2(mb) * (1 + 0.01 * k)))
    t = runs(rows)
    power = result(t, "microbatch_raises_peak_power")
    assert power["verdict"] == AGREES and power["value"] == pytest.approx(30, abs=1) and power["n"] == 16
    fsdp, pp = result(t, "microbatch_speeds_up_fsdp"), result(t, "microbatch_no_gain_pp")
    assert fsdp["value"] == pytest.approx(1.2, rel=0.02) and fsdp["verdict"] == AGREES
    # the direction agrees; the study's >3x from micro-batch 1 to 4 (1.73x per doubling) is above the interval
    assert "1.73 x/doubling lies above the whole interval" in fsdp["why"]
    assert pp["value"] == pytest.approx(0.9, rel=0.02) and pp["verdict"] == AGREES


def test_pipeline_depth_compares_tp_with_pp_at_the_same_data_parallel_degree() -> None:
    """TP2 vs PP2 (dp 1) is the claim's comparison; a dp2 layout on the same GPUs is not TP-heavy and stays out."""
    rows = [row(tp=2, dp=1, sequence_parallel=True, sm_clock_avg_mhz=1950.0 + k, repeat=k) for k in range(2)]
    rows += [row(pp=2, dp=1, sm_clock_avg_mhz=1850.0 + k, repeat=k) for k in range(2)]
    rows += [row(sm_clock_avg_mhz=1600.0 + 10 * k, repeat=k) for k in range(2)]  # ZeRO-1 dp2: far lower clock
    r = result(runs(rows), "deep_pp_throttles_more")
    assert r["value"] == pytest.approx(-100.0) and r["n"] == 4 and "dp2" not in r["configs"]
    assert r["verdict"] == AGREES


def test_kernel_shares_leave_out_single_gpu_cells() -> None:
    """One GPU has no communication kernels: its compute share of 1 is no evidence for a distributed claim."""
    one = row(world_size=1, gpus_per_node=1, dp=1)
    two = row()
    kernels = pd.DataFrame({"cell_id": [one["cell_id"], two["cell_id"], two["cell_id"]],
                            "is_comm": [False, False, True], "sum_s": [1.0, 0.6, 0.4]})
    t = {**runs([one]), "kernels": kernels}
    r = result(t, "dense_compute_share_over_half")
    assert math.isnan(r["value"]) and "two GPUs or more" in r["why"]
    t = {**runs([one, two]), "kernels": kernels}
    r = result(t, "dense_compute_share_over_half")
    assert r["value"] == pytest.approx(0.6) and r["configs"] == two["config_id"]


def test_hardware_ratio_reads_only_the_named_comparison_sweep() -> None:
    h200 = [row(world_size=1, gpus_per_node=1, dp=1, repeat=k, tokens_per_s_per_gpu=10000 + 50 * k,
                energy_per_token_j=0.070) for k in range(2)]
    h100 = [row(hardware="h100", world_size=1, gpus_per_node=1, dp=1, repeat=k, tokens_per_s_per_gpu=8000 + 50 * k,
                energy_per_token_j=0.080) for k in range(2)]
    t = runs(h200)
    assert "compare:" in result(t, "h100_scale_out_wins_compute_bound")["why"]
    t["compare_missing"] = pd.DataFrame({"sweep": ["h100x1-findings"]})
    assert "h100x1-findings" in result(t, "h100_scale_out_wins_compute_bound")["why"]
    t["compare"] = pd.DataFrame(h100)
    r = result(t, "h100_scale_out_wins_compute_bound")
    assert r["value"] == pytest.approx(10025 / 8025, rel=1e-3) and r["verdict"] == CANNOT_SAY  # one degree of freedom
    assert result(t, "h200_energy_per_token")["value"] == pytest.approx(0.875, rel=1e-3)


def test_every_finding_evaluates_on_synthetic_study_sweeps(tmp_path) -> None:
    for sweep in ("h200-microbatch.yaml",):
        t = synthetic_tables([pc.to_dict() for pc in plan_file(SWEEPS / sweep).cells], run_pruned=True)
        df = evaluate(t)
        assert not df["why"].str.contains("check failed").any()
        assert set(df["verdict"]) <= {AGREES, DISAGREES, CANNOT_SAY}
        assert (df.loc[df["verdict"] == CANNOT_SAY, "needs"] != "").all()  # each "cannot say" says what is missing
    mb = df.set_index("finding")
    assert mb.loc["microbatch_raises_peak_power", "verdict"] == AGREES  # the generator raises power with mbs
    write_findings(df, tmp_path / "f.csv", tmp_path / "f.html", "synthetic")
    back = pd.read_csv(tmp_path / "f.csv")
    assert list(back["finding"]) == list(df["finding"])
    assert "<table>" in (tmp_path / "f.html").read_text()


# ---------------------------------------------------------------------------------------------------------------
# shipped GPU records


def test_shipped_8_gpu_records() -> None:
    t = read_tables(REFERENCE / "h200x8-2026-11-21" / "h200x8-parallelism" / "tables")
    df = evaluate(t).set_index("finding")
    depth = df.loc["deep_pp_throttles_more"]
    # TP8 1979, TP4-PP2 1921, TP2-PP4 1880, TP1-PP8 1862 MHz: about -39 MHz per doubling of pipeline depth
    assert depth["value"] == pytest.approx(-39.3, abs=0.1) and depth["verdict"] == CANNOT_SAY and depth["n"] == 4
    asym = df.loc["gpus_thermally_asymmetric"]
    assert asym["verdict"] == AGREES and "hottest GPU index 4 in 4 of 4" in asym["detail"]
    # no overlap/recompute/micro-batch variants in that sweep: cannot say, and why
    for f in ("overlap_raises_peak_temp", "microbatch_raises_peak_power", "recompute_less_throttling_deep_pp"):
        assert df.loc[f, "verdict"] == CANNOT_SAY and df.loc[f, "needs"]


def test_shipped_4_gpu_records_single_pair_has_no_interval() -> None:
    t = read_tables(REFERENCE / "h200x4-2026-11-21" / "h200x4-parallelism" / "tables")
    df = evaluate(t).set_index("finding")
    deep = df.loc["recompute_less_throttling_deep_pp"]  # TP1-PP4 with and without recompute, measured once
    assert deep["verdict"] == CANNOT_SAY and deep["n"] == 1 and math.isnan(deep["ci95_low"])
    share = df.loc["dense_compute_share_over_half"]  # the lowest dense compute share: TP1-PP4, one measurement
    assert share["value"] == pytest.approx(0.638, abs=0.001) and share["direction"] == AGREES
    assert share["verdict"] == CANNOT_SAY and "tp1-pp4" in share["configs"]
    html = to_html(evaluate(t), "h200x4")
    assert html.count("<tr") == len(df) + 1


def test_shipped_findings_sweeps_2x_h200_and_1x_h100() -> None:
    """The findings sweeps of 2026-11-23 (README there): the verdicts its table states."""
    ref = REFERENCE / "findings-2026-11-23"
    t = read_tables(ref / "h200x2-findings" / "tables")
    t["compare"] = read_tables(ref / "h100x1-findings" / "tables")["runs"]
    df = evaluate(t).set_index("finding")
    over = df.loc["overlap_raises_peak_temp"]  # ZeRO-3 +3/+2, ZeRO-1 -1/-1, TP2+SP -1 degC
    assert over["value"] == pytest.approx(0.4) and over["n"] == 5 and over["verdict"] == CANNOT_SAY
    depth = df.loc["deep_pp_throttles_more"]  # TP2+SP vs PP2 with and without recompute; the dp2 layout is no side
    assert depth["value"] == pytest.approx(-148.3, abs=0.1) and depth["n"] == 4 and depth["verdict"] == CANNOT_SAY
    assert "dp2" not in depth["configs"]
    fsdp = df.loc["microbatch_speeds_up_fsdp"]
    assert fsdp["value"] == pytest.approx(1.354, abs=0.001) and fsdp["verdict"] == AGREES
    assert "lies above the whole interval" in fsdp["why"]
    assert df.loc["gpus_thermally_asymmetric", "verdict"] == AGREES
    assert "hottest GPU index 0 in 16 of 16" in df.loc["gpus_thermally_asymmetric", "detail"]
    ratio = df.loc["h100_scale_out_wins_compute_bound"]  # 33768 / 31414 and 29070 / 27042 tokens/s
    assert ratio["value"] == pytest.approx(1.075, abs=0.001) and ratio["verdict"] == CANNOT_SAY
    assert df.loc["h200_energy_per_token", "value"] == pytest.approx(0.947, abs=0.001)
    assert "-1x1_" not in df.loc["dense_compute_share_over_half", "configs"]


def test_a_cpu_sweep_says_why_it_cannot_say() -> None:
    cpu = [row(hardware="cpu", zero_stage=3, overlap=ov, tokens_per_s=100.0) for ov in (False, True)]
    r = result(runs(cpu), "overlap_raises_peak_temp")
    assert r["verdict"] == CANNOT_SAY and "CPU ranks: no GPU telemetry" in r["why"]

"""Calibration by engine fingerprint, per GPU type; bands with coverage; host-bound/extrapolated flags; leave one
configuration out (on the committed current-engine records)."""

from __future__ import annotations

import math

import pytest
from conftest import ROOT

from calorimeter.projection.calibration import calibrate_all
from calorimeter.projection.engine_speed import cell_from_id
from calorimeter.projection.fingerprint import Fingerprint, from_record, matches
from calorimeter.projection.measured import load_measured
from calorimeter.projection.model import Projector, band_interval
from calorimeter.projection.sweep import choose_calibration, project_cells
from calorimeter.projection.validation import loco, loco_summary, newest_fingerprints

REF = "results/reference/"
H100 = str(ROOT / REF / "findings-2026-11-23/h100x1-findings")
H200_NOW = str(ROOT / REF / "h200x2-placement-2026-11-23b/h200x2-placement")
H200_OLD = str(ROOT / REF / "h200x2-2026-11-21/gpu-llama8b")
BENCH = str(ROOT / REF / "h200x2-engine-speed-2026-11-23c")


@pytest.fixture(scope="module")
def ms():
    return load_measured([H100, H200_NOW, H200_OLD, BENCH])


@pytest.fixture(scope="module")
def cals(ms):
    return calibrate_all([], ms=ms)


def test_fingerprint_reads_the_engine_and_resolves_default_attention() -> None:
    run = {"engine": {"kernels": {"attention": "default", "fused": "liger"},
                      "kernel_choice": {"attention_requested": "default",
                                        "attention_probe": {"pytorch_default": "cudnn"}},
                      "overlap": {"tp_comm_overlap": "symm_mem"}},
           "provenance": {"packages": {"torch": "2.11.0", "deepspeed": "0.19.8", "megatron-core": "0.16.1"},
                          "ranks": [{"device": "NVIDIA H200"}]}}
    fp = from_record(run, 700.0)
    assert (fp.attention, fp.fused, fp.tp_overlap, fp.power_limit_w) == ("cudnn", "liger", "symm_mem", "700")
    assert fp.key.startswith("cudnn-liger-")
    auto = {**run, "engine": {**run["engine"], "kernel_choice": {"attention_requested": "auto"}}}
    assert from_record(auto, 700.0).attention == "auto"  # chosen per shape by the engine: one fingerprint
    old = from_record({"provenance": run["provenance"]}, 700.0)  # 2026-11-21: no engine block
    assert not old.kernels_recorded and not matches(fp, old)
    partial = Fingerprint(attention="cudnn", fused="liger", torch="2.11.0")  # versions unrecorded
    assert matches(fp, partial) and not matches(fp, Fingerprint(attention="cudnn", fused="eager"))


def test_one_calibration_per_gpu_type_and_fingerprint_naming_its_records(ms, cals) -> None:
    hw = {c.hardware for c in cals.values()}
    assert hw == {"h100", "h200"}
    fps = newest_fingerprints(ms)
    now = cals[f"h200/{fps['h200']}"]
    # the benchmark lines (no versions recorded) joined the placement records' fingerprint
    assert {H200_NOW, BENCH} <= set(now.records) and H200_OLD not in now.records
    assert now.fingerprint["attention"] == "auto" and now.recorded_at.startswith("2026112")
    assert "symm_mem" in now.tp_hidden and 0 < now.tp_hidden["symm_mem"] < 1
    assert any(not Fingerprint.from_dict(c.fingerprint).kernels_recorded for c in cals.values())  # the old engine


def test_projection_uses_its_gpu_types_newest_matching_calibration(ms, cals) -> None:
    h100_cell = ms.cell(ms.runs.cell_id[ms.runs.hardware == "h100"].iloc[0])
    cal, rel = choose_calibration("h100", cals)
    assert (cal.hardware, rel) == ("h100", "match")
    cal, rel = choose_calibration("h200", cals, {"fused": "compile"})  # an engine never measured
    assert rel == "foreign" and cal.hardware == "h200"
    cal, rel = choose_calibration("mi300x", cals)
    assert rel == "other-gpu"
    row = project_cells([h100_cell], cals, engine={"fused": "compile"}).iloc[0]
    assert row["calibration_relation"] == "foreign" and "is not the engine projected for" in row["assumed"]


def test_rows_carry_bands_and_flags(cals) -> None:
    cal, _ = choose_calibration("h200", cals)
    cal.error_band = dict.fromkeys(("iteration_time_s", "tokens_per_s_per_gpu", "mfu_full", "power_avg_w",
                                    "energy_per_token_j"), 0.1)
    cal.cross_fingerprint_error = {"tokens_per_s_per_gpu": 0.2}
    inside = cell_from_id("llama3-8b_h200-1x2_tp2-pp1-dp1-sp_z1_rc-none_ov-on_mb1-gb8-s8192")
    row = Projector(cal).project(inside)
    assert not row["extrapolated"] and row["tp_overlap"] == "symm_mem"
    for m in ("iteration_time_s", "tokens_per_s_per_gpu", "mfu_full", "power_avg_w", "energy_per_token_j"):
        assert row[f"{m}_low"] < row[m] < row[f"{m}_high"]
    assert row["tokens_per_s_per_gpu_high"] == pytest.approx(row["tokens_per_s_per_gpu"] / 0.9)
    big = cell_from_id("llama3-8b_h200-1x8_tp8-pp1-dp1-sp_z1_rc-none_ov-on_mb1-gb8-s8192")
    row = Projector(cal).project(big)
    assert row["extrapolated"] and "world_size=8" in row["extrapolated_parts"] and "tp=8" in row["extrapolated_parts"]
    # outside the calibration's range: its band widened by the calibration's error on cells it never saw
    assert row["tokens_per_s_per_gpu_band"] == pytest.approx(0.3) and math.isnan(row["power_avg_w_band"])
    assert "extrapolated: bands widened" in row["assumed"] and "tokens_per_s_per_gpu 20.0%" in row["assumed"]
    foreign = Projector(cal, relation="foreign").project(big)
    assert foreign["tokens_per_s_per_gpu_band"] == pytest.approx(0.3)
    assert math.isnan(foreign["power_avg_w_band"])  # a cross-fingerprint error never measured: no band claimed
    assert band_interval(100.0, 0.25) == pytest.approx((80.0, 100.0 / 0.75))


def test_host_bound_cell_is_flagged(cals) -> None:
    cal, _ = choose_calibration("h200", cals)
    tiny = cell_from_id("llama3-8b-8l_h200-1x2_tp2-pp1-dp1-sp_z1_rc-none_ov-on_mb1-gb16-s512")
    row = Projector(cal).project(tiny)
    assert row["host_bound"] and row["t_host_gap_s"] > 0.2 * row["iteration_time_s"]
    assert row["extrapolated"]  # sequence 512: its band adds the cross-fingerprint error
    cal.error_band, cal.error_band_host_bound = {"tokens_per_s_per_gpu": 0.05}, {"tokens_per_s_per_gpu": 0.3}
    cal.cross_fingerprint_error = {"tokens_per_s_per_gpu": 0.1}
    assert Projector(cal).project(tiny)["tokens_per_s_per_gpu_band"] == pytest.approx(0.4)  # its regime's band
    cal.error_band_host_bound = {}
    assert Projector(cal).project(tiny)["tokens_per_s_per_gpu_band"] == pytest.approx(0.15)  # never validated


def test_leave_one_configuration_out_holds_out_every_repetition_and_checks_coverage() -> None:
    h100 = load_measured([H100])
    table = loco(h100, newest_fingerprints(h100))
    match = table[table["relation"] == "match"]
    assert len(match) == 5 and match["fold"].nunique() == 5
    assert (match["calibration_cells"] == 4).all()  # the held-out cell never calibrates its own prediction
    inside = ~match["extrapolated"].astype(bool)
    assert match.loc[inside, "tokens_per_s_per_gpu_covered"].notna().all() and inside.sum() >= 3
    # outside the range, with no other calibration to measure a cross error on: no band claimed
    assert match.loc[~inside, "tokens_per_s_per_gpu_band"].isna().all()
    s = loco_summary(table)
    g = next(iter(s["groups"].values()))
    assert g["folds"] == 5 and set(g["per_fold"]) == set(match["fold"])
    assert 0 <= g["tokens_per_s_per_gpu"]["coverage"] <= 1 and "mean_signed" in g["energy_per_token_j"]


def test_coverage_is_met_within_the_sampling_allowance() -> None:
    from calorimeter.projection.validation import coverage_met

    assert coverage_met(0.87, 38) and not coverage_met(0.80, 38)  # allowance 8 points at 38 cells
    assert coverage_met(0.80, 5) and not coverage_met(0.60, 5)
    assert coverage_met(float("nan"), 0)


def test_bands_are_chosen_by_the_projected_regime() -> None:
    """Host-bound rows err wider (the host's speed): a band pooled over both regimes covered 68% of the held-out
    host-bound H200 cells and 98% of the others (2026-11-27). Each regime now takes the quantile of its own rows,
    in the held-out bands and in the calibration's, and a projected row its own regime's band."""
    import pandas as pd

    from calorimeter.projection.validation import BAND_MIN_CELLS, add_bands, error_band

    rows = []
    for i in range(40):
        hb = i % 2 == 0
        e = (0.02 + 0.3 * (i % 7) / 6) if hb else 0.01 * (i % 5)
        rows.append({"fold": f"f{i}", "relation": "match", "hardware": "h200", "fingerprint": "x",
                     "predicted_host_bound": hb, **{f"{m}_rel_error": e for m in
                                                     ("iteration_time_s", "energy_per_token_j", "power_avg_w",
                                                      "tokens_per_s_per_gpu", "mfu_full")}})
    t = add_bands(pd.DataFrame(rows))
    hb = t["predicted_host_bound"]
    assert (t.loc[hb, "tokens_per_s_per_gpu_band"] > 0.25).all()
    assert (t.loc[~hb, "tokens_per_s_per_gpu_band"] < 0.05).all()
    wide, narrow = error_band(t, host_bound=True), error_band(t, host_bound=False)
    assert wide["power_avg_w"] > 0.25 > 0.05 > narrow["power_avg_w"]
    few = pd.DataFrame(rows[: 2 * (BAND_MIN_CELLS - 1)])  # fewer host-bound rows than a band of their own needs
    assert error_band(few, host_bound=True) == error_band(few)


def test_a_held_out_row_outside_the_calibration_range_has_its_band_widened_by_the_cross_error() -> None:
    """The 2x H100 cells (ZeRO-3 and TP outside the H100 calibration) fell outside bands built from in-range cells
    (energy per token -17% to +16% against +-11%): an extrapolated row's band adds the calibration's measured error
    on another GPU type's cells, in the validation as in a projected row."""
    import pandas as pd

    from calorimeter.projection.validation import METRICS, add_bands, cross_errors

    rows = [{"fold": f"f{i}", "relation": "match", "hardware": "h100", "fingerprint": "x", "calibration": "h100/x",
             "predicted_host_bound": False, "extrapolated": i == 0,
             **{f"{m}_rel_error": (0.22 if i == 0 else 0.01 * (i % 5)) for m in METRICS}} for i in range(12)]
    rows += [{"fold": "c", "relation": "other-gpu", "hardware": "h200", "fingerprint": "y", "calibration": "h100/x",
              "extrapolated": False, **{f"{m}_rel_error": 0.1 * (i % 3) for m in METRICS}} for i in range(10)]
    t = add_bands(pd.DataFrame(rows))
    cross = cross_errors(t, "h100/x")
    assert cross["tokens_per_s_per_gpu"] == pytest.approx(0.2)
    inside = t.loc[(t["relation"] == "match") & ~t["extrapolated"], "tokens_per_s_per_gpu_band"]
    assert (inside < 0.05).all()
    row = t.iloc[0]
    assert row["tokens_per_s_per_gpu_band"] == pytest.approx(inside.iloc[0] + 0.2)
    assert row["tokens_per_s_per_gpu_covered"]
    assert not add_bands(pd.DataFrame(rows).assign(extrapolated=False)).iloc[0]["tokens_per_s_per_gpu_covered"]

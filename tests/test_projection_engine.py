"""Calibration by engine fingerprint, per GPU type; bands with coverage; host-bound/extrapolated flags; leave one
configuration out (on the committed current-engine records)."""

from __future__ import annotations

import math

import pytest
from conftest import ROOT

from calorimeter.projection.accuracy import loco_summary
from calorimeter.projection.calibration import calibrate_all
from calorimeter.projection.engine_speed import cell_from_id
from calorimeter.projection.fingerprint import Fingerprint, matches
from calorimeter.projection.measured import load_measured
from calorimeter.projection.model import Projector, band_interval
from calorimeter.projection.sweep import choose_calibration, project_cells
from calorimeter.projection.validation import loco, newest_fingerprints
from calorimeter.records.run_record import RunRecord

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


def _of(run: dict, power_limit_w: float) -> Fingerprint:
    return Fingerprint.of(RunRecord.from_dict({"cell": {}, "status": "ok", **run}), power_limit_w)


def test_fingerprint_reads_the_engine_and_resolves_default_attention() -> None:
    run = {"engine": {"kernels": {"attention": "default", "fused": "liger"},
                      "kernel_choice": {"attention_requested": "default",
                                        "attention_probe": {"pytorch_default": "cudnn"}},
                      "overlap": {"tp_comm_overlap": "symm_mem"}},
           "provenance": {"packages": {"torch": "2.11.0", "deepspeed": "0.19.8", "megatron-core": "0.16.1"},
                          "ranks": [{"device": "NVIDIA H200"}]}}
    fp = _of(run, 700.0)
    assert (fp.attention, fp.fused, fp.tp_overlap, fp.power_limit_w) == ("cudnn", "liger", "symm_mem", "700")
    assert fp.key.startswith("cudnn-liger-")
    auto = {**run, "engine": {**run["engine"], "kernel_choice": {"attention_requested": "auto"}}}
    assert _of(auto, 700.0).attention == "auto"  # chosen per shape by the engine: one fingerprint
    assert _of(auto, 700.0).key != fp.key and _of(auto, 700.0).ran() == fp.ran()  # the same kernels ran
    assert fp.ran() == {"attention": "default", "expand_kv": "unrecorded", "fused": "liger",
                        "overlap_comm": "unrecorded", "tp_overlap": "symm_mem", "torch": "2.11"}
    old = _of({"provenance": run["provenance"]}, 700.0)  # records from before the engine block
    assert not old.kernels_recorded and not matches(fp, old) and old.ran() == {}
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


METRICS = ("iteration_time_s", "tokens_per_s_per_gpu", "mfu_full", "power_avg_w", "energy_per_token_j")


def test_rows_carry_bands_by_regime_and_flags(cals) -> None:
    """A row takes the widest measured band of its regimes; beyond the range, its extrapolation regime's band grows
    with the doublings beyond those measured; a metric that regime never measured has no band."""
    from calorimeter.projection.regimes import GPU_BOUND, RegimeBand

    cal, _ = choose_calibration("h200", cals)
    cal.regime_bands = {GPU_BOUND: RegimeBand(dict.fromkeys(METRICS, 0.1), 20),
                        "dense GPU-bound, extrapolated in GPU count": RegimeBand({"tokens_per_s_per_gpu": 0.2}, 10,
                                                                                 factor=2.0)}
    cal.machine_spread = {}
    cal.cross_fingerprint_error = {"tokens_per_s_per_gpu": 0.2}
    inside = cell_from_id("llama3-8b_h200-1x2_tp2-pp1-dp1-sp_z1_rc-none_ov-on_mb1-gb8-s8192")
    row = Projector(cal).project(inside)
    assert not row["extrapolated"] and row["tp_overlap"] == "symm_mem" and row["regime"] == GPU_BOUND
    assert row["machine_class"].startswith("H200 141 GB, 2 per node") and row["refused"] == ""
    for m in METRICS:
        assert row[f"{m}_low"] < row[m] < row[f"{m}_high"]
    assert row["tokens_per_s_per_gpu_high"] == pytest.approx(row["tokens_per_s_per_gpu"] / 0.9)
    big = cell_from_id("llama3-8b_h200-1x8_tp8-pp1-dp1-sp_z1_rc-none_ov-on_mb1-gb8-s8192")
    row = Projector(cal).project(big)
    assert row["extrapolated"] and "world_size=8" in row["extrapolated_parts"] and "tp=8" in row["extrapolated_parts"]
    assert row["regime"] == "dense GPU-bound; extrapolated in GPU count" and row["beyond_gpu_count"] == 4.0
    # two doublings beyond a range measured one doubling out: twice the measured band
    assert row["tokens_per_s_per_gpu_band"] == pytest.approx(0.4)
    assert "extrapolated in GPU count" in row["band_basis"]
    assert math.isnan(row["power_avg_w_band"])  # never measured in that regime: no band claimed
    foreign = Projector(cal, relation="foreign").project(big)
    assert foreign["tokens_per_s_per_gpu_band"] == pytest.approx(0.6)  # plus the measured cross-fingerprint error
    assert math.isnan(foreign["power_avg_w_band"])
    assert band_interval(100.0, 0.25) == pytest.approx((80.0, 100.0 / 0.75))
    cal.regime_bands = {}
    never = Projector(cal).project(inside)
    assert math.isnan(never["tokens_per_s_per_gpu_band"]) and never["band_basis"] == "calibration never validated"


def test_a_moe_row_of_a_calibration_without_moe_cells_is_refused_with_the_reason(cals) -> None:
    """Mixtral cells projected from a dense calibration were a fifth to twice too fast (4x H100, 2026-11-27), outside
    bands that rested on the dense cells: such a row now carries no numbers, and says why."""
    from calorimeter.projection.regimes import GPU_BOUND, MOE_UNSEEN, RegimeBand

    cal, _ = choose_calibration("h200", cals)
    cal.regime_bands = {GPU_BOUND: RegimeBand(dict.fromkeys(METRICS, 0.1), 20),
                        MOE_UNSEEN: RegimeBand(reason="no MoE cell of this engine in the calibration")}
    moe = cell_from_id("mixtral-8x7b-4l_h200-1x2_tp1-pp1-dp2-ep2_z1_rc-none_ov-on_mb1-gb8-s4096")
    row = Projector(cal).project(moe)
    assert row["regime"].startswith("MoE") and MOE_UNSEEN in row["regime"]
    assert "MoE never calibrated: no MoE cell of this engine" in row["refused"]
    assert all(math.isnan(row[m]) for m in (*METRICS, "t_host_gap_s", "t_exposed_all_to_all_s"))
    kept = Projector(cal, refuse=False).project(moe)  # the validation measures what a refusal withholds
    assert kept["refused"] == row["refused"] and kept["iteration_time_s"] > 0
    assert math.isnan(kept["tokens_per_s_per_gpu_band"])


def test_host_bound_cell_is_flagged(cals) -> None:
    from calorimeter.projection.regimes import HOST_BOUND, RegimeBand

    cal, _ = choose_calibration("h200", cals)
    cal.regime_bands = {}  # never validated: no band, nothing refused
    tiny = cell_from_id("llama3-8b-8l_h200-1x2_tp2-pp1-dp1-sp_z1_rc-none_ov-on_mb1-gb16-s512")
    row = Projector(cal).project(tiny)
    assert row["host_bound"] and row["t_host_gap_s"] > 0.2 * row["iteration_time_s"]
    assert row["extrapolated"] and row["regime"].startswith("dense host-bound; extrapolated in sequence")
    assert row["beyond_sequence"] > 1  # below the calibrated sequences
    cal.regime_bands = {HOST_BOUND: RegimeBand({"tokens_per_s_per_gpu": 0.3}, 20),
                        "dense host-bound, extrapolated in sequence": RegimeBand({"tokens_per_s_per_gpu": 0.1}, 8),
                        "dense host-bound, extrapolated in model size": RegimeBand({"tokens_per_s_per_gpu": 0.1}, 8)}
    cal.machine_spread = {}
    assert Projector(cal).project(tiny)["tokens_per_s_per_gpu_band"] == pytest.approx(0.3)  # the widest regime's
    cal.machine_spread = {HOST_BOUND: {"tokens_per_s_per_gpu": 0.45}}
    row = Projector(cal).project(tiny)
    assert row["tokens_per_s_per_gpu_band"] == pytest.approx(0.45)  # never narrower than the machines' spread
    assert row["band_basis"].startswith("spread between machines")


def test_leave_one_configuration_out_holds_out_every_repetition_and_refuses_too_few() -> None:
    h100 = load_measured([H100])
    table = loco(h100, newest_fingerprints(h100))
    match = table[(table["relation"] == "match") & (table["design"] == "loco")]
    assert len(match) == 5 and match["fold"].nunique() == 5
    assert (match["calibration_cells"] == 4).all()  # the held-out cell never calibrates its own prediction
    # four other held-out rows measure no error of a regime: no band claimed, and why
    assert match["tokens_per_s_per_gpu_band"].isna().all() and match["tokens_per_s_per_gpu_covered"].isna().all()
    assert match["band_basis"].str.contains("fewer than 10").all()
    scale = table[table["design"] == "scale"]  # micro-batch 2, 4, 8 each from the cells below it
    assert len(scale) and scale["regime"].str.contains("extrapolated in micro-batch").all()
    s = loco_summary(table)
    g = next(iter(s["groups"].values()))
    assert g["folds"] == 5 and set(g["per_fold"]) == set(match["fold"])
    assert "mean_signed" in g["energy_per_token_j"] and "extrapolated in micro-batch" in str(s["regimes"])


def test_coverage_is_met_within_its_binomial_interval() -> None:
    from calorimeter.projection.accuracy import coverage_interval, coverage_met

    assert coverage_met(33 / 38, 38) and not coverage_met(30 / 38, 38)  # one-sided 5%: Clopper-Pearson
    assert coverage_met(3 / 5, 5) and not coverage_met(1 / 5, 5)
    assert coverage_met(float("nan"), 0)
    lo, hi = coverage_interval(8, 8)
    assert hi == 1.0 and lo == pytest.approx(0.6877, abs=1e-3)  # 8 of 8: 69-100%


def _rows(n: int, err, **kw) -> list[dict]:
    from calorimeter.projection.targets import METRICS as ALL

    hw, pre = kw.get("hardware", "h200"), kw.get("prefix", "f")
    return [{"fold": f"{pre}{i}", "cell_id": f"{pre}{i}", "relation": "match", "hardware": hw, "fingerprint": "x",
             "calibration": f"{hw}/x",
             "design": kw.get("design", "loco"), "regime": kw.get("regime", "dense GPU-bound"),
             "machine": kw.get("machine", ""), "beyond_gpu_count": kw.get("beyond", 1.0),
             **{f"{m}_rel_error": err(i) for m in ALL},
             **{f"{m}_measured": kw.get("measured", lambda i: 1.0)(i) for m in ALL}} for i in range(n)]


def test_bands_are_chosen_by_the_projected_regime() -> None:
    """Host-bound rows err wider (the host's speed): a band pooled over both regimes covered 68% of the held-out
    host-bound H200 cells and 98% of the others (2026-11-27). Each regime takes the quantile of its own rows, in the
    held-out bands and in the calibration's."""
    import pandas as pd

    from calorimeter.projection.bands import BAND_MIN_CELLS, add_bands, regime_bands
    from calorimeter.projection.regimes import GPU_BOUND, HOST_BOUND

    rows = []
    for i in range(40):
        hb = i % 2 == 0
        rows += _rows(1, lambda _, i=i, hb=hb: (0.02 + 0.3 * (i % 7) / 6) if hb else 0.01 * (i % 5),
                      prefix=f"r{i}-", regime=HOST_BOUND if hb else GPU_BOUND)
    t = add_bands(pd.DataFrame(rows))
    hb = t["regime"] == HOST_BOUND
    assert (t.loc[hb, "tokens_per_s_per_gpu_band"] > 0.25).all()
    assert (t.loc[~hb, "tokens_per_s_per_gpu_band"] < 0.05).all()
    bands = regime_bands(t, "h200", "x")
    assert bands[HOST_BOUND].band["power_avg_w"] > 0.25 > 0.05 > bands[GPU_BOUND].band["power_avg_w"]
    few = regime_bands(pd.DataFrame(rows[: 2 * (BAND_MIN_CELLS - 1)]), "h200", "x")
    assert few[HOST_BOUND].band == few[GPU_BOUND].band  # too few rows of a regime: every in-range dense row's


def test_an_extrapolated_row_takes_its_regimes_band_measured_on_other_rows() -> None:
    """The 2x H100 cells outside the H100 calibration fell outside bands built from in-range cells (energy per token
    -17% to +16% against +-11%); a row beyond the range takes the error measured on other rows beyond it that way,
    of any engine (the model's structure), never its own, and the cross-fingerprint error only for a foreign
    calibration."""
    import pandas as pd

    from calorimeter.projection.bands import add_bands, cross_errors

    inside = _rows(12, lambda i: 0.01 * (i % 5))
    beyond = _rows(6, lambda i: 0.20 + 0.02 * i, prefix="s", design="scale",
                   regime="dense GPU-bound; extrapolated in GPU count", beyond=2.0)
    cross = _rows(10, lambda i: 0.1 * (i % 3), prefix="c", design="cross")
    for r in cross:
        r["relation"], r["calibration"] = "other-gpu", "h100/x"
    t = add_bands(pd.DataFrame(inside + beyond + cross))
    assert cross_errors(t, "h100/x")["tokens_per_s_per_gpu"] == pytest.approx(0.2)
    assert (t.loc[t["fold"].str.startswith("f"), "tokens_per_s_per_gpu_band"] < 0.05).all()
    out = t[t["fold"].str.startswith("s")]
    assert (out["tokens_per_s_per_gpu_band"] > 0.2).all()
    assert out["band_basis"].str.contains("extrapolated in GPU count").all()
    assert t.loc[t["fold"].str.startswith("c"), "tokens_per_s_per_gpu_band"].isna().all()  # cross rows: no band


def test_the_machine_spread_is_the_floor_of_a_band() -> None:
    """One configuration on several machines (GPU UUIDs): each machine's mean about their geometric mean, the
    coverage quantile over configurations of the regime (H200 GPU-bound: 1.9% between three machines)."""
    import pandas as pd

    from calorimeter.projection.bands import machine_floor
    from calorimeter.projection.regimes import GPU_BOUND

    rows = []
    for c in range(4):
        for k, (m, v) in enumerate((("A", 1.0), ("B", 1.1), ("B", 1.1))):
            rows += _rows(1, lambda _: 0.0, prefix=f"c{c}-{k}", machine=m, measured=lambda _, v=v: v)
            rows[-1]["configuration"] = f"c{c}"
    floor = machine_floor(pd.DataFrame(rows), "h200", "x")
    g = (1.0 * 1.1) ** 0.5
    assert floor[GPU_BOUND]["tokens_per_s_per_gpu"] == pytest.approx(1.1 / g - 1.0)
    assert machine_floor(pd.DataFrame(rows[:6]), "h200", "x") == {}  # fewer than 3 configurations: none


def test_the_doc_block_is_generated_from_the_summary(tmp_path) -> None:
    from calorimeter.projection.report import DOC_BEGIN, DOC_END, write_doc_block

    doc = tmp_path / "d.md"
    doc.write_text(f"# t\n\n{DOC_BEGIN}\nold\n{DOC_END}\nafter\n")
    summary = {"coverage_stated": 0.9, "groups": {}, "regimes": {"tokens_per_s_per_gpu": {"dense GPU-bound": {
        "rows": 3, "engines": ["h200/x"], "median_abs": 0.02, "max_abs": 0.05, "mean_signed": -0.01,
        "band_median": 0.08, "banded": 3, "covered": 3, "coverage": 1.0, "coverage_90": [0.46, 1.0], "met": True}}},
               "bands": {"h200/x": {"regimes": {"MoE never calibrated": {"band": {}, "reason": "no MoE cell"}},
                                    "machine_spread": {}}}}
    write_doc_block(doc, summary, "v.json")
    text = doc.read_text()
    assert "\nold\n" not in text and text.endswith(f"{DOC_END}\nafter\n") and "Generated from `v.json`" in text
    assert "| dense GPU-bound | 3 | 1 | 2.0% / 5.0% / -1.0% | +-8.0% | 3/3 (46%-100%) |" in text
    assert "| MoE never calibrated | refused | | | no MoE cell |" in text


def test_the_committed_doc_block_is_what_its_validation_summary_says() -> None:
    """docs/projection.md's numbers per regime are generated from a committed validation.json, never typed: the block
    is exactly what that summary renders to (rerun `python bench/projection_validation.py --from-json <it> --doc
    docs/projection.md` after a new validation)."""
    import json
    import re

    from calorimeter.projection.report import DOC_BEGIN, DOC_END, summary_markdown

    text = (ROOT / "docs" / "projection.md").read_text()
    block = text.split(DOC_BEGIN, 1)[1].split(DOC_END, 1)[0]
    source = re.search(r"Generated from `([^`]+)`", block).group(1)
    assert block == "\n" + summary_markdown(json.loads((ROOT / source).read_text()), source)

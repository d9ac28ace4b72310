"""The cost before running (calorimeter.projection.cost): a cell's wall time from its projected step and its own
warm-up and measurement settings, the sweep's GPU-hours with the band, the cells counted apart, the cache; and
``calorimeter plan`` printing them for the study's sweep."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, SWEEPS

from calorimeter.cli import main
from calorimeter.plan.cell import Cell
from calorimeter.plan.plan import plan_file
from calorimeter.projection import cost
from calorimeter.projection.catalogue import catalogue
from calorimeter.projection.cost import CellCost, Step, SweepCost, Timing, cell_cost, stepped_s, sweep_cost, warmup_s

TIMING = Timing({"h200": {"startup_s": {"median": 30.0, "min": 20.0, "max": 40.0, "n": 5, "gpus": [2]},
                          "steady_warmup": {"n": 4, "capped": 3}}})


def _cell(**kw) -> Cell:
    d = {"sweep": "t", "model": "llama3-70b", "hardware": "h200", "nodes": 4, "gpus_per_node": 8, "tp": 8, "pp": 2,
         "global_batch": 128, "seq_len": 8192, "warmup_steps": 10, "measured_steps": 5, **kw}
    return Cell(**d)


def test_warmup_and_measured_steps_follow_the_engines_rules() -> None:
    steady = _cell()  # steady: at most warmup_max_s = 180 s (the step past it), at least 10 steps or the window
    assert warmup_s(steady, 40.0) == (5 * 40.0, 5 * 40.0)  # the cap (ceil(180 / 40) = 5 steps) beats the 10 steps
    assert warmup_s(steady, 1.0) == (100.0, 30.0)  # a fast step: the cap of 100 steps, least the 30 s slope window
    assert warmup_s(_cell(warmup="fixed"), 1.0) == (10.0, 10.0)
    assert warmup_s(_cell(warmup_max_steps=30), 1.0)[0] == 30.0
    # measured: at least measured_min_s (20 s), then the profiled steps
    assert stepped_s(steady, 1.0, 1) == 21.0 and stepped_s(steady, 40.0, 1) == 6 * 40.0


def test_a_cells_wall_time_and_band() -> None:
    c = _cell()
    got = cell_cost(c, Step(40.0, 30.0, 50.0), TIMING, profile_steps=1)
    assert got.wall_s == pytest.approx(30.0 + 200.0 + 240.0)
    assert got.wall_low_s == pytest.approx(20.0 + 6 * 30.0 + 6 * 30.0)  # least warm-up: ceil(180 / 30) = 6 steps
    assert got.wall_low_s < got.wall_s < got.wall_high_s == pytest.approx(40.0 + 4 * 50.0 + 6 * 50.0)
    assert got.describe() == "8 min (6.3-9.0 min)" and got.sentence().startswith("projected wall time 8 min")
    unbanded = cell_cost(c, Step(40.0), TIMING, profile_steps=1)  # a regime with no band claimed: none here
    assert unbanded.wall_s == got.wall_s and math.isnan(unbanded.wall_low_s)
    assert unbanded.describe() == "8 min (no band)"
    wide = cell_cost(c, Step(40.0, 20.0, math.inf), TIMING)  # a band of +-100% or more: unbounded above
    assert wide.wall_high_s == math.inf and wide.describe().endswith("-unbounded; low end in min)")
    assert "to unbounded" in SweepCost([wide]).lines()[0]
    none = cell_cost(c, Step(why_not="MoE: never measured"), TIMING)
    assert not none.projected and none.sentence() == "no projected wall time: MoE: never measured"
    assert "no measured start-up of h100" in cell_cost(_cell(hardware="h100"), Step(1.0, 1.0, 1.0), TIMING).why_not


def test_gpu_hours_count_projected_cells_only_and_say_what_is_apart() -> None:
    sc = SweepCost([CellCost("a", 32, 3600.0, 1800.0, 7200.0), CellCost("b", 8, 900.0, 900.0, 900.0),
                    CellCost("c", 32, why_not="kind command: not a training cell the projection models"),
                    CellCost("d", 1, why_not="kind command: not a training cell the projection models")],
                   "cal.json", ["step times: x"])
    assert sc.gpu_hours() == pytest.approx((34.0, 18.0, 66.0))
    lines = sc.lines({"b", "d"})
    assert lines[0].startswith("projected cost of 2 planned cells: 34.0 GPU-hours (18.0-66.0, band")
    assert "not projected, counted apart: 2 cells: kind command" in lines[1]
    assert "still to run (no record yet): 1 planned cell: 2.0 GPU-hours" in lines[2]
    assert "1 more not projected" in lines[2]
    assert SweepCost([], unavailable="no calibration.json").lines() == [
        "projected cost: not available (no calibration.json)"]


def _sweep(tmp_path: Path, grid: list[dict], **top) -> Path:
    cfg = {"sweep": "cost", "hardware": "h200", "results_dir": str(tmp_path / "results"),
           "defaults": {"global_batch": 16, "seq_len": 2048, "warmup_steps": 2, "measured_steps": 3}, "grid": grid,
           **top}
    path = tmp_path / "cost.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_sweep_cost_from_the_committed_calibration_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _sweep(tmp_path, [{"model": "llama3-8b", "gpus_per_node": 2, "parallel": [{"tp": 2}, {"pp": 2}]},
                             {"model": "tiny-llama", "gpus_per_node": 2, "hardware": "cpu"},
                             {"model": "mixtral-8x7b-4l", "gpus_per_node": 2, "ep": 2}])
    plan = plan_file(path)
    cache = tmp_path / "cache.json"
    sc = sweep_cost(plan, cache=cache)
    costs = sc.by_id()
    dense = [c for c in plan.runnable if c.cell.model == "llama3-8b" and c.cell.hardware == "h200"]
    assert len(dense) == 2 and all(costs[c.cell.cell_id].projected for c in dense)
    for c in dense:
        k = costs[c.cell.cell_id]
        assert 0 < k.wall_low_s < k.wall_s < k.wall_high_s < math.inf and k.gpus == 2
    whys = sc.not_projected()
    assert any(w.startswith("CPU ranks") for w in whys)
    # a MoE cell is priced where the calibration has a MoE band for its GPU type, else counted apart with the reason
    moe = next(costs[c.cell.cell_id] for c in plan.runnable if c.cell.model.startswith("mixtral"))
    assert (moe.projected and moe.wall_s < moe.wall_high_s) or any(w.startswith("MoE") for w in whys)
    priced = [c for c in plan.runnable if costs[c.cell.cell_id].projected]
    assert sum(whys.values()) == len(plan.runnable) - len(priced)  # counted apart, never as zero
    assert sc.gpu_hours()[0] == pytest.approx(sum(costs[c.cell.cell_id].wall_s * 2 for c in priced) / 3600)
    assert "auto-liger" in sc.basis[0] and "start-up" in sc.basis[0]
    # the second plan reads the cache: nothing is projected again
    monkeypatch.setattr(cost, "_project", lambda *a: pytest.fail("projected again despite the cache"))
    assert sweep_cost(plan, cache=cache).by_id() == costs
    # another calibration file (another content): projected afresh
    folder = tmp_path / "set"
    folder.mkdir()
    d = json.loads((cost.committed_set() / cost.CALIBRATION_FILE).read_text())
    (folder / cost.CALIBRATION_FILE).write_text(json.dumps(d, indent=2))
    (folder / cost.TIMING_FILE).write_text((cost.committed_set() / cost.TIMING_FILE).read_text())
    with pytest.raises(pytest.fail.Exception):
        sweep_cost(plan, folder, cache=cache)


def test_an_unusable_calibration_is_said_never_raised(tmp_path: Path) -> None:
    plan = plan_file(_sweep(tmp_path, [{"model": "llama3-8b", "gpus_per_node": 2, "tp": 2}]))
    assert "not available (no calibration.json" in sweep_cost(plan, tmp_path / "nowhere").lines()[0]
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / cost.CALIBRATION_FILE).write_text(json.dumps({"model_version": 1, "calibrations": []}))
    (folder / cost.TIMING_FILE).write_text("{}")
    sc = sweep_cost(plan, folder, cache=tmp_path / "c.json")
    assert sc.unavailable.startswith(str(folder / cost.CALIBRATION_FILE))
    assert "another projection model" in sc.lines()[0]


def test_plan_prints_each_cells_wall_time_and_the_gpu_hours(capsys: pytest.CaptureFixture) -> None:
    assert main(["plan", str(SWEEPS / "h200-optimization.yaml")]) == 0
    out = capsys.readouterr().out
    assert "projected_wall" in out.splitlines()[0]
    summary = next(x for x in out.splitlines() if x.startswith("projected cost of"))
    assert " GPU-hours (" in summary and "calibration results/reference/study-projected-" in summary
    assert "start-up" in out
    assert main(["plan", str(SWEEPS / "h200-optimization.yaml"), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    apart = [c for c in doc["cells"] if c["status"] == "planned" and c["not_projected"]]
    assert ("not projected, counted apart" in out) == bool(apart)  # refused cells are named, never priced as zero
    assert doc["projected_cost"]["gpu_hours"] > 0 and doc["projected_cost"]["cells_projected"] > 0
    cells = [c for c in doc["cells"] if c["status"] == "planned"]
    assert all(("projected_wall_s" in c) and (c["not_projected"] or c["projected_wall_s"] > 0) for c in cells)


def test_the_train_rule_ignores_its_projected_wall_resource() -> None:
    from calorimeter.launch.settings import launcher_settings
    from calorimeter.plan.config import validate_config

    cfg = validate_config({"sweep": "x", "grid": [{"model": "tiny-gpt"}]}, "x")
    settings = launcher_settings(cfg, {"projected_wall": "projected wall time 8 min (6-9 min)", "runtime": 20},
                                 set())
    assert settings.timeout_min == 20


def test_committed_set_is_found_from_any_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert cost.committed_set() == ROOT / catalogue().prices
    assert (cost.committed_set() / cost.CALIBRATION_FILE).is_file()

"""The reference sweeps (config/reference/*.yaml, extending base.yaml) plan exactly the cells that were measured.

``fixtures/reference_plans.json`` (one cell per line) holds every cell (all parameters, derived values and plan
status) that each reference config planned before the configs shared a base file; a changed base or file that plans
a different cell, id or run length fails here. Cell fields added since (the warm-up and measured-length settings,
``repeat``) must keep what those sweeps measured: the fixed warm-up, no minimum measured duration, one repetition.
Sweeps added since (not yet measured, not in the fixture) extend the base too, directly or through another reference
sweep.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT

from calorimeter.plan.config import ConfigError, load_config, load_sweep_config
from calorimeter.plan.plan import plan_file

REFERENCE = ROOT / "config" / "reference"
GOLDEN = json.loads((Path(__file__).parent / "fixtures" / "reference_plans.json").read_text())


#: what the fields added after the fixture must say for the measured sweeps
AS_MEASURED = {"warmup": "fixed", "measured_min_s": 0, "repeat": 0}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_reference_config_plans_the_measured_cells(name: str) -> None:
    plan = plan_file(REFERENCE / name)
    cells = [{**pc.cell.to_dict(), "status": pc.status} for pc in plan.cells]
    assert [{k: c[k] for k in g} for c, g in zip(cells, GOLDEN[name], strict=False)] == GOLDEN[name]
    assert len(cells) == len(GOLDEN[name])
    for c in cells:
        assert {k: c[k] for k in AS_MEASURED} == AS_MEASURED and c["config_id"] == c["cell_id"]


def test_every_reference_sweep_extends_the_base() -> None:
    sweeps = sorted(p.name for p in REFERENCE.glob("*.yaml") if p.name != "base.yaml")
    assert set(GOLDEN) <= set(sweeps)
    for name in sweeps:
        line = next(x for x in (REFERENCE / name).read_text().splitlines() if x.startswith("extends:"))
        parent = line.split(":", 1)[1].strip()
        assert parent == "base.yaml" or parent in sweeps, name


def test_extends_merges_key_by_key_and_the_workflow_reads_it_the_same(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("hardware: cpu\ndefaults: {micro_batch: 2, seq_len: 64}\n"
                                        "grid: [{model: tiny-llama}]\n")
    (tmp_path / "s.yaml").write_text("extends: base.yaml\nsweep: s\ndefaults: {seq_len: 32}\n"
                                     "grid: [{model: tiny-gpt}]\n")
    cfg = load_config(tmp_path / "s.yaml")
    assert cfg["defaults"] == {"micro_batch": 2, "seq_len": 32} and cfg["grid"] == [{"model": "tiny-gpt"}]
    assert cfg["hardware"] == "cpu" and "extends" not in cfg
    assert load_sweep_config([tmp_path / "s.yaml"], {"sweep": "t"}) == {
        "hardware": "cpu", "defaults": {"micro_batch": 2, "seq_len": 32}, "grid": [{"model": "tiny-gpt"}],
        "sweep": "t"}
    (tmp_path / "base.yaml").write_text("extends: s.yaml\n")
    with pytest.raises(ConfigError, match="extends itself"):
        load_config(tmp_path / "s.yaml")
    (tmp_path / "s.yaml").write_text("extends: nowhere.yaml\n")
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "s.yaml")


#: shipped results folders that no reference config rebuilds, and why
NOT_A_REFERENCE_SWEEP = {"default": "the embedded default sweep (config/config.yaml) as run on 2x H200 (hardware auto)"}


def test_each_reference_sweep_has_its_own_results_folder() -> None:
    """No two reference configs share a sweep name (they would share ``results/<sweep>/plan.json`` and draw each
    other's measured cells as not run), and each shipped results folder is planned by exactly one reference config:
    every cell it measured, and no other except the cells a run cut short left unmeasured, which its README
    names (`not_run` in the runs table)."""
    by_sweep: dict[str, list[str]] = {}
    for p in sorted(REFERENCE.glob("*.yaml")):
        if p.name != "base.yaml":
            by_sweep.setdefault(load_config(p)["sweep"], []).append(p.name)
    assert {s: f for s, f in by_sweep.items() if len(f) > 1} == {}
    shipped = sorted((ROOT / "results" / "reference").glob("*/*/plan.json"))
    assert shipped
    for plan_json in shipped:
        sweep = plan_json.parent.name
        if sweep in NOT_A_REFERENCE_SWEEP:
            continue
        assert sweep in by_sweep, f"{plan_json}: no config/reference file plans sweep {sweep}"
        planned = {pc.cell.cell_id for pc in plan_file(REFERENCE / by_sweep[sweep][0]).cells}
        measured = {p.parent.name for p in plan_json.parent.glob("cells/*/run.json")}
        assert measured <= planned, plan_json
        if measured != planned:  # a run cut short: the folder's README says which cells were not run
            readme = (plan_json.parents[1] / "README.md").read_text()
            assert "not_run" in readme, f"{plan_json}: {len(planned - measured)} planned cells without a record"
        assert {c["cell_id"] for c in json.loads(plan_json.read_text())["cells"]} == planned

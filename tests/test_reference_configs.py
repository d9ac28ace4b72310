"""The reference sweeps (config/reference/*.yaml, extending base.yaml) plan exactly the cells that were measured.

``fixtures/reference_plans.json`` (one cell per line) holds every cell (all parameters, derived values and plan
status) that each reference config planned before the configs shared a base file; a changed base or file that plans
a different cell, id or run length fails here.
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


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_reference_config_plans_the_measured_cells(name: str) -> None:
    plan = plan_file(REFERENCE / name)
    assert [{**pc.cell.to_dict(), "status": pc.status} for pc in plan.cells] == GOLDEN[name]


def test_every_reference_sweep_extends_the_base() -> None:
    sweeps = sorted(p.name for p in REFERENCE.glob("*.yaml") if p.name != "base.yaml")
    assert sweeps == sorted(GOLDEN)
    for name in sweeps:
        assert "extends: base.yaml" in (REFERENCE / name).read_text().splitlines()


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

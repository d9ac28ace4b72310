"""Schema and code agree on every ``projection:`` key (one test per key), the settings resolve as documented, and the
default measurements are data: the calibration catalogue (config/calibration.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from calorimeter.projection.catalogue import Fold, catalogue, default_calibration, default_collectives
from calorimeter.projection.settings import ProjectionSettings
from calorimeter.projection.targets import COVERAGE

SCHEMA = yaml.safe_load((ROOT / "src" / "calorimeter" / "plan" / "config.schema.yaml").read_text())
PROPS = SCHEMA["properties"]["projection"]["properties"]


def test_every_schema_key_is_a_setting() -> None:
    """No key the schema accepts is ignored by the code, and no setting is missing from the schema."""
    from dataclasses import fields

    assert set(PROPS) == {f.name for f in fields(ProjectionSettings)}


def _settings(**projection) -> ProjectionSettings:
    return ProjectionSettings.from_config({"projection": projection}, ROOT)


def test_calibration_default_and_override() -> None:
    assert "default" not in PROPS["calibration"]  # the default is computed (committed sets + calibration sweeps)
    assert _settings().calibration == default_calibration(ROOT)
    listed = catalogue(ROOT).calibration_sweeps
    assert _settings().calibration[: len(listed)] == listed
    assert all((ROOT / p).is_dir() for p in listed)
    assert _settings(calibration=["a/b"]).calibration == ("a/b",)


def test_collectives_default_is_the_nccl_benchmark_and_empty_means_none() -> None:
    """The schema no longer claims an empty default while the code falls back to the benchmark."""
    assert "default" not in PROPS["collectives"]
    assert "Absent: the committed NCCL benchmark" in " ".join(PROPS["collectives"]["description"].split())
    assert _settings().collectives == default_collectives(ROOT)
    listed = catalogue(ROOT).collectives_sweeps
    assert listed and _settings().collectives[: len(listed)] == listed
    assert _settings(collectives=[]).collectives == ()
    assert _settings(collectives=["x"]).collectives == ("x",)


def test_network_default_none_and_override() -> None:
    assert "default" not in PROPS["network"]
    assert _settings().network is None
    assert _settings(network={"nic_gbit_s_per_gpu": 200}).network == {"nic_gbit_s_per_gpu": 200}


def test_validation_default_empty_means_leave_one_configuration_out() -> None:
    assert PROPS["validation"]["default"] == []
    assert _settings().validation == ()
    fold = {"name": "f", "train": ["a"], "test": ["b"]}
    assert _settings(validation=[fold]).validation == (Fold("f", ("a",), ("b",)),)


def test_engine_keys_are_fingerprint_fields() -> None:
    from calorimeter.projection.fingerprint import KEY_FIELDS

    assert PROPS["engine"]["default"] == {}
    assert set(PROPS["engine"]["properties"]) == set(KEY_FIELDS)
    assert _settings().engine == {}
    assert _settings(engine={"fused": "eager"}).engine == {"fused": "eager"}
    with pytest.raises(ValueError, match="projection.engine: unknown key"):
        _settings(engine={"kernel": "x"})


def test_coverage_default_matches_code() -> None:
    assert PROPS["coverage"]["default"] == COVERAGE
    assert _settings().coverage == COVERAGE
    assert _settings(coverage=0.8).coverage == 0.8
    with pytest.raises(ValueError, match="projection.coverage"):
        _settings(coverage=1.5)


def test_validated_config_fills_the_schema_defaults_the_code_expects(tmp_path: Path) -> None:
    """Through the real config validation (defaults filled by the schema), the settings are the code's defaults."""
    from calorimeter.plan.config import validate_config

    cfg = validate_config({"sweep": "t", "hardware": "h200", "grid": [{"model": "llama3-8b"}]})
    s = ProjectionSettings.from_config(cfg, ROOT)
    assert s.collectives == default_collectives(ROOT) and s.validation == () and s.engine == {}
    assert s.coverage == COVERAGE


def test_committed_4_gpu_and_moe_sets_join_the_defaults_as_data(tmp_path: Path) -> None:
    """A 4-GPU NCCL set and a 4-GPU (or MoE) calibration set are picked up by their folder names, no code change."""
    ref = tmp_path / "results" / "reference"
    coll = ref / "h100x4-collectives-2026-11-28" / "h100x4-collectives" / "cells" / "collectives_h100-1x4"
    coll.mkdir(parents=True)
    (coll / "collectives.parquet").write_bytes(b"")
    cal = ref / "h100x4-calibration-2026-11-28" / "h100x4-layouts" / "tables"
    cal.mkdir(parents=True)
    (cal / "runs.parquet").write_bytes(b"")
    (ref / "h100x4-calibration-2026-11-28" / "thermal-profiles").mkdir()  # no tables: not a sweep
    cat = catalogue(tmp_path)  # none under tmp_path: the checkout's
    assert cat.path == ROOT / "config" / "calibration.yaml"
    assert default_collectives(tmp_path) == (*cat.collectives_sweeps,
                                             "results/reference/h100x4-collectives-2026-11-28/h100x4-collectives")
    assert default_calibration(tmp_path)[-1] == "results/reference/h100x4-calibration-2026-11-28/h100x4-layouts"
    assert len(default_calibration(tmp_path)) == len(cat.calibration_sweeps) + 1


def test_a_new_set_in_the_catalogue_joins_the_defaults_without_code(tmp_path: Path) -> None:
    """A measurement set of any name is one entry in config/calibration.yaml: the settings (and so the workflow's
    calibration and validation rules) pick it up; the entries keep their order, the new one last."""
    text = (ROOT / "config" / "calibration.yaml").read_text()
    new = {"sweeps": ["results/reference/h100x8-layouts-2026-12-01/h100x8-layouts"], "engine": "kernels-recorded",
           "regimes": ["dense GPU-bound", "MoE"], "note": "8x H100 layouts with a MoE model"}
    doc = yaml.safe_load(text)
    doc["calibration"].append(new)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "calibration.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    s = ProjectionSettings.from_config({}, tmp_path)
    assert s.calibration == (*catalogue(ROOT).calibration_sweeps, new["sweeps"][0])
    assert s.collectives == catalogue(ROOT).collectives_sweeps
    entry = catalogue(tmp_path).calibration[-1]
    assert (entry.engine, entry.regimes, entry.note) == ("kernels-recorded", ("dense GPU-bound", "MoE"), new["note"])


@pytest.mark.parametrize(("change", "message"), [
    ({"engine": "next-week"}, r"calibration\[0\].engine: 'next-week' is not one of the engines"),
    ({"regimes": ["GPU-bound"]}, r"calibration\[0\].regimes: \['GPU-bound'\]: expected some of"),
    ({"sweep": "x"}, r"calibration\[0\]: expected the keys"),
    ({"note": ""}, r"calibration\[0\]: needs sweeps"),
])
def test_a_malformed_catalogue_entry_is_named(tmp_path: Path, change: dict, message: str) -> None:
    doc = yaml.safe_load((ROOT / "config" / "calibration.yaml").read_text())
    doc["calibration"][0].update(change)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "calibration.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ValueError, match=message):
        catalogue(tmp_path)


def test_the_catalogue_regimes_are_checked_against_the_cells() -> None:
    """bench/projection_validation.py prints where an entry's regimes are not those its cells were measured in."""
    import pandas as pd

    from calorimeter.projection.measured import MeasuredSet, catalogue_disagreements

    cat = catalogue(ROOT)
    first = cat.calibration[0]  # findings on H200/H100: GPU- and host-bound
    assert set(first.regimes) == {"dense GPU-bound", "dense host-bound"}
    # the last entry that states dense rows only: a MoE cell of its sweeps disagrees with it
    i = max(k for k, e in enumerate(cat.calibration) if k > 0 and "MoE" not in e.regimes)
    runs = pd.DataFrame({"source": [str(ROOT / first.sweeps[0])] * 2 + [str(ROOT / cat.calibration[i].sweeps[0])],
                         "model": ["llama3-8b", "llama3-8b", "mixtral-8x7b"], "busy_frac": [0.95, 0.5, 0.9]})
    ms = MeasuredSet(runs, pd.DataFrame(), pd.DataFrame())
    bad = catalogue_disagreements(ms, cat, ROOT)
    assert len(bad) == 1 and f"calibration[{i}]" in bad[0]
    assert "measured in ['MoE']" in bad[0]  # the entry states dense rows too; these cells have none
    assert not catalogue_disagreements(MeasuredSet(runs[:2], pd.DataFrame(), pd.DataFrame()), cat, ROOT)

"""Schema and code agree on every ``projection:`` key (one test per key), and the settings resolve as documented."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from calorimeter.projection.settings import (
    DEFAULT_CALIBRATION,
    DEFAULT_COLLECTIVES,
    ProjectionSettings,
    default_calibration,
    default_collectives,
)
from calorimeter.projection.validation import COVERAGE

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
    assert _settings().calibration[: len(DEFAULT_CALIBRATION)] == DEFAULT_CALIBRATION
    assert all((ROOT / p).is_dir() for p in DEFAULT_CALIBRATION)
    assert _settings(calibration=["a/b"]).calibration == ("a/b",)


def test_collectives_default_is_the_nccl_benchmark_and_empty_means_none() -> None:
    """The schema no longer claims an empty default while the code falls back to the benchmark."""
    assert "default" not in PROPS["collectives"]
    assert "Absent: the committed NCCL benchmark" in " ".join(PROPS["collectives"]["description"].split())
    assert _settings().collectives == default_collectives(ROOT)
    assert _settings().collectives[: len(DEFAULT_COLLECTIVES)] == DEFAULT_COLLECTIVES
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
    assert _settings(validation=[fold]).validation == (fold,)


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
    assert default_collectives(tmp_path) == (*DEFAULT_COLLECTIVES,
                                             "results/reference/h100x4-collectives-2026-11-28/h100x4-collectives")
    assert default_calibration(tmp_path)[-1] == "results/reference/h100x4-calibration-2026-11-28/h100x4-layouts"
    assert len(default_calibration(tmp_path)) == len(DEFAULT_CALIBRATION) + 1

"""Schema and code agree on every ``launcher``, ``telemetry`` and ``placement`` key, the settings are read once from the
validated config, and they travel through job.json unchanged."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from calorimeter.plan.config import load_schema, validate_config
from calorimeter.plan.settings import (
    PROFILES_DIR,
    LauncherSettings,
    PlacementSettings,
    SlurmSettings,
    TelemetrySettings,
)
from calorimeter.records.job import JobRecord, read_job_record

SCHEMA = load_schema()["properties"]
BLOCKS = [(TelemetrySettings, SCHEMA["telemetry"]), (PlacementSettings, SCHEMA["placement"]),
          (LauncherSettings, SCHEMA["launcher"]), (SlurmSettings, SCHEMA["launcher"]["properties"]["slurm"])]
#: fields that are not keys of the sweep file: what the launcher adds (resources, definitions, the folders it made)
NOT_KEYS = {"profiles_dir", "telemetry", "placement", "definitions", "sweep_file", "code_snapshot", "mem_mib",
            "gpu_type", "gpus"}


@pytest.mark.parametrize(("cls", "block"), BLOCKS, ids=lambda x: getattr(x, "__name__", ""))
def test_every_schema_key_is_a_setting_with_the_schemas_default(cls: type, block: dict) -> None:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert set(block["properties"]) == set(fields) - NOT_KEYS
    made = cls()
    for key, spec in block["properties"].items():
        default = spec.get("default")
        if isinstance(default, dict) and key == "slurm":
            continue
        got = getattr(made, key)
        assert (list(got) if isinstance(got, tuple) else got) == default, key


def test_the_validated_config_gives_the_defaults_and_overrides_win(tmp_path: Path) -> None:
    s = LauncherSettings.from_config(validate_config({"results_dir": str(tmp_path)}))
    assert s == LauncherSettings(placement=PlacementSettings(profiles_dir=str(tmp_path.resolve() / PROFILES_DIR)))
    s = LauncherSettings.from_config(validate_config({
        "launcher": {"timeout_min": 7, "slurm": {"partition": "p", "setup": ["module load x"], "extra": {"nice": 1}}},
        "telemetry": {"period_ms": 10}, "placement": {"stage_costs": "flops"}, "_source": "s.yaml"}))
    assert (s.timeout_min, s.slurm.partition, s.slurm.setup, s.slurm.extra) == (7, "p", ("module load x",),
                                                                                 {"nice": 1})
    assert (s.telemetry.period_ms, s.telemetry.period_s, s.placement.stage_costs, s.sweep_file) == (
        10, 0.01, "flops", "s.yaml")


def test_job_record_round_trips_and_reads_an_older_file(tmp_path: Path) -> None:
    settings = dataclasses.replace(LauncherSettings(), timeout_min=9, slurm=SlurmSettings(setup=("a",), gpus=2),
                                   telemetry=TelemetrySettings(profile_steps=0), code_snapshot="/c")
    job = JobRecord("12_3", "slurm", "cell", "key", 4, 1.5, "login", "/f", array=True, launcher=settings)
    job.write(tmp_path / "job.json")
    assert read_job_record(tmp_path / "job.json") == job
    assert json.loads((tmp_path / "job.json").read_text())["launcher"]["slurm"]["setup"] == ["a"]
    # a file of an older launcher: keys it lacks take their defaults, keys it no longer has are ignored
    (tmp_path / "old.json").write_text(json.dumps({"job_id": 7, "executor": "local", "launcher": {
        "timeout_min": 3, "gone": 1, "telemetry": {"profile_steps": 2}, "slurm": {"partition": None}}}))
    old = read_job_record(tmp_path / "old.json")
    assert old is not None and (old.job_id, old.world_size, old.array) == ("7", 0, False)
    assert (old.launcher.timeout_min, old.launcher.telemetry.profile_steps) == (3, 2)
    (tmp_path / "bad.json").write_text("{}")
    assert read_job_record(tmp_path / "bad.json") is None and read_job_record(tmp_path / "none.json") is None

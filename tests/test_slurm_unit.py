"""Launcher pieces that need no cluster: settings precedence, sbatch parameters, failure classes, fault injection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calorimeter.launch import faults, submit
from calorimeter.launch.settings import launcher_settings
from calorimeter.launch.submit import CellConfigError, executor_parameters
from calorimeter.plan.cell import Cell
from calorimeter.plan.config import validate_config
from calorimeter.records.paths import AttemptPaths, CellPaths
from calorimeter.records.record import classify_attempt


def _cell(**kw) -> Cell:
    base = dict(sweep="s", model="tiny-gpt", hardware="h200", nodes=2, gpus_per_node=8)
    return Cell(**{**base, **kw})


def _settings(launcher: dict, resources: dict | None = None) -> dict:
    """Launcher settings of a sweep with this launcher block (schema defaults filled in), under a profile."""
    return launcher_settings(validate_config({"launcher": launcher}), resources)


def test_profile_resources_win_over_the_sweep_and_defaults_fill_the_rest() -> None:
    s = _settings({"executor": "local", "timeout_min": 30, "slurm": {"partition": "a", "exclusive": True}},
                          {"launcher": "slurm", "slurm_partition": "gpu", "slurm_account": "proj", "runtime": 90,
                           "slurm_constraint": "none", "_cores": 0, "slurm_slots": 1})
    assert s["executor"] == "slurm" and s["timeout_min"] == 90
    assert s["slurm"]["partition"] == "gpu" and s["slurm"]["account"] == "proj" and s["slurm"]["exclusive"]
    assert s["slurm"]["constraint"] is None and s["max_requeues"] == 3 and s["slurm"]["qos"] is None


def test_sbatch_parameters_come_from_the_cell_and_the_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(submit.slurm_cli, "available", lambda: True)
    kind, p = executor_parameters(_cell(), _settings({"executor": "slurm", "cpus_per_task": 8},
                                                              {"slurm_partition": "gpu", "slurm_qos": "high",
                                                               "slurm_mem_gb": 512}))
    assert kind == "slurm"
    assert (p["nodes"], p["ntasks_per_node"], p["gpus_per_node"], p["cpus_per_task"]) == (2, 8, 8, 8)
    assert p["job_name"] == _cell().cell_id and p["constraint"] == "H200"  # constraint auto: the hardware's tag
    assert p["partition"] == "gpu" and p["qos"] == "high" and p["mem"] == "524288M" and "account" not in p
    assert p["additional_parameters"]["open-mode"] == "append"
    _, p = executor_parameters(_cell(), _settings({"executor": "slurm", "slurm": {"gpus_as_gres": True,
                                                                                         "constraint": None}}))
    assert p["gres"] == "gpu:8" and "gpus_per_node" not in p and "constraint" not in p
    _, p = executor_parameters(_cell(hardware="cpu", nodes=1, gpus_per_node=2), _settings({"executor": "slurm"}))
    assert "gpus_per_node" not in p and "constraint" not in p and "export DS_ACCELERATOR=cpu" in p["setup"]


def test_config_errors_are_caught_before_submission(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(submit.slurm_cli, "available", lambda: False)
    with pytest.raises(CellConfigError, match="sbatch"):
        submit.launch_cell(_cell(), _settings({"executor": "slurm"}), CellPaths(tmp_path / "c"))
    with pytest.raises(CellConfigError, match="needs 2 nodes"):
        submit.launch_cell(_cell(), _settings({"executor": "local"}), CellPaths(tmp_path / "c"))
    assert not (tmp_path / "c").exists()  # nothing submitted, no attempt folder


@pytest.mark.parametrize(("ranks", "state", "want"), [
    ([{"rank": 0, "status": "ok"}, {"rank": 1, "status": "ok"}], "COMPLETED", ("ok", "ok")),
    ([{"rank": 0, "status": "oom", "error": "out of memory"}], "FAILED", ("oom", "oom")),
    ([], "OUT_OF_MEMORY", ("oom", "oom")),
    ([{"rank": 0, "status": "timeout", "error": "timed-out too many times"}], "FAILED", ("failed", "timeout")),
    ([], "TIMEOUT", ("failed", "timeout")),
    ([{"rank": 1, "status": "failed", "error": "RuntimeError: Connection reset by peer", "t_end_s": 1}],
     "CANCELLED by 0", ("transient", "transient")),
    ([], "NODE_FAIL", ("transient", "node_fail")),
    ([{"rank": 0, "status": "failed", "error": "DistBackendError: watchdog caught collective timeout"}], "FAILED",
     ("transient", "comm_timeout")),
    ([{"rank": 0, "status": "failed", "error": "ValueError: bad shape", "t_end_s": 1},
      {"rank": 1, "status": "failed", "error": "RuntimeError: Connection closed by peer", "t_end_s": 2}], "FAILED",
     ("failed", "failed")),
    ([{"rank": 0, "status": "ok"}], "FAILED", ("transient", "transient")),  # rank 1 left nothing
])
def test_failure_classes(ranks: list, state: str, want: tuple) -> None:
    status, failure_class, reason = classify_attempt(ranks, 2, None, state)
    assert (status, failure_class) == want, reason


def test_fault_injection_is_matched_by_cell_glob(monkeypatch: pytest.MonkeyPatch) -> None:
    assert faults.faults_for("tiny-gpt_cpu-1x1", "tiny-gpt*=oom,*=sleep-first:3,x=fail") == ["oom", "sleep-first:3"]
    monkeypatch.setenv(faults.ENV, "tiny-gpt*=oom")
    from calorimeter.train.errors import CellOOMError

    with pytest.raises(CellOOMError):
        faults.inject("tiny-gpt_cpu-1x1", 0, 0)
    faults.inject("tiny-llama_cpu-1x1", 0, 0)  # not matched: nothing happens


def test_collect_sets_interrupted_runs_aside(tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "rank-0.json").write_text(json.dumps({"rank": 0, "status": "ok", "restart": 1}))
    (staging / "rank-1.json").write_text(json.dumps({"rank": 1, "status": "failed", "restart": 0}))
    got = submit._collect(AttemptPaths(tmp_path))
    assert [r["rank"] for r in got] == [0]
    assert (tmp_path / "interrupted" / "restart-0" / "rank-1.json").is_file()


def test_open_attempt_only_for_the_same_cell(tmp_path: Path) -> None:
    cell = _cell()
    a = tmp_path / "attempts" / "20260101T000000Z"
    a.mkdir(parents=True)
    (a / "job.json").write_text(json.dumps({"job_id": "7", "executor": "slurm", "cell_key": submit.cell_key(cell)}))
    assert submit.open_attempt(cell, CellPaths(tmp_path))[1]["job_id"] == "7"
    assert submit.open_attempt(_cell(lr=0.5), CellPaths(tmp_path)) is None  # a changed value never re-attaches
    (a / "run.json").write_text("{}")
    assert submit.open_attempt(cell, CellPaths(tmp_path)) is None  # closed attempts are history

"""The per-rank task: a preempted task is requeued as the same task (every setting kept), bounded by max_requeues; a
time limit is never requeued (a cell restarts from scratch and would hit it again)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import submitit

from calorimeter.launch import task as task_module
from calorimeter.launch.settings import launcher_settings
from calorimeter.launch.task import CellTask
from calorimeter.plan.cell import Cell
from calorimeter.plan.config import validate_config
from calorimeter.plan.settings import TelemetrySettings
from calorimeter.records.paths import AttemptPaths
from calorimeter.records.rank import RankOutput, RankReport


@pytest.fixture
def task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CellTask:
    # checkpoint() runs inside the job: submitit's job environment of a SLURM job, a minute into its run (a USR2 now
    # is a preemption notice, not the time limit's warning)
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setattr(task_module, "_RUN_START_S", [time.time() - 60])
    # every setting away from its default, so that a requeue falling back to a default shows
    config = validate_config({
        "launcher": {"timeout_min": 7, "max_requeues": 2, "signal_delay_s": 45, "master_port": 29517,
                     "cpus_per_task": 3, "slurm": {"partition": "p", "setup": ["module load x"]}},
        "telemetry": {"enabled": False, "period_ms": 10, "profile_steps": 3, "profile_all_ranks": True},
    })
    cell = Cell(sweep="s", model="tiny-gpt", hardware="cpu", nodes=1, gpus_per_node=2, lr=0.5)
    attempt = AttemptPaths(tmp_path / "attempt")
    attempt.staging.mkdir(parents=True)
    return CellTask(cell, str(attempt.root), launcher_settings(config, {"slurm_account": "acct"}))


def test_requeued_task_keeps_every_setting(task: CellTask) -> None:
    first = task.checkpoint()
    assert isinstance(first, submitit.helpers.DelayedSubmission)
    requeued = first.function
    assert isinstance(requeued, CellTask) and requeued is not task
    # Every attribute, present and future, equal to the original's: only the requeue count moves on.
    assert vars(requeued) == {**vars(task), "requeues": 1}
    assert requeued.settings.telemetry == TelemetrySettings(enabled=False, period_ms=10, profile_steps=3,
                                                            profile_all_ranks=True)
    assert vars(requeued.checkpoint().function) == {**vars(task), "requeues": 2}


def test_requeues_stop_at_the_bound_and_are_logged(task: CellTask) -> None:
    second = task.checkpoint().function.checkpoint().function
    assert second.requeues == 2 and second.checkpoint() is None  # max_requeues: 2
    events = [json.loads(line) for line in AttemptPaths(Path(task.attempt_dir)).requeues.read_text().splitlines()]
    assert [(e["requeues"], e["requeued"], e["job_id"]) for e in events] == [(0, True, "4242"), (1, True, "4242"),
                                                                            (2, False, "4242")]


def test_a_time_limit_is_never_requeued(task: CellTask, monkeypatch: pytest.MonkeyPatch) -> None:
    """SLURM's warning near the limit (7 min, USR2 45 s before it), or any warning of a local job: no requeue."""
    monkeypatch.setattr(task_module, "_RUN_START_S", [time.time() - (7 * 60 - 45)])
    assert task.checkpoint() is None
    monkeypatch.setattr(task_module, "_RUN_START_S", [time.time() - 60])
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")  # nothing preempts a local job: its USR2 is its time limit
    monkeypatch.setenv("SUBMITIT_LOCAL_JOB_ID", "4243")
    assert task.checkpoint() is None
    events = [json.loads(line) for line in AttemptPaths(Path(task.attempt_dir)).requeues.read_text().splitlines()]
    assert [(e["why"], e["requeued"], e["job_id"]) for e in events] == [("time limit", False, "4242"),
                                                                       ("time limit", False, "4243")]


def test_rank_outputs_keep_every_ranks_tail_named_relative_to_the_checkout_first_failed_first(tmp_path: Path) -> None:
    from calorimeter.launch import output

    attempt = AttemptPaths(tmp_path)
    attempt.submitit.mkdir(parents=True)
    kernels = Path(output.__file__).resolve().parents[1] / "train" / "kernels.py"
    (attempt.submitit / "7_0_log.err").write_text(
        f"submitit INFO (2026-11-27 10:00:00,000) - Starting\n{kernels}:236: UserWarning: x\n/opt/torch/x.py:1: W\n")
    (attempt.submitit / "7_0_log.out").write_text("step 1\nRuntimeError: shape mismatch\n")
    (attempt.submitit / "7_1_log.out").write_text("")
    results = [RankReport(rank=0, status="failed", t_end_s=10.0, hostname="h"),
               RankReport(rank=1, status="failed", t_end_s=9.0, hostname="h")]
    outs = output.rank_outputs(attempt, "7", 3, results)
    assert [(o.rank, o.status) for o in outs] == [(0, "failed"), (1, "failed"), (2, "no result")]
    assert outs[0].stderr == ("src/calorimeter/train/kernels.py:236: UserWarning: x", "/opt/torch/x.py:1: W")
    assert outs[0].stdout == ("step 1", "RuntimeError: shape mismatch") and outs[1].stdout == ()
    assert [RankOutput.from_dict(o.to_dict()) for o in outs] == outs  # as the record keeps them
    # the rank the reason names first, then the others that failed in the order they failed, then the silent
    ordered = output.first_failed_first(outs, "rank 0 on host h: RuntimeError: shape mismatch", results)
    assert [o.rank for o in ordered] == [0, 1, 2]
    assert [o.rank for o in output.first_failed_first(outs, "SLURM CANCELLED", results)] == [1, 0, 2]
    assert output.describe_outputs(ordered[:2], 2, "") == [
        "rank 0 on h (failed): src/calorimeter/train/kernels.py:236: UserWarning: x", "  /opt/torch/x.py:1: W",
        "rank 1 on h (failed): (no output)"]


def test_rendezvous_port_is_the_same_for_every_rank_and_below_the_ephemeral_range() -> None:
    from calorimeter.launch.distributed import RENDEZVOUS_PORTS, job_master_port

    ports = {job_master_port(str(j)) for j in range(2000)}
    assert job_master_port("12993") == job_master_port("12993")  # every rank of a job draws the same
    assert min(ports) >= RENDEZVOUS_PORTS[0] and max(ports) <= RENDEZVOUS_PORTS[1] and len(ports) > 1500
    # below the host's ephemeral ports, where another process's outgoing connection can hold a port
    ephemeral = Path("/proc/sys/net/ipv4/ip_local_port_range")
    if ephemeral.is_file():
        assert RENDEZVOUS_PORTS[1] < int(ephemeral.read_text().split()[0])

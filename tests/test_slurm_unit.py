"""Launcher pieces that need no cluster: settings precedence, sbatch parameters, failure classes, fault injection."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest

from calorimeter.launch import faults, submit
from calorimeter.launch.settings import launcher_settings
from calorimeter.launch.submit import CellConfigError, executor_parameters
from calorimeter.plan.cell import Cell
from calorimeter.plan.config import validate_config
from calorimeter.plan.settings import LauncherSettings
from calorimeter.records.paths import AttemptPaths, CellPaths
from calorimeter.records.rank import RankDeath, RankReport
from calorimeter.records.record import classify_attempt


def _reports(*ranks: dict) -> list[RankReport]:
    return [RankReport.from_dict(r) for r in ranks]


def _cell(**kw) -> Cell:
    base = dict(sweep="s", model="tiny-gpt", hardware="h200", nodes=2, gpus_per_node=8)
    return Cell(**{**base, **kw})


def _settings(launcher: dict, resources: dict | None = None) -> LauncherSettings:
    """Launcher settings of a sweep with this launcher block (schema defaults filled in), under a profile."""
    return launcher_settings(validate_config({"launcher": launcher}), resources)


def test_profile_resources_win_over_the_sweep_and_defaults_fill_the_rest() -> None:
    s = _settings({"executor": "local", "timeout_min": 30, "slurm": {"partition": "a", "exclusive": True}},
                          {"launcher": "slurm", "slurm_partition": "gpu", "slurm_account": "proj", "runtime": 90,
                           "slurm_constraint": "none", "_cores": 0, "slurm_slots": 1})
    assert s.executor == "slurm" and s.timeout_min == 90
    assert s.slurm.partition == "gpu" and s.slurm.account == "proj" and s.slurm.exclusive
    assert s.slurm.constraint is None and s.max_requeues == 3 and s.slurm.qos is None


def test_sbatch_parameters_come_from_the_cell_and_the_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(submit.slurm_cli, "available", lambda: True)
    monkeypatch.setattr(submit.slurm_cli, "node_cpus", lambda partition=None: None)  # no sinfo (9 s without slurmctld)
    kind, p = executor_parameters(_cell(), _settings({"executor": "slurm", "cpus_per_task": 8,
                                                      "slurm": {"constraint": "auto"}},
                                                              {"slurm_partition": "gpu", "slurm_qos": "high",
                                                               "slurm_mem_gb": 512}))
    assert kind == "slurm"
    assert (p["nodes"], p["ntasks_per_node"], p["gpus_per_node"], p["cpus_per_task"]) == (2, 8, 8, 8)
    assert p["job_name"] == _cell().cell_id and p["constraint"] == "H200"  # constraint auto: the hardware's tag
    # GB = 10^9 bytes, as everywhere in the project; SLURM's M is 2^20 bytes
    assert p["partition"] == "gpu" and p["qos"] == "high" and p["mem"] == "488282M" and "account" not in p
    assert p["additional_parameters"]["open-mode"] == "append"
    _, p = executor_parameters(_cell(), _settings({"executor": "slurm", "slurm": {"gpus_as_gres": True,
                                                                                         "constraint": None}}))
    assert p["gres"] == "gpu:8" and "gpus_per_node" not in p and "constraint" not in p
    _, p = executor_parameters(_cell(hardware="cpu", nodes=1, gpus_per_node=2), _settings({"executor": "slurm"}))
    assert "gpus_per_node" not in p and "constraint" not in p and "export DS_ACCELERATOR=cpu" in p["setup"]


def test_config_errors_are_caught_before_submission(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(submit.slurm_cli, "available", lambda: False)
    monkeypatch.setattr(submit.slurm_cli, "node_cpus", lambda partition=None: None)
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
    status, failure_class, reason = classify_attempt(_reports(*ranks), 2, None, state)
    assert (status, failure_class) == want, reason


def test_a_death_after_a_deterministic_failure_is_its_consequence() -> None:
    """srun ends the other ranks when one fails: the failure names the cell, not the ranks srun killed; a death seen
    before the first failure (or a failure that names a lost peer) is the cause."""
    death = RankDeath(1, "node2", 5, t_detected_s=11.0)
    bug = [{"rank": 0, "status": "failed", "error": "ValueError: bad shape", "t_end_s": 10.0}]
    srun_said = dataclasses.replace(death, t_detected_s=None)
    # srun's own account (no detection time): the failure came first
    assert classify_attempt(_reports(*bug), 2, None, "FAILED", srun_said)[:2] == ("failed", "failed")
    assert classify_attempt(_reports(*bug), 2, None, None, death)[:2] == ("failed", "failed")
    assert classify_attempt(_reports(dict(bug[0], t_end_s=12.0)), 2, None, None, death)[:2] == ("transient",
                                                                                                 "peer_died")
    reset = _reports({"rank": 0, "status": "failed", "error": "RuntimeError: Connection reset by peer",
                      "t_end_s": 10.0})
    status, klass, reason = classify_attempt(reset, 2, None, None, death)
    assert (status, klass) == ("transient", "peer_died") and reason.startswith("rank 1 on host node2 (pid 5)")


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
    assert [r.rank for r in got] == [0]
    assert (tmp_path / "interrupted" / "restart-0" / "rank-1.json").is_file()


def test_open_attempt_only_for_the_same_cell(tmp_path: Path) -> None:
    cell = _cell()
    a = tmp_path / "attempts" / "20260101T000000Z"
    a.mkdir(parents=True)
    (a / "job.json").write_text(json.dumps({"job_id": "7", "executor": "slurm", "cell_key": submit.cell_key(cell)}))
    assert submit.open_attempt(cell, CellPaths(tmp_path))[1].job_id == "7"
    assert submit.open_attempt(_cell(lr=0.5), CellPaths(tmp_path)) is None  # a changed value never re-attaches
    (a / "run.json").write_text("{}")
    assert submit.open_attempt(cell, CellPaths(tmp_path)) is None  # closed attempts are history


@pytest.mark.parametrize(("resources", "check"), [
    ({"qos": "high"}, lambda s, p: p["qos"] == "high"),
    ({"constraint": "h100&ib"}, lambda s, p: p["constraint"] == "h100&ib"),
    ({"mem_mb": 64000}, lambda s, p: p["mem"] == "64000M"),
    ({"mem_mib": 1024}, lambda s, p: p["mem"] == "1024M"),
    ({"mem": "64G"}, lambda s, p: p["mem"] == "64000M"),  # as Snakemake reads it into mem_mb, sent as the plugin does
    ({"mem": "64G", "mem_mb": 64000, "mem_mib": 61036}, lambda s, p: p["mem"] == "64000M"),  # Snakemake gives all
    ({"runtime": "4h"}, lambda s, p: p["time"] == 240),
    ({"slurm_extra": "'--qos=long --mail-type=ALL'"},  # the plugin's documented quoted form, not evaluated
     lambda s, p: p["additional_parameters"]["qos"] == "long" and p["additional_parameters"]["mail-type"] == "ALL"),
    ({"mem_mb_per_cpu": 4000}, lambda s, p: p["additional_parameters"]["mem-per-cpu"] == "4000M" and "mem" not in p),
    ({"slurm_extra": "--exclusive --reservation=x --nice 10"},
     lambda s, p: p["exclusive"] and p["additional_parameters"]["reservation"] == "x"
     and p["additional_parameters"]["nice"] == "10"),
    ({"gpu": 8}, lambda s, p: p["gpus_per_node"] == 8),
    ({"gpu": "h100:8"}, lambda s, p: p["gpus_per_node"] == "h100:8"),
    ({"gres": "gpu:h100:8"}, lambda s, p: p["gres"] == "gpu:h100:8" and "gpus_per_node" not in p),
    ({"gres": "gpu:8"}, lambda s, p: p["gres"] == "gpu:8"),
    ({"gpu_model": "h100"}, lambda s, p: p["gpus_per_node"] == "h100:8"),
    ({"cpus_per_gpu": 12}, lambda s, p: p["cpus_per_task"] == 12),
    ({"clusters": "c2"}, lambda s, p: p["additional_parameters"]["clusters"] == "c2"),
    ({"cluster": "c3"}, lambda s, p: p["additional_parameters"]["clusters"] == "c3"),
    ({"slurm_cluster": "c4"}, lambda s, p: p["additional_parameters"]["clusters"] == "c4"),
    ({"slurm_partition": "gpu", "slurm_account": "proj", "runtime": 30},
     lambda s, p: (p["partition"], p["account"], p["time"]) == ("gpu", "proj", 30)),
])
def test_the_slurm_plugins_resource_names_are_honoured(monkeypatch: pytest.MonkeyPatch, resources: dict,
                                                       check) -> None:
    monkeypatch.setattr(submit.slurm_cli, "available", lambda: True)
    monkeypatch.setattr(submit.slurm_cli, "node_cpus", lambda partition=None: None)
    s = _settings({"executor": "slurm"}, {**resources, "_cores": 0, "slurm_slots": 1, "tmpdir": "/tmp"})
    _, p = executor_parameters(_cell(), s)
    assert check(s, p), p


@pytest.mark.parametrize(("resources", "words"), [
    ({"slurm_partiton": "gpu"}, ["unknown (did you mean 'slurm_partition'?)"]),
    ({"qso": "high"}, ["unknown (did you mean 'qos'?)"]),
    ({"nodes": 2}, ["not taken", "nodes:"]),
    ({"tasks": 16}, ["not taken"]),
    ({"mpi": "srun"}, ["not taken", "MPI"]),
    ({"slurm_logfile": "x"}, ["not taken", "attempts"]),
    ({"tasks_per_node": 8}, ["not taken", "gpus_per_node"]),
    ({"tasks_per_gpu": 1}, ["not taken", "one task per GPU"]),
    ({"slurm_job_submit": "x"}, ["not taken", "submitit"]),
    ({"gres": "nvme:1"}, ["GPUs only"]),
    ({"slurm_extra": "-C h100"}, ["long options"]),
    ({"mem_mb": 1000, "mem_mb_per_cpu": 100}, ["give one"]),
    ({"mem": "lots"}, ["mem", "not a size"]),
    ({"runtime": "soon"}, ["runtime", "not a time"]),
])
def test_unknown_or_refused_resources_are_named(resources: dict, words: list[str]) -> None:
    from calorimeter.plan.config import ConfigError

    with pytest.raises(ConfigError) as e:
        _settings({"executor": "slurm"}, resources)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_implicit_snakemake_resources_and_safe_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """Snakemake's own mem_mb (1000 on every rule) is not a --mem request unless the profile set it; by default no
    --constraint, whole nodes, and CPUs per task from the partition's nodes."""
    monkeypatch.setattr(submit.slurm_cli, "available", lambda: True)
    monkeypatch.setattr(submit.slurm_cli, "node_cpus", lambda partition=None: 96 if partition == "gpu" else None)
    implicit = {"mem_mb": 1000, "mem_mib": 954, "disk_mb": 50000, "tmpdir": "/tmp", "_nodes": 1, "slurm_slots": 1}
    s = launcher_settings(validate_config({"launcher": {"executor": "slurm"}}),
                          {**implicit, "slurm_partition": "gpu"}, explicit={"slurm_partition"})
    _, p = executor_parameters(_cell(), s)
    assert "mem" not in p and "constraint" not in p and p["exclusive"] and p["cpus_per_task"] == 96 // 8
    _, p = executor_parameters(_cell(), _settings({"executor": "slurm"}))
    assert p["cpus_per_task"] == 1  # sinfo did not answer
    with pytest.raises(CellConfigError, match="uses 8 GPUs per node, the profile asks for 4"):
        executor_parameters(_cell(), _settings({"executor": "slurm"}, {"gpu": 4}))
    _, p = executor_parameters(_cell(), _settings({"executor": "slurm", "slurm": {"constraint": "auto"}}))
    assert p["constraint"] == "H200"


def test_queued_jobs_import_a_snapshot_of_the_code(tmp_path: Path) -> None:
    from calorimeter.launch.snapshot import code_digest, snapshot_code, with_snapshot

    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("X = 1\n")
    (pkg / "sub" / "schema.yaml").write_text("a: 1\n")
    (pkg / "notes.txt").write_text("not code\n")
    first = snapshot_code(tmp_path / "sweep", pkg)
    assert first.parent == tmp_path / "sweep" / "code" and first.name == code_digest(pkg)
    assert sorted(str(p.relative_to(first)) for p in first.rglob("*") if p.is_file()) == [
        "calorimeter/__init__.py", "calorimeter/sub/schema.yaml"]
    assert snapshot_code(tmp_path / "sweep", pkg) == first  # same content: the same copy
    (pkg / "__init__.py").write_text("X = 2\n")  # edited after submission: a new copy, the old one kept
    second = snapshot_code(tmp_path / "sweep", pkg)
    assert second != first and (first / "calorimeter" / "__init__.py").read_text() == "X = 1\n"
    params, code = with_snapshot({"setup": ["module load cuda"]}, tmp_path / "sweep")
    assert params["setup"][0].startswith(f'export PYTHONPATH="{code}') and params["setup"][1] == "module load cuda"
    assert (code / "calorimeter" / "launch" / "snapshot.py").is_file()  # the package itself


def test_two_launchers_making_one_snapshot_at_once_leave_a_whole_copy(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    """Cells submitted side by side make the same copy at once: launcher B starts copying while A is at its last
    file; the copy in place must hold every file (a shared scratch folder left A renaming B's first file alone)."""
    import shutil
    import threading

    from calorimeter.launch import snapshot

    pkg = tmp_path / "pkg"
    for name in ("__init__.py", "a.py", "b.py", "launch/__init__.py", "launch/run.py"):
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(f"# {name}\n")
    files = snapshot.package_files(pkg)
    a_at_last, b_started, a_done = threading.Event(), threading.Event(), threading.Event()
    copied = {"A": 0, "B": 0}
    real_copy = shutil.copy2

    def copy2(src, dst):
        who = threading.current_thread().name
        if who == "A" and copied["A"] == len(files) - 1:
            a_at_last.set()
            assert b_started.wait(10)
        real_copy(src, dst)
        copied[who] += 1
        if who == "B" and copied["B"] == 1:
            b_started.set()
            assert a_done.wait(10)

    monkeypatch.setattr(snapshot.shutil, "copy2", copy2)
    made: dict[str, Path] = {}

    def launcher(who: str) -> None:
        made[who] = snapshot.snapshot_code(tmp_path / "sweep", pkg)
        if who == "A":
            a_done.set()

    a = threading.Thread(target=launcher, args=("A",), name="A")
    a.start()
    assert a_at_last.wait(10)
    b = threading.Thread(target=launcher, args=("B",), name="B")
    b.start()
    a.join(20), b.join(20)
    assert made["A"] == made["B"]
    copy = made["A"] / "calorimeter"
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file()) == sorted(
        str(p.relative_to(pkg)) for p in files)
    assert [p.name for p in (tmp_path / "sweep" / "code").iterdir()] == [made["A"].name]  # no scratch left


def test_cells_of_one_shape_go_to_the_queue_as_one_array(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import contextlib

    from calorimeter.launch import arrays

    class FakeExecutor:
        """submitit's executor.batch(): the submissions of the block become one array."""

        def __init__(self) -> None:
            self.batches: list[list] = []

        @contextlib.contextmanager
        def batch(self):
            self.batches.append([])
            yield

        def submit(self, task):
            self.batches[-1].append(task)
            return type("Job", (), {"job_id": f"700_{len(self.batches[-1]) - 1}"})()

    fake = FakeExecutor()
    made = []
    monkeypatch.setattr(submit.slurm_cli, "available", lambda: True)
    monkeypatch.setattr(submit.slurm_cli, "node_cpus", lambda partition=None: None)
    monkeypatch.setattr(arrays, "make_executor", lambda kind, params, folder, n: made.append(params) or fake)
    settings = _settings({"executor": "slurm", "array": True, "snapshot": False})
    cells = [_cell(micro_batch=m) for m in (1, 2, 4)] + [_cell(gpus_per_node=4)]  # the last: another shape
    done = CellPaths.of(tmp_path, "s", _cell(micro_batch=4).cell_id)
    done.root.mkdir(parents=True)
    done.run_json.write_text("{}")  # already measured: never submitted again
    assert arrays.submit_array(cells[0], cells, settings, tmp_path) == 2
    assert len(fake.batches) == 1 and len(fake.batches[0]) == 2 and made[0]["job_name"] == "s-array"
    for c, job_id in ((cells[0], "700_0"), (cells[1], "700_1")):
        attempt, info = submit.open_attempt(c, CellPaths.of(tmp_path, "s", c.cell_id))
        assert info.job_id == job_id and info.array and Path(info.submitit_folder).parent.name == "arrays"
        handle = submit._job_handle(info, attempt, c.world_size)
        assert str(handle.paths.folder) == info.submitit_folder
    # the mate's own train job finds its task in the queue: nothing submitted again
    assert arrays.submit_array(cells[1], cells, settings, tmp_path) == 0 and len(fake.batches) == 1
    # alone in its shape: launched as usual
    assert arrays.submit_array(cells[3], cells, settings, tmp_path) == 0
    # off by default
    assert arrays.submit_ahead(cells[3], _settings({"executor": "slurm"}), {}) == 0


def test_explicit_resources_reach_the_train_script(monkeypatch: pytest.MonkeyPatch) -> None:
    """--set-resources and --default-resources names count; Snakemake's implicit mem_mb does not."""
    from types import SimpleNamespace

    from calorimeter.launch.settings import TRAIN_RESOURCES_ENV, export_train_resources, train_resources_from_env

    wf = SimpleNamespace(resource_settings=SimpleNamespace(
        overwrite_resources={"train": {"mem_mb": 1, "constraint": 1}, "other": {"qos": 1}},
        default_resources=SimpleNamespace(args=["tmpdir=system_tmpdir", "slurm_account=proj"])))
    monkeypatch.setenv(TRAIN_RESOURCES_ENV, "")  # restored (to unset) after the test
    monkeypatch.delenv(TRAIN_RESOURCES_ENV)
    assert train_resources_from_env() is None
    export_train_resources(wf)
    assert train_resources_from_env() == {"mem_mb", "constraint", "slurm_account"}
    bare = SimpleNamespace(resource_settings=SimpleNamespace(overwrite_resources={}, default_resources=None))
    export_train_resources(bare)
    assert train_resources_from_env() == set()


def test_slurm_states_are_one_partition() -> None:
    """One vocabulary of SLURM states: a job waits, runs or has ended, never two at once; a transient end is an
    end (records/job_states.py, read by launch/slurm.py, records/record.py and operate/state.py)."""
    from calorimeter.records import job_states as js

    assert not (js.WAITING & js.RUNNING or js.WAITING & js.ENDED or js.RUNNING & js.ENDED)
    assert js.TRANSIENT < js.ENDED and "COMPLETED" not in js.TRANSIENT
    assert js.base_state("CANCELLED by 1234") == "CANCELLED" == js.base_state("CANCELLED+")


# ---------------------------------------------------------------------------------------------------------------
# node loss: one copy of a job, ended within a bound (calorimeter.launch.watch.slurm_decision, submit._wait)


def test_slurm_wait_decisions_bound_a_lost_node_and_never_run_two_copies() -> None:
    from calorimeter.launch import watch
    from calorimeter.launch.watch import slurm_decision

    COMPLETING_GRACE_S, FAILED_RANK_GRACE_S = watch.COMPLETING_GRACE_S, watch.FAILED_RANK_GRACE_S  # noqa: N806
    WAIT_S = 40.0  # noqa: N806 - launcher.node_lost_wait_s
    assert LauncherSettings().node_lost_wait_s <= 600  # the default: at most 10 minutes

    now = 10_000.0
    ok = _reports({"rank": 0, "status": "ok", "t_end_s": now - 1}, {"rank": 1, "status": "ok", "t_end_s": now - 1})
    assert slurm_decision(True, None, ok, 2, now, None, WAIT_S)[0] == "return"
    # requeued after NODE_FAIL: waited for (submitit may even call it done), never resubmitted beside it ...
    assert slurm_decision(True, "PENDING", [], 2, now, now - 5, WAIT_S)[0] == "wait"
    assert slurm_decision(True, "RUNNING", [], 2, now, None, WAIT_S)[0] == "wait"  # requeued and already running again
    # ... and in the seconds before the requeue, while SLURM kills the run (COMPLETING, sacct already NODE_FAIL)
    assert slurm_decision(True, "COMPLETING", [], 2, now, now - 5, WAIT_S)[0] == "wait"
    assert slurm_decision(True, "COMPLETING", [], 2, now, None, WAIT_S)[0] == "return"  # an ordinary end
    assert slurm_decision(True, "COMPLETING", [], 2, now, now - WAIT_S - 1, WAIT_S)[0] == "node_lost"
    # ... but not for longer than the bound while SLURM waits for a node to replace the lost one
    assert slurm_decision(False, "PENDING", [], 2, now, now - WAIT_S + 1, WAIT_S)[0] == "wait"
    action, why = slurm_decision(False, "PENDING", [], 2, now, now - WAIT_S - 1, WAIT_S)
    assert action == "node_lost" and "no node took the lost one's place" in why and "node_lost_wait_s" in why
    # a rank failed (its peer's node is gone) and SLURM has not noticed: the job is ended after the grace
    failed = _reports({"rank": 0, "status": "failed", "error": "Connection reset by peer", "t_end_s": now - 5})
    assert slurm_decision(False, "RUNNING", failed, 2, now, None, WAIT_S)[0] == "wait"
    failed[0].t_end_s = now - FAILED_RANK_GRACE_S - 1
    assert slurm_decision(False, "RUNNING", failed, 2, now, None, WAIT_S)[0] == "cancel"
    # every rank's result written, the job held COMPLETING by a stopped slurmd: not waited for
    assert slurm_decision(False, "COMPLETING", ok, 2, now, None, WAIT_S)[0] == "wait"
    late = [dataclasses.replace(r, t_end_s=now - COMPLETING_GRACE_S - 1) for r in ok]
    assert slurm_decision(False, "COMPLETING", late, 2, now, None, WAIT_S)[0] == "return"
    assert slurm_decision(False, "COMPLETING", late[:1], 2, now, None, WAIT_S)[0] == "wait"  # a rank's result missing


def test_a_job_cancelled_by_the_launcher_is_classed_by_its_cause(tmp_path: Path) -> None:
    from calorimeter.records.record import build_record

    cell = _cell()
    why = {"why": "requeued by SLURM and still PENDING after 120 s (waiting for a lost node?)"}
    rec = build_record(cell, [], {"executor": "slurm"}, None, {"slurm": {"state": "CANCELLED by 0"},
                                                                 "launcher_cancelled": why})
    assert (rec["status"], rec["failure_class"]) == ("transient", "node_fail") and why["why"] in rec["reason"]
    ranks = _reports({"rank": 1, "status": "failed", "error": "RuntimeError: Connection reset by peer", "t_end_s": 1.0,
                      "hostname": "node2"})
    rec = build_record(cell, ranks, {"executor": "slurm"}, None, {"slurm": {"state": "CANCELLED"},
                                                                    "launcher_cancelled": {"why": "rank 1 failed"}})
    assert (rec["status"], rec["failure_class"]) == ("transient", "peer_died")
    assert rec["reason"].startswith("rank 1: RuntimeError: Connection reset by peer; the launcher cancelled")
    ranks[0].error = "ValueError: a bug"  # a deterministic error stays one, whoever ended the job
    rec = build_record(cell, ranks, {"executor": "slurm"}, None, {"slurm": {"state": "CANCELLED"},
                                                                    "launcher_cancelled": {"why": "rank 1 failed"}})
    assert (rec["status"], rec["failure_class"]) == ("failed", "failed")
    # a node lost for good: failed (never resubmitted into the same wait), naming the node and the rerun command
    lost = {"why": "still PENDING", "job_id": "42", "rerun": "calorimeter rerun s.yaml --failed",
            "node_lost": {"job_id": "42", "nodelist": "node[1-2]", "waited_s": 301.0,
                          "nodes": [{"node": "node2", "state": "down*", "reason": "Not responding"}]}}
    rec = build_record(cell, [], {"executor": "slurm"}, None, {"slurm": {"state": "CANCELLED by 0"},
                                                                 "launcher_cancelled": lost})
    assert (rec["status"], rec["failure_class"]) == ("failed", "node_lost"), rec["reason"]
    assert rec["reason"].startswith("node node2 (down*: Not responding) lost: SLURM failed job 42 (NODE_FAIL)")
    assert "within 301 s" in rec["reason"] and rec["reason"].endswith("rerun with: calorimeter rerun s.yaml --failed")


def test_lost_nodes_are_the_failed_runs_nodes_sinfo_says_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from calorimeter.launch import slurm as slurm_cli

    calls = []
    monkeypatch.setattr(slurm_cli, "sacct_records", lambda job_id, steps=False: [
        {"State": "NODE_FAIL", "NodeList": "node[1-2]"}, {"State": "PENDING", "NodeList": "None assigned"}])

    def run(cmd, timeout=30):
        calls.append(cmd)
        return "node1|idle|none\nnode2|drained|calorimeter-test\nnode3|down*|Not responding\n"

    monkeypatch.setattr(slurm_cli, "_run", run)
    lost = slurm_cli.lost_nodes("42")
    assert [n["node"] for n in lost["nodes"]] == ["node2", "node3"] and lost["nodelist"] == "node[1-2]"
    assert calls[0][-2:] == ["-n", "node[1-2]"]


@pytest.mark.parametrize(("states", "dones"), [
    # seen RUNNING; submitit saw NODE_FAIL once (PENDING), then the requeued run
    (["RUNNING", "RUNNING", "PENDING", "PENDING", "RUNNING", None], [False, False, True, False, False, True]),
    # the node failed before the launcher ever saw the job RUNNING, and submitit said done while SLURM was still
    # killing the run (COMPLETING): the CI failure of 2026-11-25, where a retry's second job queued beside it
    (["PENDING", "COMPLETING", "COMPLETING", "PENDING", "RUNNING", None], [False, True, True, True, False, True]),
])
def test_the_launcher_waits_for_the_requeued_copy_instead_of_returning(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       states: list[str | None],
                                                                       dones: list[bool]) -> None:
    """NODE_FAIL, then SLURM requeues the job: the launcher keeps waiting for that same job (a retry submitting a
    second copy beside it is impossible), and returns when the requeued run ends."""
    from calorimeter.launch import slurm as slurm_cli

    live, done = iter(states), iter(dones)
    seen: list[str | None] = []

    class Job:
        job_id = "42"

        def done(self, force_check: bool = False) -> bool:
            return next(done)

        def cancel(self, check: bool = True) -> None:
            raise AssertionError("cancelled a requeued job that restarted in time")

    def squeue(job_id: str) -> str | None:
        seen.append(s := next(live))
        return s

    monkeypatch.setattr(slurm_cli, "squeue_state", squeue)
    def sacct(job_id: str, steps: bool = False) -> list[dict[str, str]]:  # the last row: the run being killed
        return [{"State": "NODE_FAIL"}] + ([{"State": "PENDING"}] if seen[-1] == "PENDING" else [])

    monkeypatch.setattr(slurm_cli, "sacct_records", sacct)
    monkeypatch.setattr(submit.time, "sleep", lambda s: None)
    attempt = AttemptPaths(tmp_path / "a")
    attempt.staging.mkdir(parents=True)
    assert submit._wait(Job(), 0.0, None, None, (attempt, 2)) is None
    assert seen == states


def test_srun_names_the_rank_that_went_first_only_when_it_left_no_result() -> None:
    from calorimeter.launch.watch import srun_death

    log = ("srun: error: node2: task 1: Killed\nsrun: launch/slurm: _step_signal: Terminating StepId=7.0\n"
           "srun: error: node1: task 0: Killed\n")
    death = srun_death(["", log], set())
    assert (death.rank, death.host, death.how) == (1, "node2", "Killed")
    assert death.describe() == ("rank 1 on host node2 died without a result (Killed, said srun); the other ranks "
                                "were stopped")
    assert srun_death([log], {1}).to_dict() == {"rank": 0, "host": "node1", "how": "Killed", "source": "srun"}
    assert srun_death(["srun: error: node1: task 0: Exited with exit code 3"], {0}) is None  # it wrote its result


def test_the_watch_names_a_dead_rank_of_its_host_but_not_a_requeued_one(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from calorimeter.launch.watch import PeerWatch, announce

    attempt = AttemptPaths(tmp_path / "a")
    announce(attempt, 0, 0)  # this process: alive
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (attempt.staging / "alive-1.json").write_text(json.dumps({"rank": 1, "pid": gone.pid, "host": os.uname().nodename,
                                                              "t_start_s": 1.0}))
    (attempt.staging / "alive-2.json").write_text(json.dumps({"rank": 2, "pid": gone.pid, "host": "elsewhere",
                                                              "t_start_s": 1.0}))
    attempt.requeues.write_text(json.dumps({"time_s": 2.0}) + "\n")  # rank 1 was checkpointed and requeued
    assert PeerWatch(attempt).check() is None
    attempt.requeues.write_text(json.dumps({"time_s": 0.5}) + "\n")  # ... before it started: it died
    death = PeerWatch(attempt).check()
    assert (death.rank, death.pid, death.ranks_dead) == (1, gone.pid, (1,))  # rank 2: another host
    assert json.loads(attempt.peer_died.read_text())["rank"] == 1


def test_the_rank_whose_heartbeat_stopped_first_is_named(tmp_path: Path) -> None:
    import os

    from calorimeter.launch.watch import heartbeat_death

    attempt = AttemptPaths(tmp_path / "a")
    attempt.staging.mkdir(parents=True)
    for rank, host, last in ((0, "node1", 1000.0), (1, "node2", 960.0)):
        f = attempt.staging / f"alive-{rank}.json"
        f.write_text(json.dumps({"rank": rank, "host": host, "pid": 10 + rank, "restart": 1}))
        os.utime(f, (last, last))
    death = heartbeat_death(attempt, set())
    assert (death.rank, death.host, death.others_lived_s) == (1, "node2", 40.0)
    assert RankDeath.from_dict(death.to_dict()) == death  # as peer_died.json and the record's evidence keep it
    assert death.describe().startswith("rank 1 on host node2 (pid 11) died without a result (its heartbeat stopped "
                                      "40 s before any other rank's)")
    assert heartbeat_death(attempt, {1}) is None  # it wrote its result: not a death
    os.utime(attempt.staging / "alive-1.json", (999.0, 999.0))
    assert heartbeat_death(attempt, set()) is None  # too close to tell which went first


def test_a_silent_rank_is_found_by_its_stale_heartbeat_relative_to_its_peers(tmp_path: Path) -> None:
    """A rank whose host vanished without a connection reset (or a frozen process) stops beating: taken for dead
    once it is STALE_S behind the freshest heartbeat, whatever the clocks say; never when it wrote its result."""
    import os

    from calorimeter.launch.watch import STALE_S, PeerWatch

    attempt = AttemptPaths(tmp_path / "a")
    attempt.staging.mkdir(parents=True)
    base = 1_000.0  # an old clock: staleness is measured between heartbeats, not against this host's time
    for rank, host in ((0, "node1"), (1, "node2"), (2, "node2")):
        f = attempt.staging / f"alive-{rank}.json"
        f.write_text(json.dumps({"rank": rank, "host": host, "pid": 10 + rank, "restart": 0, "t_start_s": base}))
        os.utime(f, (base + 100, base + 100))
    watch = PeerWatch(attempt, host="login")
    assert watch.check() is None  # every rank beats
    os.utime(attempt.staging / "alive-1.json", (base + 100 - STALE_S + 1, base + 100 - STALE_S + 1))
    assert watch.check() is None  # behind, but less than STALE_S
    os.utime(attempt.staging / "alive-1.json", (base + 100 - STALE_S - 5, base + 100 - STALE_S - 5))
    attempt.rank_json(1).parent.mkdir(parents=True, exist_ok=True)
    attempt.rank_json(1).write_text("{}")
    assert watch.check() is None  # it wrote its result and ended: not a death
    attempt.rank_json(1).unlink()

    def restart(rank: int, host: str, n: int, mtime: float) -> None:
        f = attempt.staging / f"alive-{rank}.json"
        f.write_text(json.dumps({"rank": rank, "host": host, "pid": 20 + rank, "restart": n, "t_start_s": base}))
        os.utime(f, (mtime, mtime))

    restart(0, "node1", 1, base + 100)  # SLURM requeued the job: the new run's ranks 0 and 2 announced themselves,
    restart(2, "node2", 1, base + 100)  # rank 1's file is still the previous run's: not a rank of this run
    assert watch.check() is None
    restart(1, "node2", 1, base + 100 - STALE_S - 5)  # rank 1 of the new run went silent
    death = watch.check()
    assert (death.rank, death.host, death.source) == (1, "node2", "heartbeat")
    assert json.loads(attempt.peer_died.read_text())["rank"] == 1
    assert death.describe() == (f"rank 1 on host node2 (pid 21) died without a result (no heartbeat for "
                               f"{STALE_S + 5:.0f} s while its peers' went on); the other ranks were stopped")


_RELAY = """
import os, signal, sys, time
from pathlib import Path
from calorimeter.launch.warning import relay_warning
from calorimeter.records.paths import AttemptPaths
rank, attempt = int(sys.argv[1]), AttemptPaths(Path(sys.argv[2]))
attempt.staging.mkdir(parents=True, exist_ok=True)
calls = []
signal.signal(signal.SIGUSR2, lambda s, f: calls.append(time.time()))  # stands for submitit's handler
assert relay_warning(attempt, rank, 0, force=True)
if rank == 1:  # SLURM warns this peer: it leaves the marker and still runs submitit's handler
    os.kill(os.getpid(), signal.SIGUSR2)
    print(len(calls), (attempt.staging / "warned-0.json").exists())
else:  # rank 0 never gets SLURM's warning itself: the peer's marker must bring it within a few seconds
    deadline = time.time() + float(sys.argv[3])
    while not calls and time.time() < deadline:
        time.sleep(0.1)
    relayed = len(calls)
    os.kill(os.getpid(), signal.SIGUSR2)  # SLURM's own warning arrives too, later: handled once only
    time.sleep(0.2)
    print(relayed, len(calls))
"""


def test_a_peers_time_limit_warning_reaches_rank_0(tmp_path: Path) -> None:
    """SLURM warned node2's rank but not node1's rank 0 until the kill (a CI run of scenario 8): the peer's marker
    makes rank 0 run submitit's checkpoint-and-requeue handler, once, even when SLURM's own warning follows."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    attempt = tmp_path / "attempt"
    run = lambda rank, wait_s=10: subprocess.run(  # noqa: E731
        [sys.executable, "-c", _RELAY, str(rank), str(attempt), str(wait_s)], capture_output=True, text=True, env=env,
        timeout=60)
    peer = run(1)
    assert peer.returncode == 0 and peer.stdout.split() == ["1", "True"], peer.stderr
    rank0 = run(0)
    assert rank0.returncode == 0 and rank0.stdout.split() == ["1", "1"], rank0.stderr
    (attempt / "staging" / "warned-0.json").unlink()
    alone = run(0, 1.5)  # no peer warned: rank 0 waits for SLURM's own warning and handles it once
    assert alone.returncode == 0 and alone.stdout.split() == ["0", "1"], alone.stderr


_LOST = """
import os, signal, sys, time
from pathlib import Path
from submitit.core.utils import UncompletedJobError
from calorimeter.launch import warning
from calorimeter.records.paths import AttemptPaths
attempt = AttemptPaths(Path(sys.argv[1]))
attempt.staging.mkdir(parents=True, exist_ok=True)
def submitit_handler(s, f):  # stands for submitit's: at the time limit, not requeued
    raise UncompletedJobError("Job not requeued because: checkpoint function returned None.")
signal.signal(signal.SIGUSR2, submitit_handler)
warning.REDELIVER_S = 0.3
assert warning.relay_warning(attempt, 0, 0, force=True)
swallowed = 0
try:  # the warning lands inside an except Exception (a logging call in CI): the error is lost there
    os.kill(os.getpid(), signal.SIGUSR2)
    time.sleep(0.05)
except Exception:
    swallowed += 1
t0 = time.time()
try:
    time.sleep(5)
    print("lost", swallowed)
except UncompletedJobError:
    warning.not_requeued_taken()
    waited = time.time() - t0
    time.sleep(1.0)  # taken: never raised again
    print("raised", swallowed, waited < 2)
"""


def test_a_lost_time_limit_error_is_raised_again_until_the_run_takes_it(tmp_path: Path) -> None:
    """SLURM sent SIGCONT and USR2 together; submitit's "not requeued" error, raised from the USR2 handler, landed in
    submitit's SIGCONT log call and ``logging`` swallowed it: the rank slept until SLURM killed it (a CI run of the
    time-limit scenario). Rank 0's relay raises the kept error again until the task has taken it, then never."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    r = subprocess.run([sys.executable, "-c", _LOST, str(tmp_path / "attempt")], capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["raised", "1", "True"], (r.stdout, r.stderr)


def test_a_rank_that_starts_after_its_peer_died_never_waits_for_it(tmp_path: Path) -> None:
    """Rank 1 died at the rendezvous before rank 0 had announced itself (a CI run of test_fail_fast: rank 0 then
    waited 601 s in the store): stop_ranks reads the ranks again after its grace and stops one that announced itself
    meanwhile, and a rank announcing itself after peer_died.json leaves at once (only for the same run)."""
    import subprocess
    import sys
    import threading

    from calorimeter.launch.watch import stop_ranks
    from calorimeter.records.atomic import write_json_atomic

    attempt = AttemptPaths(tmp_path / "a")
    attempt.staging.mkdir(parents=True)
    rank = lambda: subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "submitit"])  # noqa: E731
    hung, late = rank(), rank()  # "submitit" in the cmdline, as a rank's
    try:
        write_json_atomic(attempt.staging / "alive-1.json", {"rank": 1, "pid": hung.pid, "host": "h", "restart": 0})
        announce_later = threading.Timer(0.5, lambda: write_json_atomic(
            attempt.staging / "alive-0.json", {"rank": 0, "pid": late.pid, "host": "h", "restart": 0}))
        announce_later.start()
        # rank 0 had not announced itself when the grace began: stopped all the same
        assert stop_ranks(attempt, grace_s=1.5, host="h") == [0, 1]
        assert late.wait(timeout=10) == -9 and hung.wait(timeout=10) == -9
    finally:
        hung.kill()
        late.kill()

    write_json_atomic(attempt.peer_died, {"rank": 1, "host": "h", "pid": 1, "restart": 0})
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    code = ("import sys; from pathlib import Path; from calorimeter.launch.watch import leave_if_a_peer_died; "
            "from calorimeter.records.paths import AttemptPaths; "
            "leave_if_a_peer_died(AttemptPaths(Path(sys.argv[1])), 0, int(sys.argv[2])); print('joins')")
    same = subprocess.run([sys.executable, "-c", code, str(attempt.root), "0"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert same.returncode == 3 and "died before this rank started" in same.stdout, same.stderr
    requeued = subprocess.run([sys.executable, "-c", code, str(attempt.root), "1"], capture_output=True, text=True,
                              env=env, timeout=60)  # a later run of a requeued job is not stopped by an old death
    assert requeued.returncode == 0 and requeued.stdout.strip() == "joins", requeued.stderr


def test_a_local_jobs_rank_processes_are_watched_before_they_announce_themselves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher finds a local job's ranks among the processes it started (submitit tasks, their rank in their
    environment), so a rank that dies before its alive file is named with its pid; a rank never seen while its peers
    ran is named without one; a rank that wrote its result, or a time limit, is no death."""
    import subprocess
    import sys

    from calorimeter.launch import watch
    from calorimeter.launch.watch import PeerWatch, local_ranks

    attempt = AttemptPaths(tmp_path / "a")
    attempt.staging.mkdir(parents=True)

    def task(rank: int) -> subprocess.Popen:  # "submitit" in the cmdline and the rank in the environment, as a task's
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "submitit"],
                                env={**os.environ, "SUBMITIT_LOCAL_GLOBALID": str(rank)})

    tasks = {r: task(r) for r in (0, 1)}
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # not a rank
    try:
        assert local_ranks(os.getpid()) == {0: tasks[0].pid, 1: tasks[1].pid}
        w = PeerWatch(attempt, host="h", processes=lambda: local_ranks(os.getpid()), world_size=2)
        assert w.check() is None
        tasks[1].kill()
        tasks[1].wait()
        death = w.check()
        assert (death.rank, death.pid, death.host, death.source) == (1, tasks[1].pid, "h", "process")
        assert "the rank had not announced itself" in death.how and attempt.peer_died.is_file()
        # rank 1 never seen running while rank 0 ran NEVER_SEEN_S: dead, pid unknown
        attempt.peer_died.unlink()
        monkeypatch.setattr(watch, "NEVER_SEEN_S", 0.2)
        w = PeerWatch(attempt, host="h", processes=lambda: {0: tasks[0].pid}, world_size=2)
        assert w.check() is None
        time.sleep(0.3)
        death = w.check()
        assert (death.rank, death.pid) == (1, None) and "before the launcher saw it" in death.how
        # a rank that ended with its result is no death, nor are the ranks of a job at its time limit
        attempt.peer_died.unlink()
        (attempt.staging / "rank-1.json").write_text(json.dumps({"rank": 1, "status": "ok"}))
        assert PeerWatch(attempt, host="h", processes=lambda: {0: tasks[0].pid}, world_size=2).check() is None
        (attempt.staging / "rank-1.json").write_text(json.dumps({"rank": 1, "status": "timeout"}))
        tasks[0].kill()
        w = PeerWatch(attempt, host="h", processes=lambda: {}, world_size=2)
        w.seen = {0: (tasks[0].pid, time.time())}
        assert w.check() is None and w.at_time_limit()
    finally:
        for t in (*tasks.values(), other):
            t.kill()


# ---------------------------------------------------------------------------------------------------------------
# the plugin's documented forms, read by Snakemake itself from a profile

#: snakemake-executor-plugin-slurm's documented resource forms (docs/further.md and README of the plugin: "mem,
#: mem_mb: memory a cluster node must provide (mem: string with unit, mem_mb: int)", "runtime: the walltime per job
#: in minutes", slurm_extra="'--qos=long --mail-type=ALL --mail-user=<your email>'", slurm_extra: "'--nice=150'",
#: mem_mb_per_cpu, cpus_per_task, gpu + gpu_model + cpus_per_gpu, gres="gpu:rtx3090:2", constraint, clusters), one
#: rule each, and what the plugin would send for them
PLUGIN_FORMS = {
    "a": ({"mem": "64G", "slurm_extra": "\"'--qos=long --mail-type=ALL --mail-user=me@example.org'\"",
           "runtime": "\"4h\""},
          {"mem": "64000M", "qos": "long", "time": 240, "mail-type": "ALL", "mail-user": "me@example.org"}),
    "b": ({"slurm_partition": "compute", "runtime": 120, "mem_mb": 8000, "cpus_per_task": 4},
          {"partition": "compute", "time": 120, "mem": "8000M", "cpus_per_task": 4}),
    "c": ({"mem_mb_per_cpu": 1800, "slurm_extra": "\"'--nice=150'\"", "cpus_per_task": 40},
          {"mem-per-cpu": "1800M", "nice": "150", "cpus_per_task": 40}),
    "d": ({"gpu": 2, "gpu_model": "\"a100\"", "cpus_per_gpu": 8}, {"gpus_per_node": "a100:2", "cpus_per_task": 8}),
    "e": ({"gres": "\"gpu:rtx3090:2\""}, {"gres": "gpu:rtx3090:2"}),
    "f": ({"constraint": "\"h100\"", "clusters": "\"cluster1,cluster2\"", "slurm_extra": "--mail-type=ALL"},
          {"constraint": "h100", "clusters": "cluster1,cluster2", "mail-type": "ALL"}),
}


@pytest.mark.integration
def test_the_plugins_documented_resource_forms_through_snakemakes_own_profile_reading(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A profile with the plugin's documented forms, read by Snakemake (units, quoting, evaluation): the resources
    each rule gets become the sbatch parameters the plugin would send."""
    import subprocess
    import sys

    # each rule's resources as Snakemake evaluated them, turned into launcher settings while the DAG is built (a
    # dry run: a params function sees the job's resources)
    rules = "".join(f"""
rule {r}:
    output: "{r}.out"
    params: settings=settings("{r}")
    localrule: True
    shell: "true"
""" for r in PLUGIN_FORMS)
    (tmp_path / "Snakefile").write_text(f"""import json
from calorimeter.launch.settings import explicit_train_resources, launcher_settings
from calorimeter.plan.config import validate_config

def settings(rule):
    def dump(wildcards, resources):
        s = launcher_settings(validate_config({{"launcher": {{"executor": "slurm"}}}}), dict(resources.items()),
                              explicit_train_resources(workflow, rule))
        json.dump(s.to_dict(), open(rule + ".json", "w"))
        return ""
    return dump
{rules}
rule all:
    input: {[f"{r}.out" for r in PLUGIN_FORMS]}
    default_target: True
""")
    profile = tmp_path / "site"
    profile.mkdir()
    lines = ["default-resources:", "  slurm_account: proj", "set-resources:"]
    for r, (res, _) in PLUGIN_FORMS.items():
        lines += [f"  {r}:", *(f"    {k}: {v}" for k, v in res.items())]
    (profile / "config.yaml").write_text("\n".join(lines) + "\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    r = subprocess.run([sys.executable, "-m", "snakemake", "--profile", str(profile), "-c1", "-n"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    monkeypatch.setattr(submit.slurm_cli, "available", lambda: True)
    monkeypatch.setattr(submit.slurm_cli, "node_cpus", lambda partition=None: None)
    for rule, (_, want) in PLUGIN_FORMS.items():
        s = LauncherSettings.from_dict(json.loads((tmp_path / f"{rule}.json").read_text()))
        _, p = executor_parameters(_cell(gpus_per_node=2), s)
        sent = {**p, **p["additional_parameters"]}
        assert {k: sent.get(k) for k in want} == want, (rule, p)
        assert p["account"] == "proj"  # default-resources reach rule train too

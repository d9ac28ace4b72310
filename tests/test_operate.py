"""calorimeter status and rerun on hand-made cell folders: progress files, every cell state, the ETA, the selection
of cells to rerun and setting records aside (nothing deleted, the set-aside record still readable)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import ROOT, run_cli

from calorimeter.operate import rerun
from calorimeter.operate.eta import estimate, format_duration
from calorimeter.operate.state import cell_status
from calorimeter.operate.view import cell_folders, format_table, sweep_status, to_json
from calorimeter.plan.cell import Cell
from calorimeter.plan.config import ConfigError
from calorimeter.plan.plan import plan_file
from calorimeter.records.atomic import write_json_atomic
from calorimeter.records.paths import AttemptPaths, CellPaths, RunPaths
from calorimeter.records.progress import ProgressLog, ProgressTail, ProgressWriter, read_progress
from calorimeter.records.rank import RankReport
from calorimeter.records.record import build_record, steps_frame, write_cell_record

GRID = [{"model": "tiny-gpt", "gpus_per_node": 1, "zero_stage": [0, 1, 2, 3]},
        {"model": "tiny-llama", "gpus_per_node": 1, "zero_stage": [0, 1, 2, 3]},
        {"model": "tiny-gpt", "gpus_per_node": 3, "tp": 3}]  # pruned: 4 heads not divisible by tp=3


def _cell(**kw) -> Cell:
    d = {"sweep": "t", "model": "tiny-gpt", "hardware": "cpu", "nodes": 1, "gpus_per_node": 1, "global_batch": 4,
         "seq_len": 32, "warmup_steps": 2, "measured_steps": 3, **kw}
    return Cell(**d)


# ---------------------------------------------------------------------------------------------------------------
# the progress file


def test_progress_of_a_fixed_schedule_counts_every_step(tmp_path: Path) -> None:
    path = RunPaths(tmp_path / "restart0").progress
    w = ProgressWriter(path, _cell(), profile_steps=1, fixed=True)
    for step, phase, dt in ((0, "warmup", 0.5), (1, "warmup", 0.3), (2, "measured", 0.2), (3, "measured", 0.2)):
        w(step, phase, 100.0 + step, 100.0 + step + dt)
    p = read_progress(path)
    assert p is not None and p.steps == 4 and p.expected == 6 and p.exact and p.phase == "measured"
    assert p.tokens_per_s == pytest.approx(4 * 32 * 2 / 0.4)  # over the measured steps only
    assert p.describe().startswith("step 4/6 measured, ")
    assert p.remaining_s() == pytest.approx(2 * (0.5 + 0.3 + 0.2 + 0.2) / 4)  # 2 steps at the recent mean
    assert p.to_dict()["steps_expected_exact"] is True


def test_progress_of_a_steady_warmup_is_estimated_once_measuring(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    cell = _cell(warmup="steady", hardware="h200", measured_steps=5, measured_min_s=2.0, warmup_max_steps=50)
    w = ProgressWriter(path, cell, profile_steps=1, fixed=False)
    for step in range(7):
        w(step, "warmup", 10.0 * step, 10.0 * step + 0.25)
    p = read_progress(path)
    assert p.expected is None and "warm-up until steady, at most 50 steps" in p.describe()
    assert p.remaining_s() > 0
    w(7, "measured", 100.0, 100.25)
    p = read_progress(path)
    # 7 warm-up steps, then max(5, ceil(2.0 s / 0.25 s)) = 8 measured, then 1 profiled
    assert (p.expected, p.exact) == (7 + 8 + 1, False)
    assert p.describe().startswith("step 8/~16 measured")


def test_progress_tail_reads_only_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    path.write_text(json.dumps({"cell_id": "x", "tokens_per_step": 10}) + "\n" + '{"step": 0, "phase": "warm')
    tail = ProgressTail(path)
    assert tail.poll() == [] and tail.progress.steps == 0
    with path.open("a") as f:
        f.write('up", "step_s": 1.0, "expected": 3, "exact": true}\n{"step": 1, "phase": "measured", "step_s": 2.0}\n')
    new = tail.poll()
    assert [x["step"] for x in new] == [0, 1] and tail.progress.steps == 2 and tail.progress.step_s == 1.5
    assert tail.poll() == []


def test_progress_that_cannot_be_written_never_stops_training(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    w = ProgressWriter(blocker / "sub" / "progress.jsonl", _cell(), 0, True)  # parent is a file
    w(0, "warmup", 0.0, 1.0)
    assert w.failed


def test_progress_log_lines_at_phase_changes_and_a_requeued_run(tmp_path: Path, caplog) -> None:
    attempt = AttemptPaths(tmp_path / "attempt")
    log = ProgressLog(attempt, "c1", every_s=3600)
    assert log.tick() is None  # nothing yet
    w = ProgressWriter(attempt.run(0).progress, _cell(), 0, True)
    w(0, "warmup", 0.0, 0.5)
    assert log.tick().startswith("cell c1: step 1/5 warmup")
    w(1, "warmup", 1.0, 1.5)
    assert log.tick() is None  # same phase, within every_s
    w(2, "measured", 2.0, 2.5)
    assert "step 3/5 measured" in log.tick()
    w2 = ProgressWriter(attempt.run(1).progress, _cell(), 0, True)  # requeued: the new run's file is followed
    w2(0, "warmup", 5.0, 5.5)
    assert "step 1/5 warmup" in log.tick()


# ---------------------------------------------------------------------------------------------------------------
# cell states


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    cfg = {"sweep": "unit", "hardware": "cpu", "results_dir": str(tmp_path / "results"),
           "defaults": {"global_batch": 2, "micro_batch": 1, "warmup_steps": 1, "measured_steps": 2, "seq_len": 32},
           "grid": GRID}
    path = tmp_path / "unit.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _rank(rank: int = 0, status: str = "ok", step_s: float = 0.1, n: tuple[int, int] = (1, 2), **kw) -> dict:
    steps = [{"step": i, "phase": "warmup" if i < n[0] else "measured", "loss": 5.0 - i, "grad_norm": 1.0,
              "time_s": step_s, "t_begin_s": 1000.0 + i, "t_end_s": 1000.0 + i + step_s} for i in range(sum(n))]
    return {"rank": rank, "status": status, "steps": steps if status == "ok" else [], "hostname": "h", "node": 0,
            "local_rank": rank, "restart": 0, **kw}


def _attempt(paths: CellPaths, name: str, job: dict | None = None) -> AttemptPaths:
    a = paths.attempt(name)
    a.staging.mkdir(parents=True)
    if job is not None:
        write_json_atomic(a.job_json, {"executor": "local", "submitted_s": time.time() - 30, "world_size": 1, **job})
    return a


def _finish(pc, paths: CellPaths, name: str, ranks: list[dict], wall_s: float = 20.0, job_id: str = "11"
            ) -> dict:
    """A finished attempt written as the launcher writes it (record at the top and in the attempt)."""
    attempt = _attempt(paths, name, {"job_id": job_id})
    launch = {"executor": "local", "job_id": job_id, "attempt": name, "wall_time_s": wall_s}
    reports = [RankReport.from_dict(r) for r in ranks]
    rec = build_record(pc.cell, reports, launch, pc.estimates)
    if rec["status"] == "transient":
        write_json_atomic(attempt.run_json, rec)
    else:
        (paths.root / "host_telemetry.parquet").write_bytes(b"PAR1 stand-in PAR1")
        write_cell_record(paths, attempt, rec, steps_frame(reports))
    return rec


def _states(sweep: Path, scheduler: dict | None = None) -> dict[int, tuple]:
    plan = plan_file(sweep)
    out = {}
    for i, (pc, f) in enumerate(zip(plan.cells, cell_folders(plan), strict=True)):
        cs = cell_status(pc, f, scheduler)
        out[i] = (cs.state, cs.failure_class)
    return out


def test_every_cell_state_from_the_files(sweep: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import calorimeter.operate.view as view

    plan = plan_file(sweep)
    pcs, folders = plan.cells, cell_folders(plan)
    _finish(pcs[0], folders[0], "20260101T000000Z", [_rank()])
    _finish(pcs[1], folders[1], "20260101T000000Z", [_rank(status="oom", error="CUDA out of memory")])
    _finish(pcs[2], folders[2], "20260101T000000Z", [_rank(status="failed", error="ValueError: bug")])
    _finish(pcs[3], folders[3], "20260101T000000Z", [_rank(status="failed", error="gloo connection reset")])
    # an open local attempt whose controller lives (pid with submitit on its command line), with progress
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "submitit"])
    try:
        a = _attempt(folders[4], "20260101T000000Z", {"job_id": str(live.pid)})
        w = ProgressWriter(a.run(0).progress, pcs[4].cell, 0, True)
        w(0, "warmup", 1.0, 1.5)
        # an open local attempt whose controller is gone
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        _attempt(folders[5], "20260101T000000Z", {"job_id": str(dead.pid)})
        # an open SLURM attempt
        _attempt(folders[6], "20260101T000000Z", {"job_id": "77", "executor": "slurm"})
        folders[7].root.mkdir(parents=True)
        folders[7].run_json.write_text("{not json")
        states = _states(sweep, {"77": {"state": "PENDING", "reason": "Resources"}})
        asked = []
        monkeypatch.setattr(view, "slurm_view", lambda ids: asked.append(ids) or {"77": {"state": "PENDING"}})
        st = sweep_status(plan)  # the same through the sweep view: SLURM asked once, for the open job only
    finally:
        live.kill()
        live.wait()
    assert states == {0: ("ok", "ok"), 1: ("oom", "oom"), 2: ("failed", "failed"), 3: ("failed", "peer_died"),
                      4: ("running", None), 5: ("interrupted", None), 6: ("queued", None), 7: ("failed", "damaged"),
                      8: ("pruned", None)}
    assert asked == [["77"]]
    cs = {c.cell_id: c for c in st.cells}
    running = cs[pcs[4].cell.cell_id]
    assert running.progress.steps == 1 and running.job_id == str(live.pid) and running.attempts == 1
    assert "step 1/3 warmup" in format_table(st)
    assert "9 cells: 1 running, 1 queued, 1 interrupted, 3 failed, 1 oom, 1 ok, 1 pruned" in format_table(st)
    assert cs[pcs[3].cell.cell_id].note.startswith("no record")
    assert "not JSON" in cs[pcs[7].cell.cell_id].reason
    assert cs[pcs[8].cell.cell_id].reason.startswith("attention heads 4 not divisible")
    # SLURM's answers about the open job
    assert _states(sweep, {"77": {"state": "RUNNING", "nodelist": "n1"}})[6] == ("running", None)
    assert _states(sweep, {"77": {"state": "COMPLETED"}})[6] == ("interrupted", None)
    assert _states(sweep, {})[6] == ("interrupted", None)  # neither squeue nor sacct knows it
    assert _states(sweep, None)[6] == ("unknown", None)  # SLURM cannot be asked from here
    # the dead controller's cell, after the live one was killed, is interrupted too
    assert _states(sweep)[4] == ("interrupted", None)
    doc = json.loads(to_json(st))
    assert doc["counts"]["failed"] == 3 and doc["cells"][4]["progress"]["steps_done"] == 1


def test_a_local_job_on_another_host_is_judged_by_its_progress(sweep: Path) -> None:
    plan = plan_file(sweep)
    pc, paths = plan.cells[0], cell_folders(plan)[0]
    a = _attempt(paths, "20260101T000000Z", {"job_id": "1", "host": "elsewhere"})
    assert cell_status(pc, paths, {}).state == "unknown"
    ProgressWriter(a.run(0).progress, pc.cell, 0, True)(0, "warmup", time.time() - 1, time.time())
    cs = cell_status(pc, paths, {})
    assert cs.state == "running" and "elsewhere" in cs.note


# ---------------------------------------------------------------------------------------------------------------
# ETA


def test_eta_scales_the_finished_cells_by_the_plans_flops(sweep: Path) -> None:
    plan = plan_file(sweep)
    pcs, folders = plan.cells, cell_folders(plan)
    _finish(pcs[0], folders[0], "20260101T000000Z", [_rank(step_s=0.1)], wall_s=20.0)
    st = sweep_status(plan)
    flops0 = pcs[0].estimates["model_flops_per_iteration"]
    rate = flops0 / 0.1  # per device: one rank
    # overhead: 20 s wall - (1 warm-up + 2 measured steps) x 0.1 s; each cell left: 1 + 2 + 1 profiled step
    assert plan.config["telemetry"]["profile_steps"] == 1
    expect = sum(19.7 + 4 * pc.estimates["model_flops_per_iteration"] / rate for pc in pcs[1:8])
    assert st.eta.seconds == pytest.approx(expect)
    assert (st.eta.cells_left, st.eta.running, st.eta.based_on, st.eta.cells_without_estimate) == (7, 0, 1, 0)
    assert st.eta.describe().startswith(f"ETA: ~{format_duration(expect)} (7 cells left")
    # a running cell: the larger of its progress (steps left at its own step time) and its estimate minus its time
    from calorimeter.records.progress import Progress

    running = st.cells[1]
    est1 = 19.7 + 4 * pcs[1].estimates["model_flops_per_iteration"] / rate
    running.state, running.elapsed_s, running.progress = "running", est1 - 5.0, Progress(
        header={"tokens_per_step": 64}, steps=1, expected=4, exact=True)
    running.progress.recent.append(3.0)  # 3 steps left at 3 s: 9 s > the 5 s its estimate has left
    eta = estimate(plan.cells, st.cells, 1)
    assert (eta.running, eta.cells_left) == (1, 7)
    assert eta.seconds == pytest.approx(expect - est1 + 9.0)
    running.progress.recent[0] = 0.1  # 0.3 s by its steps: the estimate's 5 s left (collection, record) count
    assert estimate(plan.cells, st.cells, 1).seconds == pytest.approx(expect - est1 + 5.0)
    # nothing finished: no estimate, said so
    empty = estimate(plan.cells, [cell_status(pc, CellPaths(Path("/nonexistent")), {}) for pc in plan.cells], 0)
    assert empty.seconds is None and "unknown until" in empty.describe()


def test_eta_starts_from_projected_wall_times_then_moves_to_the_finished_cells(sweep: Path) -> None:
    from calorimeter.projection.cost import CellCost

    plan = plan_file(sweep)
    pcs, folders = plan.cells, cell_folders(plan)
    runnable = [pc for pc in pcs if pc.status == "planned"]
    projected = {pc.cell.cell_id: CellCost(pc.cell.cell_id, 1, 50.0, 40.0, 60.0) for pc in runnable[1:]}
    projected[runnable[0].cell.cell_id] = CellCost(runnable[0].cell.cell_id, 1, why_not="kind command")
    nothing = [cell_status(pc, CellPaths(Path("/nonexistent")), {}) for pc in pcs]
    eta = estimate(pcs, nothing, 1, projected)
    # before any cell finished: each projected cell its projected wall time; the one without counted apart
    assert eta.seconds == pytest.approx(50.0 * (len(runnable) - 1))
    assert (eta.projected, eta.cells_without_estimate, eta.based_on) == (len(runnable) - 1, 1, 0)
    assert "from projected wall times" in eta.describe() and "at least" in eta.describe()
    # once a cell of the hardware finished: what it achieved, never the projection
    _finish(pcs[0], folders[0], "20260101T000000Z", [_rank(step_s=0.1)], wall_s=20.0)
    st = sweep_status(plan, cost=None)
    measured = estimate(pcs, st.cells, 1, projected)
    assert measured.projected == 0 and measured.seconds == pytest.approx(estimate(pcs, st.cells, 1).seconds)


# ---------------------------------------------------------------------------------------------------------------
# rerun: selection and setting records aside


def test_rerun_selects_failed_oom_or_globbed_cells_only(sweep: Path) -> None:
    plan = plan_file(sweep)
    pcs, folders = plan.cells, cell_folders(plan)
    _finish(pcs[0], folders[0], "20260101T000000Z", [_rank()])
    _finish(pcs[1], folders[1], "20260101T000000Z", [_rank(status="oom", error="out of memory")])
    _finish(pcs[2], folders[2], "20260101T000000Z", [_rank(status="failed", error="ValueError: bug")])
    _finish(pcs[3], folders[3], "20260101T000000Z", [_rank(status="failed", error="connection reset")])
    cells = sweep_status(plan).cells
    ids = [c.cell_id for c in cells]
    assert [c.cell_id for c in rerun.select(cells, failed=True)] == [ids[2], ids[3]]
    assert [c.cell_id for c in rerun.select(cells, oom=True)] == [ids[1]]
    assert [c.cell_id for c in rerun.select(cells, failed=True, oom=True)] == ids[1:4]
    assert [c.cell_id for c in rerun.select(cells, globs=("tiny-llama*z[01]*",))] == [ids[4], ids[5]]
    assert rerun.select(cells, globs=(ids[0],))[0].state == "ok"  # any finished cell can be chosen by id
    with pytest.raises(ConfigError, match="matches no cell.*did you mean"):
        rerun.select(cells, globs=(ids[0][:-2] + "x",))
    with pytest.raises(ConfigError, match="pruned and never run"):
        rerun.select(cells, globs=("*tp3*",))
    cells[4].state, cells[4].job_id = "running", "99"
    with pytest.raises(ConfigError, match="running now .*job 99"):
        rerun.select(cells, globs=("tiny-llama*",))


def test_set_aside_moves_the_record_into_its_attempt_and_keeps_it_readable(sweep: Path) -> None:
    plan = plan_file(sweep)
    pc, paths = plan.cells[2], cell_folders(plan)[2]
    rec = _finish(pc, paths, "20260101T000000Z", [_rank(status="failed", error="ValueError: bug")])
    (paths.root / "cell_tables").mkdir()
    (paths.root / "cell_tables" / "runs.parquet").write_bytes(b"x")
    before = {p.name: p.read_bytes() for p in paths.root.iterdir() if p.is_file()}
    moved = rerun.set_aside(paths, "--failed")
    attempt = paths.attempt("20260101T000000Z")
    assert moved.folder == attempt.root
    assert moved.files == ["steps.parquet", "host_telemetry.parquet", "cell_tables", "run.json"]  # run.json last
    assert not any((paths.root / n).exists() for n in rerun.record_files())
    assert {n: (attempt.root / n).read_bytes() for n in before} == before  # every byte kept
    assert json.loads(attempt.run_json.read_text()) == json.loads(json.dumps(rec))
    assert json.loads(attempt.set_aside.read_text())["why"] == "--failed"
    # the cell waits to run again
    cs = cell_status(pc, paths, {})
    assert cs.state == "planned" and "set aside" in cs.note and cs.attempts == 1
    # nothing to set aside any more
    assert rerun.set_aside(paths, "--failed").files == []
    # a top-level file that differs from the attempt's copy is kept next to it, never over it
    paths.run_json.write_text(json.dumps({**rec, "reason": "edited"}))
    moved = rerun.set_aside(paths, "--cells x", now=0.0)
    assert moved.files == ["set-aside-19700101T000000Z/run.json"]
    assert json.loads(attempt.run_json.read_text())["reason"] == rec["reason"]
    assert len(json.loads(attempt.set_aside.read_text())["history"]) == 2


def test_a_shipped_record_set_aside_reads_as_the_same_cell_tables(tmp_path: Path) -> None:
    from calorimeter.analysis.cell import cell_tables

    src = next((ROOT / "results" / "reference" / "h200x2-2026-11-21" / "default" / "cells").iterdir())
    paths = CellPaths(tmp_path / src.name)
    shutil.copytree(src, paths.root)
    before = cell_tables(paths.root)
    moved = rerun.set_aside(paths, "--cells *")
    assert moved.folder.name.endswith("-set-aside")  # shipped records carry no attempt folder: one of its own
    after = cell_tables(moved.folder)
    for name in ("runs", "gpus", "steps", "kernels", "timeseries"):
        a, b = getattr(before, name), getattr(after, name)
        pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_dtype=False)
    assert not paths.run_json.exists()


def _cli(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    from calorimeter.cli import main

    try:
        rc = main(list(args))
    except SystemExit as e:  # argparse errors
        rc = int(e.code or 0)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_status_json_and_rerun_dry_run(sweep: Path, capsys: pytest.CaptureFixture) -> None:
    plan = plan_file(sweep)
    pcs, folders = plan.cells, cell_folders(plan)
    _finish(pcs[2], folders[2], "20260101T000000Z", [_rank(status="failed", error="ValueError: bug")])
    rc, out, err = _cli(capsys, "status", str(sweep), "--format", "json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["counts"] == {"failed": 1, "planned": 7, "pruned": 1}
    assert doc["cells"][2]["failure_class"] == "failed" and doc["cells"][2]["job_id"] == "11"
    rc, out, err = _cli(capsys, "status", str(sweep), "--state", "failed")
    assert rc == 0 and out.count("\n") == 5, out  # header, 1 cell, counts, ETA, hint
    assert f"calorimeter rerun {sweep} --failed" in out
    rc, out, err = _cli(capsys, "rerun", str(sweep), "--failed", "--dry-run", "--", "--cores", "1")
    assert rc == 0, err
    assert f"snakemake {folders[2].run_json} --configfile {sweep} --cores 1" in out
    assert f"snakemake figures --configfile {sweep} --cores 1" in out
    assert folders[2].run_json.is_file()  # a dry run changes nothing
    rc, out, err = _cli(capsys, "rerun", str(sweep), "--failed", "--no-run")
    assert rc == 0 and "now run:" in out, err
    assert not folders[2].run_json.exists()
    rc, out, err = _cli(capsys, "rerun", str(sweep))
    assert rc == 2 and "--failed, --oom and/or --cells" in err
    rc, out, err = _cli(capsys, "status", str(sweep), "--", "x")
    assert rc == 2 and "after -- are for" in err


def test_status_of_the_shipped_4gpu_sweep() -> None:
    """The real command on the shipped 4x H200 records (a subprocess, as typed)."""
    r = run_cli("status", "config/reference/h200x4.yaml", "--results-dir", "results/reference/h200x4-2026-11-21")
    assert r.returncode == 0, r.stderr
    assert "14 cells: 14 ok" in r.stdout and "ETA: nothing left to run" in r.stdout


def test_status_of_a_results_folder_reads_its_plan_json(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``calorimeter status results/<sweep>``: the plan from plan.json (no sweep file needed), the same states."""
    from calorimeter.operate.source import load_plan

    folder = ROOT / "results" / "reference" / "h200x4-2026-11-21"
    plan = load_plan(str(folder))  # the top folder holds one sweep: that one
    assert plan.sweep == "h200x4-parallelism" and len(plan.cells) == 14
    from_file = plan_file(ROOT / "config" / "reference" / "h200x4.yaml")
    assert [pc.cell.cell_id for pc in plan.cells] == [pc.cell.cell_id for pc in from_file.cells]
    assert all(pc.estimates["model_flops_per_iteration"] > 0 for pc in plan.cells)
    rc, out, err = _cli(capsys, "status", str(folder / "h200x4-parallelism"), "--json")
    assert rc == 0, err
    assert json.loads(out)["counts"] == {"ok": 14}
    # what cannot be a results folder is named, with what to do
    rc, out, err = _cli(capsys, "status", str(tmp_path))
    assert rc == 2 and "no plan.json" in err and "sweep file" in err
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for sub in "ab":
        (tmp_path / sub / "plan.json").write_text(json.dumps({"sweep": sub, "cells": []}))
    rc, out, err = _cli(capsys, "status", str(tmp_path))
    assert rc == 2 and "holds 2 sweeps (a, b)" in err
    (tmp_path / "a" / "plan.json").write_text("{")
    rc, out, err = _cli(capsys, "status", str(tmp_path / "a"))
    assert rc == 2 and "not a plan" in err
    rc, out, err = _cli(capsys, "rerun", str(tmp_path / "b"), "--failed")
    assert rc == 2 and "needs the sweep file" in err


def test_status_state_filter_is_checked(sweep: Path, capsys: pytest.CaptureFixture) -> None:
    rc, out, err = _cli(capsys, "status", str(sweep), "--state", "failed,runing")
    assert rc == 2 and "--state 'runing': not a cell state (did you mean 'running'?)" in err


def test_a_set_aside_cell_that_did_not_run_again_is_selected_again(sweep: Path) -> None:
    """Records set aside, then Snakemake never ran (locked, stopped): the same rerun command picks them again."""
    plan = plan_file(sweep)
    pcs, folders = plan.cells, cell_folders(plan)
    _finish(pcs[1], folders[1], "20260101T000000Z", [_rank(status="oom", error="out of memory")])
    _finish(pcs[2], folders[2], "20260101T000000Z", [_rank(status="failed", error="ValueError: bug")])
    for i in (1, 2):
        rerun.set_aside(folders[i], "--failed --oom")
    cells = sweep_status(plan).cells
    assert [(c.state, c.aside_state) for c in cells[1:3]] == [("planned", "oom"), ("planned", "failed")]
    assert [c.cell_id for c in rerun.select(cells, failed=True)] == [cells[2].cell_id]
    assert [c.cell_id for c in rerun.select(cells, oom=True)] == [cells[1].cell_id]
    assert "failed record set aside" in cells[2].note


def test_slurm_view_asks_squeue_once_then_sacct_for_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    """One squeue call for every open job; sacct only for the jobs squeue no longer knows (its last row: the
    current run of a requeued job)."""
    from calorimeter.launch import slurm

    calls = []

    def fake(cmd, timeout=30):
        calls.append(cmd[0])
        if cmd[0] == "squeue":
            assert "-j" in cmd and cmd[cmd.index("-j") + 1] == "5,7,9"
            return "5|RUNNING|2026-01-01T00:00:00|1:02|node[1-2]|None\n7|PENDING|N/A|0:00||Resources\n"
        return ("9|REQUEUED|2026-01-01T00:00:00|00:01:00|node1|None\n"
                "9|CANCELLED by 0|2026-01-01T00:02:00|00:00:03|node1|None\n")

    monkeypatch.setattr(slurm, "_run", fake)
    view = slurm.job_states(["9", "5", "7", "5"])
    assert calls == ["squeue", "sacct"]
    assert {j: v["state"] for j, v in view.items()} == {"5": "RUNNING", "7": "PENDING", "9": "CANCELLED"}
    assert view["7"]["reason"] == "Resources" and view["5"]["nodelist"] == "node[1-2]"
    calls.clear()
    monkeypatch.setattr(slurm, "_run", lambda cmd, timeout=30: calls.append(cmd[0]) or None)  # squeue refuses
    assert slurm.job_states(["5"]) == {} and calls == ["squeue", "sacct"]
    assert slurm.job_states([]) == {}

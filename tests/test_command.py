"""Kind `command`: a training command of your own run on every rank under the node sampler, its steps read from
the step-log protocol or a trainer's console log."""

from __future__ import annotations

import hashlib
import json
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calorimeter.command.run import command_env, command_metrics, phases
from calorimeter.command.steplog import ConsoleParser, LoggedStep, StepLogError, StepLogWriter, read_step_log
from calorimeter.plan.cell import Cell

ROOT = Path(__file__).resolve().parents[1]


def _cell(**kw) -> Cell:
    base = dict(sweep="s", model="-", hardware="cpu", nodes=1, gpus_per_node=2, kind="command", command="true",
                label="mine", warmup_steps=1, measured_steps=2, global_batch=4, seq_len=16)
    return Cell(**{**base, **kw})


def test_step_log_round_trip_and_errors(tmp_path: Path) -> None:
    p = tmp_path / "steps.jsonl"
    w = StepLogWriter(p)
    w.step(0, 10.0, 11.0, tokens=64, loss=3.0)
    w.step(1, 11.0, 11.5, tokens=64)
    with p.open("a") as f:
        f.write(json.dumps({"step": 2, "t_end_s": 12.5}) + "\n")  # begin = the previous end
    steps = read_step_log(p)
    assert [(s.step, s.time_s, s.tokens) for s in steps] == [(0, 1.0, 64), (1, 0.5, 64), (2, 1.0, None)]
    assert StepLogWriter(None).path is None or "CALORIMETER_STEP_LOG" in __import__("os").environ
    with p.open("a") as f:
        f.write('{"step": 2, "t_end_s": 13}\n')
    with pytest.raises(StepLogError, match=r"steps.jsonl:4: step 2 after step 2"):
        read_step_log(p)
    p.write_text("not json\n")
    with pytest.raises(StepLogError, match=r":1: not a step"):
        read_step_log(p)


def test_console_parsers() -> None:
    titan = ConsoleParser("torchtitan", 100.0)
    lines = ["[titan] step:  1  loss: 12.0  memory: 30GiB  tps: 100  tflops: 1  mfu: 1%",
             "\x1b[31mstep:  2  \x1b[39mloss: 11.5  tps: 7,234", "unrelated", "step:  3  loss:  11.0  tps: 7,300"]
    got = [titan.feed(line, t) for line, t in zip(lines, [105.0, 106.5, 107.0, 108.0], strict=True)]
    assert got[0] is None and got[2] is None  # the first step's begin is the start-up
    assert [(s.step, s.time_s, s.loss) for s in titan.steps] == [(2, 1.5, 11.5), (3, 1.5, 11.0)]
    mega = ConsoleParser("megatron", 0.0)
    mega.feed(" [2026-11-25 03:00:00] iteration        5/     100 | consumed samples:   40 | elapsed time per "
              "iteration (ms): 1234.5 | learning rate: 1.0E-04 | lm loss: 7.123E+00 | loss scale: 1.0 |", 50.0)
    assert [(s.step, round(s.time_s, 4), s.loss) for s in mega.steps] == [(5, 1.2345, 7.123)]


def test_torchtitan_0_2_2_console_lines() -> None:
    # the metrics line of torchtitan 0.2.2 (components/metrics.py) as its logger prints it, colours included
    line = ("[titan] 2026-11-25 03:38:54,131 - root - INFO - \x1b[31mstep: {:2}  \x1b[32mloss: {}  "
            "\x1b[38;2;180;60;0mgrad_norm:  3.2141  \x1b[38;2;54;234;195mmemory: 61.27GiB(43.81%)  \x1b[34mtps: 7,212  "
            "\x1b[36mtflops: 470.12  \x1b[35mmfu: 47.53%\x1b[39m")
    titan = ConsoleParser("torchtitan", 0.0)
    titan.feed("[titan] 2026-11-25 03:38:50,000 - root - INFO - Training starts at step 1", 1.0)
    for step, loss, t in [(1, "11.90000", 5.0), (2, "10.83412", 6.25), (3, " 9.50000", 7.0)]:
        titan.feed(line.format(step, loss), t)
    assert [(s.step, s.time_s, s.loss) for s in titan.steps] == [(2, 1.25, 10.83412), (3, 0.75, 9.5)]


def test_metrics_with_a_declared_model_use_the_engines_formulas() -> None:
    cell = _cell(model="tiny-llama", seq_len=128, global_batch=8)
    steps = [LoggedStep(i, 10.0 + i, 11.0 + i, tokens=1024) for i in range(3)]
    m = command_metrics(cell, [steps, steps], None)
    assert m["measured_steps"] == 2 and m["iteration_time_s"] == pytest.approx(1.0)
    assert m["tokens_per_s_per_gpu"] == pytest.approx(512.0) and m["model_flops_per_iteration"] > 0
    with pytest.raises(RuntimeError, match="logged \\[999\\] tokens per step"):
        command_metrics(cell, [[LoggedStep(i, i, i + 1.0, tokens=999) for i in range(3)]], None)
    with pytest.raises(RuntimeError, match="logged 1 steps: with 1 warm-up steps none is measured"):
        command_metrics(cell, [steps[:1]], None)
    assert [r["phase"] for r in phases(cell, steps)] == ["warmup", "measured", "measured"]


def test_env_is_torchrun_like(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MASTER_PORT", "29400")
    env = command_env(_cell(), 3, 4, 1, tmp_path / "s.jsonl")
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["GROUP_RANK"]) == (
        "3", "1", "4", "2", "1")
    assert env["MASTER_PORT"] == "29401" and env["CALORIMETER_STEPS"] == "3"
    assert env["CALORIMETER_STEP_LOG"] == str(tmp_path / "s.jsonl")


def test_command_cells_plan_with_their_own_ids(tmp_path: Path) -> None:
    from calorimeter.plan.plan import plan_file

    f = tmp_path / "s.yaml"
    f.write_text("sweep: s\nhardware: h200\ndefaults: {model: llama3-8b-8l, gpus_per_node: 1}\ngrid:\n"
                 "  - {kind: command, label: fsdp2, command: 'python x.py', global_batch: 2}\n"
                 "  - {kind: command, command: 'python y.py'}\n  - {model: tiny-llama}\n")
    plan = plan_file(f)
    ids = {pc.cell.cell_id: pc for pc in plan.cells}
    assert "cmd-fsdp2_llama3-8b-8l_mb1-gb2-s8192_h200-1x1" in ids
    unlabelled = next(pc for pc in plan.cells if pc.cell.command == "python y.py")
    assert unlabelled.status == "pruned" and "needs `label`" in " ".join(unlabelled.reasons)
    train = next(pc for pc in plan.cells if pc.cell.kind == "train")
    assert "command" not in train.cell.to_dict() and "label" not in train.cell.to_dict()


@pytest.mark.integration
def test_a_torchrun_style_script_on_two_cpu_ranks(tmp_path: Path) -> None:
    """The whole path: plan -> submitit (2 local ranks) -> the script under the node sampler -> record, steps,
    telemetry, progress, and the cell's tables (power/energy windows over the measured steps)."""
    from calorimeter.analysis.cell import cell_tables
    from calorimeter.launch.run import run_cell
    from calorimeter.launch.settings import launcher_settings
    from calorimeter.plan.plan import plan_file
    from calorimeter.records.paths import AttemptPaths, CellPaths

    script = ROOT / "tests" / "fixtures" / "command" / "ddp_steps.py"
    f = tmp_path / "s.yaml"
    f.write_text(f"sweep: cmd\nresults_dir: {tmp_path / 'r'}\nhardware: cpu\ntelemetry: {{period_ms: 50}}\n"
                 "grid:\n  - {kind: command, label: ddp, gpus_per_node: 2, global_batch: 8, seq_len: 32, "
                 f"warmup_steps: 2, measured_steps: 4, command: '$CALORIMETER_PYTHON {script}'}}\n")
    plan = plan_file(f)
    pc = plan.cells[0]
    paths = CellPaths.of(plan.results_dir, "cmd", pc.cell.cell_id)
    rec = run_cell(pc.cell, launcher_settings(plan.config), paths, pc.estimates)
    assert rec["status"] == "ok", (rec.get("reason"), rec.get("evidence"))
    m = rec["metrics"]
    assert m["kind"] == "command" and m["measured_steps"] == 4 and m["steps_logged"] == 6
    assert m["tokens_per_s"] == pytest.approx(8 * 32 / m["iteration_time_s"])
    steps = pd.read_parquet(paths.steps)
    assert sorted(steps["rank"].unique()) == [0, 1]
    assert list(steps[steps["rank"] == 0]["phase"]) == ["warmup"] * 2 + ["measured"] * 4
    assert (steps["time_s"] > 0).all() and steps["loss"].notna().all()
    assert "host_telemetry.parquet" in rec["telemetry_files"]
    run = AttemptPaths((paths.root / "latest").resolve()).run(0)
    assert len(run.progress.read_text().splitlines()) == 1 + 6  # a header, then one line per step
    assert len(read_step_log(run.root / "command" / "steps-rank1.jsonl")) == 6
    tables = cell_tables(paths.root)
    assert len(tables.runs) == 1 and tables.runs.iloc[0]["kind"] == "command"
    # recorded as what it is: its own command launched by calorimeter, not the engine's defaults
    cell = rec["cell"]
    assert cell["engine"] == "command" and cell["zero_stage"] is None and cell["tp"] is None
    assert cell["grad_accum"] is None and cell["parallel_label"] is None and pd.isna(tables.runs.iloc[0]["zero_stage"])
    cmd = rec["command"]
    assert cmd["command"] == pc.cell.command and "torchrun's environment" in cmd["launcher"]
    digest = hashlib.sha256(script.read_bytes()).hexdigest()
    assert [(f["path"], f["sha256"], f["from"]) for f in cmd["files"]] == [
        ("tests/fixtures/command/ddp_steps.py", digest, "command line")], cmd["files"]
    assert cmd["packages"]["torch"] == version("torch"), cmd["packages"]  # the script imported torch
    assert cmd["python_processes"] == 1 and "calorimeter" not in cmd["packages"]


@pytest.mark.integration
def test_a_hung_command_ends_failed_at_its_time_limit_once_with_its_output(tmp_path: Path) -> None:
    """A command that never reaches its first step, on 2 CPU ranks with a 1-minute limit: the cell ends failed
    (class timeout) at its limit, once (one attempt, never requeued), every rank's output in the record and in
    `calorimeter status`."""
    import time

    from conftest import run_cli

    from calorimeter.launch.run import run_cell
    from calorimeter.launch.settings import launcher_settings
    from calorimeter.plan.plan import plan_file
    from calorimeter.records.paths import CellPaths

    f = tmp_path / "s.yaml"
    f.write_text(f"sweep: hung\nresults_dir: {tmp_path / 'r'}\nhardware: cpu\ntelemetry: {{enabled: false}}\n"
                 "launcher: {timeout_min: 1}\ngrid:\n  - {kind: command, label: hung, gpus_per_node: 2, "
                 "command: 'echo rank $RANK waits for a peer that never comes; sleep 600'}\n")
    plan = plan_file(f)
    pc = plan.cells[0]
    paths = CellPaths.of(plan.results_dir, "hung", pc.cell.cell_id)
    t0 = time.time()
    rec = run_cell(pc.cell, launcher_settings(plan.config), paths, pc.estimates)
    took = time.time() - t0
    assert (rec["status"], rec["failure_class"]) == ("failed", "timeout"), rec["reason"]
    assert rec["reason"].startswith("rank 0: time limit of 1 min reached after "), rec["reason"]
    assert 30 < took < 90, took  # at the limit (warned 15 s before it), not after requeues
    assert len(list(paths.attempts.iterdir())) == 1 and paths.run_json.is_file()
    events = [json.loads(line) for line in (paths.root / "latest" / "requeues.jsonl").read_text().splitlines()]
    assert [(e["why"], e["requeued"]) for e in events] == [("time limit", False)]
    outputs = {o["rank"]: o for o in rec["evidence"]["rank_output"]}
    assert [o["rank"] for o in rec["evidence"]["rank_output"]] == [0, 1]
    assert outputs[0]["status"] == "timeout" and outputs[1]["status"] == "no result"
    for r in (0, 1):
        assert f"rank {r} waits for a peer that never comes" in outputs[r]["stdout"], outputs[r]
    table = run_cli("status", str(f)).stdout
    assert "failed" in table and "timeout" in table and "rank 1 waits for a peer that never comes" in table, table


def test_steady_warmup_is_decided_from_the_temperature_after_the_command() -> None:
    """The engine's rule on the sampler's readings: the first step after which the slope over the window is within
    the threshold (at least warmup_steps), capped; never steady: every step is warm-up (no measured step)."""
    from calorimeter.command.run import steady_warmup

    cell = _cell(warmup="steady", warmup_steps=2, steady_window_s=10.0, steady_slope_c_per_min=1.0,
                 warmup_max_steps=100, warmup_max_s=1000.0)
    steps = [LoggedStep(i, 5.0 * i, 5.0 * (i + 1)) for i in range(12)]  # 5 s steps from t = 0
    # heats at 12 °C/min for 30 s, then flat
    readings = [(t / 10, 40.0 + min(t / 10, 30.0) * 0.2) for t in range(0, 600)]
    n, reason, slope = steady_warmup(cell, steps, readings)
    assert (n, reason) == (8, "steady") and abs(slope) <= 1.0  # steps 1-6 heat; 7 spans the knee; 8 is flat
    assert steady_warmup(_cell(warmup="steady", warmup_steps=2, warmup_max_steps=3, steady_window_s=10.0), steps,
                         [(t / 10, 40.0 + t / 10) for t in range(600)])[:2] == (
        3, "cap (3 steps or 180 s) before steady")
    n, reason, _ = steady_warmup(cell, steps, [(t / 10, 40.0 + t / 10) for t in range(600)])
    assert (n, reason) == (12, "never steady within the command's steps")


@pytest.mark.parametrize(("drift_c_per_min", "amplitude_c", "steady"), [(0.0, 1.0, True), (4.0, 0.0, False),
                                                                       (0.5, 1.0, True)])
def test_command_cells_apply_the_drift_rule(drift_c_per_min: float, amplitude_c: float, steady: bool) -> None:
    """A +-1 °C plateau and a 0.5 °C/min drift are steady at the first step with 30 s of readings behind it; a
    4 °C/min ramp (1.3 °C over the planned 20 s) never is."""
    from calorimeter.command.run import steady_warmup

    cell = _cell(warmup="steady", warmup_steps=2, warmup_max_steps=100, warmup_max_s=1000.0, measured_min_s=20.0)
    steps = [LoggedStep(i, 2.0 * i, 2.0 * (i + 1)) for i in range(40)]  # 2 s steps from t = 0
    t = np.arange(-60.0, 80.0, 0.05)
    temps = np.round(60 + amplitude_c * np.sin(2 * np.pi * t / 8.0) + drift_c_per_min * t / 60)
    n, reason, _ = steady_warmup(cell, steps, list(zip(t, temps, strict=True)))
    assert (n, reason) == ((2, "steady") if steady else (40, "never steady within the command's steps"))


def test_provenance_leaves_compiler_caches_out_and_names_home_files_from_home(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A command's Python process reports a module built into Triton's cache, one in an Inductor temporary folder and
    one of the trainer's own under the home folder: the record lists the trainer's file as ``~/...`` (no machine's
    home path in it) and counts the two compiled ones instead of listing them."""
    import json

    from calorimeter.command.provenance import command_provenance

    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    own = home / "trainer" / "model.py"
    triton = home / ".triton" / "cache" / "XYZ" / "cuda_utils.so"
    inductor = tmp_path / "tmp" / "torchinductor_root" / "ab" / "kernel.py"
    for f in (own, triton, inductor):
        f.parent.mkdir(parents=True)
        f.write_text("x = 1\n")
    imports = tmp_path / "imports"
    imports.mkdir()
    (imports / "imports-1.json").write_text(json.dumps({
        "main": str(own), "files": [str(triton), str(inductor)], "distributions": {"torch": "2.11.0"},
        "executable": "python3", "python": "3.12"}))
    cwd = tmp_path / "work"
    cwd.mkdir()
    out = command_provenance("python3 -c pass", {}, cwd, imports)
    assert [(f["path"], f["from"]) for f in out["files"]] == [("~/trainer/model.py", "main file")]
    assert out["compiler_cache_modules"] == 2 and out["packages"] == {"torch": "2.11.0"}

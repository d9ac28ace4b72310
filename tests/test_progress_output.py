"""What the terminal shows while a sweep runs: the first cell's start-up, the sweep's ETA as cells finish, and the
small status defects (``-0 s``, ``| head``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from calorimeter.operate.eta import format_duration
from calorimeter.records.paths import AttemptPaths
from calorimeter.records.progress import ProgressLog

ROOT = Path(__file__).resolve().parents[1]


def test_a_starting_cell_says_what_it_is_doing(tmp_path: Path) -> None:
    attempt = AttemptPaths(tmp_path / "attempt")
    attempt.staging.mkdir(parents=True)
    log = ProgressLog(attempt, "c", every_s=10.0)
    assert "waiting for the ranks" in log.tick()
    assert log.tick() is None  # the same stage again within 10 s
    log._last -= 10.0  # noqa: SLF001 - 10 s later
    assert "starting (" in log.tick()  # ... it says so again
    run = attempt.run(0)
    (run.root / "telemetry").mkdir(parents=True)
    assert "ranks joined" in log.tick()
    run.progress.write_text(json.dumps({"cell_id": "c", "tokens_per_step": 64}) + "\n")
    assert "building the model" in log.tick()
    with run.progress.open("a") as f:
        f.write(json.dumps({"step": 0, "phase": "warmup", "step_s": 1.5, "t_end_s": 1.0, "expected": 3,
                            "exact": True}) + "\n")
    line = log.tick()
    assert line.startswith("cell c: step 1/3") and "starting" not in line


def test_durations_are_never_negative() -> None:
    assert format_duration(-0.4) == "0 s" and format_duration(-1e-9) == "0 s" and format_duration(None) == "-"


def test_progress_line_of_a_sweep(tmp_path: Path) -> None:
    from calorimeter.operate.view import progress_line
    from calorimeter.plan.config import load_config

    f = tmp_path / "s.yaml"
    f.write_text(f"sweep: s\nresults_dir: {tmp_path / 'r'}\nhardware: cpu\ngrid:\n  - {{model: tiny-llama, "
                 "gpus_per_node: [1, 2]}\n")
    line = progress_line(load_config(f))
    assert line.startswith("sweep s: 0 of 2 cells finished, 0 running or queued; ETA: unknown"), line


def test_status_into_a_closed_pipe_has_no_traceback() -> None:
    """``calorimeter plan <sweep> --format json | head -c 10``: the reader leaves after 10 bytes of 87 kB."""
    p = subprocess.Popen([sys.executable, "-m", "calorimeter", "plan", "config/sweeps/h200-optimization.yaml",
                          "--format", "json"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.read(10)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141 and "Traceback" not in err and "BrokenPipe" not in err, err

"""The Snakemake workflow: lint, dry runs of every sweep, bad config, and the default sweep end to end."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, SWEEPS, run_cli

from calorimeter.plan import plan_file

SNAKEMAKE = [sys.executable, "-m", "snakemake"]
pytestmark = pytest.mark.integration  # Snakemake subprocesses


def snakemake(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run snakemake in the repository root (the workflow profile applies)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([*SNAKEMAKE, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_lint_is_clean() -> None:
    r = snakemake("--lint", "--nolock")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Congratulations, your workflow is in a good condition!" in r.stdout + r.stderr


@pytest.mark.parametrize("sweep", sorted(p.stem for p in SWEEPS.glob("*.yaml")))
def test_dry_run_of_each_study_sweep(sweep: str, tmp_path: Path) -> None:
    r = snakemake("-n", "--nolock", "--configfile", str(SWEEPS / f"{sweep}.yaml"),
                  "--config", f"results_dir={tmp_path}")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout + r.stderr
    planned = len(plan_file(SWEEPS / f"{sweep}.yaml").runnable)
    m = re.search(r"^train\s+(\d+)$", out, re.M)
    assert (int(m.group(1)) if m else 0) == planned
    assert "pruned" in out  # the onstart summary reports planned and pruned counts
    # the cost before running: the sweep's GPU-hours from the committed calibration, each train job's wall time
    assert re.search(r"calorimeter: projected cost of \d+ planned cells?: [\d,.]+ GPU-hours", out), out[:3000]
    if sweep == "h200-optimization":
        assert re.search(r"train \S+ \(projected wall time \d+ min \(", out)
    if sweep == "h100-optimization":  # its MoE cells: no H100 MoE band yet (three configurations measured)
        assert "(no projected wall time: MoE" in out


def test_bad_config_is_reported_before_anything_runs(tmp_path: Path) -> None:
    r = snakemake("-n", "--nolock", "--config", "hardware=tpu", f"results_dir={tmp_path}")
    assert r.returncode != 0
    assert "unknown hardware 'tpu'" in r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("sweep: x\ngrid:\n  - {model: tiny-gpt, micro_batch: 0}\n")
    r = snakemake("-n", "--nolock", "--configfile", str(bad))
    assert r.returncode != 0
    assert "micro_batch" in r.stdout + r.stderr
    assert not list(tmp_path.glob("x/cells/*"))


def test_default_sweep_end_to_end(tmp_path: Path) -> None:
    """config -> plan -> DAG -> submitit -> multi-rank DeepSpeed training -> records -> table -> figure -> report."""
    r = snakemake("--config", f"results_dir={tmp_path}", timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    sweep = tmp_path / "default"
    df = pd.read_parquet(sweep / "summary.parquet")
    plan = plan_file(ROOT / "config" / "config.yaml")
    assert len(df) == len(plan.cells)
    assert set(df["status"]) == {"ok"}, df[["cell_id", "status", "reason"]].to_string()
    assert (df["tokens_per_s_per_gpu"] > 0).all() and (df["iteration_time_s"] > 0).all()
    assert (df["loss_last"] < df["loss_first"]).all(), df[["cell_id", "loss_first", "loss_last"]]
    assert {1, 2} <= set(df["world_size"]) and {1, 2} <= set(df["pp"])
    for cid in df["cell_id"]:
        rec = json.loads((sweep / "cells" / cid / "run.json").read_text())
        assert rec["provenance"]["packages"]["deepspeed"] and rec["provenance"]["launcher"]["job_id"]
        steps = pd.read_parquet(sweep / "cells" / cid / "steps.parquet")
        assert set(steps["phase"]) == {"warmup", "measured", "profiled"}
        # The node sampler ran around the cell (host metrics on CPU; GPUs recorded as unavailable, with why).
        assert rec["telemetry_files"] == ["host_telemetry.parquet", "telemetry.json", "kernels.parquet"]
        meta = json.loads((sweep / "cells" / cid / "telemetry.json").read_text())["node0"]["sampler"]
        assert meta["status"] == "stopped" and meta["unavailable"]
    assert (sweep / "summary.csv").is_file()
    assert (sweep / "figures" / "throughput.png").stat().st_size > 10_000
    # the study's sweeps at their scale, projected from the committed calibration (study_projection)
    study = tmp_path / "study-projected"
    assert "GPU-hours" in (study / "README.md").read_text()
    assert (study / "figures" / "projected_fig08_optimization-h200-optimization.png").stat().st_size > 10_000
    _status_of_the_finished_sweep(tmp_path, plan)
    report = sweep / "report.html"
    r = snakemake("--config", f"results_dir={tmp_path}", "--report", str(report))
    assert r.returncode == 0, r.stderr[-3000:]
    assert report.stat().st_size > 50_000
    # A second run finds nothing to do: finished cells are not touched.
    before = {p: p.stat().st_mtime_ns for p in sweep.glob("cells/*/run.json")}
    r = snakemake("--config", f"results_dir={tmp_path}")
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr
    assert before == {p: p.stat().st_mtime_ns for p in sweep.glob("cells/*/run.json")}


def _status_of_the_finished_sweep(results: Path, plan) -> None:
    """``calorimeter status`` of the default sweep once it ran (from the sweep file and from its results folder):
    every cell ok with its job and one attempt, nothing left; rank 0's progress file counted every step."""
    from calorimeter.records.paths import AttemptPaths
    from calorimeter.records.progress import attempt_progress

    r = run_cli("status", "config/config.yaml", "--results-dir", str(results), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["counts"] == {"ok": len(plan.cells)} and doc["eta"]["cells_left"] == 0, doc["counts"]
    for c in doc["cells"]:
        assert c["job_id"] and c["attempts"] == 1 and c["elapsed_s"] > 0 and c["failure_class"] == "ok", c
        cell = plan.get(c["cell_id"]).cell
        restart, progress = attempt_progress(AttemptPaths((results / "default" / "cells" / c["cell_id"] /
                                                           "latest").resolve()))
        steps = cell.warmup_steps + cell.measured_steps + 1  # and the profiled step
        assert (restart, progress.steps, progress.expected, progress.exact) == (0, steps, steps, True)
        assert progress.tokens_per_s > 0
    r = run_cli("status", str(results / "default"))
    assert r.returncode == 0, r.stderr
    assert f"{len(plan.cells)} cells: {len(plan.cells)} ok" in r.stdout and "ETA: nothing left" in r.stdout

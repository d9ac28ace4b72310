"""The artifact-evaluation target: `snakemake figures` rebuilds tables and figures from existing records only."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "analysis"))
import builders  # noqa: E402

from calorimeter.figures import FIGURES  # noqa: E402
from calorimeter.plan.plan import plan_file  # noqa: E402

pytestmark = pytest.mark.integration  # Snakemake subprocesses


def _snakemake(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def test_figures_target_never_trains_and_renders_every_figure(tmp_path: Path) -> None:
    plan = plan_file(ROOT / "config" / "config.yaml")
    cells = [pc.cell.to_dict() for pc in plan.runnable]
    cdir = tmp_path / plan.sweep / "cells"
    builders.write_cell(cdir, cells[0], "ok")                    # measured, with telemetry and kernels
    builders.write_cell(cdir, cells[1], "oom")                   # out of memory
    builders.write_cell(cdir, cells[2], "ok", telemetry=False)   # a CPU-like record
    # cells[3:] have no record: `snakemake figures` must not train them
    dry = _snakemake("figures", "-n", "--nolock", "--config", f"results_dir={tmp_path}")
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    assert "train" not in {line.split()[0] for line in dry.stdout.splitlines() if line.strip()}
    r = _snakemake("figures", "--config", f"results_dir={tmp_path}")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    runs = pd.read_parquet(tmp_path / plan.sweep / "tables" / "runs.parquet")
    assert len(runs) == len(plan.cells)
    assert list(runs["status"][:3]) == ["ok", "oom", "ok"] and set(runs["status"][3:]) == {"not_run"}
    assert runs.loc[0, "energy_per_iteration_j"] > 0
    for name in FIGURES:
        assert (tmp_path / plan.sweep / "figures" / f"{name}.png").stat().st_size > 5000, name
    assert not list(cdir.glob("*/attempts"))
    # a plain `snakemake` afterwards has no table to redo: only the cells without a record are trained (and then
    # tabled), never the tables of the cells `snakemake figures` read (its input set was another file)
    dry = _snakemake("-n", "--nolock", "--config", f"results_dir={tmp_path}")
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    redone = set(re.findall(r"rule cell_tables:.*?wildcards: sweep=[^,\s]+, cell=(\S+)", dry.stdout, re.S))
    assert redone == {c["cell_id"] for c in cells[3:]}, dry.stdout[-3000:]
    findings = pd.read_csv(tmp_path / plan.sweep / "findings.csv")
    assert len(findings) > 10 and set(findings["verdict"]) <= {"agrees", "partly", "disagrees", "cannot say"}
    report = tmp_path / "report.html"
    r = _snakemake("figures", "--config", f"results_dir={tmp_path}", "--report", str(report))
    assert r.returncode == 0, r.stderr[-3000:]
    assert report.stat().st_size > 50_000
    html = report.read_text(errors="replace")
    assert "findings.html" in html  # the report's Findings section
    # it opens on results: provenance, thumbnails in the study's order, the figures the data cannot draw listed
    assert "Results of sweep" in html and "data:image/png;base64," in html and "Not drawn from this sweep" in html
    assert '"figure": "01. Throughput per configuration"' in html


def test_a_rebuild_results_folder_gives_no_path_warnings(tmp_path: Path) -> None:
    """`calorimeter rebuild` runs in its scratch folder with results_dir=.: every projection output was named
    './{sweep}/...', 23 Snakemake warnings per sweep."""
    r = _snakemake("figures", "-n", "--nolock", "--directory", str(tmp_path), "--snakefile", str(ROOT / "Snakefile"),
                   "--configfile", str(ROOT / "config" / "reference" / "h200x2-findings-steady.yaml"),
                   "--config", "results_dir=.")  # as calorimeter rebuild runs it
    assert r.returncode == 0, r.stderr[-3000:]
    assert "starts with './'" not in r.stdout + r.stderr

"""Provenance of a record from a modified tree: the patch is kept next to run.json; records name no absolute path."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from calorimeter.records.paths import CellPaths, results_relative
from calorimeter.records.provenance import PATCH_NAME, git_state
from calorimeter.records.rank import RankReport
from calorimeter.records.record import write_cell_record


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    r = tmp_path / "src"
    r.mkdir()
    _git(r, "init", "-q")
    (r / "engine.py").write_text("STEPS = 3\n")
    _git(r, "add", "engine.py")
    _git(r, "commit", "-qm", "first")
    monkeypatch.chdir(r)
    return r


def _write(tmp_path: Path) -> tuple[CellPaths, dict]:
    cell = CellPaths(tmp_path / "results" / "sweep" / "cells" / "c1")
    attempt = cell.attempt("20260101T000000Z")
    record = {"cell_id": "c1", "status": "ok", "provenance": {"git": git_state()}}
    write_cell_record(cell, attempt, record, pd.DataFrame({"rank": [0]}))
    return cell, json.loads(cell.run_json.read_text())


def test_modified_tree_keeps_its_patch_which_gives_back_the_code(repo: Path, tmp_path: Path) -> None:
    data = repo / "results" / "reference" / "telemetry.parquet"
    data.parent.mkdir(parents=True)
    data.write_bytes(b"PAR1 committed")
    _git(repo, "add", "results")
    _git(repo, "commit", "-qm", "data")
    (repo / "engine.py").write_text("STEPS = 5  # measured with this\n")
    data.write_bytes(b"PAR1 re-encoded" * 1000)  # measurements changed too: not code, left out of the patch
    cell, rec = _write(tmp_path)
    git = rec["provenance"]["git"]
    assert git["dirty"] is True and git["patch"] == PATCH_NAME
    patch = (cell.root / PATCH_NAME).read_bytes()
    assert patch == (cell.attempt("20260101T000000Z").root / PATCH_NAME).read_bytes()
    assert git["patch_sha256"] == hashlib.sha256(patch).hexdigest() and git["patch_bytes"] == len(patch)
    assert b"engine.py" in patch and b"telemetry.parquet" not in patch and git["patch_excludes"] == ["results/"]
    # commit + patch = the measured code
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    _git(clone, "checkout", "-q", git["commit"])
    subprocess.run(["git", "apply", str(cell.root / PATCH_NAME)], cwd=clone, check=True)
    assert (clone / "engine.py").read_text() == "STEPS = 5  # measured with this\n"


def test_a_new_untracked_file_is_in_the_patch_and_measurements_are_not(repo: Path, tmp_path: Path) -> None:
    """A run from a tree with a new, not yet committed config or module keeps it: the patch adds the file, so that
    commit + patch give it back; an untracked file under results/ (a measurement) neither dirties the tree nor
    enters the patch."""
    (repo / "results" / "reference" / "new-set").mkdir(parents=True)
    (repo / "results" / "reference" / "new-set" / "run.json").write_text("{}")
    assert git_state()["dirty"] is False
    (repo / "config").mkdir()
    (repo / "config" / "sweep.yaml").write_text("sweep: new\n")
    cell, rec = _write(tmp_path)
    git = rec["provenance"]["git"]
    assert git["dirty"] is True and git["patch"] == PATCH_NAME
    patch = (cell.root / PATCH_NAME).read_bytes()
    assert b"config/sweep.yaml" in patch and b"run.json" not in patch
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    _git(clone, "checkout", "-q", git["commit"])
    subprocess.run(["git", "apply", str(cell.root / PATCH_NAME)], cwd=clone, check=True)
    assert (clone / "config" / "sweep.yaml").read_text() == "sweep: new\n"


def test_clean_tree_has_no_patch(repo: Path, tmp_path: Path) -> None:
    cell, rec = _write(tmp_path)
    assert rec["provenance"]["git"]["dirty"] is False and "patch" not in rec["provenance"]["git"]
    assert not (cell.root / PATCH_NAME).exists()


def test_record_paths_are_relative_to_the_results_folder(tmp_path: Path) -> None:
    cell = CellPaths(tmp_path / "results" / "sweep" / "cells" / "c1")
    rel = results_relative(cell.attempt("a").submitit, cell.root)
    assert rel == "sweep/cells/c1/attempts/a/submitit" and not Path(rel).is_absolute()


def test_kernel_table_names_its_traces_relative_to_the_results_folder(tmp_path: Path) -> None:
    import shutil

    from calorimeter.records.paths import RunPaths
    from calorimeter.telemetry.collect import collect_telemetry

    fixture = Path(__file__).parent / "fixtures" / "telemetry" / "h200x2-matmul-50ms"
    cell = CellPaths(tmp_path / "results" / "sweep" / "cells" / "c1")
    run = RunPaths(cell.attempt("a").root / "staging" / "restart0")
    run.node(0).mkdir(parents=True)
    for name in ("gpu-check.arrows", "sampler-check.json"):
        shutil.copy(fixture / name, run.node(0) / name)
    shutil.copytree(fixture / "traces", run.traces)
    collect_telemetry(run, cell, [RankReport(rank=0, local_rank=0, node=0, hostname="h", stage=0)])
    files = set(pd.read_parquet(cell.kernels)["file"])
    assert files and all(f.startswith("sweep/cells/c1/attempts/a/staging/") for f in files), files

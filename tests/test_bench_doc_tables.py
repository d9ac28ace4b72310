"""docs/findings.md's tables written by bench scripts (``--doc``) are what those scripts write from the committed
records today: a new set, or a change to the rule they replay, fails here until the table is regenerated."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, subprocess_env

DOC = ROOT / "docs" / "findings.md"


@pytest.mark.parametrize("script", ["bench/steady_criterion.py", "bench/thermal_settle.py"])
def test_the_generated_table_is_current(tmp_path: Path, script: str) -> None:
    copy = tmp_path / "findings.md"
    shutil.copy(DOC, copy)
    done = subprocess.run([sys.executable, script, "results/reference", "--doc", str(copy)], cwd=ROOT,
                          env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"<!-- BEGIN {script}" in DOC.read_text()
    assert copy.read_text() == DOC.read_text(), (
        f"docs/findings.md's {script} table is out of date: PYTHONPATH=src python {script} --doc docs/findings.md")

"""docs/artifact.md runs: its numbers are the committed tables' (docs/expected.yaml), the command blocks marked
``<!-- runs in CI -->`` run on the committed sets with the exit status the marker names and print every line of the
``text`` block that follows them, and every committed set's README rebuilds outside the tracked files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, subprocess_env

from calorimeter.reproduce.expected import MARKER, apply, drift, render

DOC = ROOT / "docs" / "artifact.md"
#: a command block the tests run: its marker (with the exit status, default 0), the bash block, the expected output
BLOCK = re.compile(r"<!-- runs in CI(?:, exit (\d+))? -->\n```bash\n(.*?)```\n(?:```text\n(.*?)```\n)?", re.DOTALL)


def _blocks() -> list:
    """One pytest.param per runnable block: (where, exit status, script, expected lines), named by its line."""
    text = DOC.read_text()
    out = []
    for m in BLOCK.finditer(text):
        where = f"artifact.md:{text.count(chr(10), 0, m.start()) + 1}"
        lines = [" ".join(x.split()) for x in (m.group(3) or "").splitlines() if x.strip()]
        out.append(pytest.param(where, int(m.group(1) or 0), m.group(2), lines, id=where))
    return out


def test_the_documents_numbers_are_the_tables() -> None:
    """Every marked value in docs/artifact.md is what docs/expected.yaml computes from the committed tables (a table
    rebuilt with other numbers, or a hand edit of the doc, fails here: `python -m calorimeter.reproduce.expected
    docs/artifact.md --write` puts the computed ones in)."""
    texts = render(ROOT, yaml.safe_load((ROOT / "docs" / "expected.yaml").read_text()))
    doc = DOC.read_text()
    assert drift(doc, texts) == []
    # Fig. 13's PP2 as the figure shows it (over the best configuration it draws; the review read 0.61/0.66/0.64/0.57
    # off the runs table's efficiency_norm, then over one repetition of the sweep's best configuration)
    assert "0.62/0.67/0.65/0.58" in texts["f2_pp2_efficiency_norm"]
    stale = MARKER.sub(lambda m: m.group(0).replace(texts[m.group(1)], "0.79/0.85/0.83/0.74")
                       if m.group(1) == "f2_pp2_efficiency_norm" else m.group(0), doc)
    assert [d.split(":")[0] for d in drift(stale, texts)] == ["f2_pp2_efficiency_norm"]
    assert apply(stale, texts) == doc


def test_knobs_doc_ratios_are_the_tables_same_run_ratios() -> None:
    """docs/knobs.md's TP4 table is computed (docs/expected-knobs.yaml, ``ratio_to``: a cell over its run's ZeRO-1
    cell); a ratio over another reference cell gives another number, and a reference that selects nothing is an
    error naming the sweep."""
    spec = yaml.safe_load((ROOT / "docs" / "expected-knobs.yaml").read_text())
    texts = render(ROOT, spec)
    assert drift((ROOT / "docs" / "knobs.md").read_text(), texts) == []
    assert texts["tp4_f_mb4_symm"] == texts["tp4_g_mb4_symm"] == "0.880" and texts["tp4_e_none"] == "0.711"
    one = dict(spec["values"]["tp4_f_mb4_symm"])
    one["ratio_to"] = {"where": {"cell_id": one["ratio_to"]["where"]["cell_id"].replace("_mb2-", "_mb1-")}}
    assert render(ROOT, {"values": {"x": one}})["x"] == "0.891"  # over ZeRO-1 at micro-batch 1 (20,628)
    one["ratio_to"] = {"where": {"cell_id": "no-such-cell"}}
    with pytest.raises(ValueError, match="h200x4-layouts-f: no row where"):
        render(ROOT, {"values": {"x": one}})


def test_the_runnable_blocks_are_marked() -> None:
    blocks = [b.values for b in _blocks()]
    assert len(blocks) >= 4 and {b[1] for b in blocks} >= {0, 1, 3}
    assert any("h100x1-findings-repro-2026-11-25" in b[2] and "throughput: reproduced" in " ".join(b[3])
               for b in blocks)  # the recipe ends on a figure reproduced within tolerance


@pytest.mark.integration
@pytest.mark.parametrize(("where", "status", "script", "lines"), _blocks())
def test_a_documented_command_runs_as_documented(tmp_path: Path, where: str, status: int, script: str,
                                                 lines: list[str]) -> None:
    """Run in a scratch folder that sees the checkout's committed sets (what it writes stays there), with
    ``calorimeter`` and ``python`` of this environment."""
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "reference").symlink_to(ROOT / "results" / "reference")
    env = subprocess_env()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(["bash", "-c", "set -eo pipefail\n" + script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    out = [" ".join(x.split()) for x in done.stdout.splitlines()]
    assert done.returncode == status, f"{where}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    for want in lines:
        assert any(want in got for got in out), f"{where}: no line with {want!r} in:\n{done.stdout[-3000:]}"


def test_every_set_readme_rebuilds_outside_the_tracked_files() -> None:
    """A set README's rebuild command writes into a scratch folder (`calorimeter rebuild`, results/rebuild/...),
    never into results/reference/ (whose figures and tables are tracked or ignored there)."""
    bad = []
    for readme in sorted((ROOT / "results" / "reference").glob("**/README.md")):
        for n, line in enumerate(readme.read_text().splitlines(), 1):
            if re.search(r"results_dir=\.?/?results/reference|--directory\s+\.?/?results/reference", line):
                bad.append(f"{readme.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    assert not bad, "\n".join(bad)
    out = subprocess.run(["git", "ls-files", "results/reference"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode != 0 or sum(p.endswith("README.md") for p in out.stdout.split()) >= 40

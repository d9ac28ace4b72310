"""Artifact evaluation: the shipped real GPU records rebuild their tables and figures without any training.

Snakemake's ``figures`` target runs on the 2-GPU and 8-GPU sets and draws their figures (that every committed set's
tables come back bit for bit from its records, in memory: tests/test_rebuild_every_set.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT

REFERENCE = ROOT / "results" / "reference" / "h200x2-2026-11-21"


def rebuild(reference: Path, config: str, tmp_path: Path) -> Path:
    """Copy shipped raw records (without their tables) and run the `figures` target on them."""
    data = tmp_path / "ref"
    shutil.copytree(reference, data, ignore=shutil.ignore_patterns("tables"))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-m", "snakemake", "figures", "--configfile",
                        str(ROOT / "config" / "reference" / config), "--config", f"results_dir={data}"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "localrule train:" not in r.stdout + r.stderr
    return data


@pytest.mark.integration
def test_figures_rebuild_from_shipped_h200_records(tmp_path: Path) -> None:
    data = rebuild(REFERENCE, "h200x2-llama8b.yaml", tmp_path)
    sweep = data / "gpu-llama8b"
    assert not list(sweep.glob("cells/*/attempts"))  # nothing was launched
    runs = pd.read_parquet(sweep / "tables" / "runs.parquet").set_index("cell_id")
    shipped = pd.read_parquet(REFERENCE / "gpu-llama8b" / "tables" / "runs.parquet").set_index("cell_id")
    for col in ("mfu_full", "tokens_per_s_per_gpu", "energy_per_token_j", "power_avg_w", "exposed_comm_frac"):
        pd.testing.assert_series_equal(runs[col], shipped[col], check_names=False)
    z3 = runs.loc["llama3-8b_h200-1x2_tp1-pp1-dp2_z3_rc-none_ov-on_mb1-gb8-s8192"]
    assert z3["mfu_full"] == pytest.approx(0.539, abs=0.001)
    assert runs.loc["llama3-8b_h200-1x2_tp1-pp1-dp2_z1_rc-none_ov-on_mb1-gb8-s8192", "status"] == "oom"
    for fig in ("timeline", "fig17_temperature", "throttle", "throughput"):
        assert (sweep / "figures" / f"{fig}.png").stat().st_size > 10_000


@pytest.mark.integration
def test_figures_rebuild_from_shipped_8_gpu_records(tmp_path: Path) -> None:
    ref = ROOT / "results" / "reference" / "h200x8-2026-11-21"
    data = rebuild(ref, "h200x8-parallelism.yaml", tmp_path)
    runs = pd.read_parquet(data / "h200x8-parallelism" / "tables" / "runs.parquet")
    shipped = pd.read_parquet(ref / "h200x8-parallelism" / "tables" / "runs.parquet")
    assert set(runs["status"]) == {"ok"} and len(runs) == 7
    pd.testing.assert_series_equal(runs.set_index("cell_id")["mfu_full"], shipped.set_index("cell_id")["mfu_full"])
    assert runs["mfu_full"].max() == pytest.approx(0.524, abs=0.001)
    assert (data / "h200x8-parallelism" / "figures" / "fig15_stages.png").stat().st_size > 10_000


def test_shipped_4_gpu_records_hold_the_layouts_of_the_study() -> None:
    """Dense layouts with and without recomputation, TP x ZeRO-3 and Mixtral over EP/TP/PP splits (4x H200), from
    the committed runs table: tests/test_rebuild_every_set.py rebuilds it from the records bit for bit, the figures
    target on multi-GPU records runs on the 8-GPU set above, and every figure is drawn from this set's tables in
    tests/test_figure_rules.py."""
    runs = pd.read_parquet(ROOT / "results" / "reference" / "h200x4-2026-11-21" / "h200x4-parallelism" / "tables"
                           / "runs.parquet").set_index("cell_id")
    assert set(runs["status"]) == {"ok"} and len(runs) == 14
    z3 = "llama3-8b_h200-1x4_tp1-pp1-dp4_z3_rc-{}_ov-on_mb1-gb8-s8192"
    assert runs["mfu_full"].max() == pytest.approx(0.532, abs=0.001) == runs.loc[z3.format("none"), "mfu_full"]
    full = runs.loc[z3.format("full")]
    assert full["hfu"] > full["mfu_full"] and full["peak_memory_gb"] < runs.loc[z3.format("none"), "peak_memory_gb"]
    moe = runs[runs["model"] == "mixtral-8x7b-4l"]
    assert sorted(zip(moe["tp"], moe["pp"], moe["ep"], strict=True)) == [(1, 1, 4), (1, 2, 2), (2, 1, 2), (4, 1, 1)]

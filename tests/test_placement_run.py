"""Placement through the real stack on CPU ranks: the policy is decided in the job, applied or visibly fallen back,
recorded in run.json, carried into the runs table and drawn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import ROOT

SWEEP = {
    "sweep": "placement-cpu",
    "hardware": "cpu",
    "telemetry": {"profile_steps": 0},
    "defaults": {"model": "tiny-llama", "gpus_per_node": 2, "warmup_steps": 1, "measured_steps": 1,
                 "global_batch": 2, "micro_batch": 1},
    "grid": [{"parallel": {"pp": 2}, "placement": ["default", "balanced", "thermal"]}],
}


@pytest.mark.integration
def test_placement_policies_on_cpu_ranks(tmp_path: Path) -> None:
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(yaml.safe_dump(SWEEP))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    target = f"{tmp_path}/res/placement-cpu/figures/placement.png"  # the cells, their tables and this figure
    r = subprocess.run([sys.executable, "-m", "snakemake", target, "--configfile", str(cfg), "--config",
                        f"results_dir={tmp_path}/res"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    sweep = tmp_path / "res" / "placement-cpu"
    recs = {json.loads(p.read_text())["cell"]["placement"]: json.loads(p.read_text())
            for p in sweep.glob("cells/*/run.json")}
    assert set(recs) == {"default", "balanced", "thermal"}
    assert all(r["status"] == "ok" for r in recs.values())
    assert recs["default"]["placement"]["applied"] and recs["default"]["placement"]["policy"] == "default"
    bal = recs["balanced"]["placement"]
    assert bal["applied"] and bal["pp_split"] == [2, 2] and bal["stage_costs"]["source"]
    th = recs["thermal"]["placement"]
    # CPU ranks have no NVML: the policy falls back to default, says why, and the cell still measures
    assert not th["applied"] and "no NVML" in th["reason"] and th["pp_split"] is None
    assert [x["rank"] for x in th["ranks"]] == [0, 1] and len({x["digest"] for x in th["ranks"]}) == 1
    runs = pd.read_parquet(sweep / "tables" / "runs.parquet").set_index("placement")
    assert runs.loc["thermal", "placement_applied"] == False  # noqa: E712 - numpy bool
    assert "no NVML" in runs.loc["thermal", "placement_reason"]
    assert runs.loc["balanced", "placement_split"] == "2/2"
    assert (sweep / "figures" / "placement.png").stat().st_size > 10_000
    assert not (tmp_path / "res" / "thermal-profiles").exists()  # CPU cells profile nothing


@pytest.mark.integration
def test_records_target_trains_a_thermal_cell_after_its_calibration(tmp_path: Path) -> None:
    """`snakemake records` (what a GPU node runs, bench/gpu/run_reference.sh) trains every cell, including one that
    waits on another (a thermal cell on the sweep's calibration), and builds no table. Under `--until train`
    Snakemake 9.27 ran the calibration and never the thermal cell (this test then fails: 1 record of 2)."""
    sweep_cfg = {**SWEEP, "sweep": "records-cpu",
                 "grid": [{"kind": "thermal-calibration", "warmup_steps": 1, "measured_steps": 2},
                          {"parallel": {"pp": 2}, "placement": "thermal"}]}
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(yaml.safe_dump(sweep_cfg))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-m", "snakemake", "records", "--configfile", str(cfg), "--config",
                        f"results_dir={tmp_path}/res", "-c2"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    sweep = tmp_path / "res" / "records-cpu"
    recs = {p.parent.name: json.loads(p.read_text()) for p in sweep.glob("cells/*/run.json")}
    assert len(recs) == 2, sorted(recs)
    cal_id = next(k for k in recs if k.startswith("thermal-calibration"))
    th_id = next(k for k in recs if k != cal_id)
    assert recs[cal_id]["status"] == "ok" and recs[th_id]["status"] == "ok"
    assert recs[th_id]["cell"]["placement"] == "thermal"
    # the thermal cell ran after its calibration (ordered by the train rule's input)
    steps = {k: pd.read_parquet(sweep / "cells" / k / "steps.parquet") for k in recs}
    assert steps[th_id]["t_begin_s"].min() > steps[cal_id]["t_end_s"].max()
    assert not (sweep / "tables").exists()  # records only

"""calorimeter status and rerun on a real local sweep (Snakemake, submitit local ranks, DeepSpeed on CPU):

1. a cell fails (injected), another succeeds: status says so with job ids and the failure class;
2. ``calorimeter rerun --failed`` trains that cell only (the finished one keeps every byte), keeps the failed attempt
   (its record set aside and still readable) and rebuilds the tables;
3. a long cell runs: status shows it running with its step and tokens/s from rank 0's progress file, the train
   rule's log shows its steps; Snakemake killed (with its ranks): status still answers, from the files alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import ROOT

from calorimeter.plan.plan import plan_file

pytestmark = pytest.mark.integration

CELLS = {"A": {"model": "tiny-gpt", "zero_stage": 0}, "B": {"model": "tiny-llama", "zero_stage": 0},
         "C": {"model": "tiny-gpt", "zero_stage": 1, "measured_steps": 5000}}


def _env(faults: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CALORIMETER_TEST_FAULTS"}
    env["PYTHONPATH"] = str(ROOT / "src")
    if faults:
        env["CALORIMETER_TEST_FAULTS"] = faults
    return env


def _run(*args: str, faults: str | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=_env(faults), capture_output=True, text=True,
                          timeout=timeout)


def _status(cfg: Path) -> dict:
    r = _run("-m", "calorimeter", "status", str(cfg), "--format", "json", timeout=120)
    assert r.returncode == 0, r.stderr
    return {c["cell_id"]: c for c in json.loads(r.stdout)["cells"]}


def _checksums(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def test_status_and_rerun_of_a_local_sweep(tmp_path: Path) -> None:
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(yaml.safe_dump({
        "sweep": "opslocal", "hardware": "cpu", "results_dir": str(tmp_path / "results"),
        "telemetry": {"profile_steps": 0}, "launcher": {"executor": "local", "timeout_min": 15, "poll_s": 2},
        "defaults": {"gpus_per_node": 1, "global_batch": 2, "micro_batch": 1, "warmup_steps": 1,
                     "measured_steps": 2, "seq_len": 32},
        "grid": list(CELLS.values())}))
    ids = dict(zip(CELLS, (pc.cell.cell_id for pc in plan_file(cfg).cells), strict=True))
    cells = tmp_path / "results" / "opslocal" / "cells"
    record = lambda x: cells / ids[x] / "run.json"  # noqa: E731

    # 1. A succeeds, B fails (injected): only their records are asked for (no tables or figures yet)
    r = _run("-m", "snakemake", str(record("A")), str(record("B")), "--configfile", str(cfg),
             faults=f"{ids['B']}=fail")
    assert r.returncode == 0, r.stderr[-4000:]
    st = _status(cfg)
    assert (st[ids["A"]]["state"], st[ids["B"]]["state"], st[ids["C"]]["state"]) == ("ok", "failed", "planned")
    assert st[ids["B"]]["failure_class"] == "failed" and "injected" in st[ids["B"]]["reason"]
    assert st[ids["B"]]["job_id"] and st[ids["B"]]["attempts"] == 1 and st[ids["A"]]["elapsed_s"] > 0
    a_files = _checksums(cells / ids["A"])

    # 2. rerun the failed cells: B only, then the tables and figures
    t0 = time.time()
    r = _run("-m", "calorimeter", "rerun", str(cfg), "--failed")
    rerun_s = time.time() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout + r.stderr
    assert re.findall(r"^Job \d+: train (\S+)$", out, re.M) == [ids["B"]], out[-4000:]
    assert _checksums(cells / ids["A"]) == a_files
    st = _status(cfg)
    assert st[ids["B"]]["state"] == "ok" and st[ids["B"]]["attempts"] == 2
    first = sorted((cells / ids["B"] / "attempts").iterdir())[0]
    old = json.loads((first / "run.json").read_text())
    assert old["status"] == "failed" and json.loads((first / "set_aside.json").read_text())["why"] == "--failed"
    from calorimeter.analysis.cell import cell_tables

    assert cell_tables(first).runs.loc[0, "status"] == "failed"  # the set-aside record reads as a cell
    runs = pd.read_parquet(tmp_path / "results" / "opslocal" / "tables" / "runs.parquet").set_index("cell_id")
    assert runs.loc[ids["B"], "status"] == "ok" and runs.loc[ids["C"], "status"] == "not_run"
    print(f"\nrerun --failed of one cell, with tables and figures: {rerun_s:.0f} s")

    # 3. a long cell: running with progress, then Snakemake killed with its ranks
    log = tmp_path / "snakemake-c.log"
    with log.open("w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "snakemake", str(record("C")), "--configfile", str(cfg)],
                                cwd=ROOT, env=_env(), stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 600
        while time.time() < deadline:
            c = _status(cfg)[ids["C"]]
            if c["state"] == "running" and (c["progress"] or {}).get("steps_done", 0) >= 3:
                break
            assert proc.poll() is None, log.read_text()[-4000:]
            time.sleep(2)
        else:
            raise AssertionError(f"cell C shows no progress: {c}\n{log.read_text()[-3000:]}")
        p = c["progress"]
        assert p["steps_expected"] == 1 + 5000 and p["steps_expected_exact"] and p["tokens_per_s"] > 0, p
        assert c["job_id"] and c["attempts"] == 1 and c["elapsed_s"] > 0
        r = _run("-m", "calorimeter", "status", str(cfg), timeout=120)
        assert re.search(rf"{re.escape(ids['C'])}\s+running\s.*step \d+/5001 measured", r.stdout), r.stdout
        print(r.stdout)
        time.sleep(12)  # the launcher logs the progress at most every 10 s
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # Snakemake, the train script and the cell's ranks
        proc.wait(timeout=60)
    assert re.search(rf"cell {re.escape(ids['C'])}: step \d+/5001 measured, .* tokens/s", log.read_text())
    time.sleep(1)
    st = _status(cfg)
    c = st[ids["C"]]
    assert c["state"] == "interrupted" and "launcher died" in c["note"], c
    assert c["progress"]["steps_done"] >= 3
    assert (st[ids["A"]]["state"], st[ids["B"]]["state"]) == ("ok", "ok")
    r = _run("-m", "calorimeter", "rerun", str(cfg), "--failed", "--dry-run", timeout=120)
    assert r.returncode == 0 and f"  {ids['C']}  interrupted" in r.stdout and ids["B"] not in r.stdout, r.stdout
    r = _run("-m", "snakemake", "--unlock", "--configfile", str(cfg), timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]

"""calorimeter status and rerun on a real local sweep (Snakemake, submitit local ranks, DeepSpeed on CPU).

Three cells: A is never asked for, B fails (injected), C is long. Snakemake trains B then C in the background:

1. while it runs, status shows B failed (with job id, attempts, class) and C running with its step and tokens/s
   from rank 0's progress file; the train rule's log shows C's steps;
2. Snakemake killed with its ranks (SIGKILL of its session): status still answers from the files alone (C
   interrupted); ``rerun --failed --dry-run`` lists B and C, and changes nothing;
3. ``calorimeter rerun --failed`` sets B's record aside and its Snakemake command trains exactly B and C (A never),
   keeping every earlier attempt (B's failed record still readable as a cell). C fails again here (injected) so that
   the test does not wait for its 5000 steps. The whole command, tables and figures included, runs in SLURM
   scenario 2.

The status of finished local cells (all ``ok``, ETA nothing left, a results folder) is checked on the default sweep
(tests/test_workflow.py), so that no cell is trained twice for it.
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

import pytest
import yaml
from conftest import ROOT, run_cli, subprocess_env

from calorimeter.plan.plan import plan_file

pytestmark = pytest.mark.integration

CELLS = {"A": {"model": "tiny-llama", "zero_stage": 1}, "B": {"model": "tiny-llama", "zero_stage": 0},
         "C": {"model": "tiny-gpt", "zero_stage": 0, "measured_steps": 5000}}


def _run(*args: str, faults: str | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=subprocess_env(faults), capture_output=True,
                          text=True, timeout=timeout)


def _status(cfg: Path) -> dict:
    r = run_cli("status", str(cfg), "--json")
    assert r.returncode == 0, r.stderr
    return {c["cell_id"]: c for c in json.loads(r.stdout)["cells"]}


def _checksums(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def test_status_and_rerun_of_a_local_sweep_with_a_killed_snakemake(tmp_path: Path) -> None:
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
    t0 = time.time()

    # 1. B (fails at once), then C (long) in the background; status while it runs. Two Snakemake calls: one call
    #    with both cells picks its own order, and C first would hold the cores for its 5001 steps.
    r = _run("-m", "snakemake", str(record("B")), "--configfile", str(cfg), faults=f"{ids['B']}=fail", timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]  # a deterministic failure is a result: recorded
    log = tmp_path / "snakemake.log"
    with log.open("w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "snakemake", str(record("C")), "--configfile", str(cfg)],
                                cwd=ROOT, env=subprocess_env(), stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline, c = time.time() + 600, {}
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
        assert p["phase"] == "measured" and p["remaining_s"] > 0, p
        assert c["job_id"] and c["attempts"] == 1 and c["elapsed_s"] > 0
        st = _status(cfg)
        b = st[ids["B"]]
        assert (b["state"], b["failure_class"]) == ("failed", "failed") and "injected" in b["reason"], b
        assert b["job_id"] and b["attempts"] == 1 and b["elapsed_s"] > 0
        assert st[ids["A"]]["state"] == "planned"
        r = run_cli("status", str(cfg))
        assert re.search(rf"{re.escape(ids['C'])}\s+running\s.*step \d+/5001 measured, .* tokens/s", r.stdout), \
            r.stdout
        assert "3 cells: 1 running, 1 failed, 1 planned" in r.stdout, r.stdout
        assert f"calorimeter rerun {cfg} --failed" in r.stdout
        print(f"\nstatus while Snakemake runs:\n{r.stdout}")
        time.sleep(11)  # the launcher logs the progress at most every 10 s
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # Snakemake, the train script and the cell's ranks
        proc.wait(timeout=60)
    assert re.search(rf"cell {re.escape(ids['C'])}: step \d+/5001 measured, .* tokens/s", log.read_text())

    # 2. Snakemake died: the same view from the files
    time.sleep(1)
    st = _status(cfg)
    c = st[ids["C"]]
    assert c["state"] == "interrupted" and "launcher died" in c["note"], c
    assert c["progress"]["steps_done"] >= 3
    assert (st[ids["A"]]["state"], st[ids["B"]]["state"]) == ("planned", "failed")
    b_files = _checksums(cells / ids["B"])
    r = run_cli("rerun", str(cfg), "--failed", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert f"  {ids['C']}  interrupted" in r.stdout and f"  {ids['B']}  failed (failed)" in r.stdout, r.stdout
    assert ids["A"] not in r.stdout
    assert _checksums(cells / ids["B"]) == b_files  # a dry run changes nothing
    r = _run("-m", "snakemake", "--unlock", "--configfile", str(cfg), timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]

    # 3. rerun the failed cells: B and C only (C fails again, injected). `--no-run` sets the records aside and prints
    #    the two Snakemake commands; the first (train exactly those cells) is run as printed. The second (`snakemake
    #    figures`: tables and figures) is what SLURM scenario 2 runs through the whole command; not repeated here
    #    (a minute of figure rules).
    t1 = time.time()
    r = run_cli("rerun", str(cfg), "--failed", "--no-run")
    assert r.returncode == 0, r.stdout + r.stderr
    commands = r.stdout.split("now run:\n", 1)[1].splitlines()
    train = f"snakemake {record('B')} {record('C')} --configfile {cfg}"
    assert [c.strip() for c in commands] == [train, f"snakemake figures --configfile {cfg}"], r.stdout
    r = _run("-m", *train.split(), faults=f"{ids['C']}=fail")
    rerun_s = time.time() - t1
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]  # a deterministic failure is a result: recorded, the rule succeeds
    assert sorted(re.findall(r"^Job \d+: train (\S+)", out, re.M)) == sorted([ids["B"], ids["C"]]), out[-4000:]
    assert not (cells / ids["A"]).exists()  # nothing else ran
    st = _status(cfg)
    assert (st[ids["B"]]["state"], st[ids["B"]]["attempts"]) == ("ok", 2), st[ids["B"]]
    assert (st[ids["C"]]["state"], st[ids["C"]]["attempts"]) == ("failed", 2), st[ids["C"]]
    # B's failed attempt keeps every byte of its record, set aside, and still reads as a cell
    first = sorted((cells / ids["B"] / "attempts").iterdir())[0]
    kept = _checksums(first)
    for name, digest in b_files.items():
        if not name.startswith("attempts/"):  # the top-level record, now in the attempt
            assert kept[name] == digest, name
        else:
            assert _checksums(cells / ids["B"])[name] == digest, name
    assert json.loads((first / "set_aside.json").read_text())["why"] == "--failed"
    from calorimeter.analysis.cell import cell_tables

    assert cell_tables(first).runs.loc[0, "status"] == "failed"
    assert cell_tables(cells / ids["B"]).runs.loc[0, "status"] == "ok"
    print(f"rerun --failed of two cells (one trained, no tables): {rerun_s:.0f} s; whole test {time.time() - t0:.0f} s")

"""A rank that dies ends its cell within 60 s on CPU ranks (local launcher, DeepSpeed + gloo), named in the record
(class peer_died, rank and host), with no complete-looking record, and `calorimeter rerun --failed` selects exactly
those cells. Three real deaths (SIGKILL): as the rank starts, before it has announced itself (only its process is
there to watch), in a training step, while the results are written; and a silent peer (SIGSTOP: a frozen process,
as a host lost without a connection reset looks to its peers), found by its stale heartbeat.
bench/fail_fast.py measures the time to fail over repeated runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, run_cli, subprocess_env

from calorimeter.operate.state import cell_status
from calorimeter.operate.view import cell_folders
from calorimeter.plan.plan import plan_file
from calorimeter.records.atomic import write_json_atomic
from calorimeter.records.rank import RankReport
from calorimeter.records.record import build_record, steps_frame, write_cell_record

pytestmark = pytest.mark.integration

BOUND_S = 60.0
CELLS = {"rendezvous": {"global_batch": 2}, "step": {"global_batch": 4, "measured_steps": 3000},
         "result": {"global_batch": 6}, "silent": {"global_batch": 10, "measured_steps": 3000},
         "ok": {"global_batch": 8}}
FAILED = ("rendezvous", "step", "result", "silent")


def _sweep(tmp_path: Path) -> Path:
    cfg = tmp_path / "ff.yaml"
    cfg.write_text(yaml.safe_dump({
        "sweep": "ff", "hardware": "cpu", "results_dir": str(tmp_path / "results"),
        "telemetry": {"profile_steps": 0}, "launcher": {"executor": "local", "timeout_min": 15, "poll_s": 2},
        "defaults": {"model": "tiny-gpt", "gpus_per_node": 2, "global_batch": 4, "micro_batch": 1,
                     "warmup_steps": 1, "measured_steps": 2, "seq_len": 32},
        "grid": list(CELLS.values())}))
    return cfg


def _run_cell(cfg: Path, cell_id: str, faults: str | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "calorimeter", "run-cell", str(cfg), cell_id], cwd=ROOT,
                            env=subprocess_env(faults), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _attempt(folder) -> Path:
    atts = sorted(p for p in folder.attempts.iterdir() if p.is_dir())
    assert len(atts) == 1
    return atts[0]


def _wait_for_training(folder, proc: subprocess.Popen) -> int:
    """The pid of rank 1 once the cell has trained a few steps."""
    deadline = time.time() + 240
    while time.time() < deadline:
        att = sorted(folder.attempts.glob("*/staging/restart0/progress.jsonl"))
        if att and len(att[0].read_text().splitlines()) >= 3:
            return json.loads((_attempt(folder) / "staging" / "alive-1.json").read_text())["pid"]
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        time.sleep(0.5)
    raise AssertionError("no training progress")


def _check_dead_peer(folder, proc: subprocess.Popen, t_fault: float) -> dict:
    out, _ = proc.communicate(timeout=BOUND_S + 30)
    took = time.time() - t_fault
    assert proc.returncode != 0, out[-3000:]  # the rule fails: a rerun submits the cell again
    rec = json.loads((_attempt(folder) / "run.json").read_text())
    assert took < BOUND_S, (took, rec["reason"])
    assert (rec["status"], rec["failure_class"]) == ("transient", "peer_died"), rec["reason"]
    assert rec["reason"].startswith(f"rank 1 on host {os.uname().nodename} (pid ") and "died without a result" \
        in rec["reason"], rec["reason"]
    assert rec["evidence"]["peer_died"]["rank"] == 1
    assert not folder.run_json.exists() and not folder.steps.exists()  # nothing complete-looking
    leftovers = subprocess.run(["pgrep", "-f", str(_attempt(folder))], capture_output=True, text=True).stdout
    assert not leftovers.strip(), leftovers  # no rank is left behind
    print(f"\n{folder.root.name}: ended {took:.1f} s after the fault: {rec['reason']}")
    return rec


def test_a_dead_rank_ends_its_cell_fast_and_rerun_selects_exactly_those_cells(tmp_path: Path) -> None:
    cfg = _sweep(tmp_path)
    plan = plan_file(cfg)
    ids = dict(zip(CELLS, (pc.cell.cell_id for pc in plan.cells), strict=True))
    folders = dict(zip(CELLS, cell_folders(plan), strict=True))
    pcs = dict(zip(CELLS, plan.cells, strict=True))

    # 1. rank 1 killed as it starts, before it announces itself (no alive file: the launcher sees its process end;
    # rank 0 waits in the rendezvous: was 626 s); `calorimeter status` shows each rank's last lines
    t0 = time.time()
    rec = _check_dead_peer(folders["rendezvous"], _run_cell(cfg, ids["rendezvous"],
                                                            f"{ids['rendezvous']}=kill-at:start@1"), t0)
    assert "the rank had not announced itself" in rec["reason"], rec["reason"]
    assert [o["rank"] for o in rec["evidence"]["rank_output"]] == [1, 0]  # the rank that died first
    table = run_cli("status", str(cfg)).stdout
    assert f"    rank 1 on {os.uname().nodename} (no result): CALORIMETER_TEST_FAULTS: rank 1 kills itself at start" \
        in table, table

    # 2. rank 1 killed (SIGKILL from outside) while the ranks train: rank 0 waits in a collective
    proc = _run_cell(cfg, ids["step"])
    try:
        pid = _wait_for_training(folders["step"], proc)
        t0 = time.time()
        os.kill(pid, signal.SIGKILL)
        time.sleep(1.5)  # the launcher polls every second, then gives the survivors 3 s: status says so meanwhile
        cs = cell_status(pcs["step"], folders["step"], None)
        assert cs.failure_class == "peer_died" and "rank 1 on host" in cs.reason, (cs.state, cs.note)
        assert cs.state in ("running", "failed"), cs.state
        _check_dead_peer(folders["step"], proc, t0)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)

    # 3. rank 1 killed as it writes its result (rank 0 has written its own, then waits in the final barrier)
    t0 = time.time()
    rec = _check_dead_peer(folders["result"], _run_cell(cfg, ids["result"], f"{ids['result']}=kill-at:result@1"),
                           t0)
    assert rec["evidence"]["rank_status"] == {"0": "ok"}  # rank 0's result is kept as evidence, not as a record

    # 4. rank 1 frozen (SIGSTOP) while the ranks train: no death anyone sees, no broken connection (rank 0 would wait
    # in its collective for gloo's 600 s timeout): its heartbeat stops, and the watch ends the cell
    proc = _run_cell(cfg, ids["silent"])
    try:
        pid = _wait_for_training(folders["silent"], proc)
        t0 = time.time()
        os.kill(pid, signal.SIGSTOP)
        rec = _check_dead_peer(folders["silent"], proc, t0)
        assert "no heartbeat for" in rec["reason"], rec["reason"]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)

    # a finished cell (its record as the launcher writes it) is not selected
    ok = folders["ok"]
    attempt = ok.attempt("20260101T000000Z")
    attempt.staging.mkdir(parents=True)
    write_json_atomic(attempt.job_json, {"job_id": "1", "executor": "local", "submitted_s": time.time()})
    ranks = [RankReport(rank=r, status="ok", hostname="h", node=0, restart=0,
                        steps=[{"step": i, "phase": "warmup" if i < 1 else "measured", "loss": 5.0, "grad_norm": 1.0,
                                "time_s": 0.1, "t_begin_s": 1000.0 + i, "t_end_s": 1000.1 + i} for i in range(3)])
             for r in range(2)]
    write_cell_record(ok, attempt, build_record(pcs["ok"].cell, ranks, {"executor": "local", "job_id": "1",
                                                                       "attempt": attempt.name}),
                      steps_frame(ranks))
    r = run_cli("status", str(cfg), "--json")
    st = {c["cell_id"]: (c["state"], c["failure_class"]) for c in json.loads(r.stdout)["cells"]}
    assert st == {**{ids[k]: ("failed", "peer_died") for k in FAILED},
                  ids["ok"]: ("ok", "ok")}, st
    r = run_cli("rerun", str(cfg), "--failed", "--dry-run")
    assert r.returncode == 0, r.stderr
    listed = {line.split()[0] for line in r.stdout.splitlines() if line.startswith("  ") and "attempt" in line}
    assert listed == {ids[k] for k in FAILED}, r.stdout
    assert all(f"{ids[k]}  failed (peer_died)" in r.stdout for k in FAILED), r.stdout

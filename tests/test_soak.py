"""Soak: a local sweep of 40 tiny cells (the ``tiny`` fault hook: real launcher, submitit ranks, records; no model)
with random faults injected: a rank SIGKILLed before it would join the process group, in a step or as it writes
its result, SIGTERM (a preemption notice submitit's local ranks ignore), an OOM stand-in, a deterministic failure.
Every cell ends ok or by class, `status` matches the files, and one rerun of the failed cells (set aside, run again
without faults, as `calorimeter rerun --failed` does before its Snakemake call) completes the sweep.

Half the cells have a fault, each fault at least once; the others run clean beside them, six cells at a time. A longer
soak: ``CALORIMETER_SOAK_CELLS=100 pytest tests/test_soak.py`` (each cell is a rank process: about 2 s of CPU).
"""

from __future__ import annotations

import json
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from calorimeter.launch import faults
from calorimeter.launch.run import run_cell
from calorimeter.launch.settings import launcher_settings
from calorimeter.operate import rerun
from calorimeter.operate.view import cell_folders, sweep_status
from calorimeter.plan.plan import plan_file
from calorimeter.records.record import TransientCellError

pytestmark = pytest.mark.integration

N_CELLS = int(os.environ.get("CALORIMETER_SOAK_CELLS", "40"))
#: fault -> (state, failure class) it must end in
FAULTS = {
    "": ("ok", "ok"),
    "kill-at:rendezvous@0": ("failed", "peer_died"),
    "kill-at:step@0": ("failed", "peer_died"),
    "kill-at:result@0": ("failed", "peer_died"),
    "term-after:0@0": ("ok", "ok"),  # submitit's local ranks log and ignore SIGTERM
    "oom": ("oom", "oom"),
    "fail": ("failed", "failed"),
}


def _run(plan, folders, settings, pcs) -> dict[str, str]:
    """Run the cells six at a time through the local launcher; what each raised (or 'record')."""
    def one(i: int) -> tuple[str, str]:
        try:
            run_cell(pcs[i].cell, settings, folders[i], pcs[i].estimates)
            return pcs[i].cell.cell_id, "record"
        except TransientCellError as e:
            return pcs[i].cell.cell_id, type(e).__name__

    with ThreadPoolExecutor(6) as pool:
        return dict(pool.map(one, range(len(pcs))))


def _files_view(folder) -> tuple[str, str]:
    """(state, class) from the files alone: the top-level record, else the newest attempt's closing record."""
    top = folder.run_json
    if top.is_file():
        rec = json.loads(top.read_text())
        return rec["status"], rec["failure_class"]
    newest = sorted(p for p in folder.attempts.iterdir() if p.is_dir())[-1]
    rec = json.loads((newest / "run.json").read_text())
    return "failed", rec["failure_class"]


def test_soak_tiny_cells_with_random_faults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "soak.yaml"
    cfg.write_text(yaml.safe_dump({
        "sweep": "soak", "hardware": "cpu", "results_dir": str(tmp_path / "results"),
        "telemetry": {"enabled": False, "profile_steps": 0},
        "launcher": {"executor": "local", "timeout_min": 5, "poll_s": 1},
        "defaults": {"model": "tiny-gpt", "gpus_per_node": 1, "micro_batch": 1, "warmup_steps": 1,
                     "measured_steps": 2, "seq_len": 32},
        "grid": [{"global_batch": list(range(1, N_CELLS + 1))}]}))
    plan = plan_file(cfg)
    pcs, folders = plan.runnable, cell_folders(plan)
    assert len(pcs) == N_CELLS
    settings = launcher_settings(plan.config)
    rng = random.Random(27)
    chosen = {pc.cell.cell_id: rng.choice(list(FAULTS)) if i % 2 else "" for i, pc in enumerate(pcs)}
    for f in FAULTS:  # every fault at least once
        chosen[pcs[2 * list(FAULTS).index(f) + 1].cell.cell_id] = f
    monkeypatch.setenv(faults.ENV, ",".join(["*=tiny", *(f"{c}={f}" for c, f in chosen.items() if f)]))
    t0 = time.time()
    raised = _run(plan, folders, settings, pcs)
    first_s = time.time() - t0

    # every cell ended ok or by class, as its fault says; status matches the files
    st = {cs.cell_id: cs for cs in sweep_status(plan).cells}
    files = {pc.cell.cell_id: _files_view(f) for pc, f in zip(pcs, folders, strict=True)}
    for cid, fault in chosen.items():
        assert files[cid] == FAULTS[fault], (cid, fault, files[cid], st[cid].reason)
        assert (st[cid].state, st[cid].failure_class) == files[cid], (cid, st[cid].state, st[cid].failure_class)
        assert (raised[cid] == "record") == (FAULTS[fault][0] != "failed" or FAULTS[fault][1] == "failed"), cid
        if FAULTS[fault][1] == "peer_died":
            assert st[cid].reason.startswith("rank 0 on host "), st[cid].reason
            assert not folders[0].root.joinpath("..", cid, "run.json").exists()

    # one rerun of the failed cells, without the faults, completes the sweep
    chosen_again = rerun.select(list(st.values()), failed=True)
    assert {cs.cell_id for cs in chosen_again} == {c for c, f in chosen.items()
                                                   if FAULTS[f][0] == "failed"}
    for cs in chosen_again:
        rerun.set_aside(folders[[pc.cell.cell_id for pc in pcs].index(cs.cell_id)], "--failed")
    monkeypatch.setenv(faults.ENV, "*=tiny")
    again = [i for i, pc in enumerate(pcs) if pc.cell.cell_id in {cs.cell_id for cs in chosen_again}]
    raised = _run(plan, [folders[i] for i in again], settings, [pcs[i] for i in again])
    assert set(raised.values()) == {"record"}
    st = {cs.cell_id: (cs.state, cs.failure_class) for cs in sweep_status(plan).cells}
    assert st == {cid: ("ok", "ok") if FAULTS[f][0] == "failed" else FAULTS[f] for cid, f in chosen.items()}
    assert all(f.run_json.is_file() for f in folders)
    print(f"\nsoak: {N_CELLS} cells in {first_s:.1f} s, rerun of {len(again)} in {time.time() - t0 - first_s:.1f} s")

"""A full disk, on a real small file system (a tmpfs of a few hundred KiB mounted by the test, root only): the cell
refuses early with the numbers; when the disk fills while the record is written nothing partial stays, `status`
says disk_full, the attempt keeps its finished measurement and the next run completes the record without
retraining; the sampler's stream keeps what it had."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from calorimeter.launch import submit
from calorimeter.launch.run import run_cell
from calorimeter.launch.settings import launcher_settings
from calorimeter.launch.space import DiskSpaceError, record_bytes_estimate
from calorimeter.operate.state import cell_status
from calorimeter.operate.view import cell_folders
from calorimeter.plan.plan import plan_file
from calorimeter.records.atomic import write_json_atomic
from calorimeter.telemetry.sampler import Sampler, SamplerConfig
from calorimeter.telemetry.streamio import read_stream


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs (unmounted afterwards)."""
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(where)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(disk: Path, leave_bytes: int) -> Path:
    """Fill the file system up to ``leave_bytes`` free."""
    filler = disk / "filler"
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with filler.open("ab") as f:
        f.write(b"\0" * max(free - leave_bytes, 0))
    return filler


def _sweep(tmp_path: Path, results: Path) -> Path:
    cfg = {"sweep": "disk", "hardware": "cpu", "results_dir": str(results),
           "defaults": {"model": "tiny-gpt", "gpus_per_node": 1, "global_batch": 2, "micro_batch": 1,
                        "warmup_steps": 1, "measured_steps": 2, "seq_len": 32},
           "grid": [{"seed": 1}]}
    path = tmp_path / "disk.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _rank(rank: int = 0) -> dict:
    steps = [{"step": i, "phase": "warmup" if i < 1 else "measured", "loss": 5.0 - i, "grad_norm": 1.0,
              "time_s": 0.1, "t_begin_s": 1000.0 + i, "t_end_s": 1000.1 + i} for i in range(3)]
    return {"rank": rank, "status": "ok", "steps": steps, "hostname": "h", "node": 0, "local_rank": rank,
            "restart": 0, "t_end_s": 1003.0}


def test_a_cell_refuses_to_start_without_room_for_its_record(tmp_path: Path, small_disk: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    plan = plan_file(_sweep(tmp_path, small_disk / "results"))
    pc, paths = plan.cells[0], cell_folders(plan)[0]
    settings = launcher_settings(plan.config)
    need = record_bytes_estimate(pc.cell, settings)
    assert need > 512 * 1024  # the sampler's streams alone, over the 60 min limit
    monkeypatch.setattr(submit, "make_executor", lambda *a, **k: pytest.fail("submitted on a full disk"))
    with pytest.raises(DiskSpaceError, match=r"disk_full: 0\.\d MiB free on the file system of .* the cell's "
                                             rf"record needs up to {need / 2**20:,.1f} MiB"):
        run_cell(pc.cell, settings, paths)
    assert not (small_disk / "results").exists() or not any(p.is_file() for p in (small_disk / "results").rglob("*"))


def test_a_disk_that_fills_while_the_record_is_written_leaves_nothing_partial(
        tmp_path: Path, small_disk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # measured from a modified tree, whatever the checkout holds: its record keeps a (small, fixed) source patch in
    # the cell and the attempt folder, and the patch this call wrote must not stay behind to keep the disk full
    monkeypatch.setattr("calorimeter.records.record.git_state", lambda: {"commit": "0" * 40, "dirty": True})
    monkeypatch.setattr("calorimeter.records.record.git_patch", lambda: "diff --git a/x b/x\n")
    plan = plan_file(_sweep(tmp_path, small_disk / "results"))
    pc, paths = plan.cells[0], cell_folders(plan)[0]
    settings = launcher_settings(plan.config)
    # a finished measurement whose launcher died (its ranks' results are there, no record yet)
    attempt = paths.attempt("20260101T000000Z")
    attempt.staging.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    write_json_atomic(attempt.job_json, {"job_id": str(dead.pid), "executor": "local", "submitted_s": time.time(),
                                         "world_size": 1, "cell_key": submit.cell_key(pc.cell)})
    write_json_atomic(attempt.rank_json(0), _rank())
    kept = {p: p.read_bytes() for p in attempt.root.rglob("*") if p.is_file()}
    monkeypatch.setattr(submit, "make_executor", lambda *a, **k: pytest.fail("retrained"))
    filler = _fill(small_disk, 6 * 1024)
    with pytest.raises(DiskSpaceError, match="disk_full: disk full while the record was written"):
        run_cell(pc.cell, settings, paths)
    assert not paths.run_json.exists() and not paths.steps.exists()  # nothing partial, nothing complete-looking
    assert not attempt.run_json.exists()  # the attempt stays open ...
    assert {p: p.read_bytes() for p in kept} == kept  # ... with its measurement
    leftovers = [p.name for p in paths.root.iterdir() if p.name not in ("attempts", "latest")]
    assert leftovers == [], leftovers
    assert not (attempt.root / "source.patch").exists()  # the patch this call wrote is gone with the rest
    cs = cell_status(pc, paths, None)
    assert (cs.state, cs.failure_class) == ("failed", "disk_full"), (cs.state, cs.reason, cs.note)
    assert "the measurement is kept in attempt 20260101T000000Z" in cs.reason
    # room again: the next run completes the record from the kept measurement, without training
    filler.unlink()
    rec = run_cell(pc.cell, settings, paths)
    assert rec["status"] == "ok" and rec["provenance"]["launcher"]["attempt"] == attempt.name
    assert json.loads(paths.run_json.read_text())["status"] == "ok" and paths.steps.is_file()
    assert not attempt.record_error.exists()
    assert cell_status(pc, paths, None).state == "ok"


def test_the_sampler_keeps_its_stream_when_the_disk_fills(small_disk: Path) -> None:
    cfg = SamplerConfig(out_dir=small_disk / "node", period_s=0.005, flush_interval_s=0.02, duration_s=20.0,
                        gpus=False)
    sampler = Sampler(cfg)
    sampler.open()
    _fill(small_disk, 8 * 1024)
    t0 = time.monotonic()
    reason = sampler.run()  # fills the last 8 KiB, then stops instead of crashing
    assert time.monotonic() - t0 < 15 and reason.startswith("write failed: No space left on device"), reason
    got = read_stream(sampler.paths.host_stream)
    assert got.table.num_rows > 20 and got.n_batches >= 2  # what it had is kept, readable

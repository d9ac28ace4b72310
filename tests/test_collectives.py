"""The cell-kind mechanism and the ``collectives`` calibration kind (gloo on CPU ranks here; NCCL on GPUs)."""

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

from calorimeter.collectives.measure import group_sizes
from calorimeter.collectives.table import TABLE_COLUMNS, read_collective_points
from calorimeter.plan.cell import Cell
from calorimeter.plan.kinds import COLLECTIVES_PARQUET, KINDS, get_kind, kind_reasons
from calorimeter.plan.plan import make_plan
from calorimeter.plan.work import CommOp
from calorimeter.projection.collectives import CollectiveCurves, Network


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the test's ranks rendezvous there)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


TRAIN_ID = "llama3-8b_h200-1x8_tp1-pp1-dp8_z3_rc-none_ov-on_mb1-gb8-s8192"


def test_train_is_the_default_kind_and_ids_are_unchanged() -> None:
    c = Cell(sweep="s", model="llama3-8b", hardware="h200", nodes=1, gpus_per_node=8, zero_stage=3, overlap=True,
             global_batch=8, seq_len=8192, precision="bf16")
    assert c.kind == "train" and c.cell_id == TRAIN_ID
    old_record = {k: v for k, v in c.to_dict().items() if k != "kind"}  # records written before kinds existed
    assert Cell.from_dict(old_record).kind == "train"
    coll = Cell(sweep="s", model="-", hardware="h200", nodes=1, gpus_per_node=2, kind="collectives")
    assert coll.cell_id == "collectives_h200-1x2"
    assert Cell.from_dict(coll.to_dict()) == coll


def test_kinds_registry_and_plan_checks() -> None:
    assert set(KINDS) >= {"train", "collectives"} and get_kind("collectives").outputs == (COLLECTIVES_PARQUET,)
    with pytest.raises(KeyError, match="known: train, collectives"):
        get_kind("nope")
    one = Cell(sweep="s", model="-", hardware="cpu", nodes=1, gpus_per_node=1, kind="collectives")
    assert kind_reasons(one) == ["a collectives cell needs at least 2 ranks, has 1"]
    plan = make_plan({"sweep": "c", "hardware": "cpu", "grid": [{"kind": "collectives", "gpus_per_node": [1, 2]}]})
    status = {pc.cell.cell_id: pc.status for pc in plan.cells}
    assert status == {"collectives_cpu-1x1": "pruned", "collectives_cpu-1x2": "planned"}
    assert plan.get("collectives_cpu-1x2").cell.model == "-"


def test_kind_is_validated_by_the_schema() -> None:
    from calorimeter.plan.config import ConfigError

    with pytest.raises(ConfigError, match="kind"):
        make_plan({"sweep": "c", "hardware": "cpu", "grid": [{"kind": "thermal-nope"}]})


def test_group_sizes() -> None:
    assert group_sizes(2) == [2]
    assert group_sizes(8) == [2, 4, 8]
    assert group_sizes(6) == [2, 4, 6]


WORKER = """
import os, sys, torch, torch.distributed as dist
from pathlib import Path
dist.init_process_group("gloo", init_method="env://")
from calorimeter.collectives.run import run_collectives
from calorimeter.plan.cell import Cell
cell = Cell(sweep="s", model="-", hardware="cpu", nodes=1, gpus_per_node=2, kind="collectives", warmup_steps=1,
            measured_steps=2)
from calorimeter.records.paths import RunPaths
from calorimeter.records.rank import RankContext, RankInfo
rank = dist.get_rank()
info = RankInfo(rank, 2, rank, 2, 0, "localhost", "gloo", "cpu")
out = run_collectives(RankContext(cell, RunPaths(Path(sys.argv[1])), info)).to_dict()
import json; Path(sys.argv[1], f"rank{rank}.json").write_text(json.dumps(out))
dist.destroy_process_group()
"""


def test_collectives_kind_measures_every_collective_on_gloo(tmp_path: Path) -> None:
    port = str(free_port())
    procs = []
    for rank in range(2):
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "RANK": str(rank), "WORLD_SIZE": "2",
               "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(outs)[-3000:]
    table = pd.read_parquet(tmp_path / COLLECTIVES_PARQUET)
    assert list(table.columns) == list(TABLE_COLUMNS)
    assert set(table["kind"]) == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"}
    assert table["error"].isna().all() and (table["time_s"] > 0).all() and (table["busbw_gbyte_s"] > 0).all()
    assert set(table["backend"]) == {"gloo"} and table["size_bytes"].max() == 2**20
    summary = json.loads((tmp_path / "rank0.json").read_text())["kind_metrics"]
    assert summary["points"] == len(table) and "all_gather_g2" in summary["collectives"]
    # the projection reads the cell's curves when the cell's record says ok
    cell_dir = tmp_path / "sweep" / "cells" / "collectives_cpu-1x2"
    cell_dir.mkdir(parents=True)
    (tmp_path / COLLECTIVES_PARQUET).rename(cell_dir / COLLECTIVES_PARQUET)
    (cell_dir / "run.json").write_text(json.dumps({"status": "ok", "cell": {"hardware": "cpu",
                                                                           "cell_id": "collectives_cpu-1x2"}}))
    points = read_collective_points(tmp_path / "sweep")
    assert len(points) == len(table) and set(points["source"]) == {"collectives"}
    from calorimeter.plan.hardware import get_profile

    curves = CollectiveCurves(points, get_profile("cpu"), Network.from_profile(get_profile("cpu")))
    t, src = curves.call_time(CommOp("all_gather", "tp", 2**19, 2, 1, 1))
    assert t > 0 and src == "collectives"


@pytest.mark.integration
def test_collectives_cell_runs_through_the_workflow(tmp_path: Path) -> None:
    """A collectives cell goes through Snakemake, the launcher, the per-rank path and the record like any cell."""
    cfg = {"sweep": "cpu-collectives", "hardware": "cpu", "telemetry": {"profile_steps": 0},
           "defaults": {"nodes": 1, "gpus_per_node": 2, "warmup_steps": 1, "measured_steps": 2},
           "grid": [{"kind": "collectives"}]}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-m", "snakemake", "-c2", "--configfile", str(path), "--config",
                        f"results_dir={tmp_path / 'res'}"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    cell = tmp_path / "res" / "cpu-collectives" / "cells" / "collectives_cpu-1x2"
    record = json.loads((cell / "run.json").read_text())
    assert record["status"] == "ok" and record["metrics"]["kind"] == "collectives"
    assert record["kind_files"] == [COLLECTIVES_PARQUET]
    assert len(pd.read_parquet(cell / COLLECTIVES_PARQUET)) > 20
    assert not read_collective_points(tmp_path / "res" / "cpu-collectives").empty
    runs = pd.read_parquet(tmp_path / "res" / "cpu-collectives" / "tables" / "runs.parquet")
    assert list(runs["kind"]) == ["collectives"]  # the runs table says what the cell ran

"""Profiled steps: traced with torch.profiler on data-parallel rank 0 only, never counted as measured."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from dist_helpers import run_cells

from calorimeter.plan.cell import Cell


@pytest.mark.integration
def test_profiled_step_traces_one_rank_per_stage(tmp_path: Path) -> None:
    cell = Cell(sweep="t", model="tiny-gpt", hardware="cpu", nodes=1, gpus_per_node=2, zero_stage=1, micro_batch=2,
                global_batch=8, seq_len=64, warmup_steps=1, measured_steps=2, precision="fp32")
    (r0, r1), = run_cells([cell], tmp_path, profile_steps=1)
    assert [s["phase"] for s in r0["steps"]] == ["warmup", "measured", "measured", "profiled"]
    assert r0["traced"] and not r1["traced"]
    trace = tmp_path / "cell0" / "traces" / "rank-0.json.gz"
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert any(e.get("ph") == "X" for e in events)
    assert not (tmp_path / "cell0" / "traces" / "rank-1.json.gz").exists()

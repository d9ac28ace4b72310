"""The study's sweeps as config files: counts, stable unique ids, the parallelism subset."""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import SWEEPS

from calorimeter.plan import plan_file
from calorimeter.plan.cell import Cell


@pytest.mark.parametrize(
    ("name", "count", "per_model"),
    [
        ("h200-optimization", 60, {"gpt3-175b": 20, "llama3-70b": 20, "mixtral-8x7b": 8, "mixtral-8x22b": 12}),
        ("h200-microbatch", 60, {"gpt3-175b": 20, "llama3-70b": 20, "mixtral-8x7b": 8, "mixtral-8x22b": 12}),
        ("h100-optimization", 68, {"gpt3-175b": 16, "llama3-70b": 20, "mixtral-8x7b": 16, "mixtral-8x22b": 16}),
        ("h200-parallelism", 15, {"gpt3-175b": 5, "llama3-70b": 5, "mixtral-8x7b": 2, "mixtral-8x22b": 3}),
    ],
)
def test_paper_sweep_counts(name: str, count: int, per_model: dict[str, int]) -> None:
    plan = plan_file(SWEEPS / f"{name}.yaml")
    assert len(plan.cells) == count
    assert Counter(c.cell.model for c in plan.cells) == per_model
    ids = [c.cell.cell_id for c in plan.cells]
    assert len(set(ids)) == len(ids)


def test_optimization_sweep_structure() -> None:
    cells = [c.cell for c in plan_file(SWEEPS / "h200-optimization.yaml").cells]
    fsdp = [c for c in cells if c.zero_stage == 3]
    assert len(fsdp) == 8 and {c.parallel_label for c in fsdp} == {"TP8-FSDP"}
    assert all(c.world_size == 32 and c.global_batch == 128 for c in cells)
    assert Counter(c.optimization_label for c in cells) == {"base": 15, "cc": 15, "act": 15, "cc+act": 15}
    # Labels come from parameters: the artifact swapped these two for Mixtral-8x7B.
    mix = {c.parallel_label for c in cells if c.model == "mixtral-8x7b"}
    assert mix == {"EP8-TP1-PP1-DP32", "EP4-TP2-PP1-DP16"}


def test_parallelism_sweep_is_the_recompute_subset_with_shared_results() -> None:
    opt = {c.cell.cell_id for c in plan_file(SWEEPS / "h200-optimization.yaml").cells}
    par = plan_file(SWEEPS / "h200-parallelism.yaml")
    # its own plan and tables (results/h200-parallelism/), the optimization sweep's cells (measured once)
    assert par.sweep == "h200-parallelism" and {c.cell.sweep for c in par.cells} == {"h200-optimization"}
    assert {c.cell.cell_id for c in par.cells} <= opt
    assert all(c.cell.recompute == "full" and not c.cell.overlap for c in par.cells)


def test_ids_unique_across_sweeps_and_stable() -> None:
    all_ids = []
    for name in ("h200-optimization", "h200-microbatch", "h100-optimization"):
        all_ids += [c.cell.cell_id for c in plan_file(SWEEPS / f"{name}.yaml").cells]
    # The two H200 sweeps share the recompute, micro-batch 1 cells by design (same parameters, same id).
    shared = [i for i, n in Counter(all_ids).items() if n > 1]
    assert all("_rc-full_ov-off_mb1-" in i and "h200" in i for i in shared)
    # The id is a pure function of the parameters: a pinned example.
    cell = Cell(sweep="x", model="llama3-70b", hardware="h200", nodes=4, gpus_per_node=8, tp=8, pp=2,
                sequence_parallel=True, recompute="full", overlap=True, global_batch=128, seq_len=8192,
                precision="bf16")
    assert cell.cell_id == "llama3-70b_h200-4x8_tp8-pp2-dp2-sp_z1_rc-full_ov-on_mb1-gb128-s8192"
    assert Cell.from_dict(cell.to_dict()) == cell

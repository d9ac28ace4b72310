"""Thermal-aware placement: profiles from recorded telemetry, the policies, their plan checks and the in-job decision.

Profiles are built from the committed real measurements under results/reference/ (2x and 4x H200), so the
asymmetries tested here are the ones the hardware showed, not made up.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calorimeter.placement import apply as papply
from calorimeter.placement.apply import (
    JobPlacement,
    decide_in_job,
    placement_record,
    sibling_costs,
    visible_uuids,
)
from calorimeter.placement.profile import (
    HostGpus,
    ThermalProfile,
    load_profile,
    profiles_from_cell,
    replaces,
    save_profile,
    staleness,
)
from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import get_profile
from calorimeter.plan.memory import estimate_memory, max_stage_layers
from calorimeter.plan.models import get_model
from calorimeter.plan.placement import (
    TIE_MARGIN,
    NodeGpus,
    StageCosts,
    best_split,
    decide,
    flops_stage_costs,
    measured_stage_costs,
    stage_times,
)
from calorimeter.plan.plan import check_cell
from calorimeter.plan.settings import PlacementSettings
from calorimeter.plan.work import stage_work
from calorimeter.records.rank import RankReport

REF = Path(__file__).resolve().parents[1] / "results" / "reference"
X2 = REF / "h200x2-2026-11-21" / "gpu-llama8b"
X2_Z3 = X2 / "cells" / "llama3-8b_h200-1x2_tp1-pp1-dp2_z3_rc-none_ov-on_mb1-gb8-s8192"
X4 = REF / "h200x4-2026-11-21" / "h200x4-parallelism"
X4_PP4 = X4 / "cells" / "llama3-8b_h200-1x4_tp1-pp4-dp1_z1_rc-none_ov-off_mb1-gb8-s8192"
X8 = REF / "h200x8-2026-11-21" / "h200x8-parallelism"
X8_PP8 = X8 / "cells" / "llama3-8b_h200-1x8_tp1-pp8-dp1_z1_rc-none_ov-off_mb1-gb8-s8192"
LLAMA = get_model("llama3-8b")
H200 = get_profile("h200")


def _pp2(placement: str = "thermal", **kw: object) -> Cell:
    return Cell("s", "llama3-8b", "h200", 1, 2, pp=2, seq_len=8192, precision="bf16", placement=placement, **kw)


# ---------------------------------------------------------------------------------------------------------------
# profiles from recorded telemetry


def test_profile_of_the_2x_h200_reference_cell_matches_its_gpu_table() -> None:
    (p,), reasons = profiles_from_cell(X2_Z3)
    assert reasons == []
    table = pd.read_parquet(X2 / "tables" / "gpus.parquet")
    table = table[table["cell_id"] == X2_Z3.name].set_index("gpu_index")
    run = json.loads((X2_Z3 / "run.json").read_text())
    uuids = {r["device_info"]["nvml_index"]: r["device_info"]["uuid"] for r in run["provenance"]["ranks"]}
    assert p.host == "vm" and p.source["kind"] == "cell" and p.source["cell_id"] == X2_Z3.name
    assert p.speed_metric == "sm_clock_avg_mhz"
    assert [g.uuid for g in p.gpus] == [uuids[0], uuids[1]]
    for g in p.gpus:
        row = table.loc[g.nvml_index]
        assert g.sm_clock_avg_mhz == pytest.approx(row["sm_clock_avg_mhz"])
        assert g.temp_avg_c == pytest.approx(row["temp_avg_c"])
        assert g.power_avg_w == pytest.approx(row["power_avg_w"])
        assert g.throttle["sw_power_cap"] > 0.99  # both GPUs at the 700 W cap the whole time (README)
        assert g.power_limit_w == pytest.approx(700.0)
    # on this host the hotter GPU 0 sustained the higher clock: speed follows the clock, not the temperature
    assert p.gpus[0].temp_avg_c > p.gpus[1].temp_avg_c + 5
    assert p.gpus[0].speed == 1.0
    assert p.gpus[1].speed == pytest.approx(table.loc[1, "sm_clock_avg_mhz"] / table.loc[0, "sm_clock_avg_mhz"])
    assert p.window_s == pytest.approx(table.loc[0, "duration_s"])


def test_profiles_are_kept_from_the_tables_rule_cell_tables_wrote(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule thermal_profile: the profile comes from the cell's tables as rule cell_tables wrote them (read back from
    Parquet), never computed again; the outcome says what was kept."""
    from calorimeter.analysis.cell import CellTables, cell_tables
    from calorimeter.placement import profile as pprofile
    from calorimeter.placement.profile import keep_cell_profiles
    from calorimeter.records.run_record import read_run_record

    written = cell_tables(X2_Z3)
    for name in ("runs", "gpus"):
        getattr(written, name).to_parquet(tmp_path / f"{name}.parquet", index=False)
    tables = CellTables(*(pd.read_parquet(tmp_path / f"{name}.parquet") for name in ("runs", "gpus")))
    monkeypatch.setattr(pprofile, "cell_tables", lambda *a, **k: pytest.fail("tables computed again"))
    out = keep_cell_profiles(X2_Z3, read_run_record(X2_Z3 / "run.json"),
                             PlacementSettings(profiles_dir=str(tmp_path / "p")), tables)
    assert out["reasons"] == [] and out["current"] == ["vm"] and len(out["written"]) == 1
    kept = load_profile(tmp_path / "p", "vm")
    monkeypatch.undo()
    (expected,), _ = profiles_from_cell(X2_Z3)
    assert kept is not None and kept.to_dict() == expected.to_dict()
    off = keep_cell_profiles(X2_Z3, read_run_record(X2_Z3 / "run.json"),
                             PlacementSettings(profiles_dir=str(tmp_path / "q"), derive_profiles=False), tables)
    assert off["written"] == [] and off["reasons"] == ["placement.derive_profiles is off"]


def test_4x_h200_profiles_rank_the_gpus_the_same_in_every_eligible_cell() -> None:
    rankings = []
    for d in sorted((X4 / "cells").iterdir()):
        profiles, _ = profiles_from_cell(d)
        for p in profiles:
            rankings.append(tuple(g.nvml_index for g in sorted(p.gpus, key=lambda g: -g.speed)))
            assert max(g.temp_avg_c for g in p.gpus) - min(g.temp_avg_c for g in p.gpus) > 4
    assert len(rankings) == 6  # the six pp = 1 dense cells (TP4, ZeRO-3, TP2 x ZeRO-3; with and without recompute)
    assert {frozenset(r[:2]) for r in rankings} == {frozenset({1, 2})}  # GPUs 1, 2 fast; 0, 3 hot and slow


@pytest.mark.parametrize(("cell", "why"), [
    (X4_PP4, "pp=4"),
    (X2 / "cells" / "llama3-8b_h200-1x2_tp1-pp1-dp2_z1_rc-none_ov-on_mb1-gb8-s8192", "status oom"),
    (X8 / "cells" / "llama3-8b_h200-1x8_tp1-pp1-dp8_z3_rc-none_ov-on_mb1-gb8-s8192", "shorter than 5 s"),
    (X4 / "cells" / "mixtral-8x7b-4l_h200-1x4_tp1-pp1-dp4-ep4_z1_rc-none_ov-on_mb1-gb8-s4096", "mixture-of-experts"),
    (X8 / "cells" / "llama3-8b_h200-1x8_tp8-pp1-dp1-sp_z1_rc-none_ov-off_mb1-gb8-s8192", "did not hold the GPU"),
])
def test_cells_that_cannot_profile_their_host_say_why(cell: Path, why: str) -> None:
    profiles, reasons = profiles_from_cell(cell)
    assert profiles == []
    assert any(why in r for r in reasons), reasons


def _profile(speeds: dict[str, float], taken_s: float = 1000.0, kind: str = "calibration", host: str = "h",
             limit: float = 700.0, driver: str = "580") -> ThermalProfile:
    from calorimeter.placement.profile import GpuThermal

    gpus = tuple(GpuThermal(uuid=u, nvml_index=i, speed=s, power_limit_w=limit, sm_clock_avg_mhz=1500 * s)
                 for i, (u, s) in enumerate(speeds.items()))
    return ThermalProfile(host, taken_s, 30.0, {"kind": kind}, {"driver": driver}, "tflops", gpus)


def test_staleness_age_driver_power_limit_and_coverage() -> None:
    p = _profile({"GPU-a": 1.0, "GPU-b": 0.97})
    now = 1000.0 + 3600
    assert staleness(p, now) is None
    assert "old" in staleness(p, 1000.0 + 13 * 3600)
    assert staleness(p, 1000.0 + 13 * 3600, max_age_h=24) is None
    assert "no thermal profile" in staleness(None, now)
    assert "driver changed" in staleness(p, now, HostGpus("h", "590", {"GPU-a": 700.0}))
    assert "power limit of GPU 1 changed" in staleness(p, now, HostGpus("h", "580", {"GPU-b": 600.0}))
    assert "does not cover GPU(s) GPU-c" in staleness(p, now, HostGpus("h", "580", {"GPU-a": 700, "GPU-c": 700}))
    assert staleness(p, now, HostGpus("h", "580", {"GPU-b": 700.0})) is None


def test_store_keeps_history_and_prefers_calibration(tmp_path: Path) -> None:
    cal = _profile({"GPU-a": 1.0, "GPU-b": 0.9}, taken_s=1000.0)
    hist, current = save_profile(tmp_path, cal, now_s=1100.0)
    assert current and hist.is_file()
    assert load_profile(tmp_path, "h") == cal  # round trip
    derived = _profile({"GPU-a": 0.95, "GPU-b": 1.0}, taken_s=1050.0, kind="cell")
    assert not replaces(cal, derived, 1100.0)
    hist2, current2 = save_profile(tmp_path, derived, now_s=1100.0)
    assert not current2 and hist2.is_file() and hist2 != hist  # kept, not current
    assert load_profile(tmp_path, "h").source["kind"] == "calibration"
    # once the calibration profile is stale, a fresh cell-derived one takes over
    assert replaces(cal, derived, 1000.0 + 13 * 3600)
    assert load_profile(tmp_path, "h.domain.example").host == "h"  # found by the short name


# ---------------------------------------------------------------------------------------------------------------
# stage costs and the split


def test_flops_stage_costs_of_llama3_8b() -> None:
    c = flops_stage_costs(LLAMA, _pp2())
    s, h, v, f, kv = 8192, 4096, 128256, 14336, 8 * 128
    layer = 3 * (2 * s * h * (2 * h + 2 * kv) + 2 * s * h * f * 3 + 2 * s * s * h)
    assert c.last == pytest.approx(3 * 2 * s * h * v / layer)
    assert 2.0 < c.last < 2.2 and c.first == 0 and c.layer == 1


@pytest.mark.parametrize("recompute,layers", [("none", None), ("selective", None), ("full", None), ("full", 3),
                                               ("full", 20)])
def test_stage_costs_are_the_workload_models_stage_flops(recompute: str, layers: int | None) -> None:
    """Placement balances with the plan's workload model: the cost of every stage of any split is proportional to
    that stage's compute FLOPs in plan/work.py, a partial-recompute cell (recompute_layers) included."""
    cell = replace(_pp2("balanced", recompute=recompute, recompute_layers=layers), pp=4, gpus_per_node=4)
    costs = flops_stage_costs(LLAMA, cell)
    for split in ((8, 8, 8, 8), (2, 10, 12, 8), (1, 1, 1, 29), (5, 9, 9, 9)):
        flops = [stage_work(cell, LLAMA, s, n).compute_flops for s, n in enumerate(split)]
        assert costs.all(split) == pytest.approx([f / flops[0] * costs.all(split)[0] for f in flops], rel=1e-12)
    if layers == 3:  # the first 3 blocks of a stage recompute: a 4th block adds less than the 3rd
        assert costs.stage(1, 4, 4) - costs.stage(1, 3, 4) < costs.stage(1, 3, 4) - costs.stage(1, 2, 4)


def test_a_partial_recompute_cell_gets_a_different_balanced_split() -> None:
    """With only the first block of each stage recomputed, the head's share of the last stage grows against the
    all-blocks-recomputed cell, and the balanced split moves layers off the last stage accordingly."""
    full = replace(_pp2("balanced", recompute="full"), pp=4, gpus_per_node=4)
    partial = replace(full, recompute_layers=1)
    c_full, c_part = flops_stage_costs(LLAMA, full), flops_stage_costs(LLAMA, partial)
    assert c_part.last > c_full.last  # in blocks: a block costs less without its recomputation
    s_full = best_split(c_full, [1.0] * 4, 32)
    s_part = best_split(c_part, [1.0] * 4, 32)
    assert s_full == (9, 8, 8, 7) and s_part == (9, 9, 8, 6)  # before the fix both were (9, 8, 8, 7)
    assert max(c_part.all(s_part)) < max(c_part.all(s_full))


def test_measured_stage_costs_from_the_4x_and_8x_pipeline_kernels() -> None:
    for cell_dir, pp in ((X4_PP4, 4), (X8_PP8, 8)):
        k = pd.read_parquet(cell_dir / "kernels.parquet").groupby("stage")["compute_s"].first()
        c = measured_stage_costs(k.to_dict(), tuple([32 // pp] * pp), cell_dir.name)
        assert c is not None and c.source.startswith("measured:")
        per_block = k[1] / (32 // pp)
        assert c.last == pytest.approx((k[pp - 1] - k[1]) / per_block, rel=0.1)
        assert 2.3 < c.last < 3.0  # the head + loss cost more blocks than its FLOPs (2.09) say
        assert 0.0 <= c.first < 0.5


def _brute(costs: StageCosts, speeds: list[float], layers: int, cap: int) -> float:
    best = math.inf
    for split in itertools.product(range(1, cap + 1), repeat=len(speeds)):
        if sum(split) == layers:
            best = min(best, max(stage_times(costs, split, speeds)))
    return best


@pytest.mark.parametrize(("first", "last", "speeds", "cap"), [
    (0.0, 0.0, [1.0, 1.0, 1.0], 12), (0.3, 2.5, [1.0, 1.0, 1.0], 12), (0.0, 2.1, [0.9, 1.0, 0.95], 6),
    (1.0, 0.0, [0.5, 1.0, 1.0], 5), (0.0, 3.0, [1.0, 0.8, 0.97], 12),
])
def test_best_split_is_optimal(first: float, last: float, speeds: list[float], cap: int) -> None:
    costs = StageCosts(1.0, first, last, "test")
    split = best_split(costs, speeds, 12, cap)
    assert split is not None and sum(split) == 12 and max(split) <= cap
    assert max(stage_times(costs, split, speeds)) == pytest.approx(_brute(costs, speeds, 12, cap))


def test_best_split_examples() -> None:
    flat = StageCosts(1.0, 0.0, 0.0, "t")
    assert best_split(flat, [1.0, 1.0], 32) == (16, 16)
    assert best_split(flat, [1.0, 0.5], 30) == (20, 10)  # layers in proportion to throughput
    assert best_split(StageCosts(1.0, 0.0, 2.09, "t"), [1.0, 1.0], 32) == (17, 15)
    assert best_split(flat, [1.0, 0.5], 30, max_layers=18) == (18, 12)  # memory cap binds
    assert best_split(flat, [1.0, 1.0], 32, max_layers=15) is None


# ---------------------------------------------------------------------------------------------------------------
# the policies


def test_default_and_fallbacks_are_recorded() -> None:
    costs = flops_stage_costs(LLAMA, _pp2())
    d = decide(_pp2("default"), LLAMA, costs)
    assert d.applied and d.pp_split is None and d.device_order == {}
    pp1 = replace(_pp2(), pp=1)
    d = decide(pp1, LLAMA, costs)
    assert not d.applied and "pp = 1" in d.reason and "falls back to default" in d.reason
    d = decide(_pp2(), LLAMA, costs, nodes={}, profiles={0: {"stale": "profile is 30.0 h old (more than 12 h)"}})
    assert not d.applied and "node 0: profile is 30.0 h old" in d.reason and d.pp_split is None
    d = decide(_pp2("balanced", pp_split=(16, 16)), LLAMA, costs)
    assert not d.applied and "explicit" in d.reason


def test_thermal_puts_the_heavy_last_stage_on_the_faster_gpu_and_splits() -> None:
    costs = flops_stage_costs(LLAMA, _pp2())
    cap = max_stage_layers(LLAMA, _pp2(), H200)
    # the 2x H200 reference host: GPU 0 sustains 2.1 % more clock than GPU 1
    nodes = {0: NodeGpus("vm", ("GPU-0", "GPU-1"), (1.0, 0.979))}
    d = decide(_pp2(), LLAMA, costs, nodes, cap)
    assert d.applied and d.pp_split == (17, 15)
    assert d.device_order == {0: ["GPU-1", "GPU-0"]}  # stage 1 (head) moves to GPU 0
    assert d.stage_speeds == [0.979, 1.0]
    assert d.predicted["predicted_speedup"] > 1.05
    bal = decide(_pp2("balanced"), LLAMA, costs, max_layers=cap)
    assert bal.pp_split == (17, 15) and bal.device_order == {}
    # thermal gains over balanced only what the profile adds: small on this host
    assert 1.0 < bal.predicted["bottleneck_chosen"] / 0.979 / d.predicted["bottleneck_chosen"] < 1.03
    # the faster GPU already holds the last stage: nothing moves
    d = decide(_pp2(), LLAMA, costs, {0: NodeGpus("vm", ("GPU-0", "GPU-1"), (0.95, 1.0))}, cap)
    assert d.device_order == {} and d.pp_split == (17, 15)
    # equal GPUs: identity, same split as balanced
    d = decide(_pp2(), LLAMA, costs, {0: NodeGpus("vm", ("GPU-0", "GPU-1"), (1.0, 1.0))}, cap)
    assert d.device_order == {} and d.pp_split == bal.pp_split
    # an explicit split is kept: mapping only
    d = decide(_pp2(pp_split=(16, 16)), LLAMA, costs, nodes, cap)
    assert d.pp_split == (16, 16) and d.device_order == {0: ["GPU-1", "GPU-0"]}


def test_thermal_groups_tensor_parallel_ranks_on_the_fast_gpus() -> None:
    """4x H200 reference host: GPUs 0 and 3 are 5 % slower; TP2-PP2 by default pairs (0,1) and (2,3)."""
    cell = Cell("s", "llama3-8b", "h200", 1, 4, tp=2, pp=2, seq_len=8192, precision="bf16", placement="thermal",
                sequence_parallel=True)
    (p,), _ = profiles_from_cell(X4 / "cells" / "llama3-8b_h200-1x4_tp1-pp1-dp4_z3_rc-none_ov-on_mb1-gb8-s8192")
    uuids = tuple(g.uuid for g in p.gpus)
    nodes = {0: NodeGpus("vm", uuids, tuple(g.speed for g in p.gpus))}
    d = decide(cell, LLAMA, flops_stage_costs(LLAMA, cell), nodes, max_stage_layers(LLAMA, cell, H200))
    order = d.device_order[0]
    fast, slow = {uuids[1], uuids[2]}, {uuids[0], uuids[3]}
    assert {frozenset(order[:2]), frozenset(order[2:])} == {frozenset(fast), frozenset(slow)}  # fast GPUs paired
    assert d.predicted["predicted_speedup"] > 1.0
    # no assignment of GPU pairs to the two stages, with its best split, beats the decision by more than the
    # tie margin (within it the sorted assignment, the last stage on the fast pair, is preferred)
    assert {order[2], order[3]} == fast
    costs = flops_stage_costs(LLAMA, cell)
    cap = max_stage_layers(LLAMA, cell, H200)
    speed = {g.uuid: g.speed for g in p.gpus}
    best = min(max(stage_times(costs, best_split(costs, sp, 32, cap), sp))
               for perm in itertools.permutations(uuids)
               for sp in [[min(speed[perm[0]], speed[perm[1]]), min(speed[perm[2]], speed[perm[3]])]])
    assert best <= d.predicted["bottleneck_chosen"] <= best * (1 + TIE_MARGIN)


def test_two_nodes_one_stage_each_split_follows_node_speed() -> None:
    cell = Cell("s", "llama3-8b", "h200", 2, 2, tp=2, pp=2, seq_len=8192, precision="bf16", placement="thermal",
                sequence_parallel=True)
    nodes = {0: NodeGpus("a", ("A0", "A1"), (1.0, 1.0)), 1: NodeGpus("b", ("B0", "B1"), (0.8, 1.0))}
    flat = StageCosts(1.0, 0.0, 0.0, "t")
    d = decide(cell, LLAMA, flat, nodes)
    assert d.device_order == {}  # a stage spans the node: moving ranks inside it changes nothing
    assert d.stage_speeds == [1.0, 0.8] and d.pp_split == (18, 14)
    d = decide(cell, LLAMA, flat, {0: nodes[0]}, profiles={1: {"stale": "no thermal profile for this host"}})
    assert not d.applied and "node 1: no thermal profile" in d.reason


# ---------------------------------------------------------------------------------------------------------------
# planning


def test_plan_checks_each_policy() -> None:
    bal = check_cell(_pp2("balanced"))
    assert bal.status == "planned" and "split 17/15" in bal.notes[0]
    assert bal.estimates["placement_mem_total_gb"] > bal.estimates["mem_total_gb"]  # 17 layers on one stage
    th = check_cell(_pp2())
    assert th.status == "planned" and "decided in the job" in th.notes[0]
    assert th.estimates["placement_max_stage_layers"] == max_stage_layers(LLAMA, _pp2(), H200)
    pp1 = check_cell(replace(_pp2(), pp=1, zero_stage=3))
    assert pp1.status == "planned" and "runs with the default placement" in pp1.notes[0]
    bad = check_cell(_pp2("balanced", pp_split=(16, 16)))
    assert bad.status == "pruned" and "drop pp_split" in bad.reasons[0]


def test_memory_cap_bounds_every_split_a_policy_may_choose() -> None:
    cell = _pp2()
    cap = max_stage_layers(LLAMA, cell, H200)
    assert 16 < cap < 31
    fits = estimate_memory(LLAMA, replace(cell, pp_split=(cap, 32 - cap)), H200).total_b <= H200.memory_gb * 1e9
    over = estimate_memory(LLAMA, replace(cell, pp_split=(cap + 1, 31 - cap)), H200).total_b > H200.memory_gb * 1e9
    assert fits and over
    nodes = {0: NodeGpus("vm", ("a", "b"), (1.0, 0.3))}  # a very slow GPU would take few layers: cap binds
    d = decide(cell, LLAMA, flops_stage_costs(LLAMA, cell), nodes, cap)
    assert max(d.pp_split) == cap
    assert best_split(flops_stage_costs(LLAMA, cell), [0.3, 1.0], 32)[1] > cap  # without the cap it would exceed


# ---------------------------------------------------------------------------------------------------------------
# in the job


def test_visible_uuids() -> None:
    u = ["GPU-aaa", "GPU-bbb", "GPU-ccc"]
    assert visible_uuids(None, u) == u
    assert visible_uuids("2,0", u) == ["GPU-ccc", "GPU-aaa"]
    assert visible_uuids("GPU-bbb,GPU-a", u) == ["GPU-bbb", "GPU-aaa"]
    assert visible_uuids("1,7,0", u) == ["GPU-bbb"]  # CUDA stops at the first invalid entry
    assert visible_uuids("", u) == []


def _slurm_env(monkeypatch: pytest.MonkeyPatch, node: int) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[01-02]")
    monkeypatch.setenv("SLURM_NODEID", str(node))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_in_job_decision_on_slurm_uses_the_host_it_runs_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SLURM job learns its hosts from SLURM's environment (its node index from submitit's, passed in by the
    launcher); each node uses its own profile."""
    now = 10_000.0
    save_profile(tmp_path, replace(_profile({"GPU-x0": 1.0, "GPU-x1": 0.97}, taken_s=now - 60), host="gpu01"), now)
    save_profile(tmp_path, replace(_profile({"GPU-y0": 0.9, "GPU-y1": 1.0}, taken_s=now - 60), host="gpu02"), now)
    cell = Cell("s", "llama3-8b", "h200", 2, 2, pp=4, seq_len=8192, precision="bf16", placement="thermal")
    settings = PlacementSettings(profiles_dir=str(tmp_path), profile_max_age_h=12, stage_costs="flops")
    _slurm_env(monkeypatch, 1)
    assert papply.job_hosts() == ["gpu01", "gpu02"]
    local = (["GPU-y0", "GPU-y1"], HostGpus("gpu02", "580", {"GPU-y0": 700.0, "GPU-y1": 700.0}))
    d1 = decide_in_job(cell, settings, None, now_s=now, local=local, this_node=1)
    assert d1.applied and d1.profiles[0]["host"] == "gpu01" and d1.profiles[1]["host"] == "gpu02"
    assert sorted(d1.device_order.get(1, ["GPU-y0", "GPU-y1"])) == ["GPU-y0", "GPU-y1"]
    _slurm_env(monkeypatch, 0)
    local0 = (["GPU-x0", "GPU-x1"], HostGpus("gpu01", "580", {"GPU-x0": 700.0, "GPU-x1": 700.0}))
    d0 = decide_in_job(cell, settings, None, now_s=now, local=local0)
    assert d0.digest() == d1.digest() and d0.pp_split == d1.pp_split  # both nodes decide the same
    # a node whose own GPUs changed falls back, and says which node and why
    local_bad = (["GPU-x0", "GPU-z"], HostGpus("gpu01", "580", {"GPU-x0": 700.0, "GPU-z": 700.0}))
    d = decide_in_job(cell, settings, None, now_s=now, local=local_bad)
    assert not d.applied and "node 0: profile does not cover GPU(s) GPU-z" in d.reason
    # CPU ranks (no NVML): visible fallback
    d = decide_in_job(cell, settings, None, now_s=now, local=None)
    assert not d.applied and "no NVML" in d.reason


def test_job_placement_sets_the_device_order_and_records_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = 10_000.0
    save_profile(tmp_path, replace(_profile({"GPU-a": 1.0, "GPU-b": 0.979}, taken_s=now - 60), host="vm"), now)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setattr(papply, "job_hosts", lambda: ["vm"])
    monkeypatch.setattr(papply, "job_gpus", lambda: (visible_uuids("0,1", ["GPU-a", "GPU-b"]),
                                                     HostGpus("vm", "580", {"GPU-a": 700.0, "GPU-b": 700.0})))
    monkeypatch.setattr(papply.time, "time", lambda: now)
    job = JobPlacement.start(_pp2(), PlacementSettings(profiles_dir=str(tmp_path), stage_costs="flops"), None)
    assert job.cuda_visible_devices == "GPU-b,GPU-a"
    import os

    assert os.environ["CUDA_VISIBLE_DEVICES"] == "GPU-b,GPU-a"
    assert job.cell.pp_split == (17, 15) and job.cell.cell_id != _pp2().cell_id
    views = [RankReport(rank=r, placement=job.record({"uuid": u}, r)) for r, u in ((0, "GPU-b"), (1, "GPU-a"))]
    rec = placement_record(views)
    assert rec["applied"] and rec["pp_split"] == [17, 15] and all(r["device_verified"] for r in rec["ranks"])
    # a rank that got another GPU than intended makes the record say so
    views[1].placement = job.record({"uuid": "GPU-b"}, 1)
    rec = placement_record(views)
    assert not rec["applied"] and "rank(s) [1]" in rec["reason"]


def test_measured_costs_come_from_the_default_cell_of_the_same_layout(tmp_path: Path) -> None:
    cell = Cell("h200x4-parallelism", "llama3-8b", "h200", 1, 4, pp=4, seq_len=8192, precision="bf16",
                global_batch=8, warmup_steps=2, measured_steps=4, lr=1e-4, placement="thermal")
    src = X4_PP4
    assert replace(cell, placement="default").cell_id == src.name
    sib = tmp_path / "cells" / src.name
    sib.mkdir(parents=True)
    for f in ("run.json", "kernels.parquet"):
        shutil.copy(src / f, sib / f)
    costs = sibling_costs(cell, tmp_path / "cells" / cell.cell_id, {})
    assert costs is not None and costs.source == f"measured:{src.name}"
    assert 2.3 < costs.last < 3.0
    sib.rename(sib.with_name(src.name + "_r1"))  # only a later repetition of the default cell has run
    assert sibling_costs(cell, tmp_path / "cells" / cell.cell_id, {}).source == f"measured:{src.name}_r1"
    shutil.rmtree(sib.with_name(src.name + "_r1"))
    assert sibling_costs(cell, tmp_path / "cells" / cell.cell_id, {}) is None  # none: the FLOP model is used


# ---------------------------------------------------------------------------------------------------------------
# comparison and figure


def _runs() -> tuple[pd.DataFrame, pd.DataFrame]:
    base = "llama3-8b_h200-1x2_tp1-pp2-dp1_z1_rc-none_ov-off_mb1-gb8-s8192"
    rows, gpus = [], []
    data = {"default": [100.0, 101.0, 99.0], "thermal": [104.0, 105.0, 103.0], "balanced": [102.0]}
    for pol, vals in data.items():
        for k, v in enumerate(vals):
            cid = base + ("" if pol == "default" else f"_pl-{pol}") + (f"_r{k}" if k else "")
            rows.append({"cell_id": cid, "status": "ok", "placement": pol, "placement_applied": True,
                         "model": "llama3-8b", "parallel_label": "TP1-PP2", "hardware": "h200", "world_size": 2,
                         "tokens_per_s_per_gpu": v, "energy_per_token_j": 10.0 / v,
                         "placement_split": "" if pol == "default" else "17/15",
                         "placement_moved": pol == "thermal", "placement_predicted_speedup": 1.05})
            gpus += [{"cell_id": cid, "temp_avg_c": 60.0, "sm_clock_avg_mhz": 1600.0},
                     {"cell_id": cid, "temp_avg_c": 54.0 if pol == "thermal" else 52.0, "sm_clock_avg_mhz": 1650.0}]
    # a thermal cell that fell back ran the default placement: it is pooled with default
    rows.append({**rows[0], "cell_id": base + "_pl-thermal_r3", "placement": "thermal", "placement_applied": False,
                 "placement_reason": "falls back to default: node 0: no thermal profile for this host",
                 "tokens_per_s_per_gpu": 100.0, "energy_per_token_j": 0.1})
    return pd.DataFrame(rows), pd.DataFrame(gpus)


def test_policy_comparison_gain_and_interval() -> None:
    from scipy import stats

    from calorimeter.analysis.placement import claim_text, policy_comparison, relative_gain

    runs, gpus = _runs()
    cmp = policy_comparison(runs, gpus).set_index("placement")
    assert list(cmp.index) == ["default", "balanced", "thermal"]
    assert cmp.loc["default", "n"] == 4 and cmp.loc["thermal", "n"] == 3 and cmp.loc["thermal", "n_applied"] == 3
    d, t = np.array([100.0, 101.0, 99.0, 100.0]), np.array([104.0, 105.0, 103.0])
    assert cmp.loc["thermal", "tokens_per_s_per_gpu_gain"] == pytest.approx(t.mean() / d.mean() - 1)
    res = stats.ttest_ind(t, d, equal_var=False)
    ci = res.confidence_interval(0.95)
    assert cmp.loc["thermal", "tokens_per_s_per_gpu_gain_ci95_low"] == pytest.approx(ci.low / d.mean(), rel=0.01)
    assert cmp.loc["thermal", "temp_spread_c_mean"] == pytest.approx(6.0)
    assert cmp.loc["default", "temp_spread_c_mean"] == pytest.approx(8.0)
    assert np.isnan(cmp.loc["balanced", "tokens_per_s_per_gpu_gain_ci95_low"])  # one repetition: no interval
    assert cmp.loc["thermal", "tokens_per_s_per_gpu_gain_dof"] == pytest.approx(res.df, rel=0.05)  # Welch on logs
    assert "(gain beyond 1%; n=3)" in claim_text(cmp.loc["thermal"].rename("thermal").to_frame().T.reset_index()
                                                 .rename(columns={"index": "placement"}).iloc[0])
    assert "no claim" in claim_text(cmp.reset_index().iloc[1])
    # the comparison core's verdict on "gains >= 1%": energy per token is better lower, so a drop beyond 1% is a
    # gain, a rise beyond 1% a loss, a change inside +-1% no gain, an interval straddling 1% or 1 dof cannot say
    cols = ["energy_per_token_j_gain", "energy_per_token_j_gain_ci95_low", "energy_per_token_j_gain_ci95_high"]
    row = pd.Series({"placement": "thermal", "model": "m", "parallel_label": "PP2", "n": 3,
                     "energy_per_token_j_gain_dof": 3.5, **dict.fromkeys(cols, 0.0)})
    for values, said in [((-0.020, -0.026, -0.014), "(gain beyond 1%; n=3)"),
                         ((0.020, 0.014, 0.026), "(loss; n=3)"),
                         ((0.001, -0.004, 0.006), "(no gain of 1% or more; n=3)"),
                         ((-0.012, -0.016, -0.008), "(cannot say: ")]:
        row[cols] = values
        assert said in claim_text(row, "energy_per_token_j"), (values, claim_text(row, "energy_per_token_j"))
    row[cols] = (-0.020, -0.026, -0.014)
    row["energy_per_token_j_gain_dof"] = 1.0
    assert "cannot say: 1 degree(s) of freedom" in claim_text(row, "energy_per_token_j")
    assert np.isnan(relative_gain(np.array([1.0]), np.array([1.0, 2.0]))[1])


def test_placement_figure_draws_every_policy(tmp_path: Path) -> None:
    from calorimeter.figures import render
    from calorimeter.figures.placement import draw

    runs, gpus = _runs()
    fig, res = draw({"runs": runs, "gpus": gpus})
    bars = {a.get_gid() for ax in fig.axes for a in ax.patches}
    assert {"tokens_per_s_per_gpu:thermal", "energy_per_token_j:default", "temp_spread_c:balanced"} <= bars
    assert res.n_points == 3 and len(res.cells) == len(runs)
    assert res.missing == ["thermal fell back to default in 1 cell(s), counted as default: node 0: no thermal "
                           "profile for this host"]
    gains = [t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid() == "gain"]
    assert any(g.startswith("+4.0% [") for g in gains) and any("(n=1)" in g for g in gains)
    import matplotlib.pyplot as plt

    plt.close(fig)
    res = render("placement", {"runs": runs.assign(placement="default"), "gpus": gpus}, tmp_path / "p.png")
    assert res.n_points == 0 and (tmp_path / "p.png").is_file()


# ---------------------------------------------------------------------------------------------------------------
# the calibration kind


def test_calibration_rank_measures_each_step(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from calorimeter.placement import calibrate

    monkeypatch.setattr(calibrate, "STEP_S", 0.05)
    cell = replace(_pp2(), hardware="cpu", warmup_steps=1, measured_steps=3)
    out = calibrate.calibrate_rank(cell, torch.device("cpu"))
    assert [s["phase"] for s in out.steps] == ["warmup", "measured", "measured", "measured"]
    assert all(s["tflops"] > 0 and s["t_end_s"] > s["t_begin_s"] for s in out.steps)
    cal = out.calibration
    assert cal is not None
    assert cal["n"] == 256 and cal["tflops_min"] <= cal["tflops"] <= cal["tflops_max"]
    assert "float32 256x256x256 matmul" in cal["load"]


def test_calibration_record_profiles_its_host_by_matmul_rate(tmp_path: Path) -> None:
    """A calibration cell's profile: the telemetry's statistics, and speed from each GPU's measured rate."""
    for f in ("telemetry.parquet", "telemetry.json", "steps.parquet"):
        shutil.copy(X2_Z3 / f, tmp_path / f)
    run = json.loads((X2_Z3 / "run.json").read_text())
    run["cell"]["kind"] = "thermal-calibration"
    run["model"] = None
    uuids = [r["device_info"]["uuid"] for r in run["provenance"]["ranks"]]
    run["metrics"] = {"kind": "thermal-calibration", "load": "bf16 8192x8192x8192 matmul",
                      "gpus": [{"rank": 0, "node": 0, "nvml_index": 0, "uuid": uuids[0], "tflops": 640.0},
                               {"rank": 1, "node": 0, "nvml_index": 1, "uuid": uuids[1], "tflops": 660.0}]}
    (tmp_path / "run.json").write_text(json.dumps(run))
    (p,), reasons = profiles_from_cell(tmp_path)
    assert reasons == [] and p.source["kind"] == "calibration" and p.speed_metric == "tflops"
    assert p.source["load"] == "bf16 8192x8192x8192 matmul"
    assert [g.tflops for g in p.gpus] == [640.0, 660.0]
    assert [g.speed for g in p.gpus] == pytest.approx([640 / 660, 1.0])
    save_profile(tmp_path / "profiles", p, now_s=p.taken_s)
    assert load_profile(tmp_path / "profiles", "vm").speed_metric == "tflops"


def test_the_gpu_placement_sweep_plans_and_orders_its_cells() -> None:
    from calorimeter.plan.placement import prerequisites
    from calorimeter.plan.plan import plan_file

    plan = plan_file(Path(__file__).resolve().parents[1] / "config" / "reference" / "h200x2-placement.yaml")
    assert [pc.status for pc in plan.cells] == ["planned"] * 10
    cal, *train = [pc.cell for pc in plan.cells]
    assert cal.kind == "thermal-calibration" and cal.cell_id == "thermal-calibration_h200-1x2"
    assert [c.placement for c in train] == ["default", "balanced", "thermal"] * 3
    assert [c.repeat for c in train] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert all(c.pp == 2 and c.model == "llama3-8b" and c.gpus_per_node == 2 for c in train)
    cells = [pc.cell for pc in plan.cells]
    for c in train:
        assert prerequisites(c, cells) == ([cal.cell_id] if c.placement == "thermal" else [])
    bal = next(pc for pc in plan.cells if pc.cell.placement == "balanced")
    assert "split 17/15" in bal.notes[0]


def test_a_calibration_cell_keeps_the_default_placement_without_a_model() -> None:
    cal = Cell("s", "-", "h200", 1, 2, kind="thermal-calibration")
    d = decide_in_job(cal, PlacementSettings(), None, local=None)
    assert d.applied and d.policy == "default" and d.pp_split is None

"""A projected row's regimes, the band it takes from them, and the collective curves of a 4-GPU node."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from calorimeter.collectives.table import CURVE_COLUMNS
from calorimeter.plan.hardware import get_profile
from calorimeter.plan.work import CommOp
from calorimeter.projection.collectives import CollectiveCurves, Network
from calorimeter.projection.regimes import (
    GPU_BOUND,
    GPU_COUNT,
    HOST_BOUND,
    MOE,
    MOE_UNSEEN,
    NEW_LAYOUT,
    SEQUENCE,
    RegimeBand,
    band_key,
    choose_band,
    regime_of,
)

#: a calibration on 1-2 GPUs of a dense model: TP, PP, ZeRO-3 over 2 GPUs, sequence 1024-8192
RANGES = {"tp": [1, 2], "pp": [1, 2], "dp": [1, 2], "ep": [1, 1], "zero3": [0, 1], "world_size": [1, 2],
          "seq_len": [1024, 8192], "micro_batch": [1, 8], "model_params": [1e9, 8e9], "experts": [0, 0]}


def values(**kw: float) -> dict[str, float]:
    v = {"tp": 1, "pp": 1, "dp": 1, "ep": 1, "zero3": 0, "world_size": 1, "seq_len": 4096, "micro_batch": 1,
         "model_params": 8e9, "experts": 0}
    return {**v, **kw}


def test_regimes_of_rows_inside_and_beyond_the_calibration() -> None:
    assert regime_of(values(), RANGES, False).labels == (GPU_BOUND,)
    assert regime_of(values(), RANGES, True).labels == (HOST_BOUND,)
    tp4 = regime_of(values(tp=4, world_size=4), RANGES, False)
    assert tp4.labels == (GPU_BOUND, GPU_COUNT) and tp4.factor[GPU_COUNT] == 2.0
    assert tp4.band_keys() == [(GPU_BOUND, GPU_BOUND), (band_key(GPU_BOUND, GPU_COUNT), GPU_COUNT)]
    # a parallelism calibrated only at degree 1 is a layout never measured, not a GPU count beyond the range
    ep = regime_of(values(ep=2, dp=2, world_size=2), {**RANGES, "world_size": [1, 1], "dp": [1, 1]}, False)
    assert ep.labels == (GPU_BOUND, NEW_LAYOUT) and GPU_COUNT not in ep.factor
    z3 = regime_of(values(zero3=1, dp=2, world_size=2), {**RANGES, "zero3": [0, 0]}, False)
    assert NEW_LAYOUT in z3.labels
    short = regime_of(values(seq_len=512), RANGES, True)  # below the range counts too
    assert short.labels == (HOST_BOUND, SEQUENCE) and short.factor[SEQUENCE] == 2.0
    moe = regime_of(values(experts=8), RANGES, False, nodes=4)
    assert moe.labels == (MOE, MOE_UNSEEN) and moe.inter_node
    assert band_key(MOE, GPU_COUNT) == "MoE, extrapolated in GPU count" and band_key(MOE, MOE_UNSEEN) == MOE_UNSEEN


def test_a_moe_rows_layout_counts_against_the_calibrations_moe_cells_alone() -> None:
    """Dense cells measured TP4 and ZeRO-3; the MoE cells only EP at tp 1: a MoE row at TP2 is a layout never
    measured (its dispatch and expert GEMMs under TP were never timed), the same row dense is in range."""
    ranges = {**RANGES, "tp": [1, 4], "world_size": [1, 4], "dp": [1, 4], "ep": [1, 4], "experts": [0, 8],
              "model_params": [1e9, 5e10], "moe_tp": [1, 1], "moe_pp": [1, 2], "moe_dp": [1, 4], "moe_ep": [2, 4],
              "moe_zero3": [0, 0]}
    moe = {"experts": 8, "moe_pp": 1, "moe_dp": 2, "moe_ep": 2, "moe_zero3": 0}
    tp2 = regime_of(values(tp=2, dp=2, ep=2, world_size=4, **moe, moe_tp=2), ranges, False)
    assert tp2.labels == (MOE, NEW_LAYOUT)
    assert regime_of(values(tp=2, dp=2, world_size=4), ranges, False).labels == (GPU_BOUND,)
    ep8 = regime_of(values(dp=8, ep=8, world_size=8, **{**moe, "moe_dp": 8, "moe_ep": 8}, moe_tp=1),
                    {**ranges, "dp": [1, 8], "ep": [1, 8], "world_size": [1, 8]}, False)
    assert ep8.labels == (MOE, GPU_COUNT) and ep8.factor[GPU_COUNT] == 2.0  # beyond the MoE cells' EP and DP
    # a calibration written before the MoE keys existed: the whole range, as then
    old = {k: v for k, v in ranges.items() if not k.startswith("moe_")}
    assert regime_of(values(tp=2, dp=2, ep=2, world_size=4, **moe, moe_tp=2), old, False).labels == (MOE,)


def test_a_row_takes_the_widest_measured_band_of_its_regimes() -> None:
    m = "tokens_per_s_per_gpu"
    bands = {GPU_BOUND: RegimeBand({m: 0.08}, 100), band_key(GPU_BOUND, GPU_COUNT): RegimeBand({m: 0.12}, 10,
                                                                                                  factor=2.0)}
    inside = regime_of(values(), RANGES, False)
    assert choose_band(inside, bands, m).half == pytest.approx(0.08)
    assert choose_band(inside, bands, m, {m: 0.1}).half == pytest.approx(0.1)  # the machines' spread: a floor
    tp4 = regime_of(values(tp=4, world_size=4), RANGES, False)
    c = choose_band(tp4, bands, m)
    assert c.half == pytest.approx(0.12) and c.basis.startswith("dense GPU-bound, extrapolated in GPU count")
    # 64 GPUs from a calibration on 2: five doublings beyond a band measured one doubling out
    big = regime_of(values(dp=64, world_size=64), RANGES, False)
    assert choose_band(big, bands, m).half == pytest.approx(0.12 * 5)
    # a regime without a measured error refuses the row, whatever the others say
    layout = regime_of(values(ep=2, world_size=2), RANGES, False)
    c = choose_band(layout, bands, m)
    assert math.isnan(c.half) and "layout never measured: no measured error" in c.refused
    bands[band_key(GPU_BOUND, NEW_LAYOUT)] = RegimeBand(reason="3 held-out rows (fewer than 5)")
    assert "fewer than 5" in choose_band(layout, bands, m).refused
    assert math.isnan(choose_band(inside, bands, "power_avg_w").half)  # never measured for that metric


def test_collective_curves_of_a_4_gpu_node_price_each_group_size_from_its_own_points() -> None:
    """A ``collectives`` cell on 4 ranks times every collective at group sizes 2 and 4 (all-to-all included); the
    projection reads a group of 4 from the group-4 points and of 2 from the group-2 ones, never carrying one over
    where the other was measured."""
    rows = []
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        for group, bw in ((2, 100e9), (4, 50e9)):  # a group of 4 measured at half the bandwidth
            for size in (2.0**20, 2.0**24, 2.0**28):
                rows.append({"kind": kind, "role": "sync", "group": group, "size_bytes": size,
                             "time_s": 1e-5 + size / bw, "source": "collectives"})
    rows += [{"kind": "send_recv", "role": "sync", "group": 2, "size_bytes": s, "time_s": 1e-5 + s / 80e9,
              "source": "collectives"} for s in (2.0**20, 2.0**24)]
    hw = get_profile("h100")
    curves = CollectiveCurves(pd.DataFrame(rows, columns=list(CURVE_COLUMNS)), hw, Network.from_profile(hw))
    for kind, role in (("all_to_all", "ep"), ("all_gather", "tp"), ("reduce_scatter", "tp"), ("all_reduce", "dp")):
        t2, src2 = curves.call_time(CommOp(kind, role, 2.0**24, 2, 1, 1))
        t4, src4 = curves.call_time(CommOp(kind, role, 2.0**24, 4, 1, 1))
        assert src2 == src4 == "collectives"  # measured at both sizes: nothing carried over
        assert (t2, t4) == pytest.approx((1e-5 + 2.0**24 / 100e9, 1e-5 + 2.0**24 / 50e9))
    t, src = curves.call_time(CommOp("send_recv", "pp", 2.0**24, 2, 1, 1))
    assert src == "collectives" and t == pytest.approx(1e-5 + 2.0**24 / 80e9)
    # a group of 8 (never measured here) takes the nearest measured group's bus bandwidth, and says so
    assert "(group 4 for 8)" in curves.call_time(CommOp("all_to_all", "ep", 2.0**24, 8, 1, 1))[1]

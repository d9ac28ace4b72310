"""Kernel categorization and interval-union math on a small hand-written chrome trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calorimeter.telemetry import (
    breakdown_traces,
    categorize_kernel,
    copies_as_comm,
    kernel_breakdown,
    kernel_events,
    kernel_table,
    merge_intervals,
    uncovered_length,
    union_length,
)


@pytest.mark.parametrize(
    ("name", "cat"),
    [
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_reduce"),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", "send_recv"),
        ("ncclDevKernel_AllGather_RING_LL", "all_gather"),
        ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "reduce_scatter"),
        ("ncclDevKernel_Broadcast_RING_LL", "send_recv"),
        ("ncclDevKernel_AllToAll_something", "all_to_all"),
        ("ncclDevKernel_Reduce_Sum_f32_RING_LL", "other_comm"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "gemm_attention"),
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "gemm_attention"),
        ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>(Flash_fwd_params)", "gemm_attention"),
        ("cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>", "gemm_attention"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "memory_elementwise"),
        ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>", "normalization"),
        ("rms_norm_kernel", "normalization"),
        ("triton_red_fused_native_layer_norm_0", "normalization"),
        ("triton_poi_fused_add_mul_0", "memory_elementwise"),
        ("Memcpy DtoD (Device -> Device)", "memory_elementwise"),
        ("Memcpy PtoP (Device -> Device)", "other_comm"),
        ("void c10d::symmetric_memory::barrier_kernel(unsigned int**, int, int, int, unsigned long)", "other_comm"),
        ("my_custom_thing", "other"),
    ],
)
def test_categorize_kernel(name: str, cat: str) -> None:
    assert categorize_kernel(name) == cat


def test_interval_union_by_hand() -> None:
    assert merge_intervals([(5, 7), (0, 2), (1, 3), (3, 4), (9, 9)]) == [(0.0, 4.0), (5.0, 7.0)]
    assert union_length([(0, 2), (1, 3), (5, 7)]) == 5.0
    # A = [0,4] u [6,8], B = [2,7] -> A \ B = [0,2] u [7,8] = 3
    assert uncovered_length([(0, 4), (6, 8)], [(2, 7)]) == 3.0


def _trace() -> dict:
    # rank-local µs timeline (two streams):
    #   stream 7 (compute): gemm [0,100), layer_norm [100,120), gemm [200,300)
    #   stream 13 (comm):   allreduce [50,150), sendrecv [250,400)
    #   stream 7 again:     elementwise [140,160)
    ev = [
        ("sm90_xmma_gemm_bf16bf16_bf16f32", 0, 100, 7),
        ("vectorized_layer_norm_kernel", 100, 20, 7),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 50, 100, 13),
        ("elementwise_kernel", 140, 20, 7),
        ("flash_fwd_kernel", 200, 100, 7),
        ("ncclKernel_SendRecv", 250, 150, 13),
    ]
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": n,
            "ts": ts,
            "dur": d,
            "pid": 0,
            "tid": s,
            "args": {"device": 0, "stream": s},
        }
        for n, ts, d, s in ev
    ]
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 500, "pid": 1, "tid": 1})
    events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 500, "dur": 10, "pid": 0, "tid": 7})
    return {"traceEvents": events}


def test_kernel_breakdown_by_hand() -> None:
    b = kernel_breakdown(kernel_events(_trace()))
    assert b.n_kernels == 6
    # summed time per category (µs -> s): gemm 100+100, norm 20, mem 20, allreduce 100, sendrecv 150
    assert b.sum_s["gemm_attention"] == pytest.approx(200e-6)
    assert b.sum_s["normalization"] == pytest.approx(20e-6)
    assert b.sum_s["memory_elementwise"] == pytest.approx(20e-6)
    assert b.sum_s["all_reduce"] == pytest.approx(100e-6)
    assert b.sum_s["send_recv"] == pytest.approx(150e-6)
    assert sum(b.sum_s.values()) == pytest.approx(490e-6)  # double counts overlap
    # compute union: [0,120) u [140,160) u [200,300) = 120+20+100 = 240
    assert b.compute_s == pytest.approx(240e-6)
    # comm union: [50,150) u [250,400) = 250
    assert b.comm_s == pytest.approx(250e-6)
    # busy: [0,160) u [200,400) = 360
    assert b.busy_s == pytest.approx(360e-6)
    # exposed comm = busy - compute = 120: [120,140) + [300,400)
    assert b.comm_exposed_s == pytest.approx(120e-6)
    # overlap = comm + compute - busy = 250 + 240 - 360 = 130: [50,120) + [140,150) + [250,300)
    assert b.overlap_s == pytest.approx(130e-6)
    assert b.span_s == pytest.approx(400e-6)
    t = kernel_table(kernel_events(_trace()))
    assert t.iloc[0]["name"] == "ncclKernel_SendRecv" and t.iloc[0]["category"] == "send_recv"


def test_breakdown_traces_orders_ranks_numerically(tmp_path: Path) -> None:
    for r in (10, 2, 0):
        (tmp_path / f"rank-{r}.json").write_text(json.dumps(_trace()))
    df = breakdown_traces(sorted(tmp_path.glob("*.json")))  # lexicographic: 0, 10, 2
    assert df["rank"].tolist() == [0, 2, 10]
    # copies count by default (the HtoD copy [500,510) is GPU work), kernels alone when asked for
    assert df["busy_s"].tolist() == pytest.approx([370e-6] * 3)
    df2 = breakdown_traces([tmp_path / "rank-0.json"], cats=("kernel",))
    assert df2.loc[0, "n_kernels"] == 6 and df2.loc[0, "busy_s"] == pytest.approx(360e-6)


def test_step_breakdown_of_the_committed_2x_h200_cells_shows_where_tp_overlap_lost() -> None:
    """bench/step_breakdown.py on the committed findings tables: one row per traced rank (both pipeline stages), and
    the TP2 ring overlap's measured story: less exposed communication, more GPU idle time per step."""
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("step_breakdown", root / "bench" / "step_breakdown.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    df = mod.breakdown(root / "results/reference/findings-2026-11-23/h200x2-findings")
    pp2 = df.xs("llama3-8b-8l_h200-1x2_tp1-pp2-dp1_z1_rc-none_ov-off_mb1-gb16-s2048", level="cell_id")
    assert list(pp2.index) == [0, 1]
    tp2 = {ov: df.xs(f"llama3-8b-8l_h200-1x2_tp2-pp1-dp1-sp_z1_rc-none_ov-{ov}_mb1-gb16-s2048", level="cell_id").iloc[0]
           for ov in ("off", "on")}
    assert tp2["on"].comm_exposed_s < 0.6 * tp2["off"].comm_exposed_s  # 0.055 vs 0.100 s
    assert tp2["on"].idle_min_s > 1.5 * tp2["off"].idle_min_s  # 0.351 vs 0.176 s: host-bound
    assert (df.idle_min_s >= 0).all() and (df.idle_min_s <= df.step_s).all()
    assert ((df.idle_min_s - (df.step_s - df.busy_s).clip(lower=0)).abs() < 1e-12).all()


def test_copies_count_as_communication_in_the_strict_view() -> None:
    """Peer copies are communication in both views; a local-looking copy (``Memcpy DtoD``, as a copy from mapped peer
    memory may be recorded) only in the strict one."""
    trace = _trace()
    trace["traceEvents"] += [
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "ts": 160, "dur": 20, "pid": 0,
         "tid": 9, "args": {"device": 0, "stream": 9}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy PtoP (Device -> Device)", "ts": 400, "dur": 30, "pid": 0,
         "tid": 9, "args": {"device": 0, "stream": 9}},
    ]
    evs = kernel_events(trace, ("kernel", "gpu_memcpy"))
    default, strict = kernel_breakdown(evs), kernel_breakdown(evs, copies_as_comm)
    # default: the DtoD copy [160,180) and the HtoD copy [500,510) are compute, the peer copy [400,430) exposed
    # communication
    assert default.compute_s == pytest.approx(270e-6) and default.comm_exposed_s == pytest.approx(150e-6)
    # strict: both copies (and the HtoD copy [500,510)) are communication, all of them exposed
    assert strict.compute_s == pytest.approx(240e-6) and strict.comm_exposed_s == pytest.approx(180e-6)
    assert strict.union_s["other_comm"] == pytest.approx(60e-6)


def test_cpu_ranks_break_down_their_operators_by_own_time(tmp_path: Path) -> None:
    """A trace without GPU kernels (CPU ranks): nested CPU operators count once each moment, for the innermost one
    (a sum of durations counted aten::linear and the aten::addmm inside it twice); gloo collectives are
    communication."""
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": 0, "dur": 10, "tid": 1, "pid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": 1, "dur": 7, "tid": 1, "pid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": 2, "dur": 1, "tid": 1, "pid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "gloo:all_reduce", "ts": 12, "dur": 4, "tid": 1, "pid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "ts": 5, "dur": 2, "tid": 2, "pid": 1},  # another thread
    ]
    p = tmp_path / "rank-0.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    row = breakdown_traces([p]).iloc[0]
    assert row["device"] == "cpu"
    assert row["gemm_attention_sum_s"] == pytest.approx(9e-6)  # addmm's own 6 us + linear's own 3 us
    assert row["memory_elementwise_sum_s"] == pytest.approx(3e-6)  # copy_ 1 us + mul 2 us (its own thread)
    assert row["all_reduce_sum_s"] == pytest.approx(4e-6)
    assert row["busy_s"] == pytest.approx(14e-6)  # 0-10 and 12-16 us: nothing counted twice


def test_step_breakdown_reads_the_allocator_counters_a_record_keeps(tmp_path: Path) -> None:
    """A rank's allocator counters over the measured steps (``provenance.ranks[].allocator``) become its row's
    ``alloc_retries`` and ``device_mallocs``; a rank (or a record from before them) without them is NaN. The
    counters' change is taken between the measured steps' first and last reading; a CPU rank has none."""
    import importlib.util
    import json

    import torch

    from calorimeter.train.loop import ALLOCATOR_COUNTERS, allocator_counts, counts_between

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("step_breakdown", root / "bench" / "step_breakdown.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cell = tmp_path / "cells" / "c1"
    cell.mkdir(parents=True)
    counts = {"num_alloc_retries": 3, "num_device_alloc": 40, "num_device_free": 38, "num_sync_all_streams": 3}
    (cell / "run.json").write_text(json.dumps({"cell_id": "c1", "status": "ok", "cell": {"cell_id": "c1"},
                                               "provenance": {"ranks": [{"rank": 0, "allocator": counts},
                                                                        {"rank": 1}]}}))
    got = mod.allocator(tmp_path)
    assert got.to_dict("records") == [{"cell_id": "c1", "rank": 0, "alloc_retries": 3, "device_mallocs": 40}]
    assert mod.allocator(tmp_path / "none").empty
    assert allocator_counts(torch.device("cpu")) is None
    before = dict.fromkeys(ALLOCATOR_COUNTERS, 5)
    assert counts_between(before, {k: v + 5 for k, v in counts.items()}) == counts
    assert counts_between(None, counts) is None

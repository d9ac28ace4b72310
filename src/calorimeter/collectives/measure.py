"""Time collectives over message sizes and group sizes on the ranks of a cell (torch.distributed, any backend).

Run on every rank of an initialised process group. For each group size (powers of two from 2 up to the world size),
the world is split into disjoint consecutive groups (``dist.new_subgroups``) that all run at once, as the tensor-
parallel groups of a training cell do; send/recv pairs neighbouring ranks. Each point: ``warmup`` untimed calls,
then ``iterations`` timed calls after a barrier and a device synchronisation; a rank's time per call is the mean
over them; the point's time is the slowest rank's (a collective ends when its last rank does), taken with an
all-reduce MAX over the world. Message sizes are powers of two from ``min_bytes`` to ``max_bytes``.

Wall-clock timing around a synchronised batch of calls (``torch.cuda.synchronize`` on CUDA) is what nccl-tests
reports as out-of-place time; it includes the launch overhead a training step also pays.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from calorimeter.collectives.table import bus_factor
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.work import COLLECTIVES
from calorimeter.telemetry.timer import synchronize, time_batch


@dataclass(frozen=True)
class SweepSpec:
    """What to measure.

    Attributes:
        min_bytes, max_bytes: message size range (powers of two in between).
        warmup: untimed calls per point.
        iterations: timed calls per point.
        ops: the collectives to time.
        dtype: element type (bf16 on CUDA, fp32 on CPU: gloo reduces no bf16).
    """

    min_bytes: int
    max_bytes: int
    warmup: int
    iterations: int
    ops: tuple[str, ...] = COLLECTIVES
    dtype: torch.dtype = torch.float32

    @classmethod
    def for_device(cls, device: torch.device, warmup: int, iterations: int) -> SweepSpec:
        """The default sweep of a device: 1 KiB to 256 MiB in bf16 on GPUs, 1 KiB to 1 MiB in fp32 on CPU ranks."""
        if device.type == "cuda":
            return cls(2**10, 2**28, warmup, iterations, dtype=torch.bfloat16)
        return cls(2**10, 2**20, warmup, iterations, dtype=torch.float32)

    def sizes(self) -> list[int]:
        """Message sizes in bytes."""
        lo, hi = int(math.log2(self.min_bytes)), int(math.log2(self.max_bytes))
        return [2**k for k in range(lo, hi + 1)]


def group_sizes(world: int) -> list[int]:
    """Powers of two from 2 up to the world size, plus the world size itself."""
    out, g = [], 2
    while g <= world:
        out.append(g)
        g *= 2
    if world > 1 and world not in out:
        out.append(world)
    return out


def _op(op: str, size: int, group: Any, g: int, rank_in_group: int, spec: SweepSpec,
        device: torch.device) -> Callable[[], None]:
    """A closure issuing one call of the collective ``op`` with a message of ``size`` bytes over ``group`` (``g``
    ranks)."""
    esize = torch.tensor([], dtype=spec.dtype).element_size()
    n = max(g, (size // esize) // g * g)  # elements, a multiple of the group size
    buf = torch.ones(n, dtype=spec.dtype, device=device)
    if op == "all_reduce":
        return lambda: dist.all_reduce(buf, group=group)
    if op == "all_gather":
        part = buf[: n // g]
        return lambda: dist.all_gather_into_tensor(buf, part, group=group)
    if op == "reduce_scatter":
        out = torch.empty(n // g, dtype=spec.dtype, device=device)
        return lambda: dist.reduce_scatter_tensor(out, buf, group=group)
    if op == "all_to_all":
        out = torch.empty_like(buf)
        return lambda: dist.all_to_all_single(out, buf, group=group)
    if op == "send_recv":
        ranks = dist.get_process_group_ranks(group)
        peer = ranks[rank_in_group ^ 1]
        out = torch.empty_like(buf)

        def sendrecv() -> None:
            ops = [dist.P2POp(dist.isend, buf, peer), dist.P2POp(dist.irecv, out, peer)]
            if rank_in_group % 2:
                ops.reverse()
            for req in dist.batch_isend_irecv(ops):
                req.wait()

        return sendrecv
    raise ValueError(f"unknown collective {op!r}; known: {', '.join(COLLECTIVES)}")


def _time_point(call: Callable[[], None], spec: SweepSpec, device: torch.device) -> float:
    for _ in range(spec.warmup):
        call()
    synchronize(device)
    dist.barrier()
    mine = time_batch(call, device, spec.iterations) / max(spec.iterations, 1)
    t = torch.tensor([mine], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def measure(spec: SweepSpec, device: torch.device, gpus_per_node: int,
            progress: Callable[[str], None] | None = None) -> list[JsonObject]:
    """Time every (collective, group size, message size) point; every rank calls this, every rank gets the rows.

    A collective the backend refuses is recorded once per group size with its error and no time.
    """
    world, rank = dist.get_world_size(), dist.get_rank()
    backend = dist.get_backend()
    dtype = str(spec.dtype).replace("torch.", "")
    rows: list[JsonObject] = []
    for g in group_sizes(world):
        group, _ = dist.new_subgroups(group_size=g) if g < world else (dist.group.WORLD, None)
        rank_in_group = rank % g
        nodes = max(1, math.ceil(g / max(gpus_per_node, 1)))
        for op in spec.ops:
            if op == "send_recv" and g != 2:
                continue
            for size in spec.sizes():
                base = {"kind": op, "group": g, "size_bytes": float(size), "iterations": spec.iterations,
                        "backend": backend, "dtype": dtype, "nodes": nodes}
                try:
                    t = _time_point(_op(op, size, group, g, rank_in_group, spec, device), spec, device)
                except (RuntimeError, ValueError) as e:  # unsupported by this backend: say so, keep going
                    rows.append({**base, "time_s": math.nan, "algbw_gbyte_s": math.nan, "busbw_gbyte_s": math.nan,
                                 "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"})
                    break
                algbw = size / t / 1e9
                rows.append({**base, "time_s": t, "algbw_gbyte_s": algbw,
                             "busbw_gbyte_s": algbw * (bus_factor(op, g) if op != "send_recv" else 1.0),
                             "error": None})
            if progress is not None and rows:
                progress(f"group {g} {op}: {rows[-1].get('busbw_gbyte_s', math.nan):.2f} GB/s busbw at "
                         f"{rows[-1]['size_bytes']:.0f} B")
    return rows

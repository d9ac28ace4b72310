"""The ``thermal-calibration`` cell kind: a standard load on every GPU of a node at once, to profile the host.

Each rank multiplies two square matrices on its own device (bf16 8192 x 8192 on GPUs, fp32 256 x 256 on CPU ranks)
in steps of about ``STEP_S`` seconds: ``cell.warmup_steps`` steps to let clocks and temperatures settle, then
``cell.measured_steps`` measured ones. The ranks start together (a barrier) and never synchronise in between, so
each GPU runs at its own sustained pace, as in the study's probe: every GPU under the same dense load, at its power
cap. The node sampler records the telemetry as for any cell; the profile (:mod:`calorimeter.placement.profile`)
is built from it and from each GPU's measured matmul rate, which is the speed the placement policies use.

With ``warmup_steps: 10, measured_steps: 30`` a calibration takes about 40 s plus process start (under a minute).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from calorimeter.plan.cell import Cell
from calorimeter.plan.json_types import JsonObject
from calorimeter.records.provenance import device_info
from calorimeter.records.rank import RankContext, RankResult
from calorimeter.telemetry.timer import time_batch
from calorimeter.train.loop import device_name, peak_memory_bytes

#: matrix size per accelerator kind
MATMUL_N = {"cuda": 8192, "cpu": 256}
#: target duration of one step (s)
STEP_S = 1.0


def load_text(n: int, dtype: str, per_step: int) -> str:
    """How the load is described in the record and the profile."""
    return f"{dtype} {n}x{n}x{n} matmul, {per_step} per step of ~{STEP_S:g} s, every GPU of the node at once"


def calibrate_rank(cell: Cell, device: torch.device,
                   step_callback: Callable[[int, str, float, float], None] | None = None) -> RankResult:
    """Run the calibration load on this rank; its result carries ``calibration`` (the load and the rates).

    Steps carry ``loss`` and ``grad_norm`` NaN (no model) and ``tflops`` (this rank's matmul rate in the step).
    """
    cuda = device.type == "cuda"
    n = MATMUL_N["cuda" if cuda else "cpu"]
    dtype = torch.bfloat16 if cuda else torch.float32
    gen = torch.Generator(device="cpu").manual_seed(int(cell.seed))
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)

    def run(k: int) -> float:
        return time_batch(lambda: torch.matmul(a, b, out=c), device, k)

    run(2)
    one = run(3) / 3
    per_step = max(1, round(STEP_S / max(one, 1e-6)))
    flops = 2.0 * n**3 * per_step
    if dist.is_initialized():
        dist.barrier()
    steps = []
    total = cell.warmup_steps + cell.measured_steps
    for step in range(total):
        phase = "warmup" if step < cell.warmup_steps else "measured"
        t_begin = time.time()
        dt = run(per_step)
        t_end = time.time()
        steps.append({"step": step, "phase": phase, "loss": math.nan, "grad_norm": math.nan, "time_s": dt,
                      "t_begin_s": t_begin, "t_end_s": t_end, "tflops": flops / dt / 1e12})
        if step_callback is not None:
            step_callback(step, phase, t_begin, t_end)
    if dist.is_initialized():
        dist.barrier()
    measured = [s["tflops"] for s in steps if s["phase"] == "measured"]
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    precision = str(dtype).replace("torch.", "")
    return RankResult(
        steps=steps, peak_memory_bytes=peak_memory_bytes(device), dp_rank=rank, dp_size=world, tp_rank=0,
        device=device_name(device), precision=precision,
        calibration={"load": load_text(n, precision, per_step), "n": n, "matmuls_per_step": per_step,
                     "tflops": sum(measured) / len(measured) if measured else math.nan,
                     "tflops_min": min(measured) if measured else math.nan,
                     "tflops_max": max(measured) if measured else math.nan})


def run_calibration(ctx: RankContext) -> RankResult:
    """Entry of the ``thermal-calibration`` kind on every rank: the load, then every GPU's rate gathered on rank 0.

    Returns this rank's result; rank 0's ``kind_metrics`` (the record's ``metrics``) hold the load and, per rank, its
    node, host, GPU (NVML index, UUID) and matmul rate, from which the host's profile is built.
    """
    out = calibrate_rank(ctx.cell, torch.device(ctx.rank.device))
    assert out.calibration is not None
    di = device_info(ctx.rank.device)
    mine: JsonObject = {"rank": ctx.rank.rank, "node": ctx.rank.node, "hostname": ctx.rank.hostname,
                            "nvml_index": di.get("nvml_index"), "uuid": di.get("uuid"), **out.calibration}
    gathered: list[Any] = [mine]
    if dist.is_initialized() and dist.get_world_size() > 1:
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, mine)
    out.kind_metrics = {"load": out.calibration["load"], "gpus": gathered}
    return out

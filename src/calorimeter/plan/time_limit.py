"""Cells that can never finish within the launcher's time limit are pruned before anything is submitted.

The plan knows each training cell's model FLOPs per iteration (:mod:`calorimeter.plan.flops`) and the steps it runs,
but not yet how fast it runs. It therefore holds a **lower bound** of the cell's run time against
``launcher.timeout_min``: every step at the hardware's dense bf16 peak per device (``peak_bf16_tflops``; for CPU
ranks, which have no honest peak, :data:`CPU_FLOPS_BOUND` per rank, above what one CPU core reaches), the least
steps the cell runs (``warmup_steps + measured_steps + profile_steps``), no start-up time. A cell whose lower bound
already exceeds the limit cannot finish in any run (a requeued job restarts from scratch), so it is pruned with the
estimate; a cell under it may still run out of time (``calorimeter status`` estimates the rest of a sweep from what
the finished cells achieved, :mod:`calorimeter.operate.eta`).
"""

from __future__ import annotations

from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import PROFILES, accelerator_of
from calorimeter.plan.kinds import get_kind

#: FLOP/s one CPU rank never exceeds (a core with two AVX-512 FMA units at 4 GHz peaks near 2.6e11 fp32 FLOP/s):
#: the bound for CPU ranks, which have no dense peak
CPU_FLOPS_BOUND = 1e12


def peak_flops_per_device(hardware: str) -> float | None:
    """FLOP/s a device of this hardware never exceeds (None when unknown: no bound, nothing pruned)."""
    profile = PROFILES.get(hardware)
    if profile is not None and profile.peak_bf16_tflops:
        return float(profile.peak_bf16_tflops) * 1e12
    return CPU_FLOPS_BOUND if accelerator_of(hardware) == "cpu" else None


def min_run_time_s(cell: Cell, model_flops_per_iteration: float, profile_steps: int = 0) -> float | None:
    """The least seconds a training cell's steps take (module docstring); None without a peak."""
    peak = peak_flops_per_device(cell.hardware)
    if peak is None or not model_flops_per_iteration > 0:
        return None
    steps = cell.warmup_steps + cell.measured_steps + profile_steps
    return steps * float(model_flops_per_iteration) / (cell.world_size * peak)


def time_limit_reasons(cell: Cell, estimates: dict[str, float], timeout_min: int, profile_steps: int = 0
                       ) -> list[str]:
    """A reason to prune the cell when even its lower-bound run time exceeds ``timeout_min`` (the bound is then set
    in ``estimates['min_run_time_s']``); else nothing (the estimates of a cell that runs are left as they are)."""
    flops = estimates.get("model_flops_per_iteration")
    if not get_kind(cell.kind).timed_by_flops or not flops:
        return []
    bound = min_run_time_s(cell, float(flops), profile_steps)
    if bound is None:
        return []
    if bound <= 60.0 * timeout_min:
        return []
    estimates["min_run_time_s"] = bound
    steps = cell.warmup_steps + cell.measured_steps + profile_steps
    return [f"needs at least {_duration(bound)} ({steps} steps of {float(flops):.3g} FLOP at "
            f"{peak_flops_per_device(cell.hardware):.3g} FLOP/s per device x {cell.world_size}), more than "
            f"launcher.timeout_min {timeout_min} min"]


def _duration(s: float) -> str:
    if s < 5400:
        return f"{s / 60:.3g} min"
    if s < 3 * 86400:
        return f"{s / 3600:.3g} h"
    return f"{s / 86400:.3g} days"

"""Train one cell on this rank: warmup steps, then measured steps, each timed and its global loss recorded."""

from __future__ import annotations

import contextlib
import dataclasses
import random
import resource
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import accelerator_of
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.models import get_model, padded_vocab_size
from calorimeter.records.paths import RunPaths
from calorimeter.records.progress import ProgressWriter
from calorimeter.records.provenance import cpu_model
from calorimeter.records.rank import RankContext, RankResult
from calorimeter.telemetry.timer import synchronize
from calorimeter.train.data import BatchLayout, make_source, micro_batches
from calorimeter.train.errors import CellOOMError
from calorimeter.train.gradients import capture_first_step
from calorimeter.train.steady import steady_schedule

StepCallback = Callable[[int, str, float, float], None]
"""``(step, phase, t_begin_s, t_end_s)`` called on every rank after each step (wall-clock ``time.time()`` seconds)."""


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def device_name(device: torch.device) -> str:
    """The accelerator's marketing name, or the CPU model for CPU ranks."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu: " + cpu_model()


def peak_memory_bytes(device: torch.device) -> int:
    """Peak memory of this rank: ``max_memory_allocated`` on CUDA, the process peak RSS on CPU."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


#: the CUDA caching allocator's counters (``torch.cuda.memory_stats`` names) whose change over the measured steps a
#: record keeps: a retry frees cached blocks and synchronises; device allocations and frees call cudaMalloc/cudaFree
ALLOCATOR_COUNTERS = ("num_alloc_retries", "num_device_alloc", "num_device_free", "num_sync_all_streams")


def allocator_counts(device: torch.device) -> dict[str, int] | None:
    """The allocator's counters now (None off CUDA: a CPU rank has no caching allocator)."""
    if device.type != "cuda":
        return None
    stats = torch.cuda.memory_stats(device)
    return {k: int(stats.get(k, 0)) for k in ALLOCATOR_COUNTERS}


def counts_between(before: dict[str, int] | None, after: dict[str, int] | None) -> dict[str, int] | None:
    """Each counter's change from ``before`` to ``after`` (None when either is missing)."""
    if before is None or after is None:
        return None
    return {k: after[k] - before[k] for k in ALLOCATOR_COUNTERS}


def _is_oom(e: BaseException) -> bool:
    return isinstance(e, torch.OutOfMemoryError) or (isinstance(e, RuntimeError) and "CUDA out of memory" in str(e))


def _plain_step(engine: Any, batches: Iterator[tuple[torch.Tensor, torch.Tensor]], grad_accum: int) -> torch.Tensor:
    """One optimizer step of a pp=1 engine; returns this rank's mean micro-batch loss (a tensor, not synced)."""
    total = None
    for _ in range(grad_accum):
        inputs, labels = next(batches)
        loss = engine(inputs, labels)
        engine.backward(loss)
        engine.step()
        total = loss.detach() if total is None else total + loss.detach()
    return total / grad_accum


def _grad_norm(engine: Any) -> float:
    """The global gradient norm DeepSpeed clipped with at the last step (NaN when the engine reports none)."""
    norm = engine.get_global_grad_norm()
    return float(norm) if norm is not None else float("nan")


def _profiler(trace_path: Path, device: torch.device) -> Any:
    """A torch.profiler context that writes a chrome trace of what it wraps to ``trace_path``."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    return profile(activities=activities, on_trace_ready=lambda p: p.export_chrome_trace(str(trace_path)))


def train_cell(cell: Cell, out_dir: Path, device: torch.device, step_callback: StepCallback | None = None,
               profile_steps: int = 0, profile_all_ranks: bool = False, gradients_out: Path | None = None,
               model_hook: Callable[[torch.nn.Module], torch.nn.Module] | None = None) -> RankResult:
    """Train ``cell`` on this rank and return its per-step record (the same losses on every rank).

    Must be called on every rank after ``torch.distributed.init_process_group`` (and, on CUDA,
    ``torch.cuda.set_device(local_rank)``). Runs the warm-up steps (until the GPU temperature is steady, or
    ``cell.warmup_steps``) then the measured steps (at least ``cell.measured_steps``; on GPUs at least
    ``cell.measured_min_s`` seconds), decided by all ranks together (:mod:`calorimeter.train.steady`); what was decided
    is in the record's ``warmup``. Each step is bracketed by device synchronisation; ``time_s`` comes from
    ``time.perf_counter`` and ``t_begin_s``/``t_end_s`` from ``time.time``. The loss of a step is the mean over the
    global batch (averaged over micro-batches and data-parallel ranks; read from the last pipeline stage and broadcast
    for pp>1), read once per step after the step's end timestamp.

    Args:
        cell: the cell to train.
        out_dir: the run's folder (traces and the steady-state warm-up's files go there).
        device: this rank's device (:attr:`calorimeter.records.rank.RankInfo.device`).
        step_callback: called as ``(step, phase, t_begin_s, t_end_s)`` after each step, e.g. to mark telemetry.
        profile_steps: extra steps after the measured ones, in phase ``profiled``, traced with torch.profiler on
            one rank per pipeline stage (data-parallel rank 0; tensor-parallel rank 0), or on every rank with
            ``profile_all_ranks``. Traces go to ``out_dir/traces/rank-<rank>.json.gz``. Profiled steps are never
            measured steps: the profiler's overhead stays out of the metrics.
        profile_all_ranks: trace every rank.
        model_hook: applied to the built model before the optimizer (kind ``lora``: adapters, frozen base).
        gradients_out: save the full gradients of the first optimizer step there (rank 0, ``torch.save``;
            :mod:`calorimeter.train.gradients`), to compare parallel layouts tensor by tensor.

    Returns:
        This rank's result: ``steps`` (``{step, phase, loss, grad_norm, time_s, t_begin_s, t_end_s}``; ``grad_norm``
        is the global gradient norm before clipping, as DeepSpeed computed it), peak memory, parameters, device,
        the rank's stage and data-/tensor-parallel ranks, precision, ``warmup`` and ``engine`` (kernels and overlap
        mechanisms the engine chose: :func:`calorimeter.train.engine.engine_record`).

    Raises:
        CellOOMError: when the rank runs out of GPU memory while building or training.
    """
    from calorimeter.train.engine import build_engine, release_engine, use_bf16  # heavy: DeepSpeed

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seed_everything(cell.seed)
    spec = get_model(cell.model)
    model_spec = dataclasses.replace(spec, vocab_size=padded_vocab_size(spec, cell.tp))
    steps: list[JsonObject] = []
    try:
        te = build_engine(cell, model_spec, device, model_hook=model_hook)
        engine = te.engine
        if gradients_out is not None:
            capture_first_step(te, Path(gradients_out))
        layout = BatchLayout.of(cell, te.dp_size, te.dp_rank)
        source = make_source(cell.dataset, spec.vocab_size, cell.seq_len, cell.seed)
        batches = micro_batches(source, layout, device=None if te.pipeline else device)
        dp_group = None if te.pipeline else te.dp_group  # the pipeline engine already averages over dp
        engine.train()
        schedule = steady_schedule(cell, Path(out_dir), device, profile_steps)
        traced = profile_steps > 0 and (profile_all_ranks or (te.dp_rank == 0 and te.tp_rank == 0))
        trace_path = RunPaths(Path(out_dir)).trace(dist.get_rank())
        alloc_from = alloc_to = None  # the allocator's counters around the measured steps
        for step, phase in enumerate(schedule):
            ctx = _profiler(trace_path, device) if (phase == "profiled" and traced) else contextlib.nullcontext()
            synchronize(device)
            if phase == "measured" and alloc_from is None:
                alloc_from = allocator_counts(device)
            elif phase != "measured" and alloc_from is not None and alloc_to is None:  # the measured steps ended
                alloc_to = allocator_counts(device)
            t_begin_s, p_begin = time.time(), time.perf_counter()
            with ctx:
                if te.pipeline:
                    loss = engine.train_batch(data_iter=batches).detach()
                else:
                    loss = _plain_step(engine, batches, layout.grad_accum)
                synchronize(device)
            p_end, t_end_s = time.perf_counter(), time.time()
            schedule.done(p_end - p_begin)
            if dp_group is not None and te.dp_size > 1:
                loss = loss.float().clone()
                dist.all_reduce(loss, group=dp_group)  # gloo has no AVG: sum, then divide
                loss /= te.dp_size
            steps.append({"step": step, "phase": phase, "loss": float(loss.item()),
                          "grad_norm": _grad_norm(engine), "time_s": p_end - p_begin,
                          "t_begin_s": t_begin_s, "t_end_s": t_end_s})
            if step_callback is not None:
                step_callback(step, phase, t_begin_s, t_end_s)
    except Exception as e:
        if _is_oom(e):
            raise CellOOMError(peak_memory_bytes(device), str(e).splitlines()[0] if str(e) else "") from e
        raise
    if alloc_from is not None and alloc_to is None:  # the schedule ended on a measured step
        alloc_to = allocator_counts(device)
    result = RankResult(steps=steps, peak_memory_bytes=peak_memory_bytes(device), stage=te.stage,
                        num_stages=te.num_stages, dp_rank=te.dp_rank, dp_size=te.dp_size, tp_rank=te.tp_rank,
                        device=device_name(device), precision="bf16" if use_bf16(cell, device) else "fp32",
                        parameters_on_rank=te.parameters_on_rank, parameters_model=te.parameters_model,
                        traced=traced, engine=te.engine_info, warmup=schedule.record(),
                        allocator=counts_between(alloc_from, alloc_to))
    release_engine(te)
    return result


def run_train(ctx: RankContext, model_hook: Callable[[torch.nn.Module], torch.nn.Module] | None = None) -> RankResult:
    """Kind ``train`` (:data:`calorimeter.plan.kinds.KINDS`): the training loop with the sweep's profiling settings;
    rank 0 writes the run's progress file (one line per finished step, :mod:`calorimeter.records.progress`).
    ``model_hook`` (kind ``lora``) changes the built model before the optimizer sees it."""
    cell = ctx.cell
    profile_steps = ctx.telemetry.profile_steps
    progress = None
    if ctx.rank.rank == 0:
        fixed = cell.warmup == "fixed" or accelerator_of(cell.hardware) == "cpu"
        progress = ProgressWriter(ctx.run.progress, cell, profile_steps, fixed)
    return train_cell(cell, ctx.run.root, torch.device(ctx.rank.device), step_callback=progress,
                      profile_steps=profile_steps, profile_all_ranks=ctx.telemetry.profile_all_ranks,
                      model_hook=model_hook)

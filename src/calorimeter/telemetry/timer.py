"""Device time of a piece of work: the one timer of every measurement that times calls on an accelerator.

Two ways, each for its question:

* :func:`time_calls`: each call on its own, with CUDA events around it on a GPU (the GPU's time from the first
  kernel launched to the last one done, without the host's wait) and a synchronised wall clock elsewhere; what a
  kernel choice is made on (attention backends, fused kernels);
* :func:`time_batch`: ``calls`` back-to-back calls between two device synchronisations, by wall clock: the launch
  overhead a training step also pays is in it (nccl-tests' out-of-place time; a standard matmul load).

Importing this module imports torch: only the in-job kinds and the benchmarks use it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def synchronize(device: torch.device) -> None:
    """Wait for all work queued on ``device`` (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(fn: Callable[[], object], device: torch.device, reps: int, warmup: int = 1) -> list[float]:
    """Seconds of each of ``reps`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
        else:
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return times


def time_batch(fn: Callable[[], object], device: torch.device, calls: int) -> float:
    """Seconds of ``calls`` back-to-back calls of ``fn``, from a synchronised device to a synchronised device."""
    synchronize(device)
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    synchronize(device)
    return time.perf_counter() - t

"""Iteration time from per-stage compute and communication: 1F1B pipeline, ZeRO-3 prefetch overlap, gradient
accumulation and the end-of-iteration gradient synchronisation.

Per stage ``s`` and micro-batch, ``t_s`` = compute (without the optimizer) + exposed tensor/expert-parallel
collectives + pipeline sends + the part of ZeRO-3's parameter traffic its prefetch cannot hide. DeepSpeed's 1F1B
schedule then takes ``sum_s t_s + (m - 1) max_s t_s`` for ``m`` micro-batches (every micro-batch crosses every
stage once; the slowest stage paces the steady state); with ``pp = 1`` that is ``m t``. The step after the last
micro-batch adds the optimizer, the gradient all-reduce of ZeRO 0-2 and the parameter all-gather of ZeRO 1-2 (the
traces of the measured ZeRO-1 cells show that all-reduce after the backward pass even with ``overlap_comm`` on), and
the host gaps: the GPU idles while the host launches kernels (fitted per layer pass and per iteration).

Host-bound stages: where the host needs at least :data:`HOST_BOUND_BUSY_FRAC` of the GPU's time to issue a
micro-batch (the launch time, fitted on the iteration times of host-bound cells), two behaviours were measured
(docs/projection.md). ZeRO-3's module hooks wait for their collectives, so host and GPU take turns and the idle
adds to the GPU time: ZeRO-3 dp2 idles about 0.3 s per iteration at sequence 2048 and 4096 alike while its GPU work
doubles (the idle fitted per ZeRO-3 call). Tensor-parallel collectives are enqueued without waiting, so the host
runs ahead and the stage lasts as long as the larger of GPU and launch time: TP2+SP with overlap takes 1.30-1.36 s
per iteration at sequence 1024 and 2048 on one machine, 1.33-1.36 s at 4096 on another (no idle is fitted for them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from calorimeter.plan.work import COLLECTIVES, CommOp

#: a cell whose GPUs are busy for less than this share of the iteration is host-bound; a stage whose host launch time
#: reaches this share of its GPU time is predicted host-bound
HOST_BOUND_BUSY_FRAC = 0.80


@dataclass
class StageTime:
    """One stage's modelled time, seconds per iteration unless named per micro-batch."""

    stage: int
    micro_batches: int
    compute_s: dict[str, float]
    optimizer_s: float
    comm_busy_s: dict[str, float] = field(default_factory=dict)
    comm_exposed_s: dict[str, float] = field(default_factory=dict)
    step_exposed_s: dict[str, float] = field(default_factory=dict)
    per_micro_batch_s: float = 0.0
    step_s: float = 0.0
    host_gap_s: tuple[float, float] = (0.0, 0.0)
    launch_wait_s: float = 0.0


def stage_time(stage: int, micro_batches: int, compute_s: dict[str, float], optimizer_s: float,
               ops: list[tuple[CommOp, float]], overlap: bool, host_gap_s: tuple[float, float] = (0.0, 0.0),
               tp_hidden: float = 0.0, launch_s: float = 0.0, idle_s: float = 0.0) -> StageTime:
    """Combine one stage's compute and its collectives (each with its modelled seconds per iteration).

    Args:
        host_gap_s: (seconds spread over the micro-batches, seconds once per iteration) the GPU idles while the
            host launches kernels.
        launch_s: seconds the host needs to issue one iteration of the stage (0: never calibrated).
        idle_s: seconds the GPU idles per iteration where the stage is host-bound (0: never calibrated).
    """
    m = max(micro_batches, 1)
    busy = dict.fromkeys(COLLECTIVES, 0.0)
    exposed = dict.fromkeys(COLLECTIVES, 0.0)
    step = dict.fromkeys(COLLECTIVES, 0.0)
    compute_mb = (sum(compute_s.values()) - optimizer_s) / m
    z3 = [(op, t) for op, t in ops if op.role == "zero3"]
    for op, t in ops:
        busy[op.kind] += t
        if op.role == "zero3":
            continue
        if op.role == "dp":
            step[op.kind] += t
        elif op.role == "tp":
            exposed[op.kind] += t * (1.0 - tp_hidden)
        else:
            exposed[op.kind] += t
    if z3:
        total = sum(t for _, t in z3)
        if all(op.overlap == "overlapped" for op, _ in z3):
            # prefetch hides the gathers under compute; the first module of every pass waits for its gather
            modules = max(max(op.calls for op, _ in z3) / m, 1.0)
            visible = max(0.0, total - compute_mb * m) + total / modules
        else:
            visible = total
        for op, t in z3:
            exposed[op.kind] += visible * t / total if total else 0.0
    gpu_mb = compute_mb + sum(exposed.values()) / m + host_gap_s[0] / m
    if idle_s > 0.0 and launch_s / m >= HOST_BOUND_BUSY_FRAC * gpu_mb:  # host and GPU take turns (ZeRO-3)
        per_mb = gpu_mb + max(0.0, (idle_s - host_gap_s[0]) / m)
    else:  # the host runs ahead: its launch time is a floor
        per_mb = max(gpu_mb, launch_s / m)
    step_s = optimizer_s + sum(step.values()) + host_gap_s[1]
    return StageTime(stage, m, compute_s, optimizer_s, busy, exposed, step, per_mb, step_s, host_gap_s,
                     m * (per_mb - gpu_mb))


@dataclass
class IterationTime:
    """The pipeline's iteration time and its split on the critical (slowest) stage.

    Attributes:
        iteration_s: seconds per iteration.
        critical_stage: index of the slowest stage.
        bubble_s: time the critical stage waits for the others (pipeline fill and drain).
        stages: every stage's time.
    """

    iteration_s: float
    critical_stage: int
    bubble_s: float
    stages: list[StageTime]


def pipeline_time(stages: list[StageTime]) -> IterationTime:
    """1F1B over the stages (pp = 1: the single stage)."""
    m = stages[0].micro_batches
    per = [s.per_micro_batch_s for s in stages]
    slowest = max(per)
    crit = per.index(slowest)
    step = max(s.step_s for s in stages)
    total = sum(per) + (m - 1) * slowest + step
    busy_crit = m * slowest + stages[crit].step_s
    return IterationTime(total, crit, max(0.0, total - busy_crit), stages)

"""Iteration time from per-stage compute and communication: 1F1B pipeline, ZeRO-3 prefetch overlap, gradient
accumulation and the end-of-iteration gradient synchronisation.

Per stage ``s`` and micro-batch, ``t_s`` = compute (without the optimizer) + exposed tensor/expert-parallel
collectives + pipeline sends + the part of ZeRO-3's parameter traffic its prefetch cannot hide. DeepSpeed's 1F1B
schedule then takes ``sum_s t_s + (m - 1) max_s t_s`` for ``m`` micro-batches (every micro-batch crosses every
stage once; the slowest stage paces the steady state); with ``pp = 1`` that is ``m t``. The step after the last
micro-batch adds the optimizer, the gradient all-reduce of ZeRO 0-2 and the parameter all-gather of ZeRO 1-2 (the
traces of the measured ZeRO-1 cells show that all-reduce after the backward pass even with ``overlap_comm`` on), and
the host gaps: the GPU idles while the host launches kernels (fitted per layer pass and per iteration).
Where the host needs at least :data:`HOST_BOUND_BUSY_FRAC` of the GPU's time to issue a micro-batch (the launch time,
fitted on the iteration times of host-bound cells), the stage is host-bound; how host and GPU share the time
depends on whether the host waits for its collectives (docs/projection.md):

ZeRO-3 stages: DeepSpeed's module hooks issue every parameter gather and gradient reduce-scatter from the host, and
the host may run only a little ahead of the GPU (its fetch coordinator blocks on the oldest outstanding gather once
more than two are in flight, ``__max_ongoing_fetch_events = 2``; the reduce-scatters likewise), so host and GPU form a
two-stage line with a short buffer between them. With the host needing ``H`` seconds per iteration for those calls and
the GPU ``G`` seconds of work, each varying from call to call (taken as exponential), a line with room for two calls
(the one the GPU runs and one queued) leaves the GPU idle for ``H^2 / (H + G)`` per iteration (:func:`tandem_idle_s`):
about ``H - G`` where the host dominates, falling as ``H^2 / G`` where the GPU's work does. The iteration then lasts
``(H^2 + H G + G^2) / (H + G)``: ``1.5 H`` at ``G = H``, between ``max(H, G)`` (an unbounded buffer) and ``H + G``
(host and GPU taking turns, no buffer). Room for two calls is DeepSpeed's lookahead and gives the fall measured on the
2x H200 ZeRO-3 dp2 cells (1.2-2.5 ms idle per call at 2.3-3.3 ms of GPU work per call, 0.2-0.7 ms at 8-14 ms: roughly
``1 / G``, idle times work 1.6-9.8 ms^2 at either end, the host's run-to-run spread in between; room for three would
fall as ``1 / G^2``). The idle is added in every ZeRO-3 stage (no threshold, so no jump between regimes) where it
exceeds the stage's host gaps, which it then replaces (both are GPU idle between kernels; the host gaps, fitted on
GPU-bound cells, stay the floor). Tensor-parallel collectives are enqueued without waiting, so the host runs ahead and
a stage without ZeRO-3 calls lasts as long as the larger of GPU and launch time: TP2+SP with overlap takes 1.30-1.36 s
per iteration at sequence 1024 and 2048 on one machine, 1.33-1.36 s at 4096 on another (no idle is fitted for them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from calorimeter.plan.work import COLLECTIVES, CommOp

#: a cell whose GPUs are busy for less than this share of the iteration is host-bound; a stage whose host launch time
#: reaches this share of its GPU time is predicted host-bound
HOST_BOUND_BUSY_FRAC = 0.80


def tandem_idle_s(host_s: float, gpu_s: float) -> float:
    """Seconds the GPU idles per iteration in a ZeRO-3 stage whose host needs ``host_s`` for its ZeRO-3 calls and
    whose GPU has ``gpu_s`` of work: ``H^2 / (H + G)``.

    Host and GPU as a two-stage line, exponential times per call (mean ``h = H / n`` host, ``g = G / n`` GPU), the host
    blocked while two calls wait for or run on the GPU: the GPU's queue is an M/M/1/2 queue with load
    ``rho = g / h``, empty for a share ``P0 = 1 / (1 + rho + rho^2)`` of the time, so each call takes
    ``g / (1 - P0)`` and the GPU idles ``g P0 / (1 - P0) = h^2 / (h + g)`` per call; summed over the ``n`` calls the
    count drops out. 0 without host time."""
    if host_s <= 0.0:
        return 0.0
    return host_s * host_s / (host_s + max(gpu_s, 0.0))


def tandem_host_s(idle_s: float, gpu_s: float) -> float:
    """The host seconds per iteration that :func:`tandem_idle_s` turns into ``idle_s`` of GPU idle next to ``gpu_s``
    of GPU work (its inverse in the host time: ``H = (I + sqrt(I^2 + 4 G I)) / 2``); 0 for no idle."""
    if idle_s <= 0.0:
        return 0.0
    g = max(gpu_s, 0.0)
    return 0.5 * (idle_s + (idle_s * idle_s + 4.0 * g * idle_s) ** 0.5)


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
               tp_hidden: float = 0.0, launch_s: float = 0.0, z3_host_s: float = 0.0) -> StageTime:
    """Combine one stage's compute and its collectives (each with its modelled seconds per iteration).

    Args:
        host_gap_s: (seconds spread over the micro-batches, seconds once per iteration) the GPU idles while the
            host launches kernels.
        launch_s: seconds the host needs to issue one iteration of the stage (0: never calibrated).
        z3_host_s: seconds the host needs per iteration for the stage's ZeRO-3 calls (0: none, or never
            calibrated): the GPU idles :func:`tandem_idle_s` of it and its GPU work.
    """
    m = max(micro_batches, 1)
    busy = dict.fromkeys(COLLECTIVES, 0.0)
    exposed = dict.fromkeys(COLLECTIVES, 0.0)
    step = dict.fromkeys(COLLECTIVES, 0.0)
    compute_mb = (sum(compute_s.values()) - optimizer_s) / m
    z3 = [(op, t) for op, t in ops if op.role == "zero3"]
    for op, t in ops:
        busy[op.collective] += t
        if op.role == "zero3":
            continue
        if op.role == "dp":
            step[op.collective] += t
        elif op.role == "tp":
            exposed[op.collective] += t * (1.0 - tp_hidden)
        else:
            exposed[op.collective] += t
    if z3:
        total = sum(t for _, t in z3)
        if all(op.overlap == "overlapped" for op, _ in z3):
            # prefetch hides the gathers under compute; the first module of every pass waits for its gather
            modules = max(max(op.calls for op, _ in z3) / m, 1.0)
            visible = max(0.0, total - compute_mb * m) + total / modules
        else:
            visible = total
        for op, t in z3:
            exposed[op.collective] += visible * t / total if total else 0.0
    gpu_mb = compute_mb + sum(exposed.values()) / m + host_gap_s[0] / m
    step_s = optimizer_s + sum(step.values()) + host_gap_s[1]
    if z3_host_s > 0.0:  # ZeRO-3: the host waits for its collectives, a short line (the idle replaces the gaps)
        gpu_s = sum(compute_s.values()) + sum(exposed.values()) + sum(step.values())
        per_mb = gpu_mb + max(0.0, (tandem_idle_s(z3_host_s, gpu_s) - host_gap_s[0]) / m)
    else:  # the host runs ahead: its launch time is a floor
        per_mb = max(gpu_mb, launch_s / m)
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


def untimed_schedule(pp_schedule: str | None) -> str:
    """Why the model cannot time a pipeline schedule ("" for DeepSpeed's 1F1B, the one :func:`pipeline_time`
    times): a row under another is refused, and its cells neither calibrate nor count in a validation."""
    if not pp_schedule or pp_schedule != pp_schedule:  # unset (None, or NaN in a table)
        return ""
    return (f"pipeline schedule {pp_schedule}: the model times DeepSpeed's 1F1B only, and no {pp_schedule} cell has "
            "measured what another schedule's idle time would be")


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

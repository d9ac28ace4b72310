"""How long the rest of a sweep takes: the plan's FLOPs per iteration, scaled by what the finished cells achieved.

For each hardware profile, the finished ``ok`` training cells give (medians over them):

* the achieved model FLOP/s per device (``model_flops_per_iteration / iteration_time_s / world_size``);
* the time around the steps (launch, start-up, collection): wall time minus the warm-up and the stepped time;
* with ``warmup: steady``, the warm-up's length in seconds.

Before a cell of a hardware profile has finished, its training cells take their projected wall time
(:mod:`calorimeter.projection.cost`: the committed calibration's step time, the cell's warm-up and measured steps and
the measured start-up); from the first finished cell on, what the finished cells achieved. A cell left then takes:
that overhead + its steps' time, each step ``model_flops_per_iteration / (world_size x
FLOP/s per device)``; with a fixed warm-up (CPU ranks, ``warmup: fixed``) ``warmup_steps + measured_steps +
profile_steps`` steps, with a steady one the warm-up's seconds + ``max(measured_steps steps, measured_min_s)`` +
the profiled steps. A running cell takes the larger of what its progress file says is left and its estimate minus
its time so far (:func:`running_left_s`). Non-training kinds take the median wall time of their kind's finished
cells. The sweep's ETA divides the work left by the cells running now (at least one; a local sweep runs one cell at
a time) and is never shorter than the longest running cell's remaining time. Cells of a hardware or kind without
a finished cell and without a projected wall time have no estimate and are counted apart. It is an estimate: layouts
differ in efficiency.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from calorimeter.operate.state import CellStatus
from calorimeter.plan.hardware import accelerator_of
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.kinds import kind_of
from calorimeter.plan.plan import PlannedCell
from calorimeter.projection.cost import CellCost, duration, record_timing
from calorimeter.records.run_record import RunRecord


@dataclass(frozen=True)
class Basis:
    """What the finished cells of one hardware profile achieved."""

    flops_per_s_per_device: float
    overhead_s: float
    warmup_s: float
    cells: int


@dataclass
class Eta:
    """The estimate for the rest of a sweep."""

    seconds: float | None
    cells_left: int
    cells_without_estimate: int
    running: int
    parallel: int
    based_on: int
    #: cells left estimated from their projected wall time (no finished cell of their hardware yet)
    projected: int = 0

    def to_dict(self) -> JsonObject:
        """JSON-able."""
        return {"eta_s": self.seconds, "cells_left": self.cells_left,
                "cells_without_estimate": self.cells_without_estimate, "running": self.running,
                "parallel": self.parallel, "based_on_finished_cells": self.based_on,
                "cells_from_projection": self.projected}

    def _basis(self) -> str:
        """What the estimate rests on."""
        parts = []
        if self.based_on:
            parts.append(f"from {n_cells(self.based_on)} finished")
        if self.projected:
            parts.append(f"{n_cells(self.projected)} from projected wall times until a cell of their hardware "
                         "finishes")
        return "; ".join(parts)

    def describe(self) -> str:
        """One line for the terminal."""
        if not self.cells_left:
            return "ETA: nothing left to run"
        where = f"{n_cells(self.cells_left)} left, {self.running} running"
        if self.seconds is None:
            return f"ETA: unknown until a cell of each hardware and kind finishes ({where})"
        basis = self._basis()
        if self.cells_without_estimate:
            return (f"ETA: at least ~{format_duration(self.seconds)} ({where}, {self.parallel} at a time; "
                    f"{n_cells(self.cells_without_estimate)} without an estimate until a cell of their hardware and "
                    f"kind finishes{'; ' + basis if basis else ''})")
        return f"ETA: ~{format_duration(self.seconds)} ({where}, {self.parallel} at a time; {basis})"


def n_cells(n: int) -> str:
    """``1 cell``, ``2 cells``."""
    return f"{n} cell" if n == 1 else f"{n} cells"


def format_duration(seconds: float | None) -> str:
    """``45 s``, ``12 min``, ``3.4 h`` (:func:`calorimeter.projection.cost.duration`)."""
    if seconds is None:
        return "-"
    return duration(max(seconds, 0.0) if seconds == seconds else seconds)  # a clock read early: never "-0 s"


def _timed_by_flops(kind: str) -> bool:
    """Whether a kind's time is estimated from its FLOPs (:attr:`calorimeter.plan.kinds.CellKind.timed_by_flops`);
    the others from their kind's finished cells."""
    known = kind_of(kind)
    return known is not None and known.timed_by_flops


def _is_fixed(pc: PlannedCell) -> bool:
    return pc.cell.warmup == "fixed" or accelerator_of(pc.cell.hardware) == "cpu"


def _finished_sample(rec: RunRecord) -> tuple[float, float, float] | None:
    """(FLOP/s per device, overhead s, warm-up s) of one finished ok training record (overhead NaN where its wall
    time covers only the wait after re-attaching)."""
    it, flops, world = rec.metrics.get("iteration_time_s"), rec.metrics.get("model_flops_per_iteration"), \
        rec.cell.get("world_size")
    timing = record_timing(rec)
    if timing is None or not all(isinstance(x, int | float) and x > 0 for x in (flops, world)):
        return None
    overhead, warm = timing
    return flops / it / world, overhead, warm


def bases(statuses: list[CellStatus]) -> dict[str, Basis]:
    """Per hardware profile: what its finished ok training cells achieved (medians)."""
    samples: dict[str, list[tuple[float, float, float]]] = {}
    for cs in statuses:
        rec = cs.record
        if cs.state != "ok" or rec is None or not _timed_by_flops(rec.kind):
            continue
        s = _finished_sample(rec)
        if s is not None:
            samples.setdefault(str(rec.cell.get("hardware")), []).append(s)
    out = {}
    for hw, ss in samples.items():
        overheads = [o for _, o, _ in ss if o == o]
        out[hw] = Basis(statistics.median(f for f, _, _ in ss), statistics.median(overheads) if overheads else 0.0,
                        statistics.median(w for _, _, w in ss), len(ss))
    return out


def cell_estimate_s(pc: PlannedCell, basis: Basis | None, profile_steps: int) -> float | None:
    """Seconds a training cell takes from submission to record (None without a basis)."""
    c = pc.cell
    flops = pc.estimates.get("model_flops_per_iteration")
    if basis is None or not flops or basis.flops_per_s_per_device <= 0:
        return None
    step = float(flops) / (c.world_size * basis.flops_per_s_per_device)
    if _is_fixed(pc):
        train = (c.warmup_steps + c.measured_steps + profile_steps) * step
    else:
        warm = min(max(basis.warmup_s, c.warmup_min_s), c.warmup_max_s)
        train = warm + max(c.measured_steps * step, c.measured_min_s) + profile_steps * step
    return basis.overhead_s + train


def running_left_s(cs: CellStatus, estimate_s: float | None) -> float | None:
    """Seconds a running cell has left: the larger of what its progress says (its own step time for each step left;
    the steps only) and its estimate minus its time so far (which holds the time around the steps: collecting the
    ranks' results, writing the record)."""
    by_estimate = max(estimate_s - (cs.elapsed_s or 0.0), 0.0) if estimate_s is not None else None
    if cs.progress is None or not cs.progress.steps:
        return by_estimate
    by_progress = cs.progress.remaining_s()
    return by_progress if by_estimate is None else max(by_progress, by_estimate)


def estimate(cells: list[PlannedCell], statuses: list[CellStatus], profile_steps: int,
             projected: dict[str, CellCost] | None = None) -> Eta:
    """The ETA of the cells still to run (planned, queued, running); failed and interrupted cells wait for a rerun
    and are not counted. ``projected``: cell id -> projected wall time, for training cells of a hardware without a
    finished cell."""
    by_hw = bases(statuses)
    kind_walls: dict[str, list[float]] = {}
    for cs in statuses:
        rec = cs.record
        if cs.state == "ok" and rec is not None and not _timed_by_flops(rec.kind) and isinstance(cs.elapsed_s,
                                                                                                int | float):
            kind_walls.setdefault(rec.kind, []).append(float(cs.elapsed_s))
    left: list[float] = []
    running_left: list[float] = []
    missing = n_projected = 0
    n_left = n_running = 0
    for pc, cs in zip(cells, statuses, strict=True):
        if cs.state not in ("planned", "queued", "running"):
            continue
        n_left += 1
        if _timed_by_flops(pc.cell.kind):
            est = cell_estimate_s(pc, by_hw.get(pc.cell.hardware), profile_steps)
            proj = (projected or {}).get(pc.cell.cell_id)
            if est is None and proj is not None and proj.projected:
                est, n_projected = proj.wall_s, n_projected + 1
        else:
            walls = kind_walls.get(pc.cell.kind)
            est = statistics.median(walls) if walls else None
        if cs.state == "running":
            n_running += 1
            est = running_left_s(cs, est)
            if est is not None:
                running_left.append(est)
        if est is None:
            missing += 1
        else:
            left.append(est)
    parallel = max(n_running, 1)
    based_on = sum(b.cells for b in by_hw.values()) + sum(len(w) for w in kind_walls.values())
    seconds = None
    if left:
        seconds = max(sum(left) / parallel, max(running_left, default=0.0))
    return Eta(seconds, n_left, missing, n_running, parallel, based_on, n_projected)

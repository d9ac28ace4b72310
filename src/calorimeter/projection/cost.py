"""What a sweep costs before it runs: each cell's projected wall time and the sweep's GPU-hours, with the band.

A training cell's wall time is its start-up, warm-up, measured and profiled steps, from its projected step time
(:meth:`calorimeter.projection.model.Projector.project`: the iteration time and its band, ``iteration_time_s_low`` /
``_high``) and its own warm-up and measurement settings, as the engine runs them (:mod:`calorimeter.train.steady`):

* ``warmup: fixed``: ``warmup_steps`` steps;
* ``warmup: steady``: until every GPU's temperature is steady, at least ``warmup_steps`` steps, the slope window
  (``steady_window_s``) and ``warmup_min_s``, at most the cap: ``warmup_max_steps`` steps or the first step past
  ``warmup_max_s``. Projected at the cap (most measured steady warm-ups ran to it: :class:`Timing` counts them), the
  band's low end at the least the rule allows;
* measured: ``max(measured_steps, ceil(measured_min_s / step))`` steps, then ``profile_steps`` profiled steps;
* start-up (launch, model build, collecting the record): the median over the calibration's measured training cells
  of their wall time minus warm-up and steps, the band their range. Measured on 1 to 8 GPUs of one node: larger cells
  are assumed to start as fast (their start-up was never measured), and the cost says so.

GPU-hours are wall time x GPUs. Cells the projection cannot cover are counted apart, each with the reason, never as
zero: other kinds than training (``command``, calibration kinds), CPU ranks, a GPU type without a calibration of its
own, and rows the projection refuses (:mod:`calorimeter.projection.study`).

The committed calibration (the catalogue's pricing set, :func:`committed_set`: ``calibration.json`` and
``timing.json``) is what ``calorimeter
plan``, ``snakemake -n`` and ``calorimeter status`` use. Projecting needs pandas and the fitted model (seconds to
import); each cell's projected step is kept in a small cache (:func:`cache_path`) keyed by the calibration file, the
code that projects and the cell with its model and hardware definitions, so a plan whose cells were projected before
reads the cache and imports nothing heavy.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import get_profile
from calorimeter.plan.kinds import get_kind, kinds_where
from calorimeter.plan.models import get_model
from calorimeter.projection.catalogue import catalogue, repo_root
from calorimeter.projection.coverage import reason_kind, uncovered
from calorimeter.records.atomic import write_json_atomic

if TYPE_CHECKING:
    from calorimeter.plan.plan import Plan
    from calorimeter.projection.collectives import NetworkOverride
    from calorimeter.records.run_record import RunRecord

CALIBRATION_FILE, TIMING_FILE = "calibration.json", "timing.json"
#: the package folders whose code decides a projected step (the cache's key)
_CODE_DIRS = ("projection", "plan")
_CODE_FILES = ("records/metrics.py",)
CACHE_VERSION = 1


def committed_set() -> Path:
    """The committed set whose calibration prices sweeps before they run (the catalogue's ``prices``), found from the
    working directory first (the workflow's), else the package's repository."""
    prices = catalogue().prices
    here = Path(prices)
    return here if (here / CALIBRATION_FILE).is_file() else repo_root() / prices


# ---- measured start-up and warm-up (timing.json) ----


def record_timing(rec: RunRecord) -> tuple[float, float] | None:
    """(start-up s, warm-up s) of one finished ok training record: the wall time minus the warm-up and the stepped
    time (launch, start-up, collection), and the warm-up's seconds (``warmup.seconds``, else its steps x the step).
    Start-up NaN for a record whose wall time covers only the wait after re-attaching. None without the numbers."""
    m = rec.metrics
    wall, it = rec.launcher.get("wall_time_s"), m.get("iteration_time_s")
    if not all(isinstance(x, int | float) and x > 0 for x in (wall, it)):
        return None
    phases = [s.get("phase") for s in rec.loss]
    warm = float(rec.warmup.get("seconds") or 0.0) or phases.count("warmup") * it
    stepped = warm + (phases.count("measured") + phases.count("profiled")) * it
    if rec.launcher.get("reattached"):
        return math.nan, warm
    return max(wall - stepped, 0.0), warm


class StartupStats(TypedDict):
    """Measured start-up seconds of one GPU type's training cells, and their GPU counts."""

    median: float
    min: float
    max: float
    n: int
    gpus: list[int]


class HardwareTiming(TypedDict, total=False):
    """One GPU type's measured start-up and how its steady warm-ups ended (``n``, ``capped``)."""

    startup_s: StartupStats
    steady_warmup: dict[str, int]


class TimingFile(TypedDict):
    """``timing.json``: the sweep folders measured, and per GPU type its timing."""

    sources: list[str]
    hardware: dict[str, HardwareTiming]


def measure_timing(sources: list[str], root: str | Path = ".") -> TimingFile:
    """Per GPU type, the start-up of the ok training cells of these sweep folders (relative to ``root``; median,
    min, max, n, their GPU counts) and how their steady warm-ups ended (n, n that reached the cap before steady): the
    JSON of ``timing.json``."""
    from calorimeter.records.run_record import RecordError, read_run_record  # heavy: pandas (records.legacy)

    starts: dict[str, list[tuple[float, int]]] = {}
    steady: dict[str, Counter] = {}
    for src in sources:
        for path in sorted((Path(root) / src).glob("cells/*/run.json")):
            try:
                rec = read_run_record(path)
            except RecordError:
                continue
            if not rec.ok or rec.kind not in kinds_where(trains_model=True):
                continue
            hw = str(rec.cell.get("hardware"))
            t = record_timing(rec)
            if t is not None and t[0] == t[0]:
                starts.setdefault(hw, []).append((t[0], int(rec.cell.get("world_size") or 1)))
            if rec.warmup.get("mode_used") == "steady":
                c = steady.setdefault(hw, Counter())
                c["n"] += 1
                c["capped"] += str(rec.warmup.get("reason", "")).startswith("cap")
    out: dict[str, HardwareTiming] = {}
    for hw, xs in sorted(starts.items()):
        s = [x for x, _ in xs]
        out[hw] = {"startup_s": {"median": statistics.median(s), "min": min(s), "max": max(s), "n": len(s),
                                 "gpus": sorted({w for _, w in xs})},
                   "steady_warmup": dict(steady.get(hw, Counter({"n": 0, "capped": 0})))}
    return {"sources": [str(s) for s in sources], "hardware": out}


@dataclass(frozen=True)
class Timing:
    """Measured start-up per GPU type (``timing.json``)."""

    hardware: dict[str, HardwareTiming] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path) -> Timing:
        """From ``timing.json`` (:func:`measure_timing`)."""
        return cls(dict(json.loads(Path(path).read_text()).get("hardware") or {}))

    def startup_s(self, hardware: str) -> tuple[float, float, float] | None:
        """(median, min, max) start-up seconds of a GPU type, None where none was measured."""
        s = (self.hardware.get(hardware) or {}).get("startup_s")
        return (float(s["median"]), float(s["min"]), float(s["max"])) if s else None

    def describe(self, hardware: str) -> str:
        """What the start-up and warm-up of a GPU type rest on."""
        h = self.hardware.get(hardware) or {}
        s, w = h.get("startup_s"), h.get("steady_warmup") or {}
        if not s:
            return f"no measured start-up of {hardware}"
        text = (f"start-up {s['median']:.0f} s (measured {s['min']:.0f}-{s['max']:.0f} s over {s['n']} cells on "
                f"{'/'.join(str(g) for g in s['gpus'])} GPUs; larger cells assumed alike)")
        if w.get("n"):
            text += f"; steady warm-up at its cap ({w['capped']} of {w['n']} measured ones reached it)"
        return text


# ---- one cell's wall time ----


@dataclass(frozen=True)
class Step:
    """A cell's projected step (iteration) time with its band, or why it has none."""

    seconds: float = math.nan
    low_s: float = math.nan
    high_s: float = math.nan
    why_not: str = ""
    calibration: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able (NaN as None)."""
        return {k: (None if isinstance(v, float) and v != v else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Step:
        """Inverse of :meth:`to_dict`."""
        return cls(*(math.nan if d.get(k) is None else float(d[k]) for k in ("seconds", "low_s", "high_s")),
                   str(d.get("why_not") or ""), str(d.get("calibration") or ""))


def _steps_until(seconds: float, step_s: float) -> int:
    """Steps of ``step_s`` until ``seconds`` have passed (at least one)."""
    return max(1, math.ceil(seconds / step_s - 1e-9))


def warmup_s(cell: Cell, step_s: float) -> tuple[float, float]:
    """(projected, least) warm-up seconds of a cell at this step time (module docstring)."""
    if cell.warmup == "fixed":
        return cell.warmup_steps * step_s, cell.warmup_steps * step_s
    cap = min(cell.warmup_max_steps, _steps_until(cell.warmup_max_s, step_s))
    least = min(cap, max(cell.warmup_steps, _steps_until(max(cell.steady_window_s, cell.warmup_min_s), step_s)))
    return cap * step_s, least * step_s


def stepped_s(cell: Cell, step_s: float, profile_steps: int) -> float:
    """Seconds of the measured and profiled steps at this step time."""
    measured = max(cell.measured_steps, _steps_until(cell.measured_min_s, step_s))
    return (measured + profile_steps) * step_s


@dataclass(frozen=True)
class CellCost:
    """One cell's projected wall time (``why_not`` says why it has none)."""

    cell_id: str
    gpus: int
    wall_s: float = math.nan
    wall_low_s: float = math.nan
    wall_high_s: float = math.nan
    why_not: str = ""

    @property
    def projected(self) -> bool:
        """Whether it has a projected wall time."""
        return not self.why_not

    def describe(self) -> str:
        """``7.2 min (6.1-8.9)`` or ``not projected: <why>``."""
        if not self.projected:
            return f"not projected: {self.why_not}"
        if not (self.wall_low_s == self.wall_low_s and self.wall_high_s == self.wall_high_s):
            return f"{duration(self.wall_s)} (no band)"
        unit, scale = _unit(self.wall_s)
        hi = self.wall_high_s / scale
        return (f"{duration(self.wall_s)} ({self.wall_low_s / scale:.{_digits(self.wall_low_s / scale)}f}-"
                + (f"{hi:.{_digits(hi)}f} {unit})" if math.isfinite(hi) else f"unbounded; low end in {unit})"))

    def sentence(self) -> str:
        """``projected wall time 7.2 min (6.1-8.9 min)`` or ``no projected wall time: <why>``."""
        return f"projected wall time {self.describe()}" if self.projected else f"no projected wall time: {self.why_not}"


def cell_cost(cell: Cell, step: Step, timing: Timing, profile_steps: int = 0) -> CellCost:
    """A cell's wall time from its projected step (module docstring)."""
    if step.why_not or not (math.isfinite(step.seconds) and step.seconds > 0):
        return CellCost(cell.cell_id, cell.world_size, why_not=step.why_not or "no projected step time")
    start = timing.startup_s(cell.hardware)
    if start is None:
        return CellCost(cell.cell_id, cell.world_size, why_not=f"no measured start-up of {cell.hardware}")

    def wall(step_s: float, startup: float, least: bool) -> float:
        if step_s == math.inf:  # a band of +-100% or more: unbounded above
            return math.inf
        if not (math.isfinite(step_s) and step_s > 0):  # no band claimed for this regime: none here either
            return math.nan
        warm, warm_least = warmup_s(cell, step_s)
        return startup + (warm_least if least else warm) + stepped_s(cell, step_s, profile_steps)

    return CellCost(cell.cell_id, cell.world_size, wall(step.seconds, start[0], False),
                    wall(step.low_s, start[1], True), wall(step.high_s, start[2], False))


# ---- a sweep's cost ----


@dataclass
class SweepCost:
    """Every planned cell's cost and what it rests on."""

    cells: list[CellCost]
    source: str = ""
    basis: list[str] = field(default_factory=list)
    unavailable: str = ""

    def by_id(self) -> dict[str, CellCost]:
        """Cell id -> its cost."""
        return {c.cell_id: c for c in self.cells}

    def gpu_hours(self) -> tuple[float, float, float]:
        """(projected, low, high) GPU-hours of the projected cells."""
        cs = [c for c in self.cells if c.projected]
        gh, lo, hi = (sum(getattr(c, k) * c.gpus for c in cs) / 3600.0 for k in ("wall_s", "wall_low_s", "wall_high_s"))
        return gh, lo, hi

    def not_projected(self) -> Counter:
        """Why (its kind: :func:`~calorimeter.projection.coverage.reason_kind`) -> how many cells have no projected
        wall time (each cell's whole reason: :attr:`CellCost.why_not`)."""
        return Counter(reason_kind(c.why_not) for c in self.cells if not c.projected)

    def summary(self) -> dict[str, Any]:
        """JSON-able totals."""
        gh, lo, hi = self.gpu_hours()
        walls = [c for c in self.cells if c.projected]
        return {"source": self.source, "basis": self.basis, "unavailable": self.unavailable,
                "cells_projected": len(walls), "gpu_hours": gh, "gpu_hours_low": lo, "gpu_hours_high": hi,
                "wall_s": sum(c.wall_s for c in walls), "not_projected": dict(self.not_projected())}

    def lines(self, left: set[str] | None = None) -> list[str]:
        """The terminal's lines: GPU-hours with the band, the cells apart, what it rests on; with ``left`` (the
        cells without a record yet) also what is still to run."""
        if self.unavailable:
            return [f"projected cost: not available ({self.unavailable})"]
        out = [f"projected cost of {_totals(self.cells)} (calibration {self.source})"]
        for why, k in sorted(self.not_projected().items(), key=lambda kv: -kv[1]):
            out.append(f"  not projected, counted apart: {k} cell{'s' if k != 1 else ''}: {why}")
        if left is not None and len(left) < len(self.cells):
            rest = [c for c in self.cells if c.cell_id in left]
            out.append(f"  still to run (no record yet): {_totals(rest)}"
                       + (f"; {len(rest) - sum(c.projected for c in rest)} more not projected"
                          if any(not c.projected for c in rest) else ""))
        out += [f"  {b}" for b in self.basis]
        return out


def _totals(cells: list[CellCost]) -> str:
    """``32 planned cells: 141.0 GPU-hours (123.5-166.6, band of the projection), 4.4 h of wall time ...``."""
    cs = [c for c in cells if c.projected]
    gh, lo, hi = SweepCost(cs).gpu_hours()
    unbanded = sum(not (c.wall_low_s == c.wall_low_s and c.wall_high_s == c.wall_high_s) for c in cs)
    band = (f"no band: {unbanded} of {len(cs)} cells' regime claims none" if unbanded else
            f"{lo:,.1f}-{hi:,.1f}, band of the projection" if math.isfinite(hi) else
            f"{lo:,.1f} to unbounded: the band of some cells' regime is +-100% or more")
    return (f"{len(cs)} planned cell{'s' if len(cs) != 1 else ''}: {gh:,.1f} GPU-hours ({band}), "
            f"{duration(sum(c.wall_s for c in cs))} of wall time one cell after another")


def _unit(seconds: float) -> tuple[str, float]:
    return ("s", 1.0) if seconds < 90 else ("min", 60.0) if seconds < 5400 else ("h", 3600.0)


def _digits(value: float) -> int:
    return 1 if abs(value) < 10 else 0


def duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3.4 h``; ``-`` for NaN."""
    if seconds != seconds:
        return "-"
    unit, scale = _unit(seconds)
    return f"{seconds / scale:.{1 if unit == 'h' else 0}f} {unit}"


def sweep_cost(plan: Plan, folder: str | Path | None = None, cache: Path | None = None) -> SweepCost:
    """The cost of every planned cell of ``plan`` with the calibration and timing of ``folder`` (default: the
    committed set). Never raises for a missing or outdated calibration: the cost then says it is unavailable."""
    folder = Path(folder) if folder is not None else committed_set()
    cal_path, timing_path = folder / CALIBRATION_FILE, folder / TIMING_FILE
    cells = [pc.cell for pc in plan.runnable]
    if not cal_path.is_file() or not timing_path.is_file():
        return SweepCost([CellCost(c.cell_id, c.world_size, why_not="no calibration") for c in cells],
                         unavailable=f"no {CALIBRATION_FILE} and {TIMING_FILE} in {folder}")
    proj = plan.config.get("projection") or {}
    try:
        steps = projected_steps(cells, cal_path, proj.get("network"), proj.get("engine"), cache)
    except ValueError as e:  # a calibration of another projection model: its coefficients mean something else
        return SweepCost([CellCost(c.cell_id, c.world_size, why_not="calibration unusable") for c in cells],
                         unavailable=f"{e}; {folder / 'README.md'} says how to rebuild it")
    timing = Timing.load(timing_path)
    profile_steps = plan.settings.telemetry.profile_steps
    costs = [cell_cost(c, steps[c.cell_id], timing, profile_steps) for c in cells]
    used = {steps[c.cell_id].calibration for c in cells if steps[c.cell_id].calibration}
    basis = [f"step times: {', '.join(sorted(used))}; {timing.describe(hw)}"
             for hw in sorted({c.hardware for c in cells if steps[c.cell_id].calibration})] if used else []
    return SweepCost(costs, _relative(cal_path), basis)


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# ---- projected steps, cached ----


#: the cache's folder, where set (tests point it at a scratch folder)
CACHE_ENV = "CALORIMETER_CACHE_DIR"


def cache_path() -> Path:
    """The cache file: in ``$CALORIMETER_CACHE_DIR``, else ``$XDG_CACHE_HOME/calorimeter/`` (default
    ``~/.cache/calorimeter/``)."""
    folder = os.environ.get(CACHE_ENV) or str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                                              / "calorimeter")
    return Path(folder) / "projected-steps.json"


def _code_digest() -> str:
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    files = [p for d in _CODE_DIRS for p in sorted((root / d).rglob("*")) if p.suffix in (".py", ".yaml")]
    for p in [*files, *(root / f for f in _CODE_FILES)]:
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def _cell_key(cell: Cell) -> str:
    """The cell with the definitions of its model and hardware (a sweep may redefine either under one name)."""
    text = json.dumps(cell.to_dict(), sort_keys=True, default=str)
    if get_kind(cell.kind).trains_model:
        text += repr(get_model(cell.model)) + repr(get_profile(cell.hardware))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def projected_steps(cells: list[Cell], calibration: Path, network: NetworkOverride | None = None,
                    engine: dict | None = None, cache: Path | None = None) -> dict[str, Step]:
    """Cell id -> projected step of each cell, from the cache where it has them (module docstring).

    Raises:
        ValueError: the calibration was fitted for another projection model.
    """
    cache = cache if cache is not None else cache_path()
    context = hashlib.sha256(json.dumps([CACHE_VERSION, hashlib.sha256(calibration.read_bytes()).hexdigest(),
                                         _code_digest(), network or {}, engine or {}], sort_keys=True).encode()
                             ).hexdigest()
    try:
        doc = json.loads(cache.read_text())
        known = doc["steps"] if doc.get("context") == context else {}
    except (OSError, ValueError, KeyError, TypeError):
        known = {}
    keys = {c.cell_id: _cell_key(c) for c in cells}
    known.update({keys[c.cell_id]: Step(why_not=why).to_dict() for c in cells if (why := uncovered(c))})
    todo = [c for c in cells if keys[c.cell_id] not in known]
    if todo:
        for cid, step in _project(todo, calibration, network, engine).items():
            known[keys[cid]] = step.to_dict()
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(cache, {"context": context, "steps": known}, fsync=False)
        except OSError:
            pass  # a read-only home: the next plan projects again
    return {c.cell_id: Step.from_dict(known[keys[c.cell_id]]) for c in cells}


def _project(cells: list[Cell], calibration: Path, network: NetworkOverride | None, engine: dict | None
             ) -> dict[str, Step]:
    """Cell id -> its projected step with the band, or why it has none (the projection's rows)."""
    from calorimeter.projection.study import STATUS_PROJECTED, StudyProjector  # heavy: pandas, the fitted model

    proj = StudyProjector.from_file(calibration, network, engine)
    out = {}
    for cell in cells:
        r = proj.row(cell)
        if r["status"] != STATUS_PROJECTED:
            out[cell.cell_id] = Step(why_not=r["reason"])
            continue
        lo, hi = float(r.get("iteration_time_s_low", math.nan)), float(r.get("iteration_time_s_high", math.nan))
        out[cell.cell_id] = Step(float(r["iteration_time_s"]), lo, hi, calibration=str(r.get("calibration", "")))
    return out


__all__ = ["CACHE_ENV", "CellCost", "Step", "SweepCost", "Timing", "cache_path", "cell_cost",
           "committed_set", "duration", "measure_timing", "projected_steps", "record_timing", "stepped_s",
           "sweep_cost", "warmup_s"]

"""A running cell's progress: rank 0 appends one JSON line per finished step to its run's ``progress.jsonl``.

The file (:attr:`calorimeter.records.paths.RunPaths.progress`, one per run of a job: a requeued run starts again at
step 0) is what ``calorimeter status`` and the train rule's log read while the cell runs. Its first line describes
the schedule, every further line one finished step::

    {"cell_id": ..., "t_start_s": ..., "tokens_per_step": 256, "fixed": true, "warmup_steps": 2, ...}
    {"step": 0, "phase": "warmup", "step_s": 0.41, "t_end_s": ..., "expected": 9, "exact": true}

``expected`` is how many steps the run will have: exact with a fixed warm-up (CPU ranks, ``warmup: fixed``); with
``warmup: steady`` unknown (None) while warming up, then estimated once the measured steps begin (the measured count
follows from the slowest rank's last warm-up step, which rank 0 does not know; ``exact`` false). Writing costs one
small append per step, outside the timed step.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from calorimeter.plan.cell import Cell
from calorimeter.plan.json_types import JsonObject
from calorimeter.records.paths import AttemptPaths

log = logging.getLogger(__name__)
#: steps the shown step time and the remaining time average over
RECENT_STEPS = 20


class ProgressWriter:
    """Rank 0's step callback (:data:`calorimeter.train.loop.StepCallback`): one line per finished step.

    Args:
        path: the run's ``progress.jsonl``.
        cell: the cell.
        profile_steps: profiled steps after the measured ones.
        fixed: whether the warm-up is the fixed ``warmup_steps`` (a CPU rank or ``warmup: fixed``).
    """

    def __init__(self, path: Path, cell: Cell, profile_steps: int, fixed: bool) -> None:
        self.path = Path(path)
        self.cell = cell
        self.profile_steps = int(profile_steps)
        self.fixed = fixed
        self._first_measured: int | None = None
        self._last_warmup_s = 0.0
        self.failed: str | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            self.failed = f"{type(e).__name__}: {e}"
        self._append({"cell_id": cell.cell_id, "t_start_s": time.time(), "tokens_per_step": cell.global_batch
                      * cell.seq_len, "fixed": fixed, "warmup_steps": cell.warmup_steps,
                      "warmup_max_steps": cell.warmup_max_steps, "warmup_max_s": cell.warmup_max_s,
                      "measured_steps": cell.measured_steps, "measured_min_s": cell.measured_min_s,
                      "profile_steps": self.profile_steps})

    def _append(self, obj: JsonObject) -> None:
        """One line; a file that cannot be written (disk full) stops the progress, never the training."""
        if self.failed:
            return
        try:
            with self.path.open("a") as f:
                f.write(json.dumps(obj) + "\n")
        except OSError as e:
            self.failed = f"{type(e).__name__}: {e}"

    def expected(self, step: int, phase: str, step_s: float) -> tuple[int | None, bool]:
        """(steps the run will have, exact?) after ``step`` (phase ``phase``) ended."""
        c = self.cell
        if self.fixed:
            return c.warmup_steps + c.measured_steps + self.profile_steps, True
        if phase == "warmup":
            self._last_warmup_s = step_s
            return None, False
        if self._first_measured is None:
            self._first_measured = step
        measured = c.measured_steps
        if c.measured_min_s > 0 and self._last_warmup_s > 0:
            measured = max(measured, math.ceil(c.measured_min_s / self._last_warmup_s))
        return self._first_measured + measured + self.profile_steps, False

    def __call__(self, step: int, phase: str, t_begin_s: float, t_end_s: float) -> None:
        step_s = t_end_s - t_begin_s
        expected, exact = self.expected(step, phase, step_s)
        self._append({"step": step, "phase": phase, "step_s": step_s, "t_end_s": t_end_s, "expected": expected,
                      "exact": exact})


@dataclass
class Progress:
    """What a progress file says so far."""

    header: JsonObject = field(default_factory=dict)
    steps: int = 0
    phase: str | None = None
    expected: int | None = None
    exact: bool = False
    step_time_s: float = 0.0
    measured_steps: int = 0
    measured_time_s: float = 0.0
    warmup_time_s: float = 0.0
    last_step_s: float = math.nan
    t_last_s: float = math.nan
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_STEPS))

    def add(self, line: JsonObject) -> None:
        """Take one line of the file."""
        if "step" not in line:
            self.header = line
            return
        self.steps = int(line["step"]) + 1
        self.phase = str(line.get("phase"))
        self.expected = line.get("expected")
        self.exact = bool(line.get("exact"))
        step_s = float(line.get("step_s") or 0.0)
        self.step_time_s += step_s
        if self.phase == "measured":
            self.measured_steps += 1
            self.measured_time_s += step_s
        elif self.phase == "warmup":
            self.warmup_time_s += step_s
        self.last_step_s = step_s
        self.recent.append(step_s)
        self.t_last_s = float(line.get("t_end_s") or math.nan)

    @property
    def tokens_per_s(self) -> float:
        """Tokens per second so far: over the measured steps once there are some, else over every step."""
        tokens = float(self.header.get("tokens_per_step") or math.nan)
        steps, secs = ((self.measured_steps, self.measured_time_s) if self.measured_steps
                       else (self.steps, self.step_time_s))
        return tokens * steps / secs if steps and secs > 0 else math.nan

    @property
    def step_s(self) -> float:
        """Mean time of the recent steps (the last :data:`RECENT_STEPS`)."""
        return sum(self.recent) / len(self.recent) if self.recent else math.nan

    def remaining_s(self) -> float:
        """Seconds of training left (an estimate: the recent step time for each step left; during a steady
        warm-up its remaining cap plus the measured minimum)."""
        step = self.step_s if self.recent else 0.0
        if self.expected is not None:
            return max(int(self.expected) - self.steps, 0) * step
        h = self.header
        warm_left = max(float(h.get("warmup_max_s") or 0.0) - self.warmup_time_s, 0.0)
        warm_left = min(warm_left, max(int(h.get("warmup_max_steps") or 0) - self.steps, 0) * step)
        measured = max(int(h.get("measured_steps") or 0) * step, float(h.get("measured_min_s") or 0.0))
        return warm_left + measured + int(h.get("profile_steps") or 0) * step

    def describe(self) -> str:
        """``step 12/40 measured, 0.045 s/step, 1424 tokens/s``."""
        if not self.steps:
            return "started, no step finished yet"
        if self.expected is not None:
            of = f"/{self.expected}" if self.exact else f"/~{self.expected}"
        else:
            of = f" (warm-up until steady, at most {self.header.get('warmup_max_steps')} steps)"
        tps = self.tokens_per_s
        return (f"step {self.steps}{of} {self.phase}, {self.step_s:.3g} s/step"
                + (f", {tps:.4g} tokens/s" if tps == tps else ""))

    def to_dict(self) -> JsonObject:
        """JSON-able summary."""
        return {"steps_done": self.steps, "steps_expected": self.expected, "steps_expected_exact": self.exact,
                "phase": self.phase, "last_step_s": _finite(self.last_step_s), "step_s": _finite(self.step_s),
                "tokens_per_s": _finite(self.tokens_per_s), "t_last_step_s": _finite(self.t_last_s),
                "remaining_s": _finite(self.remaining_s())}


def _finite(x: float) -> float | None:
    return x if x == x and not math.isinf(x) else None


class ProgressTail:
    """Reads a progress file as it grows (only new bytes each time; a half-written last line waits)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.offset = 0
        self.progress: Progress | None = None
        self._partial = b""

    def poll(self) -> list[JsonObject]:
        """The step lines added since the last call (the progress is updated with them)."""
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        self.offset += len(data)
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        new = []
        for raw in lines:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(line, dict):
                continue
            if self.progress is None:
                self.progress = Progress()
            self.progress.add(line)
            if "step" in line:
                new.append(line)
        return new


def read_progress(path: Path) -> Progress | None:
    """The progress in ``path`` (None when the file is missing or empty)."""
    tail = ProgressTail(path)
    tail.poll()
    return tail.progress


def attempt_progress(attempt: AttemptPaths) -> tuple[int, Progress] | None:
    """(restart, progress) of the newest run of an attempt that has written progress, or None."""
    for run in reversed(attempt.runs()):
        p = read_progress(run.progress)
        if p is not None:
            return int(run.root.name.removeprefix("restart")), p
    return None


class ProgressLog:
    """The launcher's view of a running attempt on its log (the train rule's log and the terminal): a line when a
    phase begins and at most every ``every_s`` seconds in between, from the newest run's progress file."""

    def __init__(self, attempt: AttemptPaths, cell_id: str, every_s: float = 10.0) -> None:
        self.attempt = attempt
        self.cell_id = cell_id
        self.every_s = every_s
        self._tail: ProgressTail | None = None
        self._phase: str | None = None
        self._last = 0.0
        self._t0 = time.time()

    def tick(self) -> str | None:
        """Read what is new; log and return a line when one is due (before the first step: what the cell is doing
        while it starts, at least every ``every_s`` seconds)."""
        runs = self.attempt.runs()
        if not runs:
            if not self.attempt.staging.is_dir():
                return None  # not submitted yet
            return self._starting("waiting for the ranks: job start, Python imports, rendezvous (torch.distributed)")
        if self._tail is None or self._tail.path != runs[-1].progress:  # a requeued run starts a new file
            self._tail, self._phase = ProgressTail(runs[-1].progress), None
        new = self._tail.poll()
        if self._tail.progress is None:
            return self._starting("ranks joined (process group up), node sampler running; setting the cell up")
        if not self._tail.progress.steps:
            return self._starting("building the model and engine (or starting the command), then the first "
                                  "warm-up step")
        if not new:
            return None
        p, now = self._tail.progress, time.time()
        if p.phase == self._phase and now - self._last < self.every_s:
            return None
        self._phase, self._last = p.phase, now
        line = f"cell {self.cell_id}: {p.describe()}"
        log.info("%s", line)
        return line

    def _starting(self, what: str) -> str | None:
        """A start-up line when the stage changed or ``every_s`` passed."""
        now = time.time()
        if self._phase == what and now - self._last < self.every_s:
            return None
        self._phase, self._last = what, now
        line = f"cell {self.cell_id}: starting ({now - self._t0:.0f} s): {what}"
        log.info("%s", line)
        return line

"""The step-log protocol of ``command`` cells, and parsers of known trainers' console logs.

**Protocol (``log_format: jsonl``).** The command finds the path of its step log in ``CALORIMETER_STEP_LOG`` (one file
per rank) and appends one JSON object per line, one line per finished optimizer step::

    {"step": 3, "t_begin_s": 1764040000.12, "t_end_s": 1764040001.37, "tokens": 65536, "loss": 7.91}

* ``step`` (int, required): the step's index, increasing;
* ``t_end_s`` (float, required): when the step ended, ``time.time()`` (seconds since the epoch, the node sampler's
  clock), after the device has finished it (``torch.cuda.synchronize()``);
* ``t_begin_s`` (float): when it began; default the previous step's ``t_end_s`` (the first step without one is
  dropped);
* ``tokens`` (int): tokens of the step over all ranks (global batch x sequence length), checked against the cell's;
* ``loss`` (float), ``max_memory_bytes`` (int: the rank's peak device memory so far): recorded when given.

A line that is not such an object is an error naming the file and the line. :class:`StepLogWriter` writes the
protocol in three lines of a training loop; nothing needs to be imported (the format is the contract).

**Console logs.** ``torchtitan`` reads lines ``step: N  loss: ...  tps: ...`` (run it with ``--metrics.log_freq 1``)
and ``megatron`` reads ``iteration N/M | ... | elapsed time per iteration (ms): X | ... lm loss: ...``
(``--log-interval 1``). A console line's step ends when the line arrives (torchtitan; the line is printed right after
the step) or ``X`` ms before that (Megatron), so their step times carry the logging latency (milliseconds).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calorimeter.plan.json_types import JsonObject

#: environment variable naming the step log of a rank
STEP_LOG_ENV = "CALORIMETER_STEP_LOG"
LOG_FORMATS = ("jsonl", "torchtitan", "megatron")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TITAN = re.compile(r"\bstep:\s*(\d+)\b(?P<rest>.*)")
_TITAN_LOSS = re.compile(r"\bloss:\s*([-+0-9.eE]+)")
_MEGATRON = re.compile(r"\biteration\s+(\d+)\s*/\s*\d+\s*\|(?P<rest>.*)")
_MEGATRON_MS = re.compile(r"elapsed time per iteration \(ms\):\s*([0-9.]+)")
_MEGATRON_LOSS = re.compile(r"lm loss:\s*([-+0-9.eE]+)")


@dataclass(frozen=True)
class LoggedStep:
    """One optimizer step as the command reported it (times in seconds since the epoch)."""

    step: int
    t_begin_s: float
    t_end_s: float
    tokens: int | None = None
    loss: float | None = None
    max_memory_bytes: int | None = None

    @property
    def time_s(self) -> float:
        """Duration of the step."""
        return self.t_end_s - self.t_begin_s


class StepLogError(ValueError):
    """A step log that does not follow the protocol."""


def read_step_log(path: Path) -> list[LoggedStep]:
    """The steps of a JSON-lines step log (missing file: none), in the order written.

    Raises:
        StepLogError: a line that is not a step object, or steps that do not increase.
    """
    if not Path(path).is_file():
        return []
    steps: list[LoggedStep] = []
    prev_end: float | None = None
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            step, t_end = int(d["step"]), float(d["t_end_s"])
            t_begin = float(d["t_begin_s"]) if d.get("t_begin_s") is not None else prev_end
        except (ValueError, KeyError, TypeError) as e:
            raise StepLogError(f"{path}:{n}: not a step ({type(e).__name__}: {e}); a line is "
                               '{"step": int, "t_end_s": float, ...} (docs/command.md)') from None
        if steps and step <= steps[-1].step:
            raise StepLogError(f"{path}:{n}: step {step} after step {steps[-1].step}: steps must increase")
        prev_end = t_end
        if t_begin is None:
            continue  # the first step without a begin time has no duration
        if t_end < t_begin:
            raise StepLogError(f"{path}:{n}: t_end_s {t_end} is before t_begin_s {t_begin}")
        steps.append(LoggedStep(step, t_begin, t_end, _opt(d, "tokens", int), _opt(d, "loss", float),
                                _opt(d, "max_memory_bytes", int)))
    return steps


def _opt(d: JsonObject, key: str, kind: type) -> Any:
    v = d.get(key)
    return None if v is None else kind(v)


class ConsoleParser:
    """Steps from a trainer's console lines (``torchtitan`` or ``megatron``), timed by the lines' arrival."""

    def __init__(self, log_format: str, t_start_s: float) -> None:
        if log_format not in ("torchtitan", "megatron"):
            raise ValueError(f"no console parser for {log_format!r} (known: torchtitan, megatron)")
        self.log_format = log_format
        self.steps: list[LoggedStep] = []
        self._prev_end = t_start_s
        self._first = True

    def feed(self, line: str, t_arrival_s: float) -> LoggedStep | None:
        """Read one console line; the step it reports, if any."""
        text = _ANSI.sub("", line)
        if self.log_format == "torchtitan":
            m = _TITAN.search(text)
            if not m:
                return None
            loss = _TITAN_LOSS.search(m.group("rest"))
            begin, end = self._prev_end, t_arrival_s
        else:
            m = _MEGATRON.search(text)
            ms = _MEGATRON_MS.search(m.group("rest")) if m else None
            if not m or not ms:
                return None
            loss = _MEGATRON_LOSS.search(m.group("rest"))
            end = t_arrival_s
            begin = end - float(ms.group(1)) / 1e3
        self._prev_end = t_arrival_s
        step = int(m.group(1))
        if self.steps and step <= self.steps[-1].step:
            return None  # a repeated line (e.g. a second logger): keep the first
        first, self._first = self._first, False
        if first and self.log_format == "torchtitan":
            return None  # its begin is the command's start: start-up, not a step
        s = LoggedStep(step, begin, end, None, float(loss.group(1)) if loss else None)
        self.steps.append(s)
        return s


class StepLogWriter:
    """Writes the protocol (for Python training loops; any language may write the lines itself).

    Example::

        log = StepLogWriter()                       # path from CALORIMETER_STEP_LOG; a no-op when unset
        for step in range(steps):
            t0 = time.time(); loss = train_step(); torch.cuda.synchronize()
            log.step(step, t0, time.time(), tokens=global_batch * seq_len, loss=loss.item())
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        p = path if path is not None else os.environ.get(STEP_LOG_ENV)
        self.path = Path(p) if p else None

    def step(self, step: int, t_begin_s: float, t_end_s: float | None = None, **extra: Any) -> None:
        """Append one finished step (``extra``: ``tokens``, ``loss``, ``max_memory_bytes``)."""
        if self.path is None:
            return
        rec = {"step": int(step), "t_begin_s": float(t_begin_s),
               "t_end_s": float(time.time() if t_end_s is None else t_end_s), **extra}
        with self.path.open("a") as f:
            f.write(json.dumps(rec) + "\n")

"""Step markers: each rank appends one JSON line per step (begin/end on the ``time.time()`` clock)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

PHASES: tuple[str, ...] = ("warmup", "measured", "profiled")

MARKER_COLUMNS: tuple[str, ...] = ("rank", "local_rank", "node", "step", "phase", "begin_s", "end_s", "duration_s")


def marker_path(out_dir: str | Path, rank: int) -> Path:
    """The marker file of one rank: ``<out_dir>/markers-rank<rank>.jsonl``."""
    return Path(out_dir) / f"markers-rank{rank}.jsonl"


class StepMarker:
    """Per-rank writer of step markers.

    Every finished step becomes one line
    ``{"rank", "local_rank", "node", "step", "phase", "begin_s", "end_s", "duration_s"}`` flushed
    at once, so a crash loses at most the step in progress.

    Args:
        out_dir: Directory of the marker files (created).
        rank: Global rank.
        local_rank: Rank on the node (optional, for mapping ranks to GPUs).
        sync: Called before each timestamp (e.g. ``torch.cuda.synchronize``) so that the marker
            brackets the GPU work, not just its launch.
        extra: Constant fields added to every line (e.g. ``{"gpu_index": 3}``).
    """

    def __init__(
        self,
        out_dir: str | Path,
        rank: int,
        local_rank: int | None = None,
        sync: Callable[[], None] | None = None,
        extra: dict[str, Any] | None = None,
    ):
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        self.path = marker_path(out_dir, rank)
        self.rank = int(rank)
        self.local_rank = local_rank
        self.node = socket.gethostname().split(".")[0]
        self.sync = sync
        self.extra = dict(extra or {})
        self._fh = open(self.path, "a", buffering=1)  # noqa: SIM115 - line-buffered, closed in close()
        self._open: tuple[int, str, float] | None = None

    def _now(self) -> float:
        if self.sync is not None:
            self.sync()
        return time.time()

    def begin(self, step: int, phase: str = "measured") -> None:
        """Mark the beginning of a step.

        Args:
            step: Step number.
            phase: One of :data:`PHASES`.
        """
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
        if self._open is not None:
            raise RuntimeError(f"step {self._open[0]} is still open")
        self._open = (int(step), phase, self._now())

    def end(self) -> dict[str, Any]:
        """Mark the end of the open step and write its line.

        Returns:
            The record written.
        """
        if self._open is None:
            raise RuntimeError("no open step")
        end_s = self._now()
        step, phase, begin_s = self._open
        self._open = None
        rec = {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "node": self.node,
            "step": step,
            "phase": phase,
            "begin_s": begin_s,
            "end_s": end_s,
            "duration_s": end_s - begin_s,
            **self.extra,
        }
        self._fh.write(json.dumps(rec) + "\n")
        return rec

    @contextlib.contextmanager
    def step(self, step: int, phase: str = "measured") -> Iterator[None]:
        """Context manager around one step (the line is written only if the body succeeds)."""
        self.begin(step, phase)
        try:
            yield
        except BaseException:
            self._open = None
            raise
        self.end()

    def close(self) -> None:
        """Close the file (fsync first)."""
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()

    def __enter__(self) -> StepMarker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_step_markers(paths: Iterable[str | Path] | str | Path) -> pd.DataFrame:
    """Read marker JSONL files (a directory, a file, or several); a torn last line is skipped.

    Args:
        paths: A directory (all ``markers-rank*.jsonl`` in it), one file, or an iterable of files.

    Returns:
        One row per step and rank, sorted by rank (numerically) then step; columns
        :data:`MARKER_COLUMNS` plus any extra fields.
    """
    if isinstance(paths, (str, Path)):
        p = Path(paths)
        files = sorted(p.glob("markers-rank*.jsonl")) if p.is_dir() else [p]
    else:
        files = [Path(x) for x in paths]
    records: list[dict[str, Any]] = []
    for f in files:
        for line in f.read_text().splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # torn last line of a killed rank
    df = pd.DataFrame.from_records(records)
    for col in MARKER_COLUMNS:
        if col not in df.columns:
            df[col] = pd.Series(dtype="float64")
    if df.empty:
        return df[list(MARKER_COLUMNS)]
    df["rank"] = df["rank"].astype("int64")
    df["step"] = df["step"].astype("int64")
    return df.sort_values(["rank", "step", "begin_s"], kind="stable").reset_index(drop=True)

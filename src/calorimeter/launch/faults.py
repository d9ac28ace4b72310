"""Test-only fault injection, read on every rank from ``CALORIMETER_TEST_FAULTS``.

Never set it for measurements. Format: comma-separated ``<cell-id glob>=<fault>`` items, e.g.::

    CALORIMETER_TEST_FAULTS='*tiny-llama*=oom,tiny-gpt-*-dp2-*=sleep:600'

Faults, applied after the process group is up and before training:

``oom``
    raise :class:`calorimeter.train.errors.CellOOMError` on every rank (a CPU stand-in for a GPU OOM);
``fail``
    raise ``RuntimeError`` on rank 0 (a deterministic bug);
``sleep:<s>``
    sleep ``s`` seconds on every run of the cell (to cancel or kill it mid-run);
``sleep-first:<s>``
    sleep ``s`` seconds only on the first run of the job (not after a requeue): with a short time limit the job is
    requeued once and then completes.
"""

from __future__ import annotations

import fnmatch
import os
import time

from calorimeter.train.errors import CellOOMError

ENV = "CALORIMETER_TEST_FAULTS"


def faults_for(cell_id: str, env: str | None = None) -> list[str]:
    """The faults configured for this cell."""
    spec = os.environ.get(ENV, "") if env is None else env
    out = []
    for item in spec.split(","):
        if "=" in item:
            pattern, fault = item.split("=", 1)
            if fnmatch.fnmatchcase(cell_id, pattern.strip()):
                out.append(fault.strip())
    return out


def inject(cell_id: str, rank: int, restart: int) -> None:
    """Apply this cell's faults on this rank (``restart``: how often the job was requeued so far)."""
    for fault in faults_for(cell_id):
        name, _, arg = fault.partition(":")
        if name == "oom":
            raise CellOOMError(0, f"injected by {ENV}")
        if name == "fail" and rank == 0:
            raise RuntimeError(f"failure injected by {ENV}")
        if name == "sleep" or (name == "sleep-first" and restart == 0):
            print(f"{ENV}: rank {rank} sleeps {arg} s (restart {restart})", flush=True)
            time.sleep(float(arg))

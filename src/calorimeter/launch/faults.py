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

``hold:<path>``
    sleep while the file ``path`` exists (at most 10 minutes; a test ends the hold by deleting it);
``tiny``
    the rank runs no model and joins no process group: it times ``warmup_steps + measured_steps`` steps of a few
    milliseconds of plain Python (real durations; loss and gradient norm NaN), so that a cell costs well under a
    second (the launcher's soak test runs dozens of them with random faults). Never a measurement of anything.

Rank deaths (SIGKILL of the rank's own process, as the kernel's OOM killer or an operator would; ``@<rank>``
picks the rank, default 1; only on the first run of a job):

``kill-at:start@<rank>``
    as the rank starts, before it announces itself (no alive file: only its process is there to watch);
``kill-at:rendezvous@<rank>``
    before the rank joins the process group (its peers wait in the rendezvous);
``kill-after:<s>@<rank>``
    ``s`` seconds after the process group is up, while the ranks train (its peers wait in a collective);
``kill-at:step@<rank>``
    after the rank's first step (``tiny`` cells only);
``kill-at:result@<rank>``
    after training, as the rank is about to write its result (its peers are writing theirs);
``term-after:<s>@<rank>``
    SIGTERM instead of SIGKILL after ``s`` seconds (a preemption notice the rank was not told to expect).
"""

from __future__ import annotations

import fnmatch
import os
import signal
import threading
import time
from dataclasses import dataclass

from calorimeter.train.errors import CellOOMError

ENV = "CALORIMETER_TEST_FAULTS"


@dataclass(frozen=True)
class RankFaults:
    """The faults of one rank of one run, read once when the rank starts (:meth:`of`); inert (no fault, nothing
    done) unless :data:`ENV` names the cell, so the rank's task asks it at its phases at no cost.

    Attributes:
        cell_id: the cell.
        rank: this rank.
        restart: the run of the job (how often it was requeued before).
        faults: the faults :data:`ENV` gives the cell.
    """

    cell_id: str
    rank: int
    restart: int
    faults: tuple[str, ...] = ()

    @classmethod
    def of(cls, cell_id: str, rank: int, restart: int) -> RankFaults:
        """This rank's faults from the environment."""
        return cls(cell_id, rank, restart, tuple(faults_for(cell_id)) if os.environ.get(ENV) else ())

    @property
    def tiny(self) -> bool:
        """The rank runs as a ``tiny`` cell (no model, no process group; module docstring)."""
        return "tiny" in self.faults

    def point(self, where: str) -> None:
        """A ``kill-at`` point of the rank's life (``start``, ``rendezvous``, ``step``, ``result``)."""
        if self.faults:
            kill_point(self.cell_id, self.rank, self.restart, where)

    def arm(self) -> None:
        """Start the ``kill-after``/``term-after`` timers (once the process group is up)."""
        if self.faults:
            arm_timers(self.cell_id, self.rank, self.restart)

    def inject(self) -> None:
        """Apply the faults due before the work (``oom``, ``fail``, ``sleep``, ``hold``)."""
        if self.faults:
            inject(self.cell_id, self.rank, self.restart)

    def tiny_steps(self, warmup_steps: int, measured_steps: int) -> list[dict[str, object]]:
        """The timed no-op steps of a ``tiny`` cell (:func:`tiny_steps`)."""
        return tiny_steps(self.cell_id, self.rank, self.restart, warmup_steps, measured_steps)


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
        if name == "hold":
            deadline = time.time() + 600
            while os.path.exists(arg) and time.time() < deadline:
                time.sleep(0.2)
        if name == "sleep" or (name == "sleep-first" and restart == 0):
            print(f"{ENV}: rank {rank} sleeps {arg} s (restart {restart})", flush=True)
            time.sleep(float(arg))


def _target(arg: str) -> tuple[str, int]:
    """``<value>@<rank>`` -> (value, rank); rank 1 when not given."""
    value, _, rank = arg.partition("@")
    return value, int(rank) if rank else 1


def kill_point(cell_id: str, rank: int, restart: int, point: str) -> None:
    """SIGKILL this rank at ``point`` (``start``, ``rendezvous``, ``step`` or ``result``) when a ``kill-at`` fault
    says so."""
    if restart:
        return
    for fault in faults_for(cell_id):
        name, _, arg = fault.partition(":")
        if name == "kill-at" and _target(arg) == (point, rank):
            print(f"{ENV}: rank {rank} kills itself at {point} t={time.time():.3f}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)


def arm_timers(cell_id: str, rank: int, restart: int) -> None:
    """Start the ``kill-after`` / ``term-after`` timers of this rank (daemon threads: they die with it)."""
    if restart:
        return
    for fault in faults_for(cell_id):
        name, _, arg = fault.partition(":")
        if name in ("kill-after", "term-after"):
            after, target = _target(arg)
            if target == rank:
                sig = signal.SIGKILL if name == "kill-after" else signal.SIGTERM
                t = threading.Timer(float(after), os.kill, (os.getpid(), sig))
                t.daemon = True
                t.start()


#: plain-Python work of one ``tiny`` step (about 5 ms)
TINY_STEP_OPS = 100_000


def tiny_steps(cell_id: str, rank: int, restart: int, warmup_steps: int, measured_steps: int
               ) -> list[dict[str, object]]:
    """The steps of a ``tiny`` cell, timed; ``kill-at:step@<rank>`` kills the rank after its first step."""
    steps = []
    for i in range(warmup_steps + measured_steps):
        t0 = time.time()
        sum(range(TINY_STEP_OPS))
        t1 = time.time()
        steps.append({"step": i, "phase": "warmup" if i < warmup_steps else "measured", "loss": float("nan"),
                      "grad_norm": float("nan"), "time_s": t1 - t0, "t_begin_s": t0, "t_end_s": t1})
        kill_point(cell_id, rank, restart, "step")
    return steps

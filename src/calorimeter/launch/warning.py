"""SLURM's time-limit warning (USR2, ``signal_delay_s`` before the limit) reaches rank 0 even when only a peer got it.

submitit checkpoints and requeues a job only from rank 0's USR2 handler; a peer that catches the signal logs "not
requeuing since I am a slave" and carries on. On a two-node job SLURM does not always deliver the warning to every
node at the same check: in the two-node test cluster node2's rank got it 28 s before the limit and node1's rank 0
only with the kill, so the job timed out instead of being requeued. Here a peer that catches the warning leaves a
marker in the attempt's staging folder (shared, like the rank results), and rank 0 watches for it (a daemon thread,
every :data:`POLL_S`) and then delivers the warning to itself: submitit's own handler runs on rank 0 as if SLURM had
sent it there. Rank 0 handles the warning once per run, whichever way it arrives first.

At the time limit submitit's handler ends the run by raising ``UncompletedJobError`` out of the signal handler, into
whatever the main thread was doing. Where that was inside an ``except Exception`` the error is lost: SLURM sent
SIGCONT and USR2 in the same instant, the USR2 handler ran while submitit's SIGCONT handler was writing its log line,
and ``logging`` swallowed the error as a "Logging error"; the rank slept on until SLURM killed it, and its record
carried SLURM's reason instead of its own (a CI run of the time-limit scenario). So rank 0 keeps the error until the
task has taken it (:func:`not_requeued_taken`), and the relay thread delivers the warning again every
:data:`REDELIVER_S` meanwhile; the handler raises the kept error again.

Only under SLURM (``SUBMITIT_EXECUTOR=slurm``, set by submitit's batch script): a local job gets no such warning.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path

from calorimeter.records.atomic import write_json_atomic
from calorimeter.records.paths import AttemptPaths

log = logging.getLogger(__name__)

#: how often rank 0 looks for a peer's marker (s)
POLL_S = 1.0
#: the warning submitit's batch script asks SLURM for (``--signal=USR2@<signal_delay_s>``)
WARNING_SIGNAL = signal.SIGUSR2
#: how long rank 0 waits for the task to take submitit's "not requeued" error before raising it again (s)
REDELIVER_S = 5.0

#: submitit's "not requeued" error on rank 0 while the task has not taken it (at most one)
_NOT_REQUEUED: list[BaseException] = []


def not_requeued_taken() -> None:
    """The task caught submitit's "not requeued" error: stop delivering it again."""
    _NOT_REQUEUED.clear()


def marker_path(attempt: AttemptPaths, restart: int) -> Path:
    """Where a peer says it caught the warning during run ``restart`` of the job."""
    return attempt.staging / f"warned-{restart}.json"


def relay_warning(attempt: AttemptPaths, rank: int, restart: int, force: bool = False) -> bool:
    """Install the relay on this rank (call from the main thread, after submitit set its handlers); whether it did
    (only under SLURM, unless ``force``)."""
    if not force and os.environ.get("SUBMITIT_EXECUTOR") != "slurm":
        return False
    previous = signal.getsignal(WARNING_SIGNAL)
    marker = marker_path(attempt, restart)
    if rank != 0:
        def on_warning(signum: int, frame: object) -> None:
            try:
                write_json_atomic(marker, {"rank": rank, "restart": restart, "time_s": time.time()}, fsync=False)
            except OSError as e:
                log.warning("rank %d: could not relay the time-limit warning to rank 0: %s", rank, e)
            if callable(previous):
                previous(signum, frame)

        signal.signal(WARNING_SIGNAL, on_warning)
        return True

    handled = threading.Event()
    _NOT_REQUEUED.clear()

    def on_warning_once(signum: int, frame: object) -> None:
        if handled.is_set():  # SLURM's own warning and a relayed one: the job is checkpointed and requeued once
            if _NOT_REQUEUED:  # the first raise was lost on its way: raise it again
                raise _NOT_REQUEUED[0]
            log.info("rank 0: the time-limit warning was already handled in this run")
            return
        handled.set()
        if callable(previous):
            try:
                previous(signum, frame)
            except Exception as e:  # submitit's "not requeued" (the only exception its handler raises)
                _NOT_REQUEUED[:] = [e]
                raise

    def watch() -> None:
        while not handled.is_set():
            if marker.exists():
                log.warning("rank 0: a peer caught SLURM's time-limit warning (%s); delivering it here", marker.name)
                os.kill(os.getpid(), WARNING_SIGNAL)
                break
            time.sleep(POLL_S)
        while True:  # for the rest of the run (a daemon thread): a kept error not taken yet is raised again
            time.sleep(REDELIVER_S)
            if _NOT_REQUEUED:
                log.warning("rank 0: the run did not end at SLURM's time-limit warning; delivering it again")
                os.kill(os.getpid(), WARNING_SIGNAL)

    signal.signal(WARNING_SIGNAL, on_warning_once)
    threading.Thread(target=watch, name="calorimeter-warning-relay", daemon=True).start()
    return True

"""SLURM job states, one vocabulary: which wait to start, which run, which ended, and which of the ended ones say the
cause lay outside the cell.

squeue and sacct spell states in capitals; sacct adds ``by <uid>`` to CANCELLED and ``+`` to truncated names, which
:func:`base_state` strips. The launcher (:mod:`calorimeter.launch.slurm`: is a job over?), the record
(:func:`calorimeter.records.record.classify_attempt`: transient or not) and the operator view
(:mod:`calorimeter.operate.state`: queued or running) all read these sets.
"""

from __future__ import annotations

#: the job waits to start (SPECIAL_EXIT: requeued and held after a special exit code)
WAITING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED", "STOPPED",
                     "CONFIGURING", "SPECIAL_EXIT", "RESIZING"})
#: the job runs
RUNNING = frozenset({"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING"})
#: the job will not run again
ENDED = frozenset({"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                   "PREEMPTED", "REVOKED", "TIMEOUT"})
#: ended for a cause outside the cell: the attempt is transient whatever its ranks said
TRANSIENT = frozenset({"BOOT_FAIL", "CANCELLED", "DEADLINE", "NODE_FAIL", "PREEMPTED", "REVOKED"})

#: of the waiting states, those of a job SLURM requeued (after a node failure) on its way to run again
RESTARTING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING"})
#: a job whose run may have ended by a node failure: being killed (COMPLETING) or requeued (:data:`RESTARTING`)
AFTER_A_RUN = frozenset({*RESTARTING, "COMPLETING"})
#: the failure class of an attempt SLURM ended in one of the :data:`TRANSIENT` states (``transient`` where not listed)
STATE_CLASSES = {"NODE_FAIL": "node_fail"}


def base_state(state: str | None) -> str | None:
    """``CANCELLED by 0`` -> ``CANCELLED``; ``CANCELLED+`` -> ``CANCELLED``."""
    return state.split()[0].rstrip("+") if state else state

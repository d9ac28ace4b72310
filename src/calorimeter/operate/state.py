"""Where each cell of a sweep stands, from its folder (record, attempts, progress file) and the scheduler.

States (:data:`STATES`):

``pruned``       the plan never submits it (reasons given);
``planned``      runnable, not started (no attempt yet, or its record was set aside by ``calorimeter rerun``);
``queued``       its SLURM job waits (the scheduler's reason given);
``running``      its job runs: a SLURM job in state RUNNING, or a live local job on this host (progress shown);
``interrupted``  an attempt is open but nothing runs it any more: the local launcher died with its ranks, or the
                 SLURM job ended while no Snakemake watched; the next ``snakemake`` run collects its results (job
                 finished) or submits the cell again;
``ok``, ``oom``, ``failed``  the record (``run.json``) says so, with its failure class (``failed``: ``failed`` or
                 ``timeout``); also ``failed`` with class ``transient`` (the last attempt ended without a
                 deterministic result: cancelled, node failure, ...; no record, the next run submits it again),
                 classes ``peer_died`` (a rank died without a result: the record names it and its host; shown while
                 the launcher ends the cell), ``comm_timeout``, ``killed``, ``node_fail`` (the first failing rank's
                 error or SLURM's state), class ``damaged`` (``run.json`` cannot be read) and class ``disk_full``
                 (the disk filled: before the ranks wrote their results, or while the record was written, when
                 the attempt keeps its finished measurement and the next run completes the record without
                 retraining);
``unknown``      an open attempt whose state cannot be seen from here (SLURM commands missing, or a local job on
                 another host that has written no progress lately).

Nothing here needs Snakemake: the answer is the same while it runs and after it died.
"""

from __future__ import annotations

import math
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from calorimeter.launch import slurm
from calorimeter.launch.submit import attempts
from calorimeter.launch.watch import peer_death
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.plan import PlannedCell
from calorimeter.records import job_states
from calorimeter.records.atomic import read_json_object
from calorimeter.records.job import JobRecord, read_job_record
from calorimeter.records.paths import AttemptPaths, CellPaths
from calorimeter.records.progress import Progress, attempt_progress
from calorimeter.records.rank import RankOutput, read_rank_reports
from calorimeter.records.run_record import RecordError, RunRecord, read_run_record

STATES = ("running", "queued", "interrupted", "failed", "oom", "ok", "planned", "unknown", "pruned")
#: a local job on another host counts as running while its progress file moved this recently
FRESH_PROGRESS_S = 600.0


@dataclass
class CellStatus:
    """One cell's state (module docstring) and what is known about its newest attempt."""

    cell_id: str
    state: str
    failure_class: str | None = None
    reason: str = ""
    job_id: str | None = None
    executor: str | None = None
    attempts: int = 0
    elapsed_s: float | None = None
    progress: Progress | None = None
    restart: int | None = None
    note: str = ""
    record: RunRecord | None = None
    #: a ``planned`` cell whose record ``calorimeter rerun`` set aside: that record's state (ok, oom, failed)
    aside_state: str | None = None
    #: every rank's output tail, the rank the reason names first (a record's ``evidence.rank_output``)
    outputs: list[RankOutput] = field(default_factory=list)

    def to_dict(self) -> JsonObject:
        """JSON-able (the record itself left out)."""
        return {"cell_id": self.cell_id, "state": self.state, "failure_class": self.failure_class,
                "reason": self.reason, "job_id": self.job_id, "executor": self.executor, "attempts": self.attempts,
                "elapsed_s": self.elapsed_s, "restart": self.restart,
                "progress": self.progress.to_dict() if self.progress is not None else None, "note": self.note,
                "set_aside_state": self.aside_state, "rank_output": [o.to_dict() for o in self.outputs]}


def list_attempts(cell: CellPaths) -> list[AttemptPaths]:
    """Attempts of a cell, oldest first (the launcher's definition)."""
    return attempts(cell)


def _read_json(path: Path) -> JsonObject | None:
    return read_json_object(path)


def _read_record(path: Path) -> RunRecord | None:
    try:
        return read_run_record(path)
    except RecordError:
        return None


def local_job_alive(job: JobRecord) -> bool | None:
    """Whether a local attempt's submitit controller (pid = job id) still runs; None when it ran on another host."""
    if job.host and job.host != socket.gethostname():
        return None
    try:
        cmdline = Path(f"/proc/{int(job.job_id)}/cmdline").read_bytes()
    except (OSError, ValueError):
        return False
    return b"submitit" in cmdline  # a reused pid runs something else


def _record_status(cs: CellStatus, rec: RunRecord) -> None:
    launch = rec.launcher
    cs.state = rec.status if rec.status in ("ok", "oom", "failed") else "failed"
    cs.failure_class = rec.failure_class or rec.status
    cs.reason = rec.reason
    cs.job_id = str(launch["job_id"]) if launch.get("job_id") else None
    cs.executor = launch.get("executor")
    cs.elapsed_s = launch.get("wall_time_s")
    cs.record = rec
    cs.outputs = rec.rank_output if rec.status != "ok" else []


def _open_attempt(cs: CellStatus, attempt: AttemptPaths, job: JobRecord, now: float,
                  scheduler: dict[str, dict[str, str]] | None) -> None:
    """State of an attempt whose job was submitted and has no record yet."""
    cs.job_id, cs.executor = job.job_id, job.executor
    submitted = job.submitted_s
    cs.elapsed_s = max(now - submitted, 0.0) if submitted is not None else None
    found = attempt_progress(attempt)
    if found is not None:
        cs.restart, cs.progress = found
    if cs.executor == "slurm":
        if scheduler is None:
            cs.state, cs.note = "unknown", "SLURM commands not available here"
            return
        info = scheduler.get(cs.job_id)
        state = (info or {}).get("state", "")
        if state in job_states.WAITING:
            cs.state, cs.note = "queued", f"SLURM {state}" + (f" ({info['reason']})" if info.get("reason") and
                                                               info["reason"] != "None" else "")
        elif state in job_states.RUNNING:
            cs.state, cs.note = "running", f"SLURM {state} on {info.get('nodelist') or '?'}"
        else:
            cs.state = "interrupted"
            cs.note = (f"SLURM job {cs.job_id} ended {state or '(unknown to squeue and sacct)'} while no Snakemake "
                       "watched: the next snakemake run " + ("collects its results" if state == "COMPLETED" else
                                                             "submits the cell again"))
        return
    alive = local_job_alive(job)
    if alive is None:  # another host: trust a progress file that moves
        fresh = cs.progress is not None and now - cs.progress.t_last_s < FRESH_PROGRESS_S
        cs.state = "running" if fresh else "unknown"
        cs.note = f"local job on host {job.host}" + ("" if fresh else ", no progress lately")
    elif alive:
        cs.state = "running"
    else:
        cs.state = "interrupted"
        done = _all_ranks_ok(attempt, job.world_size)
        cs.note = ("launcher died after the ranks finished: the next snakemake run collects it" if done else
                   "launcher died with its ranks: the next snakemake run submits it again")
        last = cs.progress.t_last_s if cs.progress is not None else math.nan
        cs.elapsed_s = last - submitted if submitted is not None and last == last else None


def _all_ranks_ok(attempt: AttemptPaths, world_size: int) -> bool:
    files = attempt.rank_jsons()
    reports = read_rank_reports(attempt)
    return world_size > 0 and len(files) >= world_size and len(reports) == len(files) and all(
        r.ok for _, r in reports)


def cell_status(pc: PlannedCell, paths: CellPaths, scheduler: dict[str, dict[str, str]] | None,
                now: float | None = None) -> CellStatus:
    """The state of one planned cell.

    Args:
        pc: the cell and its plan status.
        paths: its folder.
        scheduler: SLURM's view of the jobs (:func:`slurm_view`), None where SLURM cannot be asked.
        now: the time (``time.time()``).
    """
    now = time.time() if now is None else now
    cs = CellStatus(pc.cell.cell_id, "planned")
    if pc.status != "planned":
        cs.state, cs.reason = "pruned", "; ".join(pc.reasons)
        return cs
    atts = list_attempts(paths)
    cs.attempts = len(atts)
    try:
        _record_status(cs, read_run_record(paths.run_json))
        return cs
    except RecordError as e:
        if str(e) != "missing":
            cs.state, cs.failure_class, cs.reason = "failed", "damaged", f"{paths.run_json}: {e}"
            return cs
    if not atts:
        return cs
    newest = atts[-1]
    if newest.set_aside.is_file():
        aside = _read_record(newest.run_json)
        if aside is not None:
            cs.aside_state = aside.status if aside.status in ("ok", "oom") else "failed"
        cs.note = (f"{cs.aside_state or 'its'} record set aside by calorimeter rerun into attempts/{newest.name}; "
                   "waits to run again")
        return cs
    closed = _read_record(newest.run_json)
    if closed is not None:  # ended without a record at the top: transient (or abandoned)
        _record_status(cs, closed)
        cs.state, cs.record = "failed", None
        cs.note = "no record: the next snakemake run submits it again"
        return cs
    job = read_job_record(newest.job_json)
    if job is None:
        cs.state, cs.note = "unknown", f"attempt {newest.name} has no readable job.json (being submitted?)"
        return cs
    _open_attempt(cs, newest, job, now, scheduler)
    death = peer_death(newest)
    if death is not None:  # the launcher saw a rank die: the cell is being ended (or its launcher died meanwhile)
        cs.failure_class, cs.reason = "peer_died", death.describe()
        if cs.state == "interrupted":
            cs.state = "failed"
        cs.note = ("ending the cell: " if cs.state == "running" else "") + cs.reason
    error = _read_json(newest.record_error)
    if error is not None and cs.state == "interrupted":  # the measurement finished, its record could not be written
        cs.state, cs.failure_class = "failed", str(error.get("failure_class") or "failed")
        cs.reason = str(error.get("reason") or "")
        cs.note = "measurement kept: the next snakemake run (or calorimeter rerun --failed) completes its record"
    return cs


def open_job_ids(cells: list[CellPaths]) -> list[str]:
    """Job ids of the SLURM attempts still open (job.json, no run.json) among these cells."""
    ids = []
    for paths in cells:
        atts = list_attempts(paths)
        if atts and not atts[-1].run_json.exists() and not paths.run_json.exists():
            job = read_job_record(atts[-1].job_json)
            if job is not None and job.executor == "slurm" and job.job_id:
                ids.append(job.job_id)
    return ids


def slurm_view(job_ids: list[str]) -> dict[str, dict[str, str]] | None:
    """SLURM's state of these jobs in one squeue (and sacct) call; None where SLURM cannot be asked."""
    if not job_ids:
        return {}
    if not slurm.available():
        return None
    return slurm.job_states(job_ids)

"""Submit one cell through submitit (local processes by default, SLURM through the same code path) and wait.

Every attempt of a cell has its own folder ``<cell>/attempts/<UTC time>/`` (:class:`calorimeter.records.paths.
AttemptPaths`): ``job.json`` (job id, executor, the cell it runs: a changed cell never re-attaches to an old job),
submitit's folder (pickles, per-rank logs ``<job>_<rank>_log.out|err``), each rank's result, results of runs that
were requeued (preemption, time limit) and restarted set aside, one line per preemption/time-limit signal, and the
attempt's record (``run.json`` + ``steps.parquet``) written when the attempt is over, whatever its status.

``<cell>/latest`` links to the newest attempt. Attempts are never deleted. An attempt without ``run.json`` is
still open: launching the same cell again re-attaches to its job (the Snakemake process died while the job ran)
instead of submitting a duplicate.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import submitit

from calorimeter.launch import slurm as slurm_cli
from calorimeter.launch.output import rank_outputs
from calorimeter.launch.sbatch import SbatchValueError, check_sbatch_parameters
from calorimeter.launch.snapshot import with_snapshot
from calorimeter.launch.space import check_free_space
from calorimeter.launch.task import CellTask
from calorimeter.launch.watch import PeerWatch, local_ranks, slurm_decision, stop_ranks
from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import PROFILES, accelerator_of
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.settings import LauncherSettings
from calorimeter.records.atomic import write_json_atomic
from calorimeter.records.job import JobRecord, read_job_record
from calorimeter.records.job_states import AFTER_A_RUN, ENDED, RESTARTING, base_state
from calorimeter.records.paths import AttemptPaths, CellPaths, RunPaths
from calorimeter.records.progress import ProgressLog
from calorimeter.records.rank import RankDeath, RankOutput, RankReport, last_restart, last_run, read_rank_reports
from calorimeter.records.record import abandoned_record

log = logging.getLogger(__name__)


class CellConfigError(ValueError):
    """The cell cannot be submitted as configured (caught before anything is submitted)."""


@dataclass
class LaunchOutcome:
    """What came back from one attempt of a cell."""

    attempt: AttemptPaths
    job_id: str
    executor: str
    rank_results: list[RankReport] = field(default_factory=list)
    launcher_error: str | None = None
    wall_time_s: float = 0.0
    reattached: bool = False
    ended_unwatched: bool = False
    slurm: JsonObject | None = None
    requeues: list[JsonObject] = field(default_factory=list)
    #: every rank's output tail (:func:`calorimeter.launch.output.rank_outputs`)
    rank_output: list[RankOutput] = field(default_factory=list)

    @property
    def run(self) -> RunPaths:
        """The run of the job the rank results come from (its last)."""
        return self.attempt.run(last_restart(self.rank_results))


def resolve_executor(name: str) -> str:
    """``auto`` -> ``slurm`` when ``sbatch`` is on PATH, else ``local``."""
    if name == "auto":
        return "slurm" if shutil.which("sbatch") else "local"
    return name


def cell_key(cell: Cell) -> str:
    """Digest of everything that defines the cell's measurement (a changed value is a different measurement)."""
    return hashlib.sha256(json.dumps(cell.to_dict(), sort_keys=True, default=str).encode()).hexdigest()[:16]


def executor_parameters(cell: Cell, launcher: LauncherSettings) -> tuple[str, JsonObject]:
    """(executor, submitit parameters) of a cell under the launcher settings
    (:func:`calorimeter.launch.settings.launcher_settings`); raises CellConfigError before anything is submitted."""
    executor = resolve_executor(launcher.executor)
    accelerator = accelerator_of(cell.hardware)
    gpus = cell.gpus_per_node if accelerator in ("cuda", "rocm") else 0
    timeout_min = launcher.timeout_min
    cpus = _cpus_per_task(cell, launcher, executor)
    env_setup = [f"export OMP_NUM_THREADS={cpus}"]
    if accelerator == "cpu":
        env_setup.append("export DS_ACCELERATOR=cpu")
    if executor == "local":
        if cell.nodes != 1:
            raise CellConfigError(f"cell {cell.cell_id} needs {cell.nodes} nodes; the local executor runs one node "
                                  "(use launcher.executor: slurm, e.g. snakemake --profile profiles/slurm)")
        # the controller warns rank 0 this long before the limit (rank 0 then records the time-out): never later
        # than a quarter of the limit, so that a short limit is warned too
        delay_s = min(launcher.signal_delay_s, max(15, timeout_min * 60 // 4))
        return executor, dict(tasks_per_node=cell.gpus_per_node, gpus_per_node=gpus, timeout_min=timeout_min,
                          signal_delay_s=delay_s, setup=env_setup)
    if executor != "slurm":
        raise CellConfigError(f"launcher.executor: unknown executor {executor!r} (local, slurm, auto)")
    if not slurm_cli.available():
        raise CellConfigError("launcher.executor is slurm but sbatch/squeue are not on PATH (run Snakemake on a "
                              "login node of the cluster, or use the local executor)")
    s = launcher.slurm
    constraint = s.constraint
    if constraint == "auto":
        constraint = PROFILES[cell.hardware].slurm_constraint if cell.hardware in PROFILES else None
    params: JsonObject = dict(
        job_name=cell.cell_id, nodes=cell.nodes, ntasks_per_node=cell.gpus_per_node, cpus_per_task=cpus,
        time=timeout_min, signal_delay_s=launcher.signal_delay_s,
        setup=[*s.setup, *env_setup],
        additional_parameters={"open-mode": "append", **s.extra},
        srun_args=["--kill-on-bad-exit=1"],  # a rank that dies ends the step at once (calorimeter.launch.watch)
    )
    if s.gpus is not None and s.gpus != gpus:
        raise CellConfigError(f"cell {cell.cell_id} uses {gpus} GPUs per node, the profile asks for {s.gpus} "
                              "(resource gpu/gres of rule train): the cell decides, remove the count from the profile")
    if gpus:
        typed: int | str = f"{s.gpu_type}:{gpus}" if s.gpu_type else gpus
        if s.gpus_as_gres:
            params["gres"] = f"gpu:{typed}"
        else:
            params["gpus_per_node"] = typed
    for key, value in (("partition", s.partition), ("account", s.account), ("qos", s.qos)):
        if value:
            params[key] = str(value)
    if constraint:
        params["constraint"] = str(constraint)
    if s.mem_mib:  # the plugin's names (mem_mb, mem, mem_mib): as the plugin sends them
        params["mem"] = f"{max(1, math.ceil(float(s.mem_mib)))}M"
    elif s.mem_gb:  # GB = 10^9 bytes; SLURM's M is 2^20 bytes
        params["mem"] = f"{max(1, math.ceil(float(s.mem_gb) * 1e9 / 2**20))}M"
    if s.exclusive:
        params["exclusive"] = True
    try:
        return executor, check_sbatch_parameters(params)
    except SbatchValueError as e:
        raise CellConfigError(f"cell {cell.cell_id}: {e}") from None


def _cpus_per_task(cell: Cell, launcher: LauncherSettings, executor: str) -> int:
    """``launcher.cpus_per_task``, or where unset 1 locally and on SLURM the partition's cores per node divided by
    the cell's ranks per node."""
    if launcher.cpus_per_task:
        return launcher.cpus_per_task
    if executor != "slurm":
        return 1
    cores = slurm_cli.node_cpus(launcher.slurm.partition)
    return max(1, cores // cell.gpus_per_node) if cores else 1


def make_executor(executor: str, params: JsonObject, folder: Path, max_requeues: int) -> submitit.Executor:
    """A submitit executor for :func:`executor_parameters`' (executor, parameters): one task per rank."""
    if executor == "local":
        ex = submitit.LocalExecutor(folder=str(folder))
    else:
        ex = submitit.SlurmExecutor(folder=str(folder), max_num_timeout=max_requeues, python=sys.executable)
    ex.update_parameters(**params)
    return ex


def attempts(cell: CellPaths) -> list[AttemptPaths]:
    """Attempts of a cell, oldest first."""
    root = cell.attempts
    return [AttemptPaths(p) for p in sorted((p for p in root.iterdir() if p.is_dir() and not p.is_symlink()),
                                            key=lambda p: p.name)] if root.is_dir() else []


def _new_attempt(cell: CellPaths) -> AttemptPaths:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    attempt = cell.attempt(stamp)
    n = 1
    while attempt.root.exists():
        attempt = cell.attempt(f"{stamp}-{n}")
        n += 1
    attempt.staging.mkdir(parents=True)
    return attempt


def _link_latest(cell: CellPaths, attempt: AttemptPaths) -> None:
    """``<cell>/latest`` -> ``attempts/<name>`` (relative, replaced atomically)."""
    tmp = cell.root / f".latest.{os.getpid()}"
    try:
        if tmp.is_symlink():
            tmp.unlink()
        tmp.symlink_to(attempt.root.relative_to(cell.root))
        os.replace(tmp, cell.latest)
    except OSError as e:  # a file system without symlinks: the record still names the folder
        log.debug("no latest link: %s", e)


def open_attempt(cell: Cell, paths: CellPaths) -> tuple[AttemptPaths, JobRecord] | None:
    """The newest attempt of this very cell that is still open (job.json, no run.json), if any."""
    for attempt in reversed(attempts(paths)):
        if attempt.run_json.exists():
            return None  # the newest closed attempt ends the search: older open ones are abandoned
        if attempt.job_json.exists():
            job = read_job_record(attempt.job_json)
            return (attempt, job) if job is not None and job.cell_key == cell_key(cell) else None
    return None


def _job_handle(job: JobRecord, attempt: AttemptPaths, world_size: int) -> submitit.Job | None:
    """A submitit handle on an earlier attempt's job, for waiting on it again; None if it cannot be re-attached."""
    if job.executor == "slurm" and slurm_cli.available():
        folder = job.submitit_folder or attempt.submitit  # an array's tasks share the array's folder
        return submitit.SlurmJob(folder=folder, job_id=job.job_id, tasks=tuple(range(world_size)))
    return None  # a local attempt's processes died with the process that started them


def _wait(job: submitit.Job, poll_s: float, progress: ProgressLog | None = None, watch: PeerWatch | None = None,
          slurm: tuple[AttemptPaths, int] | None = None, node_lost_wait_s: float = math.inf
          ) -> RankDeath | None:
    """Block until the job is done, forcing a state check (sacct) at least every ``poll_s`` seconds; ``progress``
    logs the running cell's steps meanwhile; ``watch`` checks the ranks of this host every second: when one died
    without a result, the job is cancelled at once and that death is returned (:mod:`calorimeter.launch.watch`);
    when rank 0 of a local job recorded its time limit, the other ranks are stopped at once (they would only wait
    for the local limit's kill). For a SLURM job (``slurm``: its attempt and world size),
    :func:`calorimeter.launch.watch.slurm_decision` bounds the wait: a job SLURM requeued is waited for (one copy
    only), but not for more than ``node_lost_wait_s`` while it waits for a lost node (then it is cancelled, and
    ``launcher_cancelled.json`` names the node: :func:`calorimeter.launch.slurm.lost_nodes`); a job whose ranks
    failed while SLURM has not noticed a lost node, or that hangs COMPLETING after every rank's result, is not
    waited for."""
    last = start = time.time()
    ran = False
    waiting_since: float | None = None
    while True:
        force = time.time() - last >= poll_s
        if force:
            last = time.time()
        done = job.done(force_check=force)
        if slurm is not None and (force or done):  # (attempt, world size) of a SLURM job: its end, bounded
            attempt, world_size = slurm
            live = slurm_cli.squeue_state(str(job.job_id))
            ran = ran or done or live in ("RUNNING", "COMPLETING")  # done: a run ended, whether it was seen or not
            if waiting_since is None and ran and live in AFTER_A_RUN:
                if _node_failed(str(job.job_id), live):  # SLURM requeues it (RESTARTING) or is about to
                    waiting_since = time.time()
            elif live not in AFTER_A_RUN:
                waiting_since = None
            current = last_run([r for _, r in read_rank_reports(attempt)])  # the results of its run so far
            action, why = slurm_decision(done, live, current, world_size, time.time(),
                                         waiting_since, node_lost_wait_s)
            if action in ("cancel", "node_lost"):
                log.warning("job %s: %s: cancelling it", job.job_id, why)
                lost = slurm_cli.lost_nodes(str(job.job_id)) if action == "node_lost" else None
                job.cancel(check=False)
                write_json_atomic(attempt.launcher_cancelled, {
                    "job_id": str(job.job_id), "why": why, "time_s": time.time(),
                    **({"node_lost": {**lost, "waited_s": time.time() - (waiting_since or time.time())}}
                       if lost is not None else {})})
                return None
            if action == "return":
                return watch.check() if watch is not None else None
            done = False
        if done:
            return watch.check() if watch is not None else None
        death = watch.check() if watch is not None else None
        limit = death is None and watch is not None and watch.processes is not None and watch.at_time_limit()
        if death is not None or limit:  # a dead rank, or a local job whose rank 0 recorded its time limit
            log.warning("cell %s: %s", job.paths.folder, death.describe() if death is not None else
                        "time limit reached: stopping the ranks")
            stop_ranks(watch.attempt, processes=watch.processes)
            job.cancel(check=False)
            deadline = time.time() + 30.0
            while not job.done(force_check=True) and time.time() < deadline:
                time.sleep(0.2)
            return death
        if progress is not None:
            progress.tick()
        time.sleep(min(1.0, 0.05 + 0.1 * (time.time() - start)))  # a short cell is seen at once, a long one each s


def _node_failed(job_id: str, live: str | None) -> bool:
    """Whether SLURM requeues this job after a node failure: its last run ended NODE_FAIL (sacct), or, once it waits
    again (``live`` in RESTARTING), any of its runs did."""
    states = [slurm_cli.base_state(r["State"]) for r in slurm_cli.sacct_records(job_id)]
    if live in RESTARTING:
        return "NODE_FAIL" in states
    return bool(states) and states[-1] == "NODE_FAIL"


def _collect(attempt: AttemptPaths) -> list[RankReport]:
    """Rank results of the attempt's last run; results of runs interrupted by a requeue are moved aside."""
    found = read_rank_reports(attempt)
    last = last_restart([r for _, r in found])
    for f, r in found:
        if r.restart < last:
            dest = attempt.interrupted(r.restart)
            dest.mkdir(parents=True, exist_ok=True)
            f.replace(dest / f.name)
    return last_run([r for _, r in found])


def _requeue_events(attempt: AttemptPaths) -> list[JsonObject]:
    f = attempt.requeues
    if not f.exists():
        return []
    return [json.loads(line) for line in f.read_text().splitlines() if line.strip()]


def launch_cell(cell: Cell, settings: LauncherSettings, paths: CellPaths) -> LaunchOutcome:
    """Run one attempt of a cell (or re-attach to the open one) and collect every rank's result file.

    Each attempt has its own folder ``<cell>/attempts/<UTC time>/`` holding submitit's logs and the ranks'
    results; attempts are never deleted, so a failed or superseded attempt stays inspectable.

    Args:
        cell: the cell.
        settings: the launcher settings (:func:`calorimeter.launch.settings.launcher_settings`).
        paths: the cell's folder.

    Raises:
        CellConfigError: the cell cannot be submitted as configured (nothing was submitted).
    """
    executor, params = executor_parameters(cell, settings)  # validates before anything is created or submitted
    t0 = time.time()
    reattached = ended_unwatched = False
    job = None
    prev = open_attempt(cell, paths)
    if prev is not None:
        attempt, info = prev
        job = _job_handle(info, attempt, cell.world_size)
        if job is not None:
            reattached = True
            executor = info.executor
            state = slurm_cli.job_state(info.job_id)
            ended_unwatched = state is None or base_state(state) in ENDED
            log.info("cell %s: re-attaching to job %s of attempt %s (state %s)", cell.cell_id, info.job_id,
                     attempt.name, state)
        else:
            results = _collect(attempt)
            if len(results) == cell.world_size and all(r.ok for r in results):
                log.info("cell %s: attempt %s finished after its launcher died; using it", cell.cell_id,
                         attempt.name)
                return LaunchOutcome(attempt, info.job_id, info.executor, results, None, 0.0, True)
            write_json_atomic(attempt.run_json, abandoned_record(cell, "abandoned: its launcher died"))
    if job is None:
        check_free_space(cell, settings, paths.root)  # refuse before training: DiskSpaceError with the numbers
        attempt = _new_attempt(paths)
        if executor == "slurm" and settings.snapshot:  # a queued job runs the code of its submission
            params, code = with_snapshot(params, paths.root.parents[1])
            settings = dataclasses.replace(settings, code_snapshot=str(code))
        job = make_executor(executor, params, attempt.submitit, settings.max_requeues).submit(
            CellTask(cell, str(attempt.root), settings))
        JobRecord(str(job.job_id), executor, cell.cell_id, cell_key(cell), cell.world_size, t0, socket.gethostname(),
                  str(attempt.submitit), launcher=settings).write(attempt.job_json)
        log.info("cell %s: submitted job %s (%s, %d nodes x %d ranks)", cell.cell_id, job.job_id, executor,
                 cell.nodes, cell.gpus_per_node)
    _link_latest(paths, attempt)
    error = None
    try:
        # a local job's ranks are this host's processes under its controller (pid = job id): watched from the start
        processes = (lambda: local_ranks(int(job.job_id))) if executor == "local" else None
        death = _wait(job, float(settings.poll_s), ProgressLog(attempt, cell.cell_id),
                      PeerWatch(attempt, processes=processes, world_size=cell.world_size),
                      (attempt, cell.world_size) if executor == "slurm" else None, float(settings.node_lost_wait_s))
        if death is not None:  # never wait for the dead rank's result (submitit would, 15 s)
            error = f"peer died: {death.describe()}"
        else:
            job.results()
    except Exception as e:  # noqa: BLE001 - the ranks' own files say what happened; this is the launcher's view
        error = f"{type(e).__name__}: {str(e).strip()[-2000:]}"
    job_id = str(job.job_id)
    evidence = slurm_cli.final_evidence(job_id) if executor == "slurm" else None
    results = _collect(attempt)
    return LaunchOutcome(attempt, job_id, executor, results, error, time.time() - t0, reattached, ended_unwatched,
                         evidence, _requeue_events(attempt),
                         rank_outputs(attempt, job_id, cell.world_size, results,
                                      socket.gethostname() if executor == "local" else None))

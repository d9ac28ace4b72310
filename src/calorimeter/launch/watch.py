"""Fail fast when a rank dies: the launcher watches its ranks as torchrun's agent watches its workers.

Every rank writes ``alive-<rank>.json`` (pid, host, start time) into the attempt's staging folder as its very first
act, before torch is imported. While the launcher waits for the job, :class:`PeerWatch` checks each rank of its own
host: a rank whose process is gone (or a zombie) without having written its result died (killed, OOM-killed, a
segfault). A local job's ranks are also watched as the processes the launcher started (:func:`local_ranks`: the
submitit tasks under the job's controller, each with its rank in its environment), from the moment they exist: a
rank that dies before it has written its alive file (while Python starts or imports) is found the same way, and so
is one whose process was gone before the launcher ever saw it (its peers were seen :data:`NEVER_SEEN_S` ago). The
first such death is written to ``peer_died.json`` (the rank, host, pid and times: the evidence of which rank went
first); the other ranks of the host get :data:`GRACE_S` to end by themselves (a broken connection
fails their collective at once) and are then killed (one waiting in the rendezvous would wait for the store
timeout; submitit's tasks ignore SIGTERM); the job is cancelled, and the record's class is ``peer_died``. Without
this, a rank killed before the rendezvous held its cell for the store timeout (602 s; 626 s for one killed before
its alive file), and one killed mid-training made the launcher wait 15 s for the dead rank's result.

Ranks on other hosts (SLURM) are watched by SLURM itself: their step runs with ``srun --kill-on-bad-exit=1``, so a
rank that dies ends the step (:func:`calorimeter.launch.submit.executor_parameters`). A rank that goes silent
without dying where anyone sees it (its host lost without a connection reset, a frozen process) is found by its
heartbeat: every rank's alive file is touched each :data:`HEARTBEAT_S`, on the shared results folder, so a rank
whose heartbeat is :data:`STALE_S` behind the freshest one, without a result, is taken for dead (the peers it
left behind would otherwise wait for torch's process-group timeout, 600 s on gloo). Staleness is measured against
the other ranks' heartbeats, never against this host's clock, so clock skew between hosts does not matter.
Only the ranks of the job's latest run (the highest ``restart``) are watched: after SLURM requeues a job, a rank of
the new run that has not announced itself yet leaves the previous run's alive file behind, which is neither dead
nor stale.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from calorimeter.plan.json_types import JsonObject
from calorimeter.records import job_states
from calorimeter.records.atomic import read_json_object, write_json_atomic
from calorimeter.records.paths import AttemptPaths
from calorimeter.records.rank import RankDeath, RankReport

#: what a rank writes as it starts (``alive-<rank>.json``: rank, pid, host, restart, t_start_s)
Alive = JsonObject


def _announced(alive: Alive) -> RankDeath:
    """The death of a rank that announced itself (its alive file)."""
    return RankDeath(int(alive["rank"]), alive.get("host"), alive.get("pid"), alive.get("restart"),
                     t_start_s=alive.get("t_start_s"))


def alive_path(attempt: AttemptPaths, rank: int) -> Path:
    """Where rank ``rank`` says it started."""
    return attempt.staging / f"alive-{rank}.json"


#: seconds between two heartbeats of a rank (the mtime of its alive file)
HEARTBEAT_S = 1.0
#: a rank whose heartbeat is this far behind the freshest rank's, without a result, is taken for dead (20 beats:
#: far above NFS attribute caching of a file that changes every second, ~3 s, and a loaded host's scheduling)
STALE_S = 20.0


def announce(attempt: AttemptPaths, rank: int, restart: int) -> None:
    """Called first on every rank: its pid and host, for the launcher's watch; then a heartbeat (the file's mtime,
    every :data:`HEARTBEAT_S`) for as long as the process lives, so that the rank whose heartbeat stopped first can
    be named where the launcher cannot see the process (another host: :func:`heartbeat_death`)."""
    attempt.staging.mkdir(parents=True, exist_ok=True)
    path = alive_path(attempt, rank)
    write_json_atomic(path, {"rank": rank, "pid": os.getpid(), "host": socket.gethostname(), "restart": restart,
                             "t_start_s": time.time()}, fsync=False)

    def beat() -> None:
        while True:
            time.sleep(HEARTBEAT_S)
            try:
                os.utime(path)
            except OSError:
                return

    threading.Thread(target=beat, name="calorimeter-heartbeat", daemon=True).start()


def heartbeat_death(attempt: AttemptPaths, ranks_with_result: set[int], margin_s: float = 3 * HEARTBEAT_S
                    ) -> RankDeath | None:
    """The rank (without a result) whose heartbeat stopped first, when it stopped at least ``margin_s`` before any
    other's (then it went first: its peers lived on), else None."""
    beats = []
    for f in attempt.staging.glob("alive-*.json"):
        a = read_json_object(f)
        if a is None:
            continue
        try:
            beats.append((f.stat().st_mtime, a))
        except OSError:
            continue
    if len(beats) < 2:
        return None
    beats.sort(key=lambda b: b[0])
    (t0, first), (t1, _) = beats[0], beats[1]
    if int(first.get("rank", -1)) in ranks_with_result or t1 - t0 < margin_s:
        return None
    return RankDeath(int(first["rank"]), first.get("host"), first.get("pid"), first.get("restart"), "heartbeat",
                     t_last_beat_s=t0, others_lived_s=t1 - t0)


def process_gone(pid: int) -> bool:
    """Whether a process of this host has exited (absent, or a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")




#: a rank of a local job whose process the launcher never saw while its peers' ran this long died before it was seen
#: (the controller starts every rank at once, within milliseconds)
NEVER_SEEN_S = 5.0
#: the environment variable in which submitit's local controller gives each task its rank
_LOCAL_RANK_ENV = b"SUBMITIT_LOCAL_GLOBALID="


def _children() -> dict[int, list[int]]:
    """parent pid -> pids of its children, for every process of this host (``/proc/<pid>/stat``)."""
    out: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[-1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out.setdefault(ppid, []).append(int(entry.name))
    return out


def _local_task_rank(pid: int) -> int | None:
    """The rank of a running submitit task of a local job (None for any other process, or one that has ended)."""
    try:
        if b"submitit" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return None
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for var in env:
        if var.startswith(_LOCAL_RANK_ENV):
            try:
                return int(var[len(_LOCAL_RANK_ENV):])
            except ValueError:
                return None
    return None


def local_ranks(root_pid: int) -> dict[int, int]:
    """rank -> pid of every live rank of the local job whose controller (or the shell that starts it) is
    ``root_pid``: the submitit tasks among its descendants (a rank's own children, such as a command's processes,
    are not ranks)."""
    children = _children()
    ranks: dict[int, int] = {}
    todo = list(children.get(root_pid, []))
    while todo:
        pid = todo.pop()
        rank = _local_task_rank(pid)
        if rank is not None:
            if not process_gone(pid):
                ranks[rank] = pid
        else:
            todo.extend(children.get(pid, []))
    return ranks


def peer_death(attempt: AttemptPaths) -> RankDeath | None:
    """The first rank death recorded for this attempt (``peer_died.json``), if any."""
    d = read_json_object(attempt.peer_died)
    try:
        return RankDeath.from_dict(d) if d is not None else None
    except ValueError:
        return None


def leave_if_a_peer_died(attempt: AttemptPaths, rank: int, restart: int) -> None:
    """Called by a rank right after :func:`announce`: when the launcher has already recorded a peer's death in this
    run, the rank exits at once instead of waiting for that peer in the rendezvous (the store's timeout, 600 s).
    Together with :func:`stop_ranks` reading the ranks again after its grace this leaves no window: a rank either
    announced itself before that second read (and is stopped) or after ``peer_died.json`` was written (and sees it).
    """
    death = peer_death(attempt)
    if death is not None and (death.restart or 0) == restart:
        print(f"rank {rank}: rank {death.rank} on host {death.host} died before this rank started; leaving",
              flush=True)
        os._exit(3)


class PeerWatch:
    """Checks the ranks of this host for one that died without a result (module docstring).

    Args:
        attempt: the attempt's folder.
        host: this host's name.
        processes: for a local job, the ranks it runs now (rank -> pid; :func:`local_ranks` of its controller).
        world_size: the job's ranks (with ``processes``: a rank never seen running is found too).
    """

    def __init__(self, attempt: AttemptPaths, host: str | None = None,
                 processes: Callable[[], dict[int, int]] | None = None, world_size: int = 0):
        self.attempt = attempt
        self.host = host or socket.gethostname()
        self.processes = processes
        self.world_size = world_size
        #: rank -> (pid, when it was first seen) of every rank process seen so far
        self.seen: dict[int, tuple[int, float]] = {}
        self._first_seen_s: float | None = None

    def at_time_limit(self) -> bool:
        """Whether a rank of this attempt recorded the time limit (its peers then end with the job)."""
        return any((read_json_object(f) or {}).get("status") == "timeout" for f in self.attempt.rank_jsons())

    def _process_deaths(self, requeued_s: float | None) -> list[RankDeath]:
        """The ranks whose process this launcher saw end (or never saw) without a result."""
        if self.processes is None:
            return []
        now = time.time()
        live = self.processes()
        for rank, pid in live.items():
            if self.seen.get(rank, (None, 0.0))[0] != pid:
                self.seen[rank] = (pid, now)
        if live and self._first_seen_s is None:
            self._first_seen_s = now
        dead = [RankDeath(rank, self.host, pid, 0, "process", "its process ended", t_start_s=t)
                for rank, (pid, t) in self.seen.items() if rank not in live or process_gone(pid)]
        if self._first_seen_s is not None and now - self._first_seen_s > NEVER_SEEN_S:
            unseen = "its process ended before the launcher saw it, pid unknown"
            dead += [RankDeath(rank, self.host, None, 0, "process", unseen, t_start_s=self._first_seen_s)
                     for rank in range(self.world_size) if rank not in self.seen]
        return [d for d in dead if not self.attempt.rank_json(d.rank).exists()
                and not (requeued_s is not None and requeued_s >= (d.t_start_s or 0.0))]

    def _last_requeue_s(self) -> float | None:
        return _last_requeue(self.attempt)

    def check(self) -> RankDeath | None:
        """The first death (also written to ``peer_died.json``), or None while every rank lives or has a result."""
        known = peer_death(self.attempt)
        if known is not None:
            return known
        if self.at_time_limit():
            return None  # rank 0 hit the time limit: the other ranks are ended with the job, not dead peers
        dead = []
        requeued_s = self._last_requeue_s()
        beats: list[tuple[float, Alive]] = []
        for f in self.attempt.staging.glob("alive-*.json"):
            a = read_json_object(f)
            if a is None or not isinstance(a.get("pid"), int):
                continue
            rank = int(a.get("rank", -1))
            if self.attempt.rank_json(rank).exists():
                continue
            if requeued_s is not None and requeued_s >= float(a.get("t_start_s") or 0):
                continue  # checkpointed and requeued (preemption, time limit): its next run announces itself
            try:
                beats.append((f.stat().st_mtime, a))
            except OSError:
                continue
            if a.get("host") == self.host and process_gone(a["pid"]):
                dead.append(_announced(a))
        latest = max((int(a.get("restart") or 0) for _, a in beats), default=0)
        dead = [d for d in dead if (d.restart or 0) == latest]
        announced = {d.rank for d in dead}
        dead += [d for d in self._process_deaths(requeued_s) if d.rank not in announced]
        if not dead:
            return self._silent([b for b in beats if int(b[1].get("restart") or 0) == latest])
        first = min(dead, key=lambda d: d.t_start_s or 0.0)  # one poll: all seen at once
        death = dataclasses.replace(first, t_detected_s=time.time(), ranks_dead=tuple(sorted(d.rank for d in dead)))
        if first.rank not in announced:  # found as a process: it never wrote its alive file
            death = dataclasses.replace(death, how=f"{first.how}; the rank had not announced itself")
        write_json_atomic(self.attempt.peer_died, death.to_dict())
        return death

    def _silent(self, beats: list[tuple[float, Alive]], stale_s: float = STALE_S) -> RankDeath | None:
        """The rank without a result whose heartbeat is the furthest behind, when it is ``stale_s`` behind the
        freshest (also written to ``peer_died.json``), else None. ``beats``: (mtime, alive record) per rank."""
        if len(beats) < 2:
            return None
        beats = sorted(beats, key=lambda b: b[0])
        (t_stale, a), t_fresh = beats[0], beats[-1][0]
        if t_fresh - t_stale < stale_s:
            return None
        death = dataclasses.replace(_announced(a), source="heartbeat", t_detected_s=time.time(), t_last_beat_s=t_stale,
                                    how=f"no heartbeat for {t_fresh - t_stale:.0f} s while its peers' went on",
                                    ranks_dead=(int(a["rank"]),))
        write_json_atomic(self.attempt.peer_died, death.to_dict())
        return death


#: seconds the surviving ranks get to end by themselves (a broken connection fails their collective at once, and
#: they write their own result) before they are killed (one waiting in the rendezvous never ends by itself)
GRACE_S = 3.0


def _ranks_of_host(attempt: AttemptPaths, host: str) -> dict[int, int]:
    """rank -> pid of every rank of ``host`` that has announced itself (a running submitit task)."""
    live = {}
    for f in attempt.staging.glob("alive-*.json"):
        a = read_json_object(f)
        if a is not None and a.get("host") == host and isinstance(a.get("pid"), int) and _is_rank(a["pid"]):
            live[int(a.get("rank", -1))] = a["pid"]
    return live


def stop_ranks(attempt: AttemptPaths, grace_s: float = GRACE_S, host: str | None = None,
               processes: Callable[[], dict[int, int]] | None = None) -> list[int]:
    """SIGKILL the ranks of this host that still run ``grace_s`` seconds from now; the ranks killed.

    The ranks are read again after the grace: one that announced itself meanwhile (it started after its peer died)
    is stopped too. One that announces itself later still finds ``peer_died.json``, written before this is called,
    and leaves by itself (:func:`leave_if_a_peer_died`). ``processes`` (a local job's ranks, rank -> pid) adds the
    ranks that have not announced themselves yet."""
    host = host or socket.gethostname()

    def ranks() -> dict[int, int]:
        return {**(processes() if processes is not None else {}), **_ranks_of_host(attempt, host)}

    deadline = time.time() + grace_s
    while time.time() < deadline and any(not process_gone(p) for p in ranks().values()):
        time.sleep(0.1)
    live = ranks()
    killed = []
    for rank, pid in sorted(live.items()):
        if not process_gone(pid):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(rank)
            except OSError:
                pass
    return killed


def _is_rank(pid: int) -> bool:
    """Whether ``pid`` runs a submitit task (not a reused pid)."""
    try:
        return b"submitit" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


#: srun's line for a task that ended badly: ``srun: error: node2: task 1: Killed``
_SRUN_TASK = re.compile(r"srun: error: (?P<host>[\w.-]+): tasks? (?P<rank>\d+)(?:-\d+)?: (?P<how>[^\n]+)")


def srun_death(texts: list[str], ranks_with_result: set[int]) -> RankDeath | None:
    """The first task srun reported as ended badly (killed, or exited non-zero) that left no result: SLURM's view of
    the rank that went first (srun --kill-on-bad-exit then ended the others), or None."""
    for text in texts:
        for m in _SRUN_TASK.finditer(text or ""):
            rank = int(m.group("rank"))
            if rank not in ranks_with_result:
                return RankDeath(rank, m.group("host"), source="srun", how=m.group("how").strip())
    return None


def _last_requeue(attempt: AttemptPaths) -> float | None:
    """Time of the attempt's last checkpoint event (``requeues.jsonl``), if any."""
    try:
        lines = [ln for ln in attempt.requeues.read_text().splitlines() if ln.strip()]
        return float(json.loads(lines[-1])["time_s"]) if lines else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


#: a rank reported a failure this long ago and the job still runs: its peers are gone or hung (a lost node SLURM has
#: not noticed yet, for SlurmdTimeout): end the job
FAILED_RANK_GRACE_S = 30.0
#: every rank wrote its result and the job has been COMPLETING this long (a stopped slurmd holds it there): done
COMPLETING_GRACE_S = 10.0


def slurm_decision(done: bool, live_state: str | None, results: list[RankReport], world_size: int,
                   now: float, waiting_since: float | None, node_lost_wait_s: float) -> tuple[str, str]:
    """What the launcher does with a SLURM job it waits for: (``wait`` | ``return`` | ``cancel`` | ``node_lost``,
    why); ``node_lost`` cancels it too.

    Args:
        done: submitit's view: the job reached a terminal state.
        live_state: squeue's state now (None: no longer listed).
        results: the rank results written so far (this run's).
        world_size: ranks of the cell.
        now: the time.
        waiting_since: when the job was first seen ending (COMPLETING) or waiting again after a run that ended
            NODE_FAIL (SLURM requeues it after a node failure), else None (a requeue after a preemption waits in
            the queue as long as it must).
        node_lost_wait_s: how long a job requeued after a node failure may wait (``launcher.node_lost_wait_s``).

    Exactly one copy of a cell runs: a job SLURM requeued (after NODE_FAIL) is waited for, never resubmitted beside
    it, but not for longer than ``node_lost_wait_s`` (then it is cancelled, ``node_lost``: the cell is recorded
    failed naming the node, since a retry would only wait for the same missing node). That includes the seconds
    between the node failure and the requeue, while SLURM kills the run's processes (COMPLETING, up to KillWait)
    and sacct already says NODE_FAIL: returning then let a retry submit a second job while SLURM started the
    requeued one (seen in CI).
    """
    if waiting_since is not None and live_state in job_states.AFTER_A_RUN:
        if now - waiting_since > node_lost_wait_s:
            return "node_lost", (f"requeued by SLURM after a node failure and still {live_state} after "
                                 f"{node_lost_wait_s:.0f} s (launcher.node_lost_wait_s): no node took the lost one's "
                                 "place")
        return "wait", f"requeued by SLURM ({live_state})"
    if done and live_state in (*job_states.RESTARTING, "RUNNING"):  # the run ended (NODE_FAIL); SLURM runs it again
        return "wait", f"requeued by SLURM ({live_state})"
    if done:
        return "return", "ended"
    failed = [r for r in results if r.status not in ("ok", "")]
    if failed and live_state == "RUNNING":
        first = min(failed, key=lambda r: r.t_end_s or now)
        ended_s = first.t_end_s or now
        if now - ended_s > FAILED_RANK_GRACE_S:
            return "cancel", (f"rank {first.rank} failed {now - ended_s:.0f} s ago and the job still runs (a lost "
                              "node SLURM has not noticed yet)")
    if live_state == "COMPLETING" and len(results) >= world_size:
        last = max(r.t_end_s or now for r in results)
        if now - last > COMPLETING_GRACE_S:
            return "return", "every rank wrote its result; the job is still COMPLETING (a node's slurmd is gone?)"
    return "wait", ""

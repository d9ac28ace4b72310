"""SLURM state and evidence for one job: squeue for live jobs, sacct for history (requeues included)."""

from __future__ import annotations

import shutil
import subprocess
import time

from calorimeter.plan.json_types import JsonObject
from calorimeter.records.job_states import ENDED, base_state

SACCT_FIELDS = ("JobID", "JobName", "State", "ExitCode", "DerivedExitCode", "Reason", "Elapsed", "Timelimit",
                "NodeList", "Submit", "Start", "End", "AllocTRES")


def available() -> bool:
    """Whether the SLURM client commands are on PATH."""
    return shutil.which("sbatch") is not None and shutil.which("squeue") is not None


def _run(cmd: list[str], timeout: float = 30) -> str | None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 else None


def squeue_state(job_id: str) -> str | None:
    """The live state of a job from squeue (no accounting lag), or None when squeue no longer knows it."""
    out = _run(["squeue", "-h", "-j", str(job_id), "-o", "%T"])
    if not out:
        return None
    states = [s.strip() for s in out.splitlines() if s.strip()]
    return states[0] if states else None


def sacct_records(job_id: str, steps: bool = False) -> list[dict[str, str]]:
    """sacct rows of a job, one per run (``-D``: a requeued job has one row per start), steps optional."""
    cmd = ["sacct", "-j", str(job_id), "-D", "--noheader", "--parsable2", "--format=" + ",".join(SACCT_FIELDS)]
    if not steps:
        cmd.insert(1, "-X")
    out = _run(cmd)
    rows = []
    for line in (out or "").splitlines():
        parts = line.split("|")
        if len(parts) == len(SACCT_FIELDS):
            rows.append(dict(zip(SACCT_FIELDS, parts, strict=True)))
    return rows


def job_state(job_id: str) -> str | None:
    """Current state: squeue while the job is known there, else the last sacct row."""
    s = squeue_state(job_id)
    if s:
        return s
    rows = sacct_records(job_id)
    return base_state(rows[-1]["State"]) if rows else None


def job_states(job_ids: list[str]) -> dict[str, dict[str, str]]:
    """Many jobs at once (one squeue and at most one sacct call): job id -> ``state`` and, where known,
    ``start`` (ISO time the current run started), ``elapsed``, ``nodelist``, ``reason`` (why pending); jobs
    neither command knows are left out."""
    ids = sorted({str(j) for j in job_ids})
    if not ids:
        return {}
    out: dict[str, dict[str, str]] = {}
    for line in (_run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i|%T|%S|%M|%N|%r"]) or "").splitlines():
        parts = line.strip().split("|")
        if len(parts) == 6 and parts[0] in ids:
            out[parts[0]] = {"state": parts[1], "start": parts[2], "elapsed": parts[3], "nodelist": parts[4],
                             "reason": parts[5], "source": "squeue"}
    rest = [j for j in ids if j not in out]
    if rest:
        cmd = ["sacct", "-X", "-j", ",".join(rest), "--noheader", "--parsable2",
               "--format=JobID,State,Start,Elapsed,NodeList,Reason"]
        for line in (_run(cmd) or "").splitlines():
            parts = line.split("|")
            if len(parts) == 6 and parts[0] in rest:  # the last row of a requeued job is its current run
                out[parts[0]] = {"state": base_state(parts[1]) or "", "start": parts[2], "elapsed": parts[3],
                                 "nodelist": parts[4], "reason": parts[5], "source": "sacct"}
    return out


def final_evidence(job_id: str, wait_s: float = 20.0) -> JsonObject:
    """sacct's view of a finished job: final state, exit code, reason and every run (requeues).

    Accounting lags the job's end by a moment, so this waits up to ``wait_s`` for a terminal state.
    """
    deadline = time.time() + wait_s
    rows: list[dict[str, str]] = []
    while True:
        rows = sacct_records(job_id)
        if rows and base_state(rows[-1]["State"]) in ENDED:
            break
        if time.time() >= deadline:
            break
        time.sleep(1.0)
    if not rows:
        return {"job_id": str(job_id), "state": None, "note": "sacct returned nothing (accounting off or lagging)"}
    last = rows[-1]
    return {"job_id": str(job_id), "state": base_state(last["State"]), "state_raw": last["State"],
            "exit_code": last["ExitCode"], "derived_exit_code": last["DerivedExitCode"], "reason": last["Reason"],
            "elapsed": last["Elapsed"], "timelimit": last["Timelimit"], "nodelist": last["NodeList"],
            "runs": len(rows), "history": rows, "steps": sacct_records(job_id, steps=True)}


def node_cpus(partition: str | None = None) -> int | None:
    """The fewest CPUs of a node of ``partition`` (the default partition when None), from ``sinfo``; None when sinfo
    does not answer."""
    out = _run(["sinfo", "-h", "-N", "-o", "%c", *(["-p", partition] if partition else [])])
    counts = [int(x) for x in (out or "").split() if x.strip().isdigit()]
    return min(counts) if counts else None


#: sinfo's states of a node that cannot run a job (``*``: not responding)
_LOST_STATES = ("down", "drain", "drained", "draining", "fail", "failing", "no_respond", "unknown")


def lost_nodes(job_id: str) -> JsonObject:
    """The nodes a job lost: of the nodes its run that ended NODE_FAIL had (sacct), those sinfo says cannot run a
    job now (down, drained, failing, not responding), each with its state and SLURM's reason; ``nodelist`` is that
    run's node list (all of them, where sinfo names none)."""
    runs = [r for r in sacct_records(job_id) if base_state(r["State"]) == "NODE_FAIL"]
    nodelist = runs[-1]["NodeList"] if runs else ""
    nodes = []
    out = _run(["sinfo", "-h", "-N", "-o", "%N|%T|%E", *(["-n", nodelist] if nodelist else [])]) or ""
    for line in out.splitlines():
        name, _, rest = line.strip().partition("|")
        state, _, reason = rest.partition("|")
        lost = state.endswith("*") or state.rstrip("*~#%$@^-+").lower() in _LOST_STATES
        if name and lost and name not in [n["node"] for n in nodes]:
            nodes.append({"node": name, "state": state, "reason": reason})
    return {"job_id": str(job_id), "nodelist": nodelist, "nodes": nodes}

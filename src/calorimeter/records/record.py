"""Turn one attempt's rank results into the cell record (run.json + steps.parquet) and write it atomically."""

from __future__ import annotations

import hashlib
import math
import shutil
from pathlib import Path

import pandas as pd

from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import PROFILES
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.kinds import get_kind
from calorimeter.plan.models import get_model
from calorimeter.records import job_states
from calorimeter.records.atomic import write_atomic, write_json_atomic, write_parquet_atomic
from calorimeter.records.metrics import step_times_s, throughput_metrics
from calorimeter.records.paths import AttemptPaths, CellPaths
from calorimeter.records.provenance import PATCH_EXCLUDES, PATCH_NAME, git_patch, git_state, package_versions
from calorimeter.records.rank import RankDeath, RankReport
from calorimeter.records.run_record import SCHEMA_VERSION

RANK_KEYS = ("rank", "local_rank", "node", "hostname", "host_cpu", "backend", "device", "device_info", "pid",
             "stage", "num_stages", "dp_rank", "dp_size", "traced", "engine", "allocator")


class TransientCellError(RuntimeError):
    """The attempt ended without a deterministic result (killed, timed out, lost node): retry it."""


#: error text of a rank that says the cause lies outside the cell: a lost peer, a communication timeout, a kill.
TRANSIENT_PATTERNS = (
    "timed out", "timeout", "watchdog", "nccl", "connection reset", "connection refused", "connection closed",
    "broken pipe", "socket", "distbackenderror", "gloo", "no route to host", "network is unreachable",
    "killed", "sigterm", "sigkill", "signal 9", "signal 15", "node failure", "node_fail", "ecc error",
    "cuda error: an illegal memory access", "unspecified launch failure", "uncorrectable", "xid",
)


def _is_transient_error(text: str | None) -> bool:
    t = (text or "").lower()
    return any(p in t for p in TRANSIENT_PATTERNS)


#: failure classes of a transient attempt, by the first failing rank's error (first match wins); else ``transient``
TRANSIENT_CLASSES = (
    ("comm_timeout", ("timed out", "timeout", "watchdog")),
    ("peer_died", ("connection reset", "connection refused", "connection closed", "broken pipe", "socket",
                   "no route to host", "network is unreachable", "distbackenderror", "gloo", "nccl")),
    ("killed", ("killed", "sigterm", "sigkill", "signal 9", "signal 15")),
    ("node_fail", ("node failure", "node_fail")),
)


def transient_class(error: str | None) -> str:
    """The failure class of a transient error text (:data:`TRANSIENT_CLASSES`)."""
    t = (error or "").lower()
    return next((name for name, patterns in TRANSIENT_CLASSES if any(p in t for p in patterns)), "transient")


def describe_node_loss(cancelled: JsonObject) -> str:
    """The reason of a cell whose job lost a node and found none to run it again (``launcher_cancelled.json``, with
    ``rerun``: the command that reruns the sweep's failed cells)."""
    lost = cancelled.get("node_lost") or {}
    nodes = [n["node"] + (f" ({n['state']}" + (f": {n['reason']}" if n.get("reason") else "") + ")")
             for n in lost.get("nodes") or []]
    named = (f"node {', '.join(nodes)}" if len(nodes) == 1 else f"nodes {', '.join(nodes)}") if nodes else (
        f"a node of {lost.get('nodelist') or 'its job'} (SLURM does not say which)")
    return (f"{named} lost: SLURM failed job {lost.get('job_id') or cancelled.get('job_id')} (NODE_FAIL) and "
            f"requeued it, and no node took its place within {float(lost.get('waited_s') or 0):.0f} s "
            "(launcher.node_lost_wait_s); the job was cancelled. Bring the node back or change the cell, then rerun "
            f"with: {cancelled.get('rerun') or 'calorimeter rerun <sweep file> --failed'}")


def classify_attempt(rank_results: list[RankReport], world_size: int, launcher_error: str | None = None,
                     slurm_state: str | None = None, peer_died: RankDeath | None = None
                     ) -> tuple[str, str, str]:
    """(status, failure_class, reason) of an attempt.

    ``status`` is what run.json says: ``ok``, ``oom`` or ``failed`` end the cell (never resubmitted by a rerun);
    ``transient`` fails the rule (a rerun or ``--retries`` submits the cell again). Order of evidence:

    1. every rank ok -> ok;
    2. a rank ran out of memory, or SLURM's OUT_OF_MEMORY (host memory) -> oom;
    3. the time limit was hit (a rank says ``timeout``, or SLURM's TIMEOUT) -> failed / timeout: a cell restarts
       from scratch, so it needs a longer ``timeout_min``; resubmitting it as is would only repeat this;
    4. SLURM says NODE_FAIL, CANCELLED, PREEMPTED, BOOT_FAIL, ... -> transient, whatever the ranks wrote (peers of
       a killed rank fail on broken connections);
    5. the launcher saw a rank die without a result (``peer_died``, :mod:`calorimeter.launch.watch`) -> transient /
       ``peer_died``, naming that rank and its host (its peers' broken connections are consequences), unless a rank
       had already failed with a deterministic error (the death then followed it: srun ended the others);
    6. the first rank to fail names a communication timeout, a lost peer or a kill -> transient, class
       ``comm_timeout``, ``peer_died``, ``killed`` or ``node_fail`` (:func:`transient_class`); any other error
       -> failed (deterministic: the same cell would fail again);
    7. ranks left no result at all -> transient.
    """
    if len(rank_results) == world_size and all(r.ok for r in rank_results):
        return "ok", "ok", ""
    ooms = [r for r in rank_results if r.status == "oom"]
    if ooms:
        return "oom", "oom", f"rank {ooms[0].rank}: {ooms[0].error or 'out of memory'}"
    state = job_states.base_state(slurm_state) or ""
    if state == "OUT_OF_MEMORY":
        return "oom", "oom", "SLURM OUT_OF_MEMORY: the job exceeded its host memory (--mem)"
    timeouts = [r for r in rank_results if r.status == "timeout"]
    if timeouts or state == "TIMEOUT":
        why = (f"rank {timeouts[0].rank}: {timeouts[0].error}" if timeouts else
               "SLURM ended the job at its time limit (TIMEOUT)")
        return "failed", "timeout", f"{why}; raise launcher.timeout_min (or the profile's runtime) and rerun"
    if state in job_states.TRANSIENT:
        klass = job_states.STATE_CLASSES.get(state, "transient")
        return "transient", klass, (f"SLURM {state}" + (f"; launcher: {launcher_error}" if launcher_error
                                                               else ""))
    preempted = [r for r in rank_results if r.status == "preempted"]
    if preempted:
        return "transient", "transient", f"preempted too often: {preempted[0].error}"
    failed = _failed_in_order(rank_results)
    detected_s = (peer_died.t_detected_s if peer_died is not None else None) or math.inf
    failed_before = failed and not _is_transient_error(failed[0].error) and float(failed[0].t_end_s or 0) <= detected_s
    if peer_died and not failed_before:
        return "transient", "peer_died", peer_died.describe()
    if failed:
        # The first rank to fail is the cause; its peers then fail on broken connections.
        first = failed[0]
        reason = f"rank {first.rank}" + (f" on host {first.hostname}" if first.hostname else "") + f": {first.error}"
        if _is_transient_error(first.error):
            return "transient", transient_class(first.error), reason
        return "failed", "failed", reason
    missing = world_size - len(rank_results)
    return "transient", "transient", (f"{missing} of {world_size} ranks left no result"
                                      + (f" (SLURM {state})" if state else "")
                                      + (f"; launcher: {launcher_error}" if launcher_error else ""))


def _finite_or_none(x: float | None) -> float | None:
    """``x`` when it is a finite number, else None (run.json stays strict JSON)."""
    return x if x is not None and math.isfinite(x) else None


def _failed_in_order(rank_results: list[RankReport]) -> list[RankReport]:
    """The failed ranks, the first to fail first."""
    return sorted((r for r in rank_results if r.status == "failed"), key=lambda r: r.t_end_s or 0)


def steps_frame(rank_results: list[RankReport]) -> pd.DataFrame:
    """One row per (rank, step)."""
    rows = [{"rank": r.rank, **s} for r in rank_results for s in r.steps]
    cols = ["rank", "step", "phase", "loss", "grad_norm", "time_s", "t_begin_s", "t_end_s"]
    df = pd.DataFrame(rows, columns=cols) if rows else pd.DataFrame({c: [] for c in cols})
    return df.astype({"rank": "int32", "step": "int32", "loss": "float64", "grad_norm": "float64",
                      "time_s": "float64"})


def build_record(cell: Cell, rank_results: list[RankReport], launch: JsonObject,
                 estimates: JsonObject | None = None, evidence: JsonObject | None = None) -> JsonObject:
    """The run.json content of one attempt.

    ``evidence`` (SLURM's view from sacct, requeue events, log tails, exit codes) is stored under ``evidence``
    together with the failure class.
    """
    slurm_state = ((evidence or {}).get("slurm") or {}).get("state")
    status, failure_class, reason = classify_attempt(rank_results, cell.world_size, launch.get("launcher_error"),
                                                     slurm_state, _death((evidence or {}).get("peer_died")))
    cancelled = (evidence or {}).get("launcher_cancelled")
    if status == "transient" and cancelled and cancelled.get("node_lost") is not None:
        status, failure_class, reason = "failed", "node_lost", describe_node_loss(cancelled)
    elif status == "transient" and cancelled:  # the launcher ended a job SLURM would have held (a lost node)
        failed = _failed_in_order(rank_results)
        failure_class = transient_class(failed[0].error) if failed else "node_fail"
        if failed and not _is_transient_error(failed[0].error):  # a deterministic error ended it
            status, failure_class = "failed", "failed"
        elif failure_class == "transient":
            failure_class = "node_fail"
        reason = (f"rank {failed[0].rank}: {failed[0].error}; " if failed else "") + \
            f"the launcher cancelled the job: {cancelled.get('why')}"
    profile = PROFILES.get(cell.hardware)
    kind = get_kind(cell.kind)
    record: JsonObject = {
        "schema_version": SCHEMA_VERSION,
        "cell_id": cell.cell_id,
        "status": status,
        "failure_class": failure_class,
        "reason": reason,
        "cell": cell.recorded(),  # a command cell as what it is, not with the engine's defaults
        "model": get_model(cell.model).to_dict() if kind.trains_model or (
            kind.declares_model and cell.model != "-") else None,  # a command cell may declare its model
        "hardware": profile.to_dict() if profile else {"name": cell.hardware},
        "plan_estimates": estimates or {},
    }
    peaks = [r.peak_memory_bytes for r in rank_results if r.peak_memory_bytes is not None]
    record["peak_memory_bytes"] = max(peaks) if peaks else None
    if status == "ok" and not kind.trains_model:  # a calibration kind: its own summary, from rank 0
        r0 = min(rank_results, key=lambda r: r.rank)
        record["metrics"] = {"kind": cell.kind, **(r0.kind_metrics or {})}
    elif status == "ok":
        record["metrics"] = throughput_metrics(cell, step_times_s([r.steps for r in rank_results]),
                                               profile.peak_bf16_tflops if profile else None)
        r0 = min(rank_results, key=lambda r: r.rank)
        record["engine"] = r0.engine  # kernels and overlap mechanisms (every rank's: provenance.ranks)
        record["loss"] = [{"step": s["step"], "phase": s["phase"], "loss": s["loss"],
                           "grad_norm": _finite_or_none(s.get("grad_norm"))} for s in r0.steps]
        if r0.warmup:  # how the warm-up and the measured length were decided (calorimeter.train.steady)
            record["warmup"] = {**r0.warmup, "final_slope_c_per_min_by_rank": {
                str(r.rank): (r.warmup or {}).get("final_slope_c_per_min") for r in rank_results}}
    else:
        record["metrics"] = {}
    record["provenance"] = {
        "git": git_state(),
        "packages": package_versions(),
        "hosts": sorted({r.hostname for r in rank_results if r.hostname}),
        "host_cpus": sorted({m for r in rank_results if (m := (r.host_cpu or {}).get("model"))}),
        "ranks": [{k: getattr(r, k) for k in RANK_KEYS} for r in rank_results],
        "launcher": launch,
    }
    if evidence is not None:
        record["evidence"] = evidence
    return record


def _death(d: JsonObject | None) -> RankDeath | None:
    """The death an attempt's evidence names (``evidence.peer_died``), if any."""
    return RankDeath.from_dict(d) if d else None


def abandoned_record(cell: Cell, reason: str) -> JsonObject:
    """The run.json of an attempt nobody will finish (its launcher died and its job is gone): ``transient`` with the
    reason, a cell record like any other (:func:`~calorimeter.records.run_record.read_run_record` reads it), so
    ``calorimeter status`` counts the attempt as closed and the next run submits the cell again."""
    return {"schema_version": SCHEMA_VERSION, "cell_id": cell.cell_id, "status": "transient",
            "failure_class": "transient", "reason": reason, "cell": cell.recorded()}


def write_cell_record(cell: CellPaths, attempt: AttemptPaths, record: JsonObject, steps: pd.DataFrame) -> Path:
    """Write steps.parquet, then run.json last (the cell's completion marker), each atomically.

    Both files are also kept in the attempt folder, so a later rerun that replaces the top-level files never
    loses this measurement.
    """
    _keep_patch(cell, attempt, record)
    write_parquet_atomic(attempt.steps, steps)
    write_json_atomic(attempt.run_json, record)
    write_atomic(cell.steps, lambda p: shutil.copyfile(attempt.steps, p))
    write_json_atomic(cell.run_json, record)
    return cell.run_json


def _keep_patch(cell: CellPaths, attempt: AttemptPaths, record: JsonObject) -> None:
    """A record from a modified tree keeps the modification: ``source.patch`` (``git diff HEAD`` outside the
    measurements, :data:`~calorimeter.records.provenance.PATCH_EXCLUDES`) next to its
    run.json in the cell and the attempt folder, named with its SHA-256 under ``provenance.git`` (so that commit +
    patch give back the code that measured)."""
    git = (record.get("provenance") or {}).get("git") or {}
    if not git.get("dirty"):
        (cell.root / PATCH_NAME).unlink(missing_ok=True)  # an earlier attempt's patch stays in its attempt folder
        return
    patch = git_patch()
    if patch is None:
        git["patch"] = None
        git["patch_unavailable"] = "git diff HEAD failed"
        return
    data = patch.encode()
    for folder in (attempt.root, cell.root):
        write_atomic(folder / PATCH_NAME, lambda p, data=data: p.write_bytes(data))
    git["patch"] = PATCH_NAME
    git["patch_sha256"] = hashlib.sha256(data).hexdigest()
    git["patch_bytes"] = len(data)
    git["patch_excludes"] = list(PATCH_EXCLUDES)

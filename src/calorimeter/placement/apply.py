"""The placement decision inside the job, where the host is known, and how it takes effect.

Every rank of a cell decides on its own, before CUDA is initialised, from the same inputs: the cell, the stored
thermal profile of each host of the job (``<results_dir>/thermal-profiles/<host>.json``), the GPUs this node's
job sees (NVML) and the stage cost model. The decision is deterministic, so the ranks of a node agree; after the
process group is up the ranks compare digests (:meth:`JobPlacement.agree`) and, should two disagree (e.g. another
node found its profile stale), all fall back to the default split, recorded.

The rank-to-GPU mapping takes effect through ``CUDA_VISIBLE_DEVICES``: the same permutation of the job's GPUs (as
UUIDs) for every rank of the node, so that local rank k's ``cuda:k`` is the GPU the decision gave it while every
rank still sees every GPU (NCCL peer access unchanged). Entries of an existing ``CUDA_VISIBLE_DEVICES`` that are
indices are read in PCI bus order (NVML's order). After CUDA is up each rank compares the UUID of its device
(``device_info``, which also gives the telemetry its ``nvml_index``) with the intended one; the record says whether
they matched.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import socket
import time
from pathlib import Path
from typing import Any

from calorimeter.placement.profile import (
    HostGpus,
    ThermalProfile,
    load_profile,
    staleness,
)
from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import get_profile
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.kinds import get_kind
from calorimeter.plan.memory import max_stage_layers
from calorimeter.plan.models import get_model, stage_block_counts
from calorimeter.plan.placement import (
    Decision,
    NodeGpus,
    StageCosts,
    decide,
    fallback,
    flops_stage_costs,
    measured_stage_costs,
    static_reason,
)
from calorimeter.plan.settings import PROFILES_DIR, PlacementSettings
from calorimeter.records.paths import CellPaths
from calorimeter.records.rank import RankReport
from calorimeter.records.run_record import read_run_record

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------------------------
# what the job sees


def job_hosts() -> list[str]:
    """Hostnames of the job's nodes in node order (SLURM's node list inside a SLURM job, else this host)."""
    if os.environ.get("SLURM_JOB_NODELIST") and os.environ.get("SLURM_JOB_ID"):
        from submitit.slurm.slurm import SlurmJobEnvironment

        return list(SlurmJobEnvironment().hostnames)
    return [socket.gethostname()]


def job_gpus() -> tuple[list[str], HostGpus] | None:
    """The GPUs this node's job sees, as NVML UUIDs in CUDA order, and the host's driver and power limits.

    None when NVML is not available (CPU ranks). ``CUDA_VISIBLE_DEVICES`` entries may be UUIDs or indices; indices
    are read in PCI bus order.
    """
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML: CPU ranks or a broken driver
        return None
    n = pynvml.nvmlDeviceGetCount()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
    uuids = [_str(pynvml.nvmlDeviceGetUUID(h)) for h in handles]
    limits = {}
    for u, h in zip(uuids, handles, strict=True):
        try:
            limits[u] = pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
        except pynvml.NVMLError:
            limits[u] = math.nan
    try:
        driver = _str(pynvml.nvmlSystemGetDriverVersion())
    except pynvml.NVMLError:
        driver = None
    visible = visible_uuids(os.environ.get("CUDA_VISIBLE_DEVICES"), uuids)
    return visible, HostGpus(socket.gethostname(), driver, {u: limits[u] for u in visible})


def _str(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def visible_uuids(env: str | None, uuids: list[str]) -> list[str]:
    """The UUIDs ``CUDA_VISIBLE_DEVICES`` selects from the node's GPUs (NVML order), in its order.

    Unset: every GPU. Entries are indices (into the NVML order), full UUIDs or UUID prefixes; parsing stops at the
    first invalid entry, as CUDA does.
    """
    if env is None:
        return list(uuids)
    out: list[str] = []
    for raw in env.split(","):
        e = raw.strip()
        if not e:
            break
        if e.isdigit():
            if int(e) >= len(uuids):
                break
            out.append(uuids[int(e)])
            continue
        match = [u for u in uuids if u.startswith(e if e.startswith("GPU-") else "GPU-" + e) or u == e]
        if len(match) != 1:
            break
        out.append(match[0])
    return out


# ---------------------------------------------------------------------------------------------------------------
# inputs of the decision


def _profile_note(p: ThermalProfile | None, stale: str | None) -> JsonObject:
    if p is None:
        return {"stale": stale or "no thermal profile for this host"}
    note: JsonObject = {"host": p.host, "taken_s": p.taken_s, "source": p.source, "speed_metric": p.speed_metric,
                            "speed": {g.uuid: g.speed for g in p.gpus},
                            "nvml_index": {g.uuid: g.nvml_index for g in p.gpus}}
    if stale:
        note["stale"] = stale
    return note


def node_inputs(cell: Cell, hosts: list[str], this_node: int, local: tuple[list[str], HostGpus] | None,
                profiles: dict[str, ThermalProfile | None], now_s: float, max_age_h: float
                ) -> tuple[dict[int, NodeGpus], dict[int, JsonObject]]:
    """The GPUs and speeds of every node with a fresh profile, and what to record about each node's profile.

    This node's GPUs are the ones the job sees (``local``); another node's are its profile's GPUs in NVML order,
    used only when the profile has exactly ``gpus_per_node`` of them (a whole-node allocation), since from here
    nothing else is known about them.
    """
    nodes: dict[int, NodeGpus] = {}
    notes: dict[int, JsonObject] = {}
    for n in range(cell.nodes):
        host = hosts[n] if n < len(hosts) else f"node{n}"
        p = profiles.get(host)
        if n == this_node:
            if local is None:
                notes[n] = {"stale": "no NVML on this host (CPU ranks): no GPU to profile"}
                continue
            uuids, current = local
            stale = staleness(p, now_s, current, max_age_h, set(uuids[:cell.gpus_per_node]))
        else:
            stale = staleness(p, now_s, None, max_age_h)
            uuids = [g.uuid for g in p.gpus] if p is not None else []
            if stale is None and len(uuids) != cell.gpus_per_node:
                stale = (f"the profile of {host} covers {len(uuids)} GPUs, not the job's {cell.gpus_per_node}: "
                         "which ones the job has is known only on that node")
        notes[n] = _profile_note(p, stale)
        if stale is None and p is not None:
            nodes[n] = NodeGpus(host, tuple(uuids), tuple(p.gpu(u).speed for u in uuids))
    return nodes, notes


def sibling_costs(cell: Cell, cell_dir: Path, profiles: dict[str, ThermalProfile | None]) -> StageCosts | None:
    """Stage costs measured by the same layout's ``default`` cell in the same sweep (its first repetition that has
    kernel times), if any."""
    import pandas as pd

    base = dataclasses.replace(cell, placement="default", pp_split=None, repeat=0).cell_id
    root = Path(cell_dir).parent
    found = [d for d in [root / base, *sorted(root.glob(base + "_r*"))]
             if CellPaths(d).kernels.is_file() and CellPaths(d).run_json.is_file()]
    if not found:
        return None
    sib = found[0]
    sib_id = sib.name
    paths = CellPaths(sib)
    try:
        record = read_run_record(paths.run_json)
        k = pd.read_parquet(paths.kernels)
    except (OSError, ValueError):  # RecordError is a ValueError
        return None
    if not record.ok or "compute_s" not in k.columns or "stage" not in k.columns:
        return None
    per_rank = k.groupby(["rank", "stage"], as_index=False)["compute_s"].first()
    compute = per_rank.groupby("stage")["compute_s"].mean().to_dict()
    m = get_model(cell.model)
    split = tuple(record.cell.get("pp_split") or stage_block_counts(m.num_layers, cell.pp))
    speeds: dict[int, float] = {}
    for r in record.ranks:
        p = profiles.get(r.get("hostname") or "")
        g = p.gpu((r.get("device_info") or {}).get("uuid", "")) if p is not None else None
        if g is not None and math.isfinite(g.speed) and r.get("stage") is not None:
            s = int(r["stage"])
            speeds[s] = min(speeds.get(s, math.inf), g.speed)
    return measured_stage_costs({int(s): float(v) for s, v in compute.items()}, split, sib_id, speeds)


def decide_in_job(cell: Cell, settings: PlacementSettings, cell_dir: Path | None, now_s: float | None = None,
                  hosts: list[str] | None = None, this_node: int = 0,
                  local: tuple[list[str], HostGpus] | None | str = "probe") -> Decision:
    """The decision of this rank on node ``this_node`` of the job (see the module docstring); every input can be
    given for tests."""
    if cell.placement == "default" or not get_kind(cell.kind).placed:
        return Decision("default", True, "default placement", pp_split=cell.pp_split)
    if static_reason(cell) is not None:
        return decide(cell, get_model(cell.model), StageCosts(1.0, 0.0, 0.0, "none"))
    now_s = time.time() if now_s is None else now_s
    hosts = job_hosts() if hosts is None else hosts
    local_gpus = job_gpus() if local == "probe" else local
    assert not isinstance(local_gpus, str)
    pdir = Path(settings.profiles_dir or PROFILES_DIR)
    profiles = {h: load_profile(pdir, h) for h in hosts}
    m = get_model(cell.model)
    costs = None
    if settings.stage_costs == "auto" and cell_dir is not None:
        costs = sibling_costs(cell, cell_dir, profiles)
    costs = costs or flops_stage_costs(m, cell)
    cap = max_stage_layers(m, cell, get_profile(cell.hardware))
    nodes, notes = node_inputs(cell, hosts, this_node, local_gpus, profiles, now_s, settings.profile_max_age_h)
    return decide(cell, m, costs, nodes, cap, notes)


# ---------------------------------------------------------------------------------------------------------------
# applying it


class JobPlacement:
    """One rank's placement: decided and applied before CUDA starts, agreed on and verified after.

    Usage on every rank (``calorimeter.launch.task``)::

        placement = JobPlacement.start(cell, settings, cell_dir, node)   # before anything touches CUDA
        ... init the process group ...
        placement.agree()                                        # all ranks hold the same decision
        train(placement.cell)                                    # the cell with the effective split
        result["placement"] = placement.record(device_info)
    """

    def __init__(self, cell: Cell, decision: Decision, node: int) -> None:
        self.planned = cell
        self.decision = decision
        self.node = node
        self.cuda_visible_devices: str | None = None

    @classmethod
    def start(cls, cell: Cell, settings: PlacementSettings, cell_dir: Path | None, node: int = 0) -> JobPlacement:
        """Decide on node ``node`` of the job (submitit's job environment), and set this process's CUDA device order
        when the decision moves ranks."""
        try:
            decision = decide_in_job(cell, settings, cell_dir, this_node=node)
        except Exception as e:  # noqa: BLE001 - a placement error must not lose the measurement: recorded
            log.exception("placement %s of %s failed", cell.placement, cell.cell_id)
            decision = fallback(cell.placement, f"decision failed: {type(e).__name__}: {e}", cell)
        job = cls(cell, decision, node)
        order = decision.device_order.get(node)
        if order:
            job.cuda_visible_devices = ",".join(order)
            os.environ["CUDA_VISIBLE_DEVICES"] = job.cuda_visible_devices
        return job

    @property
    def cell(self) -> Cell:
        """The cell as it is trained: the planned one with the decided split."""
        split = self.decision.pp_split
        return dataclasses.replace(self.planned, pp_split=tuple(split) if split else None)

    def agree(self) -> None:
        """Compare the decision across ranks (``torch.distributed`` is up); on any difference fall back the split."""
        import torch.distributed as dist

        if self.planned.placement == "default" or not dist.is_initialized() or dist.get_world_size() == 1:
            return
        digests: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(digests, self.decision.digest())
        if len(set(digests)) > 1:
            d = self.decision
            self.decision = fallback(d.policy, f"ranks decided differently (digests {sorted(set(digests))}); "
                                     "the device order each node applied stays, the split is the default", self.planned,
                                     device_order=d.device_order, profiles=d.profiles)

    def record(self, device_info: JsonObject | None, local_rank: int) -> JsonObject:
        """This rank's view for run.json: the decision, and whether its device is the one intended."""
        out = self.decision.to_dict()
        order = self.decision.device_order.get(self.node)
        intended = order[local_rank] if order and local_rank < len(order) else None
        actual = (device_info or {}).get("uuid")
        out.update(node=self.node, intended_uuid=intended, device_uuid=actual,
                   cuda_visible_devices=self.cuda_visible_devices,
                   device_verified=None if intended is None else (intended == actual))
        return out


def placement_record(rank_results: list[RankReport]) -> JsonObject | None:
    """The cell's ``placement`` block of run.json from its ranks' views (None when no rank reported one).

    The decision is rank 0's; ``applied`` is true only if every rank applied the same decision and every moved rank
    got the GPU intended for it (otherwise ``reason`` says what went wrong).
    """
    views = sorted(((r.rank, r.placement) for r in rank_results if isinstance(r.placement, dict)),
                   key=lambda x: x[0])
    if not views:
        return None
    out = {k: v for k, v in views[0][1].items()
           if k not in ("intended_uuid", "device_uuid", "device_verified", "node", "cuda_visible_devices")}
    out["ranks"] = [{"rank": r, **{k: v.get(k) for k in ("node", "intended_uuid", "device_uuid", "device_verified",
                                                         "digest")}} for r, v in views]
    digests = {v.get("digest") for _, v in views}
    wrong = [r for r, v in views if v.get("device_verified") is False]
    if len(digests) > 1:
        out["applied"] = False
        out["reason"] = f"ranks recorded different decisions ({sorted(map(str, digests))})"
    elif wrong:
        out["applied"] = False
        out["reason"] = (f"rank(s) {wrong} did not get the GPU the decision gave them (CUDA device order differs "
                         "from the NVML order assumed); the telemetry follows the GPU each rank actually used")
    return out

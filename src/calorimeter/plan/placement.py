"""Placement policies: which GPU each rank uses and how many layers each pipeline stage holds (pure functions).

Policies (the ``placement`` axis of a sweep):

* ``default``: local rank k on the k-th GPU the job sees, the cell's ``pp_split`` (or the uniform split).
* ``balanced``: the default mapping, layers split so that the slowest stage is as fast as it can be under the stage
  cost model (:class:`StageCosts`: a transformer block, plus the embedding on the first stage and the output head
  and loss on the last). Needs no profile. It answers "what does a cost-aware split alone give?", so that the
  thermal part of ``thermal`` can be told apart from it.
* ``thermal``: the same, with each stage's throughput taken from the host's thermal profile (a stage runs at the
  pace of the slowest GPU it spans), and the rank-to-GPU mapping chosen with it: the heaviest stages on the GPUs that
  sustain the highest clocks. With an explicit ``pp_split`` in the cell only the mapping is chosen.

Stage times are modelled as ``cost(stage) / speed(stage)`` with ``cost = n_layers x layer + first/last extras``.
The split minimises the largest stage time (a pipeline runs at the pace of its slowest stage) by greedy
water-filling, exact for this min-max problem with increasing per-stage times, within ``max_layers`` per stage (the
plan's memory estimate). Without the integer granularity of layers the mapping would not matter once the split is
free (the bottleneck is then total cost / total speed); with it, and with a memory cap, it does, so the mapping is
searched: identity, the sorted assignment (heaviest stage on the fastest GPUs) and, when there are few, every
assignment of stages to blocks of speed-sorted GPUs. Mappings within ``TIE_MARGIN`` of the best modelled time are
ties; ties keep the default mapping, then the sorted one.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from calorimeter.plan.cell import Cell
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.kinds import get_kind
from calorimeter.plan.layout import Layout
from calorimeter.plan.models import ModelSpec, stage_block_counts
from calorimeter.plan.work import stage_work

POLICIES = ("default", "balanced", "thermal")
#: at most this many candidate mappings are evaluated exhaustively (else identity and sorted only)
MAX_CANDIDATES = 720
#: mappings whose modelled bottleneck is within this share of the best count as ties (the cost model is not more
#: accurate: the measured head cost differs from the FLOP model's by ~0.5 block, ~2 % of a Llama-3 8B stage);
#: among ties the default mapping wins, then the sorted one (costliest stage on the fastest GPUs)
TIE_MARGIN = 0.005


@dataclass(frozen=True)
class StageCosts:
    """Cost of a pipeline stage in relative units: ``n x layer`` plus ``first`` / ``last`` on the end stages, plus
    ``recompute`` for each of the first ``recompute_layers`` blocks of a stage (partial full recomputation).

    Attributes:
        layer: one transformer block (forward + backward, and its recomputation when every block recomputes).
        first: extra work of the first stage (embedding).
        last: extra work of the last stage (output head and loss).
        source: ``flops`` (the FLOP model) or ``measured:<cell_id>`` (kernel time per stage of a recorded cell).
        recompute: extra work of one recomputed block (0 when recomputation is none, selective or of every block:
            then it is part of ``layer``).
        recompute_layers: blocks per stage that pay ``recompute`` (None: none pays it apart).
    """

    layer: float
    first: float
    last: float
    source: str
    recompute: float = 0.0
    recompute_layers: int | None = None

    def stage(self, index: int, n_layers: int, pp: int) -> float:
        """Cost of stage ``index`` holding ``n_layers`` blocks."""
        extra = (self.first if index == 0 else 0.0) + (self.last if index == pp - 1 else 0.0)
        recomputed = min(n_layers, self.recompute_layers) if self.recompute_layers is not None else 0
        return n_layers * self.layer + recomputed * self.recompute + extra

    def all(self, split: tuple[int, ...]) -> list[float]:
        """Cost of every stage of a split."""
        return [self.stage(i, n, len(split)) for i, n in enumerate(split)]


def flops_stage_costs(m: ModelSpec, cell: Cell) -> StageCosts:
    """Stage costs from the workload model (:func:`calorimeter.plan.work.stage_work`), normalised to one block.

    The cost of a stage is its compute FLOPs there (:attr:`calorimeter.plan.work.StageWork.compute_flops`): the
    attention core counts causally (flash attention skips the masked half), recomputation adds the forward it
    repeats (with ``recompute: full, recompute_layers: k`` only for the first k blocks of each stage), the last
    stage carries the output logits, the first stage's embedding lookup costs no FLOPs. The softmax/cross-entropy
    over the vocabulary is memory-bound and not in the model: on H200 the measured head costs 2.5-2.8 blocks where
    the FLOPs say 2.1 for Llama-3 8B (docs/placement.md), which is why :func:`measured_stage_costs` is preferred
    when a record exists.
    """
    pp = max(cell.pp, 2)  # a first and a last stage apart, whatever the cell's pp (only the ratios are used)
    partial = cell.recompute == "full" and cell.recompute_layers is not None
    plain = replace(cell, recompute="none", recompute_layers=None) if partial else cell

    def flops(c: Cell, stage: int, layers: int) -> float:
        return stage_work(replace(c, pp=pp) if c.pp != pp else c, m, stage, layers).compute_flops

    block = flops(plain, 0, 2) - flops(plain, 0, 1)
    first = flops(plain, 0, 1) - block
    last = flops(plain, pp - 1, 1) - block
    recompute = flops(replace(cell, recompute_layers=None), 0, 1) - flops(plain, 0, 1) if partial else 0.0
    return StageCosts(layer=1.0, first=first / block, last=last / block, source="flops",
                      recompute=recompute / block, recompute_layers=cell.recompute_layers if partial else None)


def measured_stage_costs(compute_s: dict[int, float], split: tuple[int, ...], cell_id: str,
                         stage_speed: dict[int, float] | None = None) -> StageCosts | None:
    """Stage costs fitted to measured compute time per stage of a recorded cell (its ``kernels.parquet``).

    ``compute_s[i]`` is the compute-kernel time of stage ``i`` in the traced step; multiplied by the relative
    speed of the GPU it ran on (when known) it becomes a cost. The block cost comes from the middle stages
    (pp >= 3) or from the first stage (pp = 2, its embedding counted as block work: about 0.3 of a block on H200),
    the extras from the end stages. None when a stage is missing or the fit is not positive.
    """
    pp = len(split)
    if pp < 2 or any(i not in compute_s or not compute_s[i] > 0 for i in range(pp)):
        return None
    speed = stage_speed or {}
    cost = {i: compute_s[i] * speed.get(i, 1.0) for i in range(pp)}
    if pp >= 3:
        per = sorted(cost[i] / split[i] for i in range(1, pp - 1))
        layer = per[len(per) // 2]
        first = max(cost[0] - split[0] * layer, 0.0)
    else:
        layer = cost[0] / split[0]
        first = 0.0
    last = cost[pp - 1] - split[pp - 1] * layer
    if not layer > 0 or last < -0.5 * layer:
        return None
    return StageCosts(layer=1.0, first=first / layer, last=max(last, 0.0) / layer, source=f"measured:{cell_id}")


def stage_times(costs: StageCosts, split: tuple[int, ...], speeds: list[float]) -> list[float]:
    """Modelled time of every stage: cost / speed."""
    return [c / s for c, s in zip(costs.all(split), speeds, strict=True)]


def best_split(costs: StageCosts, speeds: list[float], num_layers: int, max_layers: int | None = None
               ) -> tuple[int, ...] | None:
    """Layers per stage minimising the slowest stage's time (greedy water-filling; None if it cannot fit).

    Args:
        costs: stage cost model.
        speeds: relative throughput of each stage (1.0 everywhere for the cost-only split).
        num_layers: blocks to place.
        max_layers: most blocks one stage may hold (memory); None: no cap.
    """
    pp = len(speeds)
    cap = num_layers if max_layers is None else max_layers
    if pp < 1 or num_layers < pp or cap * pp < num_layers or cap < 1:
        return None
    n = [1] * pp
    for _ in range(num_layers - pp):
        best, best_t = -1, math.inf
        for i in range(pp):
            if n[i] >= cap:
                continue
            t = costs.stage(i, n[i] + 1, pp) / speeds[i]
            if t < best_t - 1e-12:
                best, best_t = i, t
        n[best] += 1
    return tuple(n)


# ---------------------------------------------------------------------------------------------------------------
# mapping ranks to GPUs


@dataclass(frozen=True)
class NodeGpus:
    """The GPUs one node's job sees, in the order local ranks take them by default, with their relative speed."""

    host: str
    uuids: tuple[str, ...]
    speeds: tuple[float, ...]


def _assignments(groups: dict[int, list[int]], gpus: NodeGpus, exhaustive: bool
                 ) -> list[tuple[str, dict[int, int]]]:
    """Candidate mappings of one node: (name, local rank -> position in ``gpus.uuids``); identity first."""
    n = len(gpus.uuids)
    out: list[tuple[str, dict[int, int]]] = [("identity", {r: r for r in range(n)})]
    order = sorted(range(n), key=lambda p: (-gpus.speeds[p], p))  # fastest first
    stages = sorted(groups)
    sizes = [len(groups[s]) for s in stages]
    if len(set(sizes)) != 1:
        return out  # unequal groups on one node (a stage split across nodes): keep identity
    k = sizes[0]
    blocks = [order[i * k:(i + 1) * k] for i in range(len(stages))]
    perms = itertools.permutations(range(len(stages))) if exhaustive else iter(())
    for perm in perms:
        m = {}
        for s_idx, b_idx in zip(range(len(stages)), perm, strict=True):
            for r, pos in zip(groups[stages[s_idx]], sorted(blocks[b_idx]), strict=True):
                m[r] = pos
        out.append(("search", m))
    return out


def _stage_speeds(cell: Cell, nodes: dict[int, NodeGpus], mapping: dict[int, dict[int, int]]) -> list[float]:
    """Speed of every stage: the slowest GPU it spans under a mapping."""
    speed = [math.inf] * cell.pp
    layout = Layout.of(cell)
    for node, gpus in nodes.items():
        for local, pos in mapping[node].items():
            if local >= cell.gpus_per_node:
                continue
            s = layout.stage(node * cell.gpus_per_node + local)
            speed[s] = min(speed[s], gpus.speeds[pos])
    return [1.0 if math.isinf(s) else s for s in speed]


# ---------------------------------------------------------------------------------------------------------------
# the decision


@dataclass
class Decision:
    """What a policy decided for one cell, and why (recorded in run.json under ``placement``).

    Attributes:
        policy: the cell's ``placement``.
        applied: the policy took effect; False when it fell back to ``default`` (``reason`` says why).
        reason: why it fell back, or what it did.
        pp_split: the effective layers per stage (None: the engine's uniform split).
        device_order: per node, GPU UUIDs in the order local ranks take them (empty: unchanged).
        stage_costs: the cost model used (``StageCosts`` as a dict), if any.
        stage_speeds: relative speed of each stage under the chosen mapping.
        predicted: modelled slowest-stage time of the default and the chosen placement, and the predicted gain.
        profiles: per node the profile that decided it (host, taken, source, speed per GPU), or why none.
    """

    policy: str
    applied: bool
    reason: str
    pp_split: tuple[int, ...] | None = None
    device_order: dict[int, list[str]] = field(default_factory=dict)
    stage_costs: JsonObject | None = None
    stage_speeds: list[float] | None = None
    predicted: dict[str, float] = field(default_factory=dict)
    profiles: dict[int, JsonObject] = field(default_factory=dict)

    def to_dict(self) -> JsonObject:
        """JSON-able form; keys of per-node maps are strings."""
        d = asdict(self)
        d["pp_split"] = list(self.pp_split) if self.pp_split else None
        d["device_order"] = {str(k): v for k, v in self.device_order.items()}
        d["profiles"] = {str(k): v for k, v in self.profiles.items()}
        d["digest"] = self.digest()
        return d

    def digest(self) -> str:
        """Short hash of what the ranks must agree on (split and device order)."""
        key = json.dumps([self.applied, list(self.pp_split or []), sorted(self.device_order.items())])
        return hashlib.sha256(key.encode()).hexdigest()[:12]


def fallback(policy: str, reason: str, cell: Cell, **extra: Any) -> Decision:
    """The default placement, recorded as a fallback of ``policy`` with its reason."""
    return Decision(policy=policy, applied=False, reason=f"falls back to default: {reason}",
                    pp_split=cell.pp_split, **extra)


def static_reason(cell: Cell) -> str | None:
    """Why a non-default policy cannot apply to a cell whatever the host (None when it can)."""
    if cell.placement == "default":
        return None
    if cell.placement not in POLICIES:
        return f"unknown placement {cell.placement!r} (one of {', '.join(POLICIES)})"
    if cell.pp == 1:
        return "pp = 1: every rank does the same work, there is no stage to place or split"
    return None


def decide(cell: Cell, m: ModelSpec, costs: StageCosts, nodes: dict[int, NodeGpus] | None = None,
           max_layers: int | None = None, profiles: dict[int, JsonObject] | None = None) -> Decision:
    """Decide the placement of a cell.

    Args:
        cell: the cell (its ``placement`` names the policy).
        m: its model.
        costs: the stage cost model.
        nodes: per node the GPUs the job sees and their relative speed from a fresh profile (``thermal``); a node
            missing here has no usable profile.
        max_layers: most blocks one stage may hold (memory).
        profiles: per node what to record about the profile (or why there is none).
    """
    policy = cell.placement
    profiles = dict(profiles or {})
    why = static_reason(cell)
    if policy == "default":
        return Decision(policy, True, "default placement", pp_split=cell.pp_split, profiles=profiles)
    if why is not None:
        return fallback(policy, why, cell, profiles=profiles)
    default_split = tuple(cell.pp_split) if cell.pp_split else tuple(stage_block_counts(m.num_layers, cell.pp))
    cap = None if max_layers is None else max(max_layers, max(default_split))
    base_speeds = [1.0] * cell.pp
    t_default = max(stage_times(costs, default_split, base_speeds))
    if policy == "balanced":
        if cell.pp_split:
            return fallback(policy, "the cell sets pp_split explicitly (balanced chooses the split)", cell,
                            profiles=profiles)
        split = best_split(costs, base_speeds, m.num_layers, cap) or default_split
        t = max(stage_times(costs, split, base_speeds))
        return Decision(policy, True, "cost-balanced split, default mapping", pp_split=split,
                        stage_costs=asdict(costs), stage_speeds=base_speeds, profiles=profiles,
                        predicted=_predicted(t_default, t))
    missing = [n for n in range(cell.nodes) if n not in (nodes or {})]
    if missing:
        reasons = "; ".join(f"node {n}: {profiles.get(n, {}).get('stale', 'no profile')}" for n in missing)
        return fallback(policy, reasons, cell, profiles=profiles)
    assert nodes is not None
    for n, g in nodes.items():
        if len(g.uuids) < cell.gpus_per_node or not all(math.isfinite(s) and s > 0 for s in g.speeds):
            return fallback(policy, f"node {n}: the profile does not give a speed for each of the job's "
                            f"{cell.gpus_per_node} GPUs", cell, profiles=profiles)
    # default speeds: identity mapping on every node
    layout = Layout.of(cell)
    per_node = {n: _assignments(layout.node_stage_groups(n), g, exhaustive=False) for n, g in nodes.items()}
    identity = {n: c[0][1] for n, c in per_node.items()}
    t_default = max(stage_times(costs, default_split, _stage_speeds(cell, nodes, identity)))
    n_cand = math.prod(math.factorial(len(layout.node_stage_groups(n))) for n in nodes)
    exhaustive = n_cand <= MAX_CANDIDATES
    per_node = {n: _assignments(layout.node_stage_groups(n), g, exhaustive) for n, g in nodes.items()}
    if not exhaustive:  # identity and the sorted assignment only
        per_node = {n: per_node[n][:1] + _sorted_only(cell, n, nodes[n], costs.all(default_split)) for n in nodes}
    cost = costs.all(default_split)
    sorted_map = {n: _sorted_only(cell, n, nodes[n], cost)[0][1] for n in nodes}
    found = []
    for combo in itertools.product(*(per_node[n] for n in sorted(nodes))):
        mapping = {n: c[1] for n, c in zip(sorted(nodes), combo, strict=True)}
        speeds = _stage_speeds(cell, nodes, mapping)
        split = default_split if cell.pp_split else best_split(costs, speeds, m.num_layers, cap)
        if split is None:
            continue
        prio = 0 if mapping == identity else (1 if mapping == sorted_map else 2)
        found.append((max(stage_times(costs, split, speeds)), prio, mapping, split, speeds))
    if not found:
        return fallback(policy, "no split fits the memory cap", cell, profiles=profiles)
    t_best = min(f[0] for f in found)
    t, _, mapping, split, speeds = min((f for f in found if f[0] <= t_best * (1 + TIE_MARGIN)),
                                       key=lambda f: (f[1], f[0]))
    ranks = cell.gpus_per_node
    changed = any(mapping[n][r] != r for n in mapping for r in range(ranks))
    order = {n: _device_order(nodes[n], mapping[n], ranks) for n in nodes}
    what = ("split " + "/".join(map(str, split)) if not cell.pp_split else "explicit split kept") + (
        ", ranks moved to faster GPUs" if changed else ", default mapping")
    return Decision(policy, True, f"thermal profile: {what}", pp_split=split,
                    device_order=order if changed else {}, stage_costs=asdict(costs), stage_speeds=speeds,
                    predicted=_predicted(t_default, t), profiles=profiles)


def _sorted_only(cell: Cell, node: int, g: NodeGpus, stage_cost: list[float]) -> list[tuple[str, dict[int, int]]]:
    """The sorted assignment alone: the costliest stages of the node on its fastest GPUs."""
    groups = Layout.of(cell).node_stage_groups(node)
    order = sorted(range(len(g.uuids)), key=lambda p: (-g.speeds[p], p))
    m: dict[int, int] = {}
    i = 0
    for s in sorted(groups, key=lambda s: (-stage_cost[s], s)):
        for r in groups[s]:
            m[r] = order[i]
            i += 1
    return [("sorted", m)]


def _device_order(g: NodeGpus, mapping: dict[int, int], ranks: int) -> list[str]:
    """GPU UUIDs in the order local ranks take them: the mapped ones, then the job's other GPUs unchanged."""
    first = [mapping[r] for r in range(ranks)]
    return [g.uuids[p] for p in first] + [u for p, u in enumerate(g.uuids) if p not in first]


def _predicted(t_default: float, t: float) -> dict[str, float]:
    return {"bottleneck_default": t_default, "bottleneck_chosen": t,
            "predicted_speedup": t_default / t if t > 0 else math.nan}


def profiles_host(cell: Cell, m: ModelSpec | None) -> bool:
    """Whether a recorded cell of this kind and layout can profile its hosts (:mod:`calorimeter.placement.profile`):
    a thermal calibration, or a dense training cell without pipeline stages (they load the GPUs unequally)."""
    kind = get_kind(cell.kind)
    return kind.profiles_hosts or (kind.placed and cell.pp == 1 and m is not None and not m.is_moe)


def prerequisites(cell: Cell, cells: list[Cell]) -> list[str]:
    """Cells of the sweep that must have run before ``cell`` (their ids): a ``thermal`` cell waits for the sweep's
    ``thermal-calibration`` cells of the same hardware, so that its host has a fresh profile when it decides."""
    if cell.placement != "thermal" or cell.pp == 1:
        return []
    return [c.cell_id for c in cells if get_kind(c.kind).profiles_hosts and c.hardware == cell.hardware]

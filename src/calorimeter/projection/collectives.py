"""Time of one collective call from measured curves, with the hardware profile where nothing was measured.

A curve is a set of measured points ``(kind, role, group, size_bytes) -> seconds per call`` inside one node:

* ``collectives``: the calibration cell kind (``kind: collectives``) sweeps message and group sizes on a node;
* ``trace``: the collectives seen in the profiled training steps (``kernels.parquet``), one point per kind, role and
  group size, their message sizes known from the workload (:mod:`calorimeter.plan.work`). ZeRO-3's
  gathers run next to the GEMMs and are kept apart (role ``zero3``) from the synchronous ones (role ``sync``).

Between measured sizes the time is interpolated log-log; above the largest the largest point's bus bandwidth holds,
below the smallest it falls linearly to the group's measured small-message latency. An unmeasured group size takes
the nearest measured one's bus bandwidth (never extrapolated). Without an all-reduce curve reaching bandwidth-sized
messages, an all-reduce is priced as a reduce-scatter plus an all-gather (NCCL's ring); without any curve of a kind,
the all-gather's bus bandwidth stands in; without any, the hardware profile's link spec (``assumed``).
Collectives that cross nodes use the hardware profile: bus bandwidth = NIC bandwidth per GPU x the group's ranks
per node (rail-optimised NICs, each used by one group at a time), latency x log2(nodes) (tree), at line rate; they
are marked ``assumed`` until a multi-node measurement exists.

Bus bandwidth follows nccl-tests: ``busbw = size / time x factor`` with factor ``2(n-1)/n`` for all-reduce,
``(n-1)/n`` for all-gather, reduce-scatter and all-to-all, 1 for send/recv.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import pandas as pd

from calorimeter.collectives.table import CURVE_COLUMNS, bus_factor
from calorimeter.plan.hardware import HardwareProfile
from calorimeter.plan.work import CommOp

#: a curve whose largest message is at least this big measures bandwidth (smaller ones only latency)
BANDWIDTH_BYTES = 2**20


class NetworkOverride(TypedDict, total=False):
    """A sweep config's ``projection.network``: what replaces the hardware profile's inter-node network."""

    nic_gbit_s_per_gpu: float
    latency_us: float


@dataclass(frozen=True)
class Network:
    """Inter-node network of a projection (from the hardware profile unless the projection config overrides it).

    Attributes:
        nic_gbit_s_per_gpu: NIC bandwidth per GPU and direction, Gbit/s.
        latency_us: one message's latency.
        source: where the numbers come from (``hardware profile h200``, ``config``).
    """

    nic_gbit_s_per_gpu: float
    latency_us: float
    source: str

    @classmethod
    def from_profile(cls, hw: HardwareProfile, override: NetworkOverride | None = None) -> Network:
        """The profile's network, with the keys of ``override`` (same names) replacing its values."""
        o = override or {}
        bw = o.get("nic_gbit_s_per_gpu", hw.nic_gbit_s_per_gpu)
        lat = o.get("latency_us", hw.nic_latency_us)
        src = "config" if o else f"hardware profile {hw.name}"
        return cls(float(bw) if bw else float("nan"), float(lat) if lat is not None else float("nan"), src)


def monotone_times(times: np.ndarray) -> np.ndarray:
    """Times per call ordered by message size, each capped by the fastest larger message's time.

    A call never takes longer than a larger call of the same collective and group; a measured point that did (one
    slow call inside a point's timed batch: the committed 2x H200 NCCL sweep has all-gather at 16 MiB at 27 GB/s
    between 117 and 187 GB/s) is an outlier, and its larger neighbour bounds it.
    """
    return np.minimum.accumulate(times[::-1])[::-1] if len(times) else times


class CollectiveCurves:
    """Measured collective points and the lookup of one call's time."""

    def __init__(self, points: pd.DataFrame, hw: HardwareProfile, network: Network) -> None:
        self.points = points.reindex(columns=list(CURVE_COLUMNS)) if not points.empty else pd.DataFrame(
            columns=list(CURVE_COLUMNS))
        self.hw = hw
        self.network = network
        self._index: dict[tuple[str, str], dict[int, tuple[np.ndarray, np.ndarray, str]]] = {}
        grouped: dict[tuple[str, str, int], list[tuple[float, float, str]]] = {}
        for collective, role, group, size, t, src in self.points[list(CURVE_COLUMNS)].itertuples(index=False):
            grouped.setdefault((collective, role, int(group)), []).append((float(size), float(t), str(src)))
        for (collective, role, group), pts in grouped.items():
            if any(src == "collectives" for _, _, src in pts):  # a dedicated sweep beats one size seen in a trace
                pts = [p for p in pts if p[2] == "collectives"]
            by_size: dict[float, list[float]] = {}
            for size, t, _ in pts:
                by_size.setdefault(size, []).append(t)
            sizes = np.array(sorted(by_size))
            times = monotone_times(np.array([float(np.median(by_size[x])) for x in sizes]))
            label = "+".join(sorted({src for _, _, src in pts}))
            self._index.setdefault((collective, role), {})[group] = (sizes, times, label)
        # latency of a group: its fastest small-message (< 1 MiB) call of any kind
        self._latency: dict[int, float] = {}
        for table in self._index.values():
            for group, (sizes, times, _) in table.items():
                small = times[sizes < BANDWIDTH_BYTES]
                if len(small):
                    self._latency[group] = min(self._latency.get(group, math.inf), float(small.min()))

    def _table(self, collective: str, role: str, size: float) -> dict[int, tuple[np.ndarray, np.ndarray, str]] | None:
        """Measured points of a collective for a message size: its role's, else the synchronous ones, else any role's. A
        curve of small messages only (largest under :data:`BANDWIDTH_BYTES`) serves sizes up to 4x its largest:
        it says nothing about bandwidth."""
        for key in ((collective, role), (collective, "sync"), *((k, r) for (k, r) in self._index if k == collective)):
            table = self._index.get(key)
            if table and any(sz[-1] >= min(BANDWIDTH_BYTES, size / 4) for sz, _, _ in table.values()):
                return table
        return None

    def _intra(self, collective: str, role: str, n: int, size: float) -> tuple[float, str]:
        table = self._table(collective, role, size)
        if table is None and collective == "all_reduce":
            # a ring all-reduce is a reduce-scatter followed by an all-gather of the same buffer
            rs, ag = self._table("reduce_scatter", role, size), self._table("all_gather", role, size)
            if rs is not None and ag is not None:
                t_rs, src_rs = self._lookup(rs, "reduce_scatter", n, size)
                t_ag, src_ag = self._lookup(ag, "all_gather", n, size)
                return t_rs + t_ag, f"reduce-scatter + all-gather ({src_rs}; {src_ag})"
        if table is None and collective in ("all_to_all", "send_recv", "reduce_scatter", "all_gather"):
            for other in ("all_gather", "reduce_scatter"):
                alt = self._table(other, role, size)
                if alt is not None:
                    t, src = self._lookup(alt, other, n, size, as_collective=collective)
                    return t, f"{other} bus bandwidth ({src})"
        if table is None:
            return self._spec_intra(collective, n, size)
        return self._lookup(table, collective, n, size)

    def _lookup(self, table: dict[int, tuple[np.ndarray, np.ndarray, str]], collective: str, n: int, size: float,
                as_collective: str | None = None) -> tuple[float, str]:
        """Time of ``size`` bytes over ``n`` ranks from a measured table (of ``collective``), read as
        ``as_collective``.

        Inside the measured sizes: log-log interpolation. Above: the largest point's bandwidth. Below a curve that
        starts at bandwidth-sized messages: linear from the group's measured small-message latency.
        """
        # groups whose curve says something about this size (a curve of small messages only says nothing about a
        # bandwidth-sized one: a traced 8-byte all-reduce of 4 ranks scaled to 860 MB was 300x too slow)
        usable = [g for g, (sz, _, _) in table.items() if sz[-1] >= min(BANDWIDTH_BYTES, size / 4)] or list(table)
        group = n if n in usable else min(usable, key=lambda g: (abs(math.log2(g) - math.log2(n)), -g))
        sizes, times, src = table[group]
        f_here, f_meas = bus_factor(as_collective or collective, n), bus_factor(collective, group)
        # the measured group's bus bandwidth carried over to n ranks (bus bandwidth, not time, is what transfers)
        scale = f_here / f_meas if f_meas > 0 else 1.0
        label = src if group == n else f"{src} (group {group} for {n})"
        if size >= sizes[-1]:
            return float(times[-1] * size / sizes[-1] * scale), label
        if size <= sizes[0]:
            if sizes[0] < BANDWIDTH_BYTES:
                return float(times[0]), label
            lat = min(self._latency.get(group, 0.0), float(times[0]))
            return float(lat + (times[0] - lat) * scale * size / sizes[0]), label
        t = np.exp(np.interp(np.log(size), np.log(sizes), np.log(times)))
        return float(t * scale), label

    def _spec_intra(self, collective: str, n: int, size: float) -> tuple[float, str]:
        bw = (self.hw.link_gbyte_s or float("nan")) * 1e9
        return size * bus_factor(collective, n) / bw, f"assumed: {self.hw.name} link spec"

    def _inter(self, op: CommOp) -> tuple[float, str]:
        n, nodes = op.group, op.nodes
        per_gpu = self.network.nic_gbit_s_per_gpu * 1e9 / 8.0
        per_node = max(1, n // nodes)  # this group's ranks on one node
        lat = self.network.latency_us * 1e-6 * math.log2(max(nodes, 2))
        if op.collective == "all_to_all":
            off_node = op.size_bytes * (n - per_node) / n
            t = lat + off_node / per_gpu
        elif op.collective == "send_recv":
            t = lat + op.size_bytes / per_gpu
        else:
            t = lat + op.size_bytes * bus_factor(op.collective, n) / (per_gpu * per_node)
        # never faster than the same collective inside one node
        t_intra, _ = self._intra(op.collective, op.role, per_node if per_node > 1 else 2, op.size_bytes)
        return max(t, t_intra if per_node > 1 else 0.0), f"assumed: inter-node {self.network.source}"

    def call_time(self, op: CommOp) -> tuple[float, str]:
        """(seconds per call, source) of one call of ``op``."""
        if op.group <= 1:
            return 0.0, "none"
        if op.nodes > 1:
            return self._inter(op)
        return self._intra(op.collective, op.role if op.role == "zero3" else "sync", op.group, op.size_bytes)

    def op_time(self, op: CommOp) -> tuple[float, str]:
        """(seconds per iteration, source) of ``op``: calls x time per call."""
        t, src = self.call_time(op)
        return op.calls * t, src


def trace_points(rows: list[tuple[str, list[CommOp], dict[str, float], dict[str, float]]]) -> pd.DataFrame:
    """Curve points from profiled steps.

    Args:
        rows: per traced rank (cell id, the rank's ops, measured ``{category: summed seconds}``, measured
            ``{category: kernel count}``).

    A category is used only when every op of that kind on the rank has one role and one message size (a mix,
    e.g. pipeline sends next to MoE all-to-alls in SendRecv, cannot be split) and no pipeline wait hides in it
    (pipeline cells' all-reduces and sends include waits for other stages). NCCL runs all-to-all as grouped
    send/recv, so it is read from the ``send_recv`` category.
    """
    out = []
    for cid, ops, sums, _counts in rows:
        pipeline = any(o.role == "pp" for o in ops)
        by_cat: dict[str, list[CommOp]] = {}
        for o in ops:
            if o.group <= 1:
                continue
            cat = "send_recv" if o.collective == "all_to_all" else o.collective
            by_cat.setdefault(cat, []).append(o)
        for cat, cat_ops in by_cat.items():
            # inter-node calls are no intra-node measurement; the gradient synchronisation after the last
            # micro-batch waits for the slowest rank: a category holding either cannot be read as link time
            if any(o.nodes > 1 or o.role == "dp" for o in cat_ops):
                continue
            roles = {("zero3" if o.role == "zero3" else "sync") for o in cat_ops}
            big = [o for o in cat_ops if o.role != "sync"]
            if pipeline and cat in ("send_recv", "all_reduce"):
                continue
            if len(roles) != 1 or len({(o.collective, o.size_bytes, o.group) for o in big}) > 1:
                continue
            measured = sums.get(cat, 0.0)
            calls = sum(o.calls for o in cat_ops)
            if measured <= 0 or calls <= 0:
                continue
            ref = big[0] if big else cat_ops[0]
            if big:  # subtract the small sync calls at the big calls' per-call time share (they are tiny)
                calls = sum(o.calls for o in big)
                measured *= sum(o.calls * o.size_bytes for o in big) / sum(o.calls * o.size_bytes for o in cat_ops)
            out.append({"kind": ref.collective, "role": roles.pop(), "group": ref.group, "size_bytes": ref.size_bytes,
                        "time_s": measured / calls, "source": "trace", "cell_id": cid})
    return pd.DataFrame(out, columns=[*CURVE_COLUMNS, "cell_id"])

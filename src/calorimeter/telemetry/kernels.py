"""Kernel-time breakdown of torch.profiler (Kineto) chrome traces, with interval unions.

Two views, kept apart on purpose:

* summed kernel time per category (``<category>_sum_s``): every kernel counts fully, so
  kernels overlapping on different streams are counted once each (this is what the paper's
  artifact plots);
* wall time from interval unions (``busy_s``, ``compute_s``, ``comm_s``, ``comm_exposed_s``):
  overlapping kernels are never double counted.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.work import COLLECTIVES

#: Kernel categories, in report order.
CATEGORIES: tuple[str, ...] = (
    "gemm_attention",
    *COLLECTIVES,
    "other_comm",
    "memory_elementwise",
    "normalization",
    "other",
)

#: Categories that are communication.
COMM_CATEGORIES: frozenset[str] = frozenset({*COLLECTIVES, "other_comm"})

_COLLECTIVES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("allreduce", "all_reduce"), "all_reduce"),
    (("reducescatter", "reduce_scatter"), "reduce_scatter"),
    (("allgather", "all_gather"), "all_gather"),
    (("alltoall", "all_to_all"), "all_to_all"),
    (("sendrecv", "send_recv", "broadcast", "_send", "_recv"), "send_recv"),
)
# PyTorch's symmetric memory (async tensor parallelism) moves shards as copy-engine peer copies ("Memcpy PtoP") and
# synchronises ranks with its own kernels (``c10d::symmetric_memory::barrier_kernel``, signal pads): communication.
_COMM_MARKERS = ("nccl", "rccl", "userbuffers", "pushsend", "pushrecv", "symmetric_memory", "memcpy ptop")
_GEMM_ATTN = (
    "gemm", "gemv", "matmul", "xmma", "cutlass", "cublas", "wgmma", "nvjet", "sdpa",
    "flash", "fmha", "attention", "attn", "triton_tem_",
)  # fmt: skip
_NORM = (
    "layer_norm",
    "layernorm",
    "rms_norm",
    "rmsnorm",
    "batch_norm",
    "batchnorm",
    "group_norm",
    "groupnorm",
    "_norm",
)
_MEMORY = (
    "elementwise", "memcpy", "memset", "copy", "fill", "cat", "index", "gather", "scatter", "reduce_kernel",
    "softmax", "dropout", "adam", "multi_tensor", "vectorized", "unrolled", "transpose", "cast", "convert",
    "rotary", "rope", "embedding", "cross_entropy", "triton_",
)  # fmt: skip


def categorize_kernel(name: str) -> str:
    """Category of a GPU kernel from its name (case-insensitive, first rule that matches wins).

    Rules: NCCL/RCCL/userbuffers kernels -> the collective in their name (AllReduce,
    ReduceScatter, AllGather, AllToAll, SendRecv/Broadcast) else ``other_comm``; PyTorch
    symmetric-memory kernels and peer copies (``Memcpy PtoP``) -> ``other_comm``; GEMM and
    attention kernels (gemm, xmma, cutlass, cublas, nvjet, flash, fmha, sdpa, ...) ->
    ``gemm_attention``; norms -> ``normalization``; elementwise, copies, reductions, softmax,
    optimizer, remaining Triton kernels -> ``memory_elementwise``; anything else -> ``other``.

    Args:
        name: Kernel name as in the trace.

    Returns:
        One of :data:`CATEGORIES`.
    """
    n = name.lower()
    if any(m in n for m in _COMM_MARKERS):
        for needles, cat in _COLLECTIVES:
            if any(x in n for x in needles):
                return cat
        return "other_comm"
    if any(x in n for x in _GEMM_ATTN):
        return "gemm_attention"
    if any(x in n for x in _NORM):
        return "normalization"
    if any(x in n for x in _MEMORY):
        return "memory_elementwise"
    return "other"


#: ATen operators that are matrix products or attention (CPU ranks' ``gemm_attention``)
_CPU_GEMM_ATTN = re.compile(r"^aten::(_?(addmm|mm|bmm|baddbmm|addbmm|matmul|linear|addmv|mv|dot|conv\w*|"
                            r"_scaled_dot_product\w*|scaled_dot_product\w*))$")


def categorize_cpu_op(name: str) -> str:
    """Category of a CPU operator of a profiled step on CPU ranks (its own time: :func:`self_time_events`).

    Rules: gloo/c10d collectives -> the collective in their name, else ``other_comm``; ATen matrix products and
    attention (``aten::mm``, ``addmm``, ``bmm``, ``linear``, ``scaled_dot_product_*``, ...) -> ``gemm_attention``;
    norms -> ``normalization``; every other ATen operator (elementwise arithmetic, copies, views, allocation,
    reductions) -> ``memory_elementwise``; anything else -> ``other``.
    """
    n = name.lower()
    if n.startswith(("gloo:", "c10d::", "nccl:")) or "record_param_comms" in n:
        for needles, cat in _COLLECTIVES:
            if any(x in n for x in needles):
                return cat
        return "other_comm"
    if _CPU_GEMM_ATTN.match(n):
        return "gemm_attention"
    if any(x in n for x in _NORM):
        return "normalization"
    return "memory_elementwise" if n.startswith("aten::") else "other"


def self_time_events(events: Sequence[KernelEvent]) -> list[KernelEvent]:
    """Each event's own time on its thread (``stream``), outside the events nested in it, as pieces named like the
    event: CPU operators nest (``aten::linear`` calls ``aten::addmm``), so summed durations would count a moment
    once per nesting level; own times count it once, for the innermost operator running then."""
    out: list[KernelEvent] = []
    by_thread: dict[Any, list[KernelEvent]] = {}
    for ev in events:
        by_thread.setdefault(ev.stream, []).append(ev)
    for evs in by_thread.values():
        children: dict[int, list[tuple[float, float]]] = {}
        stack: list[int] = []
        evs = sorted(evs, key=lambda e: (e.start_us, -e.dur_us))
        for i, ev in enumerate(evs):
            while stack and evs[stack[-1]].end_us <= ev.start_us:
                stack.pop()
            if stack:
                children.setdefault(stack[-1], []).append((ev.start_us, min(ev.end_us, evs[stack[-1]].end_us)))
            stack.append(i)
        for i, ev in enumerate(evs):
            t = ev.start_us
            for c0, c1 in merge_intervals(children.get(i, [])) + [(ev.end_us, ev.end_us)]:
                if c0 > t:
                    out.append(KernelEvent(ev.name, t, c0 - t, ev.stream, ev.device))
                t = max(t, c1)
    return out


def merge_intervals(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merge overlapping or touching ``(start, end)`` intervals.

    Args:
        intervals: Intervals in any order; empty or inverted ones are dropped.

    Returns:
        Disjoint intervals sorted by start.
    """
    items = sorted((float(s), float(e)) for s, e in intervals if e > s)
    merged: list[tuple[float, float]] = []
    for s, e in items:
        if merged and s <= merged[-1][1]:
            if e > merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
        else:
            merged.append((s, e))
    return merged


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by the union of the intervals."""
    return sum(e - s for s, e in merge_intervals(intervals))


def uncovered_length(intervals: Sequence[tuple[float, float]], cover: Sequence[tuple[float, float]]) -> float:
    """Length of ``union(intervals)`` not covered by ``union(cover)``: ``|A ∪ B| - |B|``."""
    return union_length(list(intervals) + list(cover)) - union_length(cover)


@dataclass(frozen=True)
class KernelEvent:
    """One GPU kernel from a trace.

    Attributes:
        name: Kernel name.
        start_us: Start (µs, trace clock).
        dur_us: Duration (µs).
        stream: CUDA stream (or thread id when absent).
        device: GPU index (or process id when absent).
    """

    name: str
    start_us: float
    dur_us: float
    stream: int | str = 0
    device: int | str = 0

    @property
    def end_us(self) -> float:
        """End time in µs."""
        return self.start_us + self.dur_us


@dataclass
class KernelBreakdown:
    """Kernel time of one trace (one GPU).

    Attributes:
        n_kernels: Number of kernel events.
        sum_s: Summed kernel time per category (overlaps counted once per kernel).
        count: Kernel count per category.
        union_s: Union time per category.
        busy_s: Union of all kernels.
        compute_s: Union of all non-communication kernels.
        comm_s: Union of communication kernels.
        comm_exposed_s: Communication time not covered by any compute kernel.
        overlap_s: Time where communication and compute kernels run together.
        span_s: First kernel start to last kernel end.
    """

    n_kernels: int = 0
    sum_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    count: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    union_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    busy_s: float = 0.0
    compute_s: float = 0.0
    comm_s: float = 0.0
    comm_exposed_s: float = 0.0
    overlap_s: float = 0.0
    span_s: float = 0.0

    def as_row(self) -> JsonObject:
        """Flat dict: totals then ``<category>_sum_s``, ``<category>_union_s``, ``<category>_count``."""
        row: JsonObject = {
            "n_kernels": self.n_kernels,
            "busy_s": self.busy_s,
            "compute_s": self.compute_s,
            "comm_s": self.comm_s,
            "comm_exposed_s": self.comm_exposed_s,
            "overlap_s": self.overlap_s,
            "span_s": self.span_s,
        }
        for c in CATEGORIES:
            row[f"{c}_sum_s"] = self.sum_s[c]
            row[f"{c}_union_s"] = self.union_s[c]
            row[f"{c}_count"] = self.count[c]
        return row


def copies_as_comm(name: str) -> str:
    """:func:`categorize_kernel`, except that every memory copy (``Memcpy ...``) counts as ``other_comm``.

    The strict view for copy-engine communication: a peer copy from memory mapped into the local address space may be
    recorded as ``Memcpy DtoD``, indistinguishable by name from a local copy; counting every copy as communication
    bounds its exposed time from above.
    """
    return "other_comm" if name.lower().startswith("memcpy") else categorize_kernel(name)


def kernel_breakdown(events: Sequence[KernelEvent],
                     categorize: Callable[[str], str] = categorize_kernel) -> KernelBreakdown:
    """Summed and interval-union kernel times of one GPU's kernels.

    Args:
        events: Kernel events of a single GPU (all streams).
        categorize: Category of a kernel name (default :func:`categorize_kernel`; :func:`copies_as_comm` for the
            strict view of copy-engine communication).

    Returns:
        A :class:`KernelBreakdown` (seconds).
    """
    out = KernelBreakdown(n_kernels=len(events))
    if not events:
        return out
    by_cat: dict[str, list[tuple[float, float]]] = {c: [] for c in CATEGORIES}
    for ev in events:
        cat = categorize(ev.name)
        by_cat[cat].append((ev.start_us, ev.end_us))
        out.sum_s[cat] += ev.dur_us * 1e-6
        out.count[cat] += 1
    for c, iv in by_cat.items():
        out.union_s[c] = union_length(iv) * 1e-6
    comm = [iv for c in CATEGORIES if c in COMM_CATEGORIES for iv in by_cat[c]]
    compute = [iv for c in CATEGORIES if c not in COMM_CATEGORIES for iv in by_cat[c]]
    busy = union_length(comm + compute)
    out.busy_s = busy * 1e-6
    out.comm_s = union_length(comm) * 1e-6
    out.compute_s = union_length(compute) * 1e-6
    out.comm_exposed_s = (busy - union_length(compute)) * 1e-6
    out.overlap_s = out.comm_s + out.compute_s - out.busy_s
    out.span_s = (max(ev.end_us for ev in events) - min(ev.start_us for ev in events)) * 1e-6
    return out


def load_trace(path: str | Path) -> JsonObject:
    """Load a chrome trace (``.json`` or ``.json.gz``)."""
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt") as fh:
        return json.load(fh)


def kernel_events(trace: JsonObject | list[JsonObject], cats: Sequence[str] = ("kernel",)) -> list[KernelEvent]:
    """Kernel events of a chrome trace.

    Args:
        trace: The loaded trace (dict with ``traceEvents`` or a bare event list).
        cats: Event categories to keep (``"kernel"``; add ``"gpu_memcpy"``/``"gpu_memset"`` for copies).

    Returns:
        Events with ``ph == "X"`` (complete events) of the given categories.
    """
    raw = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    out: list[KernelEvent] = []
    for ev in raw:
        if ev.get("cat") not in cats or ev.get("ph", "X") != "X" or "dur" not in ev:
            continue
        args = ev.get("args") or {}
        out.append(
            KernelEvent(
                name=str(ev.get("name", "")),
                start_us=float(ev["ts"]),
                dur_us=float(ev["dur"]),
                stream=args.get("stream", ev.get("tid", 0)),
                device=args.get("device", ev.get("pid", 0)),
            )
        )
    return out


_RANK_RE = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def trace_rank(path: str | Path, trace: JsonObject | None = None) -> int | None:
    """Rank of a trace: ``distributedInfo.rank`` if present, else ``rank-<n>`` in the file name."""
    if isinstance(trace, dict):
        info = trace.get("distributedInfo") or {}
        if isinstance(info, dict) and str(info.get("rank", "")).isdigit():
            return int(info["rank"])
    m = _RANK_RE.search(Path(path).name)
    if m:
        return int(m.group(1))
    digits = re.findall(r"\d+", Path(path).name)
    return int(digits[-1]) if digits else None


#: Trace events a breakdown counts: kernels and copies (peer copies are the communication of PyTorch's symmetric-memory
#: tensor parallelism; local copies are GPU work like any kernel).
TRACE_EVENT_CATEGORIES: tuple[str, ...] = ("kernel", "gpu_memcpy")
#: The events of a trace without GPU kernels (CPU ranks): the profiler's CPU operators, counted by their own time.
CPU_EVENT_CATEGORIES: tuple[str, ...] = ("cpu_op",)


def breakdown_traces(paths: Iterable[str | Path], cats: Sequence[str] = TRACE_EVENT_CATEGORIES) -> pd.DataFrame:
    """Kernel breakdown of several traces, one row per (rank, device), ranks in numeric order; a trace without GPU
    kernels (CPU ranks) gives one ``cpu`` row of its CPU operators' own times (:func:`categorize_cpu_op`).

    Args:
        paths: Chrome trace files (e.g. ``rank-0.json`` ... ``rank-31.json``).
        cats: Event categories counted (default :data:`TRACE_EVENT_CATEGORIES`; ``("kernel",)`` for kernels only).

    Returns:
        Columns ``rank, device, file`` then :meth:`KernelBreakdown.as_row`'s columns.
    """
    rows: list[JsonObject] = []
    for path in paths:
        trace = load_trace(path)
        events = kernel_events(trace, cats)
        rank = trace_rank(path, trace)
        if not events:  # CPU ranks: the leaf CPU operators of the profiled step, device "cpu"
            ops = self_time_events(kernel_events(trace, CPU_EVENT_CATEGORIES))
            if ops:
                rows.append({"rank": rank, "device": "cpu", "file": str(path),
                             **kernel_breakdown(ops, categorize_cpu_op).as_row()})
                continue
        devices = sorted({ev.device for ev in events}, key=str) or [None]
        for dev in devices:
            evs = [ev for ev in events if dev is None or ev.device == dev]
            rows.append({"rank": rank, "device": dev, "file": str(path), **kernel_breakdown(evs).as_row()})
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df["_r"] = pd.to_numeric(df["rank"], errors="coerce")
    return df.sort_values(["_r", "file"], kind="stable", na_position="last").drop(columns="_r").reset_index(drop=True)


def kernel_table(events: Sequence[KernelEvent]) -> pd.DataFrame:
    """Per kernel name: category, count, summed and mean duration (s), longest first."""
    if not events:
        return pd.DataFrame(columns=["name", "category", "count", "sum_s", "mean_s"])
    df = pd.DataFrame({"name": [e.name for e in events], "dur_s": [e.dur_us * 1e-6 for e in events]})
    t = df.groupby("name", sort=False)["dur_s"].agg(count="count", sum_s="sum", mean_s="mean").reset_index()
    t.insert(1, "category", t["name"].map(categorize_kernel))
    return t.sort_values("sum_s", ascending=False, kind="stable").reset_index(drop=True)

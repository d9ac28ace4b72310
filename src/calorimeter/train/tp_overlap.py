"""Sequence-parallel linears whose all-gather / reduce-scatter run under their GEMMs ("collective matmul"): a ring of
point-to-point sends, or PyTorch's symmetric memory.

Under sequence parallelism every column-parallel linear starts with an all-gather of the sequence-sharded input and
every row-parallel linear ends with a reduce-scatter of its output along the sequence. Issued as whole collectives
on the compute stream (Megatron-core without Transformer Engine's userbuffers), they are exposed: the kernel traces
of the reference runs show them as 20-31% of the step of TP layouts. Here each collective is cut into ``tp`` chunks
(the sequence shards) passed around the tensor-parallel ring with point-to-point sends; every step's transfer runs
on the communication stream while the GEMM of the chunk already in hand runs on the compute stream:

* column-parallel forward (all-gather + GEMM): at step ``t`` rank ``r`` multiplies shard ``r - t`` (its own first)
  while passing it on to rank ``r + 1`` and receiving shard ``r - t - 1``; the output rows of each shard are a
  contiguous block of the output, so no reordering is needed;
* row-parallel forward (GEMM + reduce-scatter): at step ``t`` rank ``r`` computes its partial sum of output shard
  ``r - 1 - t``, adds the running sum received from rank ``r - 1`` and sends it on; after ``tp - 1`` hops the sum of
  shard ``r`` ends on rank ``r``;
* backward: the column-parallel input gradient is the row-parallel pattern (GEMM + reduce-scatter) while the input
  is gathered again for the weight gradient on the same ring (nothing is kept from the forward pass: less memory
  than saving the gathered input); the row-parallel backward is the column-parallel pattern on the output gradient.
  Weight gradients are one GEMM over the gathered tensor, as in Megatron-core.

The math is Megatron-core's (same layouts, same sums; the reduce-scatter's partial sums are added in ring order);
``tests/test_parallel_equivalence.py`` checks losses and every gradient against the single-rank model on CPU ranks
(gloo). On CUDA the tensor-parallel group's NCCL streams get high priority (Megatron-core's
``high_priority_stream_groups``) so the transfer kernels are scheduled ahead of the GEMM they hide under.

A second mechanism, what ``overlap: true`` uses where the tensor-parallel group is NCCL on one host
(:func:`tp_overlap_mode`; ``CALORIMETER_TP_OVERLAP=ring|symm_mem`` forces one, a benchmark override like
``CALORIMETER_FUSED``; the choice is recorded in run.json): PyTorch's symmetric-memory async tensor parallelism
(``torch.ops.symm_mem.fused_all_gather_matmul`` / ``fused_matmul_reduce_scatter``), whose shards move as peer copies
from symmetric buffers (copy engines, no SMs) pipelined with the GEMMs. On 2x H200 the ring's NCCL send/recv kernels
ran beside the GEMMs for only 28% of their time; this path has no such contention: at TP2 + SP, s=8192 it cut
exposed communication from 0.351 s a step to 0.079-0.104 s with every copy counted as communication
(the committed engine benchmark), while on small shards (s=2048) its host time per operation made
the step 30-34% slower (docs/knobs.md, ``overlap``). It keeps the gathered input of a column-parallel linear from the
forward pass for its weight gradient (more activation memory than the ring, which gathers it again). On CPU ranks it
runs PyTorch's own reference implementation of the same two ops (collective, then GEMM), which is what the
equivalence tests check; NVLink multicast stays off (``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``).
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import Any

import torch
import torch.distributed as dist


class Ring:
    """This rank's place in the tensor-parallel ring: the group, its size and index, the global ranks next/previous.

    Process groups cannot be copied; a ring is shared by copies of the module that holds it (DeepSpeed deep-copies
    MoE experts).
    """

    def __init__(self, group: Any) -> None:
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.next = dist.get_global_rank(group, (self.rank + 1) % self.size)
        self.prev = dist.get_global_rank(group, (self.rank - 1) % self.size)

    def __deepcopy__(self, memo: dict[int, object]) -> Ring:
        return self

    def shift(self, send: torch.Tensor, recv: torch.Tensor) -> list[Any]:
        """Start sending ``send`` to the next rank and receiving the previous rank's into ``recv``; returns works."""
        return dist.batch_isend_irecv([dist.P2POp(dist.isend, send, self.next, self.group),
                                       dist.P2POp(dist.irecv, recv, self.prev, self.group)])

    def chunk(self, t: int, offset: int = 0) -> int:
        """Index of the shard this rank handles at step ``t`` (``offset=-1``: reduce-scatter order)."""
        return (self.rank - t + offset) % self.size


def _wait(works: list[Any]) -> None:
    for w in works:
        w.wait()


def _rows(x: torch.Tensor, i: int, n: int) -> torch.Tensor:
    return x[i * n:(i + 1) * n]


def _weight_grad(grad_out: torch.Tensor, inp: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``grad_out^T @ inp`` over every leading dimension, shaped as ``weight`` (a linear's weight gradient)."""
    return _mm(grad_out.reshape(-1, grad_out.shape[-1]).t(), inp.reshape(-1, inp.shape[-1])).view_as(weight)


def _mm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``a @ b`` of ``a`` with leading dimensions ``(..., k)`` and ``b`` 2-D, into ``out`` when given."""
    flat = a.reshape(-1, a.shape[-1])
    if out is None:
        return torch.mm(flat, b).view(*a.shape[:-1], b.shape[-1])
    torch.mm(flat, b, out=out.view(-1, b.shape[-1]))
    return out


def ring_all_gather_matmul(x: torch.Tensor, weight_t: torch.Tensor, ring: Ring,
                           gathered: torch.Tensor | None = None) -> torch.Tensor:
    """``all_gather(x) @ weight_t`` along dim 0 with each shard's GEMM under the next shard's transfer.

    Args:
        x: this rank's shard ``(n, ..., k)`` (contiguous).
        weight_t: ``(k, m)``.
        ring: the tensor-parallel ring.
        gathered: if given, a ``(tp * n, ..., k)`` buffer that receives the gathered input (for a weight gradient).

    Returns:
        ``(tp * n, ..., m)``.
    """
    n = x.shape[0]
    out = x.new_empty((ring.size * n, *x.shape[1:-1], weight_t.shape[1]))
    cur = x
    if gathered is not None:
        _rows(gathered, ring.rank, n).copy_(x)
    for t in range(ring.size):
        works: list[Any] = []
        if t < ring.size - 1:
            nxt = _rows(gathered, ring.chunk(t + 1), n) if gathered is not None else torch.empty_like(x)
            works = ring.shift(cur, nxt)
        _mm(cur, weight_t, _rows(out, ring.chunk(t), n))
        if works:
            _wait(works)
            cur = nxt
    return out


def ring_matmul_reduce_scatter(x: torch.Tensor, weight_t: torch.Tensor, ring: Ring,
                               on_step: Any = None) -> torch.Tensor:
    """``reduce_scatter(x @ weight_t)`` along dim 0 with each partial GEMM under the previous partial's transfer.

    Args:
        x: ``(tp * n, ..., k)``, the full sequence.
        weight_t: ``(k, m)``.
        ring: the tensor-parallel ring.
        on_step: called as ``on_step(t)`` after each step's GEMM is issued (lets a caller interleave another
            ring's transfers).

    Returns:
        This rank's shard of the sum, ``(n, ..., m)``.
    """
    n = x.shape[0] // ring.size
    acc: torch.Tensor | None = None
    recv: torch.Tensor | None = None
    works: list[Any] = []
    for t in range(ring.size):
        part = _mm(_rows(x, ring.chunk(t, -1), n), weight_t)
        if on_step is not None:
            on_step(t)
        if works:
            _wait(works)
            part += recv
        if t < ring.size - 1:
            acc, recv = part, torch.empty_like(part)  # acc must live until its send completes
            works = ring.shift(acc, recv)
        else:
            acc = part
    assert acc is not None
    return acc


class _AllGatherLinear(torch.autograd.Function):
    """``y = all_gather_seq(x) @ W^T`` (column-parallel linear under SP), ring-overlapped both ways."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, ring: Ring) -> torch.Tensor:
        x = x.contiguous()
        ctx.save_for_backward(x, weight)
        ctx.ring = ring
        return ring_all_gather_matmul(x, weight.t(), ring)

    @staticmethod
    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x, weight = ctx.saved_tensors
        ring: Ring = ctx.ring
        grad_y = grad_y.contiguous()
        n = x.shape[0]
        gathered = x.new_empty((ring.size * n, *x.shape[1:]))
        _rows(gathered, ring.rank, n).copy_(x)
        state: dict[str, Any] = {"works": []}

        def gather_step(t: int) -> None:
            # the input's all-gather ring, one hop per reduce-scatter step (its transfers under the dgrad GEMMs)
            _wait(state["works"])
            if t < ring.size - 1:
                state["works"] = ring.shift(_rows(gathered, ring.chunk(t), n), _rows(gathered, ring.chunk(t + 1), n))
            else:
                state["works"] = []

        grad_x = ring_matmul_reduce_scatter(grad_y, weight, ring, on_step=gather_step)
        _wait(state["works"])
        return grad_x, _weight_grad(grad_y, gathered, weight), None


class _LinearReduceScatter(torch.autograd.Function):
    """``y = reduce_scatter_seq(x @ W^T)`` (row-parallel linear under SP), ring-overlapped both ways."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, ring: Ring) -> torch.Tensor:
        x = x.contiguous()
        ctx.save_for_backward(x, weight)
        ctx.ring = ring
        return ring_matmul_reduce_scatter(x, weight.t(), ring)

    @staticmethod
    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x, weight = ctx.saved_tensors
        ring: Ring = ctx.ring
        grad_y = grad_y.contiguous()
        n = grad_y.shape[0]
        gathered = grad_y.new_empty((ring.size * n, *grad_y.shape[1:]))
        grad_x = ring_all_gather_matmul(grad_y, weight, ring, gathered=gathered)
        return grad_x, _weight_grad(gathered, x, weight), None


class SymmMemTP:
    """The tensor-parallel group's fused all-gather + GEMM and GEMM + reduce-scatter from PyTorch's symmetric memory.

    On CUDA: ``torch.ops.symm_mem.fused_*`` (symmetric memory enabled for the group once). Elsewhere: PyTorch's
    reference implementation of the same ops (a functional collective, then the GEMM), so that CPU ranks compute what
    the fused ops compute. Shared by copies of the module that holds it, like :class:`Ring`.
    """

    def __init__(self, group: Any) -> None:
        import torch.distributed._symmetric_memory as symm_mem

        self.group_name = group.group_name
        if dist.get_backend(group) == "nccl":
            if not _on_one_host(self.group_name):
                raise ValueError(f"{ENV_TP_OVERLAP}=symm_mem: the tensor-parallel group spans hosts; symmetric memory "
                                 "needs every rank of the group on one host (use ring)")
            with warnings.catch_warnings():  # needed before torch 2.9 (pyproject allows 2.6); deprecated since
                warnings.simplefilter("ignore", FutureWarning)
                symm_mem.enable_symm_mem_for_group(self.group_name)
            ops = torch.ops.symm_mem
            self._ag, self._rs = ops.fused_all_gather_matmul, ops.fused_matmul_reduce_scatter
        else:
            self._ag, self._rs = (symm_mem._fused_all_gather_matmul_fallback,
                                  symm_mem._fused_matmul_reduce_scatter_fallback)

    def __deepcopy__(self, memo: dict[int, object]) -> SymmMemTP:
        return self

    def all_gather_matmul(self, x: torch.Tensor, weight_t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(all_gather(x), all_gather(x) @ weight_t)`` along dim 0."""
        gathered, outs = self._ag(x, [weight_t], 0, self.group_name, return_A=True)
        return gathered, _not_a_view(outs[0])

    def matmul_reduce_scatter(self, x: torch.Tensor, weight_t: torch.Tensor) -> torch.Tensor:
        """``reduce_scatter(x @ weight_t)`` (sum) along dim 0."""
        return _not_a_view(self._rs(x, weight_t, "sum", 0, self.group_name))


def _not_a_view(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a tensor of its own (same storage): the ops may return a view (e.g. ``movedim(0, 0)``) of a result,
    and autograd forbids in-place changes of a custom Function's output that is a view (the next layer's ops make
    them)."""
    return t.detach() if t._is_view() else t


class _SymmAllGatherLinear(torch.autograd.Function):
    """``y = all_gather_seq(x) @ W^T`` with :class:`SymmMemTP`; backward: GEMM + reduce-scatter, weight gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, tp: SymmMemTP) -> torch.Tensor:
        gathered, y = tp.all_gather_matmul(x.contiguous(), weight.t())
        ctx.save_for_backward(gathered, weight)
        ctx.tp = tp
        return y

    @staticmethod
    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        gathered, weight = ctx.saved_tensors
        grad_y = grad_y.contiguous()
        grad_x = ctx.tp.matmul_reduce_scatter(grad_y, weight)
        return grad_x, _weight_grad(grad_y, gathered, weight), None


class _SymmLinearReduceScatter(torch.autograd.Function):
    """``y = reduce_scatter_seq(x @ W^T)`` with :class:`SymmMemTP`; backward: all-gather + GEMM, weight gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, tp: SymmMemTP) -> torch.Tensor:
        x = x.contiguous()
        ctx.save_for_backward(x, weight)
        ctx.tp = tp
        return tp.matmul_reduce_scatter(x, weight.t())

    @staticmethod
    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x, weight = ctx.saved_tensors
        gathered, grad_x = ctx.tp.all_gather_matmul(grad_y.contiguous(), weight)
        return grad_x, _weight_grad(gathered, x, weight), None


#: the overlap mechanisms of ``overlap: true`` under tp > 1 with SP, and the environment override that picks one
TP_OVERLAP_MODES = ("ring", "symm_mem")
ENV_TP_OVERLAP = "CALORIMETER_TP_OVERLAP"


def tp_overlap_mode(choice: str | None = None) -> str:
    """The mechanism of ``overlap: true`` under tp > 1 with SP: ``choice`` (the cell's ``tp_comm_overlap``,
    :attr:`calorimeter.train.parallel.TPConfig.mechanism`) when given, else ``CALORIMETER_TP_OVERLAP`` when set
    (``ring`` or ``symm_mem``), else ``auto``: ``symm_mem`` where the tensor-parallel group is NCCL on one host
    (measured on 2x H200: exposed communication 0.351 -> 0.079-0.104 s per step, the ring 0.372 s; on 4x H100 at TP4
    it was host-bound, docs/knobs.md), ``ring`` elsewhere (CPU ranks, a group spanning hosts, or before
    ``parallel_state`` is initialised).

    Raises:
        ValueError: ``choice`` or the environment names no mechanism.
    """
    if choice is not None:
        if choice not in TP_OVERLAP_MODES:
            raise ValueError(f"tp_comm_overlap {choice!r}: expected one of {', '.join(TP_OVERLAP_MODES)} "
                             "(or none: no TP overlap)")
        return choice
    mode = os.environ.get(ENV_TP_OVERLAP, "auto")
    if mode not in ("auto", *TP_OVERLAP_MODES):
        raise ValueError(f"{ENV_TP_OVERLAP}={mode!r}: expected auto or one of {', '.join(TP_OVERLAP_MODES)}")
    if mode != "auto":
        return mode
    if not dist.is_initialized():
        return "ring"
    from megatron.core import parallel_state

    if not parallel_state.model_parallel_is_initialized():
        return "ring"
    group = parallel_state.get_tensor_model_parallel_group()
    return "symm_mem" if dist.get_backend(group) == "nccl" and _on_one_host(group.group_name) else "ring"


@functools.cache
def _on_one_host(group_name: str) -> bool:
    """Whether every rank of the group runs on this host (one collective per group; every rank of the group asks)."""
    import socket

    from torch.distributed.distributed_c10d import _resolve_process_group

    group = _resolve_process_group(group_name)
    hosts: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(hosts, socket.gethostname(), group=group)
    return len(set(hosts)) == 1


def all_gather_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                      comm: Ring | SymmMemTP) -> torch.Tensor:
    """Column-parallel linear of a sequence-sharded ``x`` ``(s/tp, b, in)`` -> ``(s, b, out/tp)``."""
    fn = _AllGatherLinear if isinstance(comm, Ring) else _SymmAllGatherLinear
    y = fn.apply(x, weight, comm)
    return y + bias if bias is not None else y


def linear_reduce_scatter(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                          comm: Ring | SymmMemTP) -> torch.Tensor:
    """Row-parallel linear ``(s, b, in/tp)`` -> sequence shard ``(s/tp, b, out)`` (the bias added to the shard)."""
    fn = _LinearReduceScatter if isinstance(comm, Ring) else _SymmLinearReduceScatter
    y = fn.apply(x, weight, comm)
    return y + bias if bias is not None else y


def tp_comm(choice: str | None = None) -> Ring | SymmMemTP:
    """The overlap mechanism (:func:`tp_overlap_mode` of ``choice``) on Megatron-core's tensor-parallel group
    (``parallel_state`` must be initialised)."""
    from megatron.core import parallel_state

    group = parallel_state.get_tensor_model_parallel_group()
    return SymmMemTP(group) if tp_overlap_mode(choice) == "symm_mem" else Ring(group)


@functools.cache
def overlap_layer_classes(choice: str | None = None) -> tuple[type, type]:
    """Megatron-core's ``ColumnParallelLinear`` / ``RowParallelLinear`` with overlapped forward and backward (the
    mechanism of :func:`tp_comm` for ``choice``, chosen when a layer is built).

    Built on first use (importing Megatron-core is slow and not needed by the overlap functions themselves). Same
    parameters, attributes and outputs as Megatron's layers under sequence parallelism: the column-parallel one takes
    the sequence-sharded input ``(s/tp, b, in)`` and returns ``(s, b, out/tp)``; the row-parallel one returns the
    sequence shard ``(s/tp, b, out)`` of the reduced output.
    """
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear

    class OverlapColumnParallelLinear(ColumnParallelLinear):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.comm = tp_comm(choice)

        def forward(self, input_: torch.Tensor, weight: torch.Tensor | None = None,
                    runtime_gather_output: bool | None = None) -> tuple[torch.Tensor, None]:
            w = self.weight if weight is None else weight
            return all_gather_linear(input_, w, self.bias, self.comm), None

    class OverlapRowParallelLinear(RowParallelLinear):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.comm = tp_comm(choice)

        def forward(self, input_: torch.Tensor) -> tuple[torch.Tensor, None]:
            return linear_reduce_scatter(input_, self.weight, self.bias, self.comm), None

    return OverlapColumnParallelLinear, OverlapRowParallelLinear

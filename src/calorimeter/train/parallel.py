"""Tensor / sequence parallelism: Megatron-core process groups and layers inside the DeepSpeed engine.

The pattern is Megatron-DeepSpeed's: Megatron-core's ``parallel_state`` owns the tensor-parallel groups and its
``ColumnParallelLinear`` / ``RowParallelLinear`` / ``VocabParallelEmbedding`` / ``vocab_parallel_cross_entropy`` do
the tensor-parallel math, while DeepSpeed owns data parallelism (ZeRO), pipelining and the optimizer. Both sides use
the same rank order (tensor-parallel innermost, then data, then pipeline: Megatron's ``tp-cp-ep-dp-pp`` and
DeepSpeed's ``PipeModelDataParallelTopology`` axes ``pipe, data, model``), so a rank's tp group, dp group and stage
agree, and ZeRO reduces over the dp group only (DeepSpeed gets an ``mpu``).

Sequence parallelism uses Megatron-core's collectives (``scatter_to_sequence_parallel_region``,
``gather_from_sequence_parallel_region``, ``reduce_scatter_to_sequence_parallel_region``): between blocks the hidden
state is ``(seq / tp, batch, hidden)``; it is gathered along the sequence before every column-parallel linear and
reduce-scattered after every row-parallel one, so norms run on a sequence shard. Parameters replicated over tp whose
gradients are then partial (norm weights/biases, row-parallel biases: marked ``sequence_parallel``) get their
gradients all-reduced over tp by a hook, as Megatron's ``finalize_model_grads`` does.

megatron-core 0.16.1 allocates the outputs of ``_gather_along_first_dim`` / ``_reduce_scatter_along_first_dim`` with
``device=torch.cuda.current_device()``; on CPU ranks (tests, gloo) :func:`init_model_parallel` wraps those two
functions so that a CPU input gets a CPU output (and gloo, which has no reduce-scatter, an all-reduce and a slice),
and DeepSpeed MoE's ``_gather_tokens`` (``all_gather_into_tensor`` into a flat buffer, which gloo rejects) with a
plain all-gather. CUDA inputs go to the original functions untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class TPConfig:
    """Tensor-parallel layout of a model.

    Attributes:
        tp: tensor-parallel degree (1: plain layers, no Megatron-core).
        sp: Megatron sequence parallelism (needs tp > 1).
        overlap: with ``sp``, the sequence all-gathers / reduce-scatters of the linears run under their GEMMs
            (:mod:`calorimeter.train.tp_overlap`); the cell's ``overlap`` knob ("cc").
        mechanism: with ``overlap``, how the collectives move (``ring``, ``symm_mem``; None: the engine's choice,
            :func:`calorimeter.train.tp_overlap.tp_overlap_mode`); the cell's ``tp_comm_overlap``.
    """

    tp: int = 1
    sp: bool = False
    overlap: bool = False
    mechanism: str | None = None

    @property
    def enabled(self) -> bool:
        """Whether Megatron-core tensor-parallel layers are used."""
        return self.tp > 1


def _cpu_safe_collectives() -> None:
    """Let Megatron-core's sequence-parallel collectives run on CPU tensors (idempotent)."""
    from megatron.core.tensor_parallel import mappings

    if getattr(mappings, "_calorimeter_cpu_safe", False):
        return
    orig_gather, orig_rs = mappings._gather_along_first_dim, mappings._reduce_scatter_along_first_dim

    def gather(input_: torch.Tensor, group: Any, output_split_sizes: Any = None, use_global_buffer: bool = False):
        if input_.is_cuda or output_split_sizes is not None or group.size() == 1:
            return orig_gather(input_, group, output_split_sizes, use_global_buffer)
        parts = [torch.empty_like(input_) for _ in range(group.size())]
        dist.all_gather(parts, input_.contiguous(), group=group)
        return torch.cat(parts, dim=0)

    def reduce_scatter(input_: torch.Tensor, group: Any, input_split_sizes: Any = None,
                       use_global_buffer: bool = False):
        if input_.is_cuda or input_split_sizes is not None or group.size() == 1:
            return orig_rs(input_, group, input_split_sizes, use_global_buffer)
        total = input_.contiguous().clone()
        dist.all_reduce(total, group=group)
        return total.chunk(group.size(), dim=0)[group.rank()].contiguous()

    mappings._gather_along_first_dim = gather
    mappings._reduce_scatter_along_first_dim = reduce_scatter
    mappings._calorimeter_cpu_safe = True

    from deepspeed.moe import mappings as moe_mappings

    orig_gather_tokens = moe_mappings._gather_tokens

    def gather_tokens(input_: torch.Tensor, dim: int = 0) -> torch.Tensor:
        from megatron.core import parallel_state

        group = parallel_state.get_tensor_model_parallel_group()
        if input_.is_cuda or group.size() == 1:
            return orig_gather_tokens(input_, dim)
        parts = [torch.empty_like(input_) for _ in range(group.size())]
        dist.all_gather(parts, input_.contiguous(), group=group)
        return torch.cat(parts, dim=dim)

    moe_mappings._gather_tokens = gather_tokens


def init_model_parallel(tp: int, pp: int, seed: int, device: torch.device, high_priority_tp: bool = False) -> None:
    """Build Megatron-core's process groups for ``tp`` x ``pp`` (dp is the rest), in DeepSpeed's rank order.

    On CUDA also seeds Megatron's model-parallel RNG tracker (``model_parallel_cuda_manual_seed``), and with
    ``high_priority_tp`` gives the tensor-parallel group's NCCL streams high priority (its transfers are meant to
    run under GEMMs: :mod:`calorimeter.train.tp_overlap`).
    """
    from megatron.core import parallel_state, tensor_parallel

    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    high = ["tp"] if high_priority_tp and device.type == "cuda" else None
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                             order="tp-cp-ep-dp-pp", create_gloo_process_groups=False,
                                             high_priority_stream_groups=high)
    if device.type == "cuda":
        tensor_parallel.model_parallel_cuda_manual_seed(seed)
    else:
        _cpu_safe_collectives()


def destroy_model_parallel() -> None:
    """Tear Megatron-core's process groups down (so that the next cell in the process can build its own)."""
    from megatron.core import parallel_state

    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()


class MegatronMPU:
    """The ``mpu`` DeepSpeed expects (pp=1), answered from Megatron-core's ``parallel_state``.

    "Model parallel" is tensor parallel here; ZeRO partitions and reduces over the data-parallel group only, and
    gradient-norm clipping sums over the tensor-parallel group (counting replicated parameters once).
    """

    def __init__(self) -> None:
        from megatron.core import parallel_state

        self.ps = parallel_state

    def get_model_parallel_rank(self) -> int:
        return self.ps.get_tensor_model_parallel_rank()

    def get_model_parallel_world_size(self) -> int:
        return self.ps.get_tensor_model_parallel_world_size()

    def get_model_parallel_group(self) -> Any:
        return self.ps.get_tensor_model_parallel_group()

    get_tensor_model_parallel_rank = get_model_parallel_rank
    get_tensor_model_parallel_world_size = get_model_parallel_world_size
    get_tensor_model_parallel_group = get_model_parallel_group

    def get_pipeline_model_parallel_world_size(self) -> int:
        return self.ps.get_pipeline_model_parallel_world_size()

    def get_data_parallel_rank(self) -> int:
        return self.ps.get_data_parallel_rank()

    def get_data_parallel_world_size(self) -> int:
        return self.ps.get_data_parallel_world_size()

    def get_data_parallel_group(self) -> Any:
        return self.ps.get_data_parallel_group()


def tp_rank_size() -> tuple[int, int]:
    """This rank's tensor-parallel index and the tensor-parallel degree."""
    from megatron.core import parallel_state

    return parallel_state.get_tensor_model_parallel_rank(), parallel_state.get_tensor_model_parallel_world_size()


def megatron_config(tp: int, device: torch.device) -> Any:
    """Megatron-core ``ModelParallelConfig`` for our layers: weights are filled by us (no Megatron init), fp32 master
    parameters (DeepSpeed casts to bf16), allocated on the GPU on CUDA and on the CPU otherwise.

    ``sequence_parallel`` stays False here: the row-parallel layers get their own config with it set, and the
    column-parallel layers gather along the sequence explicitly (see :class:`~calorimeter.train.layers.ColumnLinear`).
    """
    from megatron.core import ModelParallelConfig

    return ModelParallelConfig(tensor_model_parallel_size=tp, use_cpu_initialization=device.type != "cuda",
                               perform_initialization=False, params_dtype=torch.float32)


def mark_sequence_parallel(module: torch.nn.Module) -> None:
    """Mark every parameter of ``module`` as replicated over tp with sequence-sharded gradients."""
    for p in module.parameters():
        p.sequence_parallel = True


def add_sequence_parallel_grad_hooks(model: torch.nn.Module) -> int:
    """All-reduce over tp the gradient of every parameter marked ``sequence_parallel``; returns how many.

    Tensor hooks run before the gradient is accumulated into ``.grad`` and before DeepSpeed's reduction hooks, so
    the data-parallel reduction sees the full gradient. Every tp rank runs the same backward, so the collectives are
    issued in the same order on all of them.
    """
    from megatron.core import parallel_state

    group = parallel_state.get_tensor_model_parallel_group()
    n = 0
    for p in model.parameters():
        if getattr(p, "sequence_parallel", False) and p.requires_grad:
            def hook(g: torch.Tensor, _group: Any = group) -> torch.Tensor:
                g = g.contiguous().clone()
                dist.all_reduce(g, group=_group)
                return g

            p.register_hook(hook)
            n += 1
    return n

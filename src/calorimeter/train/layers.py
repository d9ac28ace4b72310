"""Building blocks of the GPT, Llama and Mixtral transformers, plain or tensor-parallel (Megatron-core layers).

Every parameter is created *and initialised* inside the ``__init__`` of the leaf module that owns it. That keeps the
modules correct under ``deepspeed.zero.Init`` (which partitions a module's parameters as soon as its ``__init__``
returns) and free on the ``meta`` device. Linear layers keep Megatron's weight layout ``(out_features, in_features)``
and Megatron's fused QKV / fused gate-up layouts, so that :class:`Linear` can later be swapped for Megatron-core's
``ColumnParallelLinear`` (``qkv``, ``fc1``) and ``RowParallelLinear`` (``proj``, ``fc2``) without touching the blocks.

With ``TPConfig(tp > 1)`` they are: :class:`ColumnLinear` / :class:`RowLinear` / :class:`VocabEmbedding` draw the
*full* weight exactly as the plain layer would (same RNG stream) and keep this rank's shard, so a tensor-parallel
model starts from the same weights as the single-rank one. With sequence parallelism the hidden state between
layers is ``(seq / tp, batch, hidden)`` (sequence first, as Megatron's SP collectives split dimension 0); without it
it stays ``(batch, seq, hidden)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from calorimeter.plan.models import MOE_MIN_CAPACITY, ModelSpec
from calorimeter.train import kernels
from calorimeter.train.kernels import EAGER, Kernels
from calorimeter.train.parallel import TPConfig, mark_sequence_parallel, megatron_config, tp_rank_size
from calorimeter.train.tp_overlap import overlap_layer_classes

NO_TP = TPConfig()

NORM_EPS = 1e-5


class Linear(nn.Module):
    """``y = x W^T + b`` with ``W`` of shape ``(out_features, in_features)`` drawn from ``normal(0, init_std)``.

    Args:
        in_features: input width.
        out_features: output width.
        bias: whether to add a (zero-initialised) bias.
        init_std: standard deviation of the weight init.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool, init_std: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        nn.init.normal_(self.weight, mean=0.0, std=init_std)
        if bias:
            self.bias = nn.Parameter(torch.zeros(out_features))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the affine map to the last dimension."""
        return F.linear(x, self.weight, self.bias)


def _noop_init(_: torch.Tensor) -> None:
    """Megatron ``init_method`` that leaves the weight alone (we copy our own shard in)."""


def _full_normal(rows: int, cols: int, init_std: float) -> torch.Tensor:
    """The full weight as the plain layer draws it (same RNG consumption), on the default device."""
    w = torch.empty(rows, cols)
    nn.init.normal_(w, mean=0.0, std=init_std)
    return w


def _sp_config(device_cfg: object) -> object:
    import dataclasses

    return dataclasses.replace(device_cfg, sequence_parallel=True)


def _apply_3d(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A Megatron-core parallel linear on ``x`` of any rank: its backward handles 2-D or 3-D inputs only (DeepSpeed
    hands MoE experts ``(ep, local experts, capacity, hidden)``), so leading dimensions are flattened around it."""
    if x.dim() <= 3:
        return layer(x)[0]
    out = layer(x.reshape(-1, 1, x.shape[-1]))[0]
    return out.reshape(*x.shape[:-1], out.shape[-1])


def mark_tensor_parallel(weight: torch.Tensor, partition_dim: int) -> None:
    """Mark a weight as split over tp along ``partition_dim`` (Megatron-core's attributes).

    Megatron-core sets them only when it initialises the weight itself (``perform_initialization``); ours are filled
    from the full draw instead. DeepSpeed reads ``tensor_model_parallel`` to count a split weight's gradient norm on
    every tp rank (a replicated one only on tp rank 0): without it, gradient clipping sees too small a norm.
    """
    from megatron.core.tensor_parallel import set_tensor_model_parallel_attributes

    set_tensor_model_parallel_attributes(weight, is_parallel=True, dim=partition_dim, stride=1)


def column_shard(full: torch.Tensor, gated: bool = False) -> torch.Tensor:
    """This rank's rows of a full ``(out, in)`` column-parallel weight (rows of both halves of a fused gate/up)."""
    rank, size = tp_rank_size()
    if gated:
        gate, up = full.chunk(2, dim=0)
        return torch.cat([gate.chunk(size, dim=0)[rank], up.chunk(size, dim=0)[rank]])
    return full.chunk(size, dim=0)[rank]


def row_shard(full: torch.Tensor) -> torch.Tensor:
    """This rank's columns of a full ``(out, in)`` row-parallel weight."""
    rank, size = tp_rank_size()
    return full.chunk(size, dim=1)[rank]


def _column_class(par: TPConfig) -> type:
    """Megatron-core's ``ColumnParallelLinear``, or its overlapped subclass under SP with ``overlap``."""
    if par.sp and par.overlap:
        return overlap_layer_classes(par.mechanism)[0]
    from megatron.core.tensor_parallel import ColumnParallelLinear

    return ColumnParallelLinear


def _row_class(par: TPConfig) -> type:
    """Megatron-core's ``RowParallelLinear``, or its overlapped subclass under SP with ``overlap``."""
    if par.sp and par.overlap:
        return overlap_layer_classes(par.mechanism)[1]
    from megatron.core.tensor_parallel import RowParallelLinear

    return RowParallelLinear


class ColumnLinear(nn.Module):
    """Megatron-core ``ColumnParallelLinear`` holding this rank's rows of the full ``(out, in)`` weight.

    Args:
        in_features, out_features, bias, init_std: as :class:`Linear` (full sizes).
        par: tensor-parallel layout; with ``sp`` the input ``(seq/tp, b, h)`` is gathered along the sequence first
            (Megatron's ``gather_from_sequence_parallel_region``, whose backward reduce-scatters), and the layer's
            own input-gradient all-reduce is disabled; with ``sp`` and ``overlap`` the gather runs under the GEMM
            (:func:`~calorimeter.train.tp_overlap.overlap_layer_classes`).
        gated: the weight is ``[gate; up]`` (SwiGLU's fused fc1): each rank takes its rows of both halves, so its
            local output still splits as ``[gate_shard, up_shard]``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool, init_std: float, par: TPConfig,
                 gated: bool = False) -> None:
        super().__init__()
        full = _full_normal(out_features, in_features, init_std)
        shard = column_shard(full, gated)
        self.gather = par.sp and not par.overlap  # an explicit (exposed) all-gather before the layer
        self.inner = _column_class(par)(in_features, out_features, config=megatron_config(par.tp, full.device),
                                          init_method=_noop_init, bias=bias, gather_output=False,
                                          skip_bias_add=False, disable_grad_reduce=par.sp)
        mark_tensor_parallel(self.inner.weight, partition_dim=0)
        self.inner.weight.gated_shard = gated  # [gate_r; up_r] rows (train.gradients re-interleaves)
        with torch.no_grad():
            self.inner.weight.copy_(shard)
            if bias:
                self.inner.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., in) -> (..., out / tp)``; with SP ``(s/tp, b, in) -> (s, b, out / tp)``."""
        if self.gather:
            from megatron.core.tensor_parallel import gather_from_sequence_parallel_region

            x = gather_from_sequence_parallel_region(x, tensor_parallel_output_grad=True)
        return _apply_3d(self.inner, x)


class RowLinear(nn.Module):
    """Megatron-core ``RowParallelLinear`` holding this rank's columns of the full ``(out, in)`` weight.

    Its output is all-reduced over tp, or reduce-scattered along the sequence with SP (then the replicated bias is
    added to a sequence shard and Megatron marks it ``sequence_parallel``); with SP and ``overlap`` the
    reduce-scatter runs under the GEMM (:func:`~calorimeter.train.tp_overlap.overlap_layer_classes`).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool, init_std: float, par: TPConfig) -> None:
        super().__init__()
        full = _full_normal(out_features, in_features, init_std)
        cfg = megatron_config(par.tp, full.device)
        if par.sp:
            cfg = _sp_config(cfg)
        self.inner = _row_class(par)(in_features, out_features, config=cfg, init_method=_noop_init, bias=bias,
                                       input_is_parallel=True, skip_bias_add=False)
        mark_tensor_parallel(self.inner.weight, partition_dim=1)
        with torch.no_grad():
            self.inner.weight.copy_(row_shard(full))
            if bias:
                self.inner.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., in / tp) -> (..., out)``; with SP ``(s, b, in/tp) -> (s/tp, b, out)``."""
        return _apply_3d(self.inner, x)


def column_linear(in_features: int, out_features: int, bias: bool, init_std: float, par: TPConfig,
                  gated: bool = False) -> nn.Module:
    """:class:`Linear`, or :class:`ColumnLinear` when tensor-parallel."""
    if par.enabled:
        return ColumnLinear(in_features, out_features, bias, init_std, par, gated)
    return Linear(in_features, out_features, bias, init_std)


def row_linear(in_features: int, out_features: int, bias: bool, init_std: float, par: TPConfig) -> nn.Module:
    """:class:`Linear`, or :class:`RowLinear` when tensor-parallel."""
    if par.enabled:
        return RowLinear(in_features, out_features, bias, init_std, par)
    return Linear(in_features, out_features, bias, init_std)


class Embedding(nn.Module):
    """A lookup table of ``num_embeddings`` rows of width ``dim``, init ``normal(0, init_std)``."""

    def __init__(self, num_embeddings: int, dim: int, init_std: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, dim))
        nn.init.normal_(self.weight, mean=0.0, std=init_std)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows of the table for integer ``ids``."""
        return F.embedding(ids, self.weight)


class LayerNorm(nn.Module):
    """LayerNorm with weight (ones) and bias (zeros), as in GPT-3."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Normalise the last dimension; with ``residual``, normalise ``residual + x`` and return ``(sum, norm)``."""
        if residual is None:
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, NORM_EPS)
        s = residual + x
        return s, F.layer_norm(s, self.weight.shape, self.weight, self.bias, NORM_EPS)


class RMSNorm(nn.Module):
    """RMSNorm with a weight (ones) and no bias, as in Llama.

    Args:
        dim: normalised width.
        kern: kernels (``fused`` decides the implementation; the residual add is fused into the norm there).
    """

    def __init__(self, dim: int, kern: Kernels = EAGER) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.kern = kern

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Normalise the last dimension by its root mean square; with ``residual``, normalise ``residual + x``
        and return ``(sum, norm)`` (one pass with a fused provider)."""
        if residual is None:
            return kernels.rms_norm(x, self.weight, NORM_EPS, self.kern)
        return kernels.add_rms_norm(x, residual, self.weight, NORM_EPS, self.kern)


def make_norm(spec: ModelSpec, par: TPConfig = NO_TP, kern: Kernels = EAGER) -> nn.Module:
    """LayerNorm for GPT (norms with bias), RMSNorm for Llama; marked ``sequence_parallel`` under SP."""
    norm = LayerNorm(spec.hidden_size) if spec.bias else RMSNorm(spec.hidden_size, kern)
    if par.sp:
        mark_sequence_parallel(norm)
    return norm


class Rotary:
    """Rotary position embedding (RoPE, non-interleaved ``rotate_half`` form, as Megatron and Llama use).

    Holds no parameters or buffers: the cos/sin tables are computed in fp32 on first use per (seq_len, device,
    dtype) and cached, so casting the model to bf16 never degrades the frequencies.

    Args:
        head_dim: channels per head (all of them rotate).
        base: RoPE base (``rotary_base``).
    """

    def __init__(self, head_dim: int, base: float) -> None:
        self.head_dim = head_dim
        self.base = base
        self._cache: dict[tuple[int, str, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}

    def tables(self, seq_len: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` of shape ``(seq_len, head_dim)`` for positions ``0 .. seq_len-1``."""
        key = (seq_len, str(device), dtype)
        if key not in self._cache:
            exponent = torch.arange(0, self.head_dim, 2, device=device, dtype=torch.float32) / self.head_dim
            inv_freq = 1.0 / (self.base**exponent)
            angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
            angles = torch.cat([angles, angles], dim=-1)
            self._cache[key] = (angles.cos().to(dtype), angles.sin().to(dtype))
        return self._cache[key]


def attention_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kern: Kernels = EAGER) -> torch.Tensor:
    """Causal ``softmax(Q K^T / sqrt(d)) V`` through SDPA on the cell's backend (:func:`kernels.attention`).

    Args:
        q: ``(batch, heads, seq, head_dim)``.
        k: ``(batch, groups, seq, head_dim)``.
        v: ``(batch, groups, seq, head_dim)``.
        kern: kernels.
    """
    return kernels.attention(q, k, v, kern)


class SelfAttention(nn.Module):
    """Causal self-attention: fused QKV projection, optional RoPE, SDPA core, output projection.

    The fused QKV output is laid out per query group as ``[q_0 .. q_{n/g-1}, k, v]`` (Megatron's layout), so a
    column split over groups keeps every group whole: each tp rank holds ``groups / tp`` whole groups.

    Args:
        spec: the model.
        recompute_core: checkpoint only the attention core (``selective`` recomputation).
        par: tensor-parallel layout.
        kern: kernels (attention backend; split + rotary fused by the ``fused`` provider).
    """

    def __init__(self, spec: ModelSpec, recompute_core: bool, par: TPConfig = NO_TP, kern: Kernels = EAGER) -> None:
        super().__init__()
        self.kern = kern
        self.num_heads = spec.num_attention_heads // par.tp
        self.num_groups = spec.num_query_groups // par.tp
        self.head_dim = spec.head_dim
        self.recompute_core = recompute_core
        self.seq_first = par.sp
        qkv_out = (spec.num_attention_heads + 2 * spec.num_query_groups) * self.head_dim
        self.qkv = column_linear(spec.hidden_size, qkv_out, spec.attention_bias, spec.init_std, par)
        self.proj = row_linear(spec.num_attention_heads * self.head_dim, spec.hidden_size, spec.bias,
                               spec.init_std, par)
        self.rotary = None if spec.learned_positions else Rotary(self.head_dim, spec.rotary_base)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(batch, seq, hidden) -> (batch, seq, hidden)``; with SP ``(seq/tp, batch, hidden)`` both ways."""
        qkv = self.qkv(x)
        if self.seq_first:
            qkv = qkv.transpose(0, 1)
        b, s = qkv.shape[:2]
        per_group = self.num_heads // self.num_groups
        qkv = qkv.reshape(b, s, self.num_groups, per_group + 2, self.head_dim)
        cos, sin = self.rotary.tables(s, x.device, x.dtype) if self.rotary is not None else (None, None)
        q, k, v = kernels.qkv_rotary(qkv, per_group, cos, sin, self.kern)
        if self.recompute_core and torch.is_grad_enabled():
            out = checkpoint(attention_core, q, k, v, self.kern, use_reentrant=False)
        else:
            out = attention_core(q, k, v, self.kern)
        out = out.transpose(1, 2).reshape(b, s, self.num_heads * self.head_dim)
        if self.seq_first:
            out = out.transpose(0, 1).contiguous()
        return self.proj(out)


class MLP(nn.Module):
    """GeLU MLP with biases (GPT) or SwiGLU with a fused gate/up projection and no biases (Llama)."""

    def __init__(self, spec: ModelSpec, par: TPConfig = NO_TP, kern: Kernels = EAGER) -> None:
        super().__init__()
        self.kern = kern
        self.gated = spec.gated_mlp
        fc1_out = 2 * spec.ffn_hidden_size if self.gated else spec.ffn_hidden_size
        self.fc1 = column_linear(spec.hidden_size, fc1_out, spec.bias, spec.init_std, par, gated=self.gated)
        self.fc2 = row_linear(spec.ffn_hidden_size, spec.hidden_size, spec.bias, spec.init_std, par)

    def __deepcopy__(self, memo: dict[int, object]) -> MLP:
        """A copy sharing the process groups of Megatron-core's layers (DeepSpeed deep-copies MoE experts).

        ``torch.distributed`` process groups cannot be copied; every other attribute is copied as usual, and the
        parameters keep their attributes (Megatron's tensor-parallel marks: ``Parameter``'s own deep copy drops them).
        """
        import copy

        for module in self.modules():
            for value in vars(module).values():
                if isinstance(value, torch.distributed.ProcessGroup):
                    memo[id(value)] = value
        new = self.__class__.__new__(self.__class__)
        memo[id(self)] = new
        for key, value in vars(self).items():
            new.__dict__[key] = copy.deepcopy(value, memo)
        for old_p, new_p in zip(self.parameters(), new.parameters(), strict=True):
            new_p.__dict__.update(copy.deepcopy(old_p.__dict__, memo))
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., hidden) -> (..., hidden)``."""
        h = self.fc1(x)
        h = kernels.swiglu(h, self.kern) if self.gated else F.gelu(h)
        return self.fc2(h)


class MoEMLP(nn.Module):
    """Mixtral's sparse MLP through DeepSpeed MoE: top-k gate, ``num_experts`` SwiGLU experts, ``ep`` ranks.

    ``deepspeed.moe.layer.MoE`` with ``k = spec.moe_topk``, ``capacity_factor = spec.moe_capacity_factor`` (tokens
    over capacity are dropped), deterministic routing (no random token selection, no Gumbel sampling of the second
    expert: Mixtral routes by the top-2 logits) and top-2 weights renormalised as Mixtral does. DeepSpeed deep-copies
    one expert into all local experts, so the experts are re-drawn here, expert ``g`` (global index) from the same
    RNG stream whatever ``ep`` and ``tp``: the model is the same for every layout. The gate is drawn from
    ``normal(0, init_std)`` like every other linear.

    With tp > 1 the experts are tensor-parallel over the same tp group as the dense layers (Megatron's expert tensor
    parallelism with ``etp = tp``; DeepSpeed's ``enable_expert_tensor_parallelism``): ``fc1`` column-parallel,
    ``fc2`` row-parallel (its output all-reduced over tp), expert-parallel groups made of ranks with the same tp
    index. The gate runs replicated on every tp rank (same tokens, same routing); DeepSpeed splits the dispatched
    capacity slots over tp before the expert all-to-all and gathers them after, so every tp rank's expert shard sees
    every token routed to it. Under sequence parallelism the layer first gathers the sequence (backward: keep this
    rank's slice, the gradient being replicated over tp) and returns this rank's sequence slice (backward: gather).

    Forward returns ``(output, aux_loss)``; ``aux_loss`` is DeepSpeed's GShard load-balancing loss of this layer
    (not yet multiplied by ``spec.moe_aux_loss_coeff``).
    """

    def __init__(self, spec: ModelSpec, ep: int, par: TPConfig = NO_TP, kern: Kernels = EAGER) -> None:
        super().__init__()
        from deepspeed.moe.layer import MoE

        self.sp = par.sp
        expert_par = TPConfig(par.tp, sp=False)
        self.moe = MoE(spec.hidden_size, MLP(spec, expert_par, kern), num_experts=spec.num_experts, ep_size=ep,
                       k=spec.moe_topk, capacity_factor=spec.moe_capacity_factor,
                       eval_capacity_factor=spec.moe_capacity_factor, min_capacity=MOE_MIN_CAPACITY, drop_tokens=True,
                       use_rts=False, top2_2nd_expert_sampling=False,
                       enable_expert_tensor_parallelism=par.enabled)
        with torch.no_grad():
            gate = self.moe.deepspeed_moe.gate.wg.weight
            gate.copy_(_full_normal(*gate.shape, spec.init_std))
            local = self.moe.deepspeed_moe.experts.deepspeed_experts
            first = self._ep_rank(ep) * len(local)
            fc1_out = 2 * spec.ffn_hidden_size if spec.gated_mlp else spec.ffn_hidden_size
            for g in range(spec.num_experts):
                fc1 = _full_normal(fc1_out, spec.hidden_size, spec.init_std)
                fc2 = _full_normal(spec.hidden_size, spec.ffn_hidden_size, spec.init_std)
                if first <= g < first + len(local):
                    w1, w2 = _expert_weights(local[g - first])
                    w1.copy_(column_shard(fc1, spec.gated_mlp) if par.enabled else fc1)
                    w2.copy_(row_shard(fc2) if par.enabled else fc2)

    @staticmethod
    def _ep_rank(ep: int) -> int:
        if ep == 1:
            return 0
        import torch.distributed as dist
        from deepspeed.utils import groups

        name = f"ep_size_{ep}"
        if name not in groups._EXPERT_PARALLEL_GROUP:
            raise RuntimeError(f"expert-parallel group {name} must be created before building the model")
        return dist.get_rank(groups._get_expert_parallel_group(name))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(..., hidden) -> ((..., hidden), aux_loss)``; under SP ``(s/tp, b, h) -> (s/tp, b, h)``."""
        if self.sp:
            from megatron.core.tensor_parallel import (
                gather_from_sequence_parallel_region,
                scatter_to_sequence_parallel_region,
            )

            out, aux, _ = self.moe(gather_from_sequence_parallel_region(x, tensor_parallel_output_grad=False))
            return scatter_to_sequence_parallel_region(out), aux
        out, aux, _ = self.moe(x)
        return out, aux


def _expert_weights(mlp: nn.Module) -> list[torch.Tensor]:
    """An expert's weight matrices ``[fc1, fc2]`` (Mixtral's experts have no biases), plain or tensor-parallel."""
    return [getattr(lin, "inner", lin).weight for lin in (mlp.fc1, mlp.fc2)]


class AuxLossGrad(torch.autograd.Function):
    """Identity on the hidden state whose backward also feeds ``scale`` as the gradient of an auxiliary loss.

    The load-balancing loss of a MoE layer thereby enters the gradient where it is computed (Megatron-core's
    ``MoEAuxLossAutoScaler`` pattern) instead of being added to the final loss: nothing but the hidden state has to
    reach the loss, which is what lets MoE layers sit in any pipeline stage (DeepSpeed's ``PipelineModule`` passes
    one tensor between stages). ``scale`` is ``d(loss being backpropagated) / d(aux)``: the aux coefficient divided by
    the gradient-accumulation steps (DeepSpeed divides the backpropagated loss by them).
    """

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor, aux: torch.Tensor,
                scale: float) -> torch.Tensor:
        ctx.save_for_backward(aux)
        ctx.scale = scale
        return x

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple:
        (aux,) = ctx.saved_tensors
        return grad, torch.full_like(aux, ctx.scale), None


class TransformerBlock(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))`` (a MoE MLP for Mixtral).

    Args:
        spec: the model.
        recompute: ``full`` (checkpoint this whole block), ``selective`` (checkpoint the attention core) or ``none``.
        par: tensor-parallel layout.
        ep: expert-parallel degree (MoE models).
        aux_loss_scale: MoE models: gradient given to the layer's load-balancing loss in backward (see
            :class:`AuxLossGrad`; ``moe_aux_loss_coeff / grad_accum`` in training, 0 to leave it out). The loss the
            model returns is the language-model loss alone.
        kern: kernels (attention backend, fused norms/SwiGLU/rotary).

    For MoE models the layer's load-balancing loss of the last forward is left in :attr:`aux_loss`.
    """

    def __init__(self, spec: ModelSpec, recompute: str = "none", par: TPConfig = NO_TP, ep: int = 1,
                 aux_loss_scale: float = 0.0, kern: Kernels = EAGER) -> None:
        super().__init__()
        if recompute not in ("none", "selective", "full"):
            raise ValueError(f"recompute must be none, selective or full, got {recompute!r}")
        self.recompute_full = recompute == "full"
        self.is_moe = spec.is_moe
        self.aux_loss_scale = aux_loss_scale
        self.attn_norm = make_norm(spec, par, kern)
        self.attn = SelfAttention(spec, recompute_core=recompute == "selective", par=par, kern=kern)
        self.mlp_norm = make_norm(spec, par, kern)
        self.mlp = MoEMLP(spec, ep, par, kern) if spec.is_moe else MLP(spec, par, kern)
        self.aux_loss: torch.Tensor | None = None

    def _block(self, x: torch.Tensor) -> torch.Tensor:
        # The residual add before the MLP's norm is fused into it: (x + attn, norm(x + attn)).
        x, h = self.mlp_norm(self.attn(self.attn_norm(x)), residual=x)
        if not self.is_moe:
            return x + self.mlp(h)
        y, aux = self.mlp(h)
        self.aux_loss = aux
        out = x + y
        if self.aux_loss_scale and torch.is_grad_enabled():
            out = AuxLossGrad.apply(out, aux, self.aux_loss_scale)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(batch, seq, hidden) -> (batch, seq, hidden)`` (``(seq/tp, batch, hidden)`` under SP)."""
        if self.recompute_full and torch.is_grad_enabled():
            return checkpoint(self._block, x, use_reentrant=False)
        return self._block(x)


class VocabEmbedding(nn.Module):
    """Megatron-core ``VocabParallelEmbedding`` holding this rank's rows of the full ``(vocab, dim)`` table."""

    def __init__(self, num_embeddings: int, dim: int, init_std: float, par: TPConfig) -> None:
        super().__init__()
        from megatron.core.tensor_parallel import VocabParallelEmbedding

        full = _full_normal(num_embeddings, dim, init_std)
        self.inner = VocabParallelEmbedding(num_embeddings, dim, init_method=_noop_init,
                                            config=megatron_config(par.tp, full.device))
        mark_tensor_parallel(self.inner.weight, partition_dim=0)
        with torch.no_grad():
            self.inner.weight.copy_(column_shard(full))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows for ``ids``, all-reduced over tp (every rank gets the full embedding)."""
        return self.inner(ids)


class EmbeddingLayer(nn.Module):
    """Token embedding, plus learned absolute positions for GPT (Llama's positions come from RoPE).

    Tensor-parallel: vocab-parallel token table; with SP the sum is transposed to ``(seq, batch, hidden)`` and
    scattered along the sequence (Megatron's ``scatter_to_sequence_parallel_region``).
    """

    def __init__(self, spec: ModelSpec, par: TPConfig = NO_TP) -> None:
        super().__init__()
        self.sp = par.sp
        if par.enabled:
            self.tokens: nn.Module = VocabEmbedding(spec.vocab_size, spec.hidden_size, spec.init_std, par)
        else:
            self.tokens = Embedding(spec.vocab_size, spec.hidden_size, spec.init_std)
        self.positions = (
            Embedding(spec.seq_length, spec.hidden_size, spec.init_std) if spec.learned_positions else None
        )

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``(batch, seq)`` token ids -> ``(batch, seq, hidden)`` (``(seq/tp, batch, hidden)`` under SP)."""
        h = self.tokens(input_ids)
        if self.positions is not None:
            # Through the module's forward (not .weight) so that ZeRO-3 gathers the table first.
            h = h + self.positions(torch.arange(input_ids.shape[1], device=input_ids.device))
        if self.sp:
            from megatron.core.tensor_parallel import scatter_to_sequence_parallel_region

            h = scatter_to_sequence_parallel_region(h.transpose(0, 1).contiguous())
        return h


class OutputLayer(nn.Module):
    """Final norm and the untied output head, producing logits ``(batch, seq, vocab)``.

    Tensor-parallel: the head is column-parallel and the logits stay split over the vocabulary,
    ``(batch, seq, vocab / tp)``, for :func:`vocab_parallel_lm_loss`; with SP they stay sequence-first,
    ``(seq, batch, vocab / tp)`` (no transposed copy of the largest activation: the loss transposes the labels).
    """

    def __init__(self, spec: ModelSpec, par: TPConfig = NO_TP, kern: Kernels = EAGER) -> None:
        super().__init__()
        self.sp = par.sp
        self.norm = make_norm(spec, par, kern)
        self.head = column_linear(spec.hidden_size, spec.vocab_size, False, spec.init_std, par)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(batch, seq, hidden) -> (batch, seq, vocab)`` (``vocab / tp`` columns when tensor-parallel)."""
        return self.head(self.norm(x))


def lm_loss(logits: torch.Tensor, labels: torch.Tensor, kern: Kernels = EAGER) -> torch.Tensor:
    """Mean token cross-entropy, computed in fp32 whatever the logits' dtype (:func:`kernels.cross_entropy`).

    Args:
        logits: ``(batch, seq, vocab)``.
        labels: ``(batch, seq)`` next-token ids.
        kern: kernels (a fused provider never materialises fp32 logits).
    """
    return kernels.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), kern)


def vocab_parallel_lm_loss(logits: torch.Tensor, labels: torch.Tensor, seq_first: bool = False) -> torch.Tensor:
    """:func:`lm_loss` for logits split over the vocabulary across tp (Megatron's ``vocab_parallel_cross_entropy``).

    Args:
        logits: ``(batch, seq, vocab / tp)``, this rank's vocabulary shard (``(seq, batch, vocab / tp)`` when
            ``seq_first``).
        labels: ``(batch, seq)`` next-token ids (global ids).
        seq_first: the logits are sequence-first (sequence parallelism).
    """
    from megatron.core.tensor_parallel import vocab_parallel_cross_entropy

    if seq_first:
        labels = labels.t().contiguous()
    return vocab_parallel_cross_entropy(logits.float(), labels).mean()

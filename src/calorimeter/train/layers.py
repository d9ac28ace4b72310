"""Building blocks of the dense GPT and Llama transformers (no tensor parallelism yet).

Every parameter is created *and initialised* inside the ``__init__`` of the leaf module that owns it. That keeps the
modules correct under ``deepspeed.zero.Init`` (which partitions a module's parameters as soon as its ``__init__``
returns) and free on the ``meta`` device. Linear layers keep Megatron's weight layout ``(out_features, in_features)``
and Megatron's fused QKV / fused gate-up layouts, so that :class:`Linear` can later be swapped for Megatron-core's
``ColumnParallelLinear`` (``qkv``, ``fc1``) and ``RowParallelLinear`` (``proj``, ``fc2``) without touching the blocks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from calorimeter.plan.models import ModelSpec

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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise the last dimension."""
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, NORM_EPS)


class RMSNorm(nn.Module):
    """RMSNorm with a weight (ones) and no bias, as in Llama."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise the last dimension by its root mean square."""
        return F.rms_norm(x, self.weight.shape, self.weight, NORM_EPS)


def make_norm(spec: ModelSpec) -> nn.Module:
    """LayerNorm for GPT (norms with bias), RMSNorm for Llama."""
    return LayerNorm(spec.hidden_size) if spec.bias else RMSNorm(spec.hidden_size)


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

    @staticmethod
    def apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotate ``x`` of shape ``(batch, heads, seq, head_dim)``."""
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin


def attention_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal ``softmax(Q K^T / sqrt(d)) V`` through SDPA (flash attention on GPU), GQA without copying K/V.

    Args:
        q: ``(batch, heads, seq, head_dim)``.
        k: ``(batch, groups, seq, head_dim)``.
        v: ``(batch, groups, seq, head_dim)``.
    """
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1])


class SelfAttention(nn.Module):
    """Causal self-attention: fused QKV projection, optional RoPE, SDPA core, output projection.

    The fused QKV output is laid out per query group as ``[q_0 .. q_{n/g-1}, k, v]`` (Megatron's layout), so a
    column split over groups keeps every group whole.

    Args:
        spec: the model.
        recompute_core: checkpoint only the attention core (``selective`` recomputation).
    """

    def __init__(self, spec: ModelSpec, recompute_core: bool) -> None:
        super().__init__()
        self.num_heads = spec.num_attention_heads
        self.num_groups = spec.num_query_groups
        self.head_dim = spec.head_dim
        self.recompute_core = recompute_core
        qkv_out = (self.num_heads + 2 * self.num_groups) * self.head_dim
        self.qkv = Linear(spec.hidden_size, qkv_out, spec.bias, spec.init_std)
        self.proj = Linear(self.num_heads * self.head_dim, spec.hidden_size, spec.bias, spec.init_std)
        self.rotary = None if spec.learned_positions else Rotary(self.head_dim, spec.rotary_base)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(batch, seq, hidden) -> (batch, seq, hidden)``."""
        b, s, _ = x.shape
        per_group = self.num_heads // self.num_groups
        qkv = self.qkv(x).view(b, s, self.num_groups, per_group + 2, self.head_dim)
        q = qkv[:, :, :, :per_group].reshape(b, s, self.num_heads, self.head_dim).transpose(1, 2)
        k = qkv[:, :, :, per_group].transpose(1, 2)
        v = qkv[:, :, :, per_group + 1].transpose(1, 2)
        if self.rotary is not None:
            cos, sin = self.rotary.tables(s, x.device, x.dtype)
            q, k = Rotary.apply(q, cos, sin), Rotary.apply(k, cos, sin)
        if self.recompute_core and torch.is_grad_enabled():
            out = checkpoint(attention_core, q, k, v, use_reentrant=False)
        else:
            out = attention_core(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, s, self.num_heads * self.head_dim))


class MLP(nn.Module):
    """GeLU MLP with biases (GPT) or SwiGLU with a fused gate/up projection and no biases (Llama)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.gated = spec.gated_mlp
        fc1_out = 2 * spec.ffn_hidden_size if self.gated else spec.ffn_hidden_size
        self.fc1 = Linear(spec.hidden_size, fc1_out, spec.bias, spec.init_std)
        self.fc2 = Linear(spec.ffn_hidden_size, spec.hidden_size, spec.bias, spec.init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., hidden) -> (..., hidden)``."""
        h = self.fc1(x)
        if self.gated:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h)
        return self.fc2(h)


class TransformerBlock(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``.

    Args:
        spec: the model.
        recompute: ``full`` (checkpoint this whole block), ``selective`` (checkpoint the attention core) or ``none``.
    """

    def __init__(self, spec: ModelSpec, recompute: str = "none") -> None:
        super().__init__()
        if recompute not in ("none", "selective", "full"):
            raise ValueError(f"recompute must be none, selective or full, got {recompute!r}")
        self.recompute_full = recompute == "full"
        self.attn_norm = make_norm(spec)
        self.attn = SelfAttention(spec, recompute_core=recompute == "selective")
        self.mlp_norm = make_norm(spec)
        self.mlp = MLP(spec)

    def _block(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(batch, seq, hidden) -> (batch, seq, hidden)``."""
        if self.recompute_full and torch.is_grad_enabled():
            return checkpoint(self._block, x, use_reentrant=False)
        return self._block(x)


class EmbeddingLayer(nn.Module):
    """Token embedding, plus learned absolute positions for GPT (Llama's positions come from RoPE)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.tokens = Embedding(spec.vocab_size, spec.hidden_size, spec.init_std)
        self.positions = (
            Embedding(spec.seq_length, spec.hidden_size, spec.init_std) if spec.learned_positions else None
        )

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``(batch, seq)`` token ids -> ``(batch, seq, hidden)``."""
        h = self.tokens(input_ids)
        if self.positions is not None:
            # Through the module's forward (not .weight) so that ZeRO-3 gathers the table first.
            h = h + self.positions(torch.arange(input_ids.shape[1], device=input_ids.device))
        return h


class OutputLayer(nn.Module):
    """Final norm and the untied output head, producing logits ``(batch, seq, vocab)``."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.norm = make_norm(spec)
        self.head = Linear(spec.hidden_size, spec.vocab_size, False, spec.init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(batch, seq, hidden) -> (batch, seq, vocab)``."""
        return self.head(self.norm(x))


def lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean token cross-entropy, computed in fp32 whatever the logits' dtype.

    Args:
        logits: ``(batch, seq, vocab)``.
        labels: ``(batch, seq)`` next-token ids.
    """
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.reshape(-1))


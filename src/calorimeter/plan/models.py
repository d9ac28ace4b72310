"""Model catalogue: the study's four models, node-sized variants and tiny CPU models.

Dimensions of the paper models follow the artifact's YAMLs (shared notes, paper-artifact.md section 3). A sweep file
extends the catalogue with its own models (``models:``, ``model: {hf_config: ...}``; :mod:`calorimeter.plan.
definitions`), registered here with :func:`register_model` for the process that plans or runs the sweep.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from calorimeter.plan.config_errors import short, suggest
from calorimeter.plan.json_types import JsonObject

Family = Literal["gpt", "llama", "mixtral"]


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of one transformer language model.

    Attributes:
        name: catalogue key, e.g. ``llama3-70b``.
        family: ``gpt`` (learned positions, GeLU, LayerNorm, MHA, biases), ``llama`` (RoPE, SwiGLU, RMSNorm,
            GQA, no biases) or ``mixtral`` (llama blocks with a mixture-of-experts MLP).
        num_layers: transformer blocks.
        hidden_size: model width.
        ffn_hidden_size: MLP inner width (per expert for MoE).
        num_attention_heads: query heads.
        num_query_groups: key/value heads (GQA groups); equal to ``num_attention_heads`` for MHA.
        vocab_size: tokenizer vocabulary (before padding).
        seq_length: the sequence length the study uses for this model.
        num_experts: experts per MoE layer (0 for dense models).
        moe_topk: experts each token is routed to.
        moe_capacity_factor: expert capacity as a multiple of the even share of tokens.
        moe_aux_loss_coeff: weight of the load-balancing auxiliary loss.
        rotary_base: RoPE base (llama/mixtral).
        init_std: standard deviation of the normal weight init.
        kv_channels: channels per attention head when they are not ``hidden_size / num_attention_heads`` (Qwen3,
            Gemma: an explicit ``head_dim``); None derives them.
        tie_embeddings: the output head shares the input embedding's weights (Llama-3.2 1B/3B, Qwen2.5 small
            models). It changes the parameter count, not the FLOPs (the head's matmul is still done).
        qkv_bias: biases on the query, key and value projections only (Qwen2), on top of the family's biases.
        rope_scaling: RoPE scaling of the model (e.g. Llama-3.1's ``rope_type: llama3``), as ``(key, value)``
            pairs; recorded, it changes neither FLOPs nor memory.
    """

    name: str
    family: Family
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    vocab_size: int
    seq_length: int
    num_experts: int = 0
    moe_topk: int = 2
    moe_capacity_factor: float = 1.0
    moe_aux_loss_coeff: float = 0.01
    rotary_base: float = 500000.0
    init_std: float = 0.02
    description: str = field(default="", compare=False)
    kv_channels: int | None = None
    tie_embeddings: bool = False
    qkv_bias: bool = False
    rope_scaling: tuple[tuple[str, Any], ...] | None = None

    @property
    def head_dim(self) -> int:
        """Channels per attention head."""
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def q_channels(self) -> int:
        """Width of all query heads together (``hidden_size`` unless ``kv_channels`` is explicit)."""
        return self.num_attention_heads * self.head_dim

    @property
    def attention_bias(self) -> bool:
        """Whether the query/key/value projection has a bias (GPT-3, or ``qkv_bias``)."""
        return self.bias or self.qkv_bias

    @property
    def is_moe(self) -> bool:
        """Whether the MLP is a mixture of experts."""
        return self.num_experts > 0

    @property
    def bias(self) -> bool:
        """GPT-3 uses biases in linears and norms; Llama/Mixtral do not."""
        return self.family == "gpt"

    @property
    def learned_positions(self) -> bool:
        """GPT-3 learns absolute position embeddings; Llama/Mixtral use RoPE."""
        return self.family == "gpt"

    @property
    def gated_mlp(self) -> bool:
        """SwiGLU (three matrices) rather than GeLU (two)."""
        return self.family != "gpt"

    def to_dict(self) -> JsonObject:
        """Plain dict for records (``head_dim`` resolved, ``rope_scaling`` a mapping)."""
        d = asdict(self)
        d.pop("description")
        d["head_dim"] = self.head_dim
        d["rope_scaling"] = dict(self.rope_scaling) if self.rope_scaling else None
        return d

    @classmethod
    def from_dict(cls, d: JsonObject) -> ModelSpec:
        """Inverse of :meth:`to_dict` (``head_dim`` becomes ``kv_channels`` where it is not the derived one)."""
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if isinstance(kw.get("rope_scaling"), dict):
            kw["rope_scaling"] = tuple(sorted(kw["rope_scaling"].items()))
        head_dim = d.get("head_dim")
        if kw.get("kv_channels") is None and head_dim and head_dim * kw["num_attention_heads"] != kw["hidden_size"]:
            kw["kv_channels"] = int(head_dim)
        return cls(**kw)


def _gpt(name: str, layers: int, hidden: int, heads: int, seq: int = 2048, desc: str = "") -> ModelSpec:
    return ModelSpec(name, "gpt", layers, hidden, 4 * hidden, heads, heads, 50257, seq, init_std=0.01,
                     description=desc)


def _llama(name: str, layers: int, hidden: int, ffn: int, heads: int, groups: int, vocab: int = 128256,
           seq: int = 8192, desc: str = "") -> ModelSpec:
    return ModelSpec(name, "llama", layers, hidden, ffn, heads, groups, vocab, seq, rotary_base=500000.0,
                     init_std=0.008944, description=desc)


def _mixtral(name: str, layers: int, hidden: int, ffn: int, heads: int, vocab: int, seq: int = 4096,
             experts: int = 8, desc: str = "") -> ModelSpec:
    return ModelSpec(name, "mixtral", layers, hidden, ffn, heads, 8 if heads >= 8 else heads, vocab, seq,
                     num_experts=experts, moe_topk=2, rotary_base=1e6, description=desc)


CATALOGUE: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        # The study's models (paper-artifact.md section 3).
        _gpt("gpt3-175b", 96, 12288, 96, desc="GPT-3 175B, as in the study"),
        _llama("llama3-70b", 80, 8192, 28672, 64, 8, desc="Llama-3 70B, as in the study"),
        _mixtral("mixtral-8x7b", 32, 4096, 14336, 32, 32000, desc="Mixtral 8x7B, as in the study"),
        _mixtral("mixtral-8x22b", 56, 6144, 16384, 48, 32768, desc="Mixtral 8x22B, as in the study"),
        # Variants that fit one 8-GPU node.
        _gpt("gpt3-13b", 40, 5120, 40, desc="GPT-3 13B"),
        _llama("llama3-8b", 32, 4096, 14336, 32, 8, desc="Llama-3 8B"),
        _mixtral("mixtral-8x7b-4l", 4, 4096, 14336, 32, 32000, desc="Mixtral 8x7B blocks, 4 layers"),
        _llama("llama3-8b-8l", 8, 4096, 14336, 32, 8,
               desc="Llama-3 8B blocks, 8 of its 32 layers (findings sweeps: many short cells on one node)"),
        # Tiny models for CPU tests and the default CPU sweep.
        ModelSpec("tiny-gpt", "gpt", 4, 128, 512, 4, 4, 512, 128, description="tiny GPT for CPU"),
        ModelSpec("tiny-gpt-v509", "gpt", 2, 64, 256, 4, 4, 509, 64,
                  description="tiny GPT whose vocabulary tp does not divide (Megatron-style padding)"),
        ModelSpec("tiny-llama", "llama", 4, 128, 352, 4, 2, 512, 128, rotary_base=10000.0,
                  description="tiny Llama for CPU"),
        ModelSpec("tiny-mixtral", "mixtral", 4, 128, 256, 4, 2, 512, 128, num_experts=4, moe_topk=2,
                  moe_capacity_factor=2.0, rotary_base=10000.0, description="tiny Mixtral for CPU"),
    ]
}


#: names of the built-in models (a sweep may not redefine them)
BUILTIN_MODELS = frozenset(CATALOGUE)


def get_model(name: str) -> ModelSpec:
    """Look a model up by name (the catalogue and the models registered by the sweep), with a message listing the
    known ones."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise KeyError(f"unknown model {short(name)}{suggest(name, CATALOGUE)}: neither in the catalogue nor defined "
                       "in the sweep file (define it under `models:` or inline as `model: {hf_config: "
                       "path/to/config.json}` or `model: {name: ..., family: ..., num_layers: ...}`, see "
                       f"docs/models.md); known models: {', '.join(sorted(CATALOGUE))}") from None


def register_model(spec: ModelSpec) -> ModelSpec:
    """Add a model defined by a sweep to the catalogue of this process (the same definition again is a no-op).

    Raises:
        ValueError: the name is a built-in model's (a sweep cannot change what ``llama3-8b`` means).
    """
    if spec.name in BUILTIN_MODELS and CATALOGUE[spec.name] != spec:
        raise ValueError(f"model {spec.name!r} is a built-in model; give the definition another name")
    CATALOGUE[spec.name] = spec
    return spec


MOE_MIN_CAPACITY = 4
"""Smallest expert capacity (tokens) of a MoE layer, whatever the batch (DeepSpeed's ``min_capacity``)."""


def expert_capacity(m: ModelSpec, tokens: int) -> int:
    """Capacity (token slots per expert) of a MoE layer routing ``tokens`` tokens, as DeepSpeed computes it.

    ``ceil(tokens / num_experts * capacity_factor * top_k)``, at least :data:`MOE_MIN_CAPACITY`.
    """
    import math

    return max(math.ceil(tokens / m.num_experts * m.moe_capacity_factor * m.moe_topk), MOE_MIN_CAPACITY)


def padded_vocab_size(m: ModelSpec, tp: int) -> int:
    """Vocabulary of the embedding and head under tensor parallelism.

    A vocabulary that tp divides is kept as is. Otherwise it is padded as Megatron pads it, to a multiple of
    128 x tp (GPT-3's 50257 becomes 50432 at tp=2 and 51200 at tp=8); the extra rows are never a target.
    """
    if m.vocab_size % tp == 0:
        return m.vocab_size
    unit = 128 * tp
    return -(-m.vocab_size // unit) * unit


def parameter_count(m: ModelSpec, padded_vocab: int | None = None) -> int:
    """Analytical number of parameters (the output head counted unless ``tie_embeddings``).

    Args:
        m: the model.
        padded_vocab: vocabulary after padding; defaults to ``m.vocab_size``.
    """
    h, f, v, q = m.hidden_size, m.ffn_hidden_size, padded_vocab or m.vocab_size, m.q_channels
    kv = m.num_query_groups * m.head_dim
    attn = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if m.attention_bias else 0) + (h if m.bias else 0)
    expert = 3 * h * f if m.gated_mlp else 2 * h * f + ((f + h) if m.bias else 0)
    mlp = m.num_experts * expert + h * m.num_experts if m.is_moe else expert
    norm = 2 * h if m.bias else h  # LayerNorm has a bias, RMSNorm does not
    layer = attn + mlp + 2 * norm
    embed = v * h + (m.seq_length * h if m.learned_positions else 0)
    return m.num_layers * layer + embed + norm + (0 if m.tie_embeddings else v * h)


def trained_parameter_count(m: ModelSpec, padded_vocab: int | None = None) -> int:
    """Parameters the engine trains: :func:`parameter_count` with the output head as its own matrix even where the
    model ties it to the embedding (the engine builds an untied head; memory and projection count what it trains)."""
    import dataclasses

    return parameter_count(dataclasses.replace(m, tie_embeddings=False), padded_vocab)


def stage_block_counts(num_layers: int, pp: int, pp_split: Sequence[int] | None = None) -> list[int]:
    """Transformer blocks per pipeline stage.

    Args:
        num_layers: blocks in the model.
        pp: pipeline stages.
        pp_split: explicit blocks per stage; None splits evenly, the first ``num_layers % pp`` stages taking one
            extra block.

    Raises:
        ValueError: if the split has the wrong length, a stage is empty, or it does not sum to ``num_layers``.
    """
    if pp < 1 or pp > num_layers:
        raise ValueError(f"pp={pp} must be between 1 and num_layers={num_layers}")
    if pp_split is None:
        base, extra = divmod(num_layers, pp)
        return [base + (1 if i < extra else 0) for i in range(pp)]
    counts = [int(n) for n in pp_split]
    if len(counts) != pp or min(counts) < 1 or sum(counts) != num_layers:
        raise ValueError(f"pp_split={list(counts)} must be {pp} positive block counts summing to {num_layers}")
    return counts

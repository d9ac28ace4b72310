"""Model catalogue: the study's four models, node-sized variants and tiny CPU models.

Dimensions of the paper models follow the artifact's YAMLs (shared notes, paper-artifact.md section 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from calorimeter.plan.config_errors import short, suggest

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

    @property
    def head_dim(self) -> int:
        """Channels per attention head."""
        return self.hidden_size // self.num_attention_heads

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

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for records."""
        d = asdict(self)
        d.pop("description")
        return d


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


def get_model(name: str) -> ModelSpec:
    """Look a model up by name, with a message listing the known ones."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise KeyError(f"unknown model {short(name)}{suggest(name, CATALOGUE)}; known models: "
                       f"{', '.join(sorted(CATALOGUE))}") from None


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
    """Analytical number of parameters (untied input and output embeddings).

    Args:
        m: the model.
        padded_vocab: vocabulary after padding; defaults to ``m.vocab_size``.
    """
    h, f, v = m.hidden_size, m.ffn_hidden_size, padded_vocab or m.vocab_size
    kv = m.num_query_groups * m.head_dim
    attn = h * h + 2 * h * kv + h * h + ((h + 2 * kv + h) if m.bias else 0)
    expert = 3 * h * f if m.gated_mlp else 2 * h * f + ((f + h) if m.bias else 0)
    mlp = m.num_experts * expert + h * m.num_experts if m.is_moe else expert
    norm = 2 * h if m.bias else h  # LayerNorm has a bias, RMSNorm does not
    layer = attn + mlp + 2 * norm
    embed = v * h + (m.seq_length * h if m.learned_positions else 0)
    return m.num_layers * layer + embed + norm + v * h


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

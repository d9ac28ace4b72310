"""FLOPs per training iteration (Megatron formula) and the throughput metrics derived from it.

Per sequence of length s, the forward pass of one transformer layer costs (multiply-add = 2 FLOPs):

* attention projections: ``2 s h (2 q + 2 g d)`` (Q and output: h x q each, q = heads x d, which is h unless the
  model sets its head_dim; K and V: h x g*d, GQA),
* attention core: ``4 s^2 q`` (QK^T and scores x V) in the **full** convention (Megatron, torchtitan, NeMo in
  NVIDIA's dgxc-benchmarking, MaxText: the causal mask is not discounted), ``2 s^2 q`` in the **causal** convention
  (Megatron-Bridge, NeMo-AutoModel: half the score matrix is masked),
* MLP: ``2 s h f k m`` with ``m`` = 3 matrices for SwiGLU or 2 for GeLU, ``k`` = experts per token (1 dense),

plus the output logits ``2 s h V`` once. Training costs 3x the forward (forward + backward of activations and
weights). Recomputation adds one more forward of what it recomputes: every recomputed layer for ``full``, the
attention core for ``selective``. This is Narayanan et al. (SC'21), eq. 3, generalised to GQA, SwiGLU and MoE.
LoRA fine-tuning (``lora_rank`` r) of a frozen base costs 2x the forward of its linear layers and logits (no weight
gradients), 3x of the attention core (its backward has no weights anyway), plus 3x the forward of the adapters,
``2 s r (in + out)`` for each adapted projection (qkv, output, MLP up/gate and down).

``model_flops`` excludes recomputation (MFU, as in PaLM); ``hardware_flops`` includes it (Megatron's
"TFLOP/s/GPU" with the recomputation term, and HFU). The metrics name the convention: ``mfu_full`` (Megatron's, the
project's historical ``mfu``) and ``mfu_causal``; Llama-3 8B at s=8192 counts 57.9 GFLOP/token full and 51.5 causal.
"""

from __future__ import annotations

from dataclasses import dataclass

from calorimeter.plan.models import ModelSpec


@dataclass(frozen=True)
class IterationFlops:
    """FLOPs of one optimizer step over the whole global batch.

    Attributes:
        model_flops: without recomputation.
        hardware_flops: including the recomputation forward passes.
    """

    model_flops: float
    hardware_flops: float


def layer_forward_flops(m: ModelSpec, seq_len: int, causal: bool = False) -> tuple[float, float]:
    """(dense part, attention-core part) of one layer's forward FLOPs for one sequence (``causal``: the attention
    core counts only the unmasked half of the scores)."""
    s, h, f, q = seq_len, m.hidden_size, m.ffn_hidden_size, m.q_channels
    kv = m.num_query_groups * m.head_dim
    proj = 2 * s * h * (2 * q + 2 * kv)
    core = (2 if causal else 4) * s * s * q
    mats = 3 if m.gated_mlp else 2
    experts_per_token = m.moe_topk if m.is_moe else 1
    mlp = 2 * s * h * f * mats * experts_per_token
    router = 2 * s * h * m.num_experts if m.is_moe else 0
    return float(proj + mlp + router), float(core)


def lora_adapter_parameters(m: ModelSpec, rank: int) -> float:
    """Parameters of the LoRA adapters of one layer: ``r (in + out)`` for each adapted projection (qkv, output,
    MLP up/gate and down; :data:`calorimeter.train.lora.LORA_TARGETS`). Their forward costs 2 FLOPs per parameter
    and token."""
    h, kv = m.hidden_size, m.num_query_groups * m.head_dim
    fc1_out = m.ffn_hidden_size * (2 if m.gated_mlp else 1)
    return float(rank * ((h + h + 2 * kv) + (h + h) + (h + fc1_out) + (m.ffn_hidden_size + h)))


def iteration_flops(m: ModelSpec, seq_len: int, global_batch: int, recompute: str = "none",
                    recompute_layers: int | None = None, pp: int = 1, padded_vocab: int | None = None,
                    causal: bool = False, lora_rank: int | None = None) -> IterationFlops:
    """FLOPs of one training iteration.

    Args:
        m: model.
        seq_len: tokens per sequence.
        global_batch: sequences per iteration.
        recompute: ``none``, ``selective`` or ``full``.
        recompute_layers: with ``full``, layers per pipeline stage recomputed (None: all).
        pp: pipeline stages (to turn ``recompute_layers`` per stage into a model total).
        padded_vocab: vocabulary after padding (default the model's).
        causal: count the attention core of the causal convention (half of the full one).
        lora_rank: LoRA fine-tuning with adapters of this rank on a frozen base (dense models; None: training).
    """
    dense, core = layer_forward_flops(m, seq_len, causal)
    layer_fwd = dense + core
    logits_fwd = 2.0 * seq_len * m.hidden_size * (padded_vocab or m.vocab_size)
    if lora_rank:
        adapters = 2.0 * seq_len * lora_adapter_parameters(m, lora_rank)
        model = m.num_layers * (2.0 * dense + 3.0 * core + 3.0 * adapters) + 2.0 * logits_fwd
    else:
        model = 3.0 * (m.num_layers * layer_fwd + logits_fwd)
    if recompute == "full":
        n = m.num_layers if recompute_layers is None else min(m.num_layers, recompute_layers * pp)
        extra = n * layer_fwd
    elif recompute == "selective":
        extra = m.num_layers * core
    else:
        extra = 0.0
    return IterationFlops(model * global_batch, (model + extra) * global_batch)


def mfu(model_flops: float, iteration_time_s: float, world_size: int, peak_tflops: float | None) -> float:
    """Model FLOPs utilisation against the dense peak; NaN when the device has no peak (CPU)."""
    if not peak_tflops or iteration_time_s <= 0:
        return float("nan")
    return model_flops / iteration_time_s / world_size / (peak_tflops * 1e12)

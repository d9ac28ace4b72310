"""Analytical per-device memory estimate of a cell, checked before anything runs.

The estimate is for the most loaded pipeline stage (the first one, which also holds the embedding and keeps the
most micro-batches in flight under 1F1B):

* weights, gradients and optimizer states per parameter on the device: bf16 mixed precision keeps bf16 weights
  (2 B) and gradients (2 B) and fp32 master weights plus Adam moments (12 B); fp32 keeps 4 + 4 + 8 B. ZeRO-1
  shards the optimizer states over dp, ZeRO-2 also the gradients, ZeRO-3 also the weights. Expert weights are
  split over ep and their optimizer states over dp / ep.
* activations per layer and micro-batch follow Korthikanti et al. (MLSys'23), ``s b h (34 + 5 a s / h)`` bytes
  for a GeLU MLP of 4h, with the MLP term scaled to the actual FFN width, the attention-score term dropped where
  attention is fused (flash attention on GPUs), divided by tp for the tensor-parallel parts and entirely with
  sequence parallelism. Selective recomputation drops the attention core; full recomputation keeps only each
  layer's input (``2 s b h``) plus one layer's working set.
* the fp32 logits of the last stage, ``4 s b V / tp``, and a fixed reserve for the CUDA context, NCCL buffers
  and allocator fragmentation.
"""

from __future__ import annotations

from dataclasses import dataclass

from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import HardwareProfile
from calorimeter.plan.models import ModelSpec, trained_parameter_count

GB = 1e9
RESERVE_GB = {"cuda": 3.0, "rocm": 3.0, "cpu": 0.5}


@dataclass(frozen=True)
class MemoryEstimate:
    """Estimated bytes per device of the most loaded rank."""

    weights_b: float
    gradients_b: float
    optimizer_b: float
    activations_b: float
    logits_b: float
    reserve_b: float

    @property
    def total_b(self) -> float:
        """Sum of all terms."""
        return (self.weights_b + self.gradients_b + self.optimizer_b + self.activations_b + self.logits_b
                + self.reserve_b)

    def to_dict(self) -> dict[str, float]:
        """GB per term, for plan tables."""
        return {
            "mem_weights_gb": self.weights_b / GB,
            "mem_gradients_gb": self.gradients_b / GB,
            "mem_optimizer_gb": self.optimizer_b / GB,
            "mem_activations_gb": self.activations_b / GB,
            "mem_logits_gb": self.logits_b / GB,
            "mem_total_gb": self.total_b / GB,
        }


def _layer_activation_bytes(m: ModelSpec, cell: Cell, fused_attention: bool) -> float:
    s, b, h, a, t = cell.seq_len, cell.micro_batch, m.hidden_size, m.num_attention_heads, cell.tp
    # Korthikanti: attention 11 sbh + 5 a s^2 b, MLP 19 sbh (for f = 4h), two norms 4 sbh.
    mlp_units = (3 * m.ffn_hidden_size / h * 2 + 2) if m.gated_mlp else (2 * 4 * m.ffn_hidden_size / h + 3)
    if m.is_moe:
        mlp_units *= m.moe_topk * max(m.moe_capacity_factor, 1.0)
    tp_part = 11 - 4 + mlp_units - 2  # terms that tensor parallelism splits (all but norm inputs and MLP input)
    replicated = 4 + 2 + 4 if not cell.sequence_parallel else 0
    per = s * b * h * (tp_part / t + replicated + (4 + 2 + 4) / t * cell.sequence_parallel)
    if not fused_attention and cell.recompute != "selective":
        per += 5 * a * s * s * b / t
    return per


def estimate_memory(m: ModelSpec, cell: Cell, hw: HardwareProfile) -> MemoryEstimate:
    """Estimate the peak memory of the most loaded device of a cell."""
    dp = max(cell.dp, 1)
    ep = max(cell.ep, 1)
    bf16 = cell.precision == "bf16"
    w_b, g_b, o_b = (2, 2, 12) if bf16 else (4, 4, 8)

    total = trained_parameter_count(m)
    expert = m.num_layers * m.num_experts * 3 * m.hidden_size * m.ffn_hidden_size if m.is_moe else 0
    dense = total - expert
    embed = m.vocab_size * m.hidden_size
    # Most loaded stage: its share of the layers plus the embedding (the head sits on the last stage).
    per_layer_dense = (dense - 2 * embed) / m.num_layers
    stage_layers = max(cell.pp_split) if cell.pp_split else -(-m.num_layers // cell.pp)
    stage_dense = stage_layers * per_layer_dense + embed * (2 if cell.pp == 1 else 1)
    stage_expert = expert * stage_layers / m.num_layers
    params_dense = stage_dense / cell.tp
    params_expert = stage_expert / cell.tp / ep

    shard = cell.zero_stage
    weights = (params_dense / (dp if shard >= 3 else 1) + params_expert / (dp // ep if shard >= 3 else 1)) * w_b
    grads = (params_dense / (dp if shard >= 2 else 1) + params_expert / (dp // ep if shard >= 2 else 1)) * g_b
    optim = (params_dense / (dp if shard >= 1 else 1) + params_expert / (max(dp // ep, 1) if shard >= 1 else 1)) * o_b
    if cell.adapter_rank is not None:  # a frozen base: no weight gradients, no optimizer state (the adapters' ~1%)
        grads = optim = 0.0

    fused = hw.accelerator != "cpu"
    per_layer = _layer_activation_bytes(m, cell, fused)
    in_flight = min(cell.pp, max(cell.grad_accum, 1))
    if cell.recompute == "full":
        n_rc = stage_layers if cell.recompute_layers is None else min(stage_layers, cell.recompute_layers)
        act_one = n_rc * 2 * cell.seq_len * cell.micro_batch * m.hidden_size + (stage_layers - n_rc) * per_layer
        activations = act_one * in_flight + per_layer
    else:
        activations = stage_layers * per_layer * in_flight
    logits = 4.0 * cell.seq_len * cell.micro_batch * m.vocab_size / cell.tp * (2 if not bf16 else 1.5)
    reserve = RESERVE_GB.get(hw.accelerator, 3.0) * GB
    return MemoryEstimate(weights, grads, optim, activations, logits, reserve)


def max_stage_layers(m: ModelSpec, cell: Cell, hw: HardwareProfile) -> int:
    """Most blocks one pipeline stage may hold with the memory estimate within the device (at least 1).

    The estimate of a split depends on its largest stage (:func:`estimate_memory`), so this is the largest ``n``
    for which a split whose largest stage holds ``n`` blocks fits; placement policies choose splits within it.
    """
    import dataclasses

    pp = max(cell.pp, 1)
    best = 1
    for n in range(1, m.num_layers - pp + 2):
        rest = m.num_layers - n
        split = (n, *([rest // (pp - 1) + (1 if i < rest % (pp - 1) else 0) for i in range(pp - 1)])) if pp > 1 \
            else (n,)
        if pp > 1 and max(split) > n:
            continue
        est = estimate_memory(m, dataclasses.replace(cell, pp_split=split), hw)
        if est.total_b > hw.memory_gb * GB:
            break
        best = n
    return best

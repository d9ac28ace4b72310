"""What one rank of each pipeline stage of a cell does in one iteration: work counts and messages, no times.

Everything here is analytical, from the model's dimensions and the cell's layout, and follows the engine as it is
built (train/engine.py, train/layers.py): Megatron-style tensor parallelism with sequence parallelism (2 all-gathers
and 2 reduce-scatters of the full ``micro_batch x seq x hidden`` activation per layer in the forward pass, the same
in the backward pass), DeepSpeed ZeRO (stage 3 gathers the parameters of every layer for the forward and the
backward pass of every micro-batch and reduce-scatters their gradients; stages 0-2 all-reduce the gradients once
per iteration, stages 1-2 then all-gather the updated parameters), DeepSpeed's pipeline (1F1B; whole activations
sent between stages), DeepSpeed MoE (two all-to-alls of the capacity slots per layer and pass), flash attention
(the causal half of the attention core is executed).

Units are in the names: ``*_flops`` floating-point operations, ``*_elems`` tensor elements, ``bytes`` bytes. Counts
are per iteration on one rank of the stage (all its micro-batches).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from calorimeter.plan.cell import Cell
from calorimeter.plan.flops import layer_forward_flops, lora_adapter_parameters
from calorimeter.plan.layout import group_nodes
from calorimeter.plan.models import (
    ModelSpec,
    expert_capacity,
    get_model,
    padded_vocab_size,
    stage_block_counts,
    trained_parameter_count,
)

#: the collectives a cell issues, in report order: one vocabulary for the workload's messages, the kernel categories
#: of a trace (:mod:`calorimeter.telemetry.kernels`), the points a ``collectives`` cell times and the projection
COLLECTIVES: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "send_recv", "all_to_all")

#: compute features, in the order of the calibration's coefficient vectors
FEATURES: tuple[str, ...] = (
    "dense_flops",      # linear layers (attention projections, MLP or experts, router, output head)
    "attention_flops",  # attention core as executed by flash attention (causal half of 4 s^2 h per layer)
    "z3_flops",         # dense_flops of a ZeRO-3 cell whose gathers overlap the compute (contention)
    "act_elems",        # activation elements touched by elementwise/norm kernels (per layer and pass)
    "head_elems",       # logits elements (softmax cross-entropy) on the last stage, without tensor parallelism
    "head_elems_vp",    # the same with tp > 1: the vocabulary-parallel loss on fp32 logits it materialises
    "z3_elems",         # parameter elements gathered/copied by ZeRO-3 (every micro-batch, every pass)
    "optim_elems",      # parameter elements updated by this rank's optimizer partition (once per iteration)
    "moe_elems",        # capacity-slot elements dispatched and combined by MoE layers
    "layer_passes",     # transformer-layer passes (forward, backward, recomputed forward) of all micro-batches
    "expert_passes",    # the same times this rank's local experts (each launches its own kernels)
)  # fmt: skip

BF16_BYTES = 2


@dataclass(frozen=True)
class CommOp:
    """One kind of collective a rank issues, with its per-iteration count.

    Attributes:
        collective: one of :data:`COLLECTIVES`.
        role: what it is for: ``tp`` (tensor/sequence parallel), ``zero3`` (parameter gathers and gradient
            reduce-scatters), ``dp`` (gradient synchronisation of ZeRO 0-2), ``ep`` (MoE dispatch/combine), ``pp``
            (activations between stages), ``sync`` (small latency-bound reductions: norm gradients, loss, grad norm).
        size_bytes: message size of one call (the full gathered buffer for all-gather, the full input for
            reduce-scatter and all-reduce, this rank's send buffer for all-to-all, the payload for send/recv).
        group: ranks in the group.
        nodes: nodes the group spans (1: inside one node).
        calls: calls per iteration.
        overlap: ``exposed`` (on the critical path of every micro-batch), ``overlapped`` (hidden under compute as
            far as compute lasts), ``step`` (once per iteration, after the last micro-batch).
    """

    collective: str
    role: str
    size_bytes: float
    group: int
    nodes: int
    calls: float
    overlap: str = "exposed"


@dataclass
class StageWork:
    """One rank of one pipeline stage, one iteration."""

    stage: int
    layers: int
    micro_batches: int
    features: dict[str, float] = field(default_factory=dict)
    comm: list[CommOp] = field(default_factory=list)

    def per_micro_batch(self, name: str) -> float:
        """A feature per micro-batch."""
        return self.features.get(name, 0.0) / max(self.micro_batches, 1)

    @property
    def compute_flops(self) -> float:
        """Floating-point operations of the stage's kernels: linear layers, output head and attention core."""
        return self.features.get("dense_flops", 0.0) + self.features.get("attention_flops", 0.0)


@dataclass
class Workload:
    """All stages of a cell."""

    cell: Cell
    model: ModelSpec
    stages: list[StageWork]


def _passes(cell: Cell, layers: int) -> tuple[float, float]:
    """(forward-equivalent passes of the dense part, of the attention core) per layer and micro-batch.

    Training is forward + backward = 3 forward-equivalents; full recomputation adds one forward of the recomputed
    layers (``recompute_layers`` of the stage's), selective one forward of the attention core.
    """
    if cell.recompute == "full":
        n = layers if cell.recompute_layers is None else min(layers, cell.recompute_layers)
        extra = n / max(layers, 1)
        return 3.0 + extra, 3.0 + extra
    if cell.recompute == "selective":
        return 3.0, 4.0
    return 3.0, 3.0


def _stage_params(m: ModelSpec, layers: int, first: bool, last: bool, tp: int, padded: int) -> tuple[float, float]:
    """(dense, expert) parameter elements of one stage on one tp rank."""
    total = trained_parameter_count(m, padded)
    expert_layer = m.num_experts * 3 * m.hidden_size * m.ffn_hidden_size if m.is_moe else 0
    embed = padded * m.hidden_size
    per_layer_dense = (total - m.num_layers * expert_layer - 2 * embed) / m.num_layers
    dense = layers * per_layer_dense + (embed if first else 0) + (embed if last else 0)
    return dense / tp, layers * expert_layer / tp


def stage_work(cell: Cell, m: ModelSpec, stage: int, layers: int) -> StageWork:
    """Work and messages of one rank of ``stage`` holding ``layers`` transformer blocks."""
    tp, pp, dp, ep = cell.tp, cell.pp, max(cell.dp, 1), max(cell.ep, 1)
    gpn = cell.gpus_per_node
    mb = max(cell.grad_accum, 1)
    first, last = stage == 0, stage == pp - 1
    tokens = cell.micro_batch * cell.seq_len  # per micro-batch on this rank (tp ranks share them)
    padded = padded_vocab_size(m, tp)
    dense_fwd, core_fwd = layer_forward_flops(m, cell.seq_len)
    dense_fwd *= cell.micro_batch
    core_fwd *= cell.micro_batch
    p_dense, p_core = _passes(cell, layers)
    head_fwd = 2.0 * tokens * m.hidden_size * padded if last else 0.0
    sp_shard = tp if (tp > 1 and cell.sequence_parallel) else 1
    # LoRA (kind lora, train/lora.py): the frozen base computes no weight gradient (one forward-equivalent less of
    # its linear layers and head); the adapters cost 3x their forward and are all the optimizer and gradients hold
    frozen = 1.0 if cell.adapter_rank is not None else 0.0
    adapter_params = layers * lora_adapter_parameters(m, cell.lora_rank) if frozen else 0.0
    adapter_fwd = 2.0 * tokens * adapter_params
    dense_flops = mb * (layers * dense_fwd * (p_dense - frozen) + 3.0 * adapter_fwd
                        + (3.0 - frozen) * head_fwd) / tp
    features = {
        "dense_flops": dense_flops,
        "attention_flops": mb * layers * 0.5 * core_fwd * p_core / tp,
        "z3_flops": dense_flops if (cell.zero_stage == 3 and dp > 1) else 0.0,
        "act_elems": mb * layers * p_dense * tokens * m.hidden_size / sp_shard,
        "head_elems": mb * tokens * padded / tp if last and tp == 1 else 0.0,
        "head_elems_vp": mb * tokens * padded / tp if last and tp > 1 else 0.0,
        "layer_passes": mb * layers * p_dense,
        "expert_passes": mb * layers * p_dense * (m.num_experts / ep if m.is_moe else 0.0),
    }
    p_dense_rank, p_expert_rank = _stage_params(m, layers, first, last, tp, padded)
    edp = max(dp // ep, 1)  # data-parallel degree of the expert parameters
    z3 = cell.zero_stage == 3 and dp > 1
    features["z3_elems"] = mb * (p_dense_rank + p_expert_rank / ep) * (2.0 + (p_dense - 3.0)) if z3 else 0.0
    shard_dense = dp if cell.zero_stage >= 1 else 1
    shard_expert = edp if cell.zero_stage >= 1 else 1
    if frozen:  # only the adapters are trained
        p_dense_rank, p_expert_rank = adapter_params, 0.0
    features["optim_elems"] = p_dense_rank / shard_dense + p_expert_rank / ep / shard_expert
    comm: list[CommOp] = []
    act_bytes = tokens * m.hidden_size * BF16_BYTES
    if m.is_moe:
        cap = expert_capacity(m, tokens)
        slots = m.num_experts * cap  # capacity slots per MoE layer and micro-batch on this rank
        # the gate, dispatch and combine run on every tp rank for all tokens (not split over tp)
        features["moe_elems"] = mb * layers * p_dense * slots * m.hidden_size
        if ep > 1:
            a2a_bytes = slots * m.hidden_size * BF16_BYTES / tp
            comm.append(CommOp("all_to_all", "ep", a2a_bytes, ep, group_nodes(ep, tp, gpn),
                               mb * layers * 2 * (p_dense - 1.0)))
    else:
        features["moe_elems"] = 0.0
    if tp > 1:
        tp_nodes = group_nodes(tp, 1, gpn)
        passes = p_dense - 1.0  # forward, backward (each with the same collectives), recomputed forward
        if cell.sequence_parallel:
            comm.append(CommOp("all_gather", "tp", act_bytes, tp, tp_nodes, mb * layers * 2 * passes))
            comm.append(CommOp("reduce_scatter", "tp", act_bytes, tp, tp_nodes, mb * layers * 2 * passes))
        else:
            comm.append(CommOp("all_reduce", "tp", act_bytes, tp, tp_nodes, mb * layers * 2 * passes))
        # norm-weight gradient all-reduces (SP) and the vocabulary-parallel loss: small, latency-bound
        comm.append(CommOp("all_reduce", "sync", 4.0 * m.hidden_size, tp, tp_nodes, mb * (layers * 2 + 2)))
    if z3:
        dp_nodes = group_nodes(dp, tp, gpn)
        gathered = (p_dense_rank + p_expert_rank / ep) * BF16_BYTES
        n_modules = max(layers, 1) + (1 if first else 0) + (1 if last else 0)
        overlap = "overlapped" if cell.overlap else "exposed"
        comm.append(CommOp("all_gather", "zero3", gathered / n_modules, dp, dp_nodes,
                           mb * n_modules * (2.0 + (p_dense - 3.0)), overlap))
        comm.append(CommOp("reduce_scatter", "zero3", gathered / n_modules, dp, dp_nodes, mb * n_modules, overlap))
    elif dp > 1 or (m.is_moe and edp > 1):
        dense_bytes = p_dense_rank * BF16_BYTES
        if dp > 1:
            # DeepSpeed ZeRO 0-2 all-reduce the gradients (the traces show all-reduce, no reduce-scatter, at stage 1)
            comm.append(CommOp("all_reduce", "dp", dense_bytes, dp, group_nodes(dp, tp, gpn), 1.0, "step"))
            if cell.zero_stage >= 1:
                comm.append(CommOp("all_gather", "dp", dense_bytes, dp, group_nodes(dp, tp, gpn), 1.0, "step"))
        if m.is_moe and edp > 1 and p_expert_rank:
            expert_bytes = p_expert_rank / ep * BF16_BYTES
            comm.append(CommOp("all_reduce", "dp", expert_bytes, edp, group_nodes(edp, tp * ep, gpn), 1.0, "step"))
    if pp > 1:
        pp_nodes = group_nodes(2, tp * dp, gpn)
        sends = (0 if last else 1) + (0 if first else 1)  # forward activation out, backward gradient out
        comm.append(CommOp("send_recv", "pp", act_bytes / sp_shard, 2, pp_nodes, mb * sends))
    # loss / overflow / grad-norm reductions of every iteration (latency-bound)
    comm.append(CommOp("all_reduce", "sync", 8.0, max(cell.world_size, 1), max(cell.nodes, 1), 3.0))
    return StageWork(stage, layers, mb, features, comm)


def workload(cell: Cell) -> Workload:
    """The work of every stage of a cell."""
    m = get_model(cell.model)
    blocks = stage_block_counts(m.num_layers, cell.pp, cell.pp_split)
    return Workload(cell, m, [stage_work(cell, m, s, n) for s, n in enumerate(blocks)])

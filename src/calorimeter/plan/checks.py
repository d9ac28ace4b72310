"""Checks run on every cell before anything is submitted; a failing cell is pruned with its reasons."""

from __future__ import annotations

from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import HardwareProfile
from calorimeter.plan.memory import GB, MemoryEstimate
from calorimeter.plan.models import ModelSpec, expert_capacity, parameter_count


def divisibility_reasons(cell: Cell, m: ModelSpec) -> list[str]:
    """Structural reasons why a cell cannot run (empty when it can)."""
    r: list[str] = []
    mp = cell.tp * cell.pp * cell.cp
    if cell.world_size % mp:
        r.append(f"world size {cell.world_size} ({cell.nodes} nodes x {cell.gpus_per_node}) is not divisible by "
                 f"tp*pp*cp = {cell.tp}*{cell.pp}*{cell.cp} = {mp}")
        return r
    if m.num_attention_heads % cell.tp:
        r.append(f"attention heads {m.num_attention_heads} not divisible by tp={cell.tp}")
    if m.num_query_groups % cell.tp:
        r.append(f"query groups (KV heads) {m.num_query_groups} not divisible by tp={cell.tp}")
    if cell.sequence_parallel and cell.seq_len % cell.tp:
        r.append(f"sequence length {cell.seq_len} not divisible by tp={cell.tp} (sequence parallelism)")
    if cell.pp_split:
        if len(cell.pp_split) != cell.pp:
            r.append(f"pp_split has {len(cell.pp_split)} stages but pp={cell.pp}")
        if sum(cell.pp_split) != m.num_layers:
            r.append(f"pp_split sums to {sum(cell.pp_split)} layers but the model has {m.num_layers}")
    elif m.num_layers % cell.pp:
        r.append(f"layers {m.num_layers} not divisible by pp={cell.pp} (give an explicit pp_split)")
    if cell.pp > m.num_layers:
        r.append(f"pp={cell.pp} exceeds the {m.num_layers} layers")
    if cell.ep > 1 and not m.is_moe:
        r.append(f"ep={cell.ep} but {m.name} is a dense model")
    if m.is_moe and m.num_experts % cell.ep:
        r.append(f"experts {m.num_experts} not divisible by ep={cell.ep}")
    if cell.dp % cell.ep:
        r.append(f"ep={cell.ep} does not divide dp={cell.dp}")
    if m.is_moe and cell.tp > 1:
        capacity = expert_capacity(m, cell.micro_batch * cell.seq_len)
        if capacity % cell.tp:
            r.append(f"expert capacity {capacity} tokens (micro_batch x seq_len x top-k x capacity factor / experts)"
                     f" not divisible by tp={cell.tp}: DeepSpeed splits every expert's capacity slots over tp")
    if cell.global_batch % (cell.micro_batch * cell.dp):
        r.append(f"global batch {cell.global_batch} not divisible by micro batch x dp = "
                 f"{cell.micro_batch}x{cell.dp} = {cell.micro_batch * cell.dp}")
    if cell.sequence_parallel and cell.tp == 1:
        r.append("sequence parallelism needs tp > 1")
    if cell.recompute_layers is not None and cell.recompute != "full":
        r.append("recompute_layers is only meaningful with recompute: full")
    return r


def engine_reasons(cell: Cell, m: ModelSpec) -> list[str]:
    """Combinations the engine refuses by design, or does not implement yet (the engine raises the same reasons)."""
    r: list[str] = []
    if cell.pp > 1 and cell.zero_stage >= 2:
        r.append(f"DeepSpeed refuses pipeline parallelism with ZeRO-{cell.zero_stage} by design "
                 "(use zero_stage 0 or 1 with pp > 1)")
    if m.is_moe and cell.zero_stage == 3:
        r.append("DeepSpeed MoE does not support ZeRO-3 by design (use zero_stage 1 or 2)")
    if cell.cp > 1:  # the engine has tensor, pipeline, data (ZeRO) and expert parallelism, not context parallelism
        r.append(f"context parallelism (cp={cell.cp}) is not implemented")
    return r


def memory_reasons(est: MemoryEstimate, hw: HardwareProfile) -> list[str]:
    """A reason when the estimate exceeds the device memory."""
    if est.total_b > hw.memory_gb * GB:
        return [f"estimated memory {est.total_b / GB:.1f} GB per device exceeds the {hw.memory_gb:g} GB of "
                f"{hw.name} (weights {est.weights_b / GB:.1f}, grads {est.gradients_b / GB:.1f}, optimizer "
                f"{est.optimizer_b / GB:.1f}, activations {est.activations_b / GB:.1f}, logits "
                f"{est.logits_b / GB:.1f})"]
    return []


def build_memory_reasons(cell: Cell, m: ModelSpec, hw: HardwareProfile) -> list[str]:
    """A reason when building the model does not fit, before ZeRO-3 partitions it.

    With tp > 1 and ZeRO-3 every rank first builds its tensor-parallel shard whole, in fp32 (``deepspeed.zero.Init``
    cannot wrap layers whose shards are copied in after construction), and ``deepspeed.initialize`` partitions it
    over dp afterwards: the build needs ``4 B x parameters / tp`` at once.
    """
    if not (cell.tp > 1 and cell.zero_stage == 3):
        return []
    build_b = 4.0 * parameter_count(m) / cell.tp
    if build_b > hw.memory_gb * GB:
        return [f"building the tp={cell.tp} shard before ZeRO-3 partitions it needs {build_b / GB:.1f} GB in fp32, "
                f"more than the {hw.memory_gb:g} GB of {hw.name}"]
    return []

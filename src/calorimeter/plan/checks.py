"""Checks run on every cell before anything is submitted; a failing cell is pruned with its reasons."""

from __future__ import annotations

import dataclasses

from calorimeter.plan.cell import Cell
from calorimeter.plan.hardware import HardwareProfile
from calorimeter.plan.memory import GB, MemoryEstimate, estimate_memory, max_stage_layers
from calorimeter.plan.models import ModelSpec, expert_capacity, parameter_count
from calorimeter.plan.placement import decide, flops_stage_costs, static_reason


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
    if cell.batch_reason:
        r.append(cell.batch_reason)
    if cell.sequence_parallel and cell.tp == 1:
        r.append("sequence parallelism needs tp > 1")
    if cell.recompute_layers is not None and cell.recompute != "full":
        r.append("recompute_layers is only meaningful with recompute: full")
    if cell.warmup_min_s > cell.warmup_max_s:
        r.append(f"warmup_min_s {cell.warmup_min_s:g} exceeds warmup_max_s {cell.warmup_max_s:g}: the warm-up "
                 "cannot be both")
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
    r += schedule_reasons(cell, m)
    if cell.tp_comm_overlap is not None and not (cell.overlap and cell.tp > 1 and cell.sequence_parallel):
        r.append(f"tp_comm_overlap {cell.tp_comm_overlap} chooses how tensor-parallel collectives are overlapped: it "
                 f"needs overlap on, tp > 1 and sequence_parallel (the cell has overlap {cell.overlap}, tp {cell.tp}, "
                 f"sequence_parallel {cell.sequence_parallel})")
    if cell.prefetch_elements is not None and cell.zero_stage != 3:
        r.append(f"prefetch_elements is ZeRO-3's parameter prefetch; zero_stage is {cell.zero_stage}")
    return r


def schedule_reasons(cell: Cell, m: ModelSpec) -> list[str]:
    """Why a cell's ``pp_schedule`` cannot run (DeepSpeed's ``DualPipeVEngine`` asserts the batch condition)."""
    if not cell.pp_schedule:
        return []
    r: list[str] = []
    if cell.pp == 1:
        r.append(f"pp_schedule {cell.pp_schedule} needs pp > 1")
        return r
    if cell.grad_accum and cell.grad_accum < 2 * cell.pp:
        r.append(f"DualPipeV needs at least 2 pp = {2 * cell.pp} micro-batches a step, the cell has "
                 f"{cell.grad_accum} (global_batch / (micro_batch x dp)): raise global_batch")
    blocks = cell.pp_split or [m.num_layers // cell.pp] * cell.pp
    if min(blocks) < 2:
        r.append(f"DualPipeV holds two stages a rank: every rank needs at least 2 layers, not {list(blocks)}")
    if cell.placement != "default":
        r.append(f"placement {cell.placement} decides a split of pp stages, DualPipeV cuts each in two: use default")
    if cell.recompute_layers is not None:
        r.append("recompute_layers counts the first blocks of a stage; a DualPipeV rank's blocks are two stages: "
                 "recompute every block (full) or none")
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


def placement_checks(cell: Cell, m: ModelSpec, hw: HardwareProfile, memory_check: bool = True
                     ) -> tuple[list[str], list[str], dict[str, float]]:
    """Plan-time checks of a cell's placement policy: (reasons to prune, notes, estimates).

    ``balanced`` is decided here already (it needs no profile): its split is checked like an explicit ``pp_split``
    (layers, memory). ``thermal`` is decided in the job from the host's profile, within at most
    ``placement_max_stage_layers`` blocks per stage (the largest stage the memory estimate lets fit), so every split
    it can choose passes the memory check; the note says what the plan knows. A policy that cannot apply (pp = 1)
    is noted: the cell runs with the default placement and its record says so.
    """
    if cell.placement == "default":
        return [], [], {}
    why = static_reason(cell)
    if why is not None:
        return ([why], [], {}) if cell.placement not in ("balanced", "thermal") else \
            ([], [f"placement {cell.placement}: {why}; runs with the default placement (recorded)"], {})
    if cell.placement == "balanced" and cell.pp_split:
        return [f"placement balanced chooses the layers per stage itself: drop pp_split={list(cell.pp_split)} "
                "(or use placement thermal, which keeps an explicit split and only maps ranks)"], [], {}
    cap = max_stage_layers(m, cell, hw)
    estimates = {"placement_max_stage_layers": float(cap)}
    notes: list[str] = []
    if cell.placement == "balanced":
        d = decide(cell, m, flops_stage_costs(m, cell), max_layers=cap)
        split = d.pp_split
        assert split is not None
        checked = dataclasses.replace(cell, pp_split=tuple(split), placement="default")
        reasons = divisibility_reasons(checked, m)
        if memory_check:
            reasons += memory_reasons(estimate_memory(m, checked, hw), hw)
        estimates["placement_mem_total_gb"] = estimate_memory(m, checked, hw).total_b / GB
        notes.append(f"placement balanced: split {'/'.join(map(str, split))} from the FLOP model (the job refits it "
                     "to the measured stage times of this layout's default cell when that has run)")
        return reasons, notes, estimates
    worst = dataclasses.replace(cell, pp_split=(cap, *([1] * (cell.pp - 1))), placement="default")
    estimates["placement_mem_total_gb"] = estimate_memory(m, worst, hw).total_b / GB
    what = ("rank-to-GPU mapping (the explicit pp_split is kept)" if cell.pp_split else
            f"mapping and split (at most {cap} layers per stage: memory)")
    notes.append(f"placement thermal: {what} decided in the job from the host's thermal profile; without a fresh "
                 "profile it runs as default (recorded)")
    return [], notes, estimates

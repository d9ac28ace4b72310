"""The full gradient of a cell's first optimizer step, assembled from any parallel layout (a correctness check).

Losses alone are a weak equivalence test under Adam: its first updates are ``lr * sign(g)``, blind to a gradient's
scale. This module assembles, on global rank 0, every parameter's gradient *after* the data-parallel reduction and
*before* the optimizer step, at full size and under a layout-independent name, so that two layouts of one model can
be compared tensor by tensor:

* the data-parallel reduction and ZeRO partitioning are undone by DeepSpeed's ``safe_get_full_grad`` (collective
  over the data-parallel group under ZeRO-3 and ZeRO-1/2; every rank calls it for the same parameters in order);
* tensor-parallel shards (Megatron-core's ``tensor_model_parallel`` / ``partition_dim`` attributes) are
  concatenated in tp-rank order; a fused SwiGLU ``fc1`` (``gated_shard``) holds ``[gate_r; up_r]`` and is
  re-interleaved into ``[gate; up]``;
* MoE experts get their global index (expert-parallel rank x local experts + local index);
* names lose the wrappers (``.inner``), the DeepSpeed MoE path and the pipeline prefix: ``layers.<i>.<...>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

_EXPERT = re.compile(r"mlp\.moe\.deepspeed_moe\.experts\.deepspeed_experts\.(\d+)\.")
_GATE = "mlp.moe.deepspeed_moe.gate.wg."


@dataclass
class GradShard:
    """One rank's piece of one parameter's gradient.

    Attributes:
        name: layout-independent name.
        tp_rank: tensor-parallel index of the piece (0 for replicated parameters).
        partition_dim: dimension split over tp, or None when replicated.
        gated: a fused gate/up shard ``[gate_r; up_r]``.
        grad: the fp32 gradient of the piece (CPU).
    """

    name: str
    tp_rank: int
    partition_dim: int | None
    gated: bool
    grad: torch.Tensor


def canonical_name(name: str, pipeline: bool, expert_offset: int) -> str:
    """Layout-independent name of a parameter (see the module docstring)."""
    if pipeline:  # PipelineModule registers layer i as "<i>"
        name = "layers." + name
    name = name.replace(".inner.", ".")
    name = name.replace(_GATE, "mlp.gate.")
    m = _EXPERT.search(name)
    if m:
        name = name[: m.start()] + f"mlp.experts.{expert_offset + int(m.group(1))}." + name[m.end():]
    return name


def _expert_offset(module: torch.nn.Module) -> int:
    """Global index of this rank's first local expert (0 without MoE)."""
    for sub in module.modules():
        experts = getattr(sub, "deepspeed_experts", None)
        if experts is not None:
            name = next(iter(experts[0].parameters())).group_name
            from deepspeed.utils import groups

            ep_rank = dist.get_rank(groups._get_expert_parallel_group(name)) if dist.is_initialized() else 0
            return ep_rank * len(experts)
    return 0


def local_shards(engine: Any, pipeline: bool, tp_rank: int) -> list[GradShard]:
    """This rank's gradient pieces (collective: call on every rank, after backward and before the step)."""
    from deepspeed.utils import safe_get_full_grad

    module = engine.module
    offset = _expert_offset(module)
    shards = []
    for name, p in module.named_parameters():
        if not p.requires_grad:
            continue
        g = safe_get_full_grad(p)
        if g is None:
            continue
        split = bool(getattr(p, "tensor_model_parallel", False))
        shards.append(GradShard(canonical_name(name, pipeline, offset), tp_rank if split else 0,
                                int(p.partition_dim) if split else None, bool(getattr(p, "gated_shard", False)),
                                g.detach().float().cpu().clone().reshape(getattr(p, "ds_shape", g.shape))))
    return shards


def assemble(shards: list[GradShard]) -> dict[str, torch.Tensor]:
    """Full gradients from every rank's pieces (duplicates from data-parallel replicas are dropped)."""
    by_name: dict[str, dict[int, GradShard]] = {}
    for s in shards:
        by_name.setdefault(s.name, {}).setdefault(s.tp_rank, s)
    out = {}
    for name, pieces in sorted(by_name.items()):
        first = pieces[min(pieces)]
        if first.partition_dim is None:
            out[name] = first.grad
            continue
        ordered = [pieces[r].grad for r in sorted(pieces)]
        if first.gated:
            gates, ups = zip(*(g.chunk(2, dim=first.partition_dim) for g in ordered), strict=True)
            ordered = [*gates, *ups]
        out[name] = torch.cat(ordered, dim=first.partition_dim)
    return out


def gather_full_gradients(engine: Any, pipeline: bool, tp_rank: int) -> dict[str, torch.Tensor] | None:
    """Every parameter's full gradient on global rank 0 (None elsewhere); collective."""
    shards = local_shards(engine, pipeline, tp_rank)
    gathered: list[Any] = [None] * dist.get_world_size() if dist.get_rank() == 0 else []
    dist.gather_object(shards, gathered if dist.get_rank() == 0 else None, dst=0)
    if dist.get_rank() != 0:
        return None
    return assemble([s for part in gathered for s in part])


def capture_first_step(te: Any, path: Path) -> None:
    """Save the full gradients of ``te``'s first optimizer step to ``path`` (``torch.save``, rank 0).

    Wraps the engine's ``_take_model_step`` (DeepSpeed calls it for pp=1 and pipeline engines alike, after the
    gradient reduction and before ``optimizer.step``); later steps run unchanged.
    """
    engine = te.engine
    original = engine._take_model_step
    done = False

    def take_model_step(*args: Any, **kwargs: Any) -> Any:
        nonlocal done
        if not done:
            done = True
            grads = gather_full_gradients(engine, te.pipeline, te.tp_rank)
            if grads is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                torch.save(grads, path)
        return original(*args, **kwargs)

    engine._take_model_step = take_model_step

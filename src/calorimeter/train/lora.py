"""Kind ``lora``: LoRA fine-tuning of a catalogue model with the `peft` library's adapters.

The base model is built exactly as for training (:func:`calorimeter.train.engine.build_engine`); before the
optimizer and DeepSpeed see it, every attention and MLP projection of its blocks (``qkv``, ``proj``, ``fc1``,
``fc2``: :data:`LORA_TARGETS`) becomes a ``torch.nn.Linear`` holding the same weight tensors (the project's plain
``Linear`` computes the same ``x W^T + b``; peft adapts ``torch.nn.Linear``), peft injects its LoRA adapters
(``peft.LoraConfig`` + ``peft.inject_adapter_in_model``: rank ``cell.lora_rank``, alpha ``2 x rank``, no dropout)
and every parameter but the adapters' is frozen. Embedding, norms and output head stay frozen.

So the base model runs its forward pass and the backward pass of its activations, but computes no weight gradient
and keeps no optimizer state: :func:`calorimeter.plan.flops.iteration_flops` with ``lora_rank`` counts that.
Plan checks (:func:`calorimeter.plan.kinds.lora_reasons`): tp = 1, pp = 1, ZeRO stage 0-2, a dense model (peft
adapts plain linear layers; the tensor-parallel, pipeline and ZeRO-3 builds hold other modules).
"""

from __future__ import annotations

from typing import Any

from calorimeter.plan.json_types import JsonObject
from calorimeter.records.rank import RankContext, RankResult
from calorimeter.train.layers import Linear
from calorimeter.train.loop import run_train

#: the block projections that get adapters (attention qkv and output, MLP up/gate and down)
LORA_TARGETS = ("qkv", "proj", "fc1", "fc2")


def lora_alpha(rank: int) -> float:
    """LoRA's scaling numerator: twice the rank (the scaling ``alpha / rank`` is 2)."""
    return 2.0 * rank


def _as_torch_linear(module: Any) -> Any:
    """A ``torch.nn.Linear`` holding ``module``'s own weight and bias tensors (no copy)."""
    from torch import nn

    out_f, in_f = module.weight.shape
    lin = nn.Linear(in_f, out_f, bias=module.bias is not None, device="meta")
    lin.weight = module.weight
    if module.bias is not None:
        lin.bias = module.bias
    return lin


def apply_lora(model: Any, rank: int) -> JsonObject:
    """Put peft's LoRA adapters on ``model``'s block projections in place and freeze everything else.

    Returns what the record keeps: rank, alpha, targets, trainable and total parameter counts, peft's version.
    """
    import peft
    from torch import nn

    swapped = 0
    for parent in list(model.modules()):
        for name in LORA_TARGETS:
            child = getattr(parent, name, None)
            if isinstance(child, Linear):
                setattr(parent, name, _as_torch_linear(child))
                swapped += 1
    if not swapped:
        raise ValueError("no block projection to adapt (LoRA needs the plain tp = 1 build)")
    config = peft.LoraConfig(r=rank, lora_alpha=lora_alpha(rank), lora_dropout=0.0, bias="none",
                             target_modules=list(LORA_TARGETS))
    peft.inject_adapter_in_model(config, model)
    for n, p in model.named_parameters():
        p.requires_grad = "lora_" in n
    adapted = sum(1 for m in model.modules() if isinstance(m, peft.tuners.lora.LoraLayer))
    if adapted != swapped or not any(isinstance(m, nn.Linear) for m in model.modules()):
        raise RuntimeError(f"peft adapted {adapted} of {swapped} projections")
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"rank": rank, "alpha": lora_alpha(rank), "targets": list(LORA_TARGETS), "adapted_layers": adapted,
            "trainable_parameters": int(trainable),
            "total_parameters": int(sum(p.numel() for p in model.parameters())), "peft_version": peft.__version__}


def run_lora(ctx: RankContext) -> RankResult:
    """Kind ``lora``: the training loop of kind ``train`` (warm-up, measured and profiled steps, progress file) on
    the model with LoRA adapters; the rank's result carries the adapters' summary under ``engine.lora``."""
    info: JsonObject = {}

    def hook(model: Any) -> Any:
        info.update(apply_lora(model, ctx.cell.lora_rank))
        return model

    result = run_train(ctx, model_hook=hook)
    result.engine = {**(result.engine or {}), "lora": info}
    return result

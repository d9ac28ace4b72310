"""GPT / Llama / Mixtral models as a flat list of layers: one ``nn.Module`` for pp=1, pipeline stages for pp>1.

The layer list is ``[EmbeddingLayer, TransformerBlock x num_layers, OutputLayer]``; the loss
(:func:`~calorimeter.train.layers.lm_loss`) is applied to the last layer's logits. Each layer is built under its own
seed (``seed + layer_index``), so the initial weights are the same whatever the pipeline split; tensor-parallel
layers draw the full weight under that seed and keep their shard, and MoE experts are drawn by global expert index,
so the initial model is also the same whatever tp and ep.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from calorimeter.plan.models import ModelSpec
from calorimeter.train.kernels import EAGER, Kernels
from calorimeter.train.layers import EmbeddingLayer, OutputLayer, TransformerBlock, lm_loss, vocab_parallel_lm_loss
from calorimeter.train.parallel import TPConfig

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class LayerDef:
    """A layer that is not built yet: its class, constructor arguments and init seed.

    Attributes:
        cls: the ``nn.Module`` class.
        args: positional constructor arguments.
        seed: torch seed set (in a forked RNG state) just before construction.
    """

    cls: type[nn.Module]
    args: tuple[Any, ...]
    seed: int

    def build(self) -> nn.Module:
        """Construct the layer with its own seed, leaving the caller's RNG state untouched."""
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(self.seed)
            return self.cls(*self.args)


def stage_layer_counts(block_counts: Sequence[int]) -> list[int]:
    """Entries of the layer list per stage: the blocks, plus the embedding on the first and the output on the last."""
    counts = list(block_counts)
    counts[0] += 1
    counts[-1] += 1
    return counts


def dualpipev_block_counts(block_counts: Sequence[int]) -> list[int]:
    """Blocks per virtual stage of DeepSpeed's DualPipeV, in model order: rank ``r`` of ``pp`` holds virtual stage
    ``r`` (the first half of its blocks, rounded up) and ``2 pp - 1 - r`` (the rest), so rank 0 holds the embedding's
    stage and the output's."""
    counts = list(block_counts)
    first = [n - n // 2 for n in counts]
    return first + [n // 2 for n in reversed(counts)]


def block_recompute_modes(
    block_counts: Sequence[int], recompute: str = "none", recompute_layers: int | None = None
) -> list[str]:
    """Recomputation mode of every block, in model order.

    ``full`` checkpoints the first ``recompute_layers`` blocks of every stage (all of them when None), as Megatron's
    ``recompute_method=block`` does; ``selective`` checkpoints only the attention core of every block.
    """
    if recompute not in ("none", "selective", "full"):
        raise ValueError(f"recompute must be none, selective or full, got {recompute!r}")
    modes: list[str] = []
    for n in block_counts:
        if recompute == "full":
            k = n if recompute_layers is None else max(0, min(recompute_layers, n))
            modes += ["full"] * k + ["none"] * (n - k)
        else:
            modes += [recompute] * n
    return modes


def layer_defs(
    spec: ModelSpec,
    recompute: str = "none",
    recompute_layers: int | None = None,
    block_counts: Sequence[int] | None = None,
    seed: int = 1234,
    par: TPConfig | None = None,
    ep: int = 1,
    grad_accum: int = 1,
    kern: Kernels = EAGER,
) -> list[LayerDef]:
    """The model's layers, not yet built, in order ``[embedding, blocks..., output]``.

    Args:
        spec: a dense model (``gpt`` or ``llama`` family).
        recompute: ``none``, ``selective`` or ``full``.
        recompute_layers: blocks per stage fully recomputed (``full`` only; None: all).
        block_counts: blocks per pipeline stage (default: one stage); decides which blocks ``full`` covers.
        seed: base init seed; layer ``i`` is initialised under ``seed + i``.
        par: tensor-parallel layout (default: none).
        ep: expert-parallel degree (MoE models).
        grad_accum: gradient-accumulation steps (MoE models: the load-balancing loss gets the gradient
            ``moe_aux_loss_coeff / grad_accum``, matching DeepSpeed's scaling of the backpropagated loss).
        kern: kernels of the blocks and the output norm (:mod:`calorimeter.train.kernels`).
    """
    par = par or TPConfig()
    counts = list(block_counts) if block_counts is not None else [spec.num_layers]
    if sum(counts) != spec.num_layers:
        raise ValueError(f"block_counts {counts} do not sum to num_layers={spec.num_layers}")
    modes = block_recompute_modes(counts, recompute, recompute_layers)
    defs = [LayerDef(EmbeddingLayer, (spec, par), seed)]
    aux_scale = spec.moe_aux_loss_coeff / grad_accum if spec.is_moe else 0.0
    defs += [LayerDef(TransformerBlock, (spec, mode, par, ep, aux_scale, kern), seed + 1 + i)
             for i, mode in enumerate(modes)]
    defs.append(LayerDef(OutputLayer, (spec, par, kern), seed + 1 + spec.num_layers))
    return defs


def loss_function(par: TPConfig | None, kern: Kernels = EAGER) -> LossFn:
    """:func:`lm_loss` (on ``kern``'s cross-entropy), or the vocab-parallel cross-entropy when the logits are split
    over tp."""
    if par is None or not par.enabled:
        return lm_loss if kern == EAGER else functools.partial(lm_loss, kern=kern)
    return functools.partial(vocab_parallel_lm_loss, seq_first=par.sp)


class CausalLM(nn.Module):
    """The whole layer list as one module (pp=1).

    Args:
        layers: built layers ``[embedding, blocks..., output]``.
        loss_fn: ``(logits, labels) -> loss`` (see :func:`loss_function`).

    MoE load-balancing losses enter the gradient inside their blocks
    (:class:`~calorimeter.train.layers.AuxLossGrad`), as for pipelines; the returned loss is the language-model loss.
    """

    def __init__(self, layers: Sequence[nn.Module], loss_fn: LossFn = lm_loss) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.loss_fn = loss_fn

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """Mean token cross-entropy when ``labels`` is given, else logits."""
        x = input_ids
        for layer in self.layers:
            x = layer(x)
        if labels is None:
            return x
        return self.loss_fn(x, labels)


def build_model(
    spec: ModelSpec, recompute: str = "none", recompute_layers: int | None = None, seed: int = 1234
) -> CausalLM:
    """Build the full model on the current default device (use ``with torch.device("meta"):`` to count only).

    MoE models are built with ep=1 (all experts local): DeepSpeed's MoE layer needs no process group for that.
    """
    return CausalLM([d.build() for d in layer_defs(spec, recompute, recompute_layers, seed=seed)])


def count_parameters(module: nn.Module) -> int:
    """Total elements of a module's parameters (ZeRO-3 partitioned parameters count at full size)."""
    return sum(int(getattr(p, "ds_numel", p.numel())) for p in module.parameters())

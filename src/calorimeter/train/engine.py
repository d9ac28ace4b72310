"""The DeepSpeed engine of one cell: config dict, model (plain or pipeline), client optimizer, ``deepspeed.initialize``.

Importing this module imports DeepSpeed; on a machine without CUDA it first sets ``DS_ACCELERATOR=cpu`` (unless the
variable is already set), so DeepSpeed picks its CPU accelerator (gloo) without guessing.
"""

from __future__ import annotations

import gc
import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed  # noqa: E402
from deepspeed.pipe import DualPipeVModule, LayerSpec, PipelineModule  # noqa: E402

from calorimeter.plan.cell import Cell  # noqa: E402
from calorimeter.plan.checks import engine_reasons  # noqa: E402
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.models import ModelSpec, get_model, stage_block_counts  # noqa: E402
from calorimeter.train.kernels import AttentionShape, Kernels, choose_kernels  # noqa: E402
from calorimeter.train.models import (  # noqa: E402
    CausalLM,
    LayerDef,
    dualpipev_block_counts,
    layer_defs,
    loss_function,
    stage_layer_counts,
)
from calorimeter.train.parallel import (  # noqa: E402
    MegatronMPU,
    TPConfig,
    add_sequence_parallel_grad_hooks,
    destroy_model_parallel,
    init_model_parallel,
)
from calorimeter.train.tp_overlap import tp_overlap_mode  # noqa: E402

BUCKET_ELEMENTS = 500_000_000
"""Gradient reduce / all-gather bucket size in elements (DeepSpeed's default), the same with overlap on or off; a
cell's ``bucket_elements`` replaces it (and the ZeRO-3 prefetch of ``overlap``, unless ``prefetch_elements`` is set)."""
ADAM_BETAS = (0.9, 0.95)
WEIGHT_DECAY = 0.1
GRADIENT_CLIPPING = 1.0
_EXPLICIT = "calorimeter-explicit:"


@dataclass
class TrainEngine:
    """A built engine and where this rank sits in it.

    Attributes:
        engine: the ``DeepSpeedEngine`` (``PipelineEngine`` when ``pipeline``).
        pipeline: whether the model is a ``PipelineModule`` (pp > 1); train with ``engine.train_batch``.
        device: the device this rank computes on.
        dp_rank: data-parallel index of this rank.
        dp_size: data-parallel degree.
        dp_group: the data-parallel process group (losses are averaged over it).
        tp_rank: tensor-parallel index of this rank.
        stage: pipeline stage of this rank (0 for pp=1).
        num_stages: pipeline stages.
        parameters_on_rank: parameter elements stored on this rank (its stage; its shard under ZeRO-3).
        parameters_model: parameter elements of this rank's stage at full size (the whole model for pp=1).
        config: the DeepSpeed config dict used.
        kernels: the attention backend and fused-op provider the model runs on.
        engine_info: what the engine chose and why, for the record (:func:`engine_record`).
    """

    engine: Any
    pipeline: bool
    device: torch.device
    dp_rank: int
    dp_size: int
    dp_group: Any
    tp_rank: int
    stage: int
    num_stages: int
    parameters_on_rank: int
    parameters_model: int
    config: JsonObject
    kernels: Kernels
    engine_info: JsonObject


def use_bf16(cell: Cell, device: torch.device) -> bool:
    """bf16 only when the cell asks for it and the rank runs on CUDA; CPU ranks train in fp32."""
    return cell.precision == "bf16" and device.type == "cuda"


def ds_config(cell: Cell, device: torch.device) -> JsonObject:
    """The DeepSpeed config dict of a cell (see docs/knobs.md for what each knob changes).

    Args:
        cell: the cell.
        device: this rank's device (decides bf16 vs fp32).

    Raises:
        ValueError: for a batch that does not divide, or a combination the engine refuses
            (:func:`refusal_reasons`).
    """
    if cell.batch_reason:
        raise ValueError(f"{cell.cell_id}: {cell.batch_reason}")
    spec = get_model(cell.model)
    reasons = refusal_reasons(cell, spec)
    if reasons:
        raise ValueError(f"{cell.cell_id}: " + "; ".join(reasons))
    bucket = BUCKET_ELEMENTS if cell.bucket_elements is None else cell.bucket_elements
    zero: JsonObject = {
        "stage": cell.zero_stage,
        "overlap_comm": cell.overlap,
        "reduce_bucket_size": bucket,
        "allgather_bucket_size": bucket,
        "contiguous_gradients": contiguous_gradients(cell, spec),
    }
    if cell.zero_stage == 3:
        zero["stage3_prefetch_bucket_size"] = (cell.prefetch_elements if cell.prefetch_elements is not None
                                               else bucket if cell.overlap else 0)
    extra: JsonObject = {}
    if cell.pp > 1:
        # DeepSpeed's default splits every activation sent between stages over the tp ranks and all-gathers it on
        # the other side; that assumes activations replicated over tp, which sequence parallelism breaks. Send
        # them whole (each tp rank to its peer of the next stage).
        extra["pipeline"] = {"pipe_partitioned": False, "grad_partitioned": False}
    return {
        **extra,
        "train_batch_size": cell.global_batch,
        "train_micro_batch_size_per_gpu": cell.micro_batch,
        "gradient_accumulation_steps": cell.grad_accum,
        "gradient_clipping": GRADIENT_CLIPPING,
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,
        "bf16": {"enabled": use_bf16(cell, device)},
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
        "dump_state": False,
    }


def contiguous_gradients(cell: Cell, spec: ModelSpec) -> bool:
    """DeepSpeed's ``contiguous_gradients`` for a cell: where and when gradients are reduced.

    ZeRO-1 with contiguous gradients installs per-parameter backward hooks that reduce buckets during the backward
    pass (on a side stream with ``overlap_comm``, on the compute stream without); without them ZeRO-1 reduces
    everything after the backward pass, as Megatron's distributed optimizer does without ``overlap_grad_reduce``.
    So for dense ZeRO-1 cells the knob follows ``overlap``. MoE cells always reduce from the hooks: DeepSpeed
    0.19.8's after-the-backward path sums the expert gradients of different expert-parallel ranks (found by the
    full-gradient equivalence test: relative errors of 0.5 to 6.7 on ep=2 expert gradients), so MoE ZeRO-1 with
    overlap off reduces on the compute stream during the backward pass instead: still never concurrent with
    compute. ZeRO-2/3 reduce from the hooks in any case (contiguous buffers are only a memory-layout choice there).
    """
    if cell.zero_stage <= 1 and not spec.is_moe:
        return cell.overlap
    return True


def refusal_reasons(cell: Cell, spec: ModelSpec) -> list[str]:
    """Combinations the engine refuses, with the reason: the plan-time checks' ``engine_reasons``."""
    return engine_reasons(cell, spec)


def make_optimizer(model: torch.nn.Module, lr: float, device: torch.device) -> torch.optim.Optimizer:
    """``torch.optim.AdamW`` (fused on CUDA; nothing to JIT-compile), no weight decay on biases and norms.

    MoE expert parameters go to their own groups (DeepSpeed's
    ``split_params_into_different_moe_groups_for_optimizer``) so that ZeRO reduces them over the expert-data-parallel
    group rather than the whole data-parallel group.
    """
    decay, no_decay = [], []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        ndim = len(getattr(p, "ds_shape", p.shape))  # ZeRO-3 partitioned parameters keep their shape in ds_shape
        (decay if ndim >= 2 else no_decay).append(p)
    groups: list[dict[str, Any]] = [{"params": decay, "weight_decay": WEIGHT_DECAY, "name": "decay"},
                                    {"params": no_decay, "weight_decay": 0.0, "name": "no_decay"}]
    groups = [g for g in groups if g["params"]]
    if any(not getattr(p, "allreduce", True) for g in groups for p in g["params"]):
        from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer

        groups = list(split_params_into_different_moe_groups_for_optimizer(groups))
    return torch.optim.AdamW(groups, lr=lr, betas=ADAM_BETAS, fused=device.type == "cuda")


class _SeededLayerSpec(LayerSpec):
    """A DeepSpeed ``LayerSpec`` that builds through :meth:`LayerDef.build` (per-layer init seed)."""

    def __init__(self, layer_def: LayerDef) -> None:
        super().__init__(layer_def.cls, *layer_def.args)
        self.layer_def = layer_def

    def build(self, log: bool = False) -> torch.nn.Module:
        """Build the layer under its own seed."""
        return self.layer_def.build()


class ExplicitPipelineModule(PipelineModule):
    """``PipelineModule`` that also accepts ``partition_method="calorimeter-explicit:n0,n1,..."``.

    DeepSpeed 0.19.8's ``_partition_layers`` knows only ``uniform`` (over the whole layer list, embedding and head
    included), ``parameters``, ``type:<regex>`` and ``profile`` (not implemented); there is no way to pass
    boundaries. This subclass sets ``self.parts`` from explicit per-stage layer counts and lets everything else
    (building, topology, schedules) run unchanged.
    """

    def _partition_layers(self, method: str = "uniform") -> None:
        if not method.startswith(_EXPLICIT):
            super()._partition_layers(method=method)
            return
        counts = [int(n) for n in method[len(_EXPLICIT) :].split(",")]
        if len(counts) != self.num_stages or sum(counts) != len(self._layer_specs) or min(counts) < 1:
            raise ValueError(f"explicit partition {counts} does not fit {self.num_stages} stages / "
                             f"{len(self._layer_specs)} layers")
        self.parts = [0, *itertools.accumulate(counts)]
        stage_id = self._topo.get_coord(self.global_rank).pipe
        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])


class ExplicitDualPipeVModule(DualPipeVModule, ExplicitPipelineModule):
    """DeepSpeed's ``DualPipeVModule`` (``2 pp`` virtual stages, rank ``r`` holding ``r`` and ``2 pp - 1 - r``) with
    explicit layers per virtual stage: its ``_partition_layers`` doubles the stage count, then the explicit
    partition above cuts the layer list into ``2 pp`` parts. ``deepspeed.initialize`` runs it with
    ``DualPipeVEngine`` (``DualPipeVSchedule``)."""


def _local_parameter_count(module: torch.nn.Module) -> int:
    total = 0
    for p in module.parameters():
        ds_tensor = getattr(p, "ds_tensor", None)
        total += int(ds_tensor.numel()) if ds_tensor is not None else p.numel()
    return total


def _full_parameter_count(module: torch.nn.Module) -> int:
    return sum(int(getattr(p, "ds_numel", p.numel())) for p in module.parameters())


def build_engine(cell: Cell, spec: ModelSpec | None, device: torch.device,
                 model_hook: Callable[[torch.nn.Module], torch.nn.Module] | None = None) -> TrainEngine:
    """Build model, optimizer and DeepSpeed engine for a cell on this rank.

    ``torch.distributed`` must already be initialised (the launcher does it). pp=1 builds a :class:`CausalLM`
    (under ``deepspeed.zero.Init`` for ZeRO-3, so no rank ever holds the full model); pp>1 builds an
    :class:`ExplicitPipelineModule` whose stages hold ``[embedding + blocks]``, ``[blocks]``..., ``[blocks +
    output]`` with blocks split by ``cell.pp_split`` or evenly; with ``pp_schedule: dualpipev`` each rank's blocks
    are cut into two virtual stages (:func:`calorimeter.train.models.dualpipev_block_counts`) run by DeepSpeed's
    DualPipeV engine.

    Args:
        cell: the cell (cp must be 1). tp > 1 builds Megatron-core tensor-parallel layers (and process groups, in
            DeepSpeed's rank order); ep > 1 spreads a MoE model's experts over ep data-parallel ranks.
        spec: the model (default: the catalogue entry ``cell.model``).
        device: this rank's device (:attr:`calorimeter.records.rank.RankInfo.device`).
        model_hook: applied to the built model before the optimizer is made (kind ``lora``).

    Raises:
        ValueError: for an inconsistent cell or a refused combination (:func:`refusal_reasons`).
    """
    spec = spec or get_model(cell.model)
    if cell.seq_len > spec.seq_length and spec.learned_positions:
        raise ValueError(f"{cell.cell_id}: seq_len {cell.seq_len} exceeds {spec.name}'s {spec.seq_length} positions")
    world = torch.distributed.get_world_size()
    if world != cell.world_size:
        raise ValueError(f"{cell.cell_id}: cell needs {cell.world_size} ranks, torch.distributed has {world}")
    config = ds_config(cell, device)
    # Wrap the launcher's process group in deepspeed.comm now: PipelineModule uses it before deepspeed.initialize.
    deepspeed.init_distributed(dist_backend=torch.distributed.get_backend())
    par = tp_config(cell)
    tp_mpu = None
    if par.enabled:
        init_model_parallel(cell.tp, cell.pp, cell.seed, device, high_priority_tp=par.overlap)
        tp_mpu = MegatronMPU()
    mpu = tp_mpu if cell.pp == 1 else None  # a pipeline engine brings its own grid
    if spec.is_moe:
        _create_expert_groups(cell.ep, tp_mpu, cell.pp)
    shape = AttentionShape(cell.micro_batch, spec.num_attention_heads // cell.tp, spec.num_query_groups // cell.tp,
                           cell.seq_len, spec.head_dim)
    kern, kernel_info = choose_kernels(shape, device, torch.bfloat16 if use_bf16(cell, device) else torch.float32)
    blocks = stage_block_counts(spec.num_layers, cell.pp, cell.pp_split)
    defs = layer_defs(spec, cell.recompute, cell.recompute_layers, blocks, seed=cell.seed, par=par, ep=cell.ep,
                      grad_accum=cell.grad_accum, kern=kern)
    loss_fn = loss_function(par, kern)

    if cell.pp > 1:
        from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

        specs = [_SeededLayerSpec(d) for d in defs]
        dualpipev = cell.pp_schedule == "dualpipev"
        parts = stage_layer_counts(dualpipev_block_counts(blocks) if dualpipev else blocks)
        method = _EXPLICIT + ",".join(str(n) for n in parts)
        # Axes (pipe, data, model): tp innermost, then dp, then pp -- Megatron's tp-cp-ep-dp-pp order.
        topology = PipeModelDataParallelTopology(num_pp=cell.pp, num_mp=cell.tp, num_dp=cell.dp)
        module_cls = ExplicitDualPipeVModule if dualpipev else ExplicitPipelineModule
        with torch.device(device):
            model = module_cls(specs, topology=topology, loss_fn=loss_fn, partition_method=method,
                               activation_checkpoint_interval=0)
    elif cell.zero_stage == 3 and not par.enabled:
        # No dtype argument: DeepSpeed 0.19.8 parses `dtype or fp16 if fp16_supported else ...` so that on CPU an
        # explicit dtype is ignored (bf16 wins). Without it, zero.Init takes bf16/fp32 from the config, correctly.
        with deepspeed.zero.Init(config_dict_or_path=config):
            model = CausalLM([d.build() for d in defs], loss_fn)
    else:
        with torch.device(device):
            model = CausalLM([d.build() for d in defs], loss_fn)
    if model_hook is not None:
        model = model_hook(model)
    if par.sp:
        add_sequence_parallel_grad_hooks(model)

    optimizer = make_optimizer(model, cell.lr, device)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config, mpu=mpu)
    info = engine_record(cell, par, kern, kernel_info)
    if cell.pp > 1:
        info["pipeline_engine"] = type(engine).__name__  # PipelineEngine (1F1B) or DualPipeVEngine
        grid = engine.grid
        dp_rank, dp_size, dp_group = (grid.get_data_parallel_rank(), grid.get_data_parallel_world_size(),
                                      grid.get_data_parallel_group())
        tp_rank = grid.get_slice_parallel_rank()
        stage, num_stages = engine.stage_id, engine.num_stages
    elif mpu is not None:
        dp_rank, dp_size, dp_group = (mpu.get_data_parallel_rank(), mpu.get_data_parallel_world_size(),
                                      mpu.get_data_parallel_group())
        tp_rank = mpu.get_model_parallel_rank()
        stage, num_stages = 0, 1
    else:
        dp_rank, dp_size, dp_group = torch.distributed.get_rank(), world, torch.distributed.group.WORLD
        tp_rank, stage, num_stages = 0, 0, 1
    return TrainEngine(engine=engine, pipeline=cell.pp > 1, device=device, dp_rank=dp_rank, dp_size=dp_size,
                       dp_group=dp_group, tp_rank=tp_rank, stage=stage, num_stages=num_stages,
                       parameters_on_rank=_local_parameter_count(model),
                       parameters_model=_full_parameter_count(model), config=config, kernels=kern,
                       engine_info=info)


def tp_config(cell: Cell) -> TPConfig:
    """The tensor-parallel layout of a cell: sequence parallelism only with tp > 1; ``overlap`` ("cc") overlaps the
    sequence-parallel collectives with the linears' GEMMs (without SP there is nothing of that kind to overlap:
    Megatron-core's column-parallel backward already all-reduces the input gradient asynchronously)."""
    sp = cell.sequence_parallel and cell.tp > 1
    overlap = sp and cell.overlap and cell.tp_comm_overlap != "none"  # "none": whole TP collectives
    return TPConfig(cell.tp, sp, overlap=overlap, mechanism=cell.tp_comm_overlap if overlap else None)


def engine_record(cell: Cell, par: TPConfig, kern: Kernels, kernel_info: JsonObject) -> JsonObject:
    """What the engine runs a cell with, beyond the cell's own knobs: kernels, overlap mechanisms (run.json)."""
    return {
        "kernels": kern.to_dict(),
        "kernel_choice": kernel_info,
        "overlap": {
            "deepspeed_overlap_comm": cell.overlap,
            "tp_comm_overlap": tp_overlap_mode(par.mechanism) if par.overlap else ("none" if par.enabled else "n/a"),
        },
        "torch": torch.__version__,
    }


def _create_expert_groups(ep: int, mpu: MegatronMPU | None = None, pp: int = 1) -> None:
    """Create DeepSpeed's expert-parallel and expert-data-parallel groups for ``ep`` before the model is built.

    The MoE layers need their expert-parallel rank at construction (to draw their local experts); DeepSpeed would
    otherwise create the same groups (same name, same ranks) only in ``deepspeed.initialize``, and skips them there
    when they exist. Groups never cross pipeline stages (stages are the outermost rank axis). Without tp,
    consecutive ranks of a stage form an expert-parallel group. With tp (``mpu`` given), the groups are DeepSpeed's
    expert-tensor-parallel ones: expert-parallel groups of ranks with the same tp index (inside one data-parallel
    group), the expert tensor-parallel degree set to tp; ``groups.mpu`` is set first, as those functions read it
    (a pipeline engine replaces it by its grid, which answers the same tp groups).
    """
    from deepspeed.utils import groups

    if f"ep_size_{ep}" in groups._get_expert_parallel_group_dict():
        return
    if mpu is None:
        groups._create_expert_and_data_parallel(ep, pp_size=pp)
    else:
        groups.mpu = mpu
        groups._create_expert_data_and_model_parallel(ep, mpu=mpu)


def _reset_expert_groups() -> None:
    """Forget DeepSpeed's expert groups (module globals) so that the next cell in the process builds its own."""
    from deepspeed.utils import groups

    for table in (groups._EXPERT_PARALLEL_GROUP, groups._EXPERT_PARALLEL_GROUP_RANKS,
                  groups._EXPERT_DATA_PARALLEL_GROUP, groups._EXPERT_DATA_PARALLEL_GROUP_RANKS):
        table.clear()
    groups.expert_tensor_parallel_world_size = 1


def release_engine(te: TrainEngine) -> None:
    """Destroy the engine and undo the process-global state it leaves behind.

    A pipeline engine (or one given an mpu) stores its grid in ``deepspeed.utils.groups.mpu`` and never clears it; a
    later engine in the same process would then take that grid for its model-parallel groups. Resetting it, and
    Megatron-core's ``parallel_state`` and DeepSpeed's expert groups, lets one process train several cells in turn
    (tests do).
    """
    te.engine.destroy()
    from deepspeed.utils import groups

    groups.mpu = None
    _reset_expert_groups()
    destroy_model_parallel()
    gc.collect()
    if te.device.type == "cuda":
        torch.cuda.empty_cache()

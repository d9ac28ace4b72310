"""DeepSpeed config of calorimeter.train.engine: what each cell knob turns into (no ranks started)."""

from __future__ import annotations

import pytest
import torch

from calorimeter.plan.cell import Cell
from calorimeter.plan.models import CATALOGUE
from calorimeter.train.engine import BUCKET_ELEMENTS, ds_config, make_optimizer, use_bf16
from calorimeter.train.errors import CellOOMError
from calorimeter.train.loop import _is_oom
from calorimeter.train.models import build_model

CPU, GPU = torch.device("cpu"), torch.device("cuda", 0)


def _cell(**kw: object) -> Cell:
    base = dict(sweep="t", model="tiny-llama", hardware="cpu", nodes=1, gpus_per_node=4, micro_batch=2,
                global_batch=16)
    return Cell(**{**base, **kw})


def test_batch_sizes_and_fixed_settings() -> None:
    cfg = ds_config(_cell(), CPU)
    assert (cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]) == (
        16, 2, 2)
    assert cfg["gradient_clipping"] == 1.0 and cfg["zero_allow_untested_optimizer"]
    assert "optimizer" not in cfg  # a client torch AdamW: nothing to JIT-compile


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("overlap", [False, True])
def test_zero_and_overlap(stage: int, overlap: bool) -> None:
    zero = ds_config(_cell(zero_stage=stage, overlap=overlap), CPU)["zero_optimization"]
    assert zero["stage"] == stage and zero["overlap_comm"] is overlap
    assert zero["reduce_bucket_size"] == BUCKET_ELEMENTS
    assert zero["contiguous_gradients"] is (overlap if stage <= 1 else True)
    if stage == 3:
        assert zero["stage3_prefetch_bucket_size"] == (BUCKET_ELEMENTS if overlap else 0)
    else:
        assert "stage3_prefetch_bucket_size" not in zero


def test_bucket_and_prefetch_knobs() -> None:
    zero = ds_config(_cell(zero_stage=3, overlap=True, bucket_elements=200_000_000), CPU)["zero_optimization"]
    # the bucket replaces both buckets and, with overlap on, the prefetch
    assert (zero["reduce_bucket_size"], zero["allgather_bucket_size"], zero["stage3_prefetch_bucket_size"]) == (
        200_000_000, 200_000_000, 200_000_000)
    zero = ds_config(_cell(zero_stage=3, overlap=False, prefetch_elements=50_000_000), CPU)["zero_optimization"]
    assert (zero["reduce_bucket_size"], zero["stage3_prefetch_bucket_size"]) == (BUCKET_ELEMENTS, 50_000_000)
    with pytest.raises(ValueError, match="prefetch_elements is ZeRO-3's parameter prefetch; zero_stage is 1"):
        ds_config(_cell(prefetch_elements=0), CPU)


def test_dualpipev_refusals() -> None:
    assert ds_config(_cell(pp=2, pp_schedule="dualpipev", micro_batch=1, global_batch=8), CPU)[
        "gradient_accumulation_steps"] == 4
    with pytest.raises(ValueError, match=r"DualPipeV needs at least 2 pp = 4 micro-batches a step, the cell has 2"):
        ds_config(_cell(pp=2, pp_schedule="dualpipev", micro_batch=1, global_batch=4), CPU)
    with pytest.raises(ValueError, match=r"every rank needs at least 2 layers, not \[1, 1, 1, 1\]"):
        ds_config(_cell(pp=4, pp_schedule="dualpipev", micro_batch=1, global_batch=8), CPU)
    with pytest.raises(ValueError, match="pp_schedule dualpipev needs pp > 1"):
        ds_config(_cell(pp_schedule="dualpipev"), CPU)
    with pytest.raises(ValueError, match="recompute_layers counts the first blocks of a stage"):
        ds_config(_cell(pp=2, pp_schedule="dualpipev", micro_batch=1, global_batch=8, recompute="full",
                        recompute_layers=1), CPU)


def test_dualpipev_virtual_stages() -> None:
    from calorimeter.train.models import dualpipev_block_counts, stage_layer_counts

    # rank r holds virtual stages r and 2 pp - 1 - r: rank 0 the embedding's and the output's
    assert dualpipev_block_counts([4, 4, 4, 4]) == [2, 2, 2, 2, 2, 2, 2, 2]
    assert dualpipev_block_counts([3, 5, 6, 2]) == [2, 3, 3, 1, 1, 3, 2, 1]
    assert stage_layer_counts(dualpipev_block_counts([2, 6])) == [2, 3, 3, 2]


def test_precision_bf16_only_on_cuda() -> None:
    assert ds_config(_cell(precision="bf16"), GPU)["bf16"]["enabled"]
    assert not ds_config(_cell(precision="bf16"), CPU)["bf16"]["enabled"]
    assert not ds_config(_cell(precision="fp32"), GPU)["bf16"]["enabled"]
    assert use_bf16(_cell(precision="bf16"), GPU) and not use_bf16(_cell(precision="bf16"), CPU)


def test_refusals() -> None:
    with pytest.raises(ValueError, match="ZeRO-2"):
        ds_config(_cell(pp=2, zero_stage=2), CPU)
    with pytest.raises(ValueError, match="not divisible by micro batch x dp"):
        ds_config(_cell(global_batch=6), CPU)


def test_optimizer_groups_decay_only_matrices() -> None:
    model = build_model(CATALOGUE["tiny-gpt"])
    opt = make_optimizer(model, 1e-3, CPU)
    assert isinstance(opt, torch.optim.AdamW)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim >= 2 for p in decay["params"]) and all(p.ndim == 1 for p in no_decay["params"])
    assert opt.defaults["betas"] == (0.9, 0.95) and not opt.defaults["fused"]


def test_oom_error_carries_the_peak() -> None:
    err = CellOOMError(123, "CUDA out of memory. Tried to allocate 2.00 GiB")
    assert err.peak_memory_bytes == 123 and "123" in str(err)
    assert _is_oom(torch.OutOfMemoryError("x")) and _is_oom(RuntimeError("CUDA out of memory. Tried"))
    assert not _is_oom(ValueError("x"))

"""A vocabulary that tp does not divide (GPT-3's 50257) is padded as Megatron pads it, and trains."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from dist_helpers import run_cells

from calorimeter.plan.cell import Cell
from calorimeter.plan.models import get_model, padded_vocab_size, parameter_count


@pytest.mark.integration
def test_padded_vocab_trains_with_tp2(tmp_path: Path) -> None:
    spec = get_model("tiny-gpt-v509")
    assert padded_vocab_size(spec, 2) == 512
    cell = Cell(sweep="t", model=spec.name, hardware="cpu", nodes=1, gpus_per_node=2, tp=2, zero_stage=1,
                micro_batch=2, global_batch=4, seq_len=32, warmup_steps=1, measured_steps=3, precision="fp32")
    ((r0, r1),) = run_cells([cell], tmp_path)
    losses = [s["loss"] for s in r0["steps"]]
    assert losses == [s["loss"] for s in r1["steps"]]
    assert losses[-1] < losses[0]
    # The padded logits start near uniform over the padded vocabulary, never above it.
    assert abs(losses[0] - math.log(512)) < 0.3
    assert parameter_count(spec, padded_vocab=512) > parameter_count(spec)

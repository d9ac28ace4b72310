"""Kind ``lora``: plan (schema key, checks, FLOPs of a frozen base), peft's adapters on the project's model, and a
LoRA cell trained on a CPU rank through the per-rank entry and recorded like a training cell."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from calorimeter.plan.cell import Cell
from calorimeter.plan.flops import iteration_flops, layer_forward_flops
from calorimeter.plan.models import get_model
from calorimeter.plan.plan import check_cell, make_plan


def cfg(**grid) -> dict:
    return {"sweep": "cpu-lora", "hardware": "cpu", "defaults": {"model": "tiny-llama", "nodes": 1,
                                                                 "gpus_per_node": 1, "seq_len": 64},
            "grid": [{"kind": ["train", "lora"], **grid}]}


def test_lora_cells_plan_next_to_training_cells() -> None:
    plan = make_plan(cfg(lora_rank=8))
    ids = [c.cell.cell_id for c in plan.cells]
    assert len(ids) == 2 and ids[1] == ids[0] + "_lora-r8" and all(c.status == "planned" for c in plan.cells)
    train, lora = (c.estimates["model_flops_per_iteration"] for c in plan.cells)
    assert 0.6 * train < lora < 0.8 * train  # no weight gradients of the frozen base (tiny model: adapters weigh more)
    assert plan.cells[1].cell.to_dict()["lora_rank"] == 8


def test_lora_flops_count_the_frozen_base() -> None:
    m = get_model("llama3-8b-8l")
    s, gb, r = 8192, 4, 16
    dense, core = layer_forward_flops(m, s)
    logits = 2.0 * s * m.hidden_size * m.vocab_size
    h, kv, f = m.hidden_size, m.num_query_groups * m.head_dim, m.ffn_hidden_size
    adapters = 2.0 * s * r * ((2 * h + 2 * kv) + 2 * h + (h + 2 * f) + (f + h))
    want = gb * (m.num_layers * (2 * dense + 3 * core + 3 * adapters) + 2 * logits)
    assert iteration_flops(m, s, gb, lora_rank=r).model_flops == pytest.approx(want)
    full = iteration_flops(m, s, gb).model_flops
    assert iteration_flops(m, s, gb, lora_rank=r).model_flops / full == pytest.approx(0.72, abs=0.03)


def test_stage_work_of_a_lora_cell_matches_its_iteration_flops() -> None:
    """The workload model (plan/work.py: placement, projection) counts the frozen base as iteration_flops does: the
    dense FLOPs a LoRA cell saves against full training are exactly the model FLOPs it saves, and the optimizer
    holds only the adapters."""
    from dataclasses import replace

    from calorimeter.plan.flops import lora_adapter_parameters
    from calorimeter.plan.work import stage_work

    m = get_model("llama3-8b-8l")
    full = Cell("s", "llama3-8b-8l", "h200", 1, 1, seq_len=4096, micro_batch=2, global_batch=8, precision="bf16")
    lora = replace(full, kind="lora", lora_rank=16)
    w_full, w_lora = (stage_work(c, m, 0, m.num_layers) for c in (full, lora))
    saved = iteration_flops(m, 4096, 8).model_flops - iteration_flops(m, 4096, 8, lora_rank=16).model_flops
    assert w_full.features["dense_flops"] - w_lora.features["dense_flops"] == pytest.approx(saved, rel=1e-9)
    assert w_lora.features["attention_flops"] == w_full.features["attention_flops"]
    assert w_lora.features["optim_elems"] == pytest.approx(m.num_layers * lora_adapter_parameters(m, 16))
    assert w_lora.features["optim_elems"] < 0.01 * w_full.features["optim_elems"]


@pytest.mark.parametrize(("kw", "reason"), [
    ({"tp": 2, "gpus_per_node": 2}, "tp = 1"), ({"zero_stage": 3}, "ZeRO stage 0-2"),
    ({"model": "tiny-mixtral"}, "dense model"), ({"lora_rank": 0}, "lora_rank")])
def test_lora_plan_checks_name_what_cannot_run(kw: dict, reason: str) -> None:
    base = dict(sweep="s", model="tiny-llama", hardware="cpu", nodes=1, gpus_per_node=1, kind="lora", seq_len=64)
    pc = check_cell(Cell(**{**base, **kw}))
    assert pc.status == "pruned" and any(reason in r for r in pc.reasons), pc.reasons


def test_the_schema_knows_lora() -> None:
    from calorimeter.plan.config import ConfigError

    two = cfg(lora_rank=[4, 8])
    two["grid"][0]["kind"] = "lora"
    assert [c.cell.cell_id.rsplit("_", 1)[1] for c in make_plan(two).cells] == ["lora-r4", "lora-r8"]
    with pytest.raises(ConfigError, match="lora_rank"):
        make_plan(cfg(lora_rank=0))


def test_peft_adapters_leave_the_base_output_and_train_only_the_adapters() -> None:
    import torch

    from calorimeter.train.lora import apply_lora
    from calorimeter.train.models import build_model

    torch.manual_seed(0)
    model = build_model(get_model("tiny-llama"))
    tokens = torch.randint(0, 512, (2, 16))
    before = model(tokens, tokens).detach()
    info = apply_lora(model, 4)
    after = model(tokens, tokens)
    assert torch.allclose(before, after.detach())  # peft's B starts at zero: the adapted model is the base model
    after.backward()
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert all(p.grad is None for n, p in model.named_parameters() if n not in trainable)
    assert info["adapted_layers"] == 4 * 4 and 0 < info["trainable_parameters"] < 0.1 * info["total_parameters"]


WORKER = r"""
import json, sys
from pathlib import Path
import torch.distributed as dist
from calorimeter.launch.task import run_kind
from calorimeter.plan.cell import Cell
from calorimeter.plan.settings import TelemetrySettings
from calorimeter.records.paths import RunPaths
from calorimeter.records.rank import RankContext, RankInfo, RankReport
from calorimeter.records.record import build_record
dist.init_process_group("gloo")
cell = Cell(sweep="cpu-lora", model="tiny-llama", hardware="cpu", nodes=1, gpus_per_node=1, kind="lora",
            lora_rank=4, seq_len=64, global_batch=2, warmup="fixed", warmup_steps=1, measured_steps=2)
out = Path(sys.argv[1])
info = RankInfo(0, 1, 0, 1, 0, "localhost", "gloo", "cpu")
res = run_kind(RankContext(cell, RunPaths(out), info, TelemetrySettings(profile_steps=0))).to_dict()
rec = build_record(cell, [RankReport.from_dict({**res, "status": "ok", "rank": 0})], {})  # as the rank task reports it
(out / "record.json").write_text(json.dumps({"result": res, "record": rec}, default=str))
dist.destroy_process_group()
"""


@pytest.mark.integration
def test_a_lora_cell_trains_on_a_cpu_rank_and_records_like_training(tmp_path: Path) -> None:
    from test_collectives import free_port

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", WORKER, str(tmp_path)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    got = json.loads((tmp_path / "record.json").read_text())
    lora = got["result"]["engine"]["lora"]
    assert lora["rank"] == 4 and lora["trainable_parameters"] < lora["total_parameters"] / 10
    steps = got["result"]["steps"]
    assert [s["phase"] for s in steps] == ["warmup", "measured", "measured"]
    assert all(s["loss"] == s["loss"] for s in steps)  # finite
    rec = got["record"]
    assert rec["status"] == "ok" and rec["model"]["name"] == "tiny-llama"
    assert rec["metrics"]["tokens_per_s"] > 0 and rec["cell"]["kind"] == "lora"
    assert rec["metrics"]["model_flops_per_iteration"] == pytest.approx(
        iteration_flops(get_model("tiny-llama"), 64, 2, lora_rank=4).model_flops)


def test_a_frozen_base_needs_no_gradients_or_optimizer_state() -> None:
    from calorimeter.plan.hardware import get_profile
    from calorimeter.plan.memory import estimate_memory

    m, hw = get_model("llama3-8b"), get_profile("h100")
    train = Cell(sweep="s", model="llama3-8b", hardware="h100", nodes=1, gpus_per_node=1, seq_len=4096,
                 precision="bf16")
    lora = dataclasses.replace(train, kind="lora")
    t, lo = estimate_memory(m, train, hw), estimate_memory(m, lora, hw)
    assert lo.gradients_b == lo.optimizer_b == 0 and lo.weights_b == t.weights_b and lo.activations_b == t.activations_b
    assert check_cell(train).status == "pruned" and check_cell(lora).status == "planned"  # full Llama-3 8B, 80 GB

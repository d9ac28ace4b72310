"""Models of calorimeter.train: exact parameter counts on the meta device, forward shapes, recomputation."""

from __future__ import annotations

import pytest
import torch

import calorimeter.train.layers as layers
from calorimeter.plan.models import CATALOGUE, parameter_count, stage_block_counts
from calorimeter.train.models import (
    block_recompute_modes,
    build_model,
    count_parameters,
    layer_defs,
    stage_layer_counts,
)

DENSE = sorted(name for name, spec in CATALOGUE.items() if not spec.is_moe)


def test_catalogue_has_the_dense_models_the_study_needs() -> None:
    assert {"gpt3-175b", "llama3-70b", "llama3-8b", "gpt3-13b", "tiny-gpt", "tiny-llama"} <= set(DENSE)


@pytest.mark.parametrize("name", DENSE)
def test_parameter_count_on_meta_matches_analytical(name: str) -> None:
    spec = CATALOGUE[name]
    with torch.device("meta"):
        model = build_model(spec)
    assert all(p.device.type == "meta" for p in model.parameters())
    assert count_parameters(model) == parameter_count(spec)


MOE = sorted(name for name, spec in CATALOGUE.items() if spec.is_moe)


@pytest.mark.parametrize("name", MOE)
def test_moe_parameter_count_on_meta_matches_analytical(name: str) -> None:
    """DeepSpeed MoE (ep=1: every expert local): experts, the bias-free top-k gate, attention and norms."""
    spec = CATALOGUE[name]
    with torch.device("meta"):
        model = build_model(spec)
    assert count_parameters(model) == parameter_count(spec)


def test_moe_aux_loss_enters_the_gradient_inside_its_block() -> None:
    """AuxLossGrad: backpropagating the LM loss alone gives the gradient of ``lm + coeff * sum(aux)``."""
    from calorimeter.train.layers import TransformerBlock

    spec = CATALOGUE["tiny-mixtral"]
    coeff = 0.37  # not the catalogue's 0.01: a wrong scale must show
    ids = torch.randint(0, spec.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    grads = []
    for explicit in (True, False):
        model = build_model(spec, seed=3)
        blocks = [m for m in model.layers if isinstance(m, TransformerBlock)]
        for b in blocks:
            b.aux_loss_scale = 0.0 if explicit else coeff
        loss = model(ids, ids)
        if explicit:
            loss = loss + coeff * torch.stack([b.aux_loss for b in blocks]).sum()
        loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    gate = [n for n in grads[0] if "gate" in n]
    assert gate and set(grads[0]) == set(grads[1])
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, rtol=1e-5, atol=1e-7)
    model = build_model(spec, seed=3)  # and the aux loss does change the gate's gradient
    model(ids, ids).backward()
    assert not torch.allclose(model.layers[1].mlp.moe.deepspeed_moe.gate.wg.weight.grad,
                              grads[1]["layers.1.mlp.moe.deepspeed_moe.gate.wg.weight"])


@pytest.mark.parametrize("name", ["tiny-gpt", "tiny-llama"])
def test_forward_logits_and_loss(name: str) -> None:
    spec = CATALOGUE[name]
    model = build_model(spec, seed=1)
    ids = torch.randint(0, spec.vocab_size, (2, 16))
    assert model(ids).shape == (2, 16, spec.vocab_size)
    loss = model(ids, ids)
    assert loss.shape == () and abs(loss.item() - torch.log(torch.tensor(spec.vocab_size)).item()) < 0.3


def test_init_is_per_layer_seeded_and_std_follows_spec() -> None:
    spec = CATALOGUE["tiny-llama"]
    a, b = build_model(spec, seed=5), build_model(spec, seed=5)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    # Layer i is built under seed + i: rebuilding layer 2 alone gives the same weights (pipeline stages rely on it).
    alone = layer_defs(spec, seed=5)[2].build()
    assert torch.equal(alone.attn.qkv.weight, a.layers[2].attn.qkv.weight)
    assert abs(a.layers[1].mlp.fc1.weight.std().item() - spec.init_std) < 0.1 * spec.init_std


def test_architecture_details() -> None:
    gpt = build_model(CATALOGUE["tiny-gpt"])
    llama = build_model(CATALOGUE["tiny-llama"])
    assert gpt.layers[0].positions is not None and llama.layers[0].positions is None
    assert isinstance(gpt.layers[1].attn_norm, layers.LayerNorm)
    assert isinstance(llama.layers[1].attn_norm, layers.RMSNorm)
    assert gpt.layers[1].attn.qkv.bias is not None and llama.layers[1].attn.qkv.bias is None
    spec = CATALOGUE["tiny-llama"]
    qkv_rows = (spec.num_attention_heads + 2 * spec.num_query_groups) * spec.head_dim
    assert llama.layers[1].attn.qkv.weight.shape == (qkv_rows, spec.hidden_size)
    assert llama.layers[1].mlp.fc1.weight.shape == (2 * spec.ffn_hidden_size, spec.hidden_size)


def test_attention_is_causal() -> None:
    spec = CATALOGUE["tiny-llama"]
    model = build_model(spec)
    ids = torch.randint(0, spec.vocab_size, (1, 12))
    changed = ids.clone()
    changed[0, 8:] = (changed[0, 8:] + 1) % spec.vocab_size
    with torch.no_grad():
        assert torch.allclose(model(ids)[0, :8], model(changed)[0, :8], atol=1e-5)


def _count_recomputation(recompute: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int, torch.Tensor]:
    spec = CATALOGUE["tiny-llama"]
    core_calls = [0]
    original = layers.attention_core

    def counting(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *rest: object) -> torch.Tensor:
        core_calls[0] += 1
        return original(q, k, v, *rest)

    monkeypatch.setattr(layers, "attention_core", counting)
    model = build_model(spec, recompute=recompute, seed=3)
    mlp_calls = [0]  # pre-hooks: a recomputation stops (early) inside the MLP, so forward hooks would not fire
    for block in model.layers[1:-1]:
        block.mlp.register_forward_pre_hook(lambda *_: mlp_calls.__setitem__(0, mlp_calls[0] + 1))
    ids = torch.randint(0, spec.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    model(ids, ids).backward()
    return core_calls[0], mlp_calls[0], model.layers[1].attn.qkv.weight.grad


def test_recompute_modes_rerun_the_right_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    n = CATALOGUE["tiny-llama"].num_layers
    core, mlp, grad_none = _count_recomputation("none", monkeypatch)
    assert (core, mlp) == (n, n)
    core, mlp, grad_sel = _count_recomputation("selective", monkeypatch)
    assert (core, mlp) == (2 * n, n)  # only the attention core runs again
    core, mlp, grad_full = _count_recomputation("full", monkeypatch)
    assert (core, mlp) == (2 * n, 2 * n)  # the whole block runs again
    assert torch.allclose(grad_none, grad_sel, atol=1e-6) and torch.allclose(grad_none, grad_full, atol=1e-6)


def test_stage_splits_and_recompute_layers() -> None:
    assert stage_block_counts(4, 1) == [4]
    assert stage_block_counts(10, 4) == [3, 3, 2, 2]
    assert stage_block_counts(4, 2, (1, 3)) == [1, 3]
    assert stage_layer_counts([1, 3]) == [2, 4]
    for bad in [(2, 1), (4, 0), (1, 1, 2)]:
        with pytest.raises(ValueError):
            stage_block_counts(4, 2, bad)
    assert block_recompute_modes([2, 2], "full") == ["full"] * 4
    assert block_recompute_modes([2, 3], "full", 1) == ["full", "none", "full", "none", "none"]
    assert block_recompute_modes([2, 2], "selective", 1) == ["selective"] * 4
    with pytest.raises(ValueError):
        block_recompute_modes([2], "sometimes")

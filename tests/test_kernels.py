"""The engine's kernel choices compute the same functions: eager references, torch.compile on CPU, and the
committed GPU check (cuDNN/flash/efficient attention, Liger and compiled fused ops in bf16 against fp32)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from calorimeter.train import kernels as K

FIXTURE = Path(__file__).parent / "fixtures" / "gpu_kernels_check.json"
BF16_REL = 1e-2  # bf16 operands: relative errors between 1e-3 and 1e-2 are rounding (bench/engine_kernels.py)


def _qkv(b: int = 2, s: int = 5, groups: int = 2, per_group: int = 3, d: int = 8) -> torch.Tensor:
    return torch.randn(b, s, groups, per_group + 2, d, generator=torch.Generator().manual_seed(0))


def _tables(s: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    angles = torch.randn(s, d // 2, generator=torch.Generator().manual_seed(1))
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def test_kernels_are_validated_and_cpu_ranks_get_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="attention backend"):
        K.Kernels(attention="fast")
    with pytest.raises(ValueError, match="fused provider"):
        K.Kernels(fused="triton")
    monkeypatch.setenv(K.ENV_ATTENTION, "cudnn")
    kern, info = K.choose_kernels(K.AttentionShape(1, 4, 2, 16, 8), torch.device("cpu"), torch.float32)
    assert kern == K.EAGER and "CPU" in info["reason"]
    monkeypatch.setenv(K.ENV_FUSED, "fast")
    with pytest.raises(ValueError, match="CALORIMETER_FUSED='fast'"):
        K.requested(K.ENV_FUSED, K.FUSED_PROVIDERS)
    monkeypatch.delenv(K.ENV_FUSED)
    assert K.requested(K.ENV_FUSED, K.FUSED_PROVIDERS) == "auto"


def test_eager_split_rotary_is_the_megatron_layout_rotated() -> None:
    qkv = _qkv()
    b, s, groups, width, d = qkv.shape
    per_group = width - 2
    cos, sin = _tables(s, d)
    q, k, v = K.qkv_rotary(qkv, per_group, cos, sin)
    assert q.shape == (b, groups * per_group, s, d) and k.shape == v.shape == (b, groups, s, d)

    def rot(x: torch.Tensor) -> torch.Tensor:
        rotated = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)
        return x * cos + rotated * sin

    heads = qkv[:, :, :, :per_group].reshape(b, s, groups * per_group, d).transpose(1, 2)
    torch.testing.assert_close(q, rot(heads))
    torch.testing.assert_close(k, rot(qkv[:, :, :, per_group].transpose(1, 2)))
    torch.testing.assert_close(v, qkv[:, :, :, per_group + 1].transpose(1, 2))
    q0, k0, _ = K.qkv_rotary(qkv, per_group, None, None)  # GPT: no rotary
    torch.testing.assert_close(q0, heads)


def test_eager_fused_ops_match_their_definitions() -> None:
    gen = torch.Generator().manual_seed(2)
    x, r, w = torch.randn(3, 4, 16, generator=gen), torch.randn(3, 4, 16, generator=gen), torch.rand(16) + 0.5
    s, y = K.add_rms_norm(x, r, w, 1e-5)
    torch.testing.assert_close(s, x + r)
    torch.testing.assert_close(y, F.rms_norm(x + r, (16,), w, 1e-5))
    h = torch.randn(3, 10, generator=gen)
    torch.testing.assert_close(K.swiglu(h), F.silu(h[:, :5]) * h[:, 5:])
    logits, labels = torch.randn(6, 11, generator=gen), torch.randint(0, 11, (6,), generator=gen)
    torch.testing.assert_close(K.cross_entropy(logits.bfloat16(), labels),
                               F.cross_entropy(logits.bfloat16().float(), labels))


def test_attention_expand_kv_is_gqa() -> None:
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, n, 7, 8, generator=gen) for n in (4, 2, 2))
    torch.testing.assert_close(K.attention(q, k, v, K.Kernels(expand_kv=True)), K.attention(q, k, v))


@pytest.mark.integration
def test_compiled_ops_match_eager_on_cpu() -> None:
    """``fused=compile`` compiles the eager reference functions: same values and gradients (fp32, CPU inductor)."""
    comp = K.Kernels(fused="compile")
    gen = torch.Generator().manual_seed(4)
    x, r = torch.randn(2, 3, 16, generator=gen), torch.randn(2, 3, 16, generator=gen)
    w = torch.rand(16, generator=gen) + 0.5
    qkv = _qkv()
    cos, sin = _tables(qkv.shape[1], qkv.shape[-1])
    logits, labels = torch.randn(6, 11, generator=gen), torch.randint(0, 11, (6,), generator=gen)

    def run(kern: K.Kernels) -> list[torch.Tensor]:
        leaves = [t.clone().requires_grad_() for t in (x, r, w, qkv, logits)]
        s, y = K.add_rms_norm(leaves[0], leaves[1], leaves[2], 1e-5, kern)
        q, k, v = K.qkv_rotary(leaves[3], 3, cos, sin, kern)
        out = [s, y, K.rms_norm(leaves[0], leaves[2], 1e-5, kern), K.swiglu(leaves[0], kern), q, k, v,
               K.cross_entropy(leaves[4], labels, kern)]
        sum((o * o).sum() for o in out).backward()
        return [o.detach() for o in out] + [t.grad for t in leaves]

    for got, want in zip(run(comp), run(K.EAGER), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_gpu_check_fixture_shows_every_kernel_choice_computing_the_same_functions() -> None:
    """The committed output of ``bench/engine_kernels.py`` on an H200: every attention backend the engine may
    choose and every fused provider ran, in bf16 within rounding of the fp32 reference and of today's kernels."""
    fx = json.loads(FIXTURE.read_text())
    assert fx["env"]["name"].startswith("NVIDIA H") and fx["env"]["liger"]
    backends = fx["attention"]["backends"]
    for name in K.AUTO_ATTENTION_ORDER:
        assert "ms" in backends[name], (name, backends[name])
        assert max(backends[name]["rel_err"].values()) < BF16_REL, (name, backends[name]["rel_err"])
    variants = {k: v for k, v in fx["numerics"].items() if isinstance(v, dict) and "rel_err" in v}
    errors = [k for k, v in fx["numerics"].items() if isinstance(v, dict) and "error" in v]
    assert not errors, errors
    providers = {"liger", "compile", "eager"}
    seen = {name.split("+")[-1] if "+" in name else "eager" for name in variants}
    assert providers <= seen, seen
    today = variants["today"]["rel_err"]
    for name, v in variants.items():
        assert v["max_rel_err"] < BF16_REL, (name, v["max_rel_err"])
        for quantity, err in v["rel_err"].items():
            assert err <= 2 * today[quantity] + 1e-4, (name, quantity, err, today[quantity])
    for name, e in fx["engine"].items():
        if isinstance(e, dict) and "loss_max_rel_diff_vs_today" in e:
            assert e["loss_max_rel_diff_vs_today"] < 5e-3, (name, e)

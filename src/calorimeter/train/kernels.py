"""The engine's hot-path kernels: the SDPA attention backend and the fused elementwise operations.

Two independent choices, made once per cell when the engine is built and recorded in the cell's record
(``engine.kernels`` of every rank in run.json):

* ``attention``: which PyTorch SDPA backend computes the causal attention core: ``cudnn`` (cuDNN's fused attention),
  ``flash`` (FlashAttention-2 as shipped in PyTorch), ``efficient`` (memory-efficient attention), ``math``
  (unfused reference) or ``default`` (no preference: PyTorch's own priority order, whose pick for the cell's shape
  is recorded as ``pytorch_default``). A named backend is *required* (``torch.nn.attention.sdpa_kernel`` with that
  backend alone), so a shape it cannot serve fails loudly instead of falling back silently. On CUDA, ``auto`` times
  the candidates on the cell's own attention shape (forward and backward, bf16) when the engine is built and takes
  the fastest; ranks agree on one choice.
* ``fused``: how RMSNorm (with the residual add before it), SwiGLU, rotary embeddings and the cross-entropy loss are
  computed: ``liger`` (Triton kernels of the ``liger-kernel`` package), ``compile`` (``torch.compile`` of each small
  function, no graph breaks, static shapes) or ``eager`` (plain PyTorch ops, several kernels each). ``auto`` picks
  ``liger`` on CUDA when the package imports, else ``compile`` on CUDA, ``eager`` on CPU.

The eager functions below are the reference definitions: the compiled variants compile exactly these functions, and
the Liger variants compute the same math (checked on a GPU against fp32 references: ``bench/engine_kernels.py``).

Environment overrides (for benchmarks; not experiment axes): ``CALORIMETER_ATTENTION`` (auto | default | cudnn |
flash | efficient | math) and ``CALORIMETER_FUSED`` (auto | liger | compile | eager), read when an engine is built.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

from calorimeter.plan.json_types import JsonObject
from calorimeter.telemetry.timer import time_calls

ATTENTION_BACKENDS = ("cudnn", "flash", "efficient", "math")
"""SDPA backends that can be required by name (PyTorch's ``SDPBackend`` members)."""
FUSED_PROVIDERS = ("liger", "compile", "eager")
ENV_ATTENTION = "CALORIMETER_ATTENTION"
ENV_FUSED = "CALORIMETER_FUSED"
AUTO_ATTENTION_ORDER = ("default", "cudnn", "flash", "efficient")
"""Backends timed by ``attention=auto``, ties going to the first: ``default`` (PyTorch's own pick, recorded as
``pytorch_default``) runs the same kernels as the backend it resolves to without the per-call ``sdpa_kernel``
context, which measured 0.2 ms slower per forward+backward on an H200 (torch 2.11, where it resolves to cuDNN);
math is never fastest on a GPU and needs the full score matrix."""


@dataclass(frozen=True)
class Kernels:
    """The kernels one engine uses.

    Attributes:
        attention: SDPA backend (``cudnn``, ``flash``, ``efficient``, ``math``) or ``default`` (PyTorch's choice).
        fused: fused elementwise provider: ``liger``, ``compile`` or ``eager``.
        expand_kv: pass K/V expanded to one head per query head instead of grouped (``enable_gqa``); set when the
            chosen backend cannot take grouped K/V.
    """

    attention: str = "default"
    fused: str = "eager"
    expand_kv: bool = False

    def __post_init__(self) -> None:
        if self.attention not in (*ATTENTION_BACKENDS, "default"):
            raise ValueError(f"attention backend must be default or one of {ATTENTION_BACKENDS}, "
                             f"got {self.attention!r}")
        if self.fused not in FUSED_PROVIDERS:
            raise ValueError(f"fused provider must be one of {FUSED_PROVIDERS}, got {self.fused!r}")

    def to_dict(self) -> JsonObject:
        """Plain dict for records."""
        return asdict(self)


EAGER = Kernels()
"""Plain PyTorch everywhere: what CPU ranks use, and the reference of every other choice."""


# ---------------------------------------------------------------------------------------------------------------
# Reference (eager) definitions. ``compile`` compiles exactly these.
# ---------------------------------------------------------------------------------------------------------------

def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return F.rms_norm(x, weight.shape, weight, eps)


def _add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    s = residual + x
    return s, F.rms_norm(s, weight.shape, weight, eps)


def _swiglu(h: torch.Tensor) -> torch.Tensor:
    gate, up = h.chunk(2, dim=-1)
    return F.silu(gate) * up


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def _split_qkv(qkv: torch.Tensor, per_group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(b, s, groups, per_group + 2, d)`` -> q ``(b, heads, s, d)``, k and v ``(b, groups, s, d)``."""
    b, s, groups, _, d = qkv.shape
    q = qkv[:, :, :, :per_group].reshape(b, s, groups * per_group, d).transpose(1, 2)
    return q, qkv[:, :, :, per_group].transpose(1, 2), qkv[:, :, :, per_group + 1].transpose(1, 2)


def _qkv_rotary(qkv: torch.Tensor, per_group: int, cos: torch.Tensor,
                sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q, k, v = _split_qkv(qkv, per_group)
    return _rotate(q, cos, sin), _rotate(k, cos, sin), v


def _cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), labels)


_REFERENCE: dict[str, Callable[..., Any]] = {
    "rms_norm": _rms_norm, "add_rms_norm": _add_rms_norm, "swiglu": _swiglu, "qkv_rotary": _qkv_rotary,
    "cross_entropy": _cross_entropy,
}


@functools.cache
def _compiled(name: str) -> Callable[..., Any]:
    """``torch.compile`` of one reference function (static shapes: each distinct shape compiles once)."""
    return torch.compile(_REFERENCE[name], dynamic=False, fullgraph=True)


def _impl(name: str, k: Kernels) -> Callable[..., Any]:
    return _compiled(name) if k.fused == "compile" else _REFERENCE[name]


# ---------------------------------------------------------------------------------------------------------------
# The operations the layers call.
# ---------------------------------------------------------------------------------------------------------------

def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, k: Kernels = EAGER) -> torch.Tensor:
    """RMSNorm of the last dimension, computed in fp32 and returned in ``x``'s dtype."""
    if k.fused == "liger":
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        return LigerRMSNormFunction.apply(x, weight, eps, 0.0, "gemma", False)
    return _impl("rms_norm", k)(x, weight, eps)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                 k: Kernels = EAGER) -> tuple[torch.Tensor, torch.Tensor]:
    """``s = residual + x`` and ``rms_norm(s)``, as one pass where the provider fuses them; returns ``(s, norm)``."""
    if k.fused == "liger":
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

        y, s = LigerFusedAddRMSNormFunction.apply(x, residual, weight, eps, 0.0, "gemma", False)
        return s, y
    return _impl("add_rms_norm", k)(x, residual, weight, eps)


def swiglu(h: torch.Tensor, k: Kernels = EAGER) -> torch.Tensor:
    """``silu(gate) * up`` of a fused ``[gate | up]`` last dimension."""
    if k.fused == "liger":
        from liger_kernel.ops.swiglu import LigerFusedGateUpSiLUMulFunction

        # 2-D in and out: its backward returns the input gradient flattened to rows
        out = LigerFusedGateUpSiLUMulFunction.apply(h.reshape(-1, h.shape[-1]), False)
        return out.view(*h.shape[:-1], h.shape[-1] // 2)
    return _impl("swiglu", k)(h)


def qkv_rotary(qkv: torch.Tensor, per_group: int, cos: torch.Tensor | None, sin: torch.Tensor | None,
               k: Kernels = EAGER) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split a fused QKV output and rotate q and k (RoPE, ``rotate_half`` form) when tables are given.

    Args:
        qkv: ``(batch, seq, groups, per_group + 2, head_dim)``: per query group its ``per_group`` query heads,
            then its key and value head (Megatron's fused layout).
        per_group: query heads per group.
        cos, sin: ``(seq, head_dim)`` tables, or None for no rotary embedding.
        k: kernels.

    Returns:
        q ``(batch, heads, seq, head_dim)``, k and v ``(batch, groups, seq, head_dim)``.
    """
    if cos is None or sin is None:
        return _split_qkv(qkv, per_group)
    if k.fused == "liger":
        from liger_kernel.ops.rope import LigerRopeFunction

        q, key, v = _split_qkv(qkv, per_group)
        q, key = LigerRopeFunction.apply(q, key, cos, sin)
        return q, key, v
    return _impl("qkv_rotary", k)(qkv, per_group, cos, sin)


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor, k: Kernels = EAGER) -> torch.Tensor:
    """Mean cross-entropy of ``(tokens, vocab)`` logits against ``(tokens,)`` labels, computed in fp32.

    The Liger kernel never materialises fp32 logits and writes the logits' gradient into their own storage in the
    forward pass (the logits must not be used afterwards: they are the loss's alone here).
    """
    if k.fused == "liger":
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction

        return LigerCrossEntropyFunction.apply(logits, labels, None, -100, 0.0, 0.0, "mean")[0]
    return _impl("cross_entropy", k)(logits, labels)


def _backend(name: str) -> Any:
    from torch.nn.attention import SDPBackend

    return {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[name]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kern: Kernels = EAGER) -> torch.Tensor:
    """Causal ``softmax(Q K^T / sqrt(d)) V`` through SDPA on the chosen backend, GQA without copying K/V.

    Args:
        q: ``(batch, heads, seq, head_dim)``.
        k: ``(batch, groups, seq, head_dim)``.
        v: ``(batch, groups, seq, head_dim)``.
        kern: kernels (``attention`` names the required backend; ``expand_kv`` repeats K/V per query head).
    """
    gqa = k.shape[1] != q.shape[1]
    if gqa and kern.expand_kv:
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        gqa = False
    if kern.attention == "default":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel([_backend(kern.attention)]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)


# ---------------------------------------------------------------------------------------------------------------
# Choosing the kernels of a cell.
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AttentionShape:
    """The attention problem of one rank: ``(batch, heads, seq, head_dim)`` queries, ``groups`` K/V heads."""

    batch: int
    heads: int
    groups: int
    seq: int
    head_dim: int


def liger_available() -> bool:
    """Whether ``liger_kernel`` imports (it needs Triton and a GPU build of PyTorch)."""
    try:
        import liger_kernel.ops  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means: not usable here
        return False
    return True


def _time_backend(name: str, shape: AttentionShape, expand_kv: bool, device: torch.device, dtype: torch.dtype,
                  reps: int = 3) -> float:
    """Median milliseconds of one forward + backward of the causal attention on ``name``; raises if it cannot run."""
    gen = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(shape.batch, shape.heads, shape.seq, shape.head_dim, device=device, dtype=dtype, generator=gen)
    kv = [torch.randn(shape.batch, shape.groups, shape.seq, shape.head_dim, device=device, dtype=dtype,
                      generator=gen) for _ in range(2)]
    leaves = [t.requires_grad_() for t in (q, *kv)]
    kern = Kernels(attention=name, expand_kv=expand_kv)
    grad = torch.randn(shape.batch, shape.heads, shape.seq, shape.head_dim, device=device, dtype=dtype,
                       generator=gen)
    times = time_calls(lambda: attention(*leaves, kern).backward(grad), device, reps)
    return sorted(times)[len(times) // 2] * 1e3


_SDP_NAMES = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn"}


def default_backend(shape: AttentionShape, device: torch.device, dtype: torch.dtype) -> str:
    """The backend PyTorch's own priority order picks for ``shape`` (``torch._fused_sdp_choice``; "unknown" when
    this PyTorch cannot say)."""
    try:
        q = torch.empty(shape.batch, shape.heads, shape.seq, shape.head_dim, device=device, dtype=dtype)
        kv = torch.empty(shape.batch, shape.groups, shape.seq, shape.head_dim, device=device, dtype=dtype)
        choice = torch._fused_sdp_choice(q, kv, kv, attn_mask=None, dropout_p=0.0, is_causal=True,
                                         enable_gqa=shape.groups != shape.heads)
    except Exception:  # noqa: BLE001 - a private API: best effort
        return "unknown"
    return _SDP_NAMES.get(int(choice), f"backend {int(choice)}")


def probe_attention(shape: AttentionShape, device: torch.device, dtype: torch.dtype,
                    candidates: tuple[str, ...] = AUTO_ATTENTION_ORDER) -> dict[str, JsonObject]:
    """Time every candidate backend on ``shape`` (forward + backward); per backend ``{ms, expand_kv}`` or ``error``.

    A backend that refuses grouped K/V is retried with K/V expanded per query head.
    """
    out: dict[str, JsonObject] = {}
    for name in candidates:
        tries = [False, True] if shape.groups != shape.heads and name != "default" else [False]
        errors = []
        for expand in tries:
            try:
                out[name] = {"ms": _time_backend(name, shape, expand, device, dtype), "expand_kv": expand}
                break
            except RuntimeError as e:
                errors.append(str(e).splitlines()[0][:200] if str(e) else type(e).__name__)
        else:
            out[name] = {"error": "; ".join(errors)}
    torch.cuda.synchronize(device)
    return out


def _fastest(probe: dict[str, JsonObject]) -> str | None:
    timed = {name: r["ms"] for name, r in probe.items() if "ms" in r}
    return min(timed, key=timed.__getitem__) if timed else None


def _agree(probe: dict[str, JsonObject], device: torch.device, group: Any = None) -> dict[str, JsonObject]:
    """Ranks agree on one timing table: per backend the slowest rank's time, unusable if unusable on any rank."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) == 1:
        return probe
    names = sorted(probe)
    ms = torch.tensor([probe[n].get("ms", float("inf")) for n in names], dtype=torch.float64, device=device)
    dist.all_reduce(ms, op=dist.ReduceOp.MAX, group=group)
    agreed = {}
    for n, t in zip(names, ms.tolist(), strict=True):
        agreed[n] = dict(probe[n], ms=t) if t != float("inf") else {"error": probe[n].get("error", "another rank")}
    return agreed


def requested(env: str, allowed: tuple[str, ...]) -> str:
    """The value of an override variable (``auto`` when unset), checked against ``allowed``."""
    value = os.environ.get(env, "auto").strip().lower() or "auto"
    if value not in ("auto", *allowed):
        raise ValueError(f"{env}={value!r}: expected auto or one of {', '.join(allowed)}")
    return value


def choose_kernels(shape: AttentionShape | None, device: torch.device, dtype: torch.dtype,
                   group: Any = None) -> tuple[Kernels, JsonObject]:
    """The kernels of a cell on this rank, and what the choice was based on (for the record).

    CPU ranks always get :data:`EAGER` (SDPA's own choice, plain ops); the environment overrides are ignored there.
    On CUDA every rank of ``group`` must call this (``attention=auto`` agrees on the timings with a collective).

    Args:
        shape: the rank's attention problem (None: the model has no attention to time; ``auto`` gives default).
        device: the rank's device.
        dtype: the compute dtype (bf16 on GPUs).
        group: the ranks that must agree (default: all).
    """
    if device.type != "cuda":
        return EAGER, {"reason": "CPU ranks use plain PyTorch ops and SDPA's own backend"}
    want_attn = requested(ENV_ATTENTION, (*ATTENTION_BACKENDS, "default"))
    want_fused = requested(ENV_FUSED, FUSED_PROVIDERS)
    info: JsonObject = {"attention_requested": want_attn, "fused_requested": want_fused}
    if want_fused == "auto":
        fused = "liger" if liger_available() else "compile"
    else:
        fused = want_fused
        if fused == "liger" and not liger_available():
            raise RuntimeError(f"{ENV_FUSED}=liger but liger_kernel does not import here")
    expand = False
    if want_attn == "default":
        attn = "default"
    elif shape is None:
        attn = "default" if want_attn == "auto" else want_attn
    else:
        candidates = AUTO_ATTENTION_ORDER if want_attn == "auto" else (want_attn,)
        probe = _agree(probe_attention(shape, device, dtype, candidates), device, group)
        info["attention_probe"] = {"shape": asdict(shape), "dtype": str(dtype).replace("torch.", ""),
                                   "backends": probe, "pytorch_default": default_backend(shape, device, dtype)}
        best = _fastest(probe)
        if best is None:
            raise RuntimeError(f"no SDPA backend of {candidates} runs the attention {shape}: {probe}")
        attn, expand = best, bool(probe[best]["expand_kv"])
    return Kernels(attention=attn, fused=fused, expand_kv=expand), info

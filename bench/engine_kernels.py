#!/usr/bin/env python
"""One GPU: check and time the engine's kernel choices on Llama-3 8B blocks (attention backends, fused providers).

    PYTHONPATH=src python bench/engine_kernels.py --out DIR [--layers 4] [--seq 8192] [--reps 10]
    PYTHONPATH=src python bench/engine_kernels.py --dry-run --out DIR      # CPU: tiny shapes, eager only

What it does, writing ``DIR/engine_kernels.json`` after every part (a cut run keeps what was measured):

1. ``attention``: every SDPA backend (cudnn, flash, efficient) on the Llama-3 8B attention (1 x 32 heads x 8 K/V
   groups x seq x 128, bf16, causal): median forward+backward time and TFLOP/s (causal work: forward
   ``2 s^2 h d``, backward 2.5x), and the error of output and gradients against a float64 reference at seq 1024.
3. ``numerics``: one Llama block (Llama-3 8B head layout, narrower) and the output layer + loss, in bf16, for every
   fused provider (eager, compile, liger) x attention backend used below, against the same modules in float32 eager:
   ``||got - ref|| / ||ref||`` of the output, the input gradient and every weight gradient.
2. ``blocks``: ``--layers`` Llama-3 8B blocks (bf16 weights, sequence ``--seq``, micro-batch 1) forward+backward per
   variant, interleaved over ``--rounds`` rounds (median of ``--reps`` iterations each): milliseconds per layer and
   per-layer MFU (Megatron's full-attention FLOPs over the dense bf16 peak), plus the output layer + loss.
4. ``engine`` (skipped with ``--no-engine``): the real engine (DeepSpeed, ZeRO-1, bf16, fused AdamW) on one GPU with
   a ``--layers``-layer Llama-3 8B, today's kernels vs the automatic choice: step time, MFU, loss agreement.

Expected time on one H200: about 200 s (attention 10 s, blocks 80 s with compilation, numerics 40 s,
engine 60 s) plus imports. The variant table is printed last.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

PEAK_TFLOPS = 989.0  # dense bf16 of H100/H200 SXM (calorimeter.plan.hardware's h200 profile)
VARIANTS = [  # (name, attention, fused); "today": the engine's kernels before the automatic choice
    ("today", "default", "eager"),
    ("flash", "flash", "eager"),
    ("cudnn", "cudnn", "eager"),
    ("cudnn+compile", "cudnn", "compile"),
    ("cudnn+liger", "cudnn", "liger"),
    ("default+compile", "default", "compile"),
    ("default+liger", "default", "liger"),
]
ENGINE_VARIANTS = [  # (name, attention, fused, ZeRO stage)
    ("today", "default", "eager", 1), ("auto", "auto", "auto", 1), ("compile", "auto", "compile", 1),
    ("z3-today", "default", "eager", 3), ("z3-auto", "auto", "auto", 3), ("z3-compile", "auto", "compile", 3),
]
# blocks only: torch.compile of each whole block (exploration, not an engine mode)
BLOCK_COMPILE = "cudnn+block-compile"


def _save(out: Path, results: dict[str, Any]) -> None:
    tmp = out / "engine_kernels.json.tmp"
    tmp.write_text(json.dumps(results, indent=1, default=str))
    tmp.replace(out / "engine_kernels.json")


def _rel(got: torch.Tensor | None, ref: torch.Tensor | None) -> float:
    if got is None or ref is None:
        return float("nan")
    ref = ref.double()
    scale = float(ref.norm())
    return float((got.double() - ref).norm()) / scale if scale else float((got.double()).norm())


def _timed(fn: Any, reps: int, device: torch.device) -> float:
    """Median milliseconds of ``fn()`` after one warm-up call (:func:`calorimeter.telemetry.timer.time_calls`)."""
    from calorimeter.telemetry.timer import time_calls

    return statistics.median(time_calls(fn, device, reps)) * 1e3


def part_attention(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    from calorimeter.train import kernels as K

    spec = _spec(args)
    shape = K.AttentionShape(1, spec.num_attention_heads, spec.num_query_groups, args.seq, spec.head_dim)
    probe = K.probe_attention(shape, device, torch.bfloat16, (*K.AUTO_ATTENTION_ORDER, "default"))
    fwd = 2.0 * shape.seq**2 * shape.heads * shape.head_dim  # causal: half of 4 s^2 h d
    for r in probe.values():
        if "ms" in r:
            r["tflops_causal"] = 3.5 * fwd / (r["ms"] * 1e-3) / 1e12
    # accuracy against float64 at a shorter sequence
    s = min(args.seq, 1024)
    gen = torch.Generator(device=device).manual_seed(1)
    q = torch.randn(1, shape.heads, s, shape.head_dim, device=device, generator=gen)
    kv = [torch.randn(1, shape.groups, s, shape.head_dim, device=device, generator=gen) for _ in range(2)]
    g = torch.randn_like(q)
    leaves = [t.double().requires_grad_() for t in (q, *kv)]
    ref = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=True, enable_gqa=True)
    ref.backward(g.double())
    for name, r in probe.items():
        if "ms" not in r:
            continue
        xs = [t.to(torch.bfloat16).requires_grad_() for t in (q, *kv)]
        out = K.attention(*xs, K.Kernels(attention=name, expand_kv=r["expand_kv"]))
        out.backward(g.to(torch.bfloat16))
        r["rel_err"] = {"out": _rel(out, ref), **{f"d{n}": _rel(x.grad, lf.grad)
                                                  for n, x, lf in zip("qkv", xs, leaves, strict=True)}}
    return {"shape": dataclasses.asdict(shape), "backends": probe,
            "pytorch_default": K.default_backend(shape, device, torch.bfloat16)}


def _spec(args: argparse.Namespace, small: bool = False) -> Any:
    from calorimeter.plan.models import get_model

    base = get_model("tiny-llama" if args.dry_run else "llama3-8b")
    if small and not args.dry_run:  # same head layout (32 x 128, 8 groups), narrower and shorter
        return dataclasses.replace(base, num_layers=1, ffn_hidden_size=3584, vocab_size=32768)
    return dataclasses.replace(base, num_layers=args.layers)


def _blocks(spec: Any, kern: Any, n: int, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    from calorimeter.train.layers import TransformerBlock

    torch.manual_seed(0)
    with torch.device(device):
        return torch.nn.Sequential(*[TransformerBlock(spec, kern=kern) for _ in range(n)]).to(dtype)


def _head(spec: Any, kern: Any, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    from calorimeter.train.layers import OutputLayer

    torch.manual_seed(1)
    with torch.device(device):
        return OutputLayer(spec, kern=kern).to(dtype)


def _variants(args: argparse.Namespace, device: torch.device) -> list[tuple[str, Any]]:
    from calorimeter.train import kernels as K

    if device.type != "cuda":
        return [("today", K.EAGER)]
    out = []
    for name, attn, fused in VARIANTS:
        if fused == "liger" and not K.liger_available():
            continue
        out.append((name, K.Kernels(attention=attn, fused=fused)))
    return out


def part_numerics(args: argparse.Namespace, device: torch.device, variants: list[tuple[str, Any]]) -> dict[str, Any]:
    from calorimeter.train import kernels as K
    from calorimeter.train.layers import lm_loss

    spec = _spec(args, small=True)
    s = min(args.seq, 1024)
    gen = torch.Generator(device=device).manual_seed(2)
    x = torch.randn(1, s, spec.hidden_size, device=device, generator=gen)
    gy = torch.randn(1, s, spec.hidden_size, device=device, generator=gen)
    labels = torch.randint(0, spec.vocab_size, (1, s), device=device, generator=gen)

    def run(kern: Any, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        block, head = _blocks(spec, kern, 1, dtype, device), _head(spec, kern, dtype, device)
        xi = x.detach().clone().to(dtype).requires_grad_()
        y = block(xi)
        y.backward(gy.to(dtype))
        hi = x.detach().clone().to(dtype).requires_grad_()
        loss = lm_loss(head(hi), labels, kern)
        loss.backward()
        out = {"out": y.detach(), "dx": xi.grad, "loss": loss.detach(), "dx_head": hi.grad}
        out.update({f"d:{n}": p.grad for n, p in block.named_parameters()})
        out.update({f"d:head.{n}": p.grad for n, p in head.named_parameters()})
        return out

    ref = run(K.EAGER, torch.float32)
    result: dict[str, Any] = {"shape": {"seq": s, "hidden": spec.hidden_size, "ffn": spec.ffn_hidden_size,
                                        "vocab": spec.vocab_size}}
    for name, kern in variants:
        try:
            got = run(kern, torch.bfloat16 if device.type == "cuda" else torch.float32)
            errs = {k: _rel(got[k], v) for k, v in ref.items()}
            result[name] = {"max_rel_err": max(errs.values()), "rel_err": errs}
        except Exception as e:  # noqa: BLE001 - a variant that fails is a result
            result[name] = {"error": f"{type(e).__name__}: {e}"[:500], "traceback": traceback.format_exc()[-2000:]}
    return result


def part_blocks(args: argparse.Namespace, device: torch.device, variants: list[tuple[str, Any]]) -> dict[str, Any]:
    from calorimeter.plan.flops import layer_forward_flops
    from calorimeter.train.layers import lm_loss

    spec = _spec(args)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    dense, core = layer_forward_flops(spec, args.seq)
    layer_flops = 3 * (dense + core)  # Megatron's full-attention convention (mfu_full)
    head_flops = 3 * 2.0 * args.seq * spec.hidden_size * spec.vocab_size
    gen = torch.Generator(device=device).manual_seed(3)
    x = torch.randn(1, args.seq, spec.hidden_size, device=device, dtype=dtype, generator=gen)
    gy = torch.randn_like(x)
    labels = torch.randint(0, spec.vocab_size, (1, args.seq), device=device, generator=gen)
    built: dict[str, Any] = {}
    times: dict[str, dict[str, list[float]]] = {}
    from calorimeter.train import kernels as K

    todo = list(variants)
    if device.type == "cuda":
        todo.append((BLOCK_COMPILE, K.Kernels(attention="cudnn", fused="eager")))
    for name, kern in todo:
        try:
            blocks, head = _blocks(spec, kern, args.layers, dtype, device), _head(spec, kern, dtype, device)
            if name == BLOCK_COMPILE:
                for blk in blocks:
                    blk.compile(dynamic=False)
        except Exception as e:  # noqa: BLE001
            times[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
            continue
        xi = x.clone().requires_grad_()

        def fwd_bwd(blocks: Any = blocks, xi: Any = xi) -> None:
            blocks(xi).backward(gy)
            blocks.zero_grad(set_to_none=True)

        def loss_step(head: Any = head, kern: Any = kern) -> None:
            hi = x.detach().requires_grad_()
            lm_loss(head(hi), labels, kern).backward()
            head.zero_grad(set_to_none=True)

        built[name] = (fwd_bwd, loss_step)
        times[name] = {"blocks_ms": [], "head_ms": []}
    for _ in range(args.rounds):  # interleaved rounds: drift (clocks, temperature) hits every variant alike
        for name, (fwd_bwd, loss_step) in built.items():
            try:
                times[name]["blocks_ms"].append(_timed(fwd_bwd, args.reps, device))
                times[name]["head_ms"].append(_timed(loss_step, max(2, args.reps // 2), device))
            except Exception as e:  # noqa: BLE001
                times[name]["error"] = f"{type(e).__name__}: {e}"[:300]
    result: dict[str, Any] = {"layers": args.layers, "seq": args.seq, "layer_flops": layer_flops,
                              "head_flops": head_flops, "peak_tflops": PEAK_TFLOPS}
    if device.type == "cuda":
        result["top_kernels"] = {name: _top_kernels(fns[0]) for name, fns in built.items()
                                 if "error" not in times[name]}
    for name, t in times.items():
        if "error" in t or not t["blocks_ms"]:
            result[name] = t
            continue
        per_layer = statistics.median(t["blocks_ms"]) / args.layers
        head = statistics.median(t["head_ms"])
        whole = spec_total_ms(per_layer, head)
        result[name] = {
            "ms_per_layer": per_layer, "ms_per_layer_rounds": [v / args.layers for v in t["blocks_ms"]],
            "layer_mfu": layer_flops / (per_layer * 1e-3) / (PEAK_TFLOPS * 1e12),
            "head_loss_ms": head, "head_mfu": head_flops / (head * 1e-3) / (PEAK_TFLOPS * 1e12),
            "llama3_8b_seq_ms": whole,
            "llama3_8b_mfu_no_optimizer": (32 * layer_flops + head_flops) / (whole * 1e-3) / (PEAK_TFLOPS * 1e12),
        }
    for kern_fns in built.values():
        del kern_fns
    return result


def _top_kernels(fn: Any, n: int = 12) -> list[dict[str, Any]]:
    """The ``n`` GPU kernels with the most time in one call of ``fn`` (torch.profiler), for what-runs-where."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    rows = [(e.key, e.device_time_total, e.count) for e in prof.key_averages()]
    rows.sort(key=lambda r: -r[1])
    return [{"name": k[:140], "ms": t / 1e3, "count": c} for k, t, c in rows[:n]]


def spec_total_ms(per_layer_ms: float, head_ms: float, layers: int = 32) -> float:
    """Forward+backward of one sequence through the full 32-layer model, from per-layer and head timings."""
    return layers * per_layer_ms + head_ms


def part_engine(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """The real engine on one GPU: DeepSpeed ZeRO-1 bf16, ``--layers`` Llama-3 8B layers, today vs auto kernels."""
    import os

    import torch.distributed as dist

    from calorimeter.plan.cell import Cell
    from calorimeter.plan.flops import iteration_flops
    from calorimeter.train.data import BatchLayout, make_source, micro_batches
    from calorimeter.train.engine import build_engine, release_engine

    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", device_id=device
                                if device.type == "cuda" else None)
    spec = _spec(args)
    base = Cell(sweep="bench", model="llama3-8b" if not args.dry_run else "tiny-llama",
                hardware="h200" if device.type == "cuda" else "cpu", nodes=1, gpus_per_node=1, zero_stage=1,
                overlap=True, micro_batch=1, global_batch=2, seq_len=args.seq,
                precision="bf16" if device.type == "cuda" else "fp32", lr=1e-4)
    flops = iteration_flops(spec, base.seq_len, base.global_batch).model_flops
    out: dict[str, Any] = {"cell": base.cell_id, "layers": spec.num_layers}
    for name, attn, fused, stage in ENGINE_VARIANTS:
        os.environ["CALORIMETER_ATTENTION"], os.environ["CALORIMETER_FUSED"] = attn, fused
        cell = dataclasses.replace(base, zero_stage=stage)
        try:
            te = build_engine(cell, spec, device)
            layout = BatchLayout(cell.global_batch, cell.micro_batch, 1, 0)
            batches = micro_batches(make_source(None, spec.vocab_size, cell.seq_len, cell.seed), layout,
                                    device=device)
            losses, times = [], []
            for _ in range(args.engine_steps):
                torch.cuda.synchronize(device) if device.type == "cuda" else None
                t = time.perf_counter()
                total = 0.0
                for _ in range(layout.grad_accum):
                    inputs, labels = next(batches)
                    loss = te.engine(inputs, labels)
                    te.engine.backward(loss)
                    te.engine.step()
                    total += float(loss.detach())
                times.append(time.perf_counter() - t)
                losses.append(total / layout.grad_accum)
            meas = times[2:] or times
            step = statistics.median(meas)
            out[name] = {"kernels": te.engine_info["kernels"], "choice": te.engine_info["kernel_choice"],
                         "step_s": step, "steps_s": times, "losses": losses,
                         "mfu": flops / step / (PEAK_TFLOPS * 1e12),
                         "peak_memory_gb": torch.cuda.max_memory_allocated(device) / 1e9
                         if device.type == "cuda" else None}
            release_engine(te)
        except Exception as e:  # noqa: BLE001
            out[name] = {"error": f"{type(e).__name__}: {e}"[:500], "traceback": traceback.format_exc()[-3000:]}
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
    for k in ("CALORIMETER_ATTENTION", "CALORIMETER_FUSED"):
        os.environ.pop(k, None)
    for name, _, _, stage in ENGINE_VARIANTS:
        ref = "today" if stage == 1 else "z3-today"
        if name != ref and "losses" in out.get(ref, {}) and "losses" in out.get(name, {}):
            a, b = out[ref]["losses"], out[name]["losses"]
            out[name]["loss_max_rel_diff_vs_today"] = max(abs(x - y) / abs(x) for x, y in zip(a, b, strict=True))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--engine-steps", type=int, default=5)
    ap.add_argument("--parts", default="attention,numerics,blocks,engine")
    ap.add_argument("--dry-run", action="store_true", help="CPU: tiny model, eager kernels only")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda", 0) if torch.cuda.is_available() and not args.dry_run else torch.device("cpu")
    if args.dry_run:
        args.seq, args.layers, args.reps, args.rounds, args.engine_steps = 64, 2, 2, 1, 3
    from calorimeter.train import kernels as K

    results: dict[str, Any] = {
        "env": {"torch": torch.__version__, "cuda": torch.version.cuda, "device": str(device),
                "name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None,
                "liger": K.liger_available(),
                # the output folder is where it ran, not a fact of the result (and a machine path)
                "args": {k: str(v) for k, v in vars(args).items() if k != "out"}}}
    _save(args.out, results)
    variants = _variants(args, device)
    parts = args.parts.split(",")
    for part, fn in [("attention", lambda: part_attention(args, device)),
                     ("blocks", lambda: part_blocks(args, device, variants)),
                     ("numerics", lambda: part_numerics(args, device, variants)),
                     ("engine", lambda: part_engine(args, device))]:
        if part not in parts or (part == "attention" and device.type != "cuda"):
            continue
        t0 = time.perf_counter()
        try:
            results[part] = fn()
        except Exception as e:  # noqa: BLE001 - keep going: the other parts still measure
            results[part] = {"error": f"{type(e).__name__}: {e}"[:500], "traceback": traceback.format_exc()[-3000:]}
        results[part]["wall_s"] = time.perf_counter() - t0
        _save(args.out, results)
        print(f"== {part} done in {time.perf_counter() - t0:.1f} s", flush=True)
    _print(results)
    return 0


def _print(r: dict[str, Any]) -> None:
    print(json.dumps(r["env"]))
    for name, b in (r.get("attention", {}).get("backends") or {}).items():
        print(f"attention {name:10s} " + (f"{b['ms']:8.2f} ms {b.get('tflops_causal', 0):6.0f} TFLOP/s "
                                          f"expand_kv={b['expand_kv']} err={b.get('rel_err')}"
                                          if "ms" in b else f"unavailable: {b.get('error')}"))
    num, blk = r.get("numerics", {}), r.get("blocks", {})
    print(f"{'variant':16s} {'ms/layer':>9s} {'layer MFU':>9s} {'head ms':>8s} {'8B MFU*':>8s} {'max rel err':>11s}")
    for name in [v[0] for v in VARIANTS] + [BLOCK_COMPILE]:
        b, n = blk.get(name, {}), num.get(name, {})
        if not b and not n:
            continue
        if "ms_per_layer" in b:
            print(f"{name:16s} {b['ms_per_layer']:9.2f} {b['layer_mfu']:9.1%} {b['head_loss_ms']:8.2f} "
                  f"{b['llama3_8b_mfu_no_optimizer']:8.1%} {n.get('max_rel_err', float('nan')):11.2e}")
        else:
            print(f"{name:16s} error: {b.get('error') or n.get('error')}")
    eng = r.get("engine", {})
    for name, *_ in ENGINE_VARIANTS:
        e = eng.get(name, {})
        print(f"engine {name}: " + (f"step {e['step_s']:.3f} s MFU {e['mfu']:.1%} kernels {e['kernels']} "
                                    f"mem {e['peak_memory_gb']} GB" if "step_s" in e else str(e.get("error"))))
        if "loss_max_rel_diff_vs_today" in e:
            print(f"   loss max rel diff vs today's kernels over {len(e['losses'])} steps: "
                  f"{e['loss_max_rel_diff_vs_today']:.2e}")
    print("(* whole Llama-3 8B from per-layer and head times, no optimizer, no communication)")


if __name__ == "__main__":
    sys.exit(main())

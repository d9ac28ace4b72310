#!/usr/bin/env python
"""Engine speed, side by side in one run: plain FSDP2, the best dense Llama-3 8B cells and the TP layouts, each
before (today's kernels, no tensor-parallel overlap) and after (chosen kernels, ``overlap: true``'s TP overlap).

    python bench/engine_speed.py --out DIR [--gpus 2] [--budget-s 340]      # on a GPU node (bench/gpu/engine_speed.sh)
    python bench/engine_speed.py --out DIR --dry-run                         # CPU: tiny-llama, 2 gloo ranks

Variants run one after another, each in its own ``torchrun`` (a crash, a hang or memory left behind by one cannot
touch the others; ``--only`` names them). Every variant trains the real engine
(:func:`calorimeter.train.loop.train_cell`: warm-up, measured steps, one profiled step traced with torch.profiler)
and appends one JSON line to ``DIR/engine_speed.jsonl`` as soon as it is done: MFU (Megatron's full-attention
convention, the study's), tokens/s/GPU, the kernels and overlap used (as recorded in run.json), and the kernel-trace
breakdown of the profiled step of rank 0 (busy, compute, communication, exposed communication = communication not
under any compute kernel, per collective). Per-rank records go to ``--work`` (tarred to ``DIR/variants.tar.gz``
after each variant), logs to ``DIR/variants.log`` and ``DIR/fsdp2.log``. ``DIR/summary.md`` is rewritten after
every variant: before/after per layout, the ratio to FSDP2 and the speed targets (best dense >= 55% MFU and
>= 1.10x FSDP2; exposed communication of every TP layout at most half of today's).

Llama-3 8B, sequence 8192, micro-batch 1, global batch 8 (grad-accumulation 4 at dp2, 8 at tp2), bf16, 2 warm-up +
3 measured + 1 profiled step. In order (2 GPUs): ``z3-today``, ``z3-after`` (ZeRO-3 dp2 before/after), ``z1-after``
(ZeRO-1 dp2: out of memory before, when the loss made an fp32 copy of the logits), ``fsdp2``
(bench/fsdp2_llama_baseline.py at the same global batch: 6 optimizer steps of 4 micro-batches), ``tp-today``,
``tp-after-ov``, ``tp-after``, ``tp-after-noov`` (TP2 + SP: today, after with the ring overlap, after with what
``overlap: true`` takes by default, PyTorch's symmetric-memory async TP on one NCCL host, and after without
overlap), ``z2-today``, ``z2-after``, ``pp2-today``, ``pp2-after`` (1F1B over 8 micro-batches),
``pp2-after-gb128`` (the study's global batch, 128 micro-batches a step: 1 warm-up + 2 measured steps, not profiled).
About 55 s each on 2x H200 (FSDP2 60, gb128 200), ~890 s in all (two runs of at most 10 minutes: ``--only``); a
variant whose estimate no longer fits ``--budget-s`` is skipped and says so, and one that runs past 4 times its
estimate is stopped.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tarfile
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Variant:
    """One measured configuration: a cell's layout and knobs plus the kernel overrides."""

    name: str
    layout: str  # what is compared before/after: "dense-z3", "tp2-sp", ...
    phase: str  # "today" or "after"
    cell: dict[str, Any]
    attention: str = "auto"
    fused: str = "auto"
    tp_overlap: str = "auto"  # CALORIMETER_TP_OVERLAP: the mechanism of overlap under tp > 1 with SP
    profile: bool = True  # trace one more step with torch.profiler (the kernel breakdown)
    estimate_s: float = 55.0  # on 2x H200, start to end


def plan(dry_run: bool, gpus: int) -> list[Variant]:
    """The variants of one run, in order (``fsdp2``: the peer baseline, bench/fsdp2_llama_baseline.py)."""
    # Fixed short runs (no steady-temperature warm-up: it may take minutes per cell), variants back to back: the
    # first runs on the coolest GPU, and "today" comes first, which if anything favours today.
    base = dict(sweep="engine-speed", model="llama3-8b", hardware="h200", nodes=1, gpus_per_node=gpus,
                micro_batch=1, global_batch=8, seq_len=8192, warmup="fixed", warmup_steps=2, measured_steps=3,
                measured_min_s=0.0, precision="bf16", lr=1e-4)
    if dry_run:
        base.update(model="tiny-llama", hardware="cpu", seq_len=64, global_batch=4, precision="fp32", lr=1e-3,
                    warmup_steps=1, measured_steps=2)
    today = {"attention": "default", "fused": "eager"}
    z3 = {**base, "zero_stage": 3, "overlap": True}
    tp = {**base, "tp": gpus, "sequence_parallel": True, "zero_stage": 1}
    pp = {**base, "pp": gpus, "zero_stage": 1}
    variants = [
        Variant("z3-today", "dense-z3", "today", z3, **today),
        Variant("z3-after", "dense-z3", "after", z3),
        Variant("z1-after", "dense-z1", "after", {**base, "zero_stage": 1, "overlap": True}),
        Variant("tp-today", "tp-sp", "today", {**tp, "overlap": False}, **today),
        Variant("tp-after-ov", "tp-sp", "after", {**tp, "overlap": True}, tp_overlap="ring"),
        Variant("tp-after", "tp-sp", "after", {**tp, "overlap": True}),  # auto: symmetric memory on one NCCL host
        Variant("tp-after-noov", "tp-sp-noov", "after", {**tp, "overlap": False}),
        Variant("z2-today", "dense-z2", "today", {**base, "zero_stage": 2, "overlap": True}, **today),
        Variant("z2-after", "dense-z2", "after", {**base, "zero_stage": 2, "overlap": True}),
        Variant("pp2-today", "pp2", "today", pp, **today),
        Variant("pp2-after", "pp2", "after", pp),
        # the study's global batch: 128 micro-batches a step, so the pipeline bubble is the study's (~55 s a step)
        Variant("pp2-after-gb128", "pp2-gb128", "after",
                {**pp, "global_batch": 128, "warmup_steps": 1, "measured_steps": 2}, profile=False, estimate_s=200),
    ]
    # most important first: dense before/after, FSDP2, then TP
    variants.insert(3, Variant("fsdp2", "fsdp2", "peer", {}, estimate_s=60))
    if dry_run:
        variants = [replace(v, estimate_s=60) for v in variants if v.name != "fsdp2"]
    return variants


# --------------------------------------------------------------------------------------------------------------
# worker: one torchrun process per rank and variant (in one process a variant's memory was not all returned to the
# next: 2x H200, 2026-11-23, z3-after and z2-after ran out of memory at 146 GB after z3-today; z1-after alone 130 GB)
# --------------------------------------------------------------------------------------------------------------

def _worker(out: Path, work: Path, v: Variant) -> None:
    import torch.distributed as dist

    from calorimeter.plan.cell import Cell
    from calorimeter.plan.hardware import PROFILES
    from calorimeter.records.metrics import step_times_s, throughput_metrics
    from calorimeter.train.errors import CellOOMError
    from calorimeter.train.loop import train_cell

    device = _join_torchrun_group(timeout_s=180)
    os.environ["CALORIMETER_ATTENTION"], os.environ["CALORIMETER_FUSED"] = v.attention, v.fused
    os.environ["CALORIMETER_TP_OVERLAP"] = v.tp_overlap
    cell = Cell.from_dict(v.cell)
    vdir = work / v.name
    t0 = time.time()
    row: dict[str, Any] = {"variant": v.name, "layout": v.layout, "phase": v.phase, "cell_id": cell.cell_id,
                           "overrides": {"attention": v.attention, "fused": v.fused, "tp_overlap": v.tp_overlap}}
    try:
        record = train_cell(cell, vdir, device, profile_steps=1 if v.profile else 0).to_dict()
        status = "ok"
    except CellOOMError as e:
        record, status = {"steps": [], "peak_memory_bytes": e.peak_memory_bytes, "error": str(e)}, "oom"
    except Exception as e:  # noqa: BLE001 - recorded, if the ranks are still in step
        record, status = {"steps": [], "error": f"{type(e).__name__}: {e}"[:800],
                          "traceback": traceback.format_exc()[-3000:]}, "failed"
    records: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(records, {"status": status, **{k: record.get(k) for k in (
        "steps", "peak_memory_bytes", "engine", "error", "traceback", "traced", "stage", "tp_rank")}})
    if dist.get_rank() == 0:
        row["status"] = "ok" if all(r["status"] == "ok" for r in records) else next(
            r["status"] for r in records if r["status"] != "ok")
        row["wall_s"] = time.time() - t0
        if row["status"] == "ok":
            peak = PROFILES[cell.hardware].peak_bf16_tflops if cell.hardware in PROFILES else None
            row["metrics"] = throughput_metrics(cell, step_times_s([r["steps"] for r in records]), peak)
            row["losses"] = [s["loss"] for s in records[0]["steps"]]
            row["engine"] = records[0]["engine"]
            row["peak_memory_gb"] = max(r["peak_memory_bytes"] or 0 for r in records) / 1e9
            row["kernels"] = _trace_breakdown(vdir) if v.profile else {"error": "not profiled"}
        else:
            row["errors"] = [{"rank": i, "status": r["status"], "error": r.get("error"),
                              "traceback": r.get("traceback")} for i, r in enumerate(records)
                             if r["status"] != "ok"][:2]
        with (out / "engine_speed.jsonl").open("a") as fh:
            fh.write(json.dumps(row, default=str) + "\n")
        print("RESULT " + _line(row), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def _join_torchrun_group(timeout_s: float) -> Any:
    """NCCL (one GPU per local rank) or gloo from torchrun's RANK / WORLD_SIZE / LOCAL_RANK variables; returns this
    rank's device."""
    import datetime

    import torch
    import torch.distributed as dist

    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=timeout_s), device_id=device)
        return device
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    return torch.device("cpu")


def _write_events(trace: dict[str, Any], cats: set[str], dest: Path) -> None:
    """The trace's complete events of ``cats`` as a compact CSV (category, name, start from the first, duration,
    stream)."""
    import pandas as pd

    events = [e for e in trace.get("traceEvents", []) if e.get("cat") in cats and e.get("ph") == "X" and "dur" in e]
    if not events:
        return
    t0 = min(float(e["ts"]) for e in events)
    pd.DataFrame({"cat": [e["cat"] for e in events], "name": [str(e.get("name", ""))[:160] for e in events],
                  "start_us": [round(float(e["ts"]) - t0, 1) for e in events],
                  "dur_us": [round(float(e["dur"]), 1) for e in events],
                  "stream": [(e.get("args") or {}).get("stream", e.get("tid")) for e in events]},
                 ).to_csv(dest, index=False, compression="gzip")


def _trace_breakdown(vdir: Path) -> dict[str, Any]:
    """Kernel and copy breakdown of the profiled step of every traced rank (interval unions; telemetry.kernels).

    Two views: ``ranks`` (peer copies and collective kernels are communication, local copies compute) and
    ``strict`` (every copy is communication: a copy from peer memory mapped into this GPU's address space may be
    recorded as a local ``Memcpy DtoD``, so this bounds the exposed communication of copy-engine paths from above).
    Rank 0's kernels, copies and GPU annotations are kept as ``events-rank0.csv.gz`` for later reading; the traces
    themselves are deleted (too large).
    """
    from calorimeter.records.paths import RunPaths
    from calorimeter.telemetry.kernels import (
        CATEGORIES,
        TRACE_EVENT_CATEGORIES,
        categorize_kernel,
        copies_as_comm,
        kernel_breakdown,
        kernel_events,
        kernel_table,
        load_trace,
        trace_rank,
    )

    traces = sorted(RunPaths(vdir).traces.glob("rank-*.json*"), key=lambda p: trace_rank(p) or 0)
    if not traces:
        return {"error": "no trace"}
    cats = TRACE_EVENT_CATEGORIES
    views = {"ranks": categorize_kernel, "strict": copies_as_comm}
    out: dict[str, Any] = {view: [] for view in views}
    for path in traces:  # each trace read once (they are large), both views from its events
        trace = load_trace(path)
        events = kernel_events(trace, cats)
        for view, categorize in views.items():
            r = kernel_breakdown(events, categorize).as_row()
            row = {"rank": trace_rank(path, trace), **{k: float(r[k]) for k in (
                "busy_s", "compute_s", "comm_s", "comm_exposed_s", "overlap_s", "span_s")}}
            for c in CATEGORIES:
                row[f"{c}_union_s"] = float(r[f"{c}_union_s"])
                row[f"{c}_sum_s"] = float(r[f"{c}_sum_s"])
            row["exposed_comm_frac"] = row["comm_exposed_s"] / row["span_s"] if row["span_s"] else float("nan")
            row["idle_s"] = row["span_s"] - row["busy_s"]  # no kernel or copy: host gaps, syncs, stream waits
            out[view].append(row)
        if path == traces[0]:
            top = kernel_table(events).head(30)
            out["top_kernels_rank0"] = [{"name": n[:120], "category": c, "count": int(k), "sum_s": float(s)}
                                        for n, c, k, s in zip(top["name"], top["category"], top["count"],
                                                              top["sum_s"], strict=True)]
            _write_events(trace, {*cats, "gpu_user_annotation"}, vdir / "events-rank0.csv.gz")
    for t in traces:  # traces are large: keep only the breakdown and rank 0's compact events
        t.unlink()
    return out


# --------------------------------------------------------------------------------------------------------------
# orchestrator
# --------------------------------------------------------------------------------------------------------------

def _line(row: dict[str, Any]) -> str:
    if row.get("status") != "ok":
        err = (row.get("errors") or [{}])[0].get("error")
        return f"{row['variant']:14s} {row.get('status')}: {err}"
    m = row["metrics"]
    k = (row.get("kernels") or {}).get("ranks") or [{}]
    exp = k[0].get("exposed_comm_frac", float("nan"))
    kern = row["engine"]["kernels"]
    return (f"{row['variant']:14s} MFU {m['mfu_full']:6.1%}  {m['tokens_per_s_per_gpu']:7.0f} tok/s/GPU  "
            f"step {m['iteration_time_s']:.3f}s  exposed comm {exp:5.1%} "
            f"({k[0].get('comm_exposed_s', float('nan')):.3f}s of {k[0].get('span_s', float('nan')):.3f}s)  "
            f"mem {row['peak_memory_gb']:.1f} GB  attn={kern['attention']} fused={kern['fused']} "
            f"tp_overlap={row['engine']['overlap']['tp_comm_overlap']}")


def _run(cmd: list[str], env: dict[str, str], timeout_s: float, log: Path) -> tuple[int, str]:
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        try:
            p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=max(10.0, timeout_s), cwd=ROOT)
            text, rc = p.stdout, p.returncode
        except subprocess.TimeoutExpired as e:
            text = (e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""))
            rc = 124
        fh.write(text)
    return rc, text


def _fsdp2(out: Path, gpus: int, env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    accum = max(1, 8 // gpus)  # the engine cells' global batch of 8 (micro-batch 1)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(gpus),
           str(ROOT / "bench" / "fsdp2_llama_baseline.py"), "8192", "1", "6", f"accum={accum}"]
    t0 = time.time()
    rc, text = _run(cmd, env, timeout_s, out / "fsdp2.log")
    row: dict[str, Any] = {"variant": "fsdp2", "layout": "fsdp2", "phase": "peer", "wall_s": time.time() - t0,
                           "global_batch": accum * gpus}
    m = re.search(r"RESULT .*step ([\d.]+)s tokens/s/GPU (\d+) TFLOP/s/GPU (\d+) MFU ([\d.]+)% peak mem ([\d.]+)",
                  text)
    if rc == 0 and m:
        row.update(status="ok", metrics={"iteration_time_s": float(m[1]), "tokens_per_s_per_gpu": float(m[2]),
                                         "model_tflops_per_gpu": float(m[3]), "mfu_full": float(m[4]) / 100},
                   peak_memory_gb=float(m[5]) * 2**30 / 1e9)
    else:
        row.update(status="failed", errors=[{"error": f"rc {rc}: " + "\n".join(text.splitlines()[-5:])}])
    with (out / "engine_speed.jsonl").open("a") as fh:
        fh.write(json.dumps(row) + "\n")
    print("RESULT fsdp2 " + (f"MFU {row['metrics']['mfu_full']:.1%} {row['metrics']['tokens_per_s_per_gpu']:.0f} "
                             f"tok/s/GPU" if row["status"] == "ok" else row["errors"][0]["error"]), flush=True)
    return row


def _mfu_or(row: dict[str, Any], nan_as: float = float("nan")) -> float:
    v = row["metrics"].get("mfu_full", float("nan"))
    return nan_as if math.isnan(v) else v


def summarize(rows: list[dict[str, Any]]) -> str:
    """Markdown: every variant, then before/after per layout and the speed targets."""
    ok = {r["variant"]: r for r in rows if r.get("status") == "ok"}
    lines = ["| variant | layout | kernels (attention / fused) | TP overlap | MFU | tokens/s/GPU | step s | "
             "exposed comm s (frac) | comm s | idle s | peak mem GB |", "|" + "---|" * 11]
    for r in rows:
        if r.get("status") != "ok":
            lines.append(f"| {r['variant']} | {r.get('layout')} | | | {r.get('status')} | | | | | | |")
            continue
        m, e = r["metrics"], r.get("engine") or {}
        k = ((r.get("kernels") or {}).get("ranks") or [{}])[0]
        kern = e.get("kernels", {})
        lines.append(
            f"| {r['variant']} | {r['layout']} | {kern.get('attention', '-')} / {kern.get('fused', '-')} | "
            f"{(e.get('overlap') or {}).get('tp_comm_overlap', '-')} | {m['mfu_full']:.1%} | "
            f"{m['tokens_per_s_per_gpu']:.0f} | {m['iteration_time_s']:.3f} | "
            + (f"{k['comm_exposed_s']:.3f} ({k['exposed_comm_frac']:.1%}) | {k['comm_s']:.3f} | {k['idle_s']:.3f} |"
               if k else "| | |")
            + f" {r.get('peak_memory_gb', float('nan')):.1f} |")
    lines.append("")
    fsdp2 = ok.get("fsdp2")
    dense_after = [r for r in ok.values() if r["layout"].startswith("dense") and r["phase"] == "after"]
    if dense_after and all(math.isnan(r["metrics"]["mfu_full"]) for r in dense_after):
        lines.append("- no MFU: the hardware profile has no dense peak (CPU dry run); targets not evaluated")
    elif dense_after:
        best = max(dense_after, key=lambda r: _mfu_or(r, -1.0))
        ratio = (best["metrics"]["tokens_per_s_per_gpu"] / fsdp2["metrics"]["tokens_per_s_per_gpu"]
                 if fsdp2 else float("nan"))
        lines.append(f"- best dense after: {best['variant']} {best['metrics']['mfu_full']:.1%} MFU "
                     f"(target >= 55%: {'met' if best['metrics']['mfu_full'] >= 0.55 else 'MISSED'}); "
                     f"{ratio:.3f}x FSDP2 (target >= 1.10: {'met' if ratio >= 1.10 else 'MISSED'})")
    for today in [r for r in ok.values() if r["phase"] == "today"]:
        for after in [r for r in ok.values() if r["phase"] == "after" and r["layout"] == today["layout"]]:
            a, b = _mfu_or(today), _mfu_or(after)
            lines.append(f"- {today['layout']}: {today['variant']} {a:.1%} -> {after['variant']} {b:.1%} MFU "
                         f"({b / a:.3f}x)")
    if "pp2-after" in ok and "pp2-after-gb128" in ok:
        a, b = _mfu_or(ok["pp2-after"]), _mfu_or(ok["pp2-after-gb128"])
        lines.append(f"- pp2 at the study's global batch: gb 8 {a:.1%} -> gb 128 {b:.1%} MFU ({b / a:.3f}x; 1F1B "
                     f"bubble (p-1)/(m+p-1): 1/9 of the step at gb 8, 1/129 at gb 128)")
    if "tp-today" in ok:
        # today's exposed communication (collective kernels, copies as compute) against each after-variant's strict
        # view (every copy counted as communication): the comparison can only understate the gain
        before = ((ok["tp-today"].get("kernels") or {}).get("ranks") or [{}])[0]
        for name in [r["variant"] for r in ok.values() if r["layout"].startswith("tp-sp") and r["phase"] == "after"]:
            kern = ok[name].get("kernels") or {}
            after = (kern.get("strict") or kern.get("ranks") or [{}])[0]
            if before and after and before["span_s"] > 0:
                half = after["comm_exposed_s"] <= 0.5 * before["comm_exposed_s"]
                lines.append(
                    f"- TP {name}: MFU {_mfu_or(ok['tp-today']):.1%} -> {_mfu_or(ok[name]):.1%}; "
                    f"exposed comm {before['comm_exposed_s']:.3f}s ({before['exposed_comm_frac']:.1%}) -> "
                    f"{after['comm_exposed_s']:.3f}s ({after['exposed_comm_frac']:.1%}, copies as communication)"
                    + (f" (target <= half: {'met' if half else 'MISSED'})" if ok[name]["layout"] == "tp-sp" else ""))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=340.0, help="skip variants whose estimate no longer fits")
    ap.add_argument("--only", default="", help="comma-separated variant names")
    ap.add_argument("--dry-run", action="store_true", help="CPU: tiny-llama on 2 gloo ranks, no FSDP2")
    ap.add_argument("--work", type=Path, default=None,
                    help="per-variant records (default OUT/variants); tarred to OUT/variants.tar.gz after each variant")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work or args.out / "variants"
    variants = plan(args.dry_run, args.gpus)
    if args.worker:
        _worker(args.out, work, next(v for v in variants if v.name == args.worker))
        return 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
           "PYTHONUNBUFFERED": "1", "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
           "NVSHMEM_DISABLE_NVLS": "1"}
    if args.dry_run:
        env.update(DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    t_start = time.time()
    rows: list[dict[str, Any]] = []
    jsonl = args.out / "engine_speed.jsonl"
    for v in variants:
        if args.only and v.name not in args.only.split(","):
            continue
        left = args.budget_s - (time.time() - t_start)
        if v.estimate_s > left:
            print(f"== skipping {v.name}: estimate {v.estimate_s:.0f} s > {left:.0f} s left", flush=True)
            rows.append({"variant": v.name, "layout": v.layout, "status": f"skipped (budget, {left:.0f} s left)"})
            continue
        print(f"== {v.name} (~{v.estimate_s:.0f} s)", flush=True)
        before = len(jsonl.read_text().splitlines()) if jsonl.exists() else 0
        if v.name == "fsdp2":
            _fsdp2(args.out, args.gpus, env, min(left, 2 * v.estimate_s))
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(args.gpus),
                   "--master_port", str(29500 + len(rows) % 50), str(Path(__file__).resolve()), "--out",
                   str(args.out), "--work", str(work), "--gpus", str(args.gpus), "--worker", v.name]
            cmd += ["--dry-run"] if args.dry_run else []
            # a hung variant (a rank waiting on a dead peer) must not take the rest of the run
            rc, text = _run(cmd, env, min(left, 4 * v.estimate_s), args.out / "variants.log")
            for line in text.splitlines():
                if line.startswith("RESULT") or "Error" in line:
                    print(line[:400], flush=True)
            if rc != 0:
                print(f"== {v.name} exited with {rc} (see variants.log)", flush=True)
        new = [json.loads(x) for x in jsonl.read_text().splitlines()[before:]] if jsonl.exists() else []
        rows += new or [{"variant": v.name, "layout": v.layout, "status": "not run (its process ended early)"}]
        (args.out / "summary.md").write_text(summarize(rows))
        if work.exists():
            with tarfile.open(args.out / "variants.tar.gz.tmp", "w:gz") as tar:
                tar.add(work, arcname="variants")
            (args.out / "variants.tar.gz.tmp").replace(args.out / "variants.tar.gz")
    print((args.out / "summary.md").read_text())
    print(f"== done in {time.time() - t_start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())


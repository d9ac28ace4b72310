"""``calorimeter export --format charllm-ppt``: a sweep's records in the file layout of the study's own artifact
(github.com/sitar-lab/CharLLM-PPT, ``scripts/visualization/``), so that the authors' plotting scripts draw
calorimeter measurements.

Written under ``OUT/results/`` (the artifact's ``${CHARLLM_ROOT}/CharLLM-PPT/results``):

* ``optimization-sweep-<hw>[-fsdp]/<model>/<model>_<p>_<A><B>000/``: each ok cell at its layout's smallest
  micro-batch; ``A`` = overlap (the study's "cc"), ``B`` = recomputation on ("act"); ZeRO-3 layouts go to
  ``-fsdp``. ``p`` numbers the layouts of a model (FSDP from 5 up, as the artifact), the manifest gives the labels.
* ``microbatch-sweep-<hw>[-fsdp]/<model>/<model>_<p>_mbs<m>/``: cells with recomputation on and overlap off, per
  micro-batch; an empty folder for a (layout, micro-batch) the sweep lacks keeps the artifact's per-model
  normalisation aligned (the scripts draw it as "OOM").
* In each run folder, per **global rank** ``r``, the 12 headerless ``<unix time>,<value>`` files the artifact's
  Zeus fork writes: ``gpu_power`` (W, NVML instant power), ``mem_power`` (W, NVML's memory power average),
  ``gpu_thermal``/``mem_thermal`` (degC), ``sm_clock``/``mem_clock`` (MHz), ``gpu_util``/``mem_util`` (%),
  ``nvlink_{rx,tx}_throughput`` (cumulative KiB: calorimeter's NVLink *data* counter summed over all links, **not**
  the artifact's link-0 raw counter), ``pcie_{rx,tx}_bytes`` (cumulative bytes, full 64-bit; docs/findings.md says
  why these counters do not measure the training's transfers on the measured hosts). NVML read errors are dropped,
  never written as -1. Counters are written as integers.
* The window: one iteration per rank, the rank's own last **measured** step (the artifact monitors one iteration),
  or with ``window="measured"`` every measured step.
* ``kineto-<sweep dir>/<model>/<run>_kernel_stats.csv``: one pseudo-kernel row per calorimeter kernel category and
  traced rank (stage order), named so that the artifact's ``categorize_kernel`` puts it in the intended bar
  (:data:`PSEUDO_KERNELS`); durations in microseconds. Real kernel names are not kept in the records.
* ``calorimeter_manifest.json``: per exported cell its folder, global batch, sequence length, world size, repetition,
  status and calorimeter's own iteration time, energy per iteration and efficiency (the artifact format has no field
  for them: its scripts assume global batch 128); the per-model ``get_model_parallel_configs()`` table and what
  was not exported, with the reason.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calorimeter.plan.kinds import kind_of
from calorimeter.records.atomic import write_atomic
from calorimeter.records.legacy import upgrade_samples
from calorimeter.records.paths import KERNELS_PARQUET, RUN_JSON, STEPS_PARQUET, TELEMETRY_PARQUET
from calorimeter.records.run_record import RecordError, RunRecord, read_run_record

#: artifact file prefix -> telemetry columns (first present wins), integer counter?
FILES: dict[str, tuple[tuple[str, ...], bool]] = {
    "gpu_power": (("power_instant_w",), False),
    "mem_power": (("memory_power_driver_avg_w", "memory_power_instant_w"), False),
    "gpu_thermal": (("gpu_temp_c",), False),
    "mem_thermal": (("hbm_temp_c",), False),
    "sm_clock": (("sm_clock_mhz",), False),
    "mem_clock": (("mem_clock_mhz",), False),
    "gpu_util": (("gpu_util_pct",), False),
    "mem_util": (("mem_util_pct",), False),
    "nvlink_rx_throughput": (("nvlink_rx_kib_raw",), True),
    "nvlink_tx_throughput": (("nvlink_tx_kib_raw",), True),
    "pcie_rx_bytes": (("pcie_rx_bytes_raw",), True),
    "pcie_tx_bytes": (("pcie_tx_bytes_raw",), True),
}
#: calorimeter kernel category -> a name the artifact's categorize_kernel sorts into the intended bar
PSEUDO_KERNELS: dict[str, str] = {
    "gemm_attention": "calorimeter_gemm_attention_as_gemm",  # Compute (MatMul)
    "all_reduce": "calorimeter_nccl_allreduce",  # AllReduce
    "all_gather": "calorimeter_nccl_allgather",  # AllGather
    "reduce_scatter": "calorimeter_nccl_reducescatter",  # ReduceScatter
    "send_recv": "calorimeter_nccl_sendrecv",  # SendRecv
    "all_to_all": "calorimeter_nccl_sendrecv_all_to_all",  # SendRecv (the artifact has no AllToAll bar)
    "other_comm": "calorimeter_other_comm",  # Other
    "memory_elementwise": "calorimeter_memory_elementwise",  # Memory/Elementwise
    "normalization": "calorimeter_normalization",  # Layer Norm
    "other": "calorimeter_other",  # Other
}
#: the artifact's first FSDP layout index (its p = 5 for TP8-FSDP)
FSDP_FIRST_INDEX = 5


@dataclass
class Export:
    """What an export wrote: run folders by cell, and what it left out with the reason."""

    out: Path
    runs: dict[str, list[str]] = field(default_factory=dict)  # cell id -> run folders (relative to out)
    skipped: dict[str, str] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)


def _label(cell: dict) -> str:
    tp, pp, ep, dp = (int(cell.get(k) or 1) for k in ("tp", "pp", "ep", "dp"))
    if int(cell.get("zero_stage") or 0) == 3:
        return f"TP{tp}-FSDP"  # data-parallel over the rest, as the artifact's TP8-FSDP
    if ep > 1:
        return f"EP{ep}-TP{tp}-PP{pp}"  # the experts take the data-parallel ranks, as the artifact's labels
    return f"TP{tp}-PP{pp}" + (f"-DP{dp}" if dp > 1 else "")


def _layout_indices(cells: list[dict]) -> dict[str, dict[str, int]]:
    """model -> {label: p}: layouts in (world size, pp, tp) order from 1, FSDP layouts from 5 up."""
    out: dict[str, dict[str, int]] = {}
    for model in dict.fromkeys(c["model"] for c in cells):
        mine = [c for c in cells if c["model"] == model]
        order = sorted({(_label(c), int(c.get("zero_stage") or 0) == 3, int(c.get("world_size") or 1),
                         int(c.get("pp") or 1), int(c.get("tp") or 1)) for c in mine}, key=lambda t: t[1:])
        plain = [t[0] for t in order if not t[1]]
        fsdp = [t[0] for t in order if t[1]]
        idx = {lab: i + 1 for i, lab in enumerate(dict.fromkeys(plain))}
        start = max(FSDP_FIRST_INDEX, len(idx) + 1)
        idx.update({lab: start + i for i, lab in enumerate(dict.fromkeys(fsdp))})
        out[model] = idx
    return out


def _rank_gpus(record: RunRecord) -> dict[int, tuple[int, int]]:
    """global rank -> (node, NVML index) of its GPU."""
    out = {}
    for r in record.ranks:
        dev = r.get("device_info") or {}
        idx = dev.get("nvml_index", r.get("local_rank"))
        if r.get("rank") is not None and idx is not None:
            out[int(r["rank"])] = (int(r.get("node") or 0), int(idx))
    return out


def _windows(steps: pd.DataFrame, window: str) -> dict[int, tuple[float, float]]:
    m = steps[steps["phase"] == "measured"]
    out = {}
    for rank, g in m.groupby("rank"):
        if window == "measured":
            out[int(rank)] = (float(g["t_begin_s"].min()), float(g["t_end_s"].max()))
        else:
            last = g.sort_values("step").iloc[-1]
            out[int(rank)] = (float(last["t_begin_s"]), float(last["t_end_s"]))
    return out


def _write_series(path: Path, t: np.ndarray, v: np.ndarray, integer: bool) -> None:
    ok = np.isfinite(v) & (v >= 0)
    lines = [f"{ti!r},{int(vi) if integer else repr(float(vi))}" for ti, vi in zip(t[ok].tolist(), v[ok].tolist(),
                                                                                  strict=True)]
    text = "\n".join(lines) + ("\n" if lines else "")
    write_atomic(path, lambda tmp: tmp.write_text(text))


def write_rank_files(run_dir: Path, tele: pd.DataFrame, gpus: dict[int, tuple[int, int]],
                     windows: dict[int, tuple[float, float]]) -> list[str]:
    """The 12 per-rank files of every rank; returns notes on files that could not be written."""
    notes = []
    for rank, (node, idx) in sorted(gpus.items()):
        if rank not in windows:
            notes.append(f"rank {rank}: no measured step")
            continue
        t0, t1 = windows[rank]
        g = tele[(tele["node"] == node) & (tele["gpu_index"] == idx) & (tele["time_s"] >= t0) & (tele["time_s"] <= t1)]
        g = g.sort_values("time_s")
        for prefix, (cols, integer) in FILES.items():
            col = next((c for c in cols if c in g.columns and g[c].notna().any()), None)
            if col is None:
                notes.append(f"rank {rank}: {prefix} not recorded")
                continue
            _write_series(run_dir / f"{prefix}_{rank}.csv", g["time_s"].to_numpy(float),
                          pd.to_numeric(g[col], errors="coerce").to_numpy(float), integer)
    return notes


def write_kernel_stats(path: Path, kernels: pd.DataFrame, run_name: str) -> None:
    """One pseudo-kernel row per category; per traced rank (stage order) occurrences, total and average in us."""
    k = kernels.sort_values(["stage", "rank"])
    data: dict[str, list] = {"kernel_name": list(PSEUDO_KERNELS.values())}
    for _, row in k.iterrows():
        f = f"{run_name}/rank-{int(row['rank'])}.json"
        occ = [int(row.get(f"{c}_count") or 0) for c in PSEUDO_KERNELS]
        tot = [float(row.get(f"{c}_sum_s") or 0.0) * 1e6 for c in PSEUDO_KERNELS]
        data[f"{f}_occurrences"] = occ
        data[f"{f}_total_duration"] = tot
        data[f"{f}_average_duration"] = [t / o if o else 0.0 for t, o in zip(tot, occ, strict=True)]
    write_atomic(path, lambda tmp: pd.DataFrame(data).to_csv(tmp, index=False))


def _cells(sweep: Path, repeat: int) -> tuple[list[tuple[Path, RunRecord]], dict[str, str]]:
    cells, skipped = [], {}
    for d in sorted((sweep / "cells").iterdir()) if (sweep / "cells").is_dir() else []:
        try:
            rec = read_run_record(d / RUN_JSON)
        except RecordError as e:
            skipped[d.name] = f"run.json unusable ({e})"
            continue
        cell = rec.cell
        if not rec.ok:
            skipped[d.name] = f"status {rec.status}"
        elif not ((kind := kind_of(cell.get("kind"))) is not None and kind.full_training):
            skipped[d.name] = f"a {cell.get('kind')} cell (not training)"
        elif int(cell.get("repeat") or 0) != repeat:
            skipped[d.name] = f"repetition {cell.get('repeat')} (exporting repetition {repeat})"
        elif not (d / TELEMETRY_PARQUET).is_file() or not (d / STEPS_PARQUET).is_file():
            skipped[d.name] = "no telemetry.parquet or steps.parquet"
        else:
            cells.append((d, rec))
    return cells, skipped


def _metrics(rec: RunRecord) -> dict[str, Any]:
    m = rec.metrics
    return {k: m.get(k) for k in ("iteration_time_s", "samples_per_s", "tokens_per_s_per_gpu", "mfu_full")}


def export_charllm(sweep: str | Path, out: str | Path, window: str = "last-step", repeat: int = 0) -> Export:
    """Write ``sweep``'s ok training cells (repetition ``repeat``) in the artifact's layout under ``out``."""
    if window not in ("last-step", "measured"):
        raise ValueError(f"window: {window!r} is not 'last-step' or 'measured'")
    sweep, out = Path(sweep), Path(out)
    cells, skipped = _cells(sweep, repeat)
    if not cells:
        raise FileNotFoundError(f"{sweep}: no ok training cell of repetition {repeat} with records to export")
    params = [rec.cell for _, rec in cells]
    indices = _layout_indices(params)
    exp = Export(out, skipped=skipped)
    hw = {str(c.get("hardware")) for c in params}
    hw_name = hw.pop() if len(hw) == 1 else "mixed"
    smallest_mb: dict[tuple, int] = {}
    for c in params:
        key = (c["model"], _label(c), c.get("overlap"), c.get("recompute"), c.get("seq_len"), c.get("placement"))
        smallest_mb[key] = min(smallest_mb.get(key, 10**9), int(c.get("micro_batch") or 1))
    table = sweep / "tables" / "runs.parquet"  # calorimeter's energy and efficiency, where the sweep has tables
    energy = (pd.read_parquet(table).set_index("cell_id")[["energy_per_iteration_j", "efficiency"]]
              if table.is_file() else pd.DataFrame(columns=["energy_per_iteration_j", "efficiency"]))
    manifest_cells = {}
    used: dict[str, str] = {}
    micro: dict[tuple[str, int], set[int]] = {}
    for d, rec in cells:
        c = rec.cell
        lab, model = _label(c), c["model"]
        p = indices[model][lab]
        fsdp = "-fsdp" if int(c.get("zero_stage") or 0) == 3 else ""
        bits = f"{int(bool(c.get('overlap')))}{int((c.get('recompute') or 'none') != 'none')}000"
        mb = int(c.get("micro_batch") or 1)
        key = (model, lab, c.get("overlap"), c.get("recompute"), c.get("seq_len"), c.get("placement"))
        targets = []
        if mb == smallest_mb[key]:
            targets.append((f"optimization-sweep-{hw_name}{fsdp}", f"{model}_{p}_{bits}"))
        if bits == "01000":
            targets.append((f"microbatch-sweep-{hw_name}{fsdp}", f"{model}_{p}_mbs{mb}"))
            micro.setdefault((f"microbatch-sweep-{hw_name}{fsdp}/{model}", p), set()).add(mb)
        tele = upgrade_samples(pd.read_parquet(d / TELEMETRY_PARQUET))
        steps = pd.read_parquet(d / STEPS_PARQUET)
        gpus, windows = _rank_gpus(rec), _windows(steps, window)
        kernels = pd.read_parquet(d / KERNELS_PARQUET) if (d / KERNELS_PARQUET).is_file() else pd.DataFrame()
        notes: list[str] = []
        for sweep_dir, run in targets:
            rel = f"results/{sweep_dir}/{model}/{run}"
            if rel in used:
                notes.append(f"{rel} already holds {used[rel]} (cells differing in a knob the layout has no bit for)")
                continue
            used[rel] = d.name
            run_dir = out / rel
            run_dir.mkdir(parents=True, exist_ok=True)
            notes += write_rank_files(run_dir, tele, gpus, windows)
            if not kernels.empty:
                write_kernel_stats(out / "results" / f"kineto-{sweep_dir}" / model / f"{run}_kernel_stats.csv",
                                   kernels, run)
            exp.runs.setdefault(d.name, []).append(rel)
        e = energy.loc[d.name] if d.name in energy.index else {}
        manifest_cells[d.name] = {
            "folders": exp.runs.get(d.name, []), "label": lab, "p": p, "global_batch": c.get("global_batch"),
            "seq_len": c.get("seq_len"), "micro_batch": mb, "world_size": c.get("world_size"),
            "repeat": c.get("repeat", 0), "status": rec.status, "window": window, "notes": sorted(set(notes)),
            "calorimeter": {**_metrics(rec), "energy_per_iteration_j": e.get("energy_per_iteration_j"),
                            "efficiency_samples_per_s_per_mj": e.get("efficiency")},
        }
    for (folder, p), mbs in micro.items():  # empty folders keep the per-model normalisation of Fig. 13 aligned
        model = folder.rsplit("/", 1)[1]
        for mb in sorted({1, 2, 4, 8} - mbs):
            (out / "results" / folder / f"{model}_{p}_mbs{mb}").mkdir(parents=True, exist_ok=True)
    exp.manifest = {
        "format": "charllm-ppt", "source": str(sweep.name), "hardware": hw_name, "window": window, "repeat": repeat,
        "model_parallel_configs": indices,
        "notes": ["global batch: the artifact's scripts assume 128; efficiency scales by 128 / global_batch",
                  "nvlink_*: NVML NVLink data counter over all links (the artifact read link 0's raw counter)",
                  "kernel_stats: one pseudo-kernel per calorimeter category (no kernel names in the records)",
                  "empty microbatch folders: (layout, micro-batch) pairs the sweep lacks (drawn as OOM)"],
        "cells": manifest_cells, "skipped": skipped,
    }
    text = json.dumps(exp.manifest, indent=1, default=_jsonable) + "\n"
    write_atomic(out / "calorimeter_manifest.json", lambda tmp: tmp.write_text(text))
    return exp


def _jsonable(v: object) -> object:
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return None if math.isnan(float(v)) else float(v)
    return str(v)

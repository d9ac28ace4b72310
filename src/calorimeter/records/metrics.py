"""Throughput and energy metrics of a cell (pure functions): one definition each, for measured and projected cells."""

from __future__ import annotations

import math
import statistics
from typing import Any

from calorimeter.plan.cell import Cell
from calorimeter.plan.flops import iteration_flops, mfu
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.models import get_model, padded_vocab_size


def step_times_s(rank_steps: list[list[JsonObject]], phase: str = "measured") -> list[float]:
    """Per-step iteration time: the slowest rank's time of each step (steps are synchronous)."""
    by_step: dict[int, float] = {}
    for steps in rank_steps:
        for s in steps:
            if s["phase"] == phase:
                by_step[s["step"]] = max(by_step.get(s["step"], 0.0), float(s["time_s"]))
    return [by_step[k] for k in sorted(by_step)]


def throughput_metrics(cell: Cell, iteration_times_s: list[float], peak_tflops: float | None) -> JsonObject:
    """Iteration time, samples/s, tokens/s (total and per GPU), TFLOP/s per GPU, MFU and HFU.

    The iteration time is the mean of the measured steps, so rates are total work over total time (the
    harmonic mean of per-step rates). ``tflops_per_gpu`` counts recomputation (Megatron's convention);
    ``model_tflops_per_gpu`` and the MFUs do not. ``mfu_full`` counts the full attention score matrix (Megatron's
    convention, and ``tflops_per_gpu``'s, ``model_tflops_per_gpu``'s and ``hfu``'s); ``mfu_causal`` only its
    unmasked half (Megatron-Bridge, NeMo-AutoModel).
    """
    if not iteration_times_s:
        return {"iteration_time_s": math.nan, "metrics_unavailable_reason": "no measured step"}
    t = statistics.fmean(iteration_times_s)
    model = get_model(cell.model)
    args = (model, cell.seq_len, cell.global_batch, cell.recompute, cell.recompute_layers, cell.pp)
    fl = iteration_flops(*args, padded_vocab=padded_vocab_size(model, cell.tp), lora_rank=cell.adapter_rank)
    causal = iteration_flops(*args, padded_vocab=padded_vocab_size(model, cell.tp), causal=True,
                             lora_rank=cell.adapter_rank)
    samples_s = cell.global_batch / t
    tokens_s = samples_s * cell.seq_len
    out: JsonObject = {
        "measured_steps": len(iteration_times_s),
        "iteration_time_s": t,
        "iteration_time_median_s": statistics.median(iteration_times_s),
        "iteration_time_std_s": statistics.stdev(iteration_times_s) if len(iteration_times_s) > 1 else 0.0,
        "samples_per_s": samples_s,
        "tokens_per_s": tokens_s,
        "tokens_per_s_per_gpu": tokens_s / cell.world_size,
        "model_flops_per_iteration": fl.model_flops,
        "model_flops_causal_per_iteration": causal.model_flops,
        "hardware_flops_per_iteration": fl.hardware_flops,
        "tflops_per_gpu": fl.hardware_flops / t / cell.world_size / 1e12,
        "model_tflops_per_gpu": fl.model_flops / t / cell.world_size / 1e12,
        "mfu_full": mfu(fl.model_flops, t, cell.world_size, peak_tflops),
        "mfu_causal": mfu(causal.model_flops, t, cell.world_size, peak_tflops),
        "hfu": mfu(fl.hardware_flops, t, cell.world_size, peak_tflops),
    }
    if not peak_tflops:
        out["mfu_unavailable_reason"] = f"hardware profile {cell.hardware!r} has no dense peak FLOP/s"
    return out


def energy_metrics(energy_per_iteration_j: float | None, global_batch: Any, seq_len: Any, samples_per_s: Any
                   ) -> dict[str, float]:
    """Energy per token and the study's efficiency of one iteration's energy (NaN where an input is missing).

    ``energy_per_token_j`` = energy per iteration / (global batch x sequence length); ``efficiency`` = samples/s /
    (energy per iteration in megajoules), the study's samples/(s*MJ).
    """
    out = {"energy_per_token_j": math.nan, "efficiency": math.nan}
    epi = math.nan if energy_per_iteration_j is None else energy_per_iteration_j
    if epi == epi and global_batch and seq_len:
        out["energy_per_token_j"] = epi / (float(global_batch) * float(seq_len))
    if epi == epi and epi > 0 and samples_per_s is not None and samples_per_s == samples_per_s:
        out["efficiency"] = float(samples_per_s) / (epi / 1e6)
    return out

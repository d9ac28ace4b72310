"""Names that changed since records were first shipped: every reader goes through here, so that old records
(``results/reference/*``) and new ones give the same tables.

* samples (sampler streams ``gpu-*.arrows`` and ``telemetry.parquet``): ``power_avg_w`` (NVML's own ~1 s average)
  is ``power_driver_avg_w``, so that ``power_avg_w`` only ever means a time-weighted average over a window in the
  tables; ``memory_power_avg_w`` likewise; the energy counter ``energy_mj`` (millijoules, easily read as megajoules)
  is ``energy_millijoule``; reason names follow pynvml (``hw_power_brake`` is ``hw_power_brake_slowdown``); the
  sampler run's file-name part is ``sampler_label`` (was ``session``);
* ``run.json`` metrics: ``mfu`` was Megatron's convention (full attention) and is ``mfu_full``; ``mfu_causal`` is
  derived for records that lack it;
* plan estimates: ``model_flops_per_iter`` is ``model_flops_per_iteration``;
* runs tables from before repetitions have no ``config_id``: each cell is its own configuration (:func:`config_ids`).
"""

from __future__ import annotations

import copy

import pandas as pd

from calorimeter.plan.flops import iteration_flops
from calorimeter.plan.json_types import JsonObject
from calorimeter.plan.models import get_model, padded_vocab_size
from calorimeter.records.machines import machine_id

#: old sample column -> new one
SAMPLE_RENAMES: dict[str, str] = {
    "power_avg_w": "power_driver_avg_w",
    "memory_power_avg_w": "memory_power_driver_avg_w",
    "energy_mj": "energy_millijoule",
    "energy_mj_raw": "energy_millijoule_raw",
    "reason_hw_power_brake": "reason_hw_power_brake_slowdown",
    "session": "sampler_label",
}
#: old run.json metric -> new one
METRIC_RENAMES: dict[str, str] = {"mfu": "mfu_full"}
#: old plan estimate -> new one
ESTIMATE_RENAMES: dict[str, str] = {"model_flops_per_iter": "model_flops_per_iteration"}


def upgrade_samples(df: pd.DataFrame) -> pd.DataFrame:
    """GPU samples (a stream or a tidy ``telemetry.parquet``) with today's column names.

    An old tidy table has both the unwrapped ``energy_mj`` (float) and the raw ``energy_mj_raw``: the raw readings
    are kept (the analysis derives every increase from them) and the old unwrapped series is dropped.
    """
    if not any(c in df.columns for c in SAMPLE_RENAMES):
        return df
    out = df
    if "energy_mj_raw" in out.columns and "energy_mj" in out.columns:
        out = out.drop(columns=["energy_mj"])
    return out.rename(columns={k: v for k, v in SAMPLE_RENAMES.items() if k in out.columns and v not in out.columns})


def _causal_ratio(record: JsonObject) -> float | None:
    """model FLOPs with causal attention / with full attention, for a record's cell (None if not computable)."""
    cell = record.get("cell") or {}
    try:
        m = get_model(cell["model"])
        args = (m, int(cell["seq_len"]), int(cell["global_batch"]), "none", None, int(cell.get("pp") or 1))
        vocab = padded_vocab_size(m, int(cell.get("tp") or 1))
        full = iteration_flops(*args, padded_vocab=vocab, causal=False).model_flops
        causal = iteration_flops(*args, padded_vocab=vocab, causal=True).model_flops
    except (KeyError, TypeError, ValueError):
        return None
    return causal / full if full else None


def upgrade_record(record: JsonObject) -> JsonObject:
    """A ``run.json`` with today's metric and estimate names (the input is not modified)."""
    metrics = record.get("metrics") or {}
    estimates = record.get("plan_estimates") or {}
    if not (set(METRIC_RENAMES) & set(metrics) or set(ESTIMATE_RENAMES) & set(estimates)):
        return record
    out = copy.deepcopy(record)
    m = out.get("metrics") or {}
    for old, new in METRIC_RENAMES.items():
        if old in m:
            m.setdefault(new, m.pop(old))
    if m.get("mfu_full") is not None and "mfu_causal" not in m:
        ratio = _causal_ratio(out)
        m["mfu_causal"] = m["mfu_full"] * ratio if ratio is not None else None
    est = out.get("plan_estimates") or {}
    for old, new in ESTIMATE_RENAMES.items():
        if old in est:
            est.setdefault(new, est.pop(old))
    return out


def upgrade_plan_cell(cell: JsonObject) -> JsonObject:
    """A ``plan.json`` cell (parameters, status, reasons and estimates at the top level) with today's names."""
    if not set(ESTIMATE_RENAMES) & set(cell):
        return cell
    out = dict(cell)
    for old, new in ESTIMATE_RENAMES.items():
        if old in out:
            out.setdefault(new, out.pop(old))
    return out


def config_ids(runs: pd.DataFrame) -> pd.Series:
    """Each row's configuration: ``config_id`` where the table has it, else the cell id (records from before
    repetitions: one repetition each)."""
    cid = runs["cell_id"].astype(str)
    if "config_id" not in runs.columns:
        return cid
    return runs["config_id"].where(runs["config_id"].notna() & (runs["config_id"].astype(str) != ""), cid).astype(str)


#: runs/configs table columns added since tables were first shipped, with the value every older table implied
#: (before the ``kind`` column every cell trained; before ``placement`` every cell used the default rank order)
RUNS_DEFAULTS: dict[str, str] = {"kind": "train", "placement": "default", "pp_split": ""}


def upgrade_runs(df: pd.DataFrame) -> pd.DataFrame:
    """A runs or configs table with today's parameter columns: a column an older table lacks (or a row that has
    no value in it) gets the value the older code implied, so that tables of different ages compare the same
    configurations (any build order of sweeps that name each other under ``compare:`` gives the same findings).
    A cell without a model (``-``) in a table older than the ``kind`` column has the kind its id starts with."""
    if df is None or df.empty or "model" not in df.columns:
        return df
    out = df.copy()
    if "kind" not in out.columns or out["kind"].isna().any():
        # a cell of another kind has no model ("-") and its kind leads its id (``thermal-calibration_h200-1x2``)
        ids = out["cell_id"] if "cell_id" in out.columns else out.get("config_id", pd.Series("", index=out.index))
        implied = ids.astype(str).str.split("_").str[0].where(out["model"].astype(str) == "-", "train")
        out["kind"] = out["kind"].astype(object).where(out["kind"].notna(), implied) if "kind" in out else implied
    for col, default in RUNS_DEFAULTS.items():
        if col not in out.columns:
            out[col] = default
        else:
            out[col] = out[col].astype(object).where(out[col].notna(), default)
    return out


def add_machines(runs: pd.DataFrame, gpus: pd.DataFrame | None) -> pd.DataFrame:
    """A runs table with its ``machine`` column (:func:`calorimeter.records.machines.machine_id`): tables written
    before the column existed get it from their ``gpus`` table's UUIDs (the same UUIDs the record's ranks carry);
    cells without any stay ``""`` (machine unknown)."""
    if runs is None or runs.empty or "cell_id" not in runs.columns:
        return runs
    have = runs["machine"].fillna("").astype(str) if "machine" in runs.columns else pd.Series("", index=runs.index)
    if (have != "").all() or gpus is None or gpus.empty or "uuid" not in gpus.columns:
        return runs if "machine" in runs.columns else runs.assign(machine=have)
    by_cell = gpus.groupby("cell_id")["uuid"].agg(machine_id)
    return runs.assign(machine=have.where(have != "", runs["cell_id"].map(by_cell).fillna("").astype(str)))


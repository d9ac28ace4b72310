"""The tables of one finished cell, computed from its own folder only (the per-cell step of the aggregation).

A cell folder holds ``run.json`` (always), ``steps.parquet`` (ranks' step timings), and where telemetry ran
``telemetry.parquet`` (tidy GPU samples of every node, columns ``node``, ``hostname``, ``gpu_index``, ...),
``telemetry.json`` (per node sampler metadata) and ``kernels.parquet`` (kernel breakdown of the traced ranks).
Missing files give empty tables and a reason in the run row, never an error.

Every derived number uses the cell's own record: global batch, sequence length and GPU count come from
``run.json``'s ``cell``, the GPUs of the cell from ``provenance.ranks`` (``node`` and ``device_info.nvml_index``).
Every telemetry number comes from :mod:`calorimeter.analysis.window` (one definition of each aggregate and of the
data quality); records written under older names are read through :mod:`calorimeter.records.legacy`.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calorimeter.analysis.placement import placement_columns
from calorimeter.analysis.window import (
    LINK_COUNTERS,
    POWER_COLUMNS,
    QUALITY_COLUMNS,
    THROTTLE_COLUMNS,
    THROTTLE_COUNTER_COLUMNS,
    GpuSamples,
    time_average,
    valid_readings,
)
from calorimeter.plan.layout import Layout
from calorimeter.plan.vocabulary import RUN_COLUMNS
from calorimeter.records.atomic import write_parquet_atomic
from calorimeter.records.machines import machine_id
from calorimeter.records.metrics import energy_metrics
from calorimeter.records.paths import TABLE_NAMES, CellPaths
from calorimeter.records.run_record import RunRecord, read_run_record
from calorimeter.records.steadiness import FIT_MIN_S, SENSOR_RESOLUTION_C, is_steady
from calorimeter.telemetry.kernels import CATEGORIES, COMM_CATEGORIES

METRIC_KEYS = ("iteration_time_s", "iteration_time_std_s", "samples_per_s", "tokens_per_s", "tokens_per_s_per_gpu",
               "tflops_per_gpu", "model_tflops_per_gpu", "mfu_full", "mfu_causal", "hfu", "measured_steps")
#: the run row's parameter columns (the cell's vocabulary)
PARAM_KEYS = RUN_COLUMNS
#: run-row columns derived from telemetry and kernels (NaN where not measured)
TELEMETRY_KEYS = (
    "n_gpus", "energy_per_iteration_j", "energy_per_token_j", "efficiency", "energy_source",
    "power_avg_w", "power_peak_w", "power_total_avg_w", "temp_avg_c", "temp_peak_c", "temp_drift_c",
    "temp_slope_c_per_min", "hbm_temp_avg_c", "hbm_temp_peak_c", "sm_clock_avg_mhz", "sm_clock_peak_mhz",
    "sm_clock_min_mhz", "sm_clock_loaded_avg_mhz", *THROTTLE_COLUMNS, *THROTTLE_COUNTER_COLUMNS,
    *(f"{c}_total" for c in LINK_COUNTERS),
    "kernel_busy_s", "comm_frac", "exposed_comm_frac", *QUALITY_COLUMNS, "data_quality",
)  # fmt: skip
#: run-row quality columns summed over the cell's GPUs (the fractions take the minimum)
_QUALITY_SUMS = tuple(c for c in QUALITY_COLUMNS if not c.endswith("_frac"))

#: downsampled time series: at most this many bins per GPU
TIMESERIES_BINS = 400
_TS_GAUGES = ("power_w", "gpu_temp_c", "hbm_temp_c", "sm_clock_mhz")


@dataclass
class CellTables:
    """The five tables of one cell."""

    runs: pd.DataFrame
    gpus: pd.DataFrame = field(default_factory=pd.DataFrame)
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    kernels: pd.DataFrame = field(default_factory=pd.DataFrame)
    timeseries: pd.DataFrame = field(default_factory=pd.DataFrame)

    def items(self) -> list[tuple[str, pd.DataFrame]]:
        """(name, frame) in TABLE_NAMES order."""
        return [(n, getattr(self, n)) for n in TABLE_NAMES]


# ---------------------------------------------------------------------------------------------------------------
# loading


def _read_parquet(path: Path) -> pd.DataFrame | None:
    return pd.read_parquet(path) if path.is_file() else None


def rank_table(record: RunRecord) -> pd.DataFrame:
    """One row per rank: rank, local_rank, node, hostname, nvml_index, uuid, device_name, stage, tp_rank, dp_rank.

    ``stage`` comes from the record where present, else from the rank layout (:class:`calorimeter.plan.layout.Layout`);
    ``stage_source`` says which.
    """
    cell = record.cell
    ranks = record.ranks
    world = int(cell.get("world_size") or len(ranks) or 1)
    layout = Layout(world, max(int(cell.get("pp") or 1), 1), int(cell.get("gpus_per_node") or world))
    rows = []
    for r in ranks:
        di = r.get("device_info") or {}
        rank = r.get("rank")
        derived = rank is not None
        rows.append({
            "rank": rank,
            "local_rank": r.get("local_rank"),
            "node": r.get("node"),
            "hostname": r.get("hostname"),
            "nvml_index": di.get("nvml_index"),
            "uuid": di.get("uuid"),
            "device_name": di.get("name"),
            "stage": r.get("stage") if r.get("stage") is not None else (layout.stage(int(rank)) if derived else None),
            "stage_source": "record" if r.get("stage") is not None else "layout",
            "tp_rank": r.get("tp_rank"),
            "dp_rank": r.get("dp_rank"),
        })
    cols = ["rank", "local_rank", "node", "hostname", "nvml_index", "uuid", "device_name", "stage", "stage_source",
            "tp_rank", "dp_rank"]
    df = pd.DataFrame(rows, columns=cols)
    if not df.empty:
        df = df.sort_values("rank", key=lambda s: pd.to_numeric(s, errors="coerce"), kind="stable")
    return df.reset_index(drop=True)


def normalize_telemetry(tele: pd.DataFrame, ranks: pd.DataFrame) -> pd.DataFrame:
    """Telemetry with an integer ``node`` (mapped from hostnames if the column holds names) and ``hostname``, by
    node and GPU in recorded order (the analysis sorts each GPU's samples and counts what it had to re-sort)."""
    t = tele.copy()
    host_to_node = {h: n for h, n in zip(ranks["hostname"], ranks["node"], strict=True) if h is not None}
    if "node" not in t.columns:
        if "hostname" in t.columns and host_to_node:
            t["node"] = t["hostname"].map(host_to_node)
        else:
            t["node"] = 0
    elif not pd.api.types.is_numeric_dtype(t["node"]):
        names = t["node"].astype(str)
        numeric = pd.to_numeric(names, errors="coerce")
        mapped = names.map(lambda h: host_to_node.get(h, host_to_node.get(h.split(".")[0])))
        if "hostname" not in t.columns:
            t["hostname"] = names
        t["node"] = numeric.where(numeric.notna(), mapped)
    if "hostname" not in t.columns:
        node_to_host = {n: h for h, n in host_to_node.items()}
        t["hostname"] = t["node"].map(node_to_host)
    t["node"] = pd.to_numeric(t["node"], errors="coerce").fillna(-1).astype("int64")
    t["gpu_index"] = t["gpu_index"].astype("int64")
    return t.sort_values(["node", "gpu_index"], kind="stable").reset_index(drop=True)


def cell_gpu_map(ranks: pd.DataFrame, tele: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The cell's GPUs: (node, gpu_index) with their rank, and how they were found.

    A rank's GPU is the telemetry GPU with the same node and ``gpu_index == device_info.nvml_index``. Records
    without NVML indices fall back to every GPU the telemetry saw on the cell's nodes (``mapping = all_node_gpus``).
    """
    seen = tele[["node", "gpu_index"]].drop_duplicates()
    r = ranks.dropna(subset=["nvml_index"]) if not ranks.empty else ranks
    if not r.empty:
        m = r.assign(node=r["node"].astype("int64"), gpu_index=r["nvml_index"].astype("int64"))
        m = m.merge(seen, on=["node", "gpu_index"], how="inner")
        return m.drop(columns=["nvml_index"]).reset_index(drop=True), "nvml_index"
    nodes = set(ranks["node"].dropna().astype(int)) if not ranks.empty else set()
    g = seen[seen["node"].isin(nodes)] if nodes else seen
    return g.reset_index(drop=True), "all_node_gpus"


def measured_window(steps: pd.DataFrame | None, phase: str = "measured") -> tuple[float, float, int]:
    """(begin, end, number of steps) of a phase: first begin to last end over every rank."""
    if steps is None or steps.empty or "t_begin_s" not in steps.columns:
        return float("nan"), float("nan"), 0
    m = steps[steps["phase"] == phase]
    if m.empty:
        return float("nan"), float("nan"), 0
    return float(m["t_begin_s"].min()), float(m["t_end_s"].max()), int(m["step"].nunique())


# ---------------------------------------------------------------------------------------------------------------
# tables


def sampler_periods(meta: dict[str, Any] | None) -> dict[int, float]:
    """Sampling period per node from ``telemetry.json`` (``node<k>.sampler.period_s``); nodes without one are
    left out (their period is then the median interval of their samples)."""
    out: dict[int, float] = {}
    for key, node in (meta or {}).items() if isinstance(meta, dict) else ():
        period = ((node or {}).get("sampler") or {}).get("period_s") if isinstance(node, dict) else None
        if str(key).startswith("node") and str(key)[4:].isdigit() and period:
            out[int(str(key)[4:])] = float(period)
    return out


def gpu_samples(tele: pd.DataFrame, periods: dict[int, float] | None = None) -> dict[tuple[int, int], GpuSamples]:
    """One :class:`GpuSamples` per (node, gpu_index) of the telemetry."""
    periods = periods or {}
    return {(int(n), int(g)): GpuSamples(rows, periods.get(int(n)))
            for (n, g), rows in tele.groupby(["node", "gpu_index"], sort=True)}


def gpus_frame(samples: dict[tuple[int, int], GpuSamples], gpu_map: pd.DataFrame, begin: float,
               end: float) -> pd.DataFrame:
    """One row per GPU of the cell: statistics and data quality over the measured phase
    (:meth:`GpuSamples.window_stats`)."""
    rows = []
    for g in gpu_map.sort_values(["node", "gpu_index"], kind="stable").itertuples(index=False):
        gs = samples.get((int(g.node), int(g.gpu_index)))
        base = g._asdict()
        if gs is None:
            rows.append(base)
            continue
        if not base.get("hostname") and "hostname" in gs.frame.columns and len(gs.frame):
            base["hostname"] = gs.frame["hostname"].iloc[0]
        rows.append({**base, "begin_s": begin, "end_s": end, "duration_s": end - begin,
                     "period_s": gs.period_s, **gs.window_stats(begin, end)})
    return pd.DataFrame(rows)


#: per-step columns of the steps table, from the rank's GPU
STEP_GPU_COLUMNS = ("energy_j", "power_avg_w", "temp_avg_c", "sm_clock_avg_mhz")


def steps_frame(steps: pd.DataFrame, ranks: pd.DataFrame, samples: dict[tuple[int, int], GpuSamples] | None,
                gpu_map: pd.DataFrame | None) -> pd.DataFrame:
    """The cell's steps (per rank and step) with the rank's stage and, where its GPU was sampled, the GPU's
    energy (trapezoid of power), average power, temperature and SM clock over that rank's step (NaN where the
    samples do not cover the step)."""
    out = steps.copy()
    stage = dict(zip(ranks["rank"], ranks["stage"], strict=True)) if not ranks.empty else {}
    node = dict(zip(ranks["rank"], ranks["node"], strict=True)) if not ranks.empty else {}
    out["stage"] = out["rank"].map(stage)
    out["node"] = out["rank"].map(node)
    for c in STEP_GPU_COLUMNS:
        out[c] = np.nan
    if not samples or gpu_map is None or gpu_map.empty or "rank" not in gpu_map.columns:
        return out
    for rank, idx in out.groupby("rank", sort=False).indices.items():
        m = gpu_map[gpu_map["rank"] == rank]
        if m.empty:
            continue
        gs = samples.get((int(m["node"].iloc[0]), int(m["gpu_index"].iloc[0])))
        if gs is None:
            continue
        b = out["t_begin_s"].to_numpy(dtype=float)[idx]
        e = out["t_end_s"].to_numpy(dtype=float)[idx]
        vals = np.full((len(idx), len(STEP_GPU_COLUMNS)), np.nan)
        for k in range(len(idx)):
            w = gs.power_window(b[k], e[k])
            if w is not None:
                vals[k, 0] = gs.trapezoid_energy_j(*w)
                vals[k, 1] = vals[k, 0] / (w[1] - w[0])
            vals[k, 2] = gs.average("gpu_temp_c", b[k], e[k])
            vals[k, 3] = gs.average("sm_clock_mhz", b[k], e[k])
        for j, c in enumerate(STEP_GPU_COLUMNS):
            out.loc[out.index[idx], c] = vals[:, j]
    return out


def kernels_frame(kernels: pd.DataFrame, ranks: pd.DataFrame) -> pd.DataFrame:
    """Long kernel table: one row per (traced rank, category) with summed and union kernel time and the rank's
    totals (busy, compute, communication, exposed communication, overlap, span). Stages come from the kernel
    table, else from the ranks; rows are in stage order (then rank), never in file-name order."""
    if kernels is None or kernels.empty:
        return pd.DataFrame()
    k = kernels.copy()
    if "stage" not in k.columns or k["stage"].isna().all():
        stage = dict(zip(ranks["rank"], ranks["stage"], strict=True)) if not ranks.empty else {}
        k["stage"] = k["rank"].map(stage)
    totals = [c for c in ("n_kernels", "busy_s", "compute_s", "comm_s", "comm_exposed_s", "overlap_s", "span_s")
              if c in k.columns]
    rows = []
    for r in k.itertuples(index=False):
        d = r._asdict()
        for cat in CATEGORIES:
            rows.append({
                "rank": d.get("rank"), "stage": d.get("stage"), "device": str(d.get("device")),
                "category": cat, "is_comm": cat in COMM_CATEGORIES,
                "sum_s": float(d.get(f"{cat}_sum_s", 0.0) or 0.0),
                "union_s": float(d.get(f"{cat}_union_s", 0.0) or 0.0),
                "count": int(d.get(f"{cat}_count", 0) or 0),
                **{t: d.get(t) for t in totals},
            })
    out = pd.DataFrame(rows)
    out["_s"] = pd.to_numeric(out["stage"], errors="coerce")
    out["_r"] = pd.to_numeric(out["rank"], errors="coerce")
    out["_c"] = out["category"].map({c: i for i, c in enumerate(CATEGORIES)})
    return out.sort_values(["_s", "_r", "_c"], kind="stable").drop(columns=["_s", "_r", "_c"]).reset_index(drop=True)


def timeseries_frame(tele: pd.DataFrame, gpu_map: pd.DataFrame, t0: float,
                     max_bins: int = TIMESERIES_BINS) -> pd.DataFrame:
    """Downsampled telemetry of the cell's GPUs: at most ``max_bins`` time bins per GPU (bin means of power,
    temperatures and SM clock; the OR of the clock-event reason masks of the bin), time relative to ``t0``."""
    keys = gpu_map[["node", "gpu_index"]]
    t = tele.merge(keys, on=["node", "gpu_index"], how="inner")
    if t.empty:
        return pd.DataFrame()
    pcol = next((c for c in POWER_COLUMNS if c in t.columns and t[c].notna().any()), POWER_COLUMNS[0])
    span = float(t["time_s"].max() - t["time_s"].min())
    width = max(span / max_bins, 1e-3)
    frame = pd.DataFrame({
        "node": t["node"], "gpu_index": t["gpu_index"],
        "bin": np.floor((t["time_s"].to_numpy(float) - t["time_s"].min()) / width).astype("int64"),
        "time_s": t["time_s"],
    })
    for src, dst in ((pcol, "power_w"), ("gpu_temp_c", "gpu_temp_c"), ("hbm_temp_c", "hbm_temp_c"),
                     ("sm_clock_mhz", "sm_clock_mhz")):
        frame[dst] = valid_readings(t[src]) if src in t.columns else np.nan
    reasons = (pd.to_numeric(t["clock_event_reasons"], errors="coerce") if "clock_event_reasons" in t.columns
               else pd.Series(np.nan, index=t.index))
    has = reasons.notna()
    masks = reasons.fillna(0).astype("uint64")
    bits = [1 << b for b in range(16)]
    for bit in bits:
        frame[f"_b{bit}"] = ((masks & np.uint64(bit)) != 0) & has
    frame["_has"] = has
    agg = {"time_s": "mean", **dict.fromkeys(_TS_GAUGES, "mean"), **{f"_b{b}": "max" for b in bits},
           "_has": "max"}
    g = frame.groupby(["node", "gpu_index", "bin"], sort=True).agg(agg).reset_index()
    mask = np.zeros(len(g), dtype=np.uint64)
    for bit in bits:
        mask |= g[f"_b{bit}"].to_numpy(bool).astype(np.uint64) * np.uint64(bit)
    g["clock_event_reasons"] = pd.array(mask, dtype="UInt64")
    g.loc[~g["_has"].astype(bool), "clock_event_reasons"] = pd.NA
    g = g.drop(columns=[f"_b{b}" for b in bits] + ["_has", "bin"])
    g.insert(2, "t_rel_s", g["time_s"] - t0)
    ranks = gpu_map[[c for c in ("node", "gpu_index", "rank", "stage") if c in gpu_map.columns]]
    return g.merge(ranks, on=["node", "gpu_index"], how="left")


# ---------------------------------------------------------------------------------------------------------------
# the run row


def record_row(record: RunRecord) -> dict[str, Any]:
    """Flatten one run.json into a table row: parameters, status, record metrics, provenance."""
    row = {k: record.cell.get(k) for k in PARAM_KEYS}
    row["config_id"] = row["config_id"] or row["cell_id"]  # records from before repetitions: their own config
    row["repeat"] = int(row["repeat"] or 0)
    row["kind"] = row["kind"] or "train"  # records from before cell kinds trained
    row["pp_split"] = str(record.cell.get("pp_split") or "")
    row.update(placement_columns(record))
    row["status"] = record.status
    row["reason"] = record.reason
    row["failure_class"] = record.failure_class
    m = record.metrics
    row.update({k: (float("nan") if m.get(k) is None else m.get(k)) for k in METRIC_KEYS})
    row["mfu_unavailable_reason"] = m.get("mfu_unavailable_reason", "") or ""
    peak_mem = record.peak_memory_bytes
    row["peak_memory_gb"] = peak_mem / 1e9 if peak_mem is not None else float("nan")
    losses = [x["loss"] for x in record.loss]
    row["loss_first"] = losses[0] if losses else float("nan")
    row["loss_last"] = losses[-1] if losses else float("nan")
    prov = record.provenance
    row["hosts"] = ",".join(prov.get("hosts", []) or [])
    row["host_cpus"] = ",".join(prov.get("host_cpus", []) or [])  # empty in records from before they named it
    # the ranks' host speed (records/provenance.host_dispatch): median over ranks; NaN in records without it
    dispatch = [d for r in record.ranks if isinstance(d := (r.get("host_cpu") or {}).get("dispatch_us_per_op"), float)]
    row["host_dispatch_us"] = float(np.median(dispatch)) if dispatch else float("nan")
    # the machine: the cell's GPUs by NVML UUID (hostnames repeat across machines); empty without UUIDs
    row["machine"] = machine_id((r.get("device_info") or {}).get("uuid") for r in record.ranks)
    devices = {(r.get("device_info") or {}).get("name") or r.get("device") for r in record.ranks}
    row["devices"] = ",".join(sorted(d for d in devices if d))
    row["job_id"] = record.launcher.get("job_id")
    row["git_commit"] = (prov.get("git") or {}).get("commit")
    row["peak_bf16_tflops"] = record.hardware.get("peak_bf16_tflops")
    w = record.warmup  # empty in records from before the steady-state warm-up
    row["warmup_mode"] = w.get("mode_used") or "fixed"
    row["warmup_reason"] = w.get("reason") or ("" if w else "fixed (record predates steady-state warm-up)")
    row["warmup_steps_run"] = w.get("steps", record.cell.get("warmup_steps"))
    row["warmup_s"] = float("nan") if w.get("seconds") is None else float(w["seconds"])
    row["warmup_final_slope_c_per_min"] = float("nan") if w.get("final_slope_c_per_min") is None else float(
        w["final_slope_c_per_min"])
    return row


def _over_gpus(col: pd.Series, how: str) -> float:
    """An aggregate over the cell's GPUs: NaN unless every GPU has a value (coverage rule of every aggregate)."""
    v = pd.to_numeric(col, errors="coerce")
    if v.empty or v.isna().any():
        return float("nan")
    return float(getattr(v, how)())


def efficiency_metrics(row: dict[str, Any], gpus: pd.DataFrame) -> dict[str, Any]:
    """Energy, power, thermal, clock, throttle and data-quality columns of the run row from its per-GPU table.

    * energy of one iteration = sum over the cell's GPUs of (GPU energy / seconds it covers) x the cell's iteration
      time; the counter energy where every GPU has it, else the trapezoid of power;
    * energy per token = energy per iteration / (global batch x sequence length) of the cell;
    * efficiency = samples/s / (energy per iteration in megajoules) (the study's samples/(s*MJ));
    * averages and throttle shares: mean over GPUs of the per-GPU values; peaks: max over GPUs (min for the SM
      clock minimum); each NaN unless every GPU of the cell has the value (a GPU whose samples do not cover the
      window is not silently left out);
    * thermal steadiness: the largest temperature drift over the GPUs (``temp_drift_c``, NaN unless every GPU has
      one) and that GPU's slope (:meth:`calorimeter.analysis.window.GpuSamples.temperature_drift`);
    * data quality: counts summed over GPUs, coverage fractions the minimum over GPUs, ``data_quality`` poor when
      any GPU's is.
    """
    out: dict[str, Any] = dict.fromkeys(TELEMETRY_KEYS, float("nan"))
    out["energy_source"] = ""
    out["data_quality"] = ""
    out["n_gpus"] = 0
    if gpus is None or gpus.empty or "power_avg_w" not in gpus.columns:
        return out
    out["n_gpus"] = int(gpus["power_avg_w"].notna().sum())
    for col in ("power_avg_w", "temp_avg_c", "hbm_temp_avg_c", "sm_clock_avg_mhz", "sm_clock_loaded_avg_mhz",
                *THROTTLE_COLUMNS,
                *THROTTLE_COUNTER_COLUMNS):
        if col in gpus.columns:
            out[col] = _over_gpus(gpus[col], "mean")
    for col in ("power_peak_w", "temp_peak_c", "hbm_temp_peak_c", "sm_clock_peak_mhz"):
        if col in gpus.columns:
            out[col] = _over_gpus(gpus[col], "max")
    if "sm_clock_min_mhz" in gpus.columns:
        out["sm_clock_min_mhz"] = _over_gpus(gpus["sm_clock_min_mhz"], "min")
    drift = pd.to_numeric(gpus.get("temp_drift_c", pd.Series(np.nan, index=gpus.index)), errors="coerce")
    if drift.notna().all() and not drift.empty:  # the GPU that drifted most, and its slope
        out["temp_drift_c"] = float(drift.max())
        out["temp_slope_c_per_min"] = float(pd.to_numeric(gpus["temp_slope_c_per_min"]).loc[drift.idxmax()])
    out["power_total_avg_w"] = _over_gpus(gpus["power_avg_w"], "sum")
    for c in LINK_COUNTERS:
        if c in gpus.columns:
            out[f"{c}_total"] = _over_gpus(gpus[c], "sum")
    for c in _QUALITY_SUMS:
        if c in gpus.columns:
            out[c] = float(pd.to_numeric(gpus[c], errors="coerce").sum())
    for c in QUALITY_COLUMNS:
        if c.endswith("_frac") and c in gpus.columns:
            out[c] = float(pd.to_numeric(gpus[c], errors="coerce").min())
    if "data_quality" in gpus.columns:
        out["data_quality"] = "poor" if (gpus["data_quality"] != "good").any() else "good"
    it = row.get("iteration_time_s")
    sources = (("counter", "energy_counter_j", "energy_counter_s"), ("trapezoid", "energy_trapezoid_j",
                                                                     "energy_window_s"))
    for source, col, secs in sources:
        e, win = gpus.get(col), gpus.get(secs)
        if e is not None and win is not None and e.notna().all() and (win > 0).all():
            out["energy_source"] = source
            mean_power_total = float((e / win).sum())
            if it is not None and it == it:
                out["energy_per_iteration_j"] = mean_power_total * float(it)
            break
    out.update(energy_metrics(out["energy_per_iteration_j"], row.get("global_batch"), row.get("seq_len"),
                              row.get("samples_per_s")))
    return out


def thermal_steadiness(row: dict[str, Any], gpus: pd.DataFrame) -> tuple[bool, str]:
    """Whether the measured window is thermally steady (:mod:`calorimeter.records.steadiness`): every GPU's
    temperature drift over it below the sensor's resolution (``row["temp_drift_c"]``, from
    :func:`efficiency_metrics`), and a note where that could not be judged from the telemetry: a GPU whose readings
    do not cover the fit is not steady; a cell without GPU temperature telemetry has its warm-up's flag
    (``warmup_reason == "steady"``, judged by the runtime rule of its time), and says so."""
    drift = row.get("temp_drift_c", float("nan"))
    if drift == drift:
        return is_steady(drift), ""
    has_temps = not gpus.empty and "temp_drift_c" in gpus.columns and "temp_avg_c" in gpus.columns and bool(
        pd.to_numeric(gpus["temp_avg_c"], errors="coerce").notna().any())
    if has_temps:
        return False, (f"not thermally steady: a GPU's temperature readings do not cover the {FIT_MIN_S:g} s fit "
                       "of its drift")
    flag = str(row.get("warmup_reason", "")) == "steady"
    note = ("thermally_steady from the warm-up's flag (no GPU temperature telemetry to judge the window's drift "
            f"against {SENSOR_RESOLUTION_C:g} °C)") if row.get("warmup_mode") == "steady" else ""
    return flag, note


def kernel_metrics(kernels: pd.DataFrame) -> dict[str, float]:
    """Mean over traced ranks of busy kernel time, communication share and exposed communication fraction
    (communication not covered by compute, ``comm_exposed_s / span_s``, from interval unions)."""
    out = {"kernel_busy_s": float("nan"), "comm_frac": float("nan"), "exposed_comm_frac": float("nan")}
    if kernels is None or kernels.empty or "busy_s" not in kernels.columns:
        return out
    per_rank = kernels.drop_duplicates(subset=["rank"])
    busy = per_rank["busy_s"].astype(float)
    out["kernel_busy_s"] = float(busy.mean())
    if "comm_s" in per_rank:
        out["comm_frac"] = float((per_rank["comm_s"].astype(float) / busy.where(busy > 0)).mean())
    if "comm_exposed_s" in per_rank and "span_s" in per_rank:
        span = per_rank["span_s"].astype(float)
        out["exposed_comm_frac"] = float((per_rank["comm_exposed_s"].astype(float) / span.where(span > 0)).mean())
    return out


# ---------------------------------------------------------------------------------------------------------------


def _find(obj: Any, key: str) -> list[Any]:
    """Every value under ``key`` anywhere in a JSON document (lists are flattened)."""
    out: list[Any] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key:
                out.extend(v if isinstance(v, list) else [v])
            else:
                out.extend(_find(v, key))
    elif isinstance(obj, list):
        for v in obj:
            out.extend(_find(v, key))
    return out


def host_window_metrics(host: pd.DataFrame | None, begin: float, end: float) -> dict[str, float]:
    """The hosts over the measured window: ``host_cpu_util_pct`` (time average of every CPU's busy share, mean over
    nodes) and ``host_steal_pct`` (share stolen by the hypervisor, the largest node's: the slowest host bounds a
    host-bound step). NaN where not sampled (steal: records from before the sampler read it)."""
    out = {"host_cpu_util_pct": float("nan"), "host_steal_pct": float("nan")}
    if host is None or host.empty or begin != begin:
        return out
    for metric, col, how in (("cpu_util_pct", "host_cpu_util_pct", np.mean), ("cpu_steal_pct", "host_steal_pct",
                                                                              np.max)):
        per_node = []
        for _, g in host[host["metric"] == metric].dropna(subset=["value"]).groupby("node"):
            g = g.sort_values("time_s")
            per_node.append(time_average(g["time_s"].to_numpy(float), g["value"].to_numpy(float), begin, end))
        per_node = [v for v in per_node if v == v]
        if per_node:
            out[col] = float(how(per_node))
    return out


def _tag(df: pd.DataFrame, cell_id: str) -> pd.DataFrame:
    if df is None or df.empty:
        return pd.DataFrame({"cell_id": pd.Series(dtype="object")})
    df = df.copy()
    if "cell_id" in df.columns:
        df = df.drop(columns="cell_id")
    df.insert(0, "cell_id", cell_id)
    return df


def _quality_notes(gpus: pd.DataFrame) -> list[str]:
    """``node<n>/gpu<i>: ...`` for each GPU whose samples had anything to say about their quality."""
    if gpus.empty or "quality_notes" not in gpus.columns:
        return []
    return [f"node{int(g.node)}/gpu{int(g.gpu_index)}: {g.quality_notes}"
            for g in gpus.itertuples(index=False) if isinstance(g.quality_notes, str) and g.quality_notes]


def cell_tables(cell_dir: str | Path, record: RunRecord | None = None, skip: Collection[str] = ()
                ) -> CellTables:
    """Every table of one cell folder (see the module docstring); files named in ``skip`` are treated as missing
    (a damaged file, see :mod:`calorimeter.analysis.damaged`).

    Raises:
        RecordError: the cell's run.json cannot be used (when ``record`` is not given).
    """
    paths = CellPaths(Path(cell_dir))
    record = record if record is not None else read_run_record(paths.run_json)
    cid = record.cell_id
    row = record_row(record)
    ranks = rank_table(record)
    steps, tele, kern_raw, host = (_read_parquet(path) if path.name not in skip else None
                                   for path in (paths.steps, paths.telemetry, paths.kernels, paths.host_telemetry))
    notes = []
    meta: Any = None
    meta_path = paths.telemetry_json
    if meta_path.is_file() and meta_path.name not in skip:
        try:
            meta = json.loads(meta_path.read_text())
            row["unavailable_metrics"] = ",".join(sorted({str(u.get("metric")) for u in _find(meta, "unavailable")
                                                          if isinstance(u, dict)}))
            failed = [str(f) for f in _find(meta, "sampler_failed")]
            if failed:
                notes.append("sampler failed: " + "; ".join(failed))
        except ValueError:
            notes.append("telemetry.json unreadable")
    begin, end, n_steps = measured_window(steps)
    row["measured_begin_s"], row["measured_end_s"] = begin, end
    row.update(host_window_metrics(host, begin, end))
    gpus = pd.DataFrame()
    gpu_map = None
    samples: dict[tuple[int, int], GpuSamples] = {}
    ts = pd.DataFrame()
    if tele is not None and not tele.empty:
        tele = normalize_telemetry(tele, ranks)
        gpu_map, mapping = cell_gpu_map(ranks, tele)
        row["gpu_mapping"] = mapping
        samples = gpu_samples(tele, sampler_periods(meta))
        if begin == begin:
            gpus = gpus_frame(samples, gpu_map, begin, end)
            notes.extend(_quality_notes(gpus))
        else:
            notes.append("no measured steps")
        t0 = float(steps["t_begin_s"].min()) if steps is not None and not steps.empty else float(
            tele["time_s"].min())
        ts = timeseries_frame(tele, gpu_map, t0)
    else:
        notes.append("no telemetry" if record.ok else f"no telemetry ({record.status})")
    kern = kernels_frame(kern_raw, ranks) if kern_raw is not None else pd.DataFrame()
    if kern_raw is None and record.ok:
        notes.append("no kernel trace")
    row.update(efficiency_metrics(row, gpus))
    row["thermally_steady"], note = thermal_steadiness(row, gpus)
    if note:
        notes.append(note)
    row.update(kernel_metrics(kern))
    row["data_notes"] = "; ".join(notes)
    steps_out = steps_frame(steps, ranks, samples, gpu_map) if steps is not None else pd.DataFrame()
    return CellTables(
        runs=pd.DataFrame([row]),
        gpus=_tag(gpus, cid),
        steps=_tag(steps_out, cid),
        kernels=_tag(kern, cid),
        timeseries=_tag(ts, cid),
    )


def write_cell_tables(tables: CellTables, cell: CellPaths) -> None:
    """Write each table as the cell's ``cell_tables/<name>.parquet`` (atomically)."""
    for name, df in tables.items():
        write_parquet_atomic(cell.table(name), df)

"""Turn a node's sampler streams into tidy Parquet tables.

``telemetry.parquet``: one row per (time, GPU) in recorded order, typed columns with units in their names,
counters as increases since their first reading (raw readings kept). ``host_telemetry.parquet``: host samples in
long format.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from calorimeter.records.atomic import write_parquet_atomic
from calorimeter.records.legacy import upgrade_samples
from calorimeter.records.paths import HOST_TELEMETRY_PARQUET, TELEMETRY_PARQUET
from calorimeter.telemetry.counters import counter_trace, infer_counter_width, uint64_readings, unwrap_counter
from calorimeter.telemetry.reasons import CLOCK_EVENT_REASON_BITS
from calorimeter.telemetry.schema import GPU_COUNTERS, GPU_METRICS, GPU_SCHEMA, HOST_SCHEMA
from calorimeter.telemetry.streamio import read_stream

_HOST_COUNTERS = ("rapl_energy_uj", "ib_tx_bytes", "ib_rx_bytes")


def _label_of(path: Path, prefix: str) -> str:
    return path.name[len(prefix) : -len(".arrows")]


def _read_streams(
    paths: Iterable[Path], prefix: str, schema: pa.Schema
) -> tuple[pd.DataFrame, list[dict[str, object]]]:
    frames: list[pd.DataFrame] = []
    report: list[dict[str, object]] = []
    for path in sorted(paths):
        r = read_stream(path, schema)
        df = upgrade_samples(r.table.to_pandas())  # streams written before a column was renamed
        df.insert(0, "sampler_label", _label_of(path, prefix))
        frames.append(df)
        report.append(
            {
                "file": path.name,
                "rows": r.table.num_rows,
                "batches": r.n_batches,
                "complete": r.complete,
                "error": r.error,
            }
        )
    if not frames:
        empty = schema.empty_table().to_pandas()
        empty.insert(0, "sampler_label", pd.Series(dtype="object"))
        return empty, report
    return pd.concat(frames, ignore_index=True), report


def load_gpu_samples(node_dir: str | Path) -> pd.DataFrame:
    """Concatenate every ``gpu-*.arrows`` stream of a node directory (torn tails tolerated).

    Args:
        node_dir: Directory written by the node sampler.

    Returns:
        Raw rows (stream columns plus ``sampler_label``), by GPU in recorded order.
    """
    df, _ = _read_streams(Path(node_dir).glob("gpu-*.arrows"), "gpu-", GPU_SCHEMA)
    return df.sort_values(["gpu_index"], kind="stable").reset_index(drop=True)


def load_host_samples(node_dir: str | Path) -> pd.DataFrame:
    """Concatenate every ``host-*.arrows`` stream of a node directory (long format)."""
    df, _ = _read_streams(Path(node_dir).glob("host-*.arrows"), "host-", HOST_SCHEMA)
    return df.sort_values(["metric", "source", "time_s"], kind="stable").reset_index(drop=True)


def _as_float(s: pd.Series) -> np.ndarray:
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def tidy_gpu_samples(raw: pd.DataFrame, node: str | None = None) -> pd.DataFrame:
    """Typed, unit-named GPU table with counters turned into increases per GPU.

    Rows stay in recorded order per GPU (a duplicate or out-of-order timestamp is kept, for the analysis to count and
    drop). Counters (``GPU_COUNTERS``: the energy counter, PCIe and NVLink bytes, accumulated throttle time) become
    the increase since the GPU's first reading in their tidy unit, in time order, by
    :func:`calorimeter.telemetry.counters.counter_trace` (32-bit counters unwrapped; a decrease of a 64-bit one is a
    glitch or a reset, never a wrap); ``energy_j`` is in joules, ``nvlink_*_bytes`` = KiB x 1024. The raw readings
    are kept as ``<name>_raw`` (UInt64, full precision). Each clock-event reason gets a nullable boolean
    ``reason_<name>`` column. Missing values stay null/NaN.

    Args:
        raw: Output of :func:`load_gpu_samples`.
        node: Node name to put in a ``node`` column (omitted if None).

    Returns:
        The tidy frame, by ``gpu_index`` in recorded order.
    """
    df = upgrade_samples(raw).sort_values(["gpu_index"], kind="stable").reset_index(drop=True).copy()
    if node is not None:
        df.insert(0, "node", node)
    for c in GPU_METRICS:  # a frame built by hand may lack columns: they are missing, i.e. null
        if c.name not in df:
            missing = pd.array([pd.NA] * len(df), dtype="UInt64") if c.type == pa.uint64() else np.nan
            df[c.name] = missing
    for c in GPU_COUNTERS:
        raw_vals = pd.Series(uint64_readings(df[c.name]), index=df.index)
        tidy = np.full(len(df), np.nan)
        for _, idx in df.groupby("gpu_index", sort=False).indices.items():
            order = idx[np.argsort(df["time_s"].to_numpy(dtype=np.float64)[idx], kind="stable")]
            vals = raw_vals.iloc[order].reset_index(drop=True)
            width = c.counter_bits or infer_counter_width(vals)
            tidy[order] = counter_trace(vals, width).cumulative * c.tidy_scale
        df[c.raw] = raw_vals
        df = df.drop(columns=[c.name])
        df[c.tidy] = tidy
    reasons = df["clock_event_reasons"].astype("UInt64")
    df["clock_event_reasons"] = reasons
    for bit, name in CLOCK_EVENT_REASON_BITS.items():
        flag = (reasons & bit) != 0
        df[f"reason_{name}"] = flag.astype("boolean")
    for c in GPU_METRICS:
        if c.type == pa.float64() and c.name in df:
            df[c.name] = df[c.name].astype("float64")
    first = [c for c in ("node", "sampler_label", "time_s", "monotonic_s", "gpu_index", "read_s") if c in df]
    raw_cols = [c for c in df.columns if c.endswith("_raw")]
    reason_cols = [c for c in df.columns if c.startswith("reason_")]
    middle = [c for c in df.columns if c not in first and c not in raw_cols and c not in reason_cols]
    return df[first + middle + reason_cols + raw_cols]


def tidy_host_samples(raw: pd.DataFrame, rapl_ranges_uj: dict[str, float] | None = None) -> pd.DataFrame:
    """Host table in long format with counter metrics unwrapped per (metric, source).

    Args:
        raw: Output of :func:`load_host_samples`.
        rapl_ranges_uj: ``source -> max_energy_range_uj`` from the metadata (RAPL wraps there).

    Returns:
        Columns of the host stream plus ``sampler_label``, ``value_raw`` (as read) and ``value`` (unwrapped
        for counters, identical otherwise).
    """
    df = raw.copy()
    df["value_raw"] = df["value"]
    ranges = rapl_ranges_uj or {}
    for (metric, source), idx in df.groupby(["metric", "source"], sort=False).indices.items():
        if metric not in _HOST_COUNTERS:
            continue
        v = _as_float(df["value_raw"].iloc[idx])
        if metric == "rapl_energy_uj" and source in ranges:
            df.loc[df.index[idx], "value"] = unwrap_counter(v, modulus=ranges[source] + 1.0)
        else:
            df.loc[df.index[idx], "value"] = unwrap_counter(v, infer_counter_width(v))
    return df


def convert_node(node_dir: str | Path, out_dir: str | Path | None = None, node: str | None = None) -> dict[str, object]:
    """Convert a node's streams into ``telemetry.parquet`` and ``host_telemetry.parquet``.

    Args:
        node_dir: Directory with ``gpu-*.arrows``, ``host-*.arrows`` and ``sampler-*.json``.
        out_dir: Where to write the Parquet files (default ``node_dir``).
        node: Node name for the ``node`` column (default: hostname from the metadata).

    Returns:
        A report: output paths, row counts, and per-stream completeness (a torn tail is reported,
        not an error).
    """
    node_dir = Path(node_dir)
    out = Path(out_dir) if out_dir is not None else node_dir
    out.mkdir(parents=True, exist_ok=True)
    metas = [json.loads(p.read_text()) for p in sorted(node_dir.glob("sampler-*.json"))]
    if node is None and metas:
        node = str(metas[0].get("hostname", "")).split(".")[0] or None
    ranges: dict[str, float] = {}
    for m in metas:
        ranges.update(m.get("host", {}).get("rapl_max_energy_range_uj", {}))
    gpu_raw, gpu_report = _read_streams(node_dir.glob("gpu-*.arrows"), "gpu-", GPU_SCHEMA)
    host_raw, host_report = _read_streams(node_dir.glob("host-*.arrows"), "host-", HOST_SCHEMA)
    gpu = tidy_gpu_samples(gpu_raw, node)
    host = tidy_host_samples(host_raw.sort_values(["metric", "source", "time_s"], kind="stable"), ranges)
    if node is not None:
        host.insert(0, "node", node)
    gpu_path, host_path = out / TELEMETRY_PARQUET, out / HOST_TELEMETRY_PARQUET
    write_parquet_atomic(gpu_path, gpu)
    write_parquet_atomic(host_path, host)
    return {
        "telemetry": str(gpu_path),
        "host_telemetry": str(host_path),
        "gpu_rows": len(gpu),
        "host_rows": len(host),
        "streams": gpu_report + host_report,
        "unavailable": [u for m in metas for u in m.get("unavailable", [])],
    }

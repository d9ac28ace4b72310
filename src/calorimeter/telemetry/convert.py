"""Turn a node's sampler streams into tidy Parquet tables.

``telemetry.parquet``: one row per (time, GPU), typed columns with units in their names,
counters unwrapped. ``host_telemetry.parquet``: host samples in long format.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from calorimeter.records.atomic import write_parquet_atomic
from calorimeter.records.paths import HOST_TELEMETRY_PARQUET, TELEMETRY_PARQUET
from calorimeter.telemetry.counters import infer_counter_width, unwrap_counter
from calorimeter.telemetry.reasons import CLOCK_EVENT_REASON_BITS
from calorimeter.telemetry.schema import GPU_METRICS, GPU_SCHEMA, HOST_SCHEMA
from calorimeter.telemetry.streamio import read_stream

#: Raw counter column -> (tidy column, scale to the tidy unit).
_COUNTER_OUTPUT: dict[str, tuple[str, float]] = {
    "energy_mj": ("energy_mj", 1.0),
    "pcie_tx_bytes": ("pcie_tx_bytes", 1.0),
    "pcie_rx_bytes": ("pcie_rx_bytes", 1.0),
    "nvlink_tx_kib": ("nvlink_tx_bytes", 1024.0),
    "nvlink_rx_kib": ("nvlink_rx_bytes", 1024.0),
}

_HOST_COUNTERS = ("rapl_energy_uj", "ib_tx_bytes", "ib_rx_bytes")


def _session_of(path: Path, prefix: str) -> str:
    return path.name[len(prefix) : -len(".arrows")]


def _read_streams(
    paths: Iterable[Path], prefix: str, schema: pa.Schema
) -> tuple[pd.DataFrame, list[dict[str, object]]]:
    frames: list[pd.DataFrame] = []
    report: list[dict[str, object]] = []
    for path in sorted(paths):
        r = read_stream(path, schema)
        df = r.table.to_pandas()
        df.insert(0, "session", _session_of(path, prefix))
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
        empty.insert(0, "session", pd.Series(dtype="object"))
        return empty, report
    return pd.concat(frames, ignore_index=True), report


def load_gpu_samples(node_dir: str | Path) -> pd.DataFrame:
    """Concatenate every ``gpu-*.arrows`` stream of a node directory (torn tails tolerated).

    Args:
        node_dir: Directory written by the node sampler.

    Returns:
        Raw rows (stream columns plus ``session``), sorted by GPU and time.
    """
    df, _ = _read_streams(Path(node_dir).glob("gpu-*.arrows"), "gpu-", GPU_SCHEMA)
    return df.sort_values(["gpu_index", "time_s"], kind="stable").reset_index(drop=True)


def load_host_samples(node_dir: str | Path) -> pd.DataFrame:
    """Concatenate every ``host-*.arrows`` stream of a node directory (long format)."""
    df, _ = _read_streams(Path(node_dir).glob("host-*.arrows"), "host-", HOST_SCHEMA)
    return df.sort_values(["metric", "source", "time_s"], kind="stable").reset_index(drop=True)


def _as_float(s: pd.Series) -> np.ndarray:
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def tidy_gpu_samples(raw: pd.DataFrame, node: str | None = None) -> pd.DataFrame:
    """Typed, unit-named GPU table with counters unwrapped per GPU.

    Counters: ``energy_mj`` (64-bit), ``pcie_*_bytes`` and ``nvlink_*_bytes`` (width inferred,
    32 or 64 bit) become monotone cumulative float64 series; the raw readings are kept as
    ``<name>_raw``. ``energy_j = energy_mj / 1000``. Each clock-event reason gets a nullable
    boolean ``reason_<name>`` column. Missing values stay null/NaN.

    Args:
        raw: Output of :func:`load_gpu_samples`.
        node: Node name to put in a ``node`` column (omitted if None).

    Returns:
        The tidy frame, sorted by ``gpu_index`` then ``time_s``.
    """
    df = raw.sort_values(["gpu_index", "time_s"], kind="stable").reset_index(drop=True).copy()
    if node is not None:
        df.insert(0, "node", node)
    for c in GPU_METRICS:  # a frame built by hand may lack columns: they are missing, i.e. null
        if c.name not in df:
            missing = pd.array([pd.NA] * len(df), dtype="UInt64") if c.type == pa.uint64() else np.nan
            df[c.name] = missing
    bits = {c.name: c.counter_bits for c in GPU_METRICS if c.counter_bits is not None}
    for raw_name, (out_name, scale) in _COUNTER_OUTPUT.items():
        raw_vals = df[raw_name].astype("UInt64")
        unwrapped = np.full(len(df), np.nan)
        for _, idx in df.groupby("gpu_index", sort=False).indices.items():
            v = _as_float(raw_vals.iloc[idx])
            width = bits.get(raw_name) or infer_counter_width(v)
            unwrapped[idx] = unwrap_counter(v, width) * scale
        df[f"{raw_name}_raw"] = raw_vals
        if raw_name != out_name:
            df = df.drop(columns=[raw_name])
        df[out_name] = unwrapped
    df["energy_j"] = df["energy_mj"] / 1000.0
    reasons = df["clock_event_reasons"].astype("UInt64")
    df["clock_event_reasons"] = reasons
    for bit, name in CLOCK_EVENT_REASON_BITS.items():
        flag = (reasons & bit) != 0
        df[f"reason_{name}"] = flag.astype("boolean")
    for c in GPU_METRICS:
        if c.type == pa.float64() and c.name in df:
            df[c.name] = df[c.name].astype("float64")
    first = [c for c in ("node", "session", "time_s", "monotonic_s", "gpu_index", "read_s") if c in df]
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
        Columns of the host stream plus ``session``, ``value_raw`` (as read) and ``value`` (unwrapped
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

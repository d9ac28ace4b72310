"""Collect an attempt's telemetry into the cell's record files: telemetry.parquet, telemetry.json, kernels.parquet."""

from __future__ import annotations

import json

import pandas as pd

from calorimeter.records.atomic import write_json_atomic, write_parquet_atomic
from calorimeter.records.paths import (
    HOST_TELEMETRY_PARQUET,
    KERNELS_PARQUET,
    TELEMETRY_JSON,
    TELEMETRY_PARQUET,
    CellPaths,
    RunPaths,
    results_relative,
)
from calorimeter.records.rank import RankReport
from calorimeter.telemetry.convert import convert_node
from calorimeter.telemetry.kernels import breakdown_traces


def _hostnames(rank_results: list[RankReport]) -> dict[int, str]:
    return {int(r.node or 0): str(r.hostname or "") for r in rank_results if r.local_rank == 0}


def collect_telemetry(run: RunPaths, dest: CellPaths, rank_results: list[RankReport]) -> list[str]:
    """Convert every node's sampler streams and the traced ranks' profiles into the cell's tables.

    GPU samples of all nodes are concatenated with ``node`` (index) and ``hostname`` columns; the samplers'
    metadata (which metric was unavailable and why) goes to ``telemetry.json``; kernel breakdowns of the traced
    ranks, in numeric rank order with their pipeline stage, to ``kernels.parquet``.

    Args:
        run: the attempt's last run (node sampler streams and traces).
        dest: the cell folder.
        rank_results: the ranks' results of that run.

    Returns:
        Names of the files written into ``dest``.
    """
    written: list[str] = []
    hosts = _hostnames(rank_results)
    gpu_frames, host_frames, meta = [], [], {}
    for node_dir in run.nodes():
        node = int(node_dir.name.removeprefix("node"))
        failed = run.sampler_failed(node)
        if failed.exists():
            meta[f"node{node}"] = {"sampler_failed": failed.read_text().strip()}
            continue
        report = convert_node(node_dir, node=hosts.get(node))
        for name, frames in ((TELEMETRY_PARQUET, gpu_frames), (HOST_TELEMETRY_PARQUET, host_frames)):
            df = pd.read_parquet(node_dir / name)
            df = df.rename(columns={"node": "hostname"}) if "node" in df else df.assign(hostname=hosts.get(node))
            df.insert(0, "node", node)
            frames.append(df)
        metas = [json.loads(p.read_text()) for p in sorted(node_dir.glob("sampler-*.json"))]
        meta[f"node{node}"] = {"sampler": metas[0] if metas else None, "conversion": report}
    for name, frames in ((TELEMETRY_PARQUET, gpu_frames), (HOST_TELEMETRY_PARQUET, host_frames)):
        frames = [f for f in frames if len(f)]
        if frames:
            write_parquet_atomic(dest.root / name, pd.concat(frames, ignore_index=True))
            written.append(name)
    if meta:
        write_json_atomic(dest.telemetry_json, meta)
        written.append(TELEMETRY_JSON)
    traces = sorted(run.traces.glob("rank-*.json*"),
                    key=lambda p: int(p.name.split("-")[1].split(".")[0]))
    if traces:
        kern = breakdown_traces(traces)
        if "file" in kern:  # the trace's path relative to the results folder: no machine's folders in a record
            kern["file"] = [results_relative(f, dest.root) for f in kern["file"]]
        stage = {r.rank: r.stage for r in rank_results}
        if "rank" in kern:
            kern.insert(1, "stage", [stage.get(int(r)) for r in kern["rank"]])
        write_parquet_atomic(dest.kernels, kern)
        written.append(KERNELS_PARQUET)
    return written

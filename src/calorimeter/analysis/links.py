"""Known link traffic of a cell, to check the NVML link byte counters against: the pipeline's point-to-point
transfers, whose size follows from the cell's parameters alone.

A pipeline stage receives, per micro-batch, the previous stage's activations (forward) and the next stage's
activation gradients (backward): one ``[micro_batch, seq_len / (tp if sequence parallel), hidden]`` tensor each, in
the training precision. Over the measured steps that is::

    micro-batches per step x steps x micro_batch x seq_len' x hidden x bytes x (number of neighbour stages)

On one node these transfers go over NVLink. With tp = 1, dp = 1 and a dense model they are all the NVLink traffic
there is (besides a few-byte gradient-norm reduction), so the NVLink receive counter of each GPU must match them.
The shipped 4- and 8-GPU records do, to 0.01% (``bench/link_counters_check.py``); the PCIe receive counter of the
same GPUs reads 12-58 GB on middle stages and ~0.1-0.3 GB on the end stages, which no transfer of the training
explains (see docs/findings.md, "PCIe byte counters").
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from calorimeter.plan.models import get_model

BYTES_PER_ELEMENT = {"bf16": 2, "fp16": 2, "fp32": 4}


def pipeline_rx_bytes(cell: dict[str, Any] | pd.Series, stage: int, steps: int | None = None) -> float:
    """Bytes a pipeline stage receives from its neighbour stages over ``steps`` steps (the cell's measured steps by
    default): activations from the previous stage and gradients from the next, one tensor per micro-batch each."""
    pp = int(cell["pp"])
    if pp <= 1:
        return 0.0
    tp = int(cell["tp"])
    seq = int(cell["seq_len"]) // (tp if bool(cell.get("sequence_parallel")) and tp > 1 else 1)
    mb, dp = int(cell["micro_batch"]), max(int(cell["dp"]), 1)
    n_mb = int(cell["global_batch"]) // (mb * dp)
    hidden = get_model(str(cell["model"])).hidden_size
    per_tensor = mb * seq * hidden * BYTES_PER_ELEMENT.get(str(cell.get("precision")), 2)
    neighbours = int(stage > 0) + int(stage < pp - 1)
    n_steps = int(steps if steps is not None else cell["measured_steps"])
    return float(n_mb * n_steps * per_tensor * neighbours)


def pipeline_link_check(runs: pd.DataFrame, gpus: pd.DataFrame) -> pd.DataFrame:
    """Per GPU of every measured pipeline cell whose only NVLink traffic is the pipeline's (dense, tp = 1, dp = 1):
    expected and measured NVLink receive bytes, their ratio, and the PCIe receive bytes of the same GPU."""
    cols = ["cell_id", "rank", "stage", "expected_rx_bytes", "nvlink_rx_bytes", "nvlink_ratio", "pcie_rx_bytes"]
    if runs.empty or gpus.empty:
        return pd.DataFrame(columns=cols)
    sel = runs[(runs["status"] == "ok") & (runs["pp"] > 1) & (runs["tp"] == 1) & (runs["dp"] == 1)
               & (runs["ep"] == 1)]
    rows = []
    for _, c in sel.iterrows():
        for _, g in gpus[gpus["cell_id"] == c["cell_id"]].sort_values("rank").iterrows():
            exp = pipeline_rx_bytes(c, int(g["stage"]))
            rows.append({"cell_id": c["cell_id"], "rank": int(g["rank"]), "stage": int(g["stage"]),
                         "expected_rx_bytes": exp, "nvlink_rx_bytes": float(g["nvlink_rx_bytes"]),
                         "nvlink_ratio": float(g["nvlink_rx_bytes"]) / exp if exp else float("nan"),
                         "pcie_rx_bytes": float(g["pcie_rx_bytes"])})
    return pd.DataFrame(rows, columns=cols)
